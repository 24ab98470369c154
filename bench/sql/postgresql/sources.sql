-- `queuetop bench sources`: each library's jobs, shaped as the library writes them, in bulk, and
-- the libraries' own monitoring calls. Every table gets %(n)s jobs over four queues q0..q3: where
-- finished jobs stay (Procrastinate, pg-boss, River) 90 %% finished, 8 %% ready, 1 %% scheduled,
-- 0.5 %% running, 0.5 %% failed; where they are deleted (Graphile Worker, PGMQ, PgQueuer) 98 %%
-- ready, 1 %% scheduled, 0.5 %% running, 0.5 %% failed (PGMQ: archived; PgQueuer: deleted and
-- logged `exception`, its default on_failure).

-- name: create_database
CREATE DATABASE {database};

-- name: end_sessions
-- The bench database's sessions (a library's pool left behind), before it is dropped: what
-- DROP DATABASE ... WITH (FORCE) does from PostgreSQL 13, written so that 12 runs it too.
SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = %(database)s AND pid <> pg_backend_pid();

-- name: drop_database
DROP DATABASE IF EXISTS {database};

-- name: has_gen_random_uuid
SELECT to_regproc('gen_random_uuid') IS NOT NULL;

-- name: create_pgcrypto
CREATE EXTENSION IF NOT EXISTS pgcrypto;

-- name: river_index
-- River's fetching index and its (state, finalized_at) one, which its cleaner and its completed
-- jobs' reads go through (its migrations create both: 002_initial_schema).
CREATE INDEX IF NOT EXISTS river_job_prioritized_fetching_index ON river_job (state, queue, priority, scheduled_at, id);
CREATE INDEX IF NOT EXISTS river_job_state_and_finalized_at_index ON river_job (state, finalized_at)
    WHERE finalized_at IS NOT NULL;

-- name: fill_procrastinate
INSERT INTO procrastinate_jobs (queue_name, task_name, status, scheduled_at)
SELECT 'q' || (g %% 4), 'bench',
       (CASE WHEN g %% 1000 < 900 THEN 'succeeded' WHEN g %% 1000 < 990 THEN 'todo'
             WHEN g %% 1000 < 995 THEN 'doing' ELSE 'failed' END)::procrastinate_job_status,
       CASE WHEN g %% 1000 >= 980 AND g %% 1000 < 990 THEN now() + interval '1 hour' END
FROM generate_series(1, %(n)s::integer) AS g;

-- name: fill_river
INSERT INTO river_job (queue, kind, max_attempts, state, scheduled_at, attempt, finalized_at)
SELECT 'q' || (g %% 4), 'bench', 25, s.state::river_job_state,
       CASE WHEN s.state = 'scheduled' THEN now() + interval '1 hour' ELSE now() END,
       CASE WHEN s.state IN ('running', 'discarded', 'completed') THEN 1 ELSE 0 END,
       CASE WHEN s.state IN ('completed', 'discarded') THEN now() END
FROM generate_series(1, %(n)s::integer) AS g,
     LATERAL (SELECT CASE WHEN g %% 1000 < 900 THEN 'completed' WHEN g %% 1000 < 980 THEN 'available'
                          WHEN g %% 1000 < 990 THEN 'scheduled' WHEN g %% 1000 < 995 THEN 'running'
                          ELSE 'discarded' END AS state) AS s;

-- name: fill_pgboss
INSERT INTO pgboss.job (name, state, start_after, completed_on)
SELECT 'q' || (g %% 4), s.state::pgboss.job_state,
       CASE WHEN g %% 1000 >= 980 AND g %% 1000 < 990 THEN now() + interval '1 hour' ELSE now() END,
       CASE WHEN s.state IN ('completed', 'failed') THEN now() END
FROM generate_series(1, %(n)s::integer) AS g,
     LATERAL (SELECT CASE WHEN g %% 1000 < 900 THEN 'completed' WHEN g %% 1000 < 990 THEN 'created'
                          WHEN g %% 1000 < 995 THEN 'active' ELSE 'failed' END AS state) AS s;

