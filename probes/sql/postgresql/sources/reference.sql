-- The reference engine's table queues (queuetop.queues, one table per queue).

-- name: registry
-- The engine's queues; the table's OID comes from the catalog, not from text we built.
SELECT q.name, n.nspname AS schema_name, c.relname AS table_name, c.oid AS relid
FROM queuetop.queues q
JOIN pg_namespace n ON n.nspname = 'queuetop'
JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = q.table_name
ORDER BY q.name;

-- name: head_window
-- Claims take the oldest visible row (ORDER BY id), so claimed and backing-off rows sit at the
-- head: the first `window` rows hold them all, and the rows past the window are ready. A row is
-- in flight when claimed with a visibility deadline still ahead (claim mode), or when an open
-- transaction has deleted or locked it (hold-transaction mode: xmax is a running transaction).
-- Delayed rows wait out a retry back-off. Past the window, depth is the window plus the id span
-- beyond it (two index lookups), flagged as an estimate.
WITH running AS (
    SELECT backend_xid AS xid FROM pg_stat_activity WHERE backend_xid IS NOT NULL
), head AS (
    SELECT h.id, h.enqueued_at,
           coalesce(h.claim_token IS NOT NULL AND h.visible_at > now(), false) AS claimed,
           coalesce(h.claim_token IS NULL AND h.visible_at > now(), false) AS delayed,
           coalesce(h.xmax <> '0'::xid AND h.xmax IN (SELECT xid FROM running), false) AS held
    FROM (SELECT id, enqueued_at, claim_token, visible_at, xmax FROM {table} ORDER BY id LIMIT %(window)s::integer) h
)
SELECT count(*) AS head_rows,
       count(*) FILTER (WHERE claimed OR (held AND NOT delayed)) AS in_flight,
       count(*) FILTER (WHERE delayed) AS delayed,
       extract(epoch FROM now() - min(enqueued_at) FILTER (WHERE NOT claimed AND NOT delayed AND NOT held))::float8
           AS oldest_ready_age_s,
       max(id) AS last_head_id,
       (SELECT max(id) FROM {table}) AS max_id
FROM head;

-- name: dead_letters
-- Exact up to `cap`, then the id span of the queue's dead letters (index endpoints).
SELECT (SELECT count(*) FROM (SELECT 1 FROM queuetop.dead_letters WHERE queue = %(queue)s::text
                               LIMIT %(cap)s::integer) d) AS counted,
       (SELECT max(id) - min(id) + 1 FROM queuetop.dead_letters WHERE queue = %(queue)s::text) AS span;

-- name: table_of
-- Enter: the table of one queue.
SELECT n.nspname AS schema_name, c.relname AS table_name
FROM queuetop.queues q
JOIN pg_namespace n ON n.nspname = 'queuetop'
JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = q.table_name
WHERE q.name = %(queue)s::text;

-- name: head
SELECT id, enqueued_at, attempts,
       CASE WHEN claim_token IS NOT NULL AND visible_at > now() THEN 'in flight'
            WHEN visible_at > now() THEN 'delayed'
            ELSE 'ready' END AS state,
       left(body::text, 200) AS body, last_error
FROM {table} ORDER BY id LIMIT %(limit)s::integer;

-- name: dead_head
SELECT message_id, attempts, died_at, left(last_error, 300) AS last_error, left(body::text, 200) AS body
FROM queuetop.dead_letters WHERE queue = %(queue)s::text
ORDER BY id DESC LIMIT %(limit)s::integer;
