"""Graphile Worker 0.17 for the truth oracle: workloads made through Graphile Worker's own API
(tests/peers/graphile_oracle.mjs), and the ground truth counted from Graphile Worker's own fetch.

What the truth follows, quoted from the library (node_modules/graphile-worker 0.17.3).

The fetch, `batchGetJobs` in dist/sql/getJobs.js (named queue strategy 2, the one it uses:
``const strategy = 2;``)::

    with j as (
      select jobs.job_queue_id, jobs.priority, jobs.run_at, jobs.id
        from ${escapedWorkerSchema}._private_jobs as jobs
        where jobs.is_available = true
        and run_at <= ${now}
        and task_id = any($2::int[])
        and (
          jobs.job_queue_id is null
          or
          jobs.job_queue_id in (
            select id
            from ${escapedWorkerSchema}._private_job_queues as job_queues
            where job_queues.is_available = true
            for update
            skip locked
          )
        )
        ${flagsClause}
        order by priority asc, run_at asc
        limit ${batchSize}
        for update
        skip locked
    ), q as (
      update ${escapedWorkerSchema}._private_job_queues as job_queues
        set locked_by = $1::text, locked_at = ${now}
        from j where job_queues.id = j.job_queue_id
    )
      update ${escapedWorkerSchema}._private_jobs as jobs
        set attempts = jobs.attempts + 1, locked_by = $1::text, locked_at = ${now}
        from j where jobs.id = j.id returning *

with the two `is_available` columns from its migration 000011 (sql/000011.sql)::

    _private_job_queues:  is_available boolean generated always as ((locked_at is null)) stored not null
    _private_jobs:        is_available boolean generated always as (((locked_at is null)
                              and (attempts < max_attempts))) stored not null

A lock has no expiry in the fetch: a job or queue locked for more than 4 hours is unlocked only
when a worker runs `resetLockedAt` (dist/sql/resetLockedAt.js: ``where locked_at < ${now} -
interval '4 hours'``), so until then it stays locked, and so does the truth. The fail path
(dist/sql/failJobs.js) unlocks the job and its queue and backs off: ``run_at = greatest(now(),
run_at) + (exp(least(attempts, 10)) * interval '1 second')``; a completed job is deleted
(``complete_jobs``: ``delete from ... _private_jobs``). So, per job (a worker that knows every task,
no forbidden flags; a queue row held for an instant by another fetch's ``for update`` is not a
state):

- in flight: ``locked_at is not null`` (whatever its attempts: a job on its last attempt runs);
- dead: not locked and ``attempts >= max_attempts`` (``is_available`` false while unlocked);
- delayed: ``is_available`` and ``run_at > now()`` (scheduled when never attempted, backing off
  after a failure), plus blocked;
- blocked: ``is_available``, ``run_at <= now()``, and its named queue not ``is_available`` (locked
  by the worker that runs another job of it), or gone: the ``job_queue_id in (select id ...
  where job_queues.is_available = true ...)`` test fails;
- ready: ``is_available``, ``run_at <= now()``, and no named queue or an available one;
- finished: deleted, in nothing.

Names as queuetop shows them (probes/sources/graphile_worker.py): one row per task identifier,
``task:<identifier>``, and one per named queue, ``queue:<queue_name>``; a job in a named queue is in
both. Every task and named queue Graphile has registered is a row, an empty one too.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from ..conftest import NodeWorkload
from .contract import FIELDS

SOURCE = "graphile-worker"  # probes/sources/graphile_worker.py: GraphileWorker.name
DEFAULT_SCHEMA = "graphile_worker"
CUSTOM_SCHEMA = "gw_custom"
LARGE_SCHEMA = "gw_large"

# The truth, per job as above, then per task and per named queue (every registered one).
TRUTH = """
WITH c AS (
    SELECT j.task_id, j.job_queue_id,
           CASE WHEN j.locked_at IS NOT NULL THEN 'in_flight'
                WHEN NOT j.is_available THEN 'dead'
                WHEN j.run_at > now() THEN 'delayed'
                WHEN j.job_queue_id IS NOT NULL AND q.is_available IS NOT TRUE THEN 'blocked'
                ELSE 'ready' END AS cat
    FROM {jobs} j
    LEFT JOIN {job_queues} q ON q.id = j.job_queue_id
)
SELECT 'task:' || t.identifier AS name, c.cat, count(c.cat) AS n
FROM {tasks} t LEFT JOIN c ON c.task_id = t.id GROUP BY 1, 2
UNION ALL
SELECT 'queue:' || q.queue_name, c.cat, count(c.cat)
FROM {job_queues} q LEFT JOIN c ON c.job_queue_id = q.id GROUP BY 1, 2
"""

# The fetch itself (getJobs.js, above), for every task at once and with no batch limit, run in a
# transaction that is rolled back: the jobs it claims, per task and named queue.
FETCH_ALL = """
WITH j AS (
  SELECT jobs.job_queue_id, jobs.priority, jobs.run_at, jobs.id
    FROM {jobs} AS jobs
    WHERE jobs.is_available = true
    AND run_at <= now()
    AND task_id = any(ARRAY(SELECT id FROM {tasks}))
    AND (
      jobs.job_queue_id IS NULL
      OR
      jobs.job_queue_id IN (
        SELECT id
        FROM {job_queues} AS job_queues
        WHERE job_queues.is_available = true
        FOR UPDATE
        SKIP LOCKED
      )
    )
    ORDER BY priority ASC, run_at ASC
    FOR UPDATE
    SKIP LOCKED
), q AS (
  UPDATE {job_queues} AS job_queues
    SET locked_by = 'oracle', locked_at = now()
    FROM j
    WHERE job_queues.id = j.job_queue_id
), claimed AS (
  UPDATE {jobs} AS jobs
    SET attempts = jobs.attempts + 1, locked_by = 'oracle', locked_at = now()
    FROM j
    WHERE jobs.id = j.id
    RETURNING jobs.task_id, jobs.job_queue_id
)
SELECT 'task:' || t.identifier, count(*) FROM claimed c JOIN {tasks} t ON t.id = c.task_id GROUP BY 1
UNION ALL
SELECT 'queue:' || q.queue_name, count(*) FROM claimed c JOIN {job_queues} q ON q.id = c.job_queue_id GROUP BY 1
"""


def parts(schema: str) -> dict[str, sql.Identifier]:
    return {"jobs": sql.Identifier(schema, "_private_jobs"), "tasks": sql.Identifier(schema, "_private_tasks"),
            "job_queues": sql.Identifier(schema, "_private_job_queues")}


def truth(conn: psycopg.Connection, schema: str = DEFAULT_SCHEMA) -> dict[str, dict[str, int]]:
    """Every task and named queue of the install in `schema`: ready, in_flight, delayed (blocked
    included), dead, blocked, as Graphile Worker's fetch sees them now."""
    out: dict[str, dict[str, int]] = {}
    for name, cat, n in conn.execute(sql.SQL(TRUTH).format(**parts(schema))).fetchall():
        counts = out.setdefault(name, dict.fromkeys(FIELDS, 0))
        if cat is not None:
            counts[cat] += n
    for counts in out.values():
        counts["delayed"] += counts["blocked"]
    return out


