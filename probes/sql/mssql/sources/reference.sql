-- The reference engine's table queues (queuetop.queues, one table per queue), SQL Server. The
-- same names, %(name)s parameters, {fields} and result columns, in the same order, as
-- postgresql/sources/reference.sql.
--
-- How the queue tables are read (queues/sql/mssql/queries.sql, create_queue_table): clustered
-- primary key on id, no other index. Every read of a queue's rows is a TOP (n) scan of that
-- index in id order (INDEX(1)), so it stops after n rows whatever the depth. It takes short
-- shared row locks (ROWLOCK) and skips rows another transaction holds exclusively (READPAST),
-- instead of waiting for them: under locking read committed a message that a hold-transaction
-- consumer has deleted (and not committed) holds an exclusive key lock, and a plain read would
-- wait for that consumer. READCOMMITTEDLOCK because READPAST is refused under
-- READ_COMMITTED_SNAPSHOT otherwise. What READPAST skips is counted from the lock manager
-- instead (head_window).

-- name: registry
-- The engine's queues; the table's object id comes from the catalog, not from text we built.
-- A queue registered by a transaction that has not committed is skipped (READPAST).
SELECT q.name, s.name AS schema_name, t.name AS table_name, t.object_id AS relid
FROM queuetop.queues AS q WITH (ROWLOCK, READPAST, READCOMMITTEDLOCK)
JOIN sys.schemas AS s ON s.name = N'queuetop'
JOIN sys.tables AS t ON t.schema_id = s.schema_id AND t.name = q.table_name COLLATE DATABASE_DEFAULT
ORDER BY q.name;

-- name: head_window
-- Claims take the oldest visible row (ORDER BY id), so claimed and backing-off rows sit at the
-- head: the first `window` rows hold them all, and the rows past the window are ready. A row is
-- in flight when claimed with a visibility deadline still ahead (claim mode), or when an open
-- transaction holds it (hold-transaction mode). Delayed rows wait out a retry back-off.
-- Differences from PostgreSQL, where the columns keep their names:
-- - Rows an open transaction holds are skipped by the read (READPAST) and counted from
--   sys.dm_tran_locks instead: the exclusive (X) key locks other sessions hold on the table's
--   clustered index. They are added to head_rows and in_flight. That count also takes in rows
--   inserted by a transaction that has not committed (which PostgreSQL does not see at all); it
--   does not take in rows held with an update lock only (they are read, and count as ready).
--   Without VIEW SERVER STATE it is not read: held rows are then missing from the figures.
-- - last_head_id, max_id: the Python side computes depth past the window as head_rows +
--   (max_id - last_head_id), PostgreSQL's id span. On SQL Server every queue takes its ids from
--   one shared sequence (schema.sql, queuetop.message_ids), so an id span would count other
--   queues' messages: max_id is last_head_id plus the rows past the window according to the
--   table's row count (sys.dm_db_partition_stats, or sys.partitions without VIEW DATABASE
--   STATE: approximate), so that the same arithmetic gives that count. last_head_id is the
--   last id read (0 when none was). Past the window, depth is flagged as an estimate, as on
--   PostgreSQL.
-- - oldest_ready_age_s: seconds (float) since the oldest ready row read was enqueued.
SET NOCOUNT ON;
DECLARE @window int = CONVERT(int, %(window)s);
DECLARE @object_id int = OBJECT_ID(N'{table}');
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
WITH head AS (
    SELECT TOP (@window) h.id, h.enqueued_at,
           CASE WHEN h.claim_token IS NOT NULL AND h.visible_at > SYSUTCDATETIME() THEN 1 ELSE 0 END AS claimed,
           CASE WHEN h.claim_token IS NULL AND h.visible_at > SYSUTCDATETIME() THEN 1 ELSE 0 END AS backing_off
    FROM {table} AS h WITH (ROWLOCK, READPAST, READCOMMITTEDLOCK, INDEX(1))
    ORDER BY h.id
), seen AS (
    SELECT COUNT_BIG(*) + ISNULL(@held, 0) AS head_rows,
           ISNULL(SUM(hd.claimed), 0) + ISNULL(@held, 0) AS in_flight,
           ISNULL(SUM(hd.backing_off), 0) AS delayed,
           MIN(CASE WHEN hd.claimed = 0 AND hd.backing_off = 0 THEN hd.enqueued_at END) AS oldest_ready_at,
           ISNULL(MAX(hd.id), 0) AS last_head_id
    FROM head AS hd
)
SELECT sn.head_rows,
       sn.in_flight,
       sn.delayed,
       CONVERT(float, DATEDIFF_BIG(microsecond, sn.oldest_ready_at, SYSUTCDATETIME())) / 1000000.0 AS oldest_ready_age_s,
       sn.last_head_id,
       sn.last_head_id + CASE WHEN @rows > sn.head_rows THEN @rows - sn.head_rows ELSE 0 END AS max_id
FROM seen AS sn;
SET NOCOUNT OFF;

-- name: dead_letters
-- Exact up to `cap`, then the id span of the queue's dead letters (two seeks of the index
-- ([queue], id)); the ids are one identity shared by every queue's dead letters, as on
-- PostgreSQL. Dead letters written by a transaction that has not committed are skipped.
SELECT (SELECT COUNT_BIG(*)
        FROM (SELECT TOP (CONVERT(int, %(cap)s)) d.id
              FROM queuetop.dead_letters AS d WITH (ROWLOCK, READPAST, READCOMMITTEDLOCK)
              WHERE d.[queue] = CONVERT(nvarchar(128), %(queue)s)) AS capped) AS counted,
       (SELECT MAX(d.id) - MIN(d.id) + 1
        FROM queuetop.dead_letters AS d WITH (ROWLOCK, READPAST, READCOMMITTEDLOCK)
        WHERE d.[queue] = CONVERT(nvarchar(128), %(queue)s)) AS span;

-- name: table_of
-- Enter: the table of one queue.
SELECT s.name AS schema_name, t.name AS table_name
FROM queuetop.queues AS q WITH (ROWLOCK, READPAST, READCOMMITTEDLOCK)
JOIN sys.schemas AS s ON s.name = N'queuetop'
JOIN sys.tables AS t ON t.schema_id = s.schema_id AND t.name = q.table_name COLLATE DATABASE_DEFAULT
WHERE q.name = CONVERT(nvarchar(128), %(queue)s);

-- name: head
-- Enter: the first `limit` rows in id order. Rows an open transaction holds (hold-transaction
-- mode) are skipped, not shown: SQL Server cannot read them without waiting.
SELECT TOP (CONVERT(int, %(limit)s)) h.id, h.enqueued_at, h.attempts,
       CASE WHEN h.claim_token IS NOT NULL AND h.visible_at > SYSUTCDATETIME() THEN N'in flight'
            WHEN h.visible_at > SYSUTCDATETIME() THEN N'delayed'
            ELSE N'ready' END AS state,
       LEFT(h.body, 200) AS body, h.last_error
FROM {table} AS h WITH (ROWLOCK, READPAST, READCOMMITTEDLOCK, INDEX(1))
ORDER BY h.id;

-- name: dead_head
-- Enter: the queue's newest dead letters (a backward seek of ([queue], id)).
SELECT TOP (CONVERT(int, %(limit)s)) d.message_id, d.attempts, d.died_at, LEFT(d.last_error, 300) AS last_error,
       LEFT(d.body, 200) AS body
FROM queuetop.dead_letters AS d WITH (ROWLOCK, READPAST, READCOMMITTEDLOCK)
WHERE d.[queue] = CONVERT(nvarchar(128), %(queue)s)
ORDER BY d.id DESC;
