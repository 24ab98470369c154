-- The server the snapshot describes.

-- name: server_info
SELECT current_setting('server_version') AS version,
       current_setting('server_version_num')::integer AS version_num,
       current_database() AS database,
       pg_backend_pid() AS own_pid,
       -- how long a wait lasts before the server looks for a deadlock (a wait cycle's countdown)
       extract(epoch FROM current_setting('deadlock_timeout')::interval)::float8 AS deadlock_timeout_s;

-- name: table_present
-- Whether a table is there (the probes skip what is not installed).
SELECT to_regclass(%(table)s::text) IS NOT NULL AS present;

-- name: tables_present
-- The same for every table the sources asked about in the previous cycle, in one statement.
SELECT t.name, to_regclass(t.name) IS NOT NULL AS present FROM unnest(%(tables)s::text[]) AS t(name);
