-- The engine's transactional outbox as a queue: rows not yet relayed, SQL Server. The same
-- names, parameters and result columns as postgresql/sources/outbox.sql. The outbox is read as
-- the queue tables are (sources/reference.sql): a TOP (n) scan of its clustered index on id
-- that skips rows another transaction holds (READPAST) instead of waiting for them.

-- name: head_window
-- Oldest first, through a bounded window. A relay's open batch has deleted its rows (outbox_take)
-- and holds them until it commits: they are skipped by the read and counted from the exclusive
-- key locks other sessions hold on the outbox's clustered index, as in flight (added to
-- head_rows). That count also takes in rows a business transaction has inserted and not yet
-- committed, which PostgreSQL does not see; without VIEW SERVER STATE it is not read.
-- last_head_id: the last id read (max_id when none was, so that nothing is added past the
-- window); max_id: the outbox's highest committed id
-- (its own identity, so the id span past the window counts outbox rows, gaps aside, as on
-- PostgreSQL); relid: OBJECT_ID of queuetop.outbox; oldest_ready_age_s: seconds (float).
SET NOCOUNT ON;
DECLARE @window int = CONVERT(int, %(window)s);
DECLARE @object_id int = OBJECT_ID(N'queuetop.outbox');
DECLARE @held bigint;
DECLARE @max_id bigint = (SELECT MAX(m.id) FROM queuetop.outbox AS m WITH (ROWLOCK, READPAST, READCOMMITTEDLOCK));
IF HAS_PERMS_BY_NAME(NULL, NULL, N'VIEW SERVER STATE') = 1
   OR HAS_PERMS_BY_NAME(NULL, NULL, N'VIEW SERVER PERFORMANCE STATE') = 1
   OR (CONVERT(int, SERVERPROPERTY('EngineEdition')) = 5 AND HAS_PERMS_BY_NAME(DB_NAME(), N'DATABASE', N'VIEW DATABASE STATE') = 1)
    SELECT @held = COUNT_BIG(*)
    FROM sys.dm_tran_locks AS l
    WHERE l.resource_database_id = DB_ID() AND l.resource_type = N'KEY' AND l.request_mode = N'X'
      AND l.request_status = N'GRANT' AND l.request_session_id <> @@SPID
      AND l.resource_associated_entity_id IN (SELECT p.hobt_id FROM sys.partitions AS p WHERE p.object_id = @object_id AND p.index_id = 1);
WITH head AS (
    SELECT TOP (@window) o.id, o.created_at
    FROM queuetop.outbox AS o WITH (ROWLOCK, READPAST, READCOMMITTEDLOCK, INDEX(1))
    ORDER BY o.id
), seen AS (
    SELECT COUNT_BIG(*) + ISNULL(@held, 0) AS head_rows,
           ISNULL(@held, 0) AS in_flight,
           MIN(hd.created_at) AS oldest_ready_at,
           COALESCE(MAX(hd.id), @max_id, 0) AS last_head_id
    FROM head AS hd
)
SELECT sn.head_rows,
       sn.in_flight,
       CONVERT(float, DATEDIFF_BIG(microsecond, sn.oldest_ready_at, SYSUTCDATETIME())) / 1000000.0 AS oldest_ready_age_s,
       sn.last_head_id,
       @max_id AS max_id,
       @object_id AS relid
FROM seen AS sn;
SET NOCOUNT OFF;

-- name: head
-- Enter: the oldest `limit` rows (rows a relay's open batch holds are skipped, not shown).
SELECT TOP (CONVERT(int, %(limit)s)) o.id, o.kind, o.destination, o.created_at, LEFT(o.body, 200) AS body
FROM queuetop.outbox AS o WITH (ROWLOCK, READPAST, READCOMMITTEDLOCK, INDEX(1))
ORDER BY o.id;
