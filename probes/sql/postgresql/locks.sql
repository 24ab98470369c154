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
           -- tuple, its name here, the tuple lock's mode (the row lock's strength), and, when
           -- anyone holds ROW SHARE on the table, [pid, mode] of every ROW SHARE and ROW EXCLUSIVE
           -- lock on it]. From these the probe tells whether the row may be shared by several
           -- lockers (a multixact: one of them at least a SELECT ... FOR, which holds ROW SHARE),
           -- and then reads them (postgres.py): pg_blocking_pids names one of them. Nothing more
           -- in a pile-up of UPDATEs, where nobody holds ROW SHARE (a fuller test here cost 0.05 ms
           -- of server time there, measured).
           CASE WHEN l.locktype = 'transactionid' THEN (
               SELECT json_build_array(t.relation::bigint, t.page, t.tuple,
                          CASE WHEN t.database = (SELECT oid FROM here) THEN t.relation::regclass::text END, t.mode,
                          CASE WHEN t.relation IN (SELECT r.relation FROM locks r WHERE r.locktype = 'relation'
                                                   AND r.mode = 'RowShareLock' AND r.granted) THEN (
                              SELECT json_agg(json_build_array(r.pid, r.mode)) FROM locks r
                              WHERE r.locktype = 'relation' AND r.relation = t.relation AND r.database = t.database
                                AND r.mode IN ('RowShareLock', 'RowExclusiveLock') AND r.granted AND r.pid IS NOT NULL) END)
               FROM locks t
               WHERE t.pid = l.pid AND t.locktype = 'tuple' AND t.granted
               ORDER BY t.relation, t.page, t.tuple
               LIMIT 1
           ) END AS row_lock,
           -- Who holds what it waits for (not only queues ahead of it): [pid, mode] of each granted
           -- lock on the same object. A wait for a transaction is for its one owner, and a tuple
           -- lock's holder only queues first: the probe names a row's lockers (locks.py).
           CASE WHEN l.locktype NOT IN ('transactionid', 'tuple', 'virtualxid') THEN coalesce((
               SELECT json_agg(json_build_array(h.pid, h.mode))
               FROM locks h
               WHERE h.granted AND h.pid <> l.pid AND h.locktype = l.locktype
                 AND h.database IS NOT DISTINCT FROM l.database AND h.relation IS NOT DISTINCT FROM l.relation
                 AND h.page IS NOT DISTINCT FROM l.page AND h.tuple IS NOT DISTINCT FROM l.tuple
                 AND h.classid IS NOT DISTINCT FROM l.classid AND h.objid IS NOT DISTINCT FROM l.objid
                 AND h.objsubid IS NOT DISTINCT FROM l.objsubid), '[]') END AS holders,
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
           extract(epoch FROM now() - a.xact_start)::float8 AS xact_age_s,  -- a wait cycle's members are blockers too
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

-- name: relation_names
-- Relations of another database, named there (probes/elsewhere.py runs it on a connection to that
-- database): an OID names a relation only in its own database.
SELECT c.oid::bigint AS oid, c.oid::regclass::text AS name FROM pg_class c WHERE c.oid = ANY(%(oids)s::oid[]);

-- name: table_names
-- A table's schema and name, for row_lockers' {table} (the driver quotes them).
SELECT n.nspname AS schema, c.relname AS table FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = %(oid)s::oid;

-- name: row_xmax
-- The xmax of the row a waiter waits for, by its ctid (a TID scan of one row): the transaction it
-- waits for, or a multixact holding it as well (row_lockers). {table}: quoted by the driver.
SELECT xmax::text AS xmax FROM ONLY {table} WHERE ctid = %(ctid)s::tid;

-- name: row_lockers
-- Every locker of a row several transactions lock (a multixact: the server waits for them one at a
-- time, and pg_blocking_pids names that one), with the session of each (its transaction id's
-- lock). A plain xmax may read as some multixact's number: the caller keeps the members only when
-- the transaction waited for is among them.
SELECT m.xid::text AS member, m.mode AS member_mode, a.pid, a.state,
       extract(epoch FROM now() - a.xact_start)::float8 AS xact_age_s, a.query, a.application_name,
       {leader_pid} AS leader_pid
FROM pg_get_multixact_members(%(xmax)s::xid) m
LEFT JOIN pg_locks h ON h.locktype = 'transactionid' AND h.transactionid = m.xid AND h.mode = 'ExclusiveLock' AND h.granted
LEFT JOIN pg_stat_activity a ON a.pid = h.pid;
