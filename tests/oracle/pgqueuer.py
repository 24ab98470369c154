"""PgQueuer for the truth oracle: workloads made through PgQueuer's own API (pgqueuer 1.6: its
`Queries` over its psycopg driver for install, enqueue, dequeue, log_jobs, retry_job and
mark_job_as_cancelled; real `QueueManager` workers with handlers that succeed, fail, ask for a
retry, or run until released) and the ground truth, written from its dequeue
(adapters/persistence/qb.py, QueryQueueBuilder.build_dequeue_query) as it composes it for workers
that register no concurrency limit::

    WITH available AS (SELECT UNNEST($2::text[]) AS entrypoint),
    next_queued AS (
        SELECT job.id, job.priority FROM available CROSS JOIN LATERAL (
            SELECT candidate.id, candidate.priority FROM pgqueuer candidate
            WHERE candidate.entrypoint = available.entrypoint AND candidate.status = 'queued'
              AND candidate.execute_after < NOW()
            ORDER BY candidate.priority DESC, candidate.id ASC LIMIT $1 FOR UPDATE SKIP LOCKED) job
        ORDER BY job.priority DESC, job.id ASC LIMIT $1),
    next_stale AS (
        SELECT stale.id, stale.priority FROM pgqueuer stale
        WHERE stale.status = 'picked' AND stale.entrypoint = ANY($2)
          AND stale.heartbeat < NOW() - $4::interval AND stale.execute_after < NOW()
        ORDER BY stale.priority DESC, stale.id ASC FOR UPDATE SKIP LOCKED LIMIT $1),
    eligible AS (SELECT id FROM (next_queued UNION ALL next_stale) ORDER BY priority DESC, id ASC LIMIT $1),
    claimed AS (UPDATE pgqueuer SET status = 'picked', updated = NOW(), heartbeat = NOW(),
                queue_manager_id = $3 WHERE id IN (SELECT id FROM eligible) RETURNING *),
    log_pick AS (INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority) SELECT ... FROM claimed)
    SELECT * FROM claimed ORDER BY priority DESC, id ASC;

with $4 the worker's heartbeat_timeout (QueueManager.run's default, 30 s; the source's too). A
handler that raises: QueueManager.log_failure logs the job `exception` (on_failure 'delete', the
default: build_log_job_query deletes the row and writes the log row with the traceback) or
`failed` (on_failure 'hold': the row stays, status failed). RetryRequested: retry_job sets it
`queued` again with `execute_after = NOW() + delay`, `attempts + 1`. So, per entrypoint:

- ready = ``status = 'queued' AND execute_after < now()``, plus the picked jobs gone stale
  (``status = 'picked' AND heartbeat < now() - 30 s AND execute_after < now()``): the dequeue
  takes both;
- in_flight = the other ``picked`` jobs;
- delayed = ``status = 'queued' AND execute_after >= now()`` (scheduled, or a retry's back-off);
- dead = ``failed`` rows, plus the ``exception`` rows of pgqueuer_log (jobs failed and deleted);
  ``successful``, ``canceled`` and ``deleted`` jobs are deleted, logged, in nothing;
- blocked = 0: the one case its dequeue skips a due job is an entrypoint at the concurrency_limit
  its worker registers (in the workers' code, not in the database): no worker here registers one.

The queues are the entrypoints with a job row or an `exception` log row.

The large workload is built fast: its backlog (queued jobs, and the 'queued' log row of each) is
written by INSERT ... SELECT generate_series with what PgQueuer's enqueue (build_enqueue_query)
writes: its id sequence, priority, entrypoint, payload, `execute_after = NOW() + delay`,
status 'queued', and the log row (job_id, 'queued', entrypoint, priority). The jobs that ran are
claimed, finished and failed through PgQueuer's own dequeue and log_jobs (one statement each for
tens of thousands of jobs); the retries with build_retry_job_query's statement, for many ids.

A stale job is one whose worker died: claimed by PgQueuer's dequeue, then no heartbeat. Its
heartbeat is moved back 10 minutes (the row as such a worker leaves it 10 minutes on: nothing
else of it changes), so that it is stale now rather than 30 s from now.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

import psycopg
from psycopg import sql

SOURCE = "pgqueuer"  # probes/sources/pgqueuer.py: PgQueuer.name
DEFAULT_SCHEMA = "public"
CUSTOM_SCHEMA = "pgq_custom"
LARGE_SCHEMA = "pgq_large"
HEARTBEAT_TIMEOUT = timedelta(seconds=30)  # QueueManager.run's default heartbeat_timeout (and the source's)
STALE_BY = timedelta(minutes=10)  # how long ago the workers of the stale jobs died

T = TypeVar("T")


def parts(schema: str) -> dict[str, sql.Identifier]:
    return {"jobs": sql.Identifier(schema, "pgqueuer"), "log": sql.Identifier(schema, "pgqueuer_log")}


def settings(schema: str) -> Any:
    """PgQueuer's DBSettings for an install in `schema`: the default one (no db_schema: its SQL
    names its tables unqualified, the search_path's, `public`) or `db_schema`."""
    from pgqueuer.domain.settings import DBSettings

    return DBSettings() if schema == DEFAULT_SCHEMA else DBSettings(db_schema=schema)


