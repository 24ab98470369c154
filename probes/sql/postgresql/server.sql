-- The server the snapshot describes.

-- name: server_info
SELECT current_setting('server_version') AS version,
       current_setting('server_version_num')::integer AS version_num,
       current_database() AS database,
       pg_backend_pid() AS own_pid;
