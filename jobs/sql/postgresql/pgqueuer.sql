-- PgQueuer's jobs, read and acted on (jobs/pgqueuer.py). Every job is a row of `pgqueuer`
-- ({jobs}: id, priority, queue_manager_id, created, updated, heartbeat, execute_after, status,
-- entrypoint, dedupe_key, payload, headers, attempts, slot) until it ends; `pgqueuer_log` ({log})
-- has a row per change of a job's status (with the traceback of a failure), kept until cleared.
-- An entrypoint is a queue. The states are the probe's (probes/sources/pgqueuer.py), from its
-- dequeue (QueryQueueBuilder.build_dequeue_query): ready = `queued` and due (`execute_after <
-- now()`), and `picked` gone stale (heartbeat older than the workers' heartbeat_timeout,
-- %(timeout_s)s: its dequeue takes those again); delayed = `queued` due later; in flight = the
-- other `picked`; dead = `failed` (held: on_failure 'hold') and the log's `exception` rows (failed
-- and deleted: on_failure 'delete', the default); done = the log's `successful`, `canceled` and
-- `deleted` rows (PgQueuer deletes the job itself).

-- name: install
-- What this install has: its log (%(log)s, its quoted name), the `failed` status (a held
-- failure: on_failure 'hold', later releases), the log's traceback column (later releases), and the NOTIFY channel its change trigger sends on (fn_pgqueuer_changed's body:
-- `pg_notify('<channel>', ...)`, DBSettings.channel, `ch_pgqueuer` unless set), which is the
-- channel its workers LISTEN on.
SELECT to_regclass(%(log)s::text) IS NOT NULL AS has_log,
       EXISTS (SELECT 1 FROM pg_attribute a JOIN pg_enum e ON e.enumtypid = a.atttypid
               WHERE a.attrelid = to_regclass(%(jobs)s::text) AND a.attname = 'status' AND NOT a.attisdropped
                 AND e.enumlabel = 'failed') AS has_failed,
       EXISTS (SELECT 1 FROM pg_attribute a
               WHERE a.attrelid = to_regclass(%(log)s::text) AND a.attname = 'traceback' AND NOT a.attisdropped) AS has_traceback,
       (SELECT substring(p.prosrc FROM 'pg_notify\(\s*''([^'']*)''')
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = %(schema)s::text AND p.proname = 'fn_pgqueuer_changed'
        LIMIT 1) AS channel;

-- name: bounded
-- Fragment: at most %(scan)s rows of {table} on the keyset order ({key}: its id, or the log's
-- job_id), after the page's position: what a list no index leads, or a search, reads.
(SELECT b.* FROM {table} AS b
 WHERE b.{key} > %(lo)s::bigint AND b.{key} < %(hi)s::bigint
 ORDER BY b.{key} {order}
 LIMIT %(scan)s::integer)

-- name: window
-- Where a bounded read stops: how many rows it read, and the lowest and highest key.
SELECT count(*) AS scanned, min(w.{key}) AS low, max(w.{key}) AS high
FROM {rows} AS w;

-- name: last_error
-- Fragment: the job `u`'s latest error, from the traceback PgQueuer logged with it (a failure,
-- or a retry's reason), through the log's (job_id, created DESC) index.
(SELECT left(concat_ws(': ', l.traceback ->> 'exception_type', l.traceback ->> 'exception_message'), 500)
 FROM {log} AS l
 WHERE l.job_id = u.id AND l.traceback IS NOT NULL
 ORDER BY l.created DESC
 LIMIT 1)

