-- Client sessions (not the server's own processes, not this probe's session), SQL Server. The
-- same names, parameters and result columns as postgresql/connections.sql, plus version_store
-- (SQL Server only). Every statement here needs VIEW SERVER STATE (SQL Server 2022: VIEW SERVER
-- PERFORMANCE STATE; Azure SQL Database: VIEW DATABASE STATE): without it
-- sys.dm_exec_sessions shows the probe's own session only and the transaction DMVs fail the
-- statement (error 300), which the probe reports.

-- name: connections
-- One row per user session (is_user_process = 1) of the whole instance, as pg_stat_activity is
-- the whole cluster's.
-- - state: sys.dm_exec_sessions.status in lower case (running, sleeping, dormant, preconnect),
--   and `sleeping, open transaction` for a session that runs nothing while it keeps a
--   transaction open: PostgreSQL's `idle in transaction`, the classic blocker.
-- - backend_type: always `user process` (system sessions are left out).
-- - xact_age_s: seconds since the session's oldest open transaction began
--   (sys.dm_tran_session_transactions + sys.dm_tran_active_transactions.transaction_begin_time).
-- - xmin_age: the analogue of age(backend_xmin), in SECONDS, not transaction ids: the age of the
--   session's oldest transaction in sys.dm_tran_active_snapshot_database_transactions (a
--   SNAPSHOT transaction, a statement under READ_COMMITTED_SNAPSHOT, or a transaction that
--   generates row versions). The oldest of them holds back the cleanup of the version store
--   (tempdb's, or the database's own with accelerated database recovery), as the oldest xmin
--   holds back vacuum. NULL for a session with none.
-- The DMVs are aggregated first and joined on session_id, rather than applied per session.
WITH xact AS (
    SELECT st.session_id, MIN(at.transaction_begin_time) AS began
    FROM sys.dm_tran_session_transactions AS st
    JOIN sys.dm_tran_active_transactions AS at ON at.transaction_id = st.transaction_id
    GROUP BY st.session_id
), snap AS (
    SELECT sn.session_id, MAX(sn.elapsed_time_seconds) AS oldest_s
    FROM sys.dm_tran_active_snapshot_database_transactions AS sn
    GROUP BY sn.session_id
)
SELECT CONVERT(int, s.session_id) AS pid,
       LOWER(s.status) + CASE WHEN LOWER(s.status) = N'sleeping' AND s.open_transaction_count > 0
                              THEN N', open transaction' ELSE N'' END AS state,
       s.program_name AS application_name,
       N'user process' AS backend_type,
       CONVERT(float, DATEDIFF_BIG(millisecond, x.began, SYSDATETIME())) / 1000.0 AS xact_age_s,
       CONVERT(bigint, v.oldest_s) AS xmin_age
FROM sys.dm_exec_sessions AS s
LEFT JOIN xact AS x ON x.session_id = s.session_id
LEFT JOIN snap AS v ON v.session_id = s.session_id
WHERE s.is_user_process = 1 AND s.session_id <> @@SPID
OPTION (MAXDOP 1);

-- name: max_connections
-- @@MAX_CONNECTIONS: the 'user connections' setting, or 32767 when it is 0 (unlimited). Azure
-- SQL Database limits sessions per service objective instead, which this does not show.
-- reserved: SQL Server keeps no user connections back from that limit (the dedicated admin
-- connection is on top of it): 0.
SELECT CONVERT(int, @@MAX_CONNECTIONS) AS max_connections,
       CONVERT(int, 0) AS reserved;

