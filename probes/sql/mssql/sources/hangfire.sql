-- Hangfire (https://www.hangfire.io) on SQL Server, read by probes/sources/hangfire.py. SQL Server
-- only: Hangfire's PostgreSQL storage is a third-party package with another schema.
--
-- What this relies on, from HangfireIO/Hangfire (src/Hangfire.SqlServer):
-- - DefaultInstall.sql / Install.sql: [<schema>].[Job] (Id bigint since schema 6, StateId,
--   StateName nvarchar(20), InvocationData nvarchar(max), CreatedAt datetime), index
--   IX_HangFire_Job_StateName (StateName) (filtered WHERE StateName IS NOT NULL since schema 6);
--   [<schema>].[State] (Id, JobId, Name nvarchar(20), Reason nvarchar(100), CreatedAt datetime,
--   Data nvarchar(max)), clustered (JobId, Id) since schema 6; [<schema>].[JobQueue] (Id, JobId,
--   Queue nvarchar(50), FetchedAt datetime), clustered (Queue, Id) since schema 6 (before: (Id),
--   plus IX_HangFire_JobQueue_QueueAndFetchedAt); [<schema>].[Schema] (Version int). Every time
--   is written by GETUTCDATE() or DateTime.UtcNow: UTC, datetime.
-- - SqlServerJobQueue.cs: a worker takes the first row of its queues that is
--   `FetchedAt IS NULL OR FetchedAt < DATEADD(second, -timeout, GETUTCDATE())`, through
--   `WITH (FORCESEEK, READPAST, UPDLOCK, ROWLOCK)`, either by setting FetchedAt (sliding
--   invisibility timeout: the 1.8 default, 5 minutes, SqlServerStorageOptions) or by deleting
--   the row inside a transaction held open while the job runs (no sliding timeout: the default
--   before 1.8). SqlServerTimeoutJob.cs keeps FetchedAt fresh (a keep-alive every timeout / 5)
--   and deletes the row (by Id and FetchedAt) when the job is done.
-- - SqlServerJobQueueMonitoringApi.cs lists queues as `SELECT DISTINCT Queue FROM JobQueue`
--   (a scan): here they are found by one index seek per queue instead (queues).
-- - FailedState.cs / ScheduledState.cs / EnqueuedState data keys (FailedAt, ExceptionType,
--   ExceptionMessage; EnqueueAt, Queue), InvocationData.cs payload keys (t, m, q since 1.7's
--   compact payload; Type, Method, Queue before).
--
-- {table} is the Hangfire schema, quoted ([HangFire] by default): each statement names the
-- tables as {table}.[JobQueue], {table}.[Job], {table}.[State], {table}.[Schema].
--
-- Every read of Hangfire's tables takes short shared row locks and skips rows another
-- transaction holds (ROWLOCK, READPAST, with READCOMMITTEDLOCK because READPAST is refused under
-- READ_COMMITTED_SNAPSHOT otherwise), and stops at a TOP (n) or is a MIN/MAX: its cost does not
-- grow with the depth of a queue. FORCESEEK pins the seeks Hangfire's own statements make (an
-- index that is missing makes the statement fail, error 8622, rather than scan).

-- name: version
-- The schema version Hangfire's installer recorded (one row).
SELECT TOP (1) CONVERT(nvarchar(20), s.[Version]) AS version
FROM {table}.[Schema] AS s WITH (ROWLOCK, READPAST, READCOMMITTEDLOCK)
ORDER BY s.[Version] DESC;

