-- Procrastinate's jobs (jobs/procrastinate.py): `procrastinate_jobs`, every queue in the one
-- table (queue_name), a status enum (todo, doing, succeeded, failed, cancelled, the legacy
-- aborting, aborted). States as the snapshot counts them (probes/sources/procrastinate.py, its
-- fetch procrastinate_fetch_job_v2): ready = todo, due (scheduled_at null or past) and not
-- behind its lock; blocked = todo, due, behind its lock (probes' `blocked` fragment, {blocked});
-- delayed = todo scheduled later, and the blocked ones; in_flight = doing (and aborting);
-- dead = failed; done = succeeded, cancelled, aborted. Fields: {jobs}, {events}, {workers} the
-- install's tables; {state_of}, {in_state} the fragments below; {columns} a job's columns.
-- The actions run procrastinate's own functions ({retry_fn}: procrastinate_retry_job_v2,
-- {cancel_fn}: procrastinate_cancel_job_v1), whose bodies name its tables unqualified: the
-- write transaction sets its search_path to the install's schema first (`search_path`).

-- name: state_of
-- Fragment: queuetop's state of row `j`.
CASE
    WHEN j.status = 'todo' AND (j.scheduled_at IS NULL OR j.scheduled_at <= now()) AND NOT {blocked} THEN 'ready'
    WHEN j.status = 'todo' AND (j.scheduled_at IS NULL OR j.scheduled_at <= now()) THEN 'blocked'
    WHEN j.status = 'todo' THEN 'delayed'
    WHEN j.status IN ('doing', 'aborting') THEN 'in_flight'
    WHEN j.status = 'failed' THEN 'dead'
    ELSE 'done'
END

-- name: in_ready
-- Fragment: row `j` is ready (what the fetch would take now). The status test as a literal,
-- so that the planner reads it through procrastinate's (id, lock) index of todo/doing jobs.
(j.status = 'todo' AND (j.scheduled_at IS NULL OR j.scheduled_at <= now()) AND NOT {blocked})

-- name: in_delayed
-- Fragment: row `j` is delayed: todo scheduled later, or due and behind its lock (blocked is a
-- part of delayed, as in the snapshot's figures).
(j.status = 'todo' AND (j.scheduled_at > now() OR {blocked}))

-- name: in_blocked
-- Fragment: row `j` is due and behind its lock.
(j.status = 'todo' AND (j.scheduled_at IS NULL OR j.scheduled_at <= now()) AND {blocked})

-- name: in_in_flight
-- Fragment: row `j` is being worked: doing, read through procrastinate's (id, lock) index of
-- todo/doing jobs. Not the legacy `aborting` (2.x): 3.x writes it nowhere, and its migration
-- 03.00.00_50 turned every aborting job into doing (abort_requested); `state_of` still calls one
-- in flight, as the snapshot does.
(j.status = 'doing')

-- name: in_dead
-- Fragment: row `j` failed for good.
(j.status = 'failed')

-- name: in_done
-- Fragment: row `j` finished: succeeded, cancelled or aborted (kept in the table).
(j.status IN ('succeeded', 'cancelled', 'aborted'))

-- name: in_any
-- Fragment: every row.
(j.queue_name IS NOT NULL)

-- name: columns
-- Fragment: what a listed job shows, of row `j`. Its creation time is its `deferred` event's
-- (the row has none of its own), found through the events' job_id index.
j.id, j.queue_name, j.task_name, j.priority, j.lock, j.queueing_lock, j.args, j.status::text AS status,
j.scheduled_at, j.attempts, j.abort_requested, j.worker_id, {state_of} AS state,
(SELECT min(e.at) FROM {events} AS e WHERE e.job_id = j.id AND e.type = 'deferred') AS created_at,
now() AS now

-- name: page
-- A page of one queue's jobs in a state (of the ids given, if any), keyset by id ({direction}: ASC oldest first, DESC
-- newest; {after_cmp}: > or <), one more than the page to know whether there is a next.
SELECT {columns}
FROM {jobs} AS j
WHERE j.queue_name = %(queue)s::text
  AND {in_state}
  AND (%(ids)s::bigint[] IS NULL OR j.id = ANY(%(ids)s::bigint[]))
  AND (%(after)s::bigint IS NULL OR j.id {after_cmp} %(after)s::bigint)