# -- the truth ---------------------------------------------------------------------------------------

TRUTH = """
WITH per_queue AS (
    SELECT entrypoint,
           count(*) FILTER (WHERE status = 'queued' AND execute_after < now()) AS due,
           count(*) FILTER (WHERE status = 'queued' AND execute_after >= now()) AS later,
           count(*) FILTER (WHERE status = 'picked') AS picked,
           count(*) FILTER (WHERE status = 'picked' AND heartbeat < now() - %(timeout)s::interval
                                  AND execute_after < now()) AS stale,
           count(*) FILTER (WHERE status = 'failed') AS held
    FROM {jobs} GROUP BY entrypoint
), logged AS (
    SELECT entrypoint, count(*) AS exceptions FROM {log} WHERE status = 'exception' GROUP BY entrypoint
)
SELECT coalesce(p.entrypoint, l.entrypoint) AS name, coalesce(p.due, 0), coalesce(p.later, 0), coalesce(p.picked, 0),
       coalesce(p.stale, 0), coalesce(p.held, 0), coalesce(l.exceptions, 0)
FROM per_queue p FULL JOIN logged l ON l.entrypoint = p.entrypoint
ORDER BY 1
"""


def truth(conn: psycopg.Connection, schema: str = DEFAULT_SCHEMA,
          timeout: timedelta = HEARTBEAT_TIMEOUT) -> dict[str, dict[str, int]]:
    """Every entrypoint of the PgQueuer install in `schema`: ready, in_flight, delayed, dead,
    blocked, as its dequeue sees them now (stale past `timeout`)."""
    out: dict[str, dict[str, int]] = {}
    rows = conn.execute(sql.SQL(TRUTH).format(**parts(schema)), {"timeout": timeout}).fetchall()
    for name, due, later, picked, stale, held, exceptions in rows:
        out[name] = {"ready": due + stale, "in_flight": picked - stale, "delayed": later, "dead": held + exceptions,
                     "blocked": 0}
    return out


