-- The queues probe: what every queue's table shares, whatever its source, SQL Server. Each
-- source's own statements are in sources/<source>.sql. The same names, parameters and result
-- columns as postgresql/queues.sql, plus ghost_records (SQL Server only).

-- name: table_stats
-- For every queue table (`relids`: a JSON array of object ids), one row with PostgreSQL's
-- pg_stat_user_tables columns, as SQL Server has them:
-- - n_tup_ins, n_tup_del: the clustered index's (or heap's) cumulative leaf_insert_count and
--   leaf_delete_count + leaf_ghost_count (a deleted row is usually first marked as a ghost) from
--   sys.dm_db_index_operational_stats: the rates are their differences between samples. These
--   counters live in the metadata cache: they start at zero when the table's metadata is loaded
--   (in practice at startup for a busy table), may restart after DDL or when an idle table's
--   entry is evicted, and count statements that were rolled back. NULL when they cannot be read:
--   without VIEW DATABASE STATE (2022: or VIEW DATABASE PERFORMANCE STATE), or while the
--   table's metadata is not cached. The function is called once per table (a NULL object id
--   would be every table of the database), so the cost follows the number of queues, not the
--   size of the database.
-- - n_live_tup: the table's row count, approximate: sys.dm_db_partition_stats.row_count (index
--   0 or 1), or sys.partitions.rows (the same count, readable with SELECT on the table alone)
--   without VIEW DATABASE STATE.
-- - n_dead_tup: NULL. SQL Server's dead tuples are ghost records, which only
--   sys.dm_db_index_physical_stats counts, by reading pages: see ghost_records, for on-demand use.
-- - last_vacuum, last_autovacuum: NULL. Nothing vacuums: the ghost cleanup task removes ghost
--   records on its own and records no time.
SET NOCOUNT ON;
DECLARE @relids nvarchar(max) = CONVERT(nvarchar(max), %(relids)s);
DECLARE @counters nvarchar(max) = N'[]';
DECLARE @relid int;
DECLARE @position int = 0;
DECLARE @tables int = (SELECT COUNT(*) FROM OPENJSON(@relids));
DECLARE @database_state bit = CASE WHEN HAS_PERMS_BY_NAME(DB_NAME(), N'DATABASE', N'VIEW DATABASE STATE') = 1
                                     OR HAS_PERMS_BY_NAME(DB_NAME(), N'DATABASE', N'VIEW DATABASE PERFORMANCE STATE') = 1
                                   THEN 1 ELSE 0 END;
WHILE @database_state = 1 AND @position < @tables
BEGIN
    SET @relid = (SELECT TRY_CONVERT(int, j.[value]) FROM OPENJSON(@relids) AS j WHERE j.[key] = CONVERT(nvarchar(10), @position));
    IF @relid > 0
        SET @counters = JSON_MODIFY(@counters, N'append $', JSON_QUERY((
            SELECT @relid AS relid,
                   SUM(os.leaf_insert_count) AS inserted,
                   SUM(os.leaf_delete_count + os.leaf_ghost_count) AS deleted,
                   (SELECT SUM(ps.row_count) FROM sys.dm_db_partition_stats AS ps
                    WHERE ps.object_id = @relid AND ps.index_id IN (0, 1)) AS live
            FROM sys.dm_db_index_operational_stats(DB_ID(), @relid, NULL, NULL) AS os
            WHERE os.index_id IN (0, 1)
            FOR JSON PATH, WITHOUT_ARRAY_WRAPPER)));
    SET @position = @position + 1;
END;
SELECT t.relid,
       c.inserted AS n_tup_ins,
       c.deleted AS n_tup_del,
       COALESCE(c.live, (SELECT SUM(p.rows) FROM sys.partitions AS p WHERE p.object_id = t.relid AND p.index_id IN (0, 1)))
           AS n_live_tup,
       CONVERT(bigint, NULL) AS n_dead_tup,
       CONVERT(datetime2(6), NULL) AS last_vacuum,
       -- No vacuum on SQL Server: its maintenance analogue, the clustered index's (or heap's)
       -- statistics last updated (auto-update or UPDATE STATISTICS), shown as "Stats upd".
       CONVERT(datetime2(6), STATS_DATE(t.relid, 1)) AS last_autovacuum
FROM (SELECT DISTINCT TRY_CONVERT(int, j.[value]) AS relid FROM OPENJSON(@relids) AS j) AS t
LEFT JOIN OPENJSON(@counters) WITH (relid int, inserted bigint, deleted bigint, live bigint) AS c ON c.relid = t.relid
WHERE t.relid IS NOT NULL;
SET NOCOUNT OFF;

-- name: ghost_records
-- SQL Server only, for on-demand or slow-schedule use, never on the fast path: the analogue of
-- n_dead_tup. sys.dm_db_index_physical_stats in SAMPLED mode reads a 1 percent sample of the pages of
-- an index over 10,000 pages (every page of a smaller one) and extrapolates; LIMITED would not
-- count ghost records, DETAILED reads every page. It takes an intent-shared lock on the table
-- meanwhile. `table` is a schema-qualified name; a NULL object id would make the function read
-- every table of the database, so an unknown table returns no row instead. One row per index
-- (in-row data, all partitions): ghost_record_count = deleted rows not yet cleaned up;
-- version_ghost_record_count = those kept for a snapshot transaction that may still read them
-- (connections.sql's version_store names the oldest). Needs VIEW DATABASE STATE (or CONTROL on
-- the table).
SET NOCOUNT ON;
DECLARE @object_id int = OBJECT_ID(CONVERT(nvarchar(776), %(table)s));
IF @object_id IS NOT NULL
    SELECT @object_id AS relid, ps.index_id, i.name AS index_name,
           SUM(ps.page_count) AS page_count,
           SUM(ps.record_count) AS record_count,
           SUM(ps.ghost_record_count) AS ghost_record_count,
           SUM(ps.version_ghost_record_count) AS version_ghost_record_count
    FROM sys.dm_db_index_physical_stats(DB_ID(), @object_id, NULL, NULL, 'SAMPLED') AS ps
    LEFT JOIN sys.indexes AS i ON i.object_id = @object_id AND i.index_id = ps.index_id
    WHERE ps.alloc_unit_type_desc = N'IN_ROW_DATA' AND ps.index_level = 0
    GROUP BY ps.index_id, i.name
    ORDER BY ps.index_id;
