-- Client sessions (not the server's own processes, not this probe's session).

-- name: connections
-- xmin_age: age(backend_xmin), the columns SQL Server's file shares; the xmin horizon's holder
-- is xmin_horizon's.
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

-- name: xmin_horizon
-- What holds the xmin horizon of this database's tables back the most (one row, none when
-- nothing does): the horizon below which VACUUM may not remove a dead row of a queue table.
-- PostgreSQL only (SQL Server's analogue is the oldest snapshot transaction of `connections`).
-- Computed as the server computes a plain table's horizon (src/backend/storage/ipc/procarray.c:
-- ComputeXidHorizons' data_oldest_nonremovable from 14, GetOldestXmin before), by candidate:
-- - a session: the older of its transaction id (backend_xid: a writer idle in transaction holds
--   the horizon with it even when it has no snapshot, backend_xmin NULL) and its snapshot's xmin
--   (backend_xmin: a REPEATABLE READ or SERIALIZABLE transaction, a long statement, a cursor).
--   Sessions in other databases hold back only the shared catalogs' horizon ("Normally sessions
--   in other databases are ignored for anything but the shared horizon"), so only this
--   database's count, and those not connected to any database (datid NULL: a physical
--   walsender, whose backend_xmin is a standby's hot_standby_feedback without a slot; flagged
--   PROC_AFFECTS_ALL_HORIZONS from 14, a proc of database 0 before), and all of them on a standby
--   in recovery, where the server cannot tell databases apart. Left out as the server leaves
--   them out: a VACUUM (PROC_IN_VACUUM: an autovacuum worker) and logical decoding
--   (PROC_IN_LOGICAL_DECODING: a logical walsender, whose slot holds its horizon instead).
-- - a prepared transaction of this database (its xid; its dummy proc belongs to its database
--   and has no snapshot), named by its gid.
-- - a replication slot's xmin (a standby's feedback through its slot), any database's: it holds
--   back every database's horizon. A slot's catalog_xmin (logical decoding) holds back the
--   system catalogs' (and user_catalog_table tables') horizon only, not a queue table's: not
--   counted, but on a standby in recovery, where every table gets the shared horizon, which
--   includes it (GlobalVisHorizonKindForRel).
-- The oldest wins; at the same age, the transaction whose id it is (a writer, a prepared
-- transaction) before the snapshots that merely saw it running, a session's before a slot's.
SELECT kind, pid, name, application_name, age_xids
FROM (
    SELECT 'session' AS kind, pid, NULL::text AS name, application_name,
           greatest(age(backend_xid), age(backend_xmin)) AS age_xids,
           CASE WHEN age(backend_xid) >= coalesce(age(backend_xmin), 0) THEN 0 ELSE 1 END AS cause
    FROM pg_stat_activity
    WHERE (backend_xid IS NOT NULL OR backend_xmin IS NOT NULL)
      AND pid <> pg_backend_pid()
      AND (datname = current_database() OR datid IS NULL OR pg_is_in_recovery())
      AND backend_type IS DISTINCT FROM 'autovacuum worker'
      AND NOT (backend_type = 'walsender' AND datid IS NOT NULL)
    UNION ALL
    SELECT 'prepared', NULL, gid, NULL, age(transaction), 0
    FROM pg_prepared_xacts
    WHERE database = current_database()
    UNION ALL
    SELECT 'slot', NULL, slot_name::text, NULL,
           greatest(age(xmin), CASE WHEN pg_is_in_recovery() THEN age(catalog_xmin) END), 2
    FROM pg_replication_slots
    WHERE xmin IS NOT NULL OR (catalog_xmin IS NOT NULL AND pg_is_in_recovery())
) AS holders
ORDER BY age_xids DESC, cause, pid, name
LIMIT 1;