-- name: jobs
-- A page of the entrypoint's job rows in the flagged branches, keyset-paged by id: each branch
-- through PgQueuer's own index where it has one (queued: `pgqueuer_ep_ea_idx` (entrypoint,
-- execute_after) or the primary key; picked: `pgqueuer_picked_heartbeat_idx` (heartbeat); failed:
-- no index of the job table, so `held`: through their `failed` log rows); {rows}: the table, or a
-- search's bounded rows of it; {held_rows} and {held}: where held failures are looked for.
SELECT u.*, extract(epoch FROM now() - u.created)::float8 AS age_s, {last_error} AS last_error
FROM (
    (SELECT j.id, j.status::text AS status, j.entrypoint, j.priority, j.created, j.execute_after, j.heartbeat,
            j.queue_manager_id::text AS queue_manager_id, (to_jsonb(j) ->> 'attempts')::integer AS attempts, j.payload,
            'due'::text AS branch
     FROM {rows} AS j
     WHERE %(b_due)s::boolean AND j.entrypoint = %(queue)s::text AND j.status = 'queued' AND j.execute_after < now()
       AND j.id > %(lo)s::bigint AND j.id < %(hi)s::bigint AND {filters}
     ORDER BY j.id {order} LIMIT %(limit)s::integer)
    UNION ALL
    (SELECT j.id, j.status::text, j.entrypoint, j.priority, j.created, j.execute_after, j.heartbeat,
            j.queue_manager_id::text, (to_jsonb(j) ->> 'attempts')::integer, j.payload, 'later'
     FROM {rows} AS j
     WHERE %(b_later)s::boolean AND j.entrypoint = %(queue)s::text AND j.status = 'queued' AND j.execute_after >= now()
       AND j.id > %(lo)s::bigint AND j.id < %(hi)s::bigint AND {filters}
     ORDER BY j.id {order} LIMIT %(limit)s::integer)
    UNION ALL
    (SELECT j.id, j.status::text, j.entrypoint, j.priority, j.created, j.execute_after, j.heartbeat,
            j.queue_manager_id::text, (to_jsonb(j) ->> 'attempts')::integer, j.payload, 'stale'
     FROM {rows} AS j
     WHERE %(b_stale)s::boolean AND j.entrypoint = %(queue)s::text AND j.status = 'picked'
       AND j.heartbeat < now() - make_interval(secs => %(timeout_s)s::float8) AND j.execute_after < now()
       AND j.id > %(lo)s::bigint AND j.id < %(hi)s::bigint AND {filters}
     ORDER BY j.id {order} LIMIT %(limit)s::integer)
    UNION ALL
    (SELECT j.id, j.status::text, j.entrypoint, j.priority, j.created, j.execute_after, j.heartbeat,
            j.queue_manager_id::text, (to_jsonb(j) ->> 'attempts')::integer, j.payload, 'running'
     FROM {rows} AS j
     WHERE %(b_running)s::boolean AND j.entrypoint = %(queue)s::text AND j.status = 'picked'
       AND NOT (j.heartbeat < now() - make_interval(secs => %(timeout_s)s::float8) AND j.execute_after < now())
       AND j.id > %(lo)s::bigint AND j.id < %(hi)s::bigint AND {filters}
     ORDER BY j.id {order} LIMIT %(limit)s::integer)
    UNION ALL
    (SELECT j.id, j.status::text, j.entrypoint, j.priority, j.created, j.execute_after, j.heartbeat,
            j.queue_manager_id::text, (to_jsonb(j) ->> 'attempts')::integer, j.payload, 'failed'
     FROM {held_rows} AS j
     WHERE %(b_failed)s::boolean AND j.entrypoint = %(queue)s::text AND j.status::text = 'failed' AND {held}
       AND j.id > %(lo)s::bigint AND j.id < %(hi)s::bigint AND {filters}
     ORDER BY j.id {order} LIMIT %(limit)s::integer)
) AS u
ORDER BY u.id {order}
LIMIT %(limit)s::integer;

-- name: held
-- Fragment, over a job row `j`: a held failure of the entrypoint as the log's (status) index
-- finds it: PgQueuer's log_jobs writes its `failed` log row in the statement that holds the job
-- (build_log_job_query), so every held job has one until the log is cleared.
j.id IN (SELECT l.job_id FROM {log} AS l
         WHERE l.status = 'failed' AND l.entrypoint = %(queue)s::text
           AND l.job_id > %(lo)s::bigint AND l.job_id < %(hi)s::bigint)

-- name: filters
-- Fragment, over a job row `j`: its id among %(ids)s (when given), its payload's text (bytea as
-- encode(payload, 'escape') writes it: the pattern is escaped the same way) like %(pattern)s.
((%(ids)s::bigint[] IS NULL OR j.id = ANY(%(ids)s::bigint[]))
 AND (%(pattern)s::text IS NULL OR encode(j.payload, 'escape') ILIKE %(pattern)s::text))

-- name: exceptions
-- A page of the entrypoint's jobs that failed and were deleted (on_failure 'delete'): the log's
-- `exception` rows, through its (status) index, keyset-paged by job_id; when the job was first
-- logged (enqueued), through its (job_id, created DESC) index.
SELECT l.job_id AS id, l.status::text AS status, l.entrypoint, l.priority, l.created AS logged_at,
       left(concat_ws(': ', l.traceback ->> 'exception_type', l.traceback ->> 'exception_message'), 500) AS last_error,
       f.created, extract(epoch FROM now() - f.created)::float8 AS age_s
