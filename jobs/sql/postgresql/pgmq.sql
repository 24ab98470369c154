-- PGMQ's messages, read and acted on (jobs/pgmq.py). A queue is a row of `pgmq.meta`; its
-- messages are the table `pgmq.q_<name>` (msg_id, read_ct, enqueued_at, last_read_at, vt,
-- message, headers), its archive `pgmq.a_<name>` (the same, and archived_at). The states are the
-- probe's (probes/sources/pgmq.py): ready = `vt <= now()` and not blocked; blocked = visible, in
-- a FIFO group (`x-pgmq-group` header) whose oldest message is not visible; in flight = `vt`
-- ahead of a message read at least once; delayed = `vt` ahead of a message never read (and the
-- blocked ones, as the snapshot counts them); dead = archived. Every table name below is one of
-- `pgmq.meta`'s queues, found by `queue`, never a name typed by a user.

-- name: queue
-- One queue of PGMQ's own list, and what its install has: its tables (named as
-- pgmq.format_table_name names them: lower('q_' || name)), whether they have the `headers`
-- column (later PGMQ releases: FIFO groups, headers kept by send and archive), and whether
-- pgmq.enable_notify_insert put its insert trigger on the queue table.
SELECT m.queue_name::text AS queue_name,
       lower('q_' || m.queue_name) AS queue_table,
       lower('a_' || m.queue_name) AS archive_table,
       to_regclass(format('%%I.%%I', n.nspname, lower('q_' || m.queue_name))) IS NOT NULL AS has_queue,
       to_regclass(format('%%I.%%I', n.nspname, lower('a_' || m.queue_name))) IS NOT NULL AS has_archive,
       EXISTS (SELECT 1 FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
               WHERE c.relnamespace = n.oid AND c.relname = lower('q_' || m.queue_name)
                 AND a.attname = 'headers' AND NOT a.attisdropped) AS has_headers,
       EXISTS (SELECT 1 FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
               WHERE c.relnamespace = n.oid AND c.relname = lower('a_' || m.queue_name)
                 AND a.attname = 'headers' AND NOT a.attisdropped) AS archive_has_headers,
       EXISTS (SELECT 1 FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
               WHERE c.relnamespace = n.oid AND c.relname = lower('q_' || m.queue_name)
                 AND t.tgname = 'trigger_notify_queue_insert_listeners') AS notifies
FROM {meta} AS m, pg_namespace AS n
WHERE n.nspname = %(schema)s::text AND m.queue_name = %(queue)s::text;

-- name: blocked
-- Fragment, over one message `j` of the queue table {table}: visible, yet PGMQ's FIFO reads
-- skip it, its group's oldest message (visible or not) being invisible. The probe's rule
-- (probes/sql/postgresql/sources/pgmq.sql `blocked`), the groups' heads found once per statement.
(j.headers->>'x-pgmq-group' IS NOT NULL AND j.headers->>'x-pgmq-group' IN (
    SELECT h.grp FROM (
        SELECT DISTINCT ON (g.headers->>'x-pgmq-group') g.headers->>'x-pgmq-group' AS grp, g.vt
        FROM {table} AS g WHERE g.headers->>'x-pgmq-group' IS NOT NULL
        ORDER BY g.headers->>'x-pgmq-group', g.msg_id) AS h
    WHERE h.vt > now()))

-- name: in_state
-- Fragment, over one message `j` of the queue table: in one of the states whose flag is set
-- ({blocked}: the fragment above, or false where the queue has no headers).
((%(s_ready)s::boolean AND j.vt <= now() AND NOT {blocked})
 OR (%(s_blocked)s::boolean AND j.vt <= now() AND {blocked})
 OR (%(s_delayed)s::boolean AND j.vt > now() AND j.read_ct = 0)
 OR (%(s_in_flight)s::boolean AND j.vt > now() AND j.read_ct > 0))

-- name: bounded
-- Fragment: a search's rows, at most %(scan)s of the table {table} on the keyset order (its
-- msg_id primary key), after the page's position; the search's filters read only these.
(SELECT b.* FROM {table} AS b
 WHERE b.msg_id > %(lo)s::bigint AND b.msg_id < %(hi)s::bigint
 ORDER BY b.msg_id {order}
 LIMIT %(scan)s::integer)

-- name: window
-- Where a bounded search of {table} stops: how many rows it read, the lowest and highest msg_id.
SELECT count(*) AS scanned, min(w.msg_id) AS low, max(w.msg_id) AS high
FROM {rows} AS w;

-- name: messages
-- A page of the queue table's messages ({rows}: the table, or a search's bounded rows) in the
-- flagged states, keyset-paged by msg_id (its primary key; a state's rows through the vt index
-- where the planner finds that cheaper), each with its state's parts.
SELECT j.msg_id, j.read_ct, j.enqueued_at, j.last_read_at, j.vt, j.message,
       NULL::timestamptz AS archived_at,
       extract(epoch FROM now() - j.enqueued_at)::float8 AS age_s,
       false AS archived, j.vt <= now() AS visible, {blocked} AS blocked
