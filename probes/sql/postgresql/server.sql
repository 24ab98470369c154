-- The server the snapshot describes.

-- name: server_info
SELECT current_setting('server_version') AS version,
       current_setting('server_version_num')::integer AS version_num,
       current_database() AS database,
       pg_backend_pid() AS own_pid,
       -- how long a wait lasts before the server looks for a deadlock (a wait cycle's countdown)
       extract(epoch FROM current_setting('deadlock_timeout')::interval)::float8 AS deadlock_timeout_s;

-- name: recovery
-- Whether the server is a hot standby (in recovery), read every cycle: a few function calls on
-- shared memory, no table. On a standby: how far replay is behind the WAL received from the
-- primary, in bytes (NULL without a WAL receiver: archive recovery, the primary gone) and in time
-- (0 when everything received is replayed; else since the last replayed transaction committed on
-- the primary, which is what the standby's figures are as of); whether replay is paused
-- ({replay_paused}: its functions raise on a primary, so only asked of a standby: CASE evaluates
-- only the branch it takes). All NULL on a primary (a promoted standby still remembers its last
-- replayed transaction).
WITH w AS (
    SELECT pg_is_in_recovery() AS standby,
           pg_last_wal_receive_lsn() AS received,
           pg_last_wal_replay_lsn() AS replayed,
           pg_last_xact_replay_timestamp() AS replayed_at
)
SELECT CASE WHEN w.standby THEN 'standby' ELSE 'primary' END AS role,
       CASE WHEN NOT w.standby THEN NULL
            WHEN w.received IS NOT NULL AND w.received <= w.replayed THEN 0.0::float8
            -- Behind, with no transaction replayed since it started (a fresh standby): unknown,
            -- not 0 (greatest() would skip the NULL and say 0).
            WHEN w.replayed_at IS NULL THEN NULL
            ELSE greatest(0.0, extract(epoch FROM now() - w.replayed_at))::float8 END AS replay_lag_s,
       CASE WHEN w.standby AND w.received IS NOT NULL
            THEN greatest(0, pg_wal_lsn_diff(w.received, w.replayed))::bigint END AS replay_lag_bytes,
       CASE WHEN w.standby THEN {replay_paused} END AS replay_paused,
       CASE WHEN w.standby THEN w.replayed_at END AS replayed_at
FROM w;

-- name: table_present
-- Whether a table is there (the probes skip what is not installed).
SELECT to_regclass(%(table)s::text) IS NOT NULL AS present;

-- name: tables_present
-- The same for every table the sources asked about in the previous cycle, in one statement.
SELECT t.name, to_regclass(t.name) IS NOT NULL AS present FROM unnest(%(tables)s::text[]) AS t(name);