def fetch_would_claim(conn: psycopg.Connection, schema: str = DEFAULT_SCHEMA) -> dict[str, int]:
    """What PgQueuer's own dequeue (the statement its QueryQueueBuilder composes for a worker of
    every entrypoint, no limits, the default heartbeat_timeout) would claim now, per entrypoint,
    rolled back: the truth's `ready` must be exactly this."""
    from pgqueuer.adapters.persistence.qb import QueryQueueBuilder
    from pgqueuer.types import QueueManagerId

    names = [r[0] for r in conn.execute(sql.SQL("SELECT DISTINCT entrypoint FROM {jobs}").format(**parts(schema)))]
    if not names:
        return {}
    query = QueryQueueBuilder(settings(schema)).build_dequeue_query(
        batch_size=2**31 - 1, entrypoints=names, concurrency_limits=[0] * len(names),
        queue_manager_id=QueueManagerId(uuid.uuid4()),
        global_concurrency_limit=None, heartbeat_timeout=HEARTBEAT_TIMEOUT)
    out = dict.fromkeys(names, 0)
    with conn.transaction(force_rollback=True), psycopg.RawCursor(conn) as cursor:
        if schema == DEFAULT_SCHEMA:  # its SQL names the tables unqualified: the search_path's
            cursor.execute("SET LOCAL search_path TO public")
        cursor.execute(query.sql, list(query.args))
        column = [c.name for c in cursor.description or ()].index("entrypoint")
        for row in cursor.fetchall():
            out[row[column]] += 1
    return out


# -- PgQueuer, driven --------------------------------------------------------------------------------