ORDER BY j.id {direction}
LIMIT %(limit)s::integer

-- name: search
-- A page that no index leads to the end: a search (task name, arguments), or a state that has
-- no index of its own (failed, finished). At most %(scan)s of the queue's jobs ({in_scan}: those
-- of an index-led state, else all) are read in keyset order; of those, the ones that match,
-- one more than the page. One row at least: how many were read and the last id read (the list
-- goes on from there), with the matches, if any, beside it.
WITH scanned AS MATERIALIZED (
    SELECT j.id, j.task_name, j.args, {state_of} AS state
    FROM {jobs} AS j
    WHERE j.queue_name = %(queue)s::text
      AND {in_scan}
      AND (%(ids)s::bigint[] IS NULL OR j.id = ANY(%(ids)s::bigint[]))
      AND (%(after)s::bigint IS NULL OR j.id {after_cmp} %(after)s::bigint)
    ORDER BY j.id {direction}
    LIMIT %(scan)s::integer
), hits AS (
    SELECT s.id
    FROM scanned AS s
    WHERE (%(states)s::text[] IS NULL OR s.state = ANY(%(states)s::text[]))
      AND (%(kind)s::text IS NULL OR s.task_name = %(kind)s::text)
      AND (%(match)s::jsonb IS NULL OR s.args @> %(match)s::jsonb)
      AND (%(pattern)s::text IS NULL OR s.args::text ILIKE %(pattern)s::text)
    ORDER BY s.id {direction}
    LIMIT %(limit)s::integer
), reach AS (
    SELECT count(*) AS scanned, max(id) AS highest, min(id) AS lowest FROM scanned
)
SELECT r.scanned, r.highest, r.lowest, found.*
FROM reach AS r
LEFT JOIN (SELECT {columns} FROM {jobs} AS j JOIN hits AS h ON h.id = j.id) AS found ON true
ORDER BY found.id {direction}

-- name: job
-- One job of the queue, whole, with the worker that holds it (its heartbeat, if still registered).
SELECT {columns}, w.last_heartbeat
FROM {jobs} AS j
LEFT JOIN {workers} AS w ON w.id = j.worker_id
WHERE j.id = %(id)s::bigint AND j.queue_name = %(queue)s::text

-- name: events
-- A job's events, oldest first: its history (deferred, started, deferred_for_retry, failed, ...).
SELECT e.type::text AS type, e.at
FROM {events} AS e
WHERE e.job_id = %(id)s::bigint
ORDER BY e.at, e.id

-- name: search_path
-- The write transaction's search_path: the install's schema, where procrastinate's functions
-- find its tables (as its own sessions do, its schema on their search_path).
SELECT set_config('search_path', quote_ident(%(schema)s::text), true)

-- name: retry
-- JobManager.retry_job_by_id (the shell's `retry`): procrastinate_retry_job_v2(id, now, NULL,
-- NULL, NULL) on each failed job still failed (locked first: compare-and-set), failed -> todo,
-- attempts + 1, scheduled now (its trigger records a `retried` event). Its retry sends no
-- notification; the job_inserted payload its insert trigger sends (on the queue's channel and
-- on procrastinate_any_queue_v1) wakes the listening workers now, not at their next poll.
WITH picked AS (
    SELECT j.id, j.queue_name
    FROM {jobs} AS j
    WHERE j.id = ANY(%(ids)s::bigint[]) AND j.queue_name = %(queue)s::text AND j.status = 'failed'
      AND {state_of} = ANY(%(states)s::text[])
    ORDER BY j.id
    FOR UPDATE OF j
)
SELECT p.id, {retry_fn}(p.id, now(), NULL, NULL, NULL) AS retried,
       pg_notify('procrastinate_queue_v1#' || p.queue_name, json_build_object('type', 'job_inserted', 'job_id', p.id)::text),
       pg_notify('procrastinate_any_queue_v1', json_build_object('type', 'job_inserted', 'job_id', p.id)::text)
