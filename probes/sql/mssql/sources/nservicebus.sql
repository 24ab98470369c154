-- NServiceBus's SQL Server transport (NServiceBus.Transport.SqlServer), read by
-- probes/sources/nservicebus.py. SQL Server only (the PostgreSQL transport has its own tables).
--
-- What this relies on, from Particular/NServiceBus.SqlServer
-- (src/NServiceBus.Transport.SqlServer/Queuing/SqlConstants.cs and SqlServerConstants.cs):
-- - CreateQueueText: a queue is a table of its own, `Id uniqueidentifier NOT NULL, CorrelationId
--   varchar(255), ReplyToAddress varchar(255), Recoverable bit NOT NULL, Expires datetime,
--   Headers nvarchar(max) NOT NULL, Body varbinary(max), RowVersion bigint IDENTITY(1,1) NOT
--   NULL`: a heap with a nonclustered Index_RowVersion (RowVersion) and a filtered Index_Expires
--   (older versions clustered the table on RowVersion). The newest versions also send to tables
--   without Recoverable (SendTextWithoutRecoverable, CheckIfTableHasRecoverableText), so a
--   table is recognised by Id, Expires, Headers, Body and RowVersion; CorrelationId,
--   ReplyToAddress and Recoverable are not required.
-- - ReceiveText: a receive is `WITH message AS (SELECT TOP(1) * FROM q WITH (UPDLOCK, READPAST,
--   ROWLOCK) ORDER BY RowVersion) DELETE FROM message OUTPUT ...`, inside the receive's
--   transaction (native or TransactionScope modes) until the handler is done: a message being
--   handled is a deleted row that its receiver's open transaction still holds. The receive flags
--   a row whose `Expires` is not after GETUTCDATE() as expired and discards it unprocessed
--   (PurgeBatchOfExpiredMessagesText deletes them too): times are UTC, datetime.
-- - CreateDelayedMessageStoreText: delayed messages wait in `Headers nvarchar(max), Body
--   varbinary(max), Due datetime NOT NULL, RowVersion bigint IDENTITY` with Index_Due, until
--   MoveDueDelayedMessageText moves those with `Due < GETUTCDATE()` into the queue. The table is
--   named `<endpoint table>.<suffix>` (DelayedDeliveryOptions.TableSuffix, default "Delayed";
--   QueueAddressTranslator joins base address and qualifier with a dot), in the same schema.
-- - PeekText: the transport's own depth estimate is MAX(RowVersion) - MIN(RowVersion) + 1
--   under READPAST.
-- - Headers are a JSON object (DictionarySerializer); NServiceBus.TimeSent and
--   NServiceBus.TimeOfFailure are "yyyy-MM-dd HH:mm:ss:ffffff Z", UTC; a message moved to the
--   error queue carries NServiceBus.FailedQ and NServiceBus.ExceptionInfo.* headers.
--
-- {table} is one queue (or delayed) table, quoted. Every read of a transport table takes short
-- shared row locks and skips rows another transaction holds (ROWLOCK, READPAST, with
-- READCOMMITTEDLOCK, which READPAST needs under READ_COMMITTED_SNAPSHOT), and stops at a TOP (n)
-- or is a MIN/MAX. FORCESEEK pins the seek of the RowVersion (or Due) index the transport
-- itself reads through: a table without that index makes the statement fail (error 8622)
-- rather than scan it (NServiceBus issue #1780 is about exactly such a drift to scans).

-- name: tables
-- Every table of this database (the ones this login may see) that has the transport's columns,
-- at most `max_tables`, in one statement over the catalog (no row of them is read):
-- kind `queue` (Id uniqueidentifier, Expires, Headers, Body, RowVersion bigint identity) or
-- `delayed` (Headers, Body, Due, RowVersion bigint identity, and no Id, no Expires); indexed: an
-- index leads with RowVersion (a queue) or Due (a delayed table), which the reads below need.
-- The catalog scan's cost follows the number of columns named so in the database, not any
-- queue's depth; the Python side reuses its answer for half a minute.
WITH cols AS (
    SELECT c.object_id,
           MAX(CASE WHEN c.name = N'Id' AND TYPE_NAME(c.system_type_id) = N'uniqueidentifier' THEN 1 ELSE 0 END) AS id_guid,
           MAX(CASE WHEN c.name = N'Expires' AND TYPE_NAME(c.system_type_id) IN (N'datetime', N'datetime2') THEN 1 ELSE 0 END) AS expires,
           MAX(CASE WHEN c.name = N'Headers' AND TYPE_NAME(c.system_type_id) IN (N'nvarchar', N'varchar') THEN 1 ELSE 0 END) AS headers,
           MAX(CASE WHEN c.name = N'Body' AND TYPE_NAME(c.system_type_id) = N'varbinary' THEN 1 ELSE 0 END) AS body,
           MAX(CASE WHEN c.name = N'RowVersion' AND TYPE_NAME(c.system_type_id) = N'bigint' AND c.is_identity = 1
                    THEN 1 ELSE 0 END) AS row_version,
           MAX(CASE WHEN c.name = N'Due' AND TYPE_NAME(c.system_type_id) IN (N'datetime', N'datetime2') THEN 1 ELSE 0 END) AS due,
           MAX(CASE WHEN c.name = N'Id' THEN 1 ELSE 0 END) AS any_id
    FROM sys.columns AS c
    WHERE c.name IN (N'Id', N'Expires', N'Headers', N'Body', N'RowVersion', N'Due')
    GROUP BY c.object_id
), found AS (
    SELECT cl.object_id,
           CASE WHEN cl.id_guid = 1 THEN N'queue' ELSE N'delayed' END AS kind
    FROM cols AS cl
    WHERE cl.headers = 1 AND cl.body = 1 AND cl.row_version = 1
      AND ((cl.id_guid = 1 AND cl.expires = 1 AND cl.due = 0) OR (cl.due = 1 AND cl.any_id = 0 AND cl.expires = 0))
)
SELECT TOP (CONVERT(int, %(max_tables)s)) s.name AS schema_name,
       t.name AS table_name,
       t.object_id AS relid,
       f.kind,
       CONVERT(bit, CASE WHEN EXISTS (
           SELECT 1
           FROM sys.index_columns AS ic
           JOIN sys.columns AS c ON c.object_id = ic.object_id AND c.column_id = ic.column_id
           WHERE ic.object_id = t.object_id AND ic.key_ordinal = 1
             AND c.name = CASE WHEN f.kind = N'queue' THEN N'RowVersion' ELSE N'Due' END
       ) THEN 1 ELSE 0 END) AS indexed
FROM found AS f
JOIN sys.tables AS t ON t.object_id = f.object_id
JOIN sys.schemas AS s ON s.schema_id = t.schema_id
WHERE t.is_ms_shipped = 0
ORDER BY s.name, t.name;

-- name: held_rows
-- For each queue table of `relids` (a JSON array of object ids): the rows other sessions hold
-- exclusively (sys.dm_tran_locks: X locks on a row of the table itself, RID on the heap or KEY
-- on a clustered index): messages a receiver has deleted and is still handling in its open
-- transaction, and sends not yet committed (a handler's outgoing messages are inserted in its
-- receive transaction). visible 0 and held NULL without VIEW SERVER STATE (2022: VIEW SERVER
-- PERFORMANCE STATE; Azure SQL Database: VIEW DATABASE STATE): the lock manager cannot be read.
SET NOCOUNT ON;
DECLARE @relids nvarchar(max) = CONVERT(nvarchar(max), %(relids)s);
DECLARE @visible bit = CASE WHEN HAS_PERMS_BY_NAME(NULL, NULL, N'VIEW SERVER STATE') = 1
                              OR HAS_PERMS_BY_NAME(NULL, NULL, N'VIEW SERVER PERFORMANCE STATE') = 1
                              OR (CONVERT(int, SERVERPROPERTY('EngineEdition')) = 5
                                  AND HAS_PERMS_BY_NAME(DB_NAME(), N'DATABASE', N'VIEW DATABASE STATE') = 1)
                            THEN 1 ELSE 0 END;
IF @visible = 1
    SELECT ids.relid, CONVERT(bit, 1) AS visible, ISNULL(h.held, 0) AS held
    FROM (SELECT DISTINCT TRY_CONVERT(int, j.[value]) AS relid FROM OPENJSON(@relids) AS j) AS ids
    LEFT JOIN (
        SELECT p.object_id, COUNT_BIG(*) AS held
        FROM sys.dm_tran_locks AS l
        JOIN sys.partitions AS p ON p.hobt_id = l.resource_associated_entity_id
        WHERE l.resource_database_id = DB_ID() AND l.resource_type IN (N'RID', N'KEY') AND l.request_mode = N'X'
          AND l.request_status = N'GRANT' AND l.request_session_id <> @@SPID
          AND p.index_id IN (0, 1)
          AND p.object_id IN (SELECT TRY_CONVERT(int, k.[value]) FROM OPENJSON(@relids) AS k)
        GROUP BY p.object_id
    ) AS h ON h.object_id = ids.relid
    WHERE ids.relid IS NOT NULL;
ELSE
    SELECT DISTINCT TRY_CONVERT(int, j.[value]) AS relid, CONVERT(bit, 0) AS visible, CONVERT(bigint, NULL) AS held
    FROM OPENJSON(@relids) AS j
    WHERE TRY_CONVERT(int, j.[value]) IS NOT NULL;
SET NOCOUNT OFF;

-- name: head_window
-- One queue table: its first `window` rows in RowVersion order (the receive order), one seek of
-- the RowVersion index with a lookup per row for Expires:
-- - head_rows: rows read (rows held by open transactions are skipped: held_rows counts them);
--   expired: of those, the ones whose Expires is not after GETUTCDATE() (the receive discards
--   them: neither ready nor in flight).
-- - table_rows: the table's row count (sys.dm_db_partition_stats, or sys.partitions without VIEW
--   DATABASE STATE: approximate), for the Python side past the window.
-- - oldest_ready_age_s: seconds since the first unexpired row read was sent (its
--   NServiceBus.TimeSent header; NULL when it has none). The table has no enqueue time: a
--   message moved in from the delayed table or retried keeps its TimeSent.
-- - relid: the table's object id.
SET NOCOUNT ON;
DECLARE @window int = CONVERT(int, %(window)s);
DECLARE @object_id int = OBJECT_ID(N'{table}');
DECLARE @now datetime = GETUTCDATE();
DECLARE @rows bigint;
DECLARE @head_rows bigint;
DECLARE @expired bigint;
DECLARE @first_ready bigint;
DECLARE @sent nvarchar(4000);
IF HAS_PERMS_BY_NAME(DB_NAME(), N'DATABASE', N'VIEW DATABASE STATE') = 1
   OR HAS_PERMS_BY_NAME(DB_NAME(), N'DATABASE', N'VIEW DATABASE PERFORMANCE STATE') = 1
    SELECT @rows = SUM(ps.row_count) FROM sys.dm_db_partition_stats AS ps WHERE ps.object_id = @object_id AND ps.index_id IN (0, 1);
