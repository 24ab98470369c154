-- Client sessions (not the server's own processes, not this probe's session).

-- name: connections
-- xmin_age: age(backend_xmin), the columns SQL Server's file shares; the xmin horizon's holder
-- is xmin_horizon's. queuetop's own sessions are rows here (they take connections); the Python
-- side leaves them out of the oldest transaction (SessionSample.own's rule).
SELECT pid, state, application_name, backend_type,
       extract(epoch FROM now() - xact_start)::float8 AS xact_age_s,
       age(backend_xmin) AS xmin_age
FROM pg_stat_activity
WHERE (backend_type = 'client backend'
       -- other roles' sessions, seen without pg_read_all_stats: backend_type is hidden too, and
       -- their state (NULL: how the Python side knows them). A background process has no user
       -- (the checkpointer, the autovacuum launcher) or no database (the logical replication
       -- launcher, a physical walsender); a client's session has both.
       OR (backend_type IS NULL AND usesysid IS NOT NULL AND datid IS NOT NULL))
  AND pid <> pg_backend_pid();

-- name: max_connections
-- reserved: the connections an ordinary role may not use: superuser_reserved_connections, and
-- from PostgreSQL 16 reserved_connections (for roles with pg_use_reserved_connections), which
-- an older server does not have (current_setting's missing_ok: NULL, none reserved). Every
-- client session, whatever its role, takes one of max_connections (walsenders, autovacuum and
-- background workers have slots of their own); an ordinary role is refused once fewer than
-- `reserved` are free.
SELECT current_setting('max_connections')::integer AS max_connections,
       current_setting('superuser_reserved_connections')::integer
       + coalesce(current_setting('reserved_connections', true)::integer, 0) AS reserved;

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
-- queuetop's own sessions (application_name starting with %(own)s: the probes, whose statements
-- hold a snapshot for milliseconds) are left out: a monitor never names itself.
-- Columns:
-- - kind: 'session'; 'standby', a physical walsender (no database) whose backend_xmin is a
--   standby's hot_standby_feedback sent without a slot (name: the standby's name, its
--   application_name, as pg_stat_replication shows it); 'prepared' (name: its gid); 'slot'
--   (name: the slot's; application_name and client: the standby streaming from it, if any).
-- - client: where the session or the standby connects from: its host name (log_hostname) or
--   address, `local` for a Unix socket.
-- - age_s: the horizon's age in time where the statement knows it: a session's transaction's age
--   (its xid, or its snapshot, was taken within that transaction), a prepared transaction's
--   since PREPARE; NULL for a standby's feedback and a slot (the probe estimates it from its
--   history of next_xid: PostgresProbes.xid_clock).
-- - hidden: what the session is, is hidden from this role (another role's session seen without
--   pg_read_all_stats: its backend_start, backend_type, state and query are NULL; its xids are
--   not): it may be a VACUUM, which the server leaves out, so the probe does not name it.
-- - next_xid: the next transaction id (64-bit: txid_snapshot_xmax of this statement's
--   snapshot; reading it assigns no transaction id, read-only safe), on the one row there always
--   is (the holder's columns NULL when nothing holds the horizon back): each cycle's reading of
--   the probe's clock of transaction ids. txid_* rather than pg_snapshot_* (13+): the same on 12.
SELECT n.next_xid, h.kind, h.pid, h.name, h.application_name, h.client, h.age_xids, h.age_s, h.hidden
FROM (SELECT txid_snapshot_xmax(txid_current_snapshot()) AS next_xid) AS n
LEFT JOIN LATERAL (
    SELECT kind, pid, name, application_name, client, age_xids, age_s, hidden
    FROM (
        SELECT CASE WHEN a.backend_type = 'walsender' THEN 'standby' ELSE 'session' END AS kind, a.pid,
               CASE WHEN a.backend_type = 'walsender' THEN a.application_name END AS name, a.application_name,
               CASE WHEN a.client_port = -1 THEN 'local'
                    WHEN a.client_addr IS NOT NULL THEN coalesce(a.client_hostname, host(a.client_addr)) END AS client,
               greatest(age(a.backend_xid), age(a.backend_xmin)) AS age_xids,
               extract(epoch FROM now() - a.xact_start)::float8 AS age_s,
               a.backend_start IS NULL AS hidden,
               CASE WHEN age(a.backend_xid) >= coalesce(age(a.backend_xmin), 0) THEN 0 ELSE 1 END AS cause
        FROM pg_stat_activity AS a
        WHERE (a.backend_xid IS NOT NULL OR a.backend_xmin IS NOT NULL)
          AND a.pid <> pg_backend_pid()
          AND NOT coalesce(starts_with(a.application_name, %(own)s::text), false)
          AND (a.datname = current_database() OR a.datid IS NULL OR pg_is_in_recovery())
          AND a.backend_type IS DISTINCT FROM 'autovacuum worker'
          -- (coalesce: a hidden session, backend_type NULL, stays a candidate)
          AND NOT coalesce(a.backend_type = 'walsender' AND a.datid IS NOT NULL, false)
        UNION ALL
        SELECT 'prepared', NULL, p.gid, NULL, NULL, age(p.transaction), extract(epoch FROM now() - p.prepared)::float8, false, 0
        FROM pg_prepared_xacts AS p
        WHERE p.database = current_database()
        UNION ALL
        SELECT 'slot', NULL, s.slot_name::text, w.application_name,
               CASE WHEN w.client_port = -1 THEN 'local'
                    WHEN w.client_addr IS NOT NULL THEN coalesce(w.client_hostname, host(w.client_addr)) END,
               greatest(age(s.xmin), CASE WHEN pg_is_in_recovery() THEN age(s.catalog_xmin) END), NULL::float8, false, 2
        FROM pg_replication_slots AS s
        LEFT JOIN pg_stat_activity AS w ON w.pid = s.active_pid
        WHERE s.xmin IS NOT NULL OR (s.catalog_xmin IS NOT NULL AND pg_is_in_recovery())
    ) AS holders
    ORDER BY age_xids DESC, cause, pid, name
    LIMIT 1
) AS h ON true;

-- name: sessions
-- Every backend this role can see, client sessions and the server's own processes alike, but
-- the probe's own session (pg_activity leaves itself out too): the sessions view's rows, the
-- oldest transaction first, then the longest query (or idle time), then the pid: the Sessions
-- panel's default order, so that it only checks it; at most %(cap)s of them; `total` counts
-- them all, before the cap. One statement, bounded by the number of backends: pg_stat_activity
-- is read from the backend's local copy of the shared status array, no table is read.
-- - client: the host name (log_hostname) or address of a TCP client, `local` for a Unix
--   socket (client_port -1), NULL for a background process (client_port NULL) and for other
--   roles' sessions without pg_read_all_stats, which hides it.
-- - query_age_s: how long its current query has run; while it is idle (idle, idle in
--   transaction, aborted), how long it has been in that state. Both ages are from the server's
--   clock at the statement's start (statement_timestamp(): now() is the start of the probe's
--   transaction, a few statements earlier, and a query begun since would read as a negative age).
-- - backend_start: with the pid, the session's identity (a later backend may get the same pid):
--   what the dashboard's cursor follows, and what cancel and terminate check. NULL where
--   privileges hide it.
-- - query: the first %(query_chars)s characters (query_is_cut when there were more: the whole
--   text is details.sql's `session`).
-- - blocked_by: pg_blocking_pids, asked only of a session waiting on a heavyweight lock
--   (wait_event_type 'Lock'), and only for the rows the cap kept: it takes every lock-manager
--   partition lock. 0 stands for a prepared transaction. NULL for any other session, and in a
--   pile-up (more than %(pile_up)s sessions waiting on locks: pg_blocking_pids for each is
--   quadratic, 0.9 s of the server's time for 2,000), where the locks probe's picture fills it
--   (probes/sampler.py, compose). A transaction waiting for a safe snapshot: the serializable
--   writers pg_safe_snapshot_blocking_pids names.
-- Which session holds the xmin horizon is xmin_horizon's answer (Connections.xmin_holder_pid),
-- read once a cycle: the Python side flags it (probes/postgres.py, flag_xmin_holder).
-- {leader_pid} differs by major (dbcore/pgversions.py).
WITH listed AS (
    SELECT a.pid, a.backend_start, {leader_pid} AS leader_pid, a.datname AS database, a.usename, a.application_name,
           CASE WHEN a.client_port = -1 THEN 'local'
                WHEN a.client_addr IS NOT NULL THEN coalesce(a.client_hostname, host(a.client_addr)) END AS client,
           a.backend_type, a.state,
           extract(epoch FROM statement_timestamp() - a.xact_start)::float8 AS xact_age_s,
           extract(epoch FROM statement_timestamp() - CASE WHEN a.state IN ('idle', 'idle in transaction', 'idle in transaction (aborted)')
                                                         THEN a.state_change ELSE a.query_start END)::float8 AS query_age_s,
           a.wait_event_type, a.wait_event,
           left(a.query, %(query_chars)s) AS query,
           coalesce(length(a.query) > %(query_chars)s, false) AS query_is_cut,
           count(*) OVER () AS total,
           row_number() OVER (ORDER BY a.xact_start NULLS LAST,
                                       CASE WHEN a.state IN ('idle', 'idle in transaction', 'idle in transaction (aborted)')
                                            THEN a.state_change ELSE a.query_start END NULLS LAST, a.pid) AS ordinal
    FROM pg_stat_activity a
    WHERE a.pid <> pg_backend_pid()
    ORDER BY ordinal
    LIMIT %(cap)s
)
SELECT l.pid, l.backend_start, l.leader_pid, l.database, l.usename, l.application_name, l.client, l.backend_type, l.state,
       l.xact_age_s, l.query_age_s, l.wait_event_type, l.wait_event,
       CASE WHEN l.wait_event_type = 'Lock' AND NOT pile.pile_up THEN pg_blocking_pids(l.pid)
            WHEN l.wait_event = 'SafeSnapshot' THEN pg_safe_snapshot_blocking_pids(l.pid) END AS blocked_by,
       l.query, l.query_is_cut, l.total
FROM listed l
CROSS JOIN (SELECT count(*) > %(pile_up)s AS pile_up FROM pg_stat_activity WHERE wait_event_type = 'Lock') AS pile
ORDER BY l.ordinal;