FROM picked AS p
ORDER BY p.id

-- name: run_now
-- A todo job scheduled later, due now: its scheduled_at set to now (procrastinate has no call
-- for it; its scheduled-events trigger records a `scheduled` event at the new time), with the
-- job_inserted notification its insert trigger sends, so that listening workers fetch it now.
WITH picked AS (
    SELECT j.id
    FROM {jobs} AS j
    WHERE j.id = ANY(%(ids)s::bigint[]) AND j.queue_name = %(queue)s::text AND j.status = 'todo'
      AND j.scheduled_at > now() AND {state_of} = ANY(%(states)s::text[])
    ORDER BY j.id
    FOR UPDATE OF j
), moved AS (
    UPDATE {jobs} AS u SET scheduled_at = now()
    FROM picked AS p
    WHERE u.id = p.id
    RETURNING u.id, u.queue_name
)
SELECT m.id,
       pg_notify('procrastinate_queue_v1#' || m.queue_name, json_build_object('type', 'job_inserted', 'job_id', m.id)::text),
       pg_notify('procrastinate_any_queue_v1', json_build_object('type', 'job_inserted', 'job_id', m.id)::text)
FROM moved AS m
ORDER BY m.id

-- name: cancel
-- JobManager.cancel_job_by_id: procrastinate_cancel_job_v1(id, abort, false). A todo job:
-- abort false, todo -> cancelled. A doing job: abort true (its abort: abort_requested set, the
-- abort_job_requested notification its trigger sends; the task sees context.should_abort()),
-- only where not requested already. Each only while still in a state asked for (compare-and-set).
WITH picked AS (
    SELECT j.id, j.status
    FROM {jobs} AS j
    WHERE j.id = ANY(%(ids)s::bigint[]) AND j.queue_name = %(queue)s::text
      AND (j.status = 'todo' OR (j.status = 'doing' AND NOT j.abort_requested))
      AND {state_of} = ANY(%(states)s::text[])
    ORDER BY j.id
    FOR UPDATE OF j
)
SELECT {cancel_fn}(p.id, p.status = 'doing', false) AS id
FROM picked AS p
ORDER BY p.id

-- name: delete_todo
-- JobManager.cancel_job_by_id(delete_job=True): procrastinate_cancel_job_v1(id, false, true)
-- deletes a todo job (its events go with it: ON DELETE CASCADE).
WITH picked AS (
    SELECT j.id
    FROM {jobs} AS j
    WHERE j.id = ANY(%(ids)s::bigint[]) AND j.queue_name = %(queue)s::text AND j.status = 'todo'
      AND {state_of} = ANY(%(states)s::text[])
    ORDER BY j.id
    FOR UPDATE OF j
)
SELECT {cancel_fn}(p.id, false, true) AS id
FROM picked AS p
ORDER BY p.id

-- name: delete_finished
-- JobManager.delete_old_jobs's DELETE (its `delete_old_jobs` query), for the jobs given: failed,
-- succeeded, cancelled or aborted ones (its trigger unlinks a periodic defer; events cascade).
DELETE FROM {jobs} AS d
WHERE d.id IN (
    SELECT j.id
    FROM {jobs} AS j
    WHERE j.id = ANY(%(ids)s::bigint[]) AND j.queue_name = %(queue)s::text
      AND j.status IN ('failed', 'succeeded', 'cancelled', 'aborted')
      AND {state_of} = ANY(%(states)s::text[])
    ORDER BY j.id
    FOR UPDATE OF j
)
RETURNING d.id
