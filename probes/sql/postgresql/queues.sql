-- Queue probes. Cost is bounded by the head window (`window` rows read in index order), never by
-- the queue's depth: above the window, depth is the window plus the id span beyond it (index
-- endpoints), flagged as an estimate.

-- name: registry
-- The engine's queues; the table's OID comes from the catalog, not from text we built.
SELECT q.name, n.nspname AS schema_name, c.relname AS table_name, c.oid AS relid
FROM queuetop.queues q
JOIN pg_namespace n ON n.nspname = 'queuetop'
JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = q.table_name
ORDER BY q.name;

-- name: reference_head
-- A row is in flight when claimed with a visibility deadline still ahead (claim mode), or when
-- an in-progress transaction has deleted or locked it (hold-transaction mode: xmax is a running
-- transaction). Delayed rows wait out a retry back-off.
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

-- name: table_stats
-- Cumulative insert/delete counters (the rates come from their differences between samples),
-- bloat and vacuum, for every queue table in one statement.
SELECT relid, n_tup_ins, n_tup_del, n_live_tup, n_dead_tup, last_vacuum, last_autovacuum
FROM pg_stat_user_tables
WHERE relid = ANY(%(relids)s::oid[]);

-- name: resolve_table
-- A configured table name resolved through the catalog (to_regclass parses and quotes nothing
-- into SQL); the columns are checked against pg_attribute.
SELECT c.oid AS relid, n.nspname AS schema_name, c.relname AS table_name
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = to_regclass(%(table)s::text) AND c.relkind IN ('r', 'p');

-- name: table_columns
SELECT a.attname AS name, format_type(a.atttypid, a.atttypmod) AS type
FROM pg_attribute a
WHERE a.attrelid = %(relid)s::oid AND a.attnum > 0 AND NOT a.attisdropped;

-- name: leading_index_columns
SELECT a.attname AS name
FROM pg_index i
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
WHERE i.indrelid = %(relid)s::oid AND i.indisvalid;

-- name: user_head
-- A declared table: the same head window, with the configured columns (or NULLs) in fixed
-- places. {order}, {age}, {visible}, {state} are catalog-checked identifiers or NULL (typed by the
-- casts here, so the comparisons resolve either way).
WITH running AS (
    SELECT backend_xid AS xid FROM pg_stat_activity WHERE backend_xid IS NOT NULL
), head AS (
    SELECT h.k,
           h.ts,
           coalesce(h.vis > now(), false) AS hidden,
           coalesce(h.xmax <> '0'::xid AND h.xmax IN (SELECT xid FROM running), false) AS held,
           coalesce(h.st = ANY(%(in_flight_states)s::text[]), false) AS in_flight_state,
           coalesce(h.st = ANY(%(dead_states)s::text[]), false) AS dead_state,
           CASE WHEN cardinality(%(ready_states)s::text[]) = 0 THEN true
                ELSE coalesce(h.st = ANY(%(ready_states)s::text[]), false) END AS ready_state
    FROM (SELECT {order} AS k, ({age})::timestamptz AS ts, ({visible})::timestamptz AS vis, ({state})::text AS st, xmax
          FROM {table} ORDER BY {order} LIMIT %(window)s::integer) h
)
SELECT count(*) AS head_rows,
       count(*) FILTER (WHERE NOT dead_state AND (hidden OR held OR in_flight_state)) AS in_flight,
       count(*) FILTER (WHERE dead_state) AS dead,
       count(*) FILTER (WHERE ready_state AND NOT dead_state AND NOT hidden AND NOT held AND NOT in_flight_state)
           AS ready,
       extract(epoch FROM now() - min(ts) FILTER (WHERE ready_state AND NOT dead_state AND NOT hidden
                                                   AND NOT held AND NOT in_flight_state))::float8
           AS oldest_ready_age_s,
       max(k)::text AS last_head_key
FROM head;

-- name: user_max_key
SELECT max({order})::text AS max_key FROM {table};

-- name: planner_rows
-- The planner's row estimate scaled to the table's current size, as the planner itself does.
SELECT CASE WHEN c.relpages > 0
            THEN (c.reltuples / c.relpages) * (pg_relation_size(c.oid) / current_setting('block_size')::integer)
       END::bigint AS estimate
FROM pg_class c WHERE c.oid = %(relid)s::oid;

-- name: outbox_head
-- The transactional outbox as a queue: rows not yet relayed, oldest first (bounded window; rows
-- locked by a relay's open batch are in flight).
WITH running AS (
    SELECT backend_xid AS xid FROM pg_stat_activity WHERE backend_xid IS NOT NULL
), head AS (
    SELECT h.id, h.created_at,
           coalesce(h.xmax <> '0'::xid AND h.xmax IN (SELECT xid FROM running), false) AS held
    FROM (SELECT id, created_at, xmax FROM queuetop.outbox ORDER BY id LIMIT %(window)s::integer) h
)
SELECT count(*) AS head_rows, count(*) FILTER (WHERE held) AS in_flight, 0 AS delayed,
       extract(epoch FROM now() - min(created_at) FILTER (WHERE NOT held))::float8 AS oldest_ready_age_s,
       max(id) AS last_head_id, (SELECT max(id) FROM queuetop.outbox) AS max_id,
       'queuetop.outbox'::regclass::oid AS relid
FROM head;

-- name: inbox_heads
-- Exactly-once endpoints' inboxes as queues: records of messages in flight to each endpoint
-- (claimed ones are being processed). At most `window` records are read in all.
WITH h AS (
    SELECT endpoint, claim_id, created_at FROM queuetop.eo_inbox LIMIT %(window)s::integer
)
SELECT endpoint, count(*) AS head_rows, count(*) FILTER (WHERE claim_id IS NOT NULL) AS in_flight, 0 AS delayed,
       extract(epoch FROM now() - min(created_at) FILTER (WHERE claim_id IS NULL))::float8 AS oldest_ready_age_s,
       (SELECT count(*) FROM h) AS read_rows
FROM h GROUP BY endpoint ORDER BY endpoint;
