-- Leases on the database clock: a lease past its expiry that nobody released is `expired`.
-- (SQL Server; the same statement, parameters and columns as postgresql/leases.sql.)

-- name: leases
-- expires_in_s: seconds (float) from now to expires_at, both on SYSUTCDATETIME(); negative once
-- expired, NULL for a free lease. Leases change in one-statement compare-and-swaps, so the plain
-- read-committed read waits, if ever, for one of those (at most the session's LOCK_TIMEOUT).
SELECT l.name, l.holder, l.token,
       CONVERT(float, DATEDIFF_BIG(microsecond, SYSUTCDATETIME(), l.expires_at)) / 1000000.0 AS expires_in_s,
       CASE WHEN l.holder IS NULL THEN N'free'
            WHEN l.expires_at <= SYSUTCDATETIME() THEN N'expired'
            ELSE N'held' END AS state
FROM queuetop.leases AS l
ORDER BY l.name;