-- name: layout
-- The catalog's view of the tables (no row of them is read): the object ids, whether JobQueue is
-- clustered on (Queue, Id) (schema 6 and later: a queue's window is then one range seek), and
-- the index that leads with Job.StateName (its statistics give the per-state estimates).
WITH ids AS (
    SELECT OBJECT_ID(CONCAT(QUOTENAME(CONVERT(sysname, %(schema)s)), N'.[JobQueue]')) AS jobqueue,
           OBJECT_ID(CONCAT(QUOTENAME(CONVERT(sysname, %(schema)s)), N'.[Job]')) AS job
)
SELECT ids.jobqueue AS jobqueue_relid,
       ids.job AS job_relid,
       CONVERT(bit, CASE WHEN EXISTS (
           SELECT 1
           FROM sys.index_columns AS ic
           JOIN sys.columns AS c ON c.object_id = ic.object_id AND c.column_id = ic.column_id
           WHERE ic.object_id = ids.jobqueue AND ic.index_id = 1 AND ic.key_ordinal = 1 AND c.name = N'Queue'
       ) THEN 1 ELSE 0 END) AS queue_clustered,
       (SELECT MIN(ic.index_id)
        FROM sys.index_columns AS ic
        JOIN sys.columns AS c ON c.object_id = ic.object_id AND c.column_id = ic.column_id
        WHERE ic.object_id = ids.job AND ic.key_ordinal = 1 AND c.name = N'StateName') AS state_index_id
FROM ids;

-- name: queues
-- The distinct queue names of JobQueue, in order, at most `max_queues`: one MIN seek per queue on
-- the index that leads with Queue (the clustered one, or IX_HangFire_JobQueue_QueueAndFetchedAt
-- before schema 6), not Hangfire's own DISTINCT scan. A queue whose only rows are held by open
-- transactions is skipped (READPAST). Returned as rows of one column, `queue`.
SET NOCOUNT ON;
DECLARE @max int = CONVERT(int, %(max_queues)s);
DECLARE @found int = 0;
DECLARE @queue nvarchar(100);
DECLARE @list nvarchar(max) = N'[]';
SET @queue = (SELECT MIN(q.[Queue]) FROM {table}.[JobQueue] AS q WITH (ROWLOCK, READPAST, READCOMMITTEDLOCK));
WHILE @queue IS NOT NULL AND @found < @max
BEGIN
    SET @list = JSON_MODIFY(@list, N'append $', @queue);
    SET @found = @found + 1;
    SET @queue = (SELECT MIN(q.[Queue]) FROM {table}.[JobQueue] AS q WITH (ROWLOCK, READPAST, READCOMMITTEDLOCK)
                  WHERE q.[Queue] > @queue);
END;
SELECT CONVERT(nvarchar(100), j.[value]) AS [queue]
FROM OPENJSON(@list) AS j
ORDER BY CONVERT(int, j.[key]);
SET NOCOUNT OFF;

-- name: queue_windows
-- For each queue of `queues` (a JSON array), its first `window` rows in Id order (Hangfire's
-- fetch order: its TOP (1) seeks (Queue, Id)), one range seek each:
-- - head_rows: rows read; in_flight: rows whose FetchedAt is within the invisibility timeout
--   (`timeout_s`: a worker has them, and keeps FetchedAt fresh). The others are ready: never
--   fetched, or fetched longer ago than the timeout, which Hangfire's fetch takes again.
-- - oldest_ready_age_s: seconds since the first ready row (the one Hangfire's fetch takes next)
--   became claimable: its Enqueued state's CreatedAt (the job's CreatedAt if the state moved on),
--   or FetchedAt + the timeout for a row whose worker stopped renewing it.
-- - last_head_id, max_id: the last Id read and the queue's highest Id (the end of its index
--   range): the Python side splits the rows past the windows by them.
-- - table_rows: JobQueue's row count (sys.dm_db_partition_stats, or sys.partitions without VIEW
--   DATABASE STATE: approximate), the same on every row.
-- - held: rows other sessions hold with an exclusive key lock on JobQueue's clustered index
--   (sys.dm_tran_locks): jobs taken by the transactional fetch (a DELETE in a transaction kept
--   open while the job runs), which READPAST skips, and enqueues not yet committed. The lock
--   does not say which queue a row is in. NULL without VIEW SERVER STATE (2022: VIEW SERVER
--   PERFORMANCE STATE; Azure SQL Database: VIEW DATABASE STATE). The same on every row.
SET NOCOUNT ON;
DECLARE @window int = CONVERT(int, %(window)s);
DECLARE @timeout int = CONVERT(int, %(timeout_s)s);
DECLARE @queues nvarchar(max) = CONVERT(nvarchar(max), %(queues)s);
DECLARE @object_id int = OBJECT_ID(N'{table}.[JobQueue]');
DECLARE @now datetime = GETUTCDATE();
DECLARE @fetch_expired_before datetime = DATEADD(second, -@timeout, @now);
DECLARE @rows bigint;
DECLARE @held bigint;
IF HAS_PERMS_BY_NAME(DB_NAME(), N'DATABASE', N'VIEW DATABASE STATE') = 1
   OR HAS_PERMS_BY_NAME(DB_NAME(), N'DATABASE', N'VIEW DATABASE PERFORMANCE STATE') = 1
    SELECT @rows = SUM(ps.row_count) FROM sys.dm_db_partition_stats AS ps WHERE ps.object_id = @object_id AND ps.index_id IN (0, 1);
