-- Graphile Worker (https://worker.graphile.org), 0.16 and later: jobs in
-- `graphile_worker._private_jobs` (task in `_private_tasks`, named queue in
-- `_private_job_queues`); completed jobs are deleted. There is no state column: its fetch
-- (get_job) takes a job that is `is_available` (not locked, attempts < max_attempts) with
-- `run_at <= now()`, and whose named queue, if it has one, is not locked by another job.
-- So: in flight = locked; dead = attempts exhausted; delayed = run_at ahead (scheduled when never
-- attempted, backing off after a failure) or waiting behind its locked named queue; ready = the
-- rest. One row per task identifier and one per named queue (a job is in both).

-- name: version
SELECT max(id)::text AS version FROM {migrations};

-- name: classified
-- One bounded read (at most `cap` jobs), classified as get_job sees them, grouped per task and
-- per named queue. `scanned` = cap means there are more.
WITH j AS (
    SELECT task_id, job_queue_id, run_at, attempts, max_attempts, locked_at FROM {jobs} LIMIT %(cap)s::integer
), c AS (
    SELECT t.identifier AS task, q.queue_name,
           CASE WHEN j.locked_at IS NOT NULL THEN 'in_flight'
                WHEN j.attempts >= j.max_attempts THEN 'dead'
                WHEN j.run_at > now() THEN 'delayed'
                WHEN q.locked_at IS NOT NULL THEN 'blocked'
                ELSE 'ready' END AS cat,
           j.run_at
    FROM j
    JOIN {tasks} t ON t.id = j.task_id
    LEFT JOIN {job_queues} q ON q.id = j.job_queue_id
), groups AS (
    SELECT 'task' AS kind, task AS name, cat, run_at FROM c
    UNION ALL
    SELECT 'queue', queue_name, cat, run_at FROM c WHERE queue_name IS NOT NULL
)
SELECT kind, name,
       count(*) FILTER (WHERE cat = 'ready') AS ready,
       count(*) FILTER (WHERE cat = 'in_flight') AS in_flight,
       count(*) FILTER (WHERE cat = 'delayed') AS delayed,
       count(*) FILTER (WHERE cat = 'blocked') AS blocked,
       count(*) FILTER (WHERE cat = 'dead') AS dead,
       extract(epoch FROM now() - min(run_at) FILTER (WHERE cat = 'ready'))::float8 AS oldest_ready_age_s,
       (SELECT count(*) FROM j) AS scanned
FROM groups GROUP BY kind, name ORDER BY kind DESC, name;

-- name: names
-- Every task and named queue, with none of their jobs left too (they show as empty).
SELECT 'task' AS kind, identifier AS name, NULL::timestamptz AS locked_at, NULL::text AS locked_by FROM {tasks}
UNION ALL
SELECT 'queue', queue_name, locked_at, locked_by FROM {job_queues};

-- name: estimate
-- The planner's idea of how many jobs there are, for a table larger than the bounded read.
EXPLAIN (FORMAT JSON) SELECT 1 FROM {jobs};

-- name: head
-- Enter: the jobs of a task or named queue that wait or run, in get_job's order.
SELECT j.id, t.identifier AS task, q.queue_name, j.run_at, j.attempts, j.max_attempts, j.locked_at,
       j.locked_by, left(j.payload::text, 200) AS payload
FROM {jobs} j
JOIN {tasks} t ON t.id = j.task_id
LEFT JOIN {job_queues} q ON q.id = j.job_queue_id
WHERE (t.identifier = %(task)s::text OR q.queue_name = %(queue)s::text) AND j.attempts < j.max_attempts
ORDER BY j.priority, j.run_at, j.id
LIMIT %(limit)s::integer;

-- name: failures
-- Enter: jobs out of attempts, newest first, with Graphile Worker's last error.
SELECT j.id, t.identifier AS task, q.queue_name, j.attempts, j.updated_at, left(j.last_error, 300) AS last_error,
       left(j.payload::text, 200) AS payload
FROM {jobs} j
JOIN {tasks} t ON t.id = j.task_id
LEFT JOIN {job_queues} q ON q.id = j.job_queue_id
WHERE (t.identifier = %(task)s::text OR q.queue_name = %(queue)s::text) AND j.attempts >= j.max_attempts
ORDER BY j.updated_at DESC
LIMIT %(limit)s::integer;
