-- Client sessions (not the server's own processes, not this probe's session).

-- name: connections
SELECT pid, state, application_name, backend_type,
       extract(epoch FROM now() - xact_start)::float8 AS xact_age_s,
       age(backend_xmin) AS xmin_age
FROM pg_stat_activity
WHERE (backend_type = 'client backend'
       -- other roles' sessions, seen without pg_read_all_stats: backend_type is hidden too
       OR (backend_type IS NULL AND usesysid IS NOT NULL))
  AND pid <> pg_backend_pid();

-- name: max_connections
SELECT current_setting('max_connections')::integer AS max_connections,
       current_setting('superuser_reserved_connections')::integer AS reserved;
