-- The transaction every probe runs in (probes/session.py, probe_transaction): its settings are
-- the transaction's own, never the session's, so that they hold behind a connection pooler that
-- hands each transaction to another server session (PgBouncer in transaction mode) and that
-- refuses libpq's `options` start-up parameter, and that they leak into no other client's
-- transactions there.

-- name: begin
-- One round trip: psycopg sends a parameterless string as one simple query, statements and all.
-- READ ONLY and READ COMMITTED whatever the server's, database's or role's defaults; then
-- PROBE_SETTINGS (statement and lock timeouts, no JIT, no parallel workers, ...) for this
-- transaction only (set_config's third argument: SET LOCAL), each read back as the server now has
-- it (set_config returns the value in force: `2s` for 2000 ms), with transaction_read_only, which
-- the caller checks before any probe statement runs. {settings} is a JSON object literal, name to
-- value (the settings are queuetop's own constants, never user input). pg_backend_pid(): the
-- server session the pooler gave, against the pid libpq's start-up got (dbcore/pooler.py, found).
BEGIN ISOLATION LEVEL READ COMMITTED READ ONLY;
SELECT pg_catalog.pg_backend_pid() AS backend_pid,
       pg_catalog.current_setting('transaction_read_only') AS transaction_read_only,
       (SELECT pg_catalog.json_object_agg(s.key, pg_catalog.set_config(s.key, s.value, true))
          FROM pg_catalog.json_each_text({settings}::json) AS s) AS settings