ELSE
    SELECT @rows = SUM(p.rows) FROM sys.partitions AS p WHERE p.object_id = @object_id AND p.index_id IN (0, 1);
IF HAS_PERMS_BY_NAME(NULL, NULL, N'VIEW SERVER STATE') = 1
   OR HAS_PERMS_BY_NAME(NULL, NULL, N'VIEW SERVER PERFORMANCE STATE') = 1
   OR (CONVERT(int, SERVERPROPERTY('EngineEdition')) = 5 AND HAS_PERMS_BY_NAME(DB_NAME(), N'DATABASE', N'VIEW DATABASE STATE') = 1)
    SELECT @held = COUNT_BIG(*)
    FROM sys.dm_tran_locks AS l
    WHERE l.resource_database_id = DB_ID() AND l.resource_type = N'KEY' AND l.request_mode = N'X'
      AND l.request_status = N'GRANT' AND l.request_session_id <> @@SPID
      AND l.resource_associated_entity_id IN (SELECT p.hobt_id FROM sys.partitions AS p WHERE p.object_id = @object_id AND p.index_id = 1);
WITH windows AS (
    SELECT q.[queue],
           COUNT_BIG(w.Id) AS head_rows,
           ISNULL(SUM(CASE WHEN w.FetchedAt >= @fetch_expired_before THEN 1 ELSE 0 END), 0) AS in_flight,
           MIN(CASE WHEN w.FetchedAt IS NULL OR w.FetchedAt < @fetch_expired_before THEN w.Id END) AS first_ready_id,
           MAX(w.Id) AS last_head_id
    FROM (SELECT CONVERT(nvarchar(100), j.[value]) AS [queue] FROM OPENJSON(@queues) AS j) AS q
    OUTER APPLY (
        SELECT TOP (@window) jq.Id, jq.FetchedAt
        FROM {table}.[JobQueue] AS jq WITH (FORCESEEK, ROWLOCK, READPAST, READCOMMITTEDLOCK)
        WHERE jq.[Queue] = q.[queue]
        ORDER BY jq.Id
    ) AS w
    GROUP BY q.[queue]
)
SELECT wn.[queue],
       wn.head_rows,
       wn.in_flight,
       CONVERT(float, DATEDIFF_BIG(microsecond, rs.ready_since, @now)) / 1000000.0 AS oldest_ready_age_s,
       ISNULL(wn.last_head_id, 0) AS last_head_id,
       ISNULL((SELECT MAX(jq.Id) FROM {table}.[JobQueue] AS jq WITH (FORCESEEK, ROWLOCK, READPAST, READCOMMITTEDLOCK)
               WHERE jq.[Queue] = wn.[queue]), 0) AS max_id,
       @rows AS table_rows,
       @held AS held
