-- Procrastinate (https://procrastinate.readthedocs.io): every job in `procrastinate_jobs`, many
-- queues (queue_name) in the one table, a status enum. Its fetch (procrastinate_fetch_job_v2)
-- takes `status = 'todo' AND (scheduled_at IS NULL OR scheduled_at <= now())`: ready; a todo job
-- scheduled for later (or waiting out a retry) is delayed; doing (and the legacy aborting) is in
-- flight; failed is dead; succeeded, cancelled and aborted jobs stay in the table, finished.
-- The counts are the generic job-table ones (sources/jobtable.sql).

-- name: version
-- Procrastinate records no schema version: its 3.x schema has procrastinate_fetch_job_v2.
SELECT CASE WHEN to_regproc(%(fetch_v2)s::text) IS NOT NULL THEN '3.x' ELSE '2.x or older' END AS version;

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