def fetch_would_claim(conn: psycopg.Connection, schema: str = DEFAULT_SCHEMA) -> dict[str, int]:
    """What Graphile Worker's own fetch claims right now (every task, no batch limit), per task and
    named queue, rolled back: the truth's `ready` must be exactly this."""
    with conn.transaction(force_rollback=True):
        return {name: n for name, n in conn.execute(sql.SQL(FETCH_ALL).format(**parts(schema))).fetchall()}


# -- the workloads (graphile_oracle.mjs) ----------------------------------------------------------

def _shape(ready: int = 0, in_flight: int = 0, scheduled: int = 0, backing_off: int = 0, dead: int = 0,
           blocked: int = 0) -> dict[str, int]:
    return {"ready": ready, "in_flight": in_flight, "delayed": scheduled + backing_off + blocked, "dead": dead,
            "blocked": blocked}


# Small, in each schema. Jobs finished (deleted): send_email 2 (a worker), cleanup 2 (a worker),
# thumb 1 (completeJobs); dead by a worker throwing with maxAttempts 1 (send_email, thumb) or by
# permanentlyFailJobs (send_email, report); backing off after a worker threw on attempt 8 (about
# 50 minutes); running: a worker (concurrency 3) holds one send_email, one thumb and report 1,
# which locks named queue "reports": reports 2 and 3 and a thumb job in it are blocked.
SMALL: dict[str, dict[str, int]] = {
    "task:send_email": _shape(ready=3, in_flight=1, scheduled=2, backing_off=1, dead=2),
    "task:thumb": _shape(ready=3, in_flight=1, scheduled=1, backing_off=1, dead=1, blocked=1),
    "task:report": _shape(in_flight=1, scheduled=1, dead=1, blocked=2),
    "task:cleanup": _shape(),  # only finished jobs: registered, empty
    "queue:reports": _shape(in_flight=1, scheduled=1, dead=1, blocked=3),
    "queue:exports": _shape(ready=1, scheduled=1, backing_off=1),
}

