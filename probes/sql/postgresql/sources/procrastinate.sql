-- Procrastinate (https://procrastinate.readthedocs.io): every job in `procrastinate_jobs`, many
-- queues (queue_name) in the one table, a status enum. Its fetch (procrastinate_fetch_job_v2)
-- takes `status = 'todo' AND (scheduled_at IS NULL OR scheduled_at <= now())`: ready; a todo job
-- scheduled for later (or waiting out a retry) is delayed; doing (and the legacy aborting) is in
-- flight; failed is dead; succeeded, cancelled and aborted jobs stay in the table, finished.
-- The counts are the generic job-table ones (sources/jobtable.sql).

-- name: oldest_ready
-- For each queue with ready jobs, the job that has been ready longest (the lowest id among the
-- ready ones, found through procrastinate's own (id, lock) index of todo/doing jobs), and since
-- when: the later of its last "became todo" event and its schedule. The job row has no enqueue
-- time of its own.
SELECT q.queue,
       extract(epoch FROM now() - greatest(
           (SELECT max(e.at) FROM {events} e
            WHERE e.job_id = j.id AND e.type IN ('deferred', 'deferred_for_retry', 'retried')),
           j.scheduled_at))::float8 AS age_s
FROM unnest(%(queues)s::text[]) AS q(queue)
CROSS JOIN LATERAL (
    SELECT id, scheduled_at FROM {jobs}
    WHERE status = 'todo' AND queue_name = q.queue AND (scheduled_at IS NULL OR scheduled_at <= now())
    ORDER BY id LIMIT 1
) AS j;

-- name: failures
-- Enter: failed jobs, newest first, with when and how often they were tried.
SELECT j.id, j.task_name, j.attempts, left(j.args::text, 200) AS args,
       (SELECT max(e.at) FROM {events} e WHERE e.job_id = j.id AND e.type = 'failed') AS failed_at
FROM {jobs} j
WHERE j.status = 'failed' AND j.queue_name = %(queue)s::text
ORDER BY j.id DESC LIMIT %(limit)s::integer;

-- name: blocked
-- Fragment, over one job `j` of {jobs}: Procrastinate's fetch (procrastinate_fetch_job_v2) skips
-- it though it may be due (due-ness, `j.scheduled_at IS NULL OR j.scheduled_at <= now()`, is the
-- caller's). The fetch rejects a todo job when `EXISTS (... other_jobs.lock = jobs.lock AND
-- (other_jobs.status = 'doing' OR (other_jobs.status = 'todo' AND (other_jobs.priority >
-- jobs.priority OR (other_jobs.priority = jobs.priority AND other_jobs.id < jobs.id)))))`: its
-- lock is held by a doing job, or a todo job of that lock comes before it in the fetch's order
-- (priority DESC, id ASC), due or not. Among the todo and doing jobs of one lock, ordered doing
-- first, then as the fetch orders them, that is every todo job but the first in line. Counted
-- here for all locks at once (an uncorrelated subquery: run once per statement, hashed): the
-- library has no index on `lock` for todo jobs, so a per-job search for its lock's other jobs
-- would scan the table once per locked job.
(j.status = 'todo' AND j.lock IS NOT NULL AND j.id IN (
    SELECT bl.id FROM (
        SELECT bj.id, bj.status,
               row_number() OVER (PARTITION BY bj.lock ORDER BY bj.status = 'doing' DESC, bj.priority DESC, bj.id) AS place
        FROM {jobs} AS bj
        WHERE bj.lock IS NOT NULL AND bj.status IN ('todo', 'doing')
    ) AS bl
    WHERE bl.status = 'todo' AND bl.place > 1))

-- name: blocked_head
-- Enter: the blocked jobs of one queue (due todo jobs the fetch skips for their lock, as in
-- `blocked`), oldest first, each with the job it waits for: the first in its lock's line, which
-- is the doing job holding the lock, else the todo job the fetch would take first.
WITH line AS (
    SELECT bj.id, bj.task_name, bj.lock, bj.status, bj.queue_name, bj.scheduled_at,
           row_number() OVER w AS place, first_value(bj.id) OVER w AS first_id,
           first_value(bj.status) OVER w AS first_status
    FROM {jobs} AS bj
    WHERE bj.lock IS NOT NULL AND bj.status IN ('todo', 'doing')
    WINDOW w AS (PARTITION BY bj.lock ORDER BY bj.status = 'doing' DESC, bj.priority DESC, bj.id)
)
SELECT id, task_name, lock, first_id AS blocked_by, first_status::text AS blocked_by_status
FROM line
WHERE queue_name = %(queue)s::text AND status = 'todo' AND place > 1
  AND (scheduled_at IS NULL OR scheduled_at <= now())
ORDER BY id
LIMIT %(limit)s::integer;