class Loop:
    """An event loop on a thread of its own, for PgQueuer's async API from synchronous tests."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="pgqueuer-loop", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 120) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def spawn(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call(self, fn: Callable[[], Any]) -> None:
        self.loop.call_soon_threadsafe(fn)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


async def handle(job: Any, gate: asyncio.Event) -> None:
    """The workers' handler, by the job's payload: `ok` returns, `fail` raises, `retry` asks
    PgQueuer for a retry in 10 minutes, `wait` runs until the gate opens."""
    from pgqueuer.errors import RetryRequested

    what = (job.payload or b"ok").decode()
    if what == "fail":
        raise ValueError(f"{job.entrypoint}: mailbox full")
    if what == "retry":
        raise RetryRequested(delay=timedelta(minutes=10), reason="smtp timeout")
    if what == "wait":
        await gate.wait()


class Worker:
    """A real QueueManager on the loop, working `entrypoints` (name -> its registration's keyword
    arguments: on_failure, concurrency_limit) with `handle`, until stop()."""

    def __init__(self, pgq: PgQueuer, entrypoints: dict[str, dict[str, Any]],
                 heartbeat_timeout: timedelta = HEARTBEAT_TIMEOUT) -> None:
        from pgqueuer.qm import QueueManager

        self.loop = pgq.loop
        self.gate = asyncio.Event()
        self.qm = QueueManager(pgq.queries(self.loop.run(pgq.connect())))
        for name, registration in entrypoints.items():
            async def handler(job: Any, gate: asyncio.Event = self.gate) -> None:
                await handle(job, gate)
            self.qm.entrypoint(name, **registration)(handler)
        self.done = self.loop.spawn(self.qm.run(dequeue_timeout=timedelta(seconds=1), heartbeat_timeout=heartbeat_timeout))

    def stop(self) -> None:
        """Open the gate (running jobs finish), stop the worker, wait for it."""
        self.loop.call(self.gate.set)
        self.loop.call(self.qm.shutdown.set)
        self.done.result(60)


class PgQueuer:
    """One PgQueuer install (a schema): its Queries over its psycopg driver, on a Loop."""

    def __init__(self, dsn: str, schema: str) -> None:
        self.dsn = dsn
        self.schema = schema
        self.parts = parts(schema)
        self.loop = Loop()
        self.conn = psycopg.connect(dsn, autocommit=True, application_name="pgqueuer-oracle")
        self.q = self.queries(self.loop.run(self.connect()))
        self.workers: list[Worker] = []
        logging.getLogger("pgqueuer").setLevel(logging.CRITICAL)  # the failing handlers log their tracebacks

    async def connect(self) -> psycopg.AsyncConnection:
        return await psycopg.AsyncConnection.connect(self.dsn, autocommit=True, application_name="pgqueuer-oracle")

    def queries(self, conn: psycopg.AsyncConnection) -> Any:
        from pgqueuer.adapters.drivers.psycopg import PsycopgDriver
        from pgqueuer.adapters.persistence import qb
        from pgqueuer.queries import Queries

        s = settings(self.schema)
        return Queries(PsycopgDriver(conn), qbe=qb.QueryBuilderEnvironment(s), qbq=qb.QueryQueueBuilder(s),
                       qbs=qb.QuerySchedulerBuilder(s))

    def _run(self, awaitable: Awaitable[T]) -> T:
        async def wrapped() -> T:
            return await awaitable
        return self.loop.run(wrapped())

    def install(self) -> None:
        self._run(self.q.install())

    def enqueue(self, entrypoint: str, count: int = 1, *, payload: str = "ok", priority: int = 0,
                delay: timedelta | None = None) -> list[int]:
        """`count` jobs through Queries.enqueue (one statement, its batch form)."""
        return list(self._run(self.q.enqueue([entrypoint] * count, [payload.encode()] * count, [priority] * count,
                                             [delay] * count)))

    def dequeue(self, entrypoint: str, count: int, *, concurrency_limit: int = 0,
                heartbeat_timeout: timedelta = HEARTBEAT_TIMEOUT) -> list[Any]:
        """A worker's claim of up to `count` jobs (Queries.dequeue, as a worker registering
        `entrypoint` with `concurrency_limit` runs it): PgQueuer's Jobs."""
        from pgqueuer.ports.repository import EntrypointExecutionParameter

        return list(self._run(self.q.dequeue(batch_size=count,
                                             entrypoints={entrypoint: EntrypointExecutionParameter(concurrency_limit)},
                                             queue_manager_id=uuid.uuid4(), global_concurrency_limit=None,
                                             heartbeat_timeout=heartbeat_timeout)))

    def finish(self, jobs: Sequence[Any], status: str, error: str | None = None) -> None:
        """Queries.log_jobs, as a worker's JobStatusLogBuffer flushes it: `successful`, or a failure
        (`exception`, `failed`) with the TracebackRecord QueueManager.log_failure makes."""
        from pgqueuer.models import TracebackRecord

        record = None
        if error is not None:
            try:
                raise ValueError(error)
            except ValueError as exc:
                record = exc
        self._run(self.q.log_jobs([(job, status, TracebackRecord.from_exception(record, job.id) if record else None)
                                   for job in jobs]))

    def aggregate_logs(self) -> None:
        """Queries.aggregate_logs: what its workers run every log_aggregation_interval."""
        self._run(self.q.aggregate_logs())

    def cancel(self, ids: Sequence[int]) -> None:
        self._run(self.q.mark_job_as_cancelled(list(ids)))

    def worker(self, entrypoints: dict[str, dict[str, Any]], heartbeat_timeout: timedelta = HEARTBEAT_TIMEOUT) -> Worker:
        w = Worker(self, entrypoints, heartbeat_timeout)
        self.workers.append(w)
        return w

    def backdate_heartbeats(self, ids: Sequence[int], by: timedelta = STALE_BY) -> None:
        """The claimed jobs' worker died `by` ago: their last heartbeat that long back."""
        self.conn.execute(sql.SQL("UPDATE {jobs} SET heartbeat = heartbeat - %s WHERE id = ANY(%s)").format(**self.parts),
                          (by, list(ids)))

    def wait_for(self, statement: str, expected: Any, what: str, timeout: float = 60) -> None:
        """Poll `statement` (over this install's tables) until it returns `expected`."""
        from ..conftest import wait_until

        query = sql.SQL(statement).format(**self.parts)
        wait_until(lambda: self.conn.execute(query).fetchone() == expected, timeout=timeout, what=what)

    def close(self) -> None:
        try:
            for w in self.workers:
                w.stop()
        finally:
            self.conn.close()
            self.loop.close()


@dataclass
class Workload:
    """A built workload; close() lets its running jobs finish, stops its workers and lets go of
    the connections."""

    schema: str
    size: str
    expected: dict[str, dict[str, int]]
    pgq: PgQueuer
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def build_s(self) -> float:
        return float(self.report["seconds"])

    def close(self) -> None:
        self.pgq.close()