# Large (280,018 jobs), correlated: thumb holds the whole backlog (skewed priorities), archive only
# jobs failed for good, digest only scheduled ones (bimodal: 12,000 at +15 min, 15,000 at +6 h),
# notify in named queue "fanout" 20,000 ready and 11,000 backing off; small figures beside them in
# the same table: mail (7 dead, 2 backing off after a worker threw, 5 ready, none running), slow
# in named queue "serial" (one running, holding it; three blocked behind it).
LARGE: dict[str, dict[str, int]] = {
    "task:thumb": _shape(ready=160_000),
    "task:archive": _shape(dead=62_000),
    "task:digest": _shape(scheduled=27_000),
    "task:notify": _shape(ready=20_000, backing_off=11_000),
    "queue:fanout": _shape(ready=20_000, backing_off=11_000),
    "task:mail": _shape(ready=5, backing_off=2, dead=7),
    "task:slow": _shape(in_flight=1, blocked=3),
    "queue:serial": _shape(in_flight=1, blocked=3),
}
LARGE_ROWS = 280_018


@dataclass
class Workload:
    """A built workload: its node process holds the running jobs until close()."""

    schema: str
    size: str
    expected: dict[str, dict[str, int]]
    report: dict[str, Any]
    node: NodeWorkload

    @property
    def build_s(self) -> float:
        return float(self.report["seconds"])

    def close(self) -> None:
        self.node.close()


def _build(node_peers: Path, dsn: str, schema: str, size: str, expected: dict[str, dict[str, int]]) -> Workload:
    node = NodeWorkload(node_peers, "graphile_oracle.mjs", dsn, schema, size)
    return Workload(schema=schema, size=size, expected=expected, report=node.report, node=node)


def build_small(node_peers: Path, dsn: str, schema: str = DEFAULT_SCHEMA) -> Workload:
    """Every state, each in at least two rows (SMALL), in `schema`; workers hold three jobs."""
    return _build(node_peers, dsn, schema, "small", SMALL)


def build_large(node_peers: Path, dsn: str, schema: str = LARGE_SCHEMA) -> Workload:
    """LARGE_ROWS jobs (LARGE) in `schema`, then ANALYZE, as autovacuum would have by the time an
    operator looks (a table analyzed mid-load is another case than this one)."""
    workload = _build(node_peers, dsn, schema, "large", LARGE)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("ANALYZE {}").format(parts(schema)["jobs"]))
    except BaseException:
        workload.close()
        raise
    return workload


# -- huge: past the first cycle's reading (issue: 1.5M jobs, 19,701 pages) -------------------------

HUGE_SCHEMA = "gw_huge"
HUGE_DELAYED = 1_000_000
HUGE_READY = 500_000
HUGE_BATCH = 100_000  # job specs per add_jobs call

