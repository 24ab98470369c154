-- The reference engine's table queues (queues/sql/postgresql/schema.sql and queries.sql), as the
-- job console reads and acts on them. A queue is one table (`{table}`, listed in `{queues}`):
-- waiting and in-flight messages, deleted when acked; a message that failed max_attempts times
-- moves to the shared dead letters (`{dead}`). States as the probe reads them
-- (probes/sql/postgresql/sources/reference.sql, head_window): in_flight = claimed (a claim token
-- and a visibility deadline ahead) or held (locked by a transaction still running: a
-- hold-transaction worker's delete, which no other session sees committed yet); delayed = backing
-- off (no claim token, visible_at ahead); ready = the rest; dead = a dead letter. Nothing is kept
-- once finished (an ack deletes the message), and nothing is blocked.
--
-- The queue's table has one index, its primary key (id): a list of one state, or a search, reads
-- at most %(scan)s messages a page in id order and says how far it read. The dead letters are
-- read through their index (queue, id).

-- name: table_of
-- The queue's table, from the engine's registry.
SELECT table_name FROM {queues} WHERE name = %(queue)s::text;

-- name: state_of
-- Fragment, over one message `m` (with `running`, the transactions running now): its state.
CASE WHEN m.claim_token IS NOT NULL AND m.visible_at > now() THEN 'in_flight'
     WHEN m.visible_at > now() THEN 'delayed'
     WHEN m.xmax <> '0'::xid AND m.xmax IN (SELECT xid FROM running) THEN 'in_flight'
     ELSE 'ready' END

-- name: messages_asc
-- The next %(scan)s messages in id order after %(after)s (the primary key), and of those the ones
-- in a state asked for that match the search, at most %(limit)s.
WITH running AS (
    SELECT backend_xid AS xid FROM pg_stat_activity WHERE backend_xid IS NOT NULL
)
SELECT m.id, {state_of} AS state, m.enqueued_at, m.attempts, m.claim_token, m.visible_at, m.last_error, m.body,
       extract(epoch FROM now() - m.enqueued_at)::float8 AS age_s
FROM (SELECT w.id, w.enqueued_at, w.attempts, w.claim_token, w.visible_at, w.last_error, w.body, w.xmax
      FROM {table} AS w WHERE w.id > coalesce(%(after)s::bigint, 0) ORDER BY w.id LIMIT %(scan)s::integer) AS m
WHERE (%(classes)s::text[] IS NULL OR {state_of} = ANY(%(classes)s::text[]))
  AND (%(match)s::jsonb IS NULL OR m.body::jsonb @> %(match)s::jsonb)
  AND (%(text)s::text IS NULL OR m.body::text ILIKE %(text)s::text)
  AND (%(ids)s::bigint[] IS NULL OR m.id = ANY(%(ids)s::bigint[]))
ORDER BY m.id
LIMIT %(limit)s::integer;

-- name: messages_desc
WITH running AS (
    SELECT backend_xid AS xid FROM pg_stat_activity WHERE backend_xid IS NOT NULL
)
SELECT m.id, {state_of} AS state, m.enqueued_at, m.attempts, m.claim_token, m.visible_at, m.last_error, m.body,
       extract(epoch FROM now() - m.enqueued_at)::float8 AS age_s
FROM (SELECT w.id, w.enqueued_at, w.attempts, w.claim_token, w.visible_at, w.last_error, w.body, w.xmax
      FROM {table} AS w WHERE w.id < coalesce(%(after)s::bigint, 9223372036854775807) ORDER BY w.id DESC
      LIMIT %(scan)s::integer) AS m
WHERE (%(classes)s::text[] IS NULL OR {state_of} = ANY(%(classes)s::text[]))
  AND (%(match)s::jsonb IS NULL OR m.body::jsonb @> %(match)s::jsonb)
  AND (%(text)s::text IS NULL OR m.body::text ILIKE %(text)s::text)
  AND (%(ids)s::bigint[] IS NULL OR m.id = ANY(%(ids)s::bigint[]))
ORDER BY m.id DESC
LIMIT %(limit)s::integer;

-- name: messages_scanned_asc
-- How far a page of messages read: the rows of its window and the last id (index only).
SELECT count(*) AS scanned, max(w.id) AS last_id
FROM (SELECT id FROM {table} WHERE id > coalesce(%(after)s::bigint, 0) ORDER BY id LIMIT %(scan)s::integer) AS w;

-- name: messages_scanned_desc
SELECT count(*) AS scanned, min(w.id) AS last_id
FROM (SELECT id FROM {table} WHERE id < coalesce(%(after)s::bigint, 9223372036854775807) ORDER BY id DESC
      LIMIT %(scan)s::integer) AS w;

-- name: dead_asc
-- The queue's dead letters in id order after %(after)s, through their index (queue, id), at most
-- %(scan)s read, those matching the search.
SELECT d.id, d.message_id, d.enqueued_at, d.attempts, d.body, d.last_error, d.died_at,
       extract(epoch FROM now() - d.enqueued_at)::float8 AS age_s
FROM (SELECT * FROM {dead} AS w WHERE w.queue = %(queue)s::text AND w.id > coalesce(%(after)s::bigint, 0)
      ORDER BY w.id LIMIT %(scan)s::integer) AS d
WHERE (%(match)s::jsonb IS NULL OR d.body::jsonb @> %(match)s::jsonb)
  AND (%(text)s::text IS NULL OR d.body::text ILIKE %(text)s::text)
  AND (%(ids)s::bigint[] IS NULL OR d.id = ANY(%(ids)s::bigint[]))
ORDER BY d.id
LIMIT %(limit)s::integer;

-- name: dead_desc
SELECT d.id, d.message_id, d.enqueued_at, d.attempts, d.body, d.last_error, d.died_at,
       extract(epoch FROM now() - d.enqueued_at)::float8 AS age_s
FROM (SELECT * FROM {dead} AS w WHERE w.queue = %(queue)s::text AND w.id < coalesce(%(after)s::bigint, 9223372036854775807)
      ORDER BY w.id DESC LIMIT %(scan)s::integer) AS d
WHERE (%(match)s::jsonb IS NULL OR d.body::jsonb @> %(match)s::jsonb)
  AND (%(text)s::text IS NULL OR d.body::text ILIKE %(text)s::text)
  AND (%(ids)s::bigint[] IS NULL OR d.id = ANY(%(ids)s::bigint[]))
ORDER BY d.id DESC
LIMIT %(limit)s::integer;

-- name: dead_scanned_asc
SELECT count(*) AS scanned, max(w.id) AS last_id
FROM (SELECT id FROM {dead} WHERE queue = %(queue)s::text AND id > coalesce(%(after)s::bigint, 0)
      ORDER BY id LIMIT %(scan)s::integer) AS w;

-- name: dead_scanned_desc
SELECT count(*) AS scanned, min(w.id) AS last_id
FROM (SELECT id FROM {dead} WHERE queue = %(queue)s::text AND id < coalesce(%(after)s::bigint, 9223372036854775807)
      ORDER BY id DESC LIMIT %(scan)s::integer) AS w;

-- name: message
-- One message, whole, and the session holding it where one does (a hold-transaction worker's
-- open transaction: its xid is the row's xmax).
WITH running AS (
    SELECT backend_xid AS xid FROM pg_stat_activity WHERE backend_xid IS NOT NULL
)
SELECT m.id, {state_of} AS state, m.enqueued_at, m.attempts, m.claim_token, m.visible_at, m.last_error, m.body,
       extract(epoch FROM now() - m.enqueued_at)::float8 AS age_s,
       (SELECT a.application_name || ' (pid ' || a.pid || ')' FROM pg_stat_activity AS a
        WHERE m.xmax <> '0'::xid AND a.backend_xid = m.xmax LIMIT 1) AS holder
FROM {table} AS m
WHERE m.id = %(id)s::bigint;

-- name: dead_letter
SELECT d.id, d.message_id, d.enqueued_at, d.attempts, d.body, d.last_error, d.died_at,
       extract(epoch FROM now() - d.enqueued_at)::float8 AS age_s
FROM {dead} AS d
WHERE d.id = %(id)s::bigint AND d.queue = %(queue)s::text;

-- name: retry
-- The engine's retry_dead_letters for these dead letters: back in the queue as new messages
-- (attempts 0, ready now), oldest death first, and gone from the dead letters, in one statement.
-- The INSERT fires the queue's trigger (queuetop.notify_enqueue): `NOTIFY queuetop_enqueue`
-- with the queue's name, which wakes its workers, as any enqueue does. A dead letter another
-- session is retrying or purging right now (locked) is skipped.
WITH moved AS (
    DELETE FROM {dead}
    WHERE id IN (SELECT id FROM {dead} WHERE queue = %(queue)s::text AND id = ANY(%(ids)s::bigint[])
                 ORDER BY id FOR UPDATE SKIP LOCKED)
    RETURNING id, body
), requeued AS (
    INSERT INTO {table} (body) SELECT body FROM moved ORDER BY id
    RETURNING id
)
SELECT id FROM moved ORDER BY id;

-- name: run_now
-- A backing-off message (no claim token, visible_at ahead) made visible now, as the engine's
-- release_for_retry does with no delay (visible_at NULL; attempts and last error kept), and the
-- queue's workers woken as an enqueue wakes them (`queuetop_enqueue`, the queue's name).
WITH locked AS (
    SELECT id FROM {table}
    WHERE id = ANY(%(ids)s::bigint[]) AND claim_token IS NULL AND visible_at > now()
    ORDER BY id
    FOR UPDATE SKIP LOCKED
), made AS (
    UPDATE {table} AS m SET visible_at = NULL
    FROM locked
    WHERE m.id = locked.id
    RETURNING m.id
)
SELECT made.id, pg_notify(%(channel)s::text, %(queue)s::text)::text AS notified FROM made ORDER BY made.id;

-- name: delete_messages
-- Waiting messages deleted, as an ack deletes a processed one: only those still in a state asked
-- for, never one a worker has claimed (claim token, deadline ahead) or holds (row locked).
WITH running AS (
    SELECT backend_xid AS xid FROM pg_stat_activity WHERE backend_xid IS NOT NULL
), locked AS (
    SELECT m.id FROM {table} AS m
    WHERE m.id = ANY(%(ids)s::bigint[]) AND {state_of} = ANY(%(classes)s::text[])
    ORDER BY m.id
    FOR UPDATE SKIP LOCKED
)
DELETE FROM {table} AS m
USING locked
WHERE m.id = locked.id AND NOT (m.claim_token IS NOT NULL AND m.visible_at > now())
RETURNING m.id;

-- name: delete_dead
-- The engine's purge_dead_letters, for these dead letters.
DELETE FROM {dead}
WHERE id IN (SELECT id FROM {dead} WHERE queue = %(queue)s::text AND id = ANY(%(ids)s::bigint[])
             ORDER BY id FOR UPDATE SKIP LOCKED)
RETURNING id;
