-- Graphile Worker (0.16 and later: `_private_jobs`, `_private_tasks`, `_private_job_queues`):
-- the job console's reads and actions (jobs/graphile_worker.py). A queue is a task
-- (`task:<identifier>`: %(task)s) or a named queue (`queue:<queue_name>`: %(queue_name)s), as
-- the queues probe names its rows; the other of the two parameters is NULL.
-- States as probes/sources/graphile_worker.py counts them (get_job's view of a job): in flight =
-- locked; dead = attempts exhausted; delayed = run_at ahead; blocked = due but its named queue is
-- locked (or gone); ready = the rest. Completed jobs are deleted by Graphile Worker: none is kept.
-- Its only indexes on `_private_jobs` are the primary key (id), the unique `key`, and two partial
-- indexes on (priority, run_at) for get_job: none leads a task's or a named queue's jobs by id,
-- so every list walks the primary key, at most SCAN_ROWS rows a page (`window`, then `page`).

-- name: state
-- Fragment, over a job `j` of {jobs} and its named queue `q` (LEFT JOIN {job_queues}): its
-- queuetop state, in the order the probe's job table classifies a row.
CASE WHEN j.locked_at IS NOT NULL THEN 'in_flight'
     WHEN j.attempts >= j.max_attempts THEN 'dead'
     WHEN j.run_at > now() THEN 'delayed'
     WHEN j.job_queue_id IS NOT NULL AND (q.id IS NULL OR q.locked_at IS NOT NULL) THEN 'blocked'
     ELSE 'ready' END

-- name: status
-- Fragment, over `j` and `q` as `state`: the job in Graphile Worker's own words (it has no status
-- column: `is_available` = not locked and attempts left; "permanently failed" = attempts used up).
CASE WHEN j.locked_at IS NOT NULL THEN 'locked'
     WHEN j.attempts >= j.max_attempts THEN 'permanently failed'
     WHEN j.run_at > now() AND j.attempts > 0 THEN 'failed, retry scheduled'
     WHEN j.run_at > now() THEN 'scheduled'
     WHEN j.job_queue_id IS NOT NULL AND (q.id IS NULL OR q.locked_at IS NOT NULL) THEN 'available, named queue locked'
     WHEN j.attempts > 0 THEN 'failed, retry due'
     ELSE 'available' END

-- name: window
-- The ids a page may look at, oldest first: at most %(scan)s of them after %(after)s (NULL: from
-- the first), read on the primary key alone. `upto`: the last of them; `scanned`: how many.
SELECT max(w.id)::text AS upto, count(*)::integer AS scanned
FROM (SELECT j.id FROM {jobs} AS j
      WHERE (%(after)s::bigint IS NULL OR j.id > %(after)s::bigint)
      ORDER BY j.id
      LIMIT %(scan)s::integer) AS w;

-- name: window_newest
-- `window`, newest first: at most %(scan)s ids before %(after)s; `upto` the smallest of them.
SELECT min(w.id)::text AS upto, count(*)::integer AS scanned
FROM (SELECT j.id FROM {jobs} AS j
      WHERE (%(after)s::bigint IS NULL OR j.id < %(after)s::bigint)
      ORDER BY j.id DESC
      LIMIT %(scan)s::integer) AS w;

-- name: page
-- The queue's jobs after %(after)s up to %(upto)s (the window; NULL: no bound), oldest first, in
-- the states %(states)s (NULL: any), of task %(kind)s, whose payload contains %(match)s or whose
-- text is ILIKE %(text)s, among the ids %(ids)s (NULL: any): at most %(limit)s.
SELECT x.*
FROM (SELECT j.id::text AS id, t.identifier AS task, q.queue_name, {state} AS state, {status} AS status,
             j.attempts, j.max_attempts, j.created_at, j.run_at,
             extract(epoch FROM now() - j.created_at)::float8 AS age_s, j.last_error, j.payload AS args, j.id AS seq
      FROM {jobs} AS j
      JOIN {tasks} AS t ON t.id = j.task_id
      LEFT JOIN {job_queues} AS q ON q.id = j.job_queue_id
      WHERE (%(after)s::bigint IS NULL OR j.id > %(after)s::bigint)
        AND (%(upto)s::bigint IS NULL OR j.id <= %(upto)s::bigint)
        AND (%(ids)s::bigint[] IS NULL OR j.id = ANY(%(ids)s::bigint[]))
        AND (%(task)s::text IS NULL OR t.identifier = %(task)s::text)
        AND (%(queue_name)s::text IS NULL OR q.queue_name = %(queue_name)s::text)
        AND (%(kind)s::text IS NULL OR t.identifier = %(kind)s::text)
        AND (%(match)s::jsonb IS NULL OR j.payload::jsonb @> %(match)s::jsonb)
        AND (%(text)s::text IS NULL OR j.payload::text ILIKE %(text)s::text)) AS x
WHERE (%(states)s::text[] IS NULL OR x.state = ANY(%(states)s::text[]))
ORDER BY x.seq
LIMIT %(limit)s::integer;

