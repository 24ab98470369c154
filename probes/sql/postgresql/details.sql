-- What Enter shows on a session: its query and locks. (A queue's details come from its source:
-- sources/<source>.sql.)

-- name: session
-- The session whose identity is (%(pid)s, %(started)s): its pid and when its backend started (a
-- later backend may get the same pid: then there is no row, the session has ended). %(started)s
-- NULL: the pid alone (a session whose start privileges hid, or a recording's from before).
SELECT pid, usename, application_name, client_addr::text, backend_type, state, wait_event_type, wait_event,
       extract(epoch FROM now() - backend_start)::float8 AS session_age_s,
       extract(epoch FROM now() - xact_start)::float8 AS xact_age_s,
       extract(epoch FROM now() - query_start)::float8 AS query_age_s,
       query
FROM pg_stat_activity
WHERE pid = %(pid)s::integer AND (%(started)s::timestamptz IS NULL OR backend_start = %(started)s::timestamptz);

-- name: session_locks
SELECT locktype, mode, granted,
       -- A relation of another database is its OID there: named here, it would be whatever has that OID here.
       CASE WHEN relation IS NOT NULL AND database IN (0, (SELECT oid FROM pg_database WHERE datname = current_database()))
            THEN relation::regclass::text
            WHEN relation IS NOT NULL THEN 'oid ' || relation::text || ' of another database' END AS relation,
       transactionid::text AS transactionid, classid, objid, objsubid
FROM pg_locks WHERE pid = %(pid)s::integer
ORDER BY granted, locktype;
