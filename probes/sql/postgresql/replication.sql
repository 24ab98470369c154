-- Who replicates from this server (the replication probe): its standbys (pg_stat_replication)
-- and its replication slots (pg_replication_slots). PostgreSQL only: SQL Server's availability
-- group replicas are not read (tests/test_mssql_probes_sql.py, PG_ONLY_FILES).
--
-- The WAL position the distances are measured from: this server's write position
-- (pg_current_wal_lsn()) on a primary; on a standby, where pg_current_wal_lsn() fails ("recovery
-- is in progress"), the furthest it has received or replayed, what a standby cascading from it
-- can be sent (NULL when it has neither: then the distances are NULL, unknown).
-- pg_stat_replication and pg_replication_slots are each read from shared memory: no table is
-- read, no lock taken. A distance that comes out below 0 (a logical slot made a moment ago starts
-- at the insert position, which may be ahead of the write position) is 0; NULL stays NULL.

-- name: standbys
-- One row per walsender: a physical standby, a logical replication subscriber, pg_basebackup,
-- pg_receivewal. A role without pg_read_all_stats (pg_monitor has it) sees each one's pid,
-- user and application_name and nothing else: state, sync_state, the LSNs and the lags are
-- NULL (hidden: the Python side says unknown), and so is its client address.
-- - client: its host name (log_hostname) or address, `local` for a Unix socket.
-- - write_lag_s, flush_lag_s, replay_lag_s: pg_stat_replication's lags in seconds (NULL once the
--   standby has caught up and nothing new is written, or before the first measurement).
-- - replay_lag_bytes: WAL not replayed there yet.
SELECT r.pid, r.application_name,
       CASE WHEN r.client_port = -1 THEN 'local'
            WHEN r.client_addr IS NOT NULL THEN coalesce(r.client_hostname, host(r.client_addr)) END AS client,
       r.state, r.sync_state,
       extract(epoch FROM r.write_lag)::float8 AS write_lag_s,
       extract(epoch FROM r.flush_lag)::float8 AS flush_lag_s,
       extract(epoch FROM r.replay_lag)::float8 AS replay_lag_s,
       CASE WHEN pg_wal_lsn_diff(w.lsn, r.replay_lsn) < 0 THEN 0 ELSE pg_wal_lsn_diff(w.lsn, r.replay_lsn) END::bigint
           AS replay_lag_bytes,
       r.state IS NULL AS hidden
FROM pg_stat_replication AS r
CROSS JOIN (SELECT CASE WHEN pg_is_in_recovery() THEN greatest(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())
                        ELSE pg_current_wal_lsn() END AS lsn) AS w
ORDER BY r.application_name, r.pid;

-- name: slots
-- Every replication slot of the cluster (any database's: a slot holds back the whole cluster's
-- WAL and horizon). Every role may read them.
-- - retained_wal_bytes: WAL kept for the slot (from its restart_lsn); 0 for a slot that reserves
--   none (restart_lsn NULL: made without reserving, never used) and for one the server
--   invalidated (wal_status `lost`: it keeps none).
-- - xmin_age, catalog_xmin_age: age() of the slot's xmin (a standby's hot_standby_feedback through
--   it) and catalog_xmin (logical decoding), in transactions; NULL when it holds none.
-- - wal_status: {slot_wal_status} differs by major (dbcore/pgversions.py): NULL before 13.
SELECT s.slot_name::text AS name, s.slot_type AS type, s.active, s.active_pid, s.database::text AS database,
       s.plugin::text AS plugin, {slot_wal_status} AS wal_status,
       CASE WHEN coalesce({slot_wal_status} = 'lost', false) OR s.restart_lsn IS NULL THEN 0
            WHEN pg_wal_lsn_diff(w.lsn, s.restart_lsn) < 0 THEN 0
            ELSE pg_wal_lsn_diff(w.lsn, s.restart_lsn)::bigint END AS retained_wal_bytes,
       age(s.xmin) AS xmin_age, age(s.catalog_xmin) AS catalog_xmin_age
FROM pg_replication_slots AS s
CROSS JOIN (SELECT CASE WHEN pg_is_in_recovery() THEN greatest(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())
                        ELSE pg_current_wal_lsn() END AS lsn) AS w
ORDER BY s.slot_name;
