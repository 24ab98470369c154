-- The server the snapshot describes.

-- name: server_info
SELECT current_setting('server_version') AS version,
       current_setting('server_version_num')::integer AS version_num,
       current_database() AS database,
       pg_backend_pid() AS own_pid;

-- name: table_present
-- Whether a table of queuetop's own schema is there (the probes skip what is not installed).
SELECT to_regclass(%(table)s::text) IS NOT NULL AS present;