-- name: page_newest
-- `page`, newest first: before %(after)s, down to %(upto)s.
SELECT x.*
FROM (SELECT j.id::text AS id, t.identifier AS task, q.queue_name, {state} AS state, {status} AS status,
             j.attempts, j.max_attempts, j.created_at, j.run_at,
             extract(epoch FROM now() - j.created_at)::float8 AS age_s, j.last_error, j.payload AS args, j.id AS seq
      FROM {jobs} AS j
      JOIN {tasks} AS t ON t.id = j.task_id
      LEFT JOIN {job_queues} AS q ON q.id = j.job_queue_id
      WHERE (%(after)s::bigint IS NULL OR j.id < %(after)s::bigint)
        AND (%(upto)s::bigint IS NULL OR j.id >= %(upto)s::bigint)
        AND (%(ids)s::bigint[] IS NULL OR j.id = ANY(%(ids)s::bigint[]))
        AND (%(task)s::text IS NULL OR t.identifier = %(task)s::text)
        AND (%(queue_name)s::text IS NULL OR q.queue_name = %(queue_name)s::text)
        AND (%(kind)s::text IS NULL OR t.identifier = %(kind)s::text)
        AND (%(match)s::jsonb IS NULL OR j.payload::jsonb @> %(match)s::jsonb)
        AND (%(text)s::text IS NULL OR j.payload::text ILIKE %(text)s::text)) AS x
WHERE (%(states)s::text[] IS NULL OR x.state = ANY(%(states)s::text[]))
ORDER BY x.seq DESC
LIMIT %(limit)s::integer;

-- name: job
-- One job of the queue, whole: its columns, its named queue's lock, its state and status.
SELECT j.id::text AS id, t.identifier AS task, q.queue_name, {state} AS state, {status} AS status,
       j.attempts, j.max_attempts, j.created_at, j.run_at, extract(epoch FROM now() - j.created_at)::float8 AS age_s,
       j.last_error, j.payload AS args, j.locked_by, j.locked_at, j.priority, j.key, j.revision, j.flags, j.updated_at,
       j.is_available, j.task_id, j.job_queue_id, q.locked_by AS queue_holder, q.locked_at AS queue_since
FROM {jobs} AS j
JOIN {tasks} AS t ON t.id = j.task_id
LEFT JOIN {job_queues} AS q ON q.id = j.job_queue_id
WHERE j.id = %(id)s::bigint
  AND (%(task)s::text IS NULL OR t.identifier = %(task)s::text)
  AND (%(queue_name)s::text IS NULL OR q.queue_name = %(queue_name)s::text);

-- name: pick
-- Compare-and-set, before an action: the jobs %(ids)s of the queue still in one of the states
-- %(states)s, row-locked until the caller's transaction ends (a worker's get_job that holds one
-- of them is waited for, then the job is looked at again: locked by then, it is left out).
SELECT j.id
FROM {jobs} AS j
JOIN {tasks} AS t ON t.id = j.task_id
LEFT JOIN {job_queues} AS q ON q.id = j.job_queue_id
WHERE j.id = ANY(%(ids)s::bigint[])
  AND (%(task)s::text IS NULL OR t.identifier = %(task)s::text)
  AND (%(queue_name)s::text IS NULL OR q.queue_name = %(queue_name)s::text)
  AND {state} = ANY(%(states)s::text[])
ORDER BY j.id
FOR UPDATE OF j;

-- name: retry
-- Graphile Worker's reschedule_jobs (WorkerUtils.rescheduleJobs): a permanently failed job due
-- now with its attempts back to 0; it skips a job a worker has locked (for less than 4 hours).
SELECT r.id::text AS id FROM {reschedule_jobs}(%(ids)s::bigint[], run_at := now(), attempts := 0) AS r ORDER BY r.id;

-- name: run_now
-- Graphile Worker's reschedule_jobs (WorkerUtils.rescheduleJobs({runAt: now})): due now.
SELECT r.id::text AS id FROM {reschedule_jobs}(%(ids)s::bigint[], run_at := now()) AS r ORDER BY r.id;

-- name: cancel
-- Graphile Worker's permanently_fail_jobs (WorkerUtils.permanentlyFailJobs): attempts set to
-- max_attempts, last_error to %(reason)s; the job is kept, never fetched again.
SELECT r.id::text AS id FROM {permanently_fail_jobs}(%(ids)s::bigint[], %(reason)s::text) AS r ORDER BY r.id;

-- name: delete
-- Graphile Worker's complete_jobs (WorkerUtils.completeJobs): completing a job deletes it.
SELECT r.id::text AS id FROM {complete_jobs}(%(ids)s::bigint[]) AS r ORDER BY r.id;

-- name: notify
-- What add_job/add_jobs send on channel `jobs:insert` (migration 000018) to wake an idle worker:
-- its pool nudges up to `count` idle workers to fetch now instead of at their next poll.
-- reschedule_jobs sends nothing, so a job it made due would wait for the next poll.
SELECT pg_notify('jobs:insert', '{"r":' || random()::text || ',"count":' || %(count)s::integer::text || '}');