def _shape(ready: int = 0, in_flight: int = 0, scheduled: int = 0, retrying: int = 0, dead: int = 0,
           stale: int = 0) -> dict[str, int]:
    return {"ready": ready + stale, "in_flight": in_flight, "delayed": scheduled + retrying, "dead": dead, "blocked": 0}


# Small, in each schema, every state in at least two entrypoints, made by real workers: `mail` and
# `reports` worked by worker A (handlers that succeed, fail: exception, logged and deleted, or ask
# for a retry in 10 minutes), A stopped, then ready and scheduled jobs enqueued; `held`'s failures
# kept (on_failure 'hold'); `running`'s jobs run on in worker H (fresh heartbeats) while more wait
# scheduled; `orphaned`: jobs claimed by a worker that died 10 minutes ago (stale: ready again),
# and one queued; `archive`: only successful jobs (deleted: not a queue any more); a job of `mail`
# cancelled before any worker ran (deleted, logged `canceled`: in nothing).
SMALL: dict[str, dict[str, int]] = {
    "mail": _shape(ready=3, scheduled=2, retrying=1, dead=1),
    "reports": _shape(ready=2, scheduled=1, retrying=1, dead=2),
    "held": _shape(ready=1, dead=2),
    "running": _shape(in_flight=2, scheduled=1),
    "orphaned": _shape(ready=1, stale=2),
}
WORKED = ("mail", "reports", "held", "archive")


def build_small(dsn: str, schema: str = DEFAULT_SCHEMA) -> Workload:
    """SMALL in `schema` (installed here by PgQueuer's own install)."""
    began = time.monotonic()
    pgq = PgQueuer(dsn, schema)
    try:
        pgq.install()
        pgq.cancel(pgq.enqueue("mail"))  # cancelled before any worker ran
        pgq.enqueue("mail", 4)
        pgq.enqueue("mail", payload="fail")
        pgq.enqueue("mail", payload="retry")
        pgq.enqueue("reports", 1)
        pgq.enqueue("reports", 2, payload="fail")
        pgq.enqueue("reports", payload="retry")
        pgq.enqueue("held", 2, payload="fail")
        pgq.enqueue("archive", 3)
        worker = pgq.worker({"mail": {}, "reports": {}, "held": {"on_failure": "hold"}, "archive": {}})
        # Worker A has run every job it could: none due or picked left, and every outcome logged.
        pgq.wait_for("""SELECT count(*) FILTER (WHERE status = 'picked' OR (status = 'queued' AND execute_after < now()))
                               , count(*) FILTER (WHERE status = 'failed')
                        FROM {jobs} WHERE entrypoint IN ('mail', 'reports', 'held', 'archive')""", (0, 2), "worker A done")
        pgq.wait_for("SELECT count(*) FROM {log} WHERE status IN ('successful', 'exception')", (11,), "worker A's log")
        worker.stop()
        pgq.workers.remove(worker)
        later = timedelta(hours=1)
        pgq.enqueue("mail", 3)
        pgq.enqueue("mail", 2, delay=later)
        pgq.enqueue("reports", priority=5)
        pgq.enqueue("reports")
        pgq.enqueue("reports", delay=later * 2)
        pgq.enqueue("held")
        pgq.enqueue("running", 2, payload="wait")
        pgq.enqueue("running", delay=later)
        pgq.worker({"running": {}})  # worker H: runs both until the workload closes
        pgq.wait_for("SELECT count(*) FROM {jobs} WHERE entrypoint = 'running' AND status = 'picked'", (2,), "worker H running")
        pgq.enqueue("orphaned", 3)
        pgq.backdate_heartbeats([job.id for job in pgq.dequeue("orphaned", 2)])
        rows = pgq.conn.execute(sql.SQL("SELECT count(*) FROM {jobs}").format(**pgq.parts)).fetchone()
    except BaseException:
        pgq.close()
        raise
    return Workload(schema=schema, size="small", expected=SMALL, pgq=pgq,
                    report={"seconds": time.monotonic() - began, "jobs": rows[0] if rows else None})