FROM windows AS wn
OUTER APPLY (
    SELECT TOP (1) jq.JobId, jq.FetchedAt
    FROM {table}.[JobQueue] AS jq WITH (FORCESEEK, ROWLOCK, READPAST, READCOMMITTEDLOCK)
    WHERE jq.[Queue] = wn.[queue] AND jq.Id = wn.first_ready_id
) AS fr
OUTER APPLY (
    SELECT TOP (1) jb.CreatedAt, jb.StateId
    FROM {table}.[Job] AS jb WITH (ROWLOCK, READPAST, READCOMMITTEDLOCK)
    WHERE jb.Id = fr.JobId
) AS jo
OUTER APPLY (
    SELECT TOP (1) st.CreatedAt
    FROM {table}.[State] AS st WITH (ROWLOCK, READPAST, READCOMMITTEDLOCK)
    WHERE st.JobId = fr.JobId AND st.Id = jo.StateId AND st.Name = N'Enqueued'
) AS es
CROSS APPLY (
    SELECT CASE WHEN fr.FetchedAt IS NOT NULL THEN DATEADD(second, @timeout, fr.FetchedAt)
                ELSE COALESCE(es.CreatedAt, jo.CreatedAt) END AS ready_since
) AS rs
ORDER BY wn.[queue];
SET NOCOUNT OFF;

-- name: job_states
-- The jobs Hangfire keeps out of its queues, by their state (Job.StateName), each counted up to
-- `cap` through the StateName index (one range seek each):
-- - scheduled: `Scheduled`, waiting for their EnqueueAt (delayed jobs, and automatic retries
--   backing off); awaiting: `Awaiting`, continuations waiting for their parent job; failed:
--   `Failed`, retries exhausted (Hangfire keeps them, unexpiring, until retried or deleted).
-- - *_estimate: the row count of that state in the StateName index's statistics histogram
--   (sys.dm_db_stats_histogram of `stats_id` on `job_relid`: as of the last statistics update),
--   read for the Python side to use where a count reached the cap; NULL when there is no such
--   index. The histogram needs SELECT on the table only.
SET NOCOUNT ON;
DECLARE @cap int = CONVERT(int, %(cap)s);
DECLARE @job int = CONVERT(int, %(job_relid)s);
DECLARE @stats int = CONVERT(int, %(stats_id)s);
DECLARE @scheduled_estimate float;
DECLARE @awaiting_estimate float;
DECLARE @failed_estimate float;
IF @job IS NOT NULL AND @stats IS NOT NULL
    SELECT @scheduled_estimate = SUM(CASE WHEN CONVERT(nvarchar(20), h.range_high_key) = N'Scheduled' THEN h.equal_rows END),
           @awaiting_estimate = SUM(CASE WHEN CONVERT(nvarchar(20), h.range_high_key) = N'Awaiting' THEN h.equal_rows END),
           @failed_estimate = SUM(CASE WHEN CONVERT(nvarchar(20), h.range_high_key) = N'Failed' THEN h.equal_rows END)
    FROM sys.dm_db_stats_histogram(@job, @stats) AS h;
SELECT (SELECT COUNT_BIG(*) FROM (SELECT TOP (@cap) j.Id FROM {table}.[Job] AS j WITH (FORCESEEK, ROWLOCK, READPAST, READCOMMITTEDLOCK)
                                  WHERE j.StateName = N'Scheduled') AS x) AS scheduled,
       (SELECT COUNT_BIG(*) FROM (SELECT TOP (@cap) j.Id FROM {table}.[Job] AS j WITH (FORCESEEK, ROWLOCK, READPAST, READCOMMITTEDLOCK)
                                  WHERE j.StateName = N'Awaiting') AS x) AS awaiting,
       (SELECT COUNT_BIG(*) FROM (SELECT TOP (@cap) j.Id FROM {table}.[Job] AS j WITH (FORCESEEK, ROWLOCK, READPAST, READCOMMITTEDLOCK)
                                  WHERE j.StateName = N'Failed') AS x) AS failed,
       @scheduled_estimate AS scheduled_estimate,
       @awaiting_estimate AS awaiting_estimate,
       @failed_estimate AS failed_estimate;
SET NOCOUNT OFF;

