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

-- name: names
-- Every task and named queue, with none of their jobs left too (they show as empty).
SELECT 'task' AS kind, id::text AS id, identifier AS name, NULL::timestamptz AS locked_at, NULL::text AS locked_by FROM {tasks}
UNION ALL
SELECT 'queue', id::text, queue_name, locked_at, locked_by FROM {job_queues};

-- name: group
-- Fragment: a job's group for the tally, its task and its named queue: `<task id>:<queue id>`.
(j.task_id::text || ':' || coalesce(j.job_queue_id::text, ''))

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

-- name: blocked
-- Fragment, over one job `j` of {jobs}: get_job would skip it though it may be due (due-ness,
-- `j.run_at <= now()`, is the caller's): it is available (not locked, attempts left) and in a
-- named queue that is not - locked by the worker running another of its jobs, or gone. get_job
-- (dist/sql/getJobs.js, named-queue strategy 2) claims only `jobs.job_queue_id is null or
-- jobs.job_queue_id in (select id from _private_job_queues where is_available = true for update
-- skip locked)`, with is_available = (locked_at is null) and no expiry on the lock.
(j.job_queue_id IS NOT NULL AND j.locked_at IS NULL AND j.attempts < j.max_attempts
 AND NOT EXISTS (SELECT 1 FROM {job_queues} AS bq WHERE bq.id = j.job_queue_id AND bq.locked_at IS NULL))

-- name: blocked_head
-- Enter: the blocked jobs of one named queue (%(queue)s: its queue_name, the part after
-- `queue:`), oldest first, with what holds the queue: `blocked_by` names the job running in it
-- (`job <id>`; the worker, `worker <id>`, where no job of it is locked any more), `locked_by` the
-- worker, `locked_at` since when.
WITH q AS (
    SELECT q.id, q.queue_name, q.locked_at, q.locked_by,
           (SELECT h.id FROM {jobs} AS h WHERE h.job_queue_id = q.id AND h.locked_at IS NOT NULL
            ORDER BY h.locked_by IS NOT DISTINCT FROM q.locked_by DESC, h.locked_at LIMIT 1) AS holder
    FROM {job_queues} AS q
    WHERE q.queue_name = %(queue)s::text AND q.locked_at IS NOT NULL
)
SELECT j.id, t.identifier AS task, q.queue_name AS queue,
       CASE WHEN q.holder IS NOT NULL THEN 'job ' || q.holder::text ELSE 'worker ' || coalesce(q.locked_by, '?') END
           AS blocked_by,
       q.locked_by, q.locked_at, j.run_at
FROM q
JOIN {jobs} AS j ON j.job_queue_id = q.id
JOIN {tasks} AS t ON t.id = j.task_id
WHERE j.locked_at IS NULL AND j.attempts < j.max_attempts AND j.run_at <= now()
ORDER BY j.run_at, j.id
LIMIT %(limit)s::integer;