# -- large: 250k+ jobs ---------------------------------------------------------------------------------

# What PgQueuer's enqueue writes for `count` jobs (build_enqueue_query: nextval of its id
# sequence, `execute_after = NOW() + delay`, status 'queued', and a 'queued' log row each), set
# based: the job's priority and delay (seconds) as expressions of g, its number (`%%`: modulo, the
# statement having parameters).
ENQUEUE_MANY = """
WITH inserted AS (
    INSERT INTO {jobs} (priority, entrypoint, payload, execute_after, dedupe_key, headers, status)
    SELECT {priority}, %(entrypoint)s::text, convert_to(%(payload)s::text, 'UTF8'), NOW() + make_interval(secs => {delay}),
           NULL, NULL, 'queued'
    FROM generate_series(1, %(count)s::integer) AS g
    RETURNING id, entrypoint, priority
)
INSERT INTO {log} (job_id, status, entrypoint, priority)
SELECT id, 'queued', entrypoint, priority FROM inserted
"""
# build_retry_job_query's statement (`WHERE id = $1::bigint`), for many ids.
RETRY_MANY = """
WITH retry AS (
    UPDATE {jobs}
    SET status = 'queued', execute_after = NOW() + %(delay)s::interval, attempts = attempts + 1, updated = NOW(),
        queue_manager_id = NULL
    WHERE id = ANY(%(ids)s::bigint[])
    RETURNING id, entrypoint, priority
)
INSERT INTO {log} (job_id, status, entrypoint, priority, traceback)
SELECT id, 'queued', entrypoint, priority, %(traceback)s::jsonb FROM retry
"""

# Large (258,015 jobs, ~490,000 log rows), correlated: bulk holds the backlog (200,000 due,
# priorities 0/5/10 skewed 190,000/8,000/2,000), digest only scheduled (bimodal: 12,000 at +15 min,
# 15,000 at +6 h), notify 20,000 due and 11,000 retrying in 30 minutes, crash only failed jobs
# (12,000: deleted, logged `exception`: dead past the exact-count cap), done only successful ones
# (60,000: deleted, in the log alone, not a queue); small figures in the same tables: mail (7
# exceptions, 2 retrying, 5 ready), held (3 failed, kept), running (2 run on in a live worker),
# orphaned (3 stale).
LARGE: dict[str, dict[str, int]] = {
    "bulk": _shape(ready=200_000),
    "digest": _shape(scheduled=27_000),
    "notify": _shape(ready=20_000, retrying=11_000),
    "crash": _shape(dead=12_000),
    "mail": _shape(ready=5, retrying=2, dead=7),
    "held": _shape(dead=3),
    "running": _shape(in_flight=2),
    "orphaned": _shape(stale=3),
}
LARGE_ROWS = 258_015