ELSE
    SELECT @rows = SUM(p.rows) FROM sys.partitions AS p WHERE p.object_id = @object_id AND p.index_id IN (0, 1);
SELECT @head_rows = COUNT_BIG(*),
       @expired = ISNULL(SUM(CASE WHEN w.Expires <= @now THEN 1 ELSE 0 END), 0),
       @first_ready = MIN(CASE WHEN w.Expires IS NULL OR w.Expires > @now THEN w.RowVersion END)
FROM (
    SELECT TOP (@window) h.RowVersion, h.Expires
    FROM {table} AS h WITH (FORCESEEK, ROWLOCK, READPAST, READCOMMITTEDLOCK)
    WHERE h.RowVersion > 0
    ORDER BY h.RowVersion
) AS w;
SET @sent = (SELECT TOP (1) CASE WHEN ISJSON(m.Headers) = 1 THEN JSON_VALUE(m.Headers, N'$."NServiceBus.TimeSent"') END
             FROM {table} AS m WITH (FORCESEEK, ROWLOCK, READPAST, READCOMMITTEDLOCK)
             WHERE m.RowVersion = @first_ready);
SELECT @head_rows AS head_rows,
       @expired AS expired,
       @rows AS table_rows,
       CONVERT(float, DATEDIFF_BIG(microsecond,
           TRY_CONVERT(datetime2(6), CONCAT(LEFT(@sent, 19), N'.', SUBSTRING(@sent, 21, 6)), 121),
           SYSUTCDATETIME())) / 1000000.0 AS oldest_ready_age_s,
       @object_id AS relid;
