-- The whole server's figures (the server_stats probe, probes/serverstats.py): pg_activity's header.
-- PostgreSQL only: SQL Server's counterparts (sys.dm_os_performance_counters) are not read
-- (tests/test_mssql_probes_sql.py, PG_ONLY_FILES).

-- name: counters
-- Every database's cumulative counters (pg_stat_database: a row per database, and one for the
-- shared catalogs, datid 0), with the server's clock and WAL position, in one statement: the
-- rates are their differences between two reads, over the server's clock (clock_timestamp(): when
-- this statement runs, not when the probe's transaction began). Read from the statistics' shared
-- memory: no table, no lock; a row per database.
-- - wal_bytes: the WAL position in bytes: a primary's insert position (pg_current_wal_lsn()); on a
--   hot standby, where that function fails, what it has replayed (pg_last_wal_replay_lsn()).
-- - stats_reset: when the database's counters were last reset (NULL: never): a rate across a
--   reset is unknown.
SELECT w.read_at, w.standby, w.wal_bytes,
       d.datid::bigint AS datid, d.datname::text AS database,
       d.xact_commit, d.xact_rollback, d.tup_inserted, d.tup_updated, d.tup_deleted, d.temp_bytes,
       d.blks_hit, d.blks_read, d.deadlocks, d.stats_reset
FROM (SELECT clock_timestamp() AS read_at, pg_is_in_recovery() AS standby,
             pg_wal_lsn_diff(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END,
                             '0/0')::bigint AS wal_bytes) AS w
LEFT JOIN pg_stat_database AS d ON true
ORDER BY d.datid;

-- name: database_size
-- The size of every database this role may read (pg_database_size needs CONNECT on it, or
-- pg_read_all_stats), and how many it may not (then the sum is not the server's: unknown). It
-- walks each database's files (a stat() per file): the probe reads it at most every
-- DATABASE_SIZE_EVERY_S seconds.
SELECT sum(CASE WHEN r.readable THEN pg_database_size(r.oid) END)::bigint AS bytes,
       count(*) FILTER (WHERE NOT r.readable) AS unreadable
FROM (SELECT d.oid, has_database_privilege(d.oid, 'CONNECT') OR pg_has_role('pg_read_all_stats', 'MEMBER') AS readable
      FROM pg_database AS d) AS r;
