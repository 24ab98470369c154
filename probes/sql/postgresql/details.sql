-- What Enter shows: a queue's head and dead letters, a session's query and locks. Bounded.

-- name: queue_head
SELECT id, enqueued_at, attempts,
       CASE WHEN claim_token IS NOT NULL AND visible_at > now() THEN 'in flight'
            WHEN visible_at > now() THEN 'delayed'
            ELSE 'ready' END AS state,
       left(body::text, 200) AS body, last_error
FROM {table} ORDER BY id LIMIT %(limit)s::integer;

-- name: queue_dead_letters
SELECT message_id, attempts, died_at, left(last_error, 300) AS last_error, left(body::text, 200) AS body
FROM queuetop.dead_letters WHERE queue = %(queue)s::text
ORDER BY id DESC LIMIT %(limit)s::integer;

-- name: relation
-- The queue's table, found in the catalog (the name is a value here, never SQL text).
SELECT c.oid AS relid, n.nspname AS schema_name, c.relname AS table_name
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = to_regclass(%(table)s::text);

-- name: column_present
SELECT EXISTS (SELECT 1 FROM pg_attribute
               WHERE attrelid = %(relid)s::oid AND attname = %(column)s::text AND attnum > 0 AND NOT attisdropped)
       AS present;

-- name: table_head
-- A declared table's head rows in its dequeue order, every column as text cut to 200 characters
-- (json_object_agg keeps the table's column order), so a wide row cannot flood the screen.
SELECT (SELECT json_object_agg(f.key, left(f.value, 200)) FROM json_each_text(row_to_json(t)) AS f) AS row
FROM (SELECT * FROM {table} ORDER BY {order} LIMIT %(limit)s::integer) t;

-- name: session
SELECT pid, usename, application_name, client_addr::text, backend_type, state, wait_event_type, wait_event,
       extract(epoch FROM now() - backend_start)::float8 AS session_age_s,
       extract(epoch FROM now() - xact_start)::float8 AS xact_age_s,
       extract(epoch FROM now() - query_start)::float8 AS query_age_s,
       query
FROM pg_stat_activity WHERE pid = %(pid)s::integer;

-- name: session_locks
SELECT locktype, mode, granted,
       CASE WHEN relation IS NOT NULL THEN relation::regclass::text END AS relation,
       transactionid::text AS transactionid, classid, objid, objsubid
FROM pg_locks WHERE pid = %(pid)s::integer
ORDER BY granted, locktype;

-- name: outbox_head
SELECT id, kind, destination, created_at, left(body::text, 200) AS body
FROM queuetop.outbox ORDER BY id LIMIT %(limit)s::integer;

-- name: inbox_head
SELECT attempt_id, message_id, claim_id, created_at
FROM queuetop.eo_inbox WHERE endpoint = %(endpoint)s::text ORDER BY created_at LIMIT %(limit)s::integer;
