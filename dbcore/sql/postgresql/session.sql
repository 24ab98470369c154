-- Statements of the sessions dbcore opens for the engine's commands (dbcore/lockwait.py).

-- name: lock_timeout
-- An engine command's lock timeout: QUEUETOP_LOCK_TIMEOUT when it is given (%(given)s); else
-- queuetop's default, unless the server's configuration, the database, the role or the client
-- (the DSN's options, PGOPTIONS) sets one: pg_settings.source is 'default' only when none did.
-- Returns the timeout in force, as the server writes it ('5s'), and where it comes from.
SELECT CASE WHEN %(given)s OR s.source = 'default'
            THEN set_config('lock_timeout', %(ms)s, false)
            ELSE current_setting('lock_timeout') END AS lock_timeout,
       s.source
FROM pg_settings AS s
WHERE s.name = 'lock_timeout';

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
