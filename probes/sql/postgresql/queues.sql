-- The queues probe: what every queue's table shares, whatever its source. Each source's own
-- statements are in sources/<source>.sql.

-- name: table_stats
-- Cumulative insert/delete counters (the rates come from their differences between samples),
-- bloat and vacuum, for every queue table in one statement.
SELECT relid, n_tup_ins, n_tup_del, n_live_tup, n_dead_tup, last_vacuum, last_autovacuum
FROM pg_stat_user_tables
WHERE relid = ANY(%(relids)s::oid[]);