FROM {log} AS l
CROSS JOIN LATERAL (
    SELECT min(g.created) AS created FROM {log} AS g WHERE g.job_id = l.job_id
) AS f
WHERE l.status = 'exception' AND l.entrypoint = %(queue)s::text
  AND l.job_id > %(lo)s::bigint AND l.job_id < %(hi)s::bigint
  AND (%(ids)s::bigint[] IS NULL OR l.job_id = ANY(%(ids)s::bigint[]))
ORDER BY l.job_id {order}
LIMIT %(limit)s::integer;

-- name: exceptions_no_traceback
-- The same where the log has no traceback column (an older PgQueuer).
SELECT l.job_id AS id, l.status::text AS status, l.entrypoint, l.priority, l.created AS logged_at,
       NULL::text AS last_error, f.created, extract(epoch FROM now() - f.created)::float8 AS age_s
FROM {log} AS l
CROSS JOIN LATERAL (
    SELECT min(g.created) AS created FROM {log} AS g WHERE g.job_id = l.job_id
) AS f
WHERE l.status = 'exception' AND l.entrypoint = %(queue)s::text
  AND l.job_id > %(lo)s::bigint AND l.job_id < %(hi)s::bigint
  AND (%(ids)s::bigint[] IS NULL OR l.job_id = ANY(%(ids)s::bigint[]))
ORDER BY l.job_id {order}
LIMIT %(limit)s::integer;

-- name: finished
-- A page of the entrypoint's finished jobs: the log's `successful`, `canceled` and `deleted`
-- rows, read from {rows} (the log's rows bounded on its (job_id, created DESC) index: they are
-- most of the log, which no index leads by entrypoint and status in job_id order).
SELECT l.job_id AS id, l.status::text AS status, l.entrypoint, l.priority, l.created AS logged_at,
       NULL::text AS last_error, f.created, extract(epoch FROM now() - f.created)::float8 AS age_s
FROM {rows} AS l
CROSS JOIN LATERAL (
    SELECT min(g.created) AS created FROM {log} AS g WHERE g.job_id = l.job_id
) AS f
WHERE l.status::text IN ('successful', 'canceled', 'deleted') AND l.entrypoint = %(queue)s::text
  AND l.job_id > %(lo)s::bigint AND l.job_id < %(hi)s::bigint
  AND (%(ids)s::bigint[] IS NULL OR l.job_id = ANY(%(ids)s::bigint[]))
ORDER BY l.job_id {order}
LIMIT %(limit)s::integer;

-- name: job
-- One job row, whole: its columns (to_jsonb, the payload apart), and its branch (as `jobs` names them).
SELECT j.id, j.status::text AS status, j.entrypoint, j.priority, j.created, j.execute_after, j.heartbeat,
       j.queue_manager_id::text AS queue_manager_id, (to_jsonb(j) ->> 'attempts')::integer AS attempts, j.payload,
       CASE WHEN j.status = 'queued' THEN CASE WHEN j.execute_after < now() THEN 'due' ELSE 'later' END
            WHEN j.status = 'picked' THEN
                CASE WHEN j.heartbeat < now() - make_interval(secs => %(timeout_s)s::float8) AND j.execute_after < now()
                     THEN 'stale' ELSE 'running' END
            WHEN j.status::text = 'failed' THEN 'failed' END AS branch,
       extract(epoch FROM now() - j.created)::float8 AS age_s, to_jsonb(j) - 'payload' AS columns
FROM {jobs} AS j
WHERE j.id = %(id)s::bigint AND j.entrypoint = %(queue)s::text;

-- name: history
-- A job's log rows, oldest first (Queries.job_log_history), each with its traceback (NULL where
-- the log has no traceback column).
SELECT l.id AS log_id, l.created, l.status::text AS status, l.entrypoint, l.priority, to_jsonb(l) -> 'traceback' AS traceback,
       extract(epoch FROM now() - l.created)::float8 AS age_s
FROM {log} AS l
WHERE l.job_id = %(id)s::bigint
ORDER BY l.created, l.id;