-- name: fill_graphile
WITH tasks AS (
    INSERT INTO graphile_worker._private_tasks (identifier)
    SELECT 'q' || g FROM generate_series(0, 3) AS g
    ON CONFLICT (identifier) DO UPDATE SET identifier = excluded.identifier
    RETURNING id, identifier
)
INSERT INTO graphile_worker._private_jobs (task_id, run_at, attempts, max_attempts, locked_at, locked_by)
SELECT t.id,
       CASE WHEN g %% 1000 >= 980 AND g %% 1000 < 990 THEN now() + interval '1 hour' ELSE now() END,
       CASE WHEN g %% 1000 >= 995 THEN 25 ELSE 0 END, 25,
       CASE WHEN g %% 1000 >= 990 AND g %% 1000 < 995 THEN now() END,
       CASE WHEN g %% 1000 >= 990 AND g %% 1000 < 995 THEN 'bench' END
FROM generate_series(1, %(n)s::integer) AS g
JOIN tasks t ON t.identifier = 'q' || (g %% 4);

-- name: fill_pgqueuer
-- As PgQueuer's enqueue writes a job (its id sequence, priority, entrypoint, payload,
-- execute_after = now() + delay, status 'queued') with its 'queued' log row; a dequeue makes a job
-- 'picked' (queue_manager_id, heartbeat) and logs 'picked'; a failure (on_failure 'delete')
-- deletes the job and logs 'exception' with its traceback: those jobs are only in the log.
WITH jobs AS (
    INSERT INTO pgqueuer (priority, entrypoint, payload, execute_after, status, heartbeat, queue_manager_id)
    SELECT 0, 'q' || (g %% 4), convert_to('bench', 'UTF8'),
           CASE WHEN g %% 1000 >= 980 AND g %% 1000 < 990 THEN now() + interval '1 hour' ELSE now() END,
           (CASE WHEN g %% 1000 >= 990 THEN 'picked' ELSE 'queued' END)::pgqueuer_status,
           now(), CASE WHEN g %% 1000 >= 990 THEN '00000000-0000-4000-8000-000000000001'::uuid END
    FROM generate_series(1, %(n)s::integer) AS g
    WHERE g %% 1000 < 995
    RETURNING id, entrypoint, priority, status
), failed AS (
    SELECT nextval(pg_get_serial_sequence('pgqueuer', 'id')) AS id, 'q' || (g %% 4) AS entrypoint, 0 AS priority
    FROM generate_series(1, %(n)s::integer) AS g
    WHERE g %% 1000 >= 995
)
INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority, traceback)
SELECT id, 'queued'::pgqueuer_status, entrypoint, priority, NULL::jsonb FROM jobs
UNION ALL
SELECT id, 'picked'::pgqueuer_status, entrypoint, priority, NULL FROM jobs WHERE status = 'picked'
UNION ALL
SELECT f.id, s.status::pgqueuer_status, f.entrypoint, f.priority,
       CASE WHEN s.status = 'exception' THEN jsonb_build_object(
           'job_id', f.id, 'timestamp', now(), 'exception_type', 'ValueError', 'exception_message', 'bench',
           'traceback', 'Traceback (most recent call last): ValueError: bench', 'additional_context', NULL) END
FROM failed AS f, unnest(ARRAY['queued', 'picked', 'exception']) AS s(status);

-- name: pgmq_create
SELECT pgmq.create(%(queue)s::text);

-- name: fill_pgmq
-- One queue table: 98 %% ready, 1 %% sent with a delay, 1 %% read (in flight); its archive gets a
-- tenth as many.
WITH q AS (
    INSERT INTO pgmq.q_bench (read_ct, vt, message)
    SELECT CASE WHEN g %% 100 = 99 THEN 1 ELSE 0 END,
           CASE WHEN g %% 100 >= 98 THEN now() + interval '1 hour' ELSE now() END,
           jsonb_build_object('n', g)
    FROM generate_series(1, %(n)s::integer) AS g
    RETURNING msg_id
)
INSERT INTO pgmq.a_bench (msg_id, read_ct, vt, message)
SELECT msg_id + 1000000000, 1, now(), '{}'::jsonb FROM q WHERE msg_id %% 10 = 0;

-- name: analyze
-- The tables as autovacuum leaves them (statistics, visibility map, hint bits): measured in the
-- steady state, not while autovacuum's first pass over the millions of rows just written runs
-- beside the measurement (on a 2-core machine it takes one core for tens of seconds).
VACUUM (ANALYZE);

-- name: pgmq_metrics_all
-- PGMQ's own monitoring call.
SELECT * FROM pgmq.metrics_all();

-- name: pgboss_queue_size
-- pg-boss's getQueueSize (its SQL, plans.js), for each queue.
SELECT count(*) as count FROM pgboss.job WHERE name = %(queue)s::text AND state < 'active';
