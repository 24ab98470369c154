-- pg-boss 9 and 10 (https://github.com/timgit/pg-boss): the job console's reads and actions
-- (jobs/pgboss.py). `_v10` sections are pg-boss 10's schema (`job` partitioned by queue name, one
-- partition per row of `queue`, primary key (name, id), columns spelled start_after, retry_count,
-- ...); `_v9` sections pg-boss 9's (one `job` table, primary key (id), columns spelled startafter,
-- retrycount, ...). Ids are random uuids: every list is in uuid order (keyset: id > %(after)s).
-- States as probes/sources/pgboss.py counts them (fetchNextJob's view of a job): done = completed,
-- cancelled; dead = failed (v9: and expired); in flight = active; delayed = created/retry with
-- start_after ahead; blocked (v10) = due, but its singleton/stately queue has a job of its key
-- active (the probe's blocked_v10 rule, {blocked}); ready = the rest.
-- Every action is the statement pg-boss's own client method runs (src/plans.js), narrowed to the
-- queue (v10's partition key) and to the queuetop states the job was listed in (compare-and-set).
-- pg-boss's workers poll (fetchNextJob every pollingIntervalSeconds / newJobCheckInterval): it
-- sends and listens to no notification, so none is sent here.

-- name: state_v10
-- Fragment: row `j`'s queuetop state, in the order the probe's job table classes a row.
CASE WHEN j.state IN ('completed', 'cancelled') THEN 'done'
     WHEN j.state = 'failed' THEN 'dead'
     WHEN j.state = 'active' THEN 'in_flight'
     WHEN j.start_after > now() THEN 'delayed'
     WHEN coalesce(({blocked}), false) THEN 'blocked'
     ELSE 'ready' END

-- name: state_v9
-- Fragment: as state_v10, pg-boss 9. Its singleton-queue rule holds a job back only for workers
-- that pass enforceSingletonQueueActiveLimit (not recorded in the database): the snapshot counts
-- no v9 job blocked unless its config says so, and neither does this.
CASE WHEN j.state IN ('completed', 'cancelled') THEN 'done'
     WHEN j.state IN ('failed', 'expired') THEN 'dead'
     WHEN j.state = 'active' THEN 'in_flight'
     WHEN j.startafter > now() THEN 'delayed'
     ELSE 'ready' END

-- name: row_v10
-- Fragment: the columns of a job `j` the console shows ({state}: its queuetop state).
j.id::text AS id, j.name, j.state::text AS status, ({state}) AS queuetop_state, j.priority, j.data,
j.retry_count, j.retry_limit, j.retry_delay, j.retry_backoff, j.start_after, j.started_on, j.singleton_key,
j.singleton_on, j.expire_in, j.created_on, j.completed_on, j.keep_until, j.output, j.dead_letter, j.policy,
EXTRACT(epoch FROM (now() - j.created_on))::float8 AS age_s

-- name: row_v9
-- Fragment: row_v10's columns in pg-boss 9's spelling (it has on_complete, no dead_letter or policy).
j.id::text AS id, j.name, j.state::text AS status, ({state}) AS queuetop_state, j.priority, j.data,
j.retrycount AS retry_count, j.retrylimit AS retry_limit, j.retrydelay AS retry_delay, j.retrybackoff AS retry_backoff,
j.startafter AS start_after, j.startedon AS started_on, j.singletonkey AS singleton_key, j.singletonon AS singleton_on,
j.expirein AS expire_in, j.createdon AS created_on, j.completedon AS completed_on, j.keepuntil AS keep_until,
j.output, j.on_complete, EXTRACT(epoch FROM (now() - j.createdon))::float8 AS age_s

-- name: every_row
-- Fragment: no condition.
TRUE

-- name: waiting
-- Fragment: a job fetchNextJob may take (created, retry), due or not: the predicate of its fetch
-- index (v10 job_i5 (name, start_after), v9 job_fetch (name, startafter)).
j.state < 'active'

-- name: due_v10
-- Fragment: a waiting job due now (ready, or blocked): a range of job_i5 (name, start_after).
j.state < 'active' AND j.start_after <= now()

-- name: later_v10
-- Fragment: a waiting job due later (delayed): the other range of job_i5.
j.state < 'active' AND j.start_after > now()

-- name: due_v9
-- Fragment: due_v10, pg-boss 9's spelling: a range of job_fetch (name, startafter).
j.state < 'active' AND j.startafter <= now()

-- name: later_v9
-- Fragment: later_v10, pg-boss 9's spelling.
j.state < 'active' AND j.startafter > now()

-- name: held_v10
-- Whether any job of the queue can be blocked now: one of it is active in a singleton or a stately
-- queue (an index probe each into job_i2 / job_i3, whose predicates these are). When none is, no
-- due job is held back, and a list of the delayed is the range of job_i5 ahead of now.
SELECT EXISTS (SELECT 1 FROM {jobs} AS a WHERE a.name = %(queue)s::text AND a.state = 'active' AND a.policy = 'singleton')
    OR EXISTS (SELECT 1 FROM {jobs} AS a WHERE a.name = %(queue)s::text AND a.state = 'active' AND a.policy = 'stately')
    AS held;

-- name: after_oldest
-- Fragment: the keyset, oldest first (uuid order).
j.id > %(after)s::uuid

-- name: after_newest
-- Fragment: the keyset, newest first.
j.id < %(after)s::uuid

-- name: oldest
-- Fragment: the keyset's order, oldest first.
j.id

-- name: newest
-- Fragment: the keyset's order, newest first.
j.id DESC

-- name: ids_in
-- Fragment: one of the ids asked for.
j.id = ANY(%(ids)s::uuid[])

-- name: state_in
-- Fragment: in one of the queuetop states %(states)s (a listing by `delayed` takes blocked too,
-- as the snapshot's delayed figure does).
({state}) = ANY(%(states)s::text[])

-- name: kind_is
-- Fragment: of the kind asked for (a pg-boss job's kind is its name: its queue's).
j.name = %(kind)s::text

-- name: args_contain
-- Fragment: whose data contains the JSON asked for (no index on data: a bounded scan).
j.data @> %(match)s::jsonb

-- name: args_text
-- Fragment: whose data's text is ILIKE the pattern asked for (a bounded scan).
j.data::text ILIKE %(text)s::text

-- name: list_v10
-- A page of one queue's jobs, led by an index: its partition's primary key (name, id) walked in
-- id order, or for a waiting state ({waiting}: due_v10, later_v10) its range of the fetch index
-- job_i5 (name, start_after) WHERE state < 'active', then sorted by id. The planner picks the
-- walk where the state's jobs are many (it stops at the page's end), the range where they are few;
-- neither reads a job of another queue, nor a finished one through job_i5.
SELECT {row}
FROM {jobs} AS j
WHERE j.name = %(queue)s::text AND {waiting} AND {after} AND {ids} AND {states} AND {kind} AND {match} AND {text}
ORDER BY {order}
LIMIT %(limit)s::integer;

-- name: scan_v10
-- A page that no index leads (a search, or in flight / dead / done: pg-boss indexes no such
-- state): the queue's next %(scan)s jobs in id order on its primary key (name, id), and those of
-- them that match.
SELECT {row}
FROM (SELECT * FROM {jobs} AS j WHERE j.name = %(queue)s::text AND {after} ORDER BY {order} LIMIT %(scan)s::integer) AS j
WHERE {states} AND {kind} AND {match} AND {text}
ORDER BY {order}
LIMIT %(limit)s::integer;

-- name: edge_v10
-- Where scan_v10's window ends: the %(skip)s+1-th job after the keyset (none: the window reached
-- the queue's last job).
SELECT j.id::text AS id
FROM {jobs} AS j
WHERE j.name = %(queue)s::text AND {after}
ORDER BY {order}
OFFSET %(skip)s::integer LIMIT 1;

-- name: list_v9
-- As list_v10, pg-boss 9: for a waiting state ({waiting}: due_v9, later_v9) its range of the
-- fetch index job_fetch (name text_pattern_ops, startafter) WHERE state < 'active', then sorted by
-- id, or the primary key (id) walked in id order, as the planner picks; with {ids}, the primary
-- key's lookups.
SELECT {row}
FROM {jobs} AS j
WHERE j.name = %(queue)s::text AND {waiting} AND {after} AND {ids} AND {states} AND {kind} AND {match} AND {text}
ORDER BY {order}
LIMIT %(limit)s::integer;

-- name: scan_v9
-- As scan_v10, pg-boss 9: no index of its leads one queue's jobs in id order (its primary key is
-- (id), its name index is not ordered by id), so the window is the next %(scan)s jobs of every
-- queue on the primary key, and the queue's among them that match.
SELECT {row}
FROM (SELECT * FROM {jobs} AS j WHERE {after} ORDER BY {order} LIMIT %(scan)s::integer) AS j
WHERE j.name = %(queue)s::text AND {states} AND {kind} AND {match} AND {text}
ORDER BY {order}
LIMIT %(limit)s::integer;

-- name: edge_v9
-- Where scan_v9's window ends (every queue's jobs, on the primary key).
SELECT j.id::text AS id
FROM {jobs} AS j
WHERE {after}
ORDER BY {order}
OFFSET %(skip)s::integer LIMIT 1;

-- name: job_v10
-- One job whole: getJobById(name, id) (`WHERE name = $1 AND id = $2`, on the primary key).
SELECT {row}
FROM {jobs} AS j
WHERE j.name = %(queue)s::text AND j.id = %(id)s::uuid;

-- name: archived_v10
-- One archived job: getJobById(name, id, {includeArchive: true})'s second read (its archive's
-- primary key (name, id)).
SELECT {row}, j.archived_on
FROM {archive} AS j
WHERE j.name = %(queue)s::text AND j.id = %(id)s::uuid
LIMIT 1;

