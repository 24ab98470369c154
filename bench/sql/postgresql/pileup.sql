-- `queuetop bench probes`: the locks probe under a pile-up of sessions waiting on one row.

-- name: create
CREATE TABLE IF NOT EXISTS public.queuetop_bench_pileup (id int PRIMARY KEY, v bigint NOT NULL DEFAULT 0);
INSERT INTO public.queuetop_bench_pileup (id) VALUES (1) ON CONFLICT (id) DO NOTHING;

-- name: hold
-- In an open transaction: the row every pgbench client then waits for.
UPDATE public.queuetop_bench_pileup SET v = v + 1 WHERE id = 1;

-- name: pgbench_update
-- pgbench's statement (one per transaction, every client on the same row).
UPDATE public.queuetop_bench_pileup SET v = v + 1 WHERE id = 1;

-- name: waiting
SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = 'queuetop-bench-pileup' AND wait_event_type = 'Lock';

-- name: drop
DROP TABLE IF EXISTS public.queuetop_bench_pileup;

-- name: room
-- The connections a pile-up may still open: max_connections less the reserved ones and those open.
SELECT current_setting('max_connections')::int AS max_connections,
       current_setting('max_connections')::int - current_setting('superuser_reserved_connections')::int
       - (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')::int AS free;