SET NOCOUNT OFF;

-- name: delayed
-- One delayed-delivery table: its rows counted up to `cap` (any narrow index), its row count
-- (as head_window's table_rows), and how long ago the earliest Due passed (negative: the first
-- is still ahead; NULL: the table is empty): due messages wait here until the endpoint's mover
-- takes them, in batches, every second or so.
SET NOCOUNT ON;
DECLARE @cap int = CONVERT(int, %(cap)s);
DECLARE @object_id int = OBJECT_ID(N'{table}');
DECLARE @rows bigint;
DECLARE @next_due datetime;
IF HAS_PERMS_BY_NAME(DB_NAME(), N'DATABASE', N'VIEW DATABASE STATE') = 1
   OR HAS_PERMS_BY_NAME(DB_NAME(), N'DATABASE', N'VIEW DATABASE PERFORMANCE STATE') = 1
    SELECT @rows = SUM(ps.row_count) FROM sys.dm_db_partition_stats AS ps WHERE ps.object_id = @object_id AND ps.index_id IN (0, 1);
ELSE
    SELECT @rows = SUM(p.rows) FROM sys.partitions AS p WHERE p.object_id = @object_id AND p.index_id IN (0, 1);
SET @next_due = (SELECT TOP (1) d.Due
                 FROM {table} AS d WITH (FORCESEEK, ROWLOCK, READPAST, READCOMMITTEDLOCK)
                 WHERE d.Due > CONVERT(datetime, 0)
                 ORDER BY d.Due);