-- name: job_v9
-- One job whole: getJobById(id) (`WHERE id = $1`), of this queue.
SELECT {row}
FROM {jobs} AS j
WHERE j.id = %(id)s::uuid AND j.name = %(queue)s::text;

-- name: archived_v9
-- One archived job: getJobById(id)'s second read, of its archive (archive_id_idx (id)).
SELECT {row}, j.archivedon AS archived_on
FROM {archive} AS j
WHERE j.id = %(id)s::uuid AND j.name = %(queue)s::text
LIMIT 1;

-- name: retry_v10
-- retry(name, ids): plans.retryJobs - a failed job back to `retry`, with one more retry allowed
-- (retry_limit + 1); its start_after is past, so the next fetch takes it (retry_count + 1).
UPDATE {jobs} AS j
SET state = 'retry', retry_limit = j.retry_limit + 1
WHERE j.name = %(queue)s::text AND j.id = ANY(%(ids)s::uuid[]) AND j.state = 'failed'
  AND ({state}) = ANY(%(states)s::text[])
RETURNING j.id::text AS id;

-- name: retry_v9
-- pg-boss 9 has no retry(): resume(ids): plans.resumeJobs - `state = 'created', completedOn =
-- NULL` (its statement takes a job in any state; here a failed or expired one).
UPDATE {jobs} AS j
SET completedon = NULL, state = 'created'
WHERE j.name = %(queue)s::text AND j.id = ANY(%(ids)s::uuid[]) AND j.state IN ('failed', 'expired')
  AND ({state}) = ANY(%(states)s::text[])
