-- The job console's write transactions (jobs/bulk.py): each one batch of ids, short, and
-- never waiting long for a lock a worker holds on the library's rows or table.

-- name: batch_settings
SELECT set_config('lock_timeout', %(lock_timeout_ms)s, true),
       set_config('statement_timeout', %(statement_timeout_ms)s, true),
       set_config('idle_in_transaction_session_timeout', %(statement_timeout_ms)s, true)

-- name: in_recovery
SELECT pg_is_in_recovery() AS in_recovery
