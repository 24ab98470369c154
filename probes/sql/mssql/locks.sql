-- Blocked sessions, SQL Server: every session waiting on a lock (row key, page, object,
-- application lock, ...), the session that blocks it, and the lock it waits for. The same
-- section names, %(name)s parameters and result columns, in the same order, as
-- postgresql/locks.sql, but for prepared_locks (see waiting), plus applocks (SQL Server only).
--
-- Where PostgreSQL reads pg_locks and pg_blocking_pids, SQL Server's analogue is
-- sys.dm_os_waiting_tasks (each waiting task: wait_duration_ms, blocking_session_id and the
-- address of the lock request it waits on) joined to sys.dm_tran_locks on
-- lock_owner_address = resource_address (the lock: resource_type, request_mode, database,
-- object or hobt, resource_description), as sp_WhoIsActive and sp_BlitzWho do. A lock wait is a
-- wait type LCK_M_*. Unlike pg_locks, these DMVs need VIEW SERVER STATE (SQL Server 2022: VIEW
-- SERVER PERFORMANCE STATE; Azure SQL Database: VIEW DATABASE STATE): without it the statement
-- fails with error 300, and the probe says so rather than show an empty tree.
--
-- Head blockers: a blocker that runs nothing (`sleeping`, with an open transaction: PostgreSQL's
-- `idle in transaction`) has no row in sys.dm_exec_requests nor in sys.dm_os_waiting_tasks. It
-- appears here only as the blocking_session_id of the sessions it blocks; the Python side then
-- asks `sessions` about every blocker that is not itself waiting (sp_WhoIsActive's
-- blockers-EXCEPT-waiters), and `sessions` reads sys.dm_exec_sessions, where sleeping sessions
-- are.

