-- Blocked sessions: every session waiting on a heavyweight lock (relation, tuple, transactionid,
-- advisory, ...) with the pids that block it (pg_blocking_pids: holders and waiters queued
-- ahead; 0 stands for a prepared transaction) and the lock it waits for. Parallel workers carry
-- their leader's pid in `leader_pid`. Driven by pg_locks, which every role may read: without
-- pg_read_all_stats the tree is still complete, only other roles' queries and states are NULL.
--
-- pg_locks is read once (a CTE), not once per waiter, and the whole picture comes in one statement,
-- one round trip (issue 30: three round trips cost 1.2x pg_activity's one blocking query). A relation OID is turned into a name only
-- in the database it belongs to (this one, or 0 for shared catalogs): resolved here, another
-- database's OID would name whatever table has that OID here.

-- name: picture
-- Everything the locks probe shows, in one statement: a row per waiting session, and on the first
-- row (a row with no pid when nobody waits) four JSON lists: the prepared transactions, the
-- sessions named as blockers that do not wait themselves, the locks prepared transactions hold
-- (only when a waiter is blocked by one), and the advisory locks. {wait_start} and {leader_pid}
-- differ by major (dbcore/pgversions.py).
WITH locks AS MATERIALIZED (
    SELECT * FROM pg_locks
), here AS (
    SELECT oid FROM pg_database WHERE datname = current_database()
), prepared AS (
    -- Transactions prepared for two-phase commit: they keep their locks with no session behind
    -- them until COMMIT PREPARED or ROLLBACK PREPARED.
    SELECT json_agg(json_build_object(
               'gid', p.gid, 'owner', p.owner, 'database', p.database, 'xid', p.transaction::text,
               'age_s', extract(epoch FROM now() - p.prepared)::float8) ORDER BY p.prepared, p.gid) AS list
    FROM pg_prepared_xacts p
), activity AS MATERIALIZED (
    -- The sessions, read once (pg_stat_activity's function, without the view's joins).
    SELECT a.pid, {leader_pid} AS leader_pid, a.datid, a.state, a.query, a.application_name, a.xact_start, a.state_change
    FROM pg_stat_get_activity(NULL) a
), waiting AS MATERIALIZED (
    -- pg_blocking_pids once per waiter: every later reference reads this.
    SELECT l.pid, a.leader_pid, pg_blocking_pids(l.pid) AS blocked_by,
           l.locktype AS lock_type, l.mode,
           d.datname AS database, l.database AS database_oid,
           l.relation AS relation_oid,
           CASE WHEN l.relation IS NOT NULL AND l.database IN (0, (SELECT oid FROM here))
                THEN l.relation::regclass::text END AS relation,
           l.page, l.tuple, l.virtualxid, l.transactionid::text AS transactionid,
           l.classid, l.objid, l.objsubid,
           -- A row wait is a wait for the other transaction's id, which names no relation. The row
           -- is the tuple lock the waiter was granted before it began to wait: [relation, page,
           -- tuple, its name here]...
           CASE WHEN l.locktype = 'transactionid' THEN (
               SELECT json_build_array(m[1], m[2], m[3], CASE WHEN m[4] = (SELECT oid FROM here) THEN m[1]::oid::regclass::text END)
               FROM (SELECT min(ARRAY[t.relation::bigint, t.page, t.tuple, t.database::bigint]) AS m
                     FROM locks t
                     WHERE t.pid = l.pid AND t.locktype = 'tuple' AND t.granted) AS first_tuple
           ) END AS row_lock,
           -- ... or else the tables of this database it holds a row-level lock on (an INSERT
           -- waiting on a unique key takes no tuple lock): the table when there is one. Guarded
           -- by CASE, not joined LATERAL: a lateral subquery per waiter, with its sorts, was a
           -- third of the statement's cost in a pile-up (measured).
           CASE WHEN l.locktype = 'transactionid' THEN (
               SELECT array_agg(c.oid::regclass::text)
               FROM locks h
               JOIN pg_class c ON c.oid = h.relation AND c.relkind IN ('r', 'p')
               WHERE h.pid = l.pid AND h.granted AND h.locktype = 'relation'
                 AND h.mode IN ('RowExclusiveLock', 'RowShareLock') AND h.database = (SELECT oid FROM here)
           ) END AS held_tables,
           extract(epoch FROM now() - {wait_start})::float8 AS wait_s,
           a.state, a.query, a.application_name
    FROM locks l
    LEFT JOIN activity a ON a.pid = l.pid
    LEFT JOIN pg_database d ON d.oid = coalesce(nullif(l.database, 0), a.datid)
    WHERE NOT l.granted AND l.pid <> pg_backend_pid()
), blocking AS (
    -- The sessions named as blockers that do not wait themselves (the roots, and the holders a
    -- waiter waits behind): their state, transaction age and query.
    SELECT json_agg(json_build_object(
               'pid', a.pid, 'leader_pid', a.leader_pid, 'state', a.state,
               'xact_age_s', extract(epoch FROM now() - a.xact_start)::float8,
               'query', a.query, 'application_name', a.application_name) ORDER BY a.pid) AS list
    FROM activity a
    WHERE a.pid IN (SELECT b FROM waiting w, unnest(w.blocked_by) AS b WHERE b <> 0)
      AND a.pid NOT IN (SELECT w.pid FROM waiting w WHERE cardinality(w.blocked_by) > 0)
), held_by_prepared AS (
    -- The locks prepared transactions hold, when a waiter is blocked by one (pid 0). They have
    -- no pid, and one virtual transaction per prepared transaction, which also holds the lock on
    -- its xid. Named as `waiting` names a lock's target, so that the two compare column for column
    -- (an oid is a string in JSON: as bigint it is the number the row form gives).
    SELECT json_agg(json_build_object(
               'virtualtransaction', l.virtualtransaction, 'lock_type', l.locktype, 'mode', l.mode,
               'database_oid', l.database::bigint, 'relation_oid', l.relation::bigint, 'page', l.page, 'tuple', l.tuple,
               'virtualxid', l.virtualxid, 'transactionid', l.transactionid::text, 'classid', l.classid::bigint,
               'objid', l.objid::bigint, 'objsubid', l.objsubid)) AS list
    FROM locks l
    WHERE l.pid IS NULL AND l.granted AND EXISTS (SELECT FROM waiting w WHERE 0 = ANY(w.blocked_by))
), advisory AS (
    -- Every advisory lock held or waited for, in every database, but the probe's own: the
    -- application locks of PostgreSQL (SQL Server's are sp_getapplock's). The engine serialises
    -- schema changes and compactions with them, and a held one is worth seeing before anyone waits.
    -- resource: the key as the application passed it, signed: pg_advisory_lock(bigint) is stored as
    -- classid (high 32 bits) and objid (low), objsubid 1; the two-int4 form as classid, objid,
    -- objsubid 2 (both stored unsigned). pg_locks does not say whether a lock is the session's or
    -- the transaction's (owner_type), nor a principal. Bounded: 200 rows, the waits first.
    SELECT json_agg(row_to_json(x) ORDER BY x.granted, x.resource, x.pid) AS list
    FROM (
        SELECT l.pid,
               CASE l.objsubid
                   WHEN 1 THEN ((l.classid::text::bigint << 32) | l.objid::text::bigint)::text
                   ELSE '(' || (l.classid::text::bigint - CASE WHEN l.classid::text::bigint >= 2147483648 THEN 4294967296 ELSE 0 END)
                        || ', ' || (l.objid::text::bigint - CASE WHEN l.objid::text::bigint >= 2147483648 THEN 4294967296 ELSE 0 END) || ')'
               END AS resource,
               NULL::text AS principal,
               d.datname AS database,
               l.mode,
               l.granted,
               NULL::text AS owner_type,
               CASE WHEN NOT l.granted THEN extract(epoch FROM now() - {wait_start})::float8 END AS wait_s,
               a.application_name
        FROM locks l
        LEFT JOIN activity a ON a.pid = l.pid
        LEFT JOIN pg_database d ON d.oid = l.database
        WHERE l.locktype = 'advisory' AND l.pid <> pg_backend_pid()
        ORDER BY l.granted, resource, l.pid
        LIMIT 200
    ) x
)
SELECT w.*,
       CASE WHEN w.first IS NOT FALSE THEN prepared.list END AS prepared,
       CASE WHEN w.first IS NOT FALSE THEN blocking.list END AS sessions,
       CASE WHEN w.first IS NOT FALSE THEN held_by_prepared.list END AS prepared_locks,
       CASE WHEN w.first IS NOT FALSE THEN advisory.list END AS applocks
FROM prepared, blocking, held_by_prepared, advisory
LEFT JOIN (SELECT waiting.*, row_number() OVER () = 1 AS first FROM waiting) w ON true;
