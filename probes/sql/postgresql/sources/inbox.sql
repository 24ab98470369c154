-- The engine's exactly-once endpoints: each endpoint's inbox as a queue.

-- name: heads
-- Records of messages in flight to each endpoint (claimed ones are being processed). At most
-- `window` records are read in all.
WITH h AS (
    SELECT endpoint, claim_id, created_at FROM queuetop.eo_inbox LIMIT %(window)s::integer
)
SELECT endpoint, count(*) AS head_rows, count(*) FILTER (WHERE claim_id IS NOT NULL) AS in_flight,
       extract(epoch FROM now() - min(created_at) FILTER (WHERE claim_id IS NULL))::float8 AS oldest_ready_age_s,
       (SELECT count(*) FROM h) AS read_rows
FROM h GROUP BY endpoint ORDER BY endpoint;

-- name: head
SELECT attempt_id, message_id, claim_id, created_at
FROM queuetop.eo_inbox WHERE endpoint = %(endpoint)s::text ORDER BY created_at LIMIT %(limit)s::integer;
