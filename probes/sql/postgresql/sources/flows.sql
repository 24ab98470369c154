-- The flows of the libraries' queues: how many jobs arrived, left and failed between two reads
-- (probes/sources/flows.py), from what each library records itself, read through an index so that
-- the cost follows the traffic between two reads, never the depth of a queue.

-- name: id_feed
-- The rows of a table of records (events, a log, jobs kept) that came into sight since the last
-- read: those past `hi`, the highest id read so far (at most `cap` of them, in id order), and the
-- ids that were missing below it then (`gaps`: a write not yet committed, or rolled back), each
-- row with its group (queue), what it records (kind) and the page its job's row is on now (blk);
-- then the highest id now read, the ids missing below it, which of the gaps were found now, and
-- the pages the jobs that moved are on (the tally recounts them first).
WITH new AS (
    {rows_after}
), again AS (
    {rows_in}
), top AS (
    SELECT max(id) AS top FROM new
)
SELECT 'rows' AS part, seen.grp, seen.kind, count(*)::bigint AS n, NULL::bigint[] AS ids
FROM (SELECT grp, kind FROM new UNION ALL SELECT grp, kind FROM again) AS seen
GROUP BY seen.grp, seen.kind
UNION ALL
SELECT 'top', NULL, NULL, (SELECT top FROM top), NULL
UNION ALL
SELECT 'missing', NULL, NULL, NULL,
       ARRAY(SELECT g FROM generate_series(%(hi)s::bigint + 1, (SELECT top FROM top)) AS g EXCEPT SELECT id FROM new)
UNION ALL
SELECT 'found', NULL, NULL, NULL, ARRAY(SELECT id FROM again)
UNION ALL
SELECT 'blocks', NULL, NULL, NULL,
       ARRAY(SELECT DISTINCT blk FROM (SELECT blk FROM new UNION ALL SELECT blk FROM again) AS b WHERE blk IS NOT NULL);

-- name: ids_after
-- Fragment: the ids past the last one read, in order, at most `cap` of them.
{id} > %(hi)s::bigint ORDER BY {id} LIMIT %(cap)s::integer

-- name: ids_in
-- Fragment: the ids missing at an earlier read.
{id} = ANY(%(gaps)s::bigint[])

-- name: top_id
-- The highest id of a table now (its primary key's last entry): where a feed starts.
SELECT max({id})::bigint AS top FROM {table};

-- name: procrastinate_events
-- Fragment ({where}: the ids read): Procrastinate's events (procrastinate_events, one row written
-- by its triggers for each change of a job's status), each with its job's queue. `deferred`: a
-- job arrived (not `deferred_for_retry`, nor `scheduled`, written beside `deferred` with the
-- time it is due); `succeeded`, `failed`, `cancelled`, `aborted`: it left, for good.
SELECT e.id, j.queue_name::text AS grp, e.type::text AS kind, (j.ctid::text::point)[0]::bigint AS blk
FROM {events} e JOIN {jobs} j ON j.id = e.job_id
WHERE {where}

-- name: river_jobs
-- Fragment ({where}: the ids read): River's jobs by id, each one arrived (River keeps a finished
-- job until its cleaner deletes it, a day later by default).
SELECT j.id, j.queue::text AS grp, 'arrived' AS kind, (j.ctid::text::point)[0]::bigint AS blk
FROM {jobs} j
WHERE {where}

-- name: river_finalized
-- River's jobs finalized in a window of its own recorded time (finalized_at, which its completer
-- sets): completed, cancelled or discarded (failed for good), by queue, through its index on
-- (state, finalized_at). The window ends `settle` seconds before the server's clock (a completion
-- is committed a moment after it is stamped), and that end is the last row (`until`): the next
-- window starts there. With no start (`since` NULL), only the end. `blocks`: the pages those jobs
-- are on (the tally recounts them first).
WITH w AS (SELECT extract(epoch FROM clock_timestamp())::float8 - %(settle)s::float8 AS until)
SELECT j.queue::text AS grp, j.state::text AS kind, count(*)::bigint AS n, NULL::float8 AS until,
       array_agg(DISTINCT (j.ctid::text::point)[0]::bigint) AS blocks
