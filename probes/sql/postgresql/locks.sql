-- Blocked sessions: every session waiting on a heavyweight lock (relation, tuple, transactionid,
-- advisory, ...) with the pids that block it (pg_blocking_pids: holders and waiters queued
-- ahead; 0 stands for a prepared transaction) and the lock it waits for. Parallel workers carry
-- their leader's pid in `leader_pid`. Driven by pg_locks, which every role may read: without
-- pg_read_all_stats the tree is still complete, only other roles' queries and states are NULL.
--
-- pg_locks is read once (a CTE), not once per waiter. A relation OID is turned into a name only
-- in the database it belongs to (this one, or 0 for shared catalogs): resolved here, another
-- database's OID would name whatever table has that OID here.

-- name: waiting
-- {wait_start} and {leader_pid} differ by major (dbcore/pgversions.py). One statement, one round
-- trip: the prepared transactions come as a JSON list on the first row (a row with no pid when
-- nobody waits).
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
), waiting AS (
    SELECT l.pid, {leader_pid} AS leader_pid, pg_blocking_pids(l.pid) AS blocked_by,
           l.locktype AS lock_type, l.mode,
           coalesce(d.datname, a.datname) AS database, l.database AS database_oid,
           l.relation AS relation_oid,
           CASE WHEN l.relation IS NOT NULL AND l.database IN (0, (SELECT oid FROM here))
                THEN l.relation::regclass::text END AS relation,
           l.page, l.tuple, l.virtualxid, l.transactionid::text AS transactionid,
           l.classid, l.objid, l.objsubid,
           row_lock.relation AS row_relation_oid, row_lock.name AS row_relation, row_lock.page AS row_page,
           row_lock.tuple AS row_tuple,
           held.tables AS held_tables,
           extract(epoch FROM now() - {wait_start})::float8 AS wait_s,
           a.state, a.query, a.application_name
    FROM locks l
    LEFT JOIN pg_stat_activity a ON a.pid = l.pid
    LEFT JOIN pg_database d ON d.oid = l.database
    -- A row wait is a wait for the other transaction's id, which names no relation. The row is
    -- the tuple lock the waiter was granted before it began to wait (page and tuple: its ctid)...
    LEFT JOIN LATERAL (
        SELECT t.relation, t.page, t.tuple,
               CASE WHEN t.database = (SELECT oid FROM here) THEN t.relation::regclass::text END AS name
        FROM locks t
        WHERE l.locktype = 'transactionid'  -- first: other waits skip the scan (a one-time filter)
          AND t.pid = l.pid AND t.locktype = 'tuple' AND t.granted
        ORDER BY t.relation, t.page, t.tuple
        LIMIT 1
    ) row_lock ON true
    -- ... or else the tables it holds a row-level lock on (an INSERT waiting on a unique key
    -- takes no tuple lock): the table when there is one.
    LEFT JOIN LATERAL (
        SELECT array_agg(DISTINCT c.oid::regclass::text ORDER BY c.oid::regclass::text) AS tables
        FROM locks h
        JOIN pg_class c ON c.oid = h.relation AND c.relkind IN ('r', 'p')
        WHERE l.locktype = 'transactionid' AND row_lock.relation IS NULL  -- only when no tuple lock named the row
          AND h.pid = l.pid AND h.granted AND h.locktype = 'relation'
          AND h.mode IN ('RowExclusiveLock', 'RowShareLock') AND h.database = (SELECT oid FROM here)
    ) held ON true
    WHERE NOT l.granted AND l.pid <> pg_backend_pid()
)
SELECT w.*, CASE WHEN w.pid IS NULL OR row_number() OVER () = 1 THEN prepared.list END AS prepared
FROM prepared
LEFT JOIN waiting w ON true;

-- name: sessions
SELECT a.pid, {leader_pid} AS leader_pid, a.state,
       extract(epoch FROM now() - a.xact_start)::float8 AS xact_age_s,
       a.query, a.application_name
FROM pg_stat_activity a
WHERE a.pid = ANY(%(pids)s::integer[]);

-- name: prepared_locks
-- The locks prepared transactions hold (asked only when a waiter is blocked by one). They have no
-- pid, and one virtual transaction per prepared transaction, which also holds the lock on its xid.
-- Named as the waiting statement names a lock's target, so that the two compare column for column.
SELECT l.virtualtransaction, l.locktype AS lock_type, l.mode, l.database AS database_oid, l.relation AS relation_oid, l.page, l.tuple,
       l.virtualxid, l.transactionid::text AS transactionid, l.classid, l.objid, l.objsubid
FROM pg_locks l
WHERE l.pid IS NULL AND l.granted;

-- name: applocks
-- Every advisory lock held or waited for, in every database, but the probe's own: the
-- application locks of PostgreSQL (SQL Server's are sp_getapplock's). The engine serialises
-- schema changes and compactions with them, and a held one is worth seeing before anyone waits.
-- resource: the key as the application passed it, signed: pg_advisory_lock(bigint) is stored as
-- classid (high 32 bits) and objid (low), objsubid 1; the two-int4 form as classid, objid,
-- objsubid 2 (both stored unsigned). pg_locks does not say whether a lock is the session's or
-- the transaction's (owner_type), nor a principal. Bounded: 200 rows, the waits first.
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
FROM pg_locks l
LEFT JOIN pg_stat_activity a ON a.pid = l.pid
LEFT JOIN pg_database d ON d.oid = l.database
WHERE l.locktype = 'advisory' AND l.pid <> pg_backend_pid()
ORDER BY l.granted, resource, l.pid
LIMIT 200;
