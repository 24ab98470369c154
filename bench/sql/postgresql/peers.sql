-- `queuetop bench peers`: PGMQ's and Procrastinate's own dequeue paths (their SQL functions),
-- driven the way their clients drive them, beside the reference engine's.

-- name: pgmq_create
SELECT pgmq.create('peers');

-- name: pgmq_fill
-- A queue of %(n)s messages, as pgmq.send_batch writes them (vt = now(): visible).
INSERT INTO pgmq.q_peers (vt, message) SELECT now(), jsonb_build_object('n', g) FROM generate_series(1, %(n)s::integer) AS g;

-- name: pgmq_empty
DELETE FROM pgmq.q_peers;

-- name: pgmq_read
-- PGMQ's read (a visibility timeout, then the consumer deletes what it processed).
SELECT msg_id FROM pgmq.read('peers'::text, 30, %(qty)s::integer);

-- name: pgmq_delete
SELECT pgmq.delete('peers'::text, %(ids)s::bigint[]);

-- name: pgmq_pop
-- PGMQ's pop: read and delete at once.
SELECT msg_id FROM pgmq.pop('peers'::text, %(qty)s::integer);

-- name: procrastinate_fill
INSERT INTO procrastinate_jobs (queue_name, task_name, status)
SELECT 'peers', 'bench', 'todo' FROM generate_series(1, %(n)s::integer);

-- name: procrastinate_empty
DELETE FROM procrastinate_jobs;

-- name: procrastinate_register
SELECT worker_id FROM procrastinate_register_worker_v1();

-- name: procrastinate_fetch
-- Procrastinate's worker: fetch one job (its fetch procedure), then finish it (deleting it, as
-- with delete_jobs="successful").
SELECT id FROM procrastinate_fetch_job_v2(ARRAY['peers']::character varying[], %(worker)s::bigint);

-- name: procrastinate_finish
SELECT procrastinate_finish_job_v1(%(id)s::bigint, 'succeeded'::procrastinate_job_status, true);
