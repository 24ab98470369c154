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
LEFT JOIN pg_class c ON c.relname = q.partition_name AND c.relnamespace = (SELECT n.oid FROM pg_namespace n WHERE n.nspname = %(schema)s::text)
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

-- name: blocked_v10
-- Fragment: job `j` (a row of {job}) is held back by its queue's policy: in a `singleton` or
-- `stately` queue (the job's own `policy`, copied from its queue when it was sent), another job of
-- the same queue, policy and COALESCE(singleton_key, '') is active. pg-boss 10's fetch would set
-- it active and break the unique index job_i2 (singleton: `(name, COALESCE(singleton_key, ''))
-- WHERE state = 'active' AND policy = 'singleton'`) or job_i3 (stately: `(name, state,
-- COALESCE(singleton_key, '')) WHERE state <= 'active' AND policy = 'stately'`); the statement
-- fails and `fetch` returns no job. Whether the job is due (start_after < now()) is the caller's
-- to check. No lookup for a job of another policy (or none: a dead letter's copy has no policy);
-- each branch names its policy, so its lookup is an index probe into job_i2 / job_i3.
j.state < 'active' AND coalesce(j.policy IN ('singleton', 'stately'), false) AND (
    (j.policy = 'singleton' AND EXISTS (
        SELECT 1 FROM {job} a
        WHERE a.name = j.name AND a.state = 'active' AND a.policy = 'singleton'
          AND COALESCE(a.singleton_key, '') = COALESCE(j.singleton_key, '')))
    OR (j.policy = 'stately' AND EXISTS (
        SELECT 1 FROM {job} a
        WHERE a.name = j.name AND a.state = 'active' AND a.policy = 'stately'
          AND COALESCE(a.singleton_key, '') = COALESCE(j.singleton_key, '')))
)

-- name: blocked_v9
-- Fragment, pg-boss 9: job `j` is in a singleton queue (sendSingleton / useSingletonQueue: its
-- singletonKey starts with '__pgboss__singleton_queue') that has an active job of the same name
-- and key. Only a fetch called with `enforceSingletonQueueActiveLimit: true` skips it (the
-- condition below is that option's, from v9's fetchNextJob); pg-boss's default fetch claims it,
-- and the database does not record which consumers pass the option: apply it only where the
-- configuration says so. No lookup for a job with no singletonKey. (`%%`: a LIKE wildcard either
-- way, sent with bind parameters or without.)
j.state < 'active' AND j.singletonkey IS NOT NULL AND j.singletonkey LIKE '\_\_pgboss\_\_singleton\_queue%%' AND EXISTS (
    SELECT 1 FROM {job} a
    WHERE a.state = 'active' AND a.name = j.name AND a.singletonkey = j.singletonkey)

-- name: blocked_head_v10
-- Enter: the due jobs of one queue that its singleton/stately policy holds back (as blocked_v10),
-- oldest first, each with the active job that holds it back (job_i2 / job_i3 let only one job of
-- a key be active; each branch is an index probe into its policy's index).
SELECT j.id, j.name, j.singleton_key, j.policy, b.id AS blocked_by, b.state AS blocked_by_state,
       j.created_on, j.start_after
FROM {job} j
CROSS JOIN LATERAL (
    (SELECT a.id, a.state::text AS state FROM {job} a
     WHERE j.policy = 'singleton' AND a.name = j.name AND a.state = 'active' AND a.policy = 'singleton'
       AND COALESCE(a.singleton_key, '') = COALESCE(j.singleton_key, '')
     LIMIT 1)
    UNION ALL
    (SELECT a.id, a.state::text AS state FROM {job} a
     WHERE j.policy = 'stately' AND a.name = j.name AND a.state = 'active' AND a.policy = 'stately'
       AND COALESCE(a.singleton_key, '') = COALESCE(j.singleton_key, '')
     LIMIT 1)
    LIMIT 1
) AS b
WHERE j.name = %(queue)s::text AND j.state < 'active' AND j.start_after < now()
  AND j.policy IN ('singleton', 'stately')
ORDER BY j.created_on, j.id
LIMIT %(limit)s::integer;