FROM {jobs} j
WHERE j.state IN ('completed', 'cancelled', 'discarded')
  AND j.finalized_at >= to_timestamp(%(since)s::float8) AND j.finalized_at < to_timestamp((SELECT until FROM w))
GROUP BY 1, 2
UNION ALL
SELECT NULL, 'until', NULL, until, NULL FROM w;

-- name: sequence_values
-- The last value each table's id sequence gave out (`tables`, `columns`: in pairs): every row
-- ever inserted took one, whether it is still there or not. NULL where the sequence never gave
-- one; where the role may not read it, the statement fails (the flows of those queues come from
-- their tables' statistics instead).
SELECT t.name AS table_name, pg_sequence_last_value(pg_get_serial_sequence(t.name, t.col)::regclass)::bigint AS value
FROM unnest(%(tables)s::text[], %(columns)s::text[]) AS t(name, col);

-- name: graphile_new
-- Graphile Worker's jobs inserted between two reads of its id sequence (`lo` < id <= `hi`, at most
-- `cap`) and still there, and those of the ids missing at the last read (`pending`: a job whose
-- insert had not committed yet, or that came and went), by task and named queue, with the pages
-- they are on; then the ids of the range missing now (a job completed since is deleted: those
-- are told by the sequence alone, once they are missing twice).
WITH new AS (
    SELECT j.id, j.task_id, j.job_queue_id, (j.ctid::text::point)[0]::bigint AS blk FROM {jobs} j
    WHERE j.id > %(lo)s::bigint AND j.id <= %(hi)s::bigint
), late AS (
    SELECT j.id, j.task_id, j.job_queue_id, (j.ctid::text::point)[0]::bigint AS blk FROM {jobs} j
    WHERE j.id = ANY(%(pending)s::bigint[])
), seen AS (
    SELECT * FROM new UNION ALL SELECT * FROM late
)
SELECT 'rows' AS part, t.identifier::text AS task, q.queue_name::text AS queue, count(*)::bigint AS n,
       array_agg(DISTINCT s.blk) AS blocks
FROM seen s
JOIN {tasks} t ON t.id = s.task_id
LEFT JOIN {job_queues} q ON q.id = s.job_queue_id
GROUP BY 2, 3
UNION ALL
SELECT 'missing', NULL, NULL, NULL,
       ARRAY(SELECT g FROM generate_series(%(lo)s::bigint + 1, %(hi)s::bigint) AS g EXCEPT SELECT id FROM new);

-- name: pgqueuer_log
-- Fragment ({where}: the ids read; {jobs}: its job table, for the page a job that is still there
-- is on): PgQueuer's log (pgqueuer_log, a row per change of a job's
-- status, written by the statement that changes it), each with its entrypoint. `queued` with no
-- traceback: a job arrived (enqueued, or requeued from failed); `queued` with one is a retry's
-- back-off (retry_job), not an arrival; `successful`, `exception`, `canceled`, `deleted`,
-- `failed`: it left (`exception`, `failed`: failed for good).
SELECT l.id, l.entrypoint::text AS grp,
       CASE WHEN l.status::text = 'queued' AND l.traceback IS NOT NULL THEN 'retried' ELSE l.status::text END AS kind,
       (SELECT (p.ctid::text::point)[0]::bigint FROM {jobs} p WHERE p.id = l.job_id) AS blk
FROM {log} l
WHERE {where}

-- name: river_finalized_index
-- Whether River's (state, finalized_at) index (its migration 002) is there: without it the read of
-- the jobs finalized in a window would scan the table, and is not made.
SELECT EXISTS (
    SELECT 1 FROM pg_index i
    JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
    JOIN pg_attribute b ON b.attrelid = i.indrelid AND b.attnum = i.indkey[1]
    WHERE i.indrelid = to_regclass(%(table)s::text) AND i.indisvalid
      AND a.attname = 'state' AND b.attname = 'finalized_at') AS indexed;