-- name: head
-- Enter on a queue: its first `limit` rows in Id order, each with its job (type and method from
-- InvocationData, `t`/`m` or `Type`/`Method`). A row taken by the transactional fetch is held
-- and skipped, not shown.
SELECT TOP (CONVERT(int, %(limit)s)) jq.Id AS queue_row_id, jq.JobId AS job_id,
       CASE WHEN jq.FetchedAt >= DATEADD(second, -CONVERT(int, %(timeout_s)s), GETUTCDATE()) THEN N'in flight'
            ELSE N'ready' END AS state,
       jq.FetchedAt AS fetched_at,
       jb.CreatedAt AS created_at,
       jb.StateName AS job_state,
       jb.job_type,
       jb.job_method
FROM {table}.[JobQueue] AS jq WITH (FORCESEEK, ROWLOCK, READPAST, READCOMMITTEDLOCK)
OUTER APPLY (
    SELECT TOP (1) j.CreatedAt, j.StateName,
           LEFT(CASE WHEN ISJSON(j.InvocationData) = 1
                     THEN COALESCE(JSON_VALUE(j.InvocationData, N'$.t'), JSON_VALUE(j.InvocationData, N'$.Type')) END, 200) AS job_type,
           LEFT(CASE WHEN ISJSON(j.InvocationData) = 1
                     THEN COALESCE(JSON_VALUE(j.InvocationData, N'$.m'), JSON_VALUE(j.InvocationData, N'$.Method')) END, 100) AS job_method
    FROM {table}.[Job] AS j WITH (ROWLOCK, READPAST, READCOMMITTEDLOCK)
    WHERE j.Id = jq.JobId
) AS jb
WHERE jq.[Queue] = CONVERT(nvarchar(100), %(queue)s)
ORDER BY jq.Id;

-- name: waiting_head
-- Enter on the jobs that are not queued: the oldest `limit` Scheduled and Awaiting jobs (by Id),
-- with their state's reason (a retry says "Retry attempt n of m: ..."), EnqueueAt (Scheduled,
-- as Hangfire serialized it), ParentId (Awaiting), and the queue Hangfire recorded for them, if
-- any (the state's Queue, or the job's own: InvocationData `q` / `Queue`, Hangfire 1.8).
WITH scheduled AS (
    SELECT TOP (CONVERT(int, %(limit)s)) j.Id, j.StateId, j.StateName, j.CreatedAt, j.InvocationData
    FROM {table}.[Job] AS j WITH (FORCESEEK, ROWLOCK, READPAST, READCOMMITTEDLOCK)
    WHERE j.StateName = N'Scheduled'
    ORDER BY j.Id
), awaiting AS (
    SELECT TOP (CONVERT(int, %(limit)s)) j.Id, j.StateId, j.StateName, j.CreatedAt, j.InvocationData
    FROM {table}.[Job] AS j WITH (FORCESEEK, ROWLOCK, READPAST, READCOMMITTEDLOCK)
    WHERE j.StateName = N'Awaiting'
    ORDER BY j.Id
), waiting AS (
    SELECT s.Id, s.StateId, s.StateName, s.CreatedAt, s.InvocationData FROM scheduled AS s
    UNION ALL
    SELECT a.Id, a.StateId, a.StateName, a.CreatedAt, a.InvocationData FROM awaiting AS a
)
SELECT TOP (CONVERT(int, %(limit)s)) w.Id AS job_id,
       w.StateName AS job_state,
       w.CreatedAt AS created_at,
       st.CreatedAt AS state_since,
       st.Reason AS reason,
       CASE WHEN ISJSON(st.Data) = 1 THEN JSON_VALUE(st.Data, N'$.EnqueueAt') END AS enqueue_at,
       CASE WHEN ISJSON(st.Data) = 1 THEN JSON_VALUE(st.Data, N'$.ParentId') END AS parent_id,
       COALESCE(CASE WHEN ISJSON(st.Data) = 1 THEN JSON_VALUE(st.Data, N'$.Queue') END,
                CASE WHEN ISJSON(w.InvocationData) = 1
                     THEN COALESCE(JSON_VALUE(w.InvocationData, N'$.q'), JSON_VALUE(w.InvocationData, N'$.Queue')) END) AS [queue],
       LEFT(CASE WHEN ISJSON(w.InvocationData) = 1
                 THEN COALESCE(JSON_VALUE(w.InvocationData, N'$.t'), JSON_VALUE(w.InvocationData, N'$.Type')) END, 200) AS job_type,
       LEFT(CASE WHEN ISJSON(w.InvocationData) = 1
                 THEN COALESCE(JSON_VALUE(w.InvocationData, N'$.m'), JSON_VALUE(w.InvocationData, N'$.Method')) END, 100) AS job_method
