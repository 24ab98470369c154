-- The engine's transactional outbox as a queue: rows not yet relayed.

-- name: head_window
-- Oldest first (bounded window; rows locked by a relay's open batch are in flight).
WITH running AS (
    SELECT backend_xid AS xid FROM pg_stat_activity WHERE backend_xid IS NOT NULL
), head AS (
    SELECT h.id, h.created_at,
           coalesce(h.xmax <> '0'::xid AND h.xmax IN (SELECT xid FROM running), false) AS held
    FROM (SELECT id, created_at, xmax FROM queuetop.outbox ORDER BY id LIMIT %(window)s::integer) h
)
SELECT count(*) AS head_rows, count(*) FILTER (WHERE held) AS in_flight,
       extract(epoch FROM now() - min(created_at) FILTER (WHERE NOT held))::float8 AS oldest_ready_age_s,
       max(id) AS last_head_id, (SELECT max(id) FROM queuetop.outbox) AS max_id,
       'queuetop.outbox'::regclass::oid AS relid
FROM head;

-- name: head
SELECT id, kind, destination, created_at, left(body::text, 200) AS body
FROM queuetop.outbox ORDER BY id LIMIT %(limit)s::integer;
