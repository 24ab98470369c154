-- The queues probe: what every queue's table shares, whatever its source. Each source's own
-- statements are in sources/<source>.sql.

-- name: table_stats
-- Cumulative insert/delete counters (the rates come from their differences between samples),
-- bloat and vacuum, for every queue table in one statement.
SELECT relid, n_tup_ins, n_tup_del, n_live_tup, n_dead_tup, last_vacuum, last_autovacuum
FROM pg_stat_user_tables
WHERE relid = ANY(%(relids)s::oid[]);

-- name: relids
-- The OIDs of queue tables named by their quoted names (a queue whose figures failed before its
-- table was resolved): to_regclass takes no lock, so a table locked ACCESS EXCLUSIVE is found.
SELECT t.name, to_regclass(t.name)::oid AS relid FROM unnest(%(tables)s::text[]) AS t(name);

-- name: consumers
-- The sessions working on the queue tables now (`relids`): every client session that holds or
-- awaits a lock on a queue table, on one of its indexes or on one of its partitions (pg-boss
-- keeps a queue in a partition of its own), with its state and how long it has been in it
-- (its statement running, or idle). queuetop's own probe sessions are left out.
-- `holds`: the strongest lock it was granted there that stops the queue's consumers (one that
-- conflicts with the ROW EXCLUSIVE an UPDATE or DELETE takes: SHARE, SHARE ROW EXCLUSIVE,
-- EXCLUSIVE, ACCESS EXCLUSIVE), on `locked`, with how long its transaction has been open: the
-- verdict's `blocked` comes from it even when the table itself cannot be read (the probe's own
-- read fails on its lock_timeout). A prepared transaction holding such a lock is a row too (pid
-- 0, its gid; its locks share a virtual transaction with the lock on its own transaction id).
-- Bounded by the locks held on those relations (pg_locks, the lock manager's shared memory),
-- never by their rows; at most 5,000 rows, the lockers first. Ages at the statement's start
-- (statement_timestamp()): the probe's transaction, now(), began before the sources' reads.
WITH rels AS (
    SELECT t.relid, t.relid AS rel FROM unnest(%(relids)s::oid[]) AS t(relid)
    UNION ALL
    SELECT i.indrelid, i.indexrelid FROM pg_index i WHERE i.indrelid = ANY(%(relids)s::oid[])
    UNION ALL
    SELECT h.inhparent, h.inhrelid FROM pg_inherits h WHERE h.inhparent = ANY(%(relids)s::oid[])
), locks AS MATERIALIZED (
    SELECT l.locktype, l.relation, l.pid, l.mode, l.granted, l.virtualtransaction, l.transactionid
    FROM pg_locks l
    WHERE (l.locktype = 'relation' AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))
       OR (l.locktype = 'transactionid' AND l.pid IS NULL)
), held AS (
    SELECT r.relid, l.pid, CASE WHEN l.pid IS NULL THEN l.virtualtransaction END AS prepared_vxid,
           bool_or(NOT l.granted) AS waiting,
           (array_agg(l.mode ORDER BY array_position(ARRAY['AccessExclusiveLock', 'ExclusiveLock', 'ShareRowExclusiveLock',
                                                            'ShareLock']::text[], l.mode))
                FILTER (WHERE l.granted AND l.mode IN ('ShareLock', 'ShareRowExclusiveLock', 'ExclusiveLock',
                                                       'AccessExclusiveLock')))[1] AS holds,
           (array_agg(l.relation ORDER BY array_position(ARRAY['AccessExclusiveLock', 'ExclusiveLock', 'ShareRowExclusiveLock',
                                                                'ShareLock']::text[], l.mode))
                FILTER (WHERE l.granted AND l.mode IN ('ShareLock', 'ShareRowExclusiveLock', 'ExclusiveLock',
                                                       'AccessExclusiveLock')))[1] AS locked_oid
    FROM locks l JOIN rels r ON r.rel = l.relation
    WHERE l.locktype = 'relation' AND (l.pid IS NULL OR l.pid <> pg_backend_pid())
    GROUP BY r.relid, l.pid, CASE WHEN l.pid IS NULL THEN l.virtualtransaction END
), found AS (
    SELECT h.relid, h.pid, h.waiting, a.state, a.application_name,
           extract(epoch FROM statement_timestamp() - CASE WHEN a.state IN ('idle', 'idle in transaction', 'idle in transaction (aborted)')
                                                         THEN a.state_change ELSE a.query_start END)::float8 AS for_s,
           h.holds, h.locked_oid, extract(epoch FROM statement_timestamp() - a.xact_start)::float8 AS xact_age_s, NULL::text AS gid
    FROM held h
    JOIN pg_stat_activity a ON a.pid = h.pid
    WHERE a.backend_type = 'client backend'
      AND coalesce(a.application_name, '') NOT LIKE 'queuetop-probe%%'
    UNION ALL
    SELECT h.relid, 0, false, NULL, NULL, NULL, h.holds, h.locked_oid, extract(epoch FROM statement_timestamp() - p.prepared)::float8, p.gid
    FROM held h
    JOIN locks t ON t.locktype = 'transactionid' AND t.pid IS NULL AND t.virtualtransaction = h.prepared_vxid
    JOIN pg_prepared_xact() p ON p.transaction = t.transactionid
    WHERE h.pid IS NULL AND h.holds IS NOT NULL
)
SELECT f.relid, f.pid, f.waiting, f.state, f.application_name, f.for_s, f.holds,
       f.locked_oid::regclass::text AS locked, f.xact_age_s, f.gid
FROM found f
ORDER BY f.holds IS NULL, f.relid, f.pid
LIMIT 5000;