FROM waiting AS w
OUTER APPLY (
    SELECT TOP (1) s.CreatedAt, s.Reason, s.Data
    FROM {table}.[State] AS s WITH (ROWLOCK, READPAST, READCOMMITTEDLOCK)
    WHERE s.JobId = w.Id AND s.Id = w.StateId
) AS st
ORDER BY w.Id;

-- name: failed
-- Enter: failed jobs, newest (highest Id) first, with their Failed state's reason, exception type
-- and message, and the queue each last ran on (the Queue of its latest Enqueued state). Of the
-- newest `scan` failed jobs, the first `limit` of `queue` (NULL: of any queue).
WITH failed AS (
    SELECT TOP (CONVERT(int, %(scan)s)) j.Id, j.StateId, j.CreatedAt, j.InvocationData
    FROM {table}.[Job] AS j WITH (FORCESEEK, ROWLOCK, READPAST, READCOMMITTEDLOCK)
    WHERE j.StateName = N'Failed'
    ORDER BY j.Id DESC
), attributed AS (
    SELECT f.Id, f.StateId, f.CreatedAt, f.InvocationData, eq.[queue]
    FROM failed AS f
    OUTER APPLY (
        SELECT TOP (1) CASE WHEN ISJSON(s.Data) = 1 THEN JSON_VALUE(s.Data, N'$.Queue') END AS [queue]
        FROM {table}.[State] AS s WITH (ROWLOCK, READPAST, READCOMMITTEDLOCK)
        WHERE s.JobId = f.Id AND s.Name = N'Enqueued'
        ORDER BY s.Id DESC
    ) AS eq
)
SELECT TOP (CONVERT(int, %(limit)s)) a.Id AS job_id,
       a.[queue],
       a.CreatedAt AS created_at,
       st.CreatedAt AS failed_at,
       st.Reason AS reason,
       LEFT(CASE WHEN ISJSON(st.Data) = 1 THEN JSON_VALUE(st.Data, N'$.ExceptionType') END, 200) AS exception_type,
       LEFT(CASE WHEN ISJSON(st.Data) = 1 THEN JSON_VALUE(st.Data, N'$.ExceptionMessage') END, 300) AS exception_message,
       LEFT(CASE WHEN ISJSON(a.InvocationData) = 1
                 THEN COALESCE(JSON_VALUE(a.InvocationData, N'$.t'), JSON_VALUE(a.InvocationData, N'$.Type')) END, 200) AS job_type,
       LEFT(CASE WHEN ISJSON(a.InvocationData) = 1
                 THEN COALESCE(JSON_VALUE(a.InvocationData, N'$.m'), JSON_VALUE(a.InvocationData, N'$.Method')) END, 100) AS job_method
FROM attributed AS a
OUTER APPLY (
    SELECT TOP (1) s.CreatedAt, s.Reason, s.Data
    FROM {table}.[State] AS s WITH (ROWLOCK, READPAST, READCOMMITTEDLOCK)
    WHERE s.JobId = a.Id AND s.Id = a.StateId
) AS st
WHERE CONVERT(nvarchar(100), %(queue)s) IS NULL OR a.[queue] = CONVERT(nvarchar(100), %(queue)s)
ORDER BY a.Id DESC;