ELSE
    SELECT @object_id AS relid, CONVERT(int, NULL) AS index_id, CONVERT(sysname, NULL) AS index_name,
           CONVERT(bigint, NULL) AS page_count,
           CONVERT(bigint, NULL) AS record_count,
           CONVERT(bigint, NULL) AS ghost_record_count,
           CONVERT(bigint, NULL) AS version_ghost_record_count
    WHERE 1 = 0;
SET NOCOUNT OFF;

-- name: consumers
-- The sessions working on the queue tables now (`relids`: a JSON array of object ids), as
-- postgresql/queues.sql's: every user session that holds or awaits a lock on a queue table
-- (an OBJECT lock names the table; KEY, PAGE, RID and HOBT locks name a heap or B-tree, which
-- sys.partitions maps to its table), with its state and how long it has been in it. queuetop's
-- own probe sessions are left out. sys.dm_tran_locks needs VIEW SERVER STATE (2022: VIEW SERVER
-- PERFORMANCE STATE); without it, no rows. Bounded by the locks held, never by the tables' rows.
-- `holds`: the strongest table lock granted to it that stops the queue's consumers (their
-- UPDATE or DELETE takes IX on the table: S, SIX, X and Sch-M conflict with it), on `locked`,
-- with how long its transaction has been open. `gid` is PostgreSQL's prepared transaction's:
-- NULL here (an orphaned distributed transaction is the lock tree's session -2).
SET NOCOUNT ON;
DECLARE @relids nvarchar(max) = CONVERT(nvarchar(max), %(relids)s);
WITH tables AS (
    SELECT DISTINCT TRY_CONVERT(int, j.[value]) AS relid FROM OPENJSON(@relids) AS j
), held AS (
    SELECT t.relid, l.request_session_id AS pid, MAX(CASE WHEN l.request_status = N'WAIT' THEN 1 ELSE 0 END) AS waiting,
           MAX(CASE WHEN l.request_status = N'GRANT' AND l.resource_type = N'OBJECT'
                    THEN CASE l.request_mode WHEN N'Sch-M' THEN 4 WHEN N'X' THEN 3 WHEN N'SIX' THEN 2 WHEN N'S' THEN 1 END
               END) AS holds_rank
    FROM sys.dm_tran_locks AS l
    LEFT JOIN sys.partitions AS p
           ON l.resource_type IN (N'KEY', N'PAGE', N'RID', N'HOBT') AND p.hobt_id = l.resource_associated_entity_id
    JOIN tables AS t
      ON t.relid = CASE WHEN l.resource_type = N'OBJECT' THEN l.resource_associated_entity_id ELSE p.[object_id] END
    WHERE l.resource_database_id = DB_ID() AND l.request_session_id <> @@SPID
    GROUP BY t.relid, l.request_session_id
)
SELECT TOP (5000) h.relid, h.pid, CONVERT(bit, h.waiting) AS waiting,
       CASE WHEN r.session_id IS NOT NULL THEN N'active'
            WHEN s.open_transaction_count > 0 THEN N'idle in transaction'
            ELSE N'idle' END AS state,
       s.program_name AS application_name,
       DATEDIFF_BIG(millisecond, COALESCE(r.start_time, s.last_request_end_time), SYSDATETIME()) / 1000.0 AS for_s,
       CASE h.holds_rank WHEN 4 THEN N'Sch-M' WHEN 3 THEN N'X' WHEN 2 THEN N'SIX' WHEN 1 THEN N'S' END AS holds,
       CASE WHEN h.holds_rank IS NOT NULL
            THEN QUOTENAME(OBJECT_SCHEMA_NAME(h.relid)) + N'.' + QUOTENAME(OBJECT_NAME(h.relid)) END AS locked,
       DATEDIFF_BIG(millisecond, x.began, SYSDATETIME()) / 1000.0 AS xact_age_s,
       CONVERT(nvarchar(256), NULL) AS gid
FROM held AS h
JOIN sys.dm_exec_sessions AS s ON s.session_id = h.pid AND s.is_user_process = 1
OUTER APPLY (SELECT TOP (1) q.session_id, q.start_time FROM sys.dm_exec_requests AS q
             WHERE q.session_id = h.pid ORDER BY q.start_time) AS r
OUTER APPLY (SELECT MIN(a.transaction_begin_time) AS began
             FROM sys.dm_tran_session_transactions AS st
             JOIN sys.dm_tran_active_transactions AS a ON a.transaction_id = st.transaction_id
             WHERE st.session_id = h.pid) AS x
WHERE COALESCE(s.program_name, N'') NOT LIKE N'queuetop-probe%%'
ORDER BY CASE WHEN h.holds_rank IS NULL THEN 1 ELSE 0 END, h.relid, h.pid;
SET NOCOUNT OFF;