-- name: version_store
-- SQL Server only: the xmin horizon's other half, what the oldest snapshot transaction holds
-- back. One row:
-- - version_store_kb: this database's row versions in tempdb's version store; version_store_total_kb:
--   every database's (tempdb's version store is the instance's: one old snapshot transaction
--   anywhere keeps it from shrinking);
-- - persistent_version_store_kb: the database's own persistent version store, where row versions
--   live instead of tempdb when accelerated database recovery is on (0 or NULL when it is off);
-- - oldest_snapshot_pid, oldest_snapshot_age_s, oldest_snapshot_is_snapshot_isolation,
--   oldest_snapshot_application: the session with the oldest transaction in
--   sys.dm_tran_active_snapshot_database_transactions, instance-wide (the xmin holder);
-- - is_read_committed_snapshot_on, snapshot_isolation_state, is_accelerated_database_recovery_on:
--   whether this database keeps row versions at all.
SELECT DB_NAME() AS [database],
       (SELECT SUM(vs.reserved_space_kb) FROM sys.dm_tran_version_store_space_usage AS vs
        WHERE vs.database_id = DB_ID()) AS version_store_kb,
       (SELECT SUM(vs.reserved_space_kb) FROM sys.dm_tran_version_store_space_usage AS vs) AS version_store_total_kb,
       (SELECT SUM(pvs.persistent_version_store_size_kb) FROM sys.dm_tran_persistent_version_store_stats AS pvs
        WHERE pvs.database_id = DB_ID()) AS persistent_version_store_kb,
       CONVERT(int, o.session_id) AS oldest_snapshot_pid,
       o.elapsed_time_seconds AS oldest_snapshot_age_s,
       o.is_snapshot AS oldest_snapshot_is_snapshot_isolation,
       o.program_name AS oldest_snapshot_application,
       d.is_read_committed_snapshot_on,
       d.snapshot_isolation_state_desc AS snapshot_isolation_state,
       d.is_accelerated_database_recovery_on
FROM sys.databases AS d
OUTER APPLY (
    SELECT TOP (1) sn.session_id, sn.elapsed_time_seconds, sn.is_snapshot, s.program_name
    FROM sys.dm_tran_active_snapshot_database_transactions AS sn
    LEFT JOIN sys.dm_exec_sessions AS s ON s.session_id = sn.session_id
    WHERE sn.session_id <> @@SPID
    ORDER BY sn.elapsed_time_seconds DESC
) AS o
WHERE d.database_id = DB_ID()
OPTION (MAXDOP 1);

