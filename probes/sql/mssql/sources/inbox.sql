-- The engine's exactly-once endpoints: each endpoint's inbox as a queue, SQL Server. The same
-- names, parameters and result columns as postgresql/sources/inbox.sql. Inbox records change in
-- one-statement compare-and-swaps only; a record being changed is skipped (READPAST), not
-- waited for.

-- name: heads
-- Records of messages in flight to each endpoint (claimed ones are being processed). At most
-- `window` records are read in all, in the clustered key's order (endpoint, attempt_id).
-- read_rows: how many were read in all (every row carries it); oldest_ready_age_s: seconds
-- (float) since the oldest unclaimed record read was created.
WITH h AS (
    SELECT TOP (CONVERT(int, %(window)s)) i.endpoint, i.claim_id, i.created_at
    FROM queuetop.eo_inbox AS i WITH (ROWLOCK, READPAST, READCOMMITTEDLOCK)
)
SELECT h.endpoint,
       COUNT_BIG(*) AS head_rows,
       COUNT_BIG(h.claim_id) AS in_flight,
       CONVERT(float, DATEDIFF_BIG(microsecond, MIN(CASE WHEN h.claim_id IS NULL THEN h.created_at END), SYSUTCDATETIME()))
           / 1000000.0 AS oldest_ready_age_s,
       SUM(COUNT_BIG(*)) OVER () AS read_rows
FROM h
GROUP BY h.endpoint
ORDER BY h.endpoint;

-- name: head
-- Enter: an endpoint's oldest `limit` records (a seek on the endpoint, then a sort of its
-- records by created_at, as on PostgreSQL).
SELECT TOP (CONVERT(int, %(limit)s)) i.attempt_id, i.message_id, i.claim_id, i.created_at
FROM queuetop.eo_inbox AS i WITH (ROWLOCK, READPAST, READCOMMITTEDLOCK)
WHERE i.endpoint = CONVERT(nvarchar(128), %(endpoint)s)
ORDER BY i.created_at;
