-- Leases on the database clock: a lease past its expiry that nobody released is `expired`.

-- name: leases
SELECT name, holder, token,
       extract(epoch FROM expires_at - now())::float8 AS expires_in_s,
       CASE WHEN holder IS NULL THEN 'free'
            WHEN expires_at <= now() THEN 'expired'
            ELSE 'held' END AS state
FROM queuetop.leases
ORDER BY name;
