-- What Enter shows on a session: its query and locks, SQL Server. The same names, parameters and
-- result columns as postgresql/details.sql. (A queue's details come from its source:
-- sources/<source>.sql.) Both need VIEW SERVER STATE to show another login's session.

-- name: session
-- usename: login_name; application_name: program_name; client_addr: client_net_address;
-- backend_type: `user process` or `system process`; state: as in connections.sql
-- (`sleeping, open transaction` is PostgreSQL's `idle in transaction`); wait_event: the
-- request's wait_type (LCK_M_X, PAGEIOLATCH_SH, ASYNC_NETWORK_IO, ...) and wait_event_type a
-- coarse class of it in PostgreSQL's words (dbcore/sql/mssql/fragments.sql), NULL when it runs
-- nothing or does not wait; session_age_s since login_time; xact_age_s since its oldest open
-- transaction began; query_age_s since its running request started, or since its last request
-- started when it runs nothing; query: the running statement, else the last batch it ran (at
-- most 4000 characters).
WITH requests AS (
    SELECT r.session_id, r.sql_handle, r.statement_start_offset, r.statement_end_offset, r.start_time, r.wait_type,
           ROW_NUMBER() OVER (PARTITION BY r.session_id ORDER BY r.request_id) AS request_rank
    FROM sys.dm_exec_requests AS r
), xact AS (
    SELECT st.session_id, MIN(at.transaction_begin_time) AS began
    FROM sys.dm_tran_session_transactions AS st
    JOIN sys.dm_tran_active_transactions AS at ON at.transaction_id = st.transaction_id
    GROUP BY st.session_id
)
SELECT CONVERT(int, s.session_id) AS pid,
       s.login_name AS usename,
       s.program_name AS application_name,
       c.client_net_address AS client_addr,
       CASE WHEN s.is_user_process = 1 THEN N'user process' ELSE N'system process' END AS backend_type,
       LOWER(s.status) + CASE WHEN LOWER(s.status) = N'sleeping' AND s.open_transaction_count > 0
                              THEN N', open transaction' ELSE N'' END AS state,
       {wait_event_type} AS wait_event_type,
       rq.wait_type AS wait_event,
       CONVERT(float, DATEDIFF_BIG(millisecond, s.login_time, SYSDATETIME())) / 1000.0 AS session_age_s,
       CONVERT(float, DATEDIFF_BIG(millisecond, x.began, SYSDATETIME())) / 1000.0 AS xact_age_s,
       CONVERT(float, DATEDIFF_BIG(millisecond, COALESCE(rq.start_time, s.last_request_start_time), SYSDATETIME())) / 1000.0
           AS query_age_s,
       LEFT(CASE WHEN rq.statement_start_offset IS NOT NULL
                 THEN SUBSTRING(t.text, rq.statement_start_offset / 2 + 1,
                                (CASE WHEN rq.statement_end_offset = -1 THEN DATALENGTH(t.text)
                                      ELSE rq.statement_end_offset END - rq.statement_start_offset) / 2 + 1)
                 ELSE t.text END, 4000) AS query
FROM sys.dm_exec_sessions AS s
LEFT JOIN requests AS rq ON rq.session_id = s.session_id AND rq.request_rank = 1
LEFT JOIN xact AS x ON x.session_id = s.session_id
LEFT JOIN sys.dm_exec_connections AS c ON c.session_id = s.session_id AND c.parent_connection_id IS NULL
OUTER APPLY sys.dm_exec_sql_text(COALESCE(rq.sql_handle, c.most_recent_sql_handle)) AS t
WHERE s.session_id = CONVERT(int, %(pid)s)
  -- The session whose identity is (pid, started): a later login may reuse the session id.
  AND (CONVERT(datetime, %(started)s) IS NULL OR s.login_time = CONVERT(datetime, %(started)s));

-- name: session_locks
-- The session's locks, waiting ones first, at most 1000 (a session may hold thousands of row
-- locks: the queue tables never escalate them). locktype: resource_type (KEY, RID, PAGE,
-- OBJECT, APPLICATION, DATABASE, ...); mode: request_mode; granted: bit. relation: for OBJECT
-- locks `schema.table`; for KEY, RID, PAGE and HOBT locks the hobt's table (in this database),
-- then the resource_description that names the row or page within it (a key hash
-- `(8194443284a0)`, or file:page[:slot]); for APPLICATION locks `applock <name>`; for DATABASE
-- locks the database's name; else the resource_description. transactionid: for XACT locks the
-- transaction's resource_description, else NULL. classid, objid, objsubid: NULL (advisory-lock
-- numbers; an application lock has a name instead).
SELECT TOP (1000) l.resource_type AS locktype,
       l.request_mode AS mode,
       CONVERT(bit, CASE WHEN l.request_status = N'GRANT' THEN 1 ELSE 0 END) AS granted,
       CASE WHEN l.resource_type = N'APPLICATION' THEN CONCAT(N'applock ', COALESCE(an.name, ad.description))
            WHEN l.resource_type = N'DATABASE' THEN DB_NAME(l.resource_database_id)
            WHEN o.object_id IS NOT NULL
            THEN CONCAT(COALESCE(OBJECT_SCHEMA_NAME(o.object_id, l.resource_database_id) + N'.'
                                 + OBJECT_NAME(o.object_id, l.resource_database_id), CONCAT(N'object ', o.object_id)),
                        CASE WHEN l.resource_type <> N'OBJECT' THEN CONCAT(N' ', RTRIM(l.resource_description)) END)
            ELSE CONCAT(DB_NAME(l.resource_database_id), N': ', RTRIM(l.resource_description)) END AS relation,
       CASE WHEN l.resource_type = N'XACT' THEN RTRIM(l.resource_description) END AS transactionid,
       CONVERT(bigint, NULL) AS classid,
       CONVERT(bigint, NULL) AS objid,
       CONVERT(int, NULL) AS objsubid
FROM sys.dm_tran_locks AS l
CROSS APPLY (
    SELECT CASE WHEN l.resource_type = N'OBJECT' THEN CONVERT(int, l.resource_associated_entity_id)
                WHEN l.resource_type IN (N'KEY', N'RID', N'PAGE', N'HOBT') AND l.resource_database_id = DB_ID()
                THEN (SELECT TOP (1) p.object_id FROM sys.partitions AS p WHERE p.hobt_id = l.resource_associated_entity_id)
           END AS object_id
) AS o
CROSS APPLY (
    SELECT RTRIM(l.resource_description) AS description,
           CHARINDEX(N':', l.resource_description) AS first_colon,
           CHARINDEX(N'(:', REVERSE(RTRIM(l.resource_description))) AS hash_from_end
) AS ad
CROSS APPLY (
    SELECT CASE WHEN l.resource_type = N'APPLICATION' AND ad.first_colon > 1 AND ad.hash_from_end > 0
                     AND LEN(ad.description) - ad.hash_from_end > ad.first_colon
                THEN SUBSTRING(ad.description, ad.first_colon + 1,
                               LEN(ad.description) - ad.hash_from_end - ad.first_colon - 1) END AS bracketed
) AS ab
CROSS APPLY (
    SELECT CASE WHEN LEFT(ab.bracketed, 1) = N'[' AND RIGHT(ab.bracketed, 1) = N']'
                THEN SUBSTRING(ab.bracketed, 2, LEN(ab.bracketed) - 2) ELSE ab.bracketed END AS name
) AS an
WHERE l.request_session_id = CONVERT(int, %(pid)s)
ORDER BY granted, locktype;
