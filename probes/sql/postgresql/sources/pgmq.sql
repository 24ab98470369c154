-- PGMQ (https://github.com/pgmq/pgmq): `pgmq.meta` lists the queues; each has a table
-- `q_<name>` (msg_id, read_ct, enqueued_at, vt, message) and an archive `a_<name>`. Its read
-- takes `vt <= now()` rows: ready; `vt` ahead after a read (read_ct > 0) is in flight, ahead on
-- an unread message is a delayed send; archived messages are dead. The counts themselves are the
-- generic job-table ones (sources/jobtable.sql), through the queue table's msg_id and vt indexes.

-- name: queues
-- Every queue and its two tables, named as pgmq.format_table_name names them, quoted here.
SELECT m.queue_name::text AS queue_name,
       format('%%I.%%I', n.nspname, lower('q_' || m.queue_name)) AS queue_table,
       format('%%I.%%I', n.nspname, lower('a_' || m.queue_name)) AS archive_table,
       EXISTS (SELECT 1 FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
               WHERE c.relnamespace = n.oid AND c.relname = lower('q_' || m.queue_name)
                 AND a.attname = 'headers' AND NOT a.attisdropped) AS has_headers
FROM {meta} m, pg_namespace n
WHERE n.nspname = %(schema)s::text
ORDER BY m.queue_name;

-- name: blocked
-- Fragment, over one message `j` of its queue table {table}: a FIFO read (read_grouped,
-- read_grouped_rr, read_grouped_head: "only groups whose head message is currently visible", the
-- head being "the absolute head (oldest) message id per FIFO group, regardless of visibility")
-- skips it though it is visible: its `x-pgmq-group` group's oldest message is not. A message with
-- no group header is never blocked (the grouped reads file them all in one default group, and
-- the plain read takes them). The groups' heads are found once per statement: a read of the
-- queue's grouped messages (PGMQ's own grouped reads need pgmq.create_fifo_index for theirs).
(j.headers->>'x-pgmq-group' IS NOT NULL AND j.headers->>'x-pgmq-group' IN (
    SELECT h.grp FROM (
        SELECT DISTINCT ON (g.headers->>'x-pgmq-group') g.headers->>'x-pgmq-group' AS grp, g.vt
        FROM {table} AS g WHERE g.headers->>'x-pgmq-group' IS NOT NULL
        ORDER BY g.headers->>'x-pgmq-group', g.msg_id) AS h
    WHERE h.vt > now()))


-- name: blocked_head
-- Enter: a queue's blocked messages (visible, in a FIFO group whose oldest message is not),
-- oldest first, each with that oldest message (`blocked_by`) and until when it is invisible.
WITH heads AS (
    SELECT DISTINCT ON (g.headers->>'x-pgmq-group') g.headers->>'x-pgmq-group' AS grp, g.msg_id, g.vt, g.read_ct
    FROM {table} AS g WHERE g.headers->>'x-pgmq-group' IS NOT NULL
    ORDER BY g.headers->>'x-pgmq-group', g.msg_id
)
SELECT m.msg_id, h.grp AS "group", h.msg_id AS blocked_by, h.read_ct AS blocked_by_read_ct, h.vt AS blocked_by_vt,
       left(m.message::text, 200) AS message
FROM {table} AS m
JOIN heads AS h ON h.grp = m.headers->>'x-pgmq-group'
WHERE h.vt > now() AND m.vt <= now()
ORDER BY m.msg_id
LIMIT %(limit)s::integer;