RETURNING j.id::text AS id;

-- name: cancel_v10
-- cancel(name, ids): plans.cancelJobs - a job not yet finished (state < 'completed': created,
-- retry, active) to `cancelled`, completed_on = now().
UPDATE {jobs} AS j
SET completed_on = now(), state = 'cancelled'
WHERE j.name = %(queue)s::text AND j.id = ANY(%(ids)s::uuid[]) AND j.state < 'completed'
  AND ({state}) = ANY(%(states)s::text[])
RETURNING j.id::text AS id;

-- name: cancel_v9
-- cancel(ids): plans.cancelJobs, pg-boss 9's spelling.
UPDATE {jobs} AS j
SET completedon = now(), state = 'cancelled'
WHERE j.name = %(queue)s::text AND j.id = ANY(%(ids)s::uuid[]) AND j.state < 'completed'
  AND ({state}) = ANY(%(states)s::text[])
RETURNING j.id::text AS id;

-- name: delete_v10
-- deleteJob(name, ids): plans.deleteJobs - the rows deleted, whatever their state.
DELETE FROM {jobs} AS j
WHERE j.name = %(queue)s::text AND j.id = ANY(%(ids)s::uuid[])
  AND ({state}) = ANY(%(states)s::text[])
RETURNING j.id::text AS id;

-- name: run_now_v10
-- No client method: a waiting job (created, retry) due later is made due now - start_after, the
-- one column fetchNextJob reads of when (`start_after < now()`), as send() sets it for a job sent
-- with no startAfter.
UPDATE {jobs} AS j
SET start_after = now()
WHERE j.name = %(queue)s::text AND j.id = ANY(%(ids)s::uuid[]) AND j.state < 'active' AND j.start_after > now()
  AND ({state}) = ANY(%(states)s::text[])
RETURNING j.id::text AS id;

-- name: run_now_v9
-- As run_now_v10, pg-boss 9's spelling (startafter).
UPDATE {jobs} AS j
SET startafter = now()
WHERE j.name = %(queue)s::text AND j.id = ANY(%(ids)s::uuid[]) AND j.state < 'active' AND j.startafter > now()
  AND ({state}) = ANY(%(states)s::text[])
RETURNING j.id::text AS id;
