-- The server the snapshot describes, SQL Server 2019 and later (and Azure SQL). The same names,
-- %(name)s parameters and result columns, in the same order, as postgresql/server.sql, plus
-- permission_check (SQL Server only).
--
-- Conventions of every file in this directory:
-- - Read only: SELECT, and DECLARE/SET of local variables in a batch. A batch of several
--   statements starts with SET NOCOUNT ON (so that the driver's first result is the batch's one
--   result set) and ends with SET NOCOUNT OFF (a batch sent without parameters runs at session
--   scope, and probe sessions are pooled).
-- - The probe session is identified by @@SPID and left out wherever PostgreSQL leaves out
--   pg_backend_pid(). The session itself is set up by the Python side (SET LOCK_TIMEOUT, a
--   client-side query timeout, APP=queuetop-probe): nothing here changes a session option.
-- - A list parameter arrives as JSON text (`[1, 2]`) and is read with OPENJSON; where PostgreSQL
--   returns an array or json, a JSON text column comes back. Booleans come back as bit.
-- - Times of the engine's tables are datetime2 on SYSUTCDATETIME() (UTC). The DMVs' times
--   (transaction_begin_time, login_time, start_time) are the server's local time: their ages
--   are measured against SYSDATETIME().
-- - Dynamic management views need VIEW SERVER STATE (SQL Server 2022: VIEW SERVER PERFORMANCE
--   STATE; Azure SQL Database: VIEW DATABASE STATE), and the index DMVs VIEW DATABASE STATE.
--   Without it a DMV either shows the probe's own session only (sys.dm_exec_sessions,
--   sys.dm_exec_requests) or fails the statement (error 297/300). Where a cheaper, permission-
--   free source exists (sys.partitions for row counts) a statement falls back to it under an IF
--   on HAS_PERMS_BY_NAME; permission_check says what this login can see.
-- - A literal percent sign is written %% (the LIKE wildcard too).

-- name: server_info
-- version_num: major version * 100000 + build (16.0.4135 -> 1604135); Azure SQL Database reports
-- major version 12. deadlock_timeout_s: SQL Server has no deadlock_timeout setting; its lock
-- monitor looks for wait cycles every 5 seconds (more often while it keeps finding deadlocks),
-- so 5 s is how long a cycle can last before one of its sessions is chosen as the victim.
SELECT CONCAT(CONVERT(nvarchar(128), SERVERPROPERTY('ProductVersion')), N' ',
              CONVERT(nvarchar(128), SERVERPROPERTY('Edition'))) AS version,
       ISNULL(CONVERT(int, SERVERPROPERTY('ProductMajorVersion')), 0) * 100000
           + ISNULL(CONVERT(int, SERVERPROPERTY('ProductBuild')), 0) AS version_num,
       DB_NAME() AS [database],
       CONVERT(int, @@SPID) AS own_pid,
       CONVERT(float, 5.0) AS deadlock_timeout_s;

-- name: table_present
-- Whether a table is there (the probes skip what is not installed). OBJECT_ID is NULL as well
-- for an object this login may not see (metadata visibility), as to_regclass is.
SELECT CONVERT(bit, CASE WHEN OBJECT_ID(CONVERT(nvarchar(776), %(table)s)) IS NOT NULL THEN 1 ELSE 0 END) AS present;

-- name: tables_present
-- The same for every table the sources asked about in the previous cycle, in one statement
-- (`tables` is a JSON array of schema-qualified names).
SELECT CONVERT(nvarchar(776), j.[value]) AS name,
       CONVERT(bit, CASE WHEN OBJECT_ID(CONVERT(nvarchar(776), j.[value])) IS NOT NULL THEN 1 ELSE 0 END) AS present
FROM OPENJSON(CONVERT(nvarchar(max), %(tables)s)) AS j;

-- name: permission_check
-- SQL Server only. What this login can see, so that the probes can say what they are missing
-- instead of reporting an empty lock tree. Each column is 1 or 0, and NULL where the permission
-- does not exist in this version (the *_PERFORMANCE_STATE ones are SQL Server 2022's).
-- sees_server_state: whether the session DMVs (blocked tree, connections, version store) show
-- every session; select_on_queuetop: whether the engine's tables can be read (NULL: no
-- queuetop schema). engine_edition 5 is Azure SQL Database, 8 Azure SQL Managed Instance.
SELECT CONVERT(bit, HAS_PERMS_BY_NAME(NULL, NULL, N'VIEW SERVER STATE')) AS view_server_state,
       CONVERT(bit, HAS_PERMS_BY_NAME(NULL, NULL, N'VIEW SERVER PERFORMANCE STATE')) AS view_server_performance_state,
       CONVERT(bit, HAS_PERMS_BY_NAME(DB_NAME(), N'DATABASE', N'VIEW DATABASE STATE')) AS view_database_state,
       CONVERT(bit, HAS_PERMS_BY_NAME(DB_NAME(), N'DATABASE', N'VIEW DATABASE PERFORMANCE STATE')) AS view_database_performance_state,
       CONVERT(bit, CASE WHEN HAS_PERMS_BY_NAME(NULL, NULL, N'VIEW SERVER STATE') = 1
                           OR HAS_PERMS_BY_NAME(NULL, NULL, N'VIEW SERVER PERFORMANCE STATE') = 1
                           OR (CONVERT(int, SERVERPROPERTY('EngineEdition')) = 5
                               AND HAS_PERMS_BY_NAME(DB_NAME(), N'DATABASE', N'VIEW DATABASE STATE') = 1)
                         THEN 1 ELSE 0 END) AS sees_server_state,
       CONVERT(bit, HAS_PERMS_BY_NAME(N'queuetop', N'SCHEMA', N'SELECT')) AS select_on_queuetop,
       CONVERT(int, SERVERPROPERTY('EngineEdition')) AS engine_edition;