-- name: in_state
-- Fragment, over a job row `j`: in one of the flagged branches (as `jobs` defines them).
((%(b_due)s::boolean AND j.status = 'queued' AND j.execute_after < now())
 OR (%(b_later)s::boolean AND j.status = 'queued' AND j.execute_after >= now())
 OR (%(b_stale)s::boolean AND j.status = 'picked'
     AND j.heartbeat < now() - make_interval(secs => %(timeout_s)s::float8) AND j.execute_after < now())
 OR (%(b_running)s::boolean AND j.status = 'picked'
     AND NOT (j.heartbeat < now() - make_interval(secs => %(timeout_s)s::float8) AND j.execute_after < now()))
 OR (%(b_failed)s::boolean AND j.status::text = 'failed'))

-- name: retry
-- retry: Queries.requeue_jobs's statement (QueueManagementService.requeue, `pgq requeue`): a held
-- `failed` job queued again, due now, attempts reset, logged `queued`; for this entrypoint.
WITH requeued AS (
    UPDATE {jobs} AS j
    SET status = 'queued', execute_after = NOW(), updated = NOW(), attempts = 0, queue_manager_id = NULL
    WHERE j.id = ANY(%(ids)s::bigint[]) AND j.entrypoint = %(queue)s::text AND {in_state}
    RETURNING j.id, j.entrypoint, j.priority
), logged AS (
    INSERT INTO {log} (job_id, status, entrypoint, priority)
    SELECT r.id, 'queued', r.entrypoint, r.priority FROM requeued AS r
)
SELECT r.id FROM requeued AS r;

-- name: run_now
-- run-now: a job queued for later made due now (`execute_after = NOW()`, as its enqueue writes
-- a job with no delay); PgQueuer has no call for it, and logs no row for a job that stays
-- `queued` (its log records changes of status).
UPDATE {jobs} AS j
SET execute_after = NOW(), updated = NOW()
WHERE j.id = ANY(%(ids)s::bigint[]) AND j.entrypoint = %(queue)s::text AND {in_state}
RETURNING j.id;

-- name: cancel
-- cancel: Queries.mark_job_as_cancelled's statement (build_log_job_query with status
-- `canceled`: the job row deleted, a `canceled` log row), for this entrypoint's jobs still
-- waiting or running; its cancellation_event follows (`notify_cancellation`).
WITH deleted AS (
    DELETE FROM {jobs} AS j
    WHERE j.id = ANY(%(ids)s::bigint[]) AND j.entrypoint = %(queue)s::text AND {in_state}
    RETURNING j.id, j.entrypoint, j.priority
), logged AS (
    INSERT INTO {log} (job_id, status, entrypoint, priority)
    SELECT d.id, 'canceled', d.entrypoint, d.priority FROM deleted AS d
)
SELECT d.id FROM deleted AS d;

-- name: delete
-- delete: Queries.clear_queue's statement (build_delete_from_queue_query: the rows deleted, each
-- logged `deleted`), for the given jobs rather than a whole entrypoint.
WITH deleted AS (
    DELETE FROM {jobs} AS j
    WHERE j.id = ANY(%(ids)s::bigint[]) AND j.entrypoint = %(queue)s::text AND {in_state}
    RETURNING j.id, j.entrypoint, j.priority
), logged AS (
    INSERT INTO {log} (job_id, status, entrypoint, priority)
    SELECT d.id, 'deleted', d.entrypoint, d.priority FROM deleted AS d
)
SELECT d.id FROM deleted AS d;

-- name: notify_changed
-- The `table_changed_event` PgQueuer's trigger (fn_pgqueuer_changed) sends on its table's
-- INSERT and DELETE: its workers wake and dequeue. Its UPDATE branch never fires (a statement
-- trigger has no OLD and NEW to compare), so after a retry or a run-now (both UPDATEs) it is sent
-- here, with the trigger's payload.
SELECT pg_notify(%(channel)s::text, json_build_object(
    'channel', %(channel)s::text, 'operation', 'update', 'sent_at', now(), 'table', %(table)s::text,
    'type', 'table_changed_event')::text);

-- name: notify_cancellation
-- Queries.notify_job_cancellation: the `cancellation_event` with the cancelled ids, on which a
-- worker running one of them cancels its context (Context.cancellation).
SELECT pg_notify(%(channel)s::text, json_build_object(
    'channel', %(channel)s::text, 'ids', %(ids)s::bigint[], 'sent_at', now(), 'type', 'cancellation_event')::text);