def build_large(dsn: str, schema: str = LARGE_SCHEMA) -> Workload:
    """LARGE in `schema` (installed here), then ANALYZE, as autovacuum would have by the time an
    operator looks."""
    began = time.monotonic()
    phases: dict[str, float] = {}

    def phase(name: str, since: float) -> float:
        now = time.monotonic()
        phases[name] = now - since
        return now

    pgq = PgQueuer(dsn, schema)

    def enqueue_many(entrypoint: str, count: int, priority: str = "0", delay: str = "0") -> None:
        statement = sql.SQL(ENQUEUE_MANY).format(**pgq.parts, priority=sql.SQL(priority), delay=sql.SQL(delay))
        pgq.conn.execute(statement, {"entrypoint": entrypoint, "payload": entrypoint, "count": count})

    try:
        pgq.install()
        t = time.monotonic()
        enqueue_many("mail", 7)
        pgq.finish(pgq.dequeue("mail", 7), "exception", "mailbox full")
        enqueue_many("mail", 2)
        pgq.conn.execute(sql.SQL(RETRY_MANY).format(**pgq.parts), {
            "ids": [job.id for job in pgq.dequeue("mail", 2)], "delay": timedelta(minutes=10), "traceback": None})
        enqueue_many("mail", 5)
        enqueue_many("held", 3)
        pgq.finish(pgq.dequeue("held", 3), "failed", "bad address")
        enqueue_many("orphaned", 3)
        pgq.backdate_heartbeats([job.id for job in pgq.dequeue("orphaned", 3)])
        pgq.enqueue("running", 2, payload="wait")
        pgq.worker({"running": {}})
        pgq.wait_for("SELECT count(*) FROM {jobs} WHERE entrypoint = 'running' AND status = 'picked'", (2,), "worker running")
        t = phase("small figures", t)
        enqueue_many("done", 60_000)
        pgq.finish(pgq.dequeue("done", 60_000), "successful")
        t = phase("done: 60,000 enqueued, dequeued, successful", t)
        enqueue_many("crash", 12_000)
        pgq.finish(pgq.dequeue("crash", 12_000), "exception", "segmentation fault in the renderer")
        t = phase("crash: 12,000 failed", t)
        enqueue_many("notify", 11_000)
        pgq.conn.execute(sql.SQL(RETRY_MANY).format(**pgq.parts), {
            "ids": [job.id for job in pgq.dequeue("notify", 11_000)], "delay": timedelta(minutes=30), "traceback": None})
        enqueue_many("notify", 20_000, delay="-(g %% 600)")
        t = phase("notify: 11,000 retrying, 20,000 due", t)
        enqueue_many("digest", 12_000, delay="900 + g %% 60")
        enqueue_many("digest", 15_000, delay="21600 + g %% 60")
        t = phase("digest: 27,000 scheduled", t)
        enqueue_many("bulk", 200_000, priority="CASE WHEN g %% 100 = 0 THEN 10 WHEN g %% 25 = 1 THEN 5 ELSE 0 END",
                     delay="-(120 + g %% 600)")
        t = phase("bulk: 200,000 due", t)
        for table in ("jobs", "log"):
            pgq.conn.execute(sql.SQL("ANALYZE {}").format(pgq.parts[table]))
        phase("analyze", t)
    except BaseException:
        pgq.close()
        raise
    return Workload(schema=schema, size="large", expected=LARGE, pgq=pgq,
                    report={"seconds": time.monotonic() - began, "jobs": LARGE_ROWS, "phases_s": phases})


# -- a worker to kill ------------------------------------------------------------------------------

async def _hold_forever(dsn: str, schema: str, entrypoint: str, heartbeat_timeout_s: float) -> None:
    """A QueueManager working `entrypoint` with a handler that never returns (its heartbeat
    beats every timeout / 2 while it lives)."""
    from pgqueuer.qm import QueueManager

    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True, application_name="pgqueuer-doomed-worker")
    pgq_settings = settings(schema)
    from pgqueuer.adapters.drivers.psycopg import PsycopgDriver
    from pgqueuer.adapters.persistence import qb
    from pgqueuer.queries import Queries

    qm = QueueManager(Queries(PsycopgDriver(conn), qbe=qb.QueryBuilderEnvironment(pgq_settings),
                              qbq=qb.QueryQueueBuilder(pgq_settings), qbs=qb.QuerySchedulerBuilder(pgq_settings)))

    @qm.entrypoint(entrypoint)
    async def forever(job: Any) -> None:
        await asyncio.Event().wait()

    await qm.run(dequeue_timeout=timedelta(seconds=1), heartbeat_timeout=timedelta(seconds=heartbeat_timeout_s))


if __name__ == "__main__":  # python -m tests.oracle.pgqueuer worker DSN SCHEMA ENTRYPOINT HEARTBEAT_TIMEOUT_S
    _, command, dsn_arg, schema_arg, entrypoint_arg, timeout_arg = sys.argv
    assert command == "worker"
    logging.disable(logging.CRITICAL)
    asyncio.run(_hold_forever(dsn_arg, schema_arg, entrypoint_arg, float(timeout_arg)))