SELECT (SELECT COUNT_BIG(*)
        FROM (SELECT TOP (@cap) d.Due FROM {table} AS d WITH (ROWLOCK, READPAST, READCOMMITTEDLOCK)) AS x) AS counted,
       @rows AS table_rows,
       CONVERT(float, DATEDIFF_BIG(microsecond, @next_due, GETUTCDATE())) / 1000000.0 AS overdue_s;
SET NOCOUNT OFF;

-- name: head
-- Enter on a queue: its first `limit` messages in receive order, with the NServiceBus headers
-- an operator looks for and the body's size (not the body).
SELECT TOP (CONVERT(int, %(limit)s)) m.RowVersion AS row_version,
       m.Id AS message_id,
       CASE WHEN m.Expires <= GETUTCDATE() THEN N'expired' ELSE N'ready' END AS state,
       m.Expires AS expires,
       CASE WHEN ISJSON(m.Headers) = 1 THEN JSON_VALUE(m.Headers, N'$."NServiceBus.TimeSent"') END AS time_sent,
       LEFT(CASE WHEN ISJSON(m.Headers) = 1 THEN JSON_VALUE(m.Headers, N'$."NServiceBus.EnclosedMessageTypes"') END, 200)
           AS message_type,
       DATALENGTH(m.Body) AS body_bytes
FROM {table} AS m WITH (FORCESEEK, ROWLOCK, READPAST, READCOMMITTEDLOCK)
WHERE m.RowVersion > 0
ORDER BY m.RowVersion;

-- name: failed
-- Enter: the newest `limit` messages of an error queue (highest RowVersion first), with the queue
-- each failed in (NServiceBus.FailedQ: `table@[schema]@[catalog]` or a bare table name), when,
-- and its exception.
SELECT TOP (CONVERT(int, %(limit)s)) m.RowVersion AS row_version,
       m.Id AS message_id,
       CASE WHEN ISJSON(m.Headers) = 1 THEN JSON_VALUE(m.Headers, N'$."NServiceBus.FailedQ"') END AS failed_queue,
       CASE WHEN ISJSON(m.Headers) = 1 THEN JSON_VALUE(m.Headers, N'$."NServiceBus.TimeOfFailure"') END AS time_of_failure,
       LEFT(CASE WHEN ISJSON(m.Headers) = 1 THEN JSON_VALUE(m.Headers, N'$."NServiceBus.ExceptionInfo.ExceptionType"') END, 200)
           AS exception_type,
       LEFT(CASE WHEN ISJSON(m.Headers) = 1 THEN JSON_VALUE(m.Headers, N'$."NServiceBus.ExceptionInfo.Message"') END, 300)
           AS exception_message,
       LEFT(CASE WHEN ISJSON(m.Headers) = 1 THEN JSON_VALUE(m.Headers, N'$."NServiceBus.EnclosedMessageTypes"') END, 200)
           AS message_type
FROM {table} AS m WITH (FORCESEEK, ROWLOCK, READPAST, READCOMMITTEDLOCK)
WHERE m.RowVersion > 0
ORDER BY m.RowVersion DESC;
