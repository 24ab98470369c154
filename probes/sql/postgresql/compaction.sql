-- The aggregation compactor (pattern 5): delta rows not yet folded, per group (the groups with
-- the most first), and the compactor's last run. Counting is capped: the partial index holds only
-- pending rows, and at most %(cap)s of them are read, whatever the table's size.

-- name: compaction
WITH pending AS (
    SELECT task_id FROM queuetop.task_status_deltas WHERE NOT is_aggregate LIMIT %(cap)s::integer
), by_group AS (
    SELECT task_id, count(*) AS n FROM pending GROUP BY task_id
)
SELECT (SELECT coalesce(sum(n), 0)::bigint FROM by_group) AS pending_deltas,
       (SELECT count(*) FROM by_group) AS groups,
       (SELECT coalesce(json_agg(json_build_object('group', g.task_id, 'title', t.title, 'pending_deltas', g.n)
                                 ORDER BY g.n DESC, g.task_id), '[]'::json)
        FROM (SELECT task_id, n FROM by_group ORDER BY n DESC, task_id LIMIT %(top)s::integer) g
        LEFT JOIN queuetop.tasks t ON t.id = g.task_id) AS top_groups,
       r.last_run_at, r.last_duration_ms, r.last_rows_folded, r.runs_total
FROM (SELECT 1) one
LEFT JOIN queuetop.compactor_runs r ON r.name = 'task_status';
