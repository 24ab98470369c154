-- Statements of the sessions dbcore opens for the engine's commands (dbcore/lockwait.py).

-- name: lock_timeout
-- An engine command's lock timeout: QUEUETOP_LOCK_TIMEOUT when it is given (%(given)s); else
-- queuetop's default, unless the server's configuration, the database, the role or the client
-- (the DSN's options, PGOPTIONS) sets one: pg_settings.source is 'default' only when none did.
-- Returns the timeout in force, as the server writes it ('5s'), where it comes from, and the
-- server's own pid of the session (through a pooler libpq's is one the pooler made up). Set for
-- the session, or (%(local)s: a session a pooler does not pin) for this transaction only.
SELECT CASE WHEN %(given)s OR s.source = 'default'
            THEN set_config('lock_timeout', %(ms)s, %(local)s)
            ELSE current_setting('lock_timeout') END AS lock_timeout,
       s.source,
       pg_backend_pid() AS pid
FROM pg_settings AS s
WHERE s.name = 'lock_timeout';

-- name: transaction_lock_timeout
-- The first statement of each transaction of an engine command's session that a pooler does not
-- pin: its lock timeout for this transaction only (%(ms)s; NULL: the server's own applies), and
-- the pid of the server session the pooler gave this transaction, which the lock watch follows.
SELECT CASE WHEN %(ms)s::text IS NOT NULL THEN set_config('lock_timeout', %(ms)s::text, true) END AS lock_timeout,
       pg_backend_pid() AS pid;

-- name: local_settings
-- Settings for the rest of this transaction only (SET LOCAL), one per pair of %(names)s and
-- %(values)s: what a session a pooler does not pin has instead of settings of its own.
SELECT set_config(s.name, s.value, true)
FROM unnest(%(names)s::text[], %(values)s::text[]) AS s(name, value);

-- name: lock_holders
-- Who holds up session %(pid)s, asked from a second session while it waits on a lock.
-- pg_blocking_pids() is the server's own answer for every kind of lock: a table's, a row's (the
-- wait is on the transaction that changed the row), an advisory lock; 0 stands for a prepared
-- transaction. It also lists sessions queued ahead for the same lock: those that are not
-- themselves waiting come first, the oldest transaction first. `locktype`, `relation` and `mode`
-- say what the session waits for; `row_of` the table of the row it waits for, when it waits
-- for a row.
WITH wanted AS (
    SELECT l.locktype, l.relation::regclass::text AS relation, l.mode,
           (SELECT t.relation::regclass::text FROM pg_locks AS t
            WHERE t.pid = %(pid)s AND t.locktype = 'tuple' LIMIT 1) AS row_of
    FROM pg_locks AS l
    WHERE l.pid = %(pid)s AND NOT l.granted
    LIMIT 1
)
SELECT h.pid,
       a.application_name,
       a.state,
       extract(epoch FROM now() - a.xact_start)::float8 AS xact_s,
       coalesce(a.wait_event_type = 'Lock', false) AS waiting,
       w.locktype, w.relation, w.mode, w.row_of
FROM unnest(pg_blocking_pids(%(pid)s)) AS h(pid)
LEFT JOIN pg_stat_activity AS a ON a.pid = h.pid
LEFT JOIN wanted AS w ON true
ORDER BY coalesce(a.wait_event_type = 'Lock', false), a.xact_start NULLS LAST, h.pid;

-- name: server_pid
-- The server's own pid of the session (or, through a pooler in transaction mode, of the server
-- session this transaction runs on): libpq's is one the pooler made up.
SELECT pg_backend_pid();

-- name: in_recovery
-- Whether the server is a hot standby (in recovery): nothing can be written there. Asked before
-- an engine command writes, and after a write was refused as read-only (25006), to tell a
-- standby from a read-only transaction or setting.
SELECT pg_is_in_recovery() AS in_recovery;
