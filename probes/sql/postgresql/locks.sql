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
-- Everything the locks probe shows, in one statement, as rows of five kinds (`kind`), each kind
-- filling the columns it needs and leaving the others NULL:
--   w  a waiting session: the lock it waits for, what pg_blocking_pids says blocks it, its session;
--      or a transaction waiting for a safe snapshot (lock type `safe snapshot`: no lock, its
--      blockers from pg_safe_snapshot_blocking_pids);
--   s  a session named as a blocker that does not wait itself (a root, or a holder a waiter waits
--      behind): its state, transaction age and query;
--   l  a granted lock that says who holds what a waiter wants (probes/postgres.py reads them):
--      - the tuple and table locks of a session waiting for a transaction id: a row wait names no
--        relation, and the row is the tuple lock the waiter was granted before it began to wait
--        (its mode is the row lock's strength); an INSERT waiting on a unique key takes no tuple
--        lock, and its table is the one it holds a row-level lock on;
--      - every ROW SHARE and ROW EXCLUSIVE lock on such a row's table, when anyone holds ROW SHARE
--        there: then the row may be shared by several lockers (a multixact: one of them at least a
--        SELECT ... FOR), and pg_blocking_pids names one of them (postgres.py reads the others);
--      - the locks on what another waiter waits for (a table, an object, an advisory key): its holders;
--      - a prepared transaction's locks, when someone waits on one (pid 0 among its blockers);
--   a  an advisory lock, held or waited for, in any database, but the probe's own: PostgreSQL's
--      application locks (SQL Server's are sp_getapplock's). The engine serialises schema changes
--      and compactions with them, and a held one is worth seeing before anyone waits. 200 at most,
--      the waits first. pg_locks does not say whether one is the session's or the transaction's;
--   p  a transaction prepared for two-phase commit: it keeps its locks with no session behind it
--      until COMMIT PREPARED or ROLLBACK PREPARED.
-- Rows rather than JSON lists, and no subquery per waiter: in a pile-up of 16 UPDATEs, timed
-- between runs of pg_activity's blocking query (1.58-1.83 ms), the JSON statement took 1.26-1.40
-- ms and this one 0.96-1.11 (issue 30; docs/performance.md).
-- A relation OID is named only in the database it belongs to. {wait_start} and {leader_pid}
-- differ by major (dbcore/pgversions.py).
WITH locks AS MATERIALIZED (
    -- Every lock, once. A session's own transaction id and virtual transaction id, granted to it by
    -- itself, say who holds what a row's first waiter (a transaction id) or CREATE INDEX
    -- CONCURRENTLY (a virtual one) waits for: `blockers` reads them; the rows below leave them out.
    SELECT * FROM pg_locks l
), here AS (
    SELECT oid FROM pg_database WHERE datname = current_database()
), activity AS MATERIALIZED (
    -- The sessions, read once (pg_stat_activity's function, without the view's joins).
    SELECT a.pid, {leader_pid} AS leader_pid, a.datid, a.state, a.query, a.application_name, a.xact_start, a.state_change,
           a.wait_event
    FROM pg_stat_get_activity(NULL) a
), own AS (
    -- queuetop's own probe sessions (this one, another dashboard's, an exporter's): never listed as
    -- waiting (a probe's lock_timeout ends its waits within 100 ms).
    SELECT pg_backend_pid() AS pid
    UNION
    SELECT a.pid FROM activity a WHERE a.application_name LIKE 'queuetop-probe%%'
), pile AS (
    -- More than %(pile_up)s waiters: a pile-up. pg_blocking_pids copies every holder and waiter of
    -- the lock it is asked about, and names every one queued ahead: asked of each of 2,000 waiters
    -- on one row it took the server 0.9 s (four million entries), past the probe's statement
    -- timeout. Then each waiter's blockers are the sessions holding, in a conflicting mode, what it
    -- waits for (one hashed join), and pg_blocking_pids is asked only of a waiter that has none (it
    -- waits behind queued requests alone: readers behind a queued ACCESS EXCLUSIVE).
    SELECT count(*) > %(pile_up)s AS pile_up FROM locks WHERE NOT granted
), conflicts (wanted, held) AS (
    -- Which held modes conflict with a wanted one (the documentation's "Conflicting Lock Modes").
    VALUES ('AccessShareLock', '{AccessExclusiveLock}'::text[]),
           ('RowShareLock', '{ExclusiveLock,AccessExclusiveLock}'),
           ('RowExclusiveLock', '{ShareLock,ShareRowExclusiveLock,ExclusiveLock,AccessExclusiveLock}'),
           ('ShareUpdateExclusiveLock', '{ShareUpdateExclusiveLock,ShareLock,ShareRowExclusiveLock,ExclusiveLock,AccessExclusiveLock}'),
           ('ShareLock', '{RowExclusiveLock,ShareUpdateExclusiveLock,ShareRowExclusiveLock,ExclusiveLock,AccessExclusiveLock}'),
           ('ShareRowExclusiveLock',
            '{RowExclusiveLock,ShareUpdateExclusiveLock,ShareLock,ShareRowExclusiveLock,ExclusiveLock,AccessExclusiveLock}'),
           ('ExclusiveLock',
            '{RowShareLock,RowExclusiveLock,ShareUpdateExclusiveLock,ShareLock,ShareRowExclusiveLock,ExclusiveLock,AccessExclusiveLock}'),
           ('AccessExclusiveLock', '{AccessShareLock,RowShareLock,RowExclusiveLock,ShareUpdateExclusiveLock,ShareLock,'
                                   'ShareRowExclusiveLock,ExclusiveLock,AccessExclusiveLock}')
), held_by AS (
    -- In a pile-up: each waiter's holders, a parallel worker's as its leader's.
    SELECT w.pid, array_agg(DISTINCT coalesce(h.leader_pid, g.pid)) AS pids
    FROM locks w
    JOIN conflicts c ON c.wanted = w.mode
    JOIN locks g ON g.granted AND g.pid IS NOT NULL AND g.pid <> w.pid AND g.mode = ANY (c.held)
     AND (g.locktype, coalesce(g.database, 0), coalesce(g.relation, 0), coalesce(g.page, -1), coalesce(g.tuple, -1),
          coalesce(g.virtualxid, ''), coalesce(g.transactionid::text, ''), coalesce(g.classid, 0), coalesce(g.objid, 0),
          coalesce(g.objsubid, -1))
       = (w.locktype, coalesce(w.database, 0), coalesce(w.relation, 0), coalesce(w.page, -1), coalesce(w.tuple, -1),
          coalesce(w.virtualxid, ''), coalesce(w.transactionid::text, ''), coalesce(w.classid, 0), coalesce(w.objid, 0),
          coalesce(w.objsubid, -1))
    LEFT JOIN activity h ON h.pid = g.pid
    WHERE NOT w.granted AND (SELECT pile_up FROM pile)
    GROUP BY w.pid
), waiting AS MATERIALIZED (
    -- pg_blocking_pids once per waiter (in a pile-up, its holders): every later reference reads this.
    -- `ahead_unread`: in a pile-up, those it only queues behind are not listed.
    SELECT l.*, CASE WHEN p.pile_up THEN coalesce(hb.pids, pg_blocking_pids(l.pid)) ELSE pg_blocking_pids(l.pid) END AS blocked_by,
           p.pile_up AND hb.pids IS NOT NULL AS ahead_unread
    FROM locks l
    CROSS JOIN pile p
    LEFT JOIN held_by hb ON hb.pid = l.pid
    WHERE NOT l.granted AND l.pid NOT IN (SELECT o.pid FROM own o)
), safe_waiting AS MATERIALIZED (
    -- A SERIALIZABLE READ ONLY DEFERRABLE transaction waiting for a safe snapshot holds no lock and
    -- waits for none: it waits (wait event SafeSnapshot) for the read-write serializable
    -- transactions that were running when it began, which pg_safe_snapshot_blocking_pids names.
    SELECT a.pid, pg_safe_snapshot_blocking_pids(a.pid) AS blocked_by
    FROM activity a
    WHERE a.wait_event = 'SafeSnapshot' AND a.pid NOT IN (SELECT o.pid FROM own o)
), blockers AS (
    -- The sessions that hold what a waiter waits for (a granted lock on the same object: a
    -- transaction id, a tuple, a table, a key), a parallel worker's as its leader's, as
    -- pg_blocking_pids names them; then only those of them that it does name. One hashed
    -- semi-join: checking every session against every waiter's list of blockers was a step per
    -- wait (in a pile-up of 200, 20,000 of them: a millisecond). A blocker found no other way
    -- (a parallel worker's leader on 12, which has no leader_pid) is read by the probe after
    -- (locks.sql's `sessions_of`).
    SELECT a.pid FROM activity a
    WHERE a.pid IN (
        SELECT coalesce(h.leader_pid, l.pid) FROM locks l LEFT JOIN activity h ON h.pid = l.pid
        WHERE l.granted AND l.pid IS NOT NULL
          AND (l.locktype, coalesce(l.database, 0), coalesce(l.relation, 0), coalesce(l.page, -1), coalesce(l.tuple, -1),
               coalesce(l.virtualxid, ''), coalesce(l.transactionid::text, ''), coalesce(l.classid, 0), coalesce(l.objid, 0),
               coalesce(l.objsubid, -1))
              IN (SELECT w.locktype, coalesce(w.database, 0), coalesce(w.relation, 0), coalesce(w.page, -1), coalesce(w.tuple, -1),
                         coalesce(w.virtualxid, ''), coalesce(w.transactionid::text, ''), coalesce(w.classid, 0), coalesce(w.objid, 0),
                         coalesce(w.objsubid, -1)
                  FROM waiting w))
      AND EXISTS (SELECT FROM waiting w WHERE a.pid = ANY (w.blocked_by))
    UNION
    SELECT unnest(s.blocked_by) FROM safe_waiting s
), row_waiters AS (
    SELECT array_agg(w.pid) AS pids FROM waiting w WHERE w.locktype = 'transactionid'
)
SELECT 'w' AS kind, l.pid, a.leader_pid, l.blocked_by, l.locktype AS lock_type, l.mode,
       l.database AS database_oid,
       CASE WHEN coalesce(nullif(l.database, 0), a.datid) = (SELECT oid FROM here) THEN current_database()
            ELSE (SELECT d.datname FROM pg_database d WHERE d.oid = coalesce(nullif(l.database, 0), a.datid)) END AS database,
       l.relation AS relation_oid,
       CASE WHEN l.relation IS NOT NULL AND l.database IN (0, (SELECT oid FROM here)) THEN l.relation::regclass::text END AS relation,
       NULL::"char" AS relkind, l.page, l.tuple, l.virtualxid, l.transactionid::text AS transactionid,
       l.classid, l.objid, l.objsubid, NULL::text AS virtualtransaction, false AS granted,
       extract(epoch FROM now() - {wait_start})::float8 AS wait_s,
       extract(epoch FROM now() - a.xact_start)::float8 AS xact_age_s,  -- a wait cycle's members are blockers too
       a.state, a.query, a.application_name, NULL::text AS gid, NULL::name AS owner, l.ahead_unread
FROM waiting l
LEFT JOIN activity a ON a.pid = l.pid
UNION ALL
SELECT 'w', s.pid, a.leader_pid, s.blocked_by, 'safe snapshot', NULL, a.datid, (SELECT d.datname FROM pg_database d WHERE d.oid = a.datid),
       NULL, NULL,
       NULL::"char", NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, false,
       extract(epoch FROM now() - a.state_change)::float8, extract(epoch FROM now() - a.xact_start)::float8,
       a.state, a.query, a.application_name, NULL, NULL, false
FROM safe_waiting s
JOIN activity a ON a.pid = s.pid
UNION ALL
SELECT 's', a.pid, a.leader_pid, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, extract(epoch FROM now() - a.xact_start)::float8, a.state, a.query, a.application_name, NULL, NULL, NULL
FROM activity a
WHERE a.pid IN (SELECT b.pid FROM blockers b)
  AND NOT a.pid = ANY (coalesce((SELECT array_agg(w.pid) FROM waiting w WHERE cardinality(w.blocked_by) > 0), '{}'))
  AND NOT a.pid = ANY (coalesce((SELECT array_agg(s.pid) FROM safe_waiting s WHERE cardinality(s.blocked_by) > 0), '{}'))
UNION ALL
SELECT 'l', l.pid, NULL, NULL, l.locktype, l.mode, l.database, NULL, l.relation,
       CASE WHEN l.relation IS NOT NULL AND l.database IN (0, (SELECT oid FROM here)) THEN l.relation::regclass::text END,
       CASE WHEN l.locktype = 'relation' AND l.database = (SELECT oid FROM here)
            THEN (SELECT c.relkind FROM pg_class c WHERE c.oid = l.relation) END,
       l.page, l.tuple, l.virtualxid, l.transactionid::text, l.classid, l.objid, l.objsubid, l.virtualtransaction, true,
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM locks l
WHERE l.granted AND NOT (l.locktype IN ('virtualxid', 'transactionid') AND l.pid IS NOT NULL) AND (
    (l.locktype IN ('tuple', 'relation') AND l.pid = ANY ((SELECT pids FROM row_waiters)::integer[]))
    OR (l.locktype = 'relation' AND l.mode IN ('RowShareLock', 'RowExclusiveLock') AND l.pid IS NOT NULL
        AND l.relation = ANY ((SELECT array_agg(t.relation) FROM locks t
                               WHERE t.locktype = 'tuple' AND t.granted AND t.pid = ANY ((SELECT pids FROM row_waiters)::integer[])
                                 AND EXISTS (SELECT FROM locks r WHERE r.locktype = 'relation' AND r.mode = 'RowShareLock'
                                             AND r.granted AND r.relation = t.relation AND r.database = t.database))::oid[]))
    OR (l.locktype NOT IN ('transactionid', 'tuple', 'virtualxid')
        AND (SELECT count(*) > 0 FROM waiting w WHERE w.locktype NOT IN ('transactionid', 'tuple', 'virtualxid'))
        AND EXISTS (SELECT FROM waiting w
                    WHERE w.locktype = l.locktype AND w.database IS NOT DISTINCT FROM l.database
                      AND w.relation IS NOT DISTINCT FROM l.relation AND w.page IS NOT DISTINCT FROM l.page
                      AND w.tuple IS NOT DISTINCT FROM l.tuple AND w.classid IS NOT DISTINCT FROM l.classid
                      AND w.objid IS NOT DISTINCT FROM l.objid AND w.objsubid IS NOT DISTINCT FROM l.objsubid))
    OR (l.pid IS NULL AND (SELECT bool_or(0 = ANY (w.blocked_by)) FROM waiting w))
)
UNION ALL
(SELECT 'a', l.pid, NULL, NULL, l.locktype, l.mode, l.database,
        (SELECT d.datname FROM pg_database d WHERE d.oid = l.database), NULL, NULL, NULL, NULL, NULL, NULL, NULL,
        l.classid, l.objid, l.objsubid, NULL, l.granted,
        CASE WHEN NOT l.granted THEN extract(epoch FROM now() - {wait_start})::float8 END, NULL, NULL, NULL,
        a.application_name, NULL, NULL, NULL
 FROM locks l
 LEFT JOIN activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory' AND l.pid <> pg_backend_pid()
 ORDER BY l.granted, l.classid, l.objid, l.objsubid, l.pid
 LIMIT 200)
UNION ALL
SELECT 'p', NULL, NULL, NULL, NULL, NULL, p.dbid, (SELECT d.datname FROM pg_database d WHERE d.oid = p.dbid),
       NULL, NULL, NULL, NULL, NULL, NULL, p.transaction::text, NULL, NULL, NULL, NULL, NULL,
       NULL, extract(epoch FROM now() - p.prepared)::float8, NULL, NULL, NULL, p.gid,
       (SELECT r.rolname FROM pg_roles r WHERE r.oid = p.ownerid), NULL
FROM pg_prepared_xact() p;

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

-- name: sessions_of
-- The sessions of blockers the picture's `blockers` did not find holding what their waiters wait
-- for (a parallel worker's leader on 12): as its `s` rows.
SELECT 's' AS kind, a.pid, {leader_pid} AS leader_pid, extract(epoch FROM now() - a.xact_start)::float8 AS xact_age_s,
       a.state, a.query, a.application_name
FROM pg_stat_activity a
WHERE a.pid = ANY(%(pids)s::integer[]);
