-- pg-boss (https://github.com/timgit/pg-boss), versions 9 and 10. Jobs in `<schema>.job`: in v10
-- a parent partitioned by queue name, one partition per queue listed in `<schema>.queue`
-- (partition names are hashes); in v9 one plain table. Its fetch takes `state < 'active'`
-- (created, retry) with `start_after < now()`: ready; the same states with start_after ahead are
-- delayed (scheduled, or backing off before a retry); active is in flight; failed (and v9's
-- expired) is dead; completed and cancelled jobs stay until archived, finished. The counts are
-- the generic job-table ones (sources/jobtable.sql), through its fetch index (name, start_after)
-- WHERE state < 'active'.

-- name: version
SELECT max(version) AS version FROM {versions};

-- name: queues_v10
-- Every queue and the partition its jobs live in (its statistics are the queue's).
SELECT q.name, c.oid AS relid
FROM {queues} q
LEFT JOIN pg_class c ON c.relname = q.partition_name AND c.relnamespace = %(schema)s::regnamespace
ORDER BY q.name;

-- name: queues_v9
-- v9 keeps no list of queues: the distinct job names, found by skipping through its
-- `name text_pattern_ops` index (in that operator class's order).
WITH RECURSIVE q AS (
    (SELECT name FROM {jobs} ORDER BY name USING ~<~ LIMIT 1)
    UNION ALL
    SELECT (SELECT j.name FROM {jobs} j WHERE j.name ~>~ q.name ORDER BY j.name USING ~<~ LIMIT 1)
    FROM q WHERE q.name IS NOT NULL
)
SELECT name FROM q WHERE name IS NOT NULL LIMIT 200;

-- name: failures_v10
-- Enter: failed jobs, newest first, with pg-boss's own error output.
SELECT id, name, retry_count, completed_on, left(output::text, 300) AS output, left(data::text, 200) AS data
FROM {jobs}
WHERE name = %(queue)s::text AND state = 'failed'
ORDER BY completed_on DESC NULLS LAST LIMIT %(limit)s::integer;

-- name: failures_v9
SELECT id, name, retrycount AS retry_count, completedon AS completed_on, left(output::text, 300) AS output,
       left(data::text, 200) AS data
FROM {jobs}
WHERE name = %(queue)s::text AND state IN ('failed', 'expired')
ORDER BY completedon DESC NULLS LAST LIMIT %(limit)s::integer;
