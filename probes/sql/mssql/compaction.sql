-- The aggregation compactor (pattern 5): delta rows not yet folded, per group (the groups with
-- the most first), and the compactor's last run. Counting is capped: the filtered index
-- task_status_deltas_pending_idx (WHERE is_aggregate = 0) holds only pending rows, and at most
-- %(cap)s of them are read, whatever the table's size. (SQL Server; the same statement,
-- parameters and columns as postgresql/compaction.sql.)

-- name: compaction
-- One pass over the capped rows: the totals and the top groups are aggregated together (a CTE
-- referenced three times would be read three times in T-SQL). top_groups is JSON text, an array
-- of {"group", "title", "pending_deltas"} ordered by pending_deltas descending then group ('[]'
-- when nothing is pending), where PostgreSQL returns json. The predicate is the literal
-- `is_aggregate = 0`, so that the optimizer can match the filtered index. READPAST: deltas a
-- writer has not committed, and those a compaction in progress has deleted, are skipped, not
-- waited for (PostgreSQL does not see them either); READCOMMITTEDLOCK because READPAST is
-- refused under READ_COMMITTED_SNAPSHOT otherwise.
SET NOCOUNT ON;
DECLARE @cap int = CONVERT(int, %(cap)s);
DECLARE @top_n int = CONVERT(int, %(top)s);
DECLARE @pending bigint;
DECLARE @groups bigint;
DECLARE @top_groups nvarchar(max);
WITH pending AS (
    SELECT TOP (@cap) d.task_id
    FROM queuetop.task_status_deltas AS d WITH (ROWLOCK, READPAST, READCOMMITTEDLOCK)
    WHERE d.is_aggregate = 0
), by_group AS (
    SELECT p.task_id, COUNT_BIG(*) AS n FROM pending AS p GROUP BY p.task_id
), ranked AS (
    SELECT b.task_id, b.n, ROW_NUMBER() OVER (ORDER BY b.n DESC, b.task_id) AS position
    FROM by_group AS b
), items AS (
    -- Each top group as a JSON object; the title is read for those only.
    SELECT r.n, r.position,
           CASE WHEN r.position <= @top_n
                THEN (SELECT r.task_id AS [group],
                             (SELECT t.title FROM queuetop.tasks AS t WHERE t.id = r.task_id) AS title,
                             r.n AS pending_deltas
                      FOR JSON PATH, WITHOUT_ARRAY_WRAPPER, INCLUDE_NULL_VALUES) END AS item
    FROM ranked AS r
)
SELECT @pending = ISNULL(SUM(i.n), 0),
       @groups = COUNT_BIG(*),
       @top_groups = N'[' + ISNULL(STRING_AGG(CONVERT(nvarchar(max), i.item), N', ') WITHIN GROUP (ORDER BY i.position), N'') + N']'
FROM items AS i;
SELECT @pending AS pending_deltas, @groups AS groups, @top_groups AS top_groups,
       r.last_run_at, r.last_duration_ms, r.last_rows_folded, r.runs_total
FROM (SELECT 1 AS one) AS o
LEFT JOIN queuetop.compactor_runs AS r ON r.name = N'task_status';
SET NOCOUNT OFF;
