-- PGMQ (https://github.com/pgmq/pgmq): `pgmq.meta` lists the queues; each has a table
-- `q_<name>` (msg_id, read_ct, enqueued_at, vt, message) and an archive `a_<name>`. Its read
-- takes `vt <= now()` rows: ready; `vt` ahead after a read (read_ct > 0) is in flight, ahead on
-- an unread message is a delayed send; archived messages are dead. The counts themselves are the
-- generic job-table ones (sources/jobtable.sql), through the queue table's msg_id and vt indexes.

-- name: version
-- The extension's version when PGMQ is installed as an extension (none when installed from SQL).
SELECT (SELECT extversion FROM pg_extension WHERE extname = 'pgmq') AS version;

-- name: queues
-- Every queue and its two tables, named as pgmq.format_table_name names them, quoted here.
SELECT m.queue_name::text AS queue_name,
       format('%%I.%%I', n.nspname, lower('q_' || m.queue_name)) AS queue_table,
       format('%%I.%%I', n.nspname, lower('a_' || m.queue_name)) AS archive_table
FROM {meta} m, pg_namespace n
WHERE n.nspname = %(schema)s::text
ORDER BY m.queue_name;
