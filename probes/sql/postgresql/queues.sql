-- The queues probe: what every queue's table shares, whatever its source. Each source's own
-- statements are in sources/<source>.sql.

-- name: table_stats
-- Cumulative insert/delete counters (the rates come from their differences between samples),
-- bloat and vacuum, for every queue table in one statement.
SELECT relid, n_tup_ins, n_tup_del, n_live_tup, n_dead_tup, last_vacuum, last_autovacuum
FROM pg_stat_user_tables
WHERE relid = ANY(%(relids)s::oid[]);

-- name: consumers
-- The sessions working on the queue tables now (`relids`): every client session that holds or
-- awaits a lock on a queue table, on one of its indexes or on one of its partitions (pg-boss
-- keeps a queue in a partition of its own), with its state and how long it has been in it
-- (its statement running, or idle). queuetop's own probe sessions are left out. Bounded by the
-- locks held on those relations (pg_locks, the lock manager's shared memory), never by their
-- rows; at most 5,000 rows.
WITH rels AS (
    SELECT t.relid, t.relid AS rel FROM unnest(%(relids)s::oid[]) AS t(relid)
    UNION ALL
    SELECT i.indrelid, i.indexrelid FROM pg_index i WHERE i.indrelid = ANY(%(relids)s::oid[])
    UNION ALL
    SELECT h.inhparent, h.inhrelid FROM pg_inherits h WHERE h.inhparent = ANY(%(relids)s::oid[])
), held AS (
    SELECT r.relid, l.pid, bool_or(NOT l.granted) AS waiting
    FROM pg_locks l JOIN rels r ON r.rel = l.relation
    WHERE l.locktype = 'relation'
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND l.pid <> pg_backend_pid()
    GROUP BY r.relid, l.pid
)
SELECT h.relid, h.pid, h.waiting, a.state, a.application_name,
       extract(epoch FROM now() - CASE WHEN a.state IN ('idle', 'idle in transaction', 'idle in transaction (aborted)')
                                       THEN a.state_change ELSE a.query_start END)::float8 AS for_s
FROM held h
JOIN pg_stat_activity a ON a.pid = h.pid
WHERE a.backend_type = 'client backend'
  AND coalesce(a.application_name, '') NOT LIKE 'queuetop-probe%%'
ORDER BY h.relid, h.pid
LIMIT 5000;
