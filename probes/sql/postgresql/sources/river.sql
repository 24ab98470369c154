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
