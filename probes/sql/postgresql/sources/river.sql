-- River (https://riverqueue.com): every job in `river_job`, many queues (`queue`) in the one
-- table, a `river_job_state` enum. Its fetch takes `state = 'available' AND scheduled_at <=
-- now()`: ready; available with a schedule ahead, scheduled, retryable (backing off) and pending
-- (awaiting something else) are delayed; running is in flight; discarded is dead; completed and
-- cancelled stay in the table, finished. The counts are the generic job-table ones
-- (sources/jobtable.sql), through River's fetching index (state, queue, priority, scheduled_at, id).

-- name: version
SELECT max(version)::text AS version FROM {migrations};

-- name: queues
-- The queues River's clients have registered (river_queue, River 0.5 and later).
SELECT name FROM {queues} ORDER BY name LIMIT 200;

-- name: failures
-- Enter: discarded jobs, newest first, with River's last recorded error.
SELECT id, kind, attempt, max_attempts, finalized_at,
       left(errors[array_upper(errors, 1)] ->> 'error', 300) AS last_error, left(args::text, 200) AS args
FROM {jobs}
WHERE queue = %(queue)s::text AND state = 'discarded'
ORDER BY finalized_at DESC NULLS LAST, id DESC LIMIT %(limit)s::integer;

-- name: oldest_ready
-- For each queue, the oldest due available job: River fetches in (priority, scheduled_at, id)
-- order through its (state, queue, priority, scheduled_at, id) index, so the oldest is the
-- earliest of one index probe per priority (River's priorities are 1 to 4).
SELECT q.queue, extract(epoch FROM now() - min(o.scheduled_at))::float8 AS age_s
FROM unnest(%(queues)s::text[]) AS q(queue)
CROSS JOIN generate_series(1, 4) AS p(priority)
CROSS JOIN LATERAL (
    SELECT j.scheduled_at FROM {jobs} j
    WHERE j.state = 'available' AND j.queue = q.queue AND j.priority = p.priority AND j.scheduled_at <= now()
    ORDER BY j.scheduled_at LIMIT 1
) AS o
GROUP BY q.queue;

-- name: blocked
-- Fragment, over one job `j` of {jobs}: River would not fetch it though it may be due (due-ness,
-- `j.scheduled_at <= now()`, is the caller's): it is available in a paused queue. JobGetAvailable
-- itself does not look at river_queue; its producer does not call it while its queue is paused
-- (producer.go: `if p.paused { limit = 0 }`, paused from `river_queue.paused_at`). A queue with no
-- river_queue row is not paused (a producer creates the row unpaused).
(j.state = 'available' AND EXISTS (SELECT 1 FROM {queues} AS bq WHERE bq.name = j.queue AND bq.paused_at IS NOT NULL))

-- name: blocked_head
-- Enter: the blocked jobs of one queue (%(queue)s), oldest first: due available jobs of a paused
-- queue, `blocked_by` 'paused' and `locked_at` the queue's paused_at. One probe of River's
-- fetching index (state, queue, priority, scheduled_at, id) per priority (1 to 4).
SELECT b.id, b.kind, b.queue, 'paused'::text AS blocked_by, q.paused_at AS locked_at, b.scheduled_at
FROM {queues} AS q
CROSS JOIN generate_series(1, 4) AS p(priority)
CROSS JOIN LATERAL (
    SELECT j.id, j.kind, j.queue, j.scheduled_at FROM {jobs} AS j
    WHERE j.state = 'available' AND j.queue = q.name AND j.priority = p.priority AND j.scheduled_at <= now()
    ORDER BY j.scheduled_at, j.id LIMIT %(limit)s::integer
) AS b
WHERE q.name = %(queue)s::text AND q.paused_at IS NOT NULL
ORDER BY b.scheduled_at, b.id
LIMIT %(limit)s::integer;
