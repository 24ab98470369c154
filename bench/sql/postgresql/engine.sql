-- `queuetop bench engine` and the idle-cost measurement: statistics reads, never on a hot path.

-- name: server_version
SELECT current_setting('server_version') AS server_version;

-- name: idle_sessions
-- Worker sessions (by application_name pattern) that are idle, i.e. waiting for work.
SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE %(pattern)s::text AND state = 'idle';

-- name: clear_stats_snapshot
-- Statistics are read once per transaction and cached: forget the cached ones.
SELECT pg_stat_clear_snapshot();

-- name: table_scans
-- Statements that touched a table (each claim scans the queue table once).
SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) FROM pg_stat_user_tables WHERE relid = to_regclass(%(table)s::text);