-- name: waiting
-- One row per waiting session (a parallel query may wait in several tasks: the longest wait
-- names the lock; blocked_by gathers every task's blocker), and the orphaned distributed
-- transactions as a JSON list on the first row (a row with no pid when nobody waits). Columns,
-- as PostgreSQL's, with these meanings on SQL Server:
-- - pid: session_id. leader_pid: always NULL (a parallel query's tasks share its session_id).
-- - blocked_by: JSON text, an array of session ids: the blocking_session_id the lock manager
--   reports for each of the session's lock-waiting tasks (one blocker per task: the holder, or a
--   request queued ahead of it, where pg_blocking_pids lists every one). An orphaned distributed
--   transaction (-2) is reported as 0, PostgreSQL's number for a prepared transaction; -3 (a
--   deferred recovery transaction) is kept as it is. The session itself is left out.
-- - lock_type: sys.dm_tran_locks.resource_type as SQL Server names it: KEY (a row of an index),
--   RID (a row of a heap), PAGE, OBJECT (a table), HOBT, APPLICATION (sp_getapplock: the
--   analogue of an advisory lock), XACT (a transaction: with optimized locking, in Azure SQL
--   Database and SQL Server 2025, a writer waits for the transaction that holds the row, as in
--   PostgreSQL's transactionid wait), DATABASE, METADATA, ...
-- - mode: request_mode (S, U, X, IS, IU, IX, SIX, Sch-S, Sch-M, RangeS-U, ...).
-- - database, database_oid: the lock's database (name, database_id).
-- - relation_oid: the object_id of the table: resource_associated_entity_id of an OBJECT lock;
--   for KEY, RID, PAGE and HOBT locks the hobt's object from sys.partitions, in this database
--   only (sys.partitions is per database; PAGE and RID locks do not always carry their hobt).
-- - relation: `schema.table` (OBJECT_SCHEMA_NAME/OBJECT_NAME with the lock's database_id, so an
--   OBJECT lock of another database is named too, where this login may see it); for a row or
--   page lock whose table this login cannot name (another database's, or one it may not see)
--   `<database>:hobt <hobt_id>`; for an application lock `applock <resource name>` (the name as
--   sp_getapplock got it, cut to its first 32 characters by SQL Server), followed by
--   ` (<principal>)` unless it is scoped to `public`.
-- - page, tuple, virtualxid, classid, objid, objsubid, row_relation_oid, row_relation,
--   row_page, row_tuple: NULL. SQL Server names a row by a hash of its key or by
--   file:page:slot (resource_description), not by PostgreSQL's ctid, and an application lock by
--   its name, not by numbers; details.sql's session_locks shows the resource_description.
-- - transactionid: for an XACT wait, the resource_description naming the transaction; else NULL.
-- - held_tables: for an XACT wait only, JSON text, an array of the tables (in this database) on
--   which the waiter holds an IX, IU or X lock: the table of the row it waits for, when there is
--   one (PostgreSQL's held_tables for a transactionid wait). NULL otherwise.
-- - wait_s: sys.dm_os_waiting_tasks.wait_duration_ms / 1000 (seconds, float).
-- - state: the waiter's session status (see connections.sql): `running` for a waiter.
-- - query: the statement the waiter runs (its sql_handle cut at the statement offsets, at most
--   4000 characters).
-- - application_name: sys.dm_exec_sessions.program_name.
-- - prepared: JSON text on the first row, the orphaned distributed (MS DTC) transactions, the
--   analogue of PostgreSQL's prepared transactions: transactions of type 4
--   (sys.dm_tran_active_transactions) bound to no session, whose locks sys.dm_tran_locks shows
--   under request_session_id -2. Each is {"gid": the unit of work (transaction_uow, the GUID
--   that KILL '<uow>' WITH COMMIT | ROLLBACK resolves), "owner": null, "database", "xid":
--   transaction_id, "age_s", "dtc_state", "blocked_pids": the waiting sessions blocked by -2
--   whose lock this transaction holds granted (same resource), as a JSON array}. NULL when
--   there is none. SQL Server names the blocking transaction itself, so no prepared_locks
--   statement is needed to match lock targets and modes (see the test's PG_ONLY).
WITH lock_waits AS (
    SELECT wt.session_id, wt.exec_context_id, wt.wait_duration_ms,
           l.resource_type, l.request_mode, l.resource_database_id, l.resource_associated_entity_id,
           l.resource_description,
           ROW_NUMBER() OVER (PARTITION BY wt.session_id ORDER BY wt.wait_duration_ms DESC, wt.exec_context_id) AS task_rank
    FROM sys.dm_os_waiting_tasks AS wt
    JOIN sys.dm_tran_locks AS l ON l.lock_owner_address = wt.resource_address
    WHERE wt.wait_type LIKE N'LCK[_]M[_]%%' AND wt.session_id <> @@SPID AND l.request_status <> N'GRANT'
), requests AS (
    SELECT r.session_id, r.sql_handle, r.statement_start_offset, r.statement_end_offset,
           ROW_NUMBER() OVER (PARTITION BY r.session_id ORDER BY r.request_id) AS request_rank
    FROM sys.dm_exec_requests AS r
), waiting AS (
    SELECT CONVERT(int, lw.session_id) AS pid,
           CONVERT(int, NULL) AS leader_pid,
           (SELECT N'[' + STRING_AGG(CONVERT(nvarchar(max), b.blocker), N', ') WITHIN GROUP (ORDER BY b.blocker) + N']'
            FROM (SELECT DISTINCT CASE WHEN bt.blocking_session_id = -2 THEN 0 ELSE CONVERT(int, bt.blocking_session_id) END AS blocker
                  FROM sys.dm_os_waiting_tasks AS bt
                  WHERE bt.session_id = lw.session_id AND bt.wait_type LIKE N'LCK[_]M[_]%%'
                    AND bt.blocking_session_id IS NOT NULL AND bt.blocking_session_id <> bt.session_id) AS b) AS blocked_by,
           lw.resource_type AS lock_type,
           lw.request_mode AS mode,
           DB_NAME(lw.resource_database_id) AS [database],
           lw.resource_database_id AS database_oid,
           o.object_id AS relation_oid,
           CASE WHEN lw.resource_type = N'APPLICATION'
                THEN CONCAT(N'applock ', COALESCE(an.name, ad.description),
                            CASE WHEN an.principal_id <> 0
                                 THEN CONCAT(N' (', COALESCE(CASE WHEN lw.resource_database_id = DB_ID()
                                                                  THEN USER_NAME(an.principal_id) END,
                                                             CONCAT(N'principal ', an.principal_id)), N')') END)
                WHEN o.object_id IS NOT NULL
                THEN OBJECT_SCHEMA_NAME(o.object_id, lw.resource_database_id) + N'.' + OBJECT_NAME(o.object_id, lw.resource_database_id)
                WHEN lw.resource_type IN (N'KEY', N'RID', N'PAGE', N'HOBT')
                THEN CONCAT(DB_NAME(lw.resource_database_id), N':hobt ', lw.resource_associated_entity_id)
           END AS relation,
           CONVERT(bigint, NULL) AS page,
           CONVERT(int, NULL) AS tuple,
           CONVERT(nvarchar(64), NULL) AS virtualxid,
           CASE WHEN lw.resource_type = N'XACT' THEN RTRIM(lw.resource_description) END AS transactionid,
           CONVERT(bigint, NULL) AS classid,
           CONVERT(bigint, NULL) AS objid,
           CONVERT(int, NULL) AS objsubid,
           CONVERT(int, NULL) AS row_relation_oid,
           CONVERT(nvarchar(300), NULL) AS row_relation,
           CONVERT(bigint, NULL) AS row_page,
           CONVERT(int, NULL) AS row_tuple,
           held.tables AS held_tables,
           CONVERT(float, lw.wait_duration_ms) / 1000.0 AS wait_s,
           LOWER(s.status) + CASE WHEN LOWER(s.status) = N'sleeping' AND s.open_transaction_count > 0
                                  THEN N', open transaction' ELSE N'' END AS state,
           LEFT(CASE WHEN rq.statement_start_offset IS NOT NULL
                     THEN SUBSTRING(t.text, rq.statement_start_offset / 2 + 1,
                                    (CASE WHEN rq.statement_end_offset = -1 THEN DATALENGTH(t.text)
                                          ELSE rq.statement_end_offset END - rq.statement_start_offset) / 2 + 1)
                     ELSE t.text END, 4000) AS query,
           s.program_name AS application_name
    FROM lock_waits AS lw
    LEFT JOIN sys.dm_exec_sessions AS s ON s.session_id = lw.session_id
    LEFT JOIN requests AS rq ON rq.session_id = lw.session_id AND rq.request_rank = 1
    OUTER APPLY sys.dm_exec_sql_text(rq.sql_handle) AS t
    -- The table: an OBJECT lock names it; a row, page or hobt lock names its hobt.
    CROSS APPLY (
        SELECT CASE WHEN lw.resource_type = N'OBJECT' THEN CONVERT(int, lw.resource_associated_entity_id)
                    WHEN lw.resource_type IN (N'KEY', N'RID', N'PAGE', N'HOBT') AND lw.resource_database_id = DB_ID()
                    THEN (SELECT TOP (1) p.object_id FROM sys.partitions AS p WHERE p.hobt_id = lw.resource_associated_entity_id)
               END AS object_id
    ) AS o
    -- An application lock's resource_description is `<principal id>:[<name, up to 32
    -- characters>]:(<hash>)`: the name is what lies between the first colon and the last `:(`,
    -- without its brackets. Anything else is shown whole.
    CROSS APPLY (
        SELECT RTRIM(lw.resource_description) AS description,
               CHARINDEX(N':', lw.resource_description) AS first_colon,
               CHARINDEX(N'(:', REVERSE(RTRIM(lw.resource_description))) AS hash_from_end
    ) AS ad
    CROSS APPLY (
        SELECT CASE WHEN lw.resource_type = N'APPLICATION' AND ad.first_colon > 1 AND ad.hash_from_end > 0
                         AND LEN(ad.description) - ad.hash_from_end > ad.first_colon
                    THEN SUBSTRING(ad.description, ad.first_colon + 1,
                                   LEN(ad.description) - ad.hash_from_end - ad.first_colon - 1) END AS bracketed,
               CASE WHEN lw.resource_type = N'APPLICATION' AND ad.first_colon > 1
                    THEN TRY_CONVERT(int, LEFT(lw.resource_description, ad.first_colon - 1)) END AS principal_id
    ) AS ab
    CROSS APPLY (
        SELECT CASE WHEN LEFT(ab.bracketed, 1) = N'[' AND RIGHT(ab.bracketed, 1) = N']'
                    THEN SUBSTRING(ab.bracketed, 2, LEN(ab.bracketed) - 2) ELSE ab.bracketed END AS name,
               ab.principal_id
    ) AS an
    -- An XACT wait (optimized locking) waits for another transaction, not for a row: the tables
    -- the waiter holds a row-level intent lock on name where it is. Read only for XACT waits.
    OUTER APPLY (
        SELECT N'[' + STRING_AGG(CONVERT(nvarchar(max), N'"' + STRING_ESCAPE(x.name, 'json') + N'"'), N', ')
                          WITHIN GROUP (ORDER BY x.name) + N']' AS tables
        FROM (SELECT DISTINCT OBJECT_SCHEMA_NAME(h.resource_associated_entity_id) + N'.'
                              + OBJECT_NAME(h.resource_associated_entity_id) AS name
              FROM sys.dm_tran_locks AS h
              WHERE lw.resource_type = N'XACT'
                AND h.request_session_id = lw.session_id AND h.request_status = N'GRANT' AND h.resource_type = N'OBJECT'
                AND h.resource_database_id = DB_ID() AND h.request_mode IN (N'IX', N'IU', N'X')) AS x
    ) AS held
    WHERE lw.task_rank = 1
)
SELECT w.pid, w.leader_pid, w.blocked_by, w.lock_type, w.mode, w.[database], w.database_oid, w.relation_oid, w.relation,
       w.page, w.tuple, w.virtualxid, w.transactionid, w.classid, w.objid, w.objsubid,
       w.row_relation_oid, w.row_relation, w.row_page, w.row_tuple, w.held_tables,
       w.wait_s, w.state, w.query, w.application_name,
       CASE WHEN w.pid IS NULL OR ROW_NUMBER() OVER (ORDER BY w.pid) = 1 THEN p.list END AS prepared
FROM (
    -- Orphaned distributed transactions: read from sys.dm_tran_active_transactions (type 4, no
    -- session); their locks are read only when there is one.
    SELECT (
        SELECT CONVERT(nvarchar(36), dt.transaction_uow) AS gid,
               CONVERT(nvarchar(128), NULL) AS owner,
               (SELECT TOP (1) DB_NAME(g.resource_database_id)
                FROM sys.dm_tran_locks AS g
                WHERE g.request_session_id = -2 AND g.request_owner_guid = dt.transaction_uow
                ORDER BY CASE WHEN g.resource_database_id = DB_ID() THEN 0 ELSE 1 END) AS [database],
               CONVERT(nvarchar(20), dt.transaction_id) AS xid,
               CONVERT(float, DATEDIFF_BIG(millisecond, dt.transaction_begin_time, SYSDATETIME())) / 1000.0 AS age_s,
               dt.dtc_state,
               JSON_QUERY(ISNULL((
                   SELECT N'[' + STRING_AGG(CONVERT(nvarchar(max), v.session_id), N', ') WITHIN GROUP (ORDER BY v.session_id) + N']'
                   FROM (SELECT DISTINCT CONVERT(int, vt.session_id) AS session_id
                         FROM sys.dm_os_waiting_tasks AS vt
                         JOIN sys.dm_tran_locks AS vl ON vl.lock_owner_address = vt.resource_address
                         JOIN sys.dm_tran_locks AS g
                           ON g.request_session_id = -2 AND g.request_owner_guid = dt.transaction_uow
                          AND g.request_status = N'GRANT' AND g.resource_type = vl.resource_type
                          AND g.resource_subtype = vl.resource_subtype AND g.resource_database_id = vl.resource_database_id
                          AND g.resource_associated_entity_id = vl.resource_associated_entity_id
                          AND g.resource_description = vl.resource_description
                         WHERE vt.blocking_session_id = -2 AND vt.wait_type LIKE N'LCK[_]M[_]%%') AS v
               ), N'[]')) AS blocked_pids
        FROM sys.dm_tran_active_transactions AS dt
        WHERE dt.transaction_type = 4
          AND NOT EXISTS (SELECT 1 FROM sys.dm_tran_session_transactions AS st WHERE st.transaction_id = dt.transaction_id)
        ORDER BY dt.transaction_begin_time, dt.transaction_id
        FOR JSON PATH, INCLUDE_NULL_VALUES
    ) AS list
) AS p
LEFT JOIN waiting AS w ON 1 = 1
OPTION (MAXDOP 1);

-- name: sessions
-- The blockers (`pids`: a JSON array of session ids), waiting or not, with the state that
-- explains them. A head blocker that runs nothing has no request: it is found in
-- sys.dm_exec_sessions, its state `sleeping, open transaction` (PostgreSQL's `idle in
-- transaction`), or `sleeping` alone when it holds only session-owned locks (sp_getapplock with
-- @LockOwner = 'Session'). xact_age_s: seconds since its oldest open transaction began. query:
-- the statement it runs, or, when it runs nothing, the last batch it ran
-- (sys.dm_exec_connections.most_recent_sql_handle), which need not be the statement that took
-- the lock. leader_pid: always NULL. A negative id (-3, a deferred recovery transaction) has no
-- row.
WITH requests AS (
    SELECT r.session_id, r.sql_handle, r.statement_start_offset, r.statement_end_offset,
           ROW_NUMBER() OVER (PARTITION BY r.session_id ORDER BY r.request_id) AS request_rank
    FROM sys.dm_exec_requests AS r
), xact AS (
    SELECT st.session_id, MIN(at.transaction_begin_time) AS began
    FROM sys.dm_tran_session_transactions AS st
    JOIN sys.dm_tran_active_transactions AS at ON at.transaction_id = st.transaction_id
    GROUP BY st.session_id
)
SELECT CONVERT(int, s.session_id) AS pid,
       CONVERT(int, NULL) AS leader_pid,
       LOWER(s.status) + CASE WHEN LOWER(s.status) = N'sleeping' AND s.open_transaction_count > 0
                              THEN N', open transaction' ELSE N'' END AS state,
       CONVERT(float, DATEDIFF_BIG(millisecond, x.began, SYSDATETIME())) / 1000.0 AS xact_age_s,
       LEFT(CASE WHEN rq.statement_start_offset IS NOT NULL
                 THEN SUBSTRING(t.text, rq.statement_start_offset / 2 + 1,
                                (CASE WHEN rq.statement_end_offset = -1 THEN DATALENGTH(t.text)
                                      ELSE rq.statement_end_offset END - rq.statement_start_offset) / 2 + 1)
                 ELSE t.text END, 4000) AS query,
       s.program_name AS application_name
FROM sys.dm_exec_sessions AS s
LEFT JOIN requests AS rq ON rq.session_id = s.session_id AND rq.request_rank = 1
LEFT JOIN xact AS x ON x.session_id = s.session_id
LEFT JOIN sys.dm_exec_connections AS c ON c.session_id = s.session_id AND c.parent_connection_id IS NULL
OUTER APPLY sys.dm_exec_sql_text(COALESCE(rq.sql_handle, c.most_recent_sql_handle)) AS t
WHERE s.session_id IN (SELECT CONVERT(int, j.[value]) FROM OPENJSON(CONVERT(nvarchar(max), %(pids)s)) AS j)
OPTION (MAXDOP 1);

-- name: applocks
-- SQL Server only: every application lock (sp_getapplock) held or waited for, in every
-- database, but the probe's own. PostgreSQL's advisory locks appear in pg_locks, and so in the
-- lock tree, only when someone waits; SQL Server's engine serialises schema changes and
-- compactions with application locks, and a held one is worth seeing before anyone waits.
-- resource: the name as sp_getapplock got it, cut to 32 characters by SQL Server (the whole
-- resource_description when it cannot be parsed); principal: the database principal the lock is
-- scoped to (USER_NAME in this database, `principal <id>` in another); owner_type: TRANSACTION
-- or SESSION; granted: 1 held, 0 waiting; wait_s: how long a waiting request has waited.
-- Bounded: 200 rows, the waits first.
SELECT TOP (200) CONVERT(int, l.request_session_id) AS pid,
       COALESCE(an.name, ad.description) AS resource,
       CASE WHEN an.principal_id IS NOT NULL
            THEN COALESCE(CASE WHEN l.resource_database_id = DB_ID() THEN USER_NAME(an.principal_id) END,
                          CONCAT(N'principal ', an.principal_id)) END AS principal,
       DB_NAME(l.resource_database_id) AS [database],
       l.request_mode AS mode,
       CONVERT(bit, CASE WHEN l.request_status = N'GRANT' THEN 1 ELSE 0 END) AS granted,
       l.request_owner_type AS owner_type,
       CONVERT(float, wt.wait_duration_ms) / 1000.0 AS wait_s,
       s.program_name AS application_name
FROM sys.dm_tran_locks AS l
LEFT JOIN sys.dm_os_waiting_tasks AS wt ON wt.resource_address = l.lock_owner_address
LEFT JOIN sys.dm_exec_sessions AS s ON s.session_id = l.request_session_id
CROSS APPLY (
    SELECT RTRIM(l.resource_description) AS description,
           CHARINDEX(N':', l.resource_description) AS first_colon,
           CHARINDEX(N'(:', REVERSE(RTRIM(l.resource_description))) AS hash_from_end
) AS ad
CROSS APPLY (
    SELECT CASE WHEN ad.first_colon > 1 AND ad.hash_from_end > 0
                     AND LEN(ad.description) - ad.hash_from_end > ad.first_colon
                THEN SUBSTRING(ad.description, ad.first_colon + 1,
                               LEN(ad.description) - ad.hash_from_end - ad.first_colon - 1) END AS bracketed,
           CASE WHEN ad.first_colon > 1 THEN TRY_CONVERT(int, LEFT(l.resource_description, ad.first_colon - 1)) END AS principal_id
) AS ab
CROSS APPLY (
    SELECT CASE WHEN LEFT(ab.bracketed, 1) = N'[' AND RIGHT(ab.bracketed, 1) = N']'
                THEN SUBSTRING(ab.bracketed, 2, LEN(ab.bracketed) - 2) ELSE ab.bracketed END AS name,
           ab.principal_id
) AS an
WHERE l.resource_type = N'APPLICATION' AND l.request_session_id <> @@SPID
ORDER BY granted, resource, pid
OPTION (MAXDOP 1);
