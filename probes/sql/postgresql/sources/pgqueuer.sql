-- PgQueuer (https://github.com/janbjorge/pgqueuer), 1.x: every job in `pgqueuer`, one table for
-- every entrypoint (its queues), a `pgqueuer_status` enum; `pgqueuer_log` has a row per change of
-- a job's status. Its dequeue (QueryQueueBuilder.build_dequeue_query) claims `status = 'queued'
-- AND execute_after < NOW()` in `priority DESC, id ASC` order (`next_queued`), and takes again a
-- `picked` job whose heartbeat is older than the worker's heartbeat_timeout (`next_stale`: `status
-- = 'picked' AND heartbeat < NOW() - heartbeat_timeout AND execute_after < NOW()`). A job that
-- fails is deleted and logged `exception` with its traceback (on_failure 'delete', the default),
-- or kept as `failed` (on_failure 'hold'). The counts are the generic job-table ones
-- (sources/jobtable.sql); these statements are what PgQueuer's own indexes answer besides.

-- name: labels
-- The labels of the status enum of the jobs table (%(jobs)s: its quoted name), in their order:
-- which of PgQueuer's states this install knows (`failed` came in a later release than `queued`).
SELECT e.enumlabel::text AS label
FROM pg_attribute a
JOIN pg_enum e ON e.enumtypid = a.atttypid
WHERE a.attrelid = to_regclass(%(jobs)s::text) AND a.attname = 'status' AND NOT a.attisdropped
ORDER BY e.enumsortorder;

-- name: oldest_ready
-- For each entrypoint with ready jobs, the earliest due time of a queued job the dequeue would
-- claim (when it became due: enqueued, or its retry's back-off over): one probe each of
-- PgQueuer's `pgqueuer_ep_ea_idx` (entrypoint, execute_after) WHERE status = 'queued'.
SELECT q.queue, extract(epoch FROM now() - o.due)::float8 AS age_s
FROM unnest(%(queues)s::text[]) AS q(queue)
CROSS JOIN LATERAL (
    SELECT min(j.execute_after) AS due FROM {jobs} AS j
    WHERE j.status = 'queued' AND j.entrypoint = q.queue AND j.execute_after < now()
) AS o
WHERE o.due IS NOT NULL;

-- name: stale
-- Picked jobs whose heartbeat is older than the workers' heartbeat_timeout (%(timeout_s)s): the
-- dequeue's `next_stale` takes them again (its worker died, or hangs), so they are ready, not in
-- flight. Per entrypoint, how many, and how long the oldest one's worker has been silent. Read
-- oldest heartbeat first through PgQueuer's `pgqueuer_picked_heartbeat_idx` (heartbeat) WHERE
-- status = 'picked', at most %(limit)s rows.
SELECT s.entrypoint AS queue, count(*) AS stale, extract(epoch FROM now() - min(s.heartbeat))::float8 AS silent_s
FROM (
    SELECT j.entrypoint, j.heartbeat FROM {jobs} AS j
    WHERE j.status = 'picked' AND j.heartbeat < now() - make_interval(secs => %(timeout_s)s::float8)
      AND j.execute_after < now()
    ORDER BY j.heartbeat
    LIMIT %(limit)s::integer
) AS s
GROUP BY s.entrypoint;

-- name: slots
-- Entrypoints whose picked jobs hold a concurrency slot (a worker registered the entrypoint with
-- a concurrency_limit: the dequeue gives each job it claims for it a slot below the limit), and
-- how many: through PgQueuer's `pgqueuer_picked_slot_idx` (entrypoint, slot) WHERE status =
-- 'picked' AND slot IS NOT NULL, which holds at most the limits' sum of rows. The limit itself is
-- in the workers' code, not in the database.
SELECT j.entrypoint AS queue, count(*) AS holding
FROM {jobs} AS j
WHERE j.status = 'picked' AND j.slot IS NOT NULL
GROUP BY j.entrypoint;

-- name: head
-- Enter: one entrypoint's jobs that run or wait: the picked ones (oldest heartbeat first, each
-- with its heartbeat's age and whether it is stale past %(timeout_s)s), then the queued ones the
-- dequeue would claim, in its order (priority DESC, id), then those due later (by due time); at
-- most %(limit)s rows, each branch through one of PgQueuer's partial indexes.
SELECT id, status, priority, execute_after, attempts, heartbeat_age_s, stale, queue_manager_id, slot, payload
FROM (
    (SELECT 0 AS place, j.id, j.status::text AS status, j.priority, j.execute_after, j.attempts,
            extract(epoch FROM now() - j.heartbeat)::float8 AS heartbeat_age_s,
            j.heartbeat < now() - make_interval(secs => %(timeout_s)s::float8) AS stale,
            j.queue_manager_id::text AS queue_manager_id, j.slot, left(encode(j.payload, 'escape'), 200) AS payload,
            j.heartbeat AS sort_time
     FROM {jobs} AS j
     WHERE j.entrypoint = %(queue)s::text AND j.status = 'picked'
     ORDER BY j.heartbeat, j.id
     LIMIT %(limit)s::integer)
    UNION ALL
    (SELECT 1, j.id, j.status::text, j.priority, j.execute_after, j.attempts, NULL::float8, NULL::boolean,
            NULL::text, NULL::bigint, left(encode(j.payload, 'escape'), 200), NULL::timestamptz
     FROM {jobs} AS j
     WHERE j.entrypoint = %(queue)s::text AND j.status = 'queued' AND j.execute_after < now()
     ORDER BY j.priority DESC, j.id
     LIMIT %(limit)s::integer)
    UNION ALL
    (SELECT 2, j.id, j.status::text, j.priority, j.execute_after, j.attempts, NULL::float8, NULL::boolean,
            NULL::text, NULL::bigint, left(encode(j.payload, 'escape'), 200), j.execute_after
     FROM {jobs} AS j
     WHERE j.entrypoint = %(queue)s::text AND j.status = 'queued' AND j.execute_after >= now()
     ORDER BY j.execute_after, j.id
     LIMIT %(limit)s::integer)
) AS h
ORDER BY place, CASE WHEN place = 1 THEN -priority END, sort_time, id
LIMIT %(limit)s::integer;

-- name: failed_held
-- Enter: one entrypoint's jobs kept as `failed` (on_failure 'hold', waiting for `pgq requeue`),
-- newest first, each with the traceback PgQueuer logged with it (its latest `failed` log row,
-- through the log's (job_id, created DESC) index): the exception, and the traceback's last 300
-- characters (where it was raised).
SELECT j.id AS job_id, 'failed'::text AS status, j.updated AS failed_at,
       left(concat_ws(': ', l.traceback ->> 'exception_type', l.traceback ->> 'exception_message'), 300) AS error,
       right(l.traceback ->> 'traceback', 300) AS traceback, j.attempts, left(encode(j.payload, 'escape'), 200) AS payload
FROM {jobs} AS j
LEFT JOIN LATERAL (
    SELECT g.traceback FROM {log} AS g
    WHERE g.job_id = j.id AND g.status = 'failed'
    ORDER BY g.created DESC LIMIT 1
) AS l ON true
WHERE j.entrypoint = %(queue)s::text AND j.status = 'failed'
ORDER BY j.updated DESC, j.id DESC
LIMIT %(limit)s::integer;

-- name: failed_held_no_log
-- The same where the install has no log table with tracebacks (an older PgQueuer): no error.
SELECT j.id AS job_id, 'failed'::text AS status, j.updated AS failed_at, NULL::text AS error, NULL::text AS traceback,
       j.attempts, left(encode(j.payload, 'escape'), 200) AS payload
FROM {jobs} AS j
WHERE j.entrypoint = %(queue)s::text AND j.status = 'failed'
ORDER BY j.updated DESC, j.id DESC
LIMIT %(limit)s::integer;

-- name: exceptions
-- Enter: one entrypoint's jobs that failed and were deleted (on_failure 'delete', the default):
-- their `exception` log rows, newest first, with the exception and the traceback's last 300
-- characters (the job row is gone: its attempts and payload with it). The log's rows of that
-- status are found through its (status) index.
SELECT l.job_id, 'exception'::text AS status, l.created AS failed_at,
       left(concat_ws(': ', l.traceback ->> 'exception_type', l.traceback ->> 'exception_message'), 300) AS error,
       right(l.traceback ->> 'traceback', 300) AS traceback, NULL::integer AS attempts, NULL::text AS payload
FROM {log} AS l
WHERE l.status = 'exception' AND l.entrypoint = %(queue)s::text
ORDER BY l.id DESC
LIMIT %(limit)s::integer;