# The small workload (SMALL: every state, a worker holding three jobs and named queue "reports"
# with three blocked behind it) first, at the table's head; then task sync's backlog as the issue
# had it, through Graphile Worker's own SQL API (add_jobs, in batches): 1,000,000 scheduled ahead
# (+1 h to +6 days) added first, then 500,000 due (run_at over the last hour); then, at the table's
# end, among the pages a first cycle leaves unread, task audit: 7 failed for good
# (permanently_fail_jobs) and 3 scheduled ahead.
HUGE: dict[str, dict[str, int]] = {
    **SMALL,
    "task:sync": _shape(ready=HUGE_READY, scheduled=HUGE_DELAYED),
    "task:audit": _shape(scheduled=3, dead=7),
}
HUGE_ROWS = 22 + HUGE_DELAYED + HUGE_READY + 10

# Graphile Worker's add_jobs(specs job_spec[], job_key_preserve_run_at boolean) (sql/000018.sql),
# job_spec (sql/000011.sql, 000013.sql): identifier, payload, queue_name, run_at, max_attempts,
# job_key, priority, flags; the jobs `g` from `first` to `last`, due `offset` seconds from now
# plus g modulo `spread` seconds.
ADD_JOBS = """
SELECT array_agg(id ORDER BY id) FROM {add_jobs}(ARRAY(
    SELECT ROW(%(task)s::text, json_build_object('n', g), NULL, now() + make_interval(secs => %(offset)s + g %% %(spread)s),
               NULL, NULL, NULL, NULL)::{job_spec}
    FROM generate_series(%(first)s::integer, %(last)s::integer) AS g
    ORDER BY g))
"""
PERMANENTLY_FAIL_JOBS = "SELECT count(*) FROM {permanently_fail_jobs}(%(ids)s::bigint[], %(why)s::text)"
PAGES = """
SELECT pg_relation_size(c.oid) / current_setting('block_size')::bigint
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema)s AND c.relname = '_private_jobs'
"""


def add_jobs(conn: psycopg.Connection, schema: str, task: str, first: int, last: int, offset: int,
             spread: int) -> list[int]:
    """Jobs `first`..`last` of `task` through Graphile Worker's add_jobs, HUGE_BATCH a call
    (each in its own transaction, as a client's addJobs calls are); their ids."""
    statement = sql.SQL(ADD_JOBS).format(add_jobs=sql.Identifier(schema, "add_jobs"),
                                         job_spec=sql.Identifier(schema, "job_spec"))
    ids: list[int] = []
    for lo in range(first, last + 1, HUGE_BATCH):
        row = conn.execute(statement, {"task": task, "first": lo, "last": min(last, lo + HUGE_BATCH - 1),
                                       "offset": offset, "spread": spread}).fetchone()
        ids += row[0] if row and row[0] else []
    return ids


def build_huge(node_peers: Path, dsn: str, schema: str = HUGE_SCHEMA) -> Workload:
    """HUGE_ROWS jobs (HUGE) in `schema`, past FIRST_TABLE_PAGES (probes/sources/tally.py), then
    ANALYZE. `report` says the bulk's seconds and the jobs table's pages."""
    workload = _build(node_peers, dsn, schema, "small", HUGE)
    try:
        started = time.monotonic()
        with psycopg.connect(dsn, autocommit=True) as conn:
            add_jobs(conn, schema, "sync", 1, HUGE_DELAYED, 3600, 6 * 86400)
            add_jobs(conn, schema, "sync", HUGE_DELAYED + 1, HUGE_DELAYED + HUGE_READY, -3600, 3600)
            dead = add_jobs(conn, schema, "audit", 1, 7, -60, 1)
            conn.execute(sql.SQL(PERMANENTLY_FAIL_JOBS).format(
                permanently_fail_jobs=sql.Identifier(schema, "permanently_fail_jobs")),
                {"ids": dead, "why": "audit store gone"})
            add_jobs(conn, schema, "audit", 8, 10, 7200, 1)
            conn.execute(sql.SQL("ANALYZE {}").format(parts(schema)["jobs"]))
            row = conn.execute(PAGES, {"schema": schema}).fetchone()
        workload.report["bulk_seconds"] = time.monotonic() - started
        workload.report["pages"] = int(row[0]) if row else 0
    except BaseException:
        workload.close()
        raise
    return workload