-- name: sessions
-- Every user session of the instance (is_user_process = 1: SQL Server's dozens of system
-- sessions, one per background task, are left out) but the probe's own, the oldest transaction
-- first (then the oldest login), at most %(cap)s; `total` counts them all, before the cap. The
-- same columns as PostgreSQL's, with SQL Server's meaning:
-- - backend_start: login_time, when the session logged in: with its id, the session's identity
--   (a session_id is reused by a later login), as PostgreSQL's backend_start;
-- - leader_pid: always NULL (a parallel query's tasks share their session's id: no session of
--   their own); database: DB_NAME of the session's current database; usename: login_name;
--   application_name: program_name; client: client_net_address, `local` for a shared-memory
--   connection (`<local machine>`); backend_type: `user process`;
-- - state: as in `connections` (`sleeping, open transaction` is PostgreSQL's idle in
--   transaction); xact_age_s: since its oldest open transaction began; query_age_s: since its
--   running request started, or, running nothing, since its last request ended;
-- - wait_event_type and wait_event: as details.sql's `session` (the request's wait_type, and its
--   class: dbcore/sql/mssql/fragments.sql);
-- - blocked_by: JSON text, `[blocking_session_id]` for a request waiting on a lock (LCK_M_*):
--   the lock manager names one blocker per waiting request; -2 (an orphaned distributed
--   transaction) is 0, as PostgreSQL names a prepared transaction; NULL otherwise;
-- - query: the running statement, else the last batch, cut to %(query_chars)s characters
--   (query_is_cut when it was longer).
-- The session that holds the version store back is flagged by the Python side, from
-- `connections` (MssqlProbes.xmin_horizon_holder's answer, Connections.xmin_holder_pid).
-- The DMVs are aggregated first and joined on session_id, rather than applied per session.
WITH requests AS (
    SELECT r.session_id, r.sql_handle, r.statement_start_offset, r.statement_end_offset, r.start_time, r.wait_type,
           r.blocking_session_id,
           ROW_NUMBER() OVER (PARTITION BY r.session_id ORDER BY r.request_id) AS request_rank
    FROM sys.dm_exec_requests AS r
), xact AS (
    SELECT st.session_id, MIN(at.transaction_begin_time) AS began
    FROM sys.dm_tran_session_transactions AS st
    JOIN sys.dm_tran_active_transactions AS at ON at.transaction_id = st.transaction_id
    GROUP BY st.session_id
), listed AS (
    SELECT TOP (CONVERT(int, %(cap)s))
           s.session_id, s.login_time, s.login_name, s.program_name, s.status, s.open_transaction_count, s.database_id,
           c.client_net_address, x.began, s.last_request_end_time,
           rq.start_time, rq.wait_type, {wait_event_type} AS wait_event_type, rq.blocking_session_id,
           COALESCE(rq.sql_handle, c.most_recent_sql_handle) AS sql_handle,
           rq.statement_start_offset, rq.statement_end_offset,
           COUNT(*) OVER () AS total,
           ROW_NUMBER() OVER (ORDER BY CASE WHEN x.began IS NULL THEN 1 ELSE 0 END, x.began, s.login_time, s.session_id)
               AS ordinal
    FROM sys.dm_exec_sessions AS s
    LEFT JOIN requests AS rq ON rq.session_id = s.session_id AND rq.request_rank = 1
    LEFT JOIN xact AS x ON x.session_id = s.session_id
    LEFT JOIN sys.dm_exec_connections AS c ON c.session_id = s.session_id AND c.parent_connection_id IS NULL
    WHERE s.is_user_process = 1 AND s.session_id <> @@SPID
    ORDER BY ordinal
)
SELECT CONVERT(int, l.session_id) AS pid,
       l.login_time AS backend_start,
       CONVERT(int, NULL) AS leader_pid,
       DB_NAME(l.database_id) AS [database],
       l.login_name AS usename,
       l.program_name AS application_name,
       CASE WHEN l.client_net_address = N'<local machine>' THEN N'local' ELSE l.client_net_address END AS client,
       N'user process' AS backend_type,
       LOWER(l.status) + CASE WHEN LOWER(l.status) = N'sleeping' AND l.open_transaction_count > 0
                              THEN N', open transaction' ELSE N'' END AS state,
       CONVERT(float, DATEDIFF_BIG(millisecond, l.began, SYSDATETIME())) / 1000.0 AS xact_age_s,
       CONVERT(float, DATEDIFF_BIG(millisecond, COALESCE(l.start_time, l.last_request_end_time), SYSDATETIME())) / 1000.0
           AS query_age_s,
       l.wait_event_type,
       l.wait_type AS wait_event,
       CASE WHEN l.wait_type LIKE N'LCK[_]M[_]%%' AND (l.blocking_session_id > 0 OR l.blocking_session_id = -2)
            THEN N'[' + CONVERT(nvarchar(11), CASE WHEN l.blocking_session_id = -2 THEN 0 ELSE l.blocking_session_id END) + N']'
            END AS blocked_by,
       LEFT(q.query, CONVERT(int, %(query_chars)s)) AS query,
       CONVERT(bit, CASE WHEN LEN(q.query) > CONVERT(int, %(query_chars)s) THEN 1 ELSE 0 END) AS query_is_cut,
       CONVERT(int, l.total) AS total
FROM listed AS l
OUTER APPLY sys.dm_exec_sql_text(l.sql_handle) AS t
OUTER APPLY (
    SELECT CASE WHEN l.statement_start_offset IS NOT NULL
                THEN SUBSTRING(t.text, l.statement_start_offset / 2 + 1,
                               (CASE WHEN l.statement_end_offset = -1 THEN DATALENGTH(t.text)
                                     ELSE l.statement_end_offset END - l.statement_start_offset) / 2 + 1)
                ELSE t.text END AS query
) AS q
ORDER BY l.ordinal
OPTION (MAXDOP 1);
