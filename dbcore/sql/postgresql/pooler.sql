-- What a connection asks to find out whether a pooler sits between it and its server session
-- (dbcore/pooler.py, settle).

-- name: server_pid
-- The server's own pid of the session: a pooler makes up the one libpq got at start-up
-- (BackendKeyData), so the two differ through one.
SELECT pg_backend_pid() AS pid
