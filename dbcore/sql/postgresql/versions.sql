-- What differs between the PostgreSQL majors queuetop supports (12 through 18), in one file: each
-- section is one fragment, named `<slot>_<the first server_version_num that has it>`, and
-- `_0` is the fallback for every older server. A statement that differs by major keeps `{slot}`
-- in its own `.sql` file; dbcore/pgversions.py fills it with the newest fragment this server has.
-- Nothing else branches on a server's version.

-- name: wait_start_140000
-- pg_locks.waitstart, when a lock wait began: PostgreSQL 14.
coalesce(l.waitstart, a.state_change)

-- name: wait_start_0
-- Before it, the state's change: a waiting session's state changed when its statement started,
-- a bound on the wait.
a.state_change

-- name: leader_pid_130000
-- pg_stat_activity.leader_pid, a parallel worker's leader: PostgreSQL 13.
a.leader_pid

-- name: leader_pid_0
-- Before it a parallel worker is a session of its own in the lock tree.
NULL::integer

-- name: create_or_replace_trigger_140000
-- CREATE OR REPLACE TRIGGER: PostgreSQL 14.
CREATE OR REPLACE TRIGGER queuetop_notify

-- name: create_or_replace_trigger_0
-- Before it the trigger is dropped if it exists and created again, in the same transaction (the
-- queue's creation holds the schema's lock).
DROP TRIGGER IF EXISTS queuetop_notify ON {table};
CREATE TRIGGER queuetop_notify

-- name: slot_wal_status_130000
-- pg_replication_slots.wal_status (reserved, extended, unreserved, lost): PostgreSQL 13.
s.wal_status

-- name: slot_wal_status_0
-- Before it a slot could not be invalidated: no status.
NULL::text

-- name: replay_paused_140000
-- pg_get_wal_replay_pause_state(): PostgreSQL 14. 'pause requested' counts as paused: replay
-- stops at its next record.
pg_get_wal_replay_pause_state() <> 'not paused'

-- name: replay_paused_0
-- Before it, whether a pause was requested (replay stops at its next record).
pg_is_wal_replay_paused()
