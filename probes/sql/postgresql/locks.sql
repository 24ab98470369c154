-- Blocked sessions: every session waiting on a heavyweight lock (relation, tuple, transactionid,
-- advisory, ...) with the pids that block it (pg_blocking_pids: holders and waiters queued
-- ahead) and the lock it waits for. Parallel workers carry their leader's pid in `leader_pid`.
-- Driven by pg_locks, which every role may read: without pg_read_all_stats the tree is still
-- complete, only other roles' queries and states are NULL.

-- name: waiting_post_140000
SELECT l.pid, a.leader_pid, pg_blocking_pids(l.pid) AS blocked_by,
       l.locktype AS lock_type, l.mode,
       CASE WHEN l.relation IS NOT NULL THEN l.relation::regclass::text END AS relation,
       l.classid, l.objid, l.objsubid,
       extract(epoch FROM now() - coalesce(l.waitstart, a.state_change))::float8 AS wait_s,
       a.state, a.query, a.application_name
FROM pg_locks l
LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE NOT l.granted AND l.pid <> pg_backend_pid();

-- name: waiting
-- Before PostgreSQL 14 pg_locks has no waitstart: the wait is timed from the last state change.
SELECT l.pid, a.leader_pid, pg_blocking_pids(l.pid) AS blocked_by,
       l.locktype AS lock_type, l.mode,
       CASE WHEN l.relation IS NOT NULL THEN l.relation::regclass::text END AS relation,
       l.classid, l.objid, l.objsubid,
       extract(epoch FROM now() - a.state_change)::float8 AS wait_s,
       a.state, a.query, a.application_name
FROM pg_locks l
LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE NOT l.granted AND l.pid <> pg_backend_pid();

-- name: sessions
SELECT pid, leader_pid, state,
       extract(epoch FROM now() - xact_start)::float8 AS xact_age_s,
       query, application_name
FROM pg_stat_activity
WHERE pid = ANY(%(pids)s::integer[]);
