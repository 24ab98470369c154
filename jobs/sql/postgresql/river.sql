-- River (https://riverqueue.com): its jobs as the job console reads and acts on them. Every job in
-- `river_job` (`{jobs}`), many queues in the one table, a `river_job_state` enum (`{state_type}`);
-- its queue registry `river_queue` (`{queues}`, River 0.5 and later). States as the probe counts
-- them (probes/sources/river.py): ready = available and due (River's fetch: `state = 'available'
-- AND scheduled_at <= now()`), blocked = that in a paused queue, delayed = available with a
-- schedule ahead, scheduled, retryable, pending (and blocked), in_flight = running, dead =
-- discarded, done = completed or cancelled.
--
-- The actions are River's own statements, batched over ids (River 0.44,
-- riverdriver/riverpgxv5/internal/dbsqlc/river_job.sql and river_queue.sql, and client.go's
-- QueuePause/QueueResume): JobRetry, JobCancel (with its `<schema>.river_control` notification),
-- JobDelete, QueuePause, QueueResume. Each first takes the ids still in a state the action applies
-- to (compare-and-set: `{state_of}` = one of %(classes)s), locking them, skipping a row another
-- session holds locked at that moment (River's own statements wait for it instead), then changes
-- them with River's own conditions.

-- name: state_of
-- Fragment, over one job `j`: its queuetop state (%(paused)s: its queue is paused in river_queue,
-- so a due available job is one River's producer does not fetch now: blocked).
CASE WHEN j.state = 'available' AND j.scheduled_at > now() THEN 'delayed'
     WHEN j.state = 'available' THEN CASE WHEN %(paused)s::boolean THEN 'blocked' ELSE 'ready' END
     WHEN j.state = 'running' THEN 'in_flight'
     WHEN j.state = 'discarded' THEN 'dead'
     WHEN j.state IN ('completed', 'cancelled') THEN 'done'
     ELSE 'delayed' END

-- name: install
-- What this install has: the enum's labels (River 0.4 added `pending`), its queue registry, a
-- GIN index on args and its fetching index on (state, queue, ...) (River's migration 002 creates
-- `river_job_args_index` and `river_job_prioritized_fetching_index`; the schema River's Python
-- client ships has neither).
SELECT enum_range(NULL::{state_type})::text[] AS labels,
       to_regclass(%(queues_table)s::text) IS NOT NULL AS has_registry,
       (SELECT i.relname::text
        FROM pg_index AS x
        JOIN pg_class AS i ON i.oid = x.indexrelid
        JOIN pg_am AS am ON am.oid = i.relam
        JOIN pg_attribute AS a ON a.attrelid = x.indrelid AND a.attnum = x.indkey[0]
        WHERE x.indrelid = to_regclass(%(jobs_table)s::text) AND am.amname = 'gin' AND a.attname = 'args'
          AND x.indnatts = 1 AND x.indisvalid
        ORDER BY i.relname LIMIT 1) AS args_index,
       (SELECT i.relname::text
        FROM pg_index AS x
        JOIN pg_class AS i ON i.oid = x.indexrelid
        JOIN pg_am AS am ON am.oid = i.relam
        JOIN pg_attribute AS a1 ON a1.attrelid = x.indrelid AND a1.attnum = x.indkey[0]
        JOIN pg_attribute AS a2 ON a2.attrelid = x.indrelid AND a2.attnum = x.indkey[1]
        WHERE x.indrelid = to_regclass(%(jobs_table)s::text) AND am.amname = 'btree' AND a1.attname = 'state'
          AND a2.attname = 'queue' AND x.indpred IS NULL AND x.indisvalid
        ORDER BY i.relname LIMIT 1) AS fetch_index;

-- name: paused
-- River's QueueGet: the queue's paused_at (a producer does not fetch while it is set).
SELECT paused_at IS NOT NULL AS paused FROM {queues} WHERE name = %(queue)s::text;

-- name: bitmap_on
-- The probe session turns bitmap scans off (one collects every match before a LIMIT applies);
-- led_asc wants every match of its index (then keeps the first): on for it. A GIN index is read
-- only through a bitmap scan, and a bitmap heap scan reads a state's rows in the table's order
-- where the visibility map does not spare an index-only scan its visits to the table.
SELECT set_config('enable_bitmapscan', 'on', true);

-- name: bitmap_off
SELECT set_config('enable_bitmapscan', 'off', true);

-- name: led_asc
-- A page of the queue's jobs in id order after %(after)s, read through an index: River's fetching
-- index (state, queue, priority, scheduled_at, id) for the states asked (every state of River's
-- when none is), or River's GIN index on args for a search by args. The index gives the
-- matching ids in its own order; the smallest %(limit)s are kept (`id + 0`: never a walk of the
-- primary key, which reads every job before the first match when the matches are the newest, as
-- waiting jobs are), then their rows. Bitmap scans are on for it (bitmap_on).
WITH picked AS MATERIALIZED (
    SELECT j.id FROM {jobs} AS j
    WHERE j.queue = %(queue)s::text
      AND j.id > coalesce(%(after)s::bigint, 0)
      AND (%(states)s::text[] IS NULL OR j.state = ANY(%(states)s::text[]::{state_type}[]))
      AND (%(classes)s::text[] IS NULL OR {state_of} = ANY(%(classes)s::text[]))
      AND (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
      AND (%(match)s::jsonb IS NULL OR j.args @> %(match)s::jsonb)
      AND (%(ids)s::bigint[] IS NULL OR j.id = ANY(%(ids)s::bigint[]))
    ORDER BY j.id + 0
    LIMIT %(limit)s::integer
)
SELECT j.id, j.queue, {state_of} AS state, j.state::text AS status, j.kind, j.attempt AS attempts, j.max_attempts,
       j.created_at, j.scheduled_at, extract(epoch FROM now() - j.created_at)::float8 AS age_s,
       j.errors[array_upper(j.errors, 1)] ->> 'error' AS last_error, j.args
FROM picked JOIN {jobs} AS j ON j.id = picked.id
ORDER BY j.id;

-- name: led_desc
WITH picked AS MATERIALIZED (
    SELECT j.id FROM {jobs} AS j
    WHERE j.queue = %(queue)s::text
      AND j.id < coalesce(%(after)s::bigint, 9223372036854775807)
      AND (%(states)s::text[] IS NULL OR j.state = ANY(%(states)s::text[]::{state_type}[]))
      AND (%(classes)s::text[] IS NULL OR {state_of} = ANY(%(classes)s::text[]))
      AND (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
      AND (%(match)s::jsonb IS NULL OR j.args @> %(match)s::jsonb)
      AND (%(ids)s::bigint[] IS NULL OR j.id = ANY(%(ids)s::bigint[]))
    ORDER BY j.id + 0 DESC
    LIMIT %(limit)s::integer
)
SELECT j.id, j.queue, {state_of} AS state, j.state::text AS status, j.kind, j.attempt AS attempts, j.max_attempts,
       j.created_at, j.scheduled_at, extract(epoch FROM now() - j.created_at)::float8 AS age_s,
       j.errors[array_upper(j.errors, 1)] ->> 'error' AS last_error, j.args
FROM picked JOIN {jobs} AS j ON j.id = picked.id
ORDER BY j.id DESC;

-- name: walk_asc
-- First, a walk of the primary key: the next %(scan)s jobs in id order after %(after)s (every
-- queue's), and of those the ones asked for: a page at once where they are many among the jobs
-- (all of a queue's, finished ones, ...), bounded where they are few (then led_asc reads them
-- through an index). A search no index leads (a text search; a search by args without the GIN
-- index) stops there, saying how far it read.
SELECT j.id, j.queue, {state_of} AS state, j.state::text AS status, j.kind, j.attempt AS attempts, j.max_attempts,
       j.created_at, j.scheduled_at, extract(epoch FROM now() - j.created_at)::float8 AS age_s,
       j.errors[array_upper(j.errors, 1)] ->> 'error' AS last_error, j.args
FROM (SELECT * FROM {jobs} AS w WHERE w.id > coalesce(%(after)s::bigint, 0) ORDER BY w.id LIMIT %(scan)s::integer) AS j
WHERE j.queue = %(queue)s::text
  AND (%(classes)s::text[] IS NULL OR {state_of} = ANY(%(classes)s::text[]))
  AND (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
  AND (%(match)s::jsonb IS NULL OR j.args @> %(match)s::jsonb)
  AND (%(text)s::text IS NULL OR j.args::text ILIKE %(text)s::text)
  AND (%(ids)s::bigint[] IS NULL OR j.id = ANY(%(ids)s::bigint[]))
ORDER BY j.id
LIMIT %(limit)s::integer;

-- name: walk_desc
SELECT j.id, j.queue, {state_of} AS state, j.state::text AS status, j.kind, j.attempt AS attempts, j.max_attempts,
       j.created_at, j.scheduled_at, extract(epoch FROM now() - j.created_at)::float8 AS age_s,
       j.errors[array_upper(j.errors, 1)] ->> 'error' AS last_error, j.args
FROM (SELECT * FROM {jobs} AS w WHERE w.id < coalesce(%(after)s::bigint, 9223372036854775807) ORDER BY w.id DESC
      LIMIT %(scan)s::integer) AS j
WHERE j.queue = %(queue)s::text
  AND (%(classes)s::text[] IS NULL OR {state_of} = ANY(%(classes)s::text[]))
  AND (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
  AND (%(match)s::jsonb IS NULL OR j.args @> %(match)s::jsonb)
  AND (%(text)s::text IS NULL OR j.args::text ILIKE %(text)s::text)
  AND (%(ids)s::bigint[] IS NULL OR j.id = ANY(%(ids)s::bigint[]))
ORDER BY j.id DESC
LIMIT %(limit)s::integer;

-- name: walked_asc
-- How far a walk read: the rows of its window and the last id (an index-only scan).
SELECT count(*) AS scanned, max(w.id) AS last_id
FROM (SELECT id FROM {jobs} WHERE id > coalesce(%(after)s::bigint, 0) ORDER BY id LIMIT %(scan)s::integer) AS w;

-- name: walked_desc
SELECT count(*) AS scanned, min(w.id) AS last_id
FROM (SELECT id FROM {jobs} WHERE id < coalesce(%(after)s::bigint, 9223372036854775807) ORDER BY id DESC
      LIMIT %(scan)s::integer) AS w;

-- name: job
-- River's JobGetByID, in the queue asked about: the whole row (to_jsonb: whatever columns this
-- River version has), its errors as River appended them (oldest first), who attempted it.
SELECT j.id, j.queue, {state_of} AS state, j.state::text AS status, j.kind, j.attempt AS attempts, j.max_attempts,
       j.created_at, j.scheduled_at, extract(epoch FROM now() - j.created_at)::float8 AS age_s,
       j.errors[array_upper(j.errors, 1)] ->> 'error' AS last_error, j.args,
       coalesce(to_jsonb(j.errors), '[]'::jsonb) AS errors, j.attempted_by, to_jsonb(j) AS whole
FROM {jobs} AS j
WHERE j.id = %(id)s::bigint AND j.queue = %(queue)s::text;

-- name: retry
-- River's JobRetry, for each id still in a state asked for: made available now (scheduled_at =
-- now()), one more attempt allowed where it had used them all, no longer finalized; a running
-- job is not touched, nor an available job already due. River sends no notification for it
-- (client.go's JobRetry runs this statement only): a producer fetches it at its next poll
-- (FetchPollInterval, 1 s by default).
WITH locked AS (
    SELECT j.id FROM {jobs} AS j
    WHERE j.id = ANY(%(ids)s::bigint[]) AND j.queue = %(queue)s::text AND {state_of} = ANY(%(classes)s::text[])
    ORDER BY j.id
    FOR UPDATE SKIP LOCKED
)
UPDATE {jobs} AS j
SET state = 'available',
    max_attempts = CASE WHEN j.attempt = j.max_attempts THEN j.max_attempts + 1 ELSE j.max_attempts END,
    finalized_at = NULL,
    scheduled_at = now()
FROM locked
WHERE j.id = locked.id
    -- Do not touch running jobs:
    AND j.state != 'running'
    -- If the job is already available with a prior scheduled_at, leave it alone.
    AND NOT (j.state = 'available' AND j.scheduled_at < now())
RETURNING j.id;

-- name: cancel
-- River's JobCancel: a job not finalized gets a control notification on `<schema>.river_control`
-- ({"action": "cancel", "job_id": .., "queue": ..}, as json_build_object writes it), and
-- metadata.cancel_attempted_at (so the rescuer leaves it); a waiting job is cancelled at once
-- (finalized now); a running one stays running: its producer, told by the notification, cancels
-- its work, and River's completer then finalizes it as cancelled.
WITH locked AS (
    SELECT j.id, j.queue, j.state, j.finalized_at FROM {jobs} AS j
    WHERE j.id = ANY(%(ids)s::bigint[]) AND j.queue = %(queue)s::text AND {state_of} = ANY(%(classes)s::text[])
    ORDER BY j.id
    FOR UPDATE SKIP LOCKED
), notification AS (
    SELECT id,
           pg_notify(concat(%(schema)s::text, '.', %(control_topic)s::text),
                     json_build_object('action', 'cancel', 'job_id', id, 'queue', queue)::text)
    FROM locked
    WHERE state NOT IN ('cancelled', 'completed', 'discarded')
        AND finalized_at IS NULL
)
UPDATE {jobs} AS j
SET
    -- If the job is actively running, we want to let its current client and
    -- producer handle the cancellation. Otherwise, immediately cancel it.
    state = CASE WHEN j.state = 'running' THEN j.state ELSE 'cancelled' END,
    finalized_at = CASE WHEN j.state = 'running' THEN j.finalized_at ELSE now() END,
    -- Mark the job as cancelled by query so that the rescuer knows not to
    -- rescue it, even if it gets stuck in the running state:
    metadata = jsonb_set(j.metadata, ARRAY['cancel_attempted_at'], %(cancel_attempted_at)s::jsonb, true)
FROM notification
WHERE j.id = notification.id
RETURNING j.id;

-- name: delete
-- River's JobDelete: gone, unless running.
WITH locked AS (
    SELECT j.id FROM {jobs} AS j
    WHERE j.id = ANY(%(ids)s::bigint[]) AND j.queue = %(queue)s::text AND {state_of} = ANY(%(classes)s::text[])
    ORDER BY j.id
    FOR UPDATE SKIP LOCKED
)
DELETE FROM {jobs} AS j
USING locked
WHERE j.id = locked.id
    -- Do not touch running jobs:
    AND j.state != 'running'
RETURNING j.id;

-- name: pause
-- River's QueuePause then its control notification (client.go: QueuePause, then
-- notifyQueuePauseOrResume through PGNotifyMany, in one transaction): none when River has no row
-- for the queue (River returns ErrNotFound then).
WITH paused AS (
    UPDATE {queues}
    SET paused_at = CASE WHEN paused_at IS NULL THEN now() ELSE paused_at END,
        updated_at = CASE WHEN paused_at IS NULL THEN now() ELSE updated_at END
    WHERE name = %(queue)s::text
    RETURNING name
)
SELECT name, pg_notify(concat(%(schema)s::text, '.', %(control_topic)s::text), %(payload)s::text) IS NULL AS notified
FROM paused;

-- name: resume
-- River's QueueResume then its control notification.
WITH resumed AS (
    UPDATE {queues}
    SET paused_at = NULL,
        updated_at = CASE WHEN paused_at IS NOT NULL THEN now() ELSE updated_at END
    WHERE name = %(queue)s::text
    RETURNING name
)
SELECT name, pg_notify(concat(%(schema)s::text, '.', %(control_topic)s::text), %(payload)s::text) IS NULL AS notified
FROM resumed;
