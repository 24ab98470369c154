-- The aggregation compactor (pattern 5): delta rows not yet folded, in how many groups, and the
-- compactor's last run. The count is capped (the partial index holds only pending rows).

-- name: compaction
SELECT (SELECT count(*) FROM (SELECT 1 FROM queuetop.task_status_deltas WHERE NOT is_aggregate
                               LIMIT %(cap)s::integer) p) AS pending_deltas,
       (SELECT count(*) FROM (SELECT DISTINCT task_id FROM queuetop.task_status_deltas
                               WHERE NOT is_aggregate LIMIT %(cap)s::integer) g) AS groups,
       r.last_run_at, r.last_duration_ms, r.last_rows_folded, r.runs_total
FROM (SELECT 1) one
LEFT JOIN queuetop.compactor_runs r ON r.name = 'task_status';