FROM {rows} AS j
WHERE j.msg_id > %(lo)s::bigint AND j.msg_id < %(hi)s::bigint
  AND {in_state}
  AND (%(ids)s::bigint[] IS NULL OR j.msg_id = ANY(%(ids)s::bigint[]))
  AND (%(match)s::jsonb IS NULL OR j.message @> %(match)s::jsonb)
  AND (%(pattern)s::text IS NULL OR j.message::text ILIKE %(pattern)s::text)
ORDER BY j.msg_id {order}
LIMIT %(limit)s::integer;

-- name: archived
-- A page of the archive (dead), keyset-paged by its msg_id primary key ({rows}: the archive, or
-- a search's bounded rows of it).
SELECT j.msg_id, j.read_ct, j.enqueued_at, j.last_read_at, j.vt, j.message, j.archived_at,
       extract(epoch FROM now() - j.enqueued_at)::float8 AS age_s,
       true AS archived, false AS visible, false AS blocked
FROM {rows} AS j
WHERE j.msg_id > %(lo)s::bigint AND j.msg_id < %(hi)s::bigint
  AND (%(ids)s::bigint[] IS NULL OR j.msg_id = ANY(%(ids)s::bigint[]))
  AND (%(match)s::jsonb IS NULL OR j.message @> %(match)s::jsonb)
  AND (%(pattern)s::text IS NULL OR j.message::text ILIKE %(pattern)s::text)
ORDER BY j.msg_id {order}
LIMIT %(limit)s::integer;

-- name: message
-- One message of the queue table, whole (its headers where the table has them).
SELECT j.msg_id, j.read_ct, j.enqueued_at, j.last_read_at, j.vt, j.message, to_jsonb(j) -> 'headers' AS headers,
       NULL::timestamptz AS archived_at,
       extract(epoch FROM now() - j.enqueued_at)::float8 AS age_s,
       false AS archived, j.vt <= now() AS visible, {blocked} AS blocked
FROM {table} AS j
WHERE j.msg_id = %(id)s::bigint;

-- name: archived_message
-- One message of the archive, whole.
SELECT j.msg_id, j.read_ct, j.enqueued_at, j.last_read_at, j.vt, j.message, to_jsonb(j) -> 'headers' AS headers,
       j.archived_at, extract(epoch FROM now() - j.enqueued_at)::float8 AS age_s,
       true AS archived, false AS visible, false AS blocked
FROM {table} AS j
WHERE j.msg_id = %(id)s::bigint;

-- name: delete
-- delete: PGMQ's pgmq.delete(queue, msg_ids[]) on the messages still in a flagged state, locked
-- first (a consumer's read, which locks FOR UPDATE SKIP LOCKED, is not waited for: skipped).
WITH still AS (
    SELECT j.msg_id FROM {table} AS j
    WHERE j.msg_id = ANY(%(ids)s::bigint[]) AND {in_state}
    FOR UPDATE OF j SKIP LOCKED
)
SELECT d.msg_id FROM pgmq.delete(%(queue)s::text, ARRAY(SELECT s.msg_id FROM still AS s)) AS d(msg_id);

-- name: run_now
-- run-now: PGMQ's pgmq.set_vt(queue, msg_id, 0) (visible from now) on each message still sent
-- with a delay and never read (a read one is a consumer's: left alone), locked first.
WITH due AS (
    SELECT j.msg_id FROM {table} AS j
    WHERE j.msg_id = ANY(%(ids)s::bigint[]) AND j.vt > now() AND j.read_ct = 0
    FOR UPDATE OF j SKIP LOCKED
)
SELECT v.msg_id FROM due AS d CROSS JOIN LATERAL pgmq.set_vt(%(queue)s::text, d.msg_id, 0) AS v;

-- name: retry
-- retry: an archived message sent again with PGMQ's pgmq.send(queue, message, headers, 0) (a
-- new msg_id, read_ct 0, visible now), and taken out of the archive, in one statement. PGMQ has
-- no function that takes a message out of its archive: the DELETE is the only write here that
-- is not one of its functions. A message another session is retrying (its row locked) is waited
-- for, then skipped (gone).
WITH taken AS (
    DELETE FROM {archive} AS a
    WHERE a.msg_id = ANY(%(ids)s::bigint[])
    RETURNING a.msg_id, a.message, a.headers
)
SELECT t.msg_id AS old_id, s.msg_id AS new_id
FROM taken AS t CROSS JOIN LATERAL pgmq.send(%(queue)s::text, t.message, t.headers, 0) AS s(msg_id);

-- name: retry_no_headers
-- The same on an older PGMQ, without headers: pgmq.send(queue, message, 0).
WITH taken AS (
    DELETE FROM {archive} AS a
    WHERE a.msg_id = ANY(%(ids)s::bigint[])
    RETURNING a.msg_id, a.message
)
SELECT t.msg_id AS old_id, s.msg_id AS new_id
FROM taken AS t CROSS JOIN LATERAL pgmq.send(%(queue)s::text, t.message, 0) AS s(msg_id);

-- name: notify_insert
-- The notification PGMQ's insert trigger (pgmq.notify_queue_listeners, on queues with
-- pgmq.enable_notify_insert) sends on a new message: `pgmq.<queue table>.INSERT`, no payload.
-- Sent after a run-now (set_vt sends none), so that a consumer waiting on it reads now.
SELECT pg_notify('pgmq.' || %(table)s::text || '.INSERT', NULL);
