"""Procrastinate for the truth oracle: workloads made through Procrastinate's own API (its schema
manager, `App`/tasks `defer` and `batch_defer`, its `JobManager` and real workers) and the ground
truth, written from the fetch of the installed version (procrastinate 3.x,
procrastinate/sql/schema.sql, `procrastinate_fetch_job_v2`)::

    WITH candidate AS (
        SELECT jobs.*
            FROM procrastinate_jobs AS jobs
            WHERE
                -- reject the job if its lock has earlier or higher priority jobs
                NOT EXISTS (
                    SELECT 1
                        FROM procrastinate_jobs AS other_jobs
                        WHERE
                            jobs.lock IS NOT NULL
                            AND other_jobs.lock = jobs.lock
                            AND (
                                -- job with same lock is already running
                                other_jobs.status = 'doing'
                                OR
                                -- job with same lock is waiting and has higher priority (or same priority but was queued first)
                                (
                                    other_jobs.status = 'todo'
                                    AND (
                                        other_jobs.priority > jobs.priority
                                        OR (
                                        other_jobs.priority = jobs.priority
                                        AND other_jobs.id < jobs.id
                                        )
                                    )
                                )
                            )
                )
                AND jobs.status = 'todo'
                AND (target_queue_names IS NULL OR jobs.queue_name = ANY( target_queue_names ))
                AND (jobs.scheduled_at IS NULL OR jobs.scheduled_at <= now())
            ORDER BY jobs.priority DESC, jobs.id ASC LIMIT 1
            FOR UPDATE OF jobs SKIP LOCKED
    )
    UPDATE procrastinate_jobs SET status = 'doing', worker_id = p_worker_id ...

So, per queue (`queue_name`):

- due = ``status = 'todo' AND (scheduled_at IS NULL OR scheduled_at <= now())``;
- blocked = due, with a `lock` that another job holds (``other_jobs.status = 'doing'``: only
  `doing`, not the legacy `aborting`) or waits for ahead of it (a `todo` job of that lock with a
  higher priority, or the same priority and a lower id, due or not: the fetch does not ask);
  among the todo jobs of one lock that is "every one but the first in (priority DESC, id ASC)
  order", which is how the truth counts it (one pass, not a join of each job with its lock's);
- ready = due and not blocked (what the fetch would claim now; `FOR UPDATE SKIP LOCKED` only
  skips rows locked at that instant, nothing to count);
- delayed = todo scheduled later (a deferred schedule, or a retry's back-off:
  `procrastinate_retry_job_v2` sets ``status = 'todo', scheduled_at = retry_at``), plus blocked;
- in_flight = ``doing`` and the legacy ``aborting`` ("aborting -- legacy, not used anymore since
  v3.0.0", still in the enum);
- dead = ``failed``; ``succeeded``, ``cancelled`` and ``aborted`` jobs are kept, finished, in
  nothing.

Procrastinate takes its schema from the session: its SQL names `procrastinate_jobs` unqualified,
and `PsycopgConnector(**kwargs)` hands its kwargs to psycopg_pool, so
``kwargs={"options": "-c search_path=<schema>"}`` puts an install (schema manager, defer, fetch,
workers) in `<schema>`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from ..conftest import wait_until

SOURCE = "procrastinate"  # probes/sources/procrastinate.py: Procrastinate.name
DEFAULT_SCHEMA = "public"
CUSTOM_SCHEMA = "jobs"
LARGE_SCHEMA = "jobs_big"
FIELDS = ("ready", "in_flight", "delayed", "dead", "blocked")

TRUTH = """
WITH lock_line AS (
    -- Per lock: whether a doing job holds it, and the todo job first in the fetch's order.
    SELECT lock,
           bool_or(status = 'doing') AS held,
           (array_agg(id ORDER BY priority DESC, id ASC) FILTER (WHERE status = 'todo'))[1] AS first_todo
    FROM {jobs}
    WHERE lock IS NOT NULL AND status IN ('todo', 'doing')
    GROUP BY lock
), classified AS (
    SELECT j.queue_name, j.status,
           j.status = 'todo' AND (j.scheduled_at IS NULL OR j.scheduled_at <= now()) AS due,
           j.status = 'todo' AND j.lock IS NOT NULL AND (l.held OR j.id <> l.first_todo) AS behind_lock
    FROM {jobs} j
    LEFT JOIN lock_line l ON l.lock = j.lock
)
SELECT queue_name,
       count(*) FILTER (WHERE due AND NOT behind_lock) AS ready,
       count(*) FILTER (WHERE status IN ('doing', 'aborting')) AS in_flight,
       count(*) FILTER (WHERE status = 'todo' AND (NOT due OR behind_lock)) AS delayed,
       count(*) FILTER (WHERE status = 'failed') AS dead,
       count(*) FILTER (WHERE due AND behind_lock) AS blocked
FROM classified
GROUP BY queue_name
"""


def parts(schema: str) -> dict[str, sql.Identifier]:
    """The format fields of probes/sql/postgresql/sources/procrastinate.sql for an install."""
    return {"jobs": sql.Identifier(schema, "procrastinate_jobs"), "events": sql.Identifier(schema, "procrastinate_events")}


def truth(conn: psycopg.Connection, schema: str = DEFAULT_SCHEMA) -> dict[str, dict[str, int]]:
    """Every queue any job of the install in `schema` names: ready, in_flight, delayed (blocked
    included), dead, blocked, as `procrastinate_fetch_job_v2` sees them now (see the module)."""
    rows = conn.execute(sql.SQL(TRUTH).format(**parts(schema))).fetchall()
    return {row[0]: dict(zip(FIELDS, (int(v) for v in row[1:]), strict=True)) for row in rows}


def fetch_would_claim(conn: psycopg.Connection, schema: str, queue: str) -> int:
    """How many jobs of `queue` Procrastinate's own fetch claims, called until it finds nothing,
    in one transaction rolled back: a claimed job is `doing`, so it holds its lock for the next
    call, as a worker holding it would. The truth's `ready` must be exactly this."""
    with conn.transaction(force_rollback=True):
        conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(sql.Identifier(schema)))
        registered = conn.execute("SELECT worker_id FROM procrastinate_register_worker_v1()").fetchone()
        worker = registered[0] if registered else None
        claimed = 0
        while True:
            row = conn.execute("SELECT id FROM procrastinate_fetch_job_v2(%s::varchar[], %s)", ([queue], worker)).fetchone()
            if row is None or row[0] is None:
                return claimed
            claimed += 1


# -- Procrastinate, driven -------------------------------------------------------------------------


def _app(dsn: str, schema: str, gate: threading.Event | None = None) -> Any:
    """A Procrastinate App on the install in `schema`, with the workload's tasks: `send_mail`
    (succeeds), `bounce` (fails, no retry: failed for good), `flaky` (fails, retried in 10
    minutes: back-off), `hold` (runs until `gate` opens: the running job)."""
    import procrastinate

    # psycopg_pool's `kwargs`: what each of its connections is opened with.
    options = {} if schema == DEFAULT_SCHEMA else {"options": f"-c search_path={schema}"}
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn, kwargs=options))

    @app.task(name="send_mail")
    def send_mail(**_: Any) -> None:
        pass

    @app.task(name="bounce")
    def bounce(**_: Any) -> None:
        raise ValueError("mailbox full")

    @app.task(name="flaky", retry=procrastinate.RetryStrategy(max_attempts=5, wait=600))
    def flaky(**_: Any) -> None:
        raise ConnectionError("smtp timeout")

    @app.task(name="hold")
    def hold(**_: Any) -> None:
        if gate is not None:
            gate.wait(600)

    return app


class Holder:
    """A real Procrastinate worker, in a thread, on `queues` with `concurrency` slots: it takes
    the `hold` jobs deferred before it starts and runs them until close() (then it drains what its
    queues have ready, and stops: `wait=False`)."""

    def __init__(self, dsn: str, schema: str, queues: list[str], concurrency: int) -> None:
        self.gate = threading.Event()
        self.app = _app(dsn, schema, self.gate)
        self.thread = threading.Thread(
            target=self.app.run_worker, name=f"procrastinate-holder-{schema}", daemon=True,
            kwargs={"queues": queues, "wait": False, "concurrency": concurrency, "install_signal_handlers": False})

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self.gate.set()
        self.thread.join(120)


@dataclass
class Workload:
    """One built workload: the install's schema, the counts it was built to have (per queue, the
    FIELDS), and the workers holding its running jobs until close()."""

    schema: str
    expected: dict[str, dict[str, int]]
    rows: int
    build_s: float
    report: dict[str, Any] = field(default_factory=dict)
    holders: list[Holder] = field(default_factory=list)

    def close(self) -> None:
        for holder in self.holders:
            holder.close()
        self.holders = []


@contextmanager
def _quiet() -> Iterator[None]:
    """The failing tasks log their tracebacks: not in the test's output."""
    logger = logging.getLogger("procrastinate")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def _install(dsn: str, schema: str) -> None:
    """Procrastinate's schema in `schema`, applied by its own schema manager."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
    app = _app(dsn, schema)
    with app.open():
        app.schema_manager.apply_schema()


def _count_jobs(dsn: str, schema: str, condition: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE " + condition).format(
            sql.Identifier(schema, "procrastinate_jobs"))).fetchone()
    return int(row[0]) if row else 0


def _start_holder(dsn: str, schema: str, holds: Mapping[str, str]) -> Holder:
    """A `hold` job per queue (with that queue's lock) and a real worker running them all."""
    app = _app(dsn, schema)
    with app.open():
        for queue, lock in holds.items():
            app.configure_task("hold", queue=queue, lock=lock).defer()
    holder = Holder(dsn, schema, sorted(holds), concurrency=len(holds))
    holder.start()
    wait_until(lambda: _count_jobs(dsn, schema, "status = 'doing'") == len(holds), timeout=60,
               what="the worker running the held jobs")
    return holder


def _expected(**queues: Mapping[str, int]) -> dict[str, dict[str, int]]:
    return {name: {f: int(counts.get(f, 0)) for f in FIELDS} for name, counts in queues.items()}


# -- the small workload ----------------------------------------------------------------------------


def build_small(dsn: str, schema: str = DEFAULT_SCHEMA, variant: int = 0) -> Workload:
    """Every state in two queues, `mail` and `reports` (`variant` adds to some counts, so that two
    installs in one database cannot be mistaken for each other):

    - finished: `send_mail` jobs a real worker ran (succeeded, kept) and one cancelled through
      the JobManager (`cancel_job_by_id`);
    - failed for good: `bounce`, run by the worker;
    - retry back-off: `flaky`, run by the worker, failed, rescheduled by its RetryStrategy
      (wait=600): todo, 10 minutes ahead;
    - running: a `hold` job per queue (lock `<queue>-lock`) a real worker holds until close();
    - blocked: todo jobs behind a lock, of three kinds: behind the running job's lock
      (`<queue>-lock`); behind a todo job of the same lock scheduled for later (`nightly`, in
      reports); behind a later job of the same lock with a higher priority (`digest`, in mail:
      the higher-priority one is ready, the other waits);
    - scheduled: `schedule_in` an hour; ready: plain `send_mail` jobs.
    """
    started = time.monotonic()
    v = variant
    _install(dsn, schema)
    app = _app(dsn, schema)
    with _quiet():
        # 1. A real worker runs what finishes, fails and retries (wait=False: until nothing is due).
        with app.open():
            for queue, ok in (("mail", 2 + v), ("reports", 2)):
                for n in range(ok):
                    app.configure_task("send_mail", queue=queue).defer(n=n)
                app.configure_task("bounce", queue=queue).defer()
                app.configure_task("flaky", queue=queue).defer()
            cancelled = [app.configure_task("send_mail", queue=queue).defer(n=-1) for queue in ("mail", "reports")]
            for job_id in cancelled:
                assert app.job_manager.cancel_job_by_id(job_id)
        app.run_worker(queues=["mail", "reports"], wait=False, concurrency=1, install_signal_handlers=False)
        # 2. The running jobs: a worker holds one per queue, each with its queue's lock.
        holder = _start_holder(dsn, schema, {"mail": "mail-lock", "reports": "reports-lock"})
        # 3. What waits, deferred while the worker is busy (its slots are full: it fetches nothing).
        with app.open():
            for queue, ready, scheduled, behind in (("mail", 3 + v, 2, 2), ("reports", 2, 1, 1 + v)):
                for n in range(ready):
                    app.configure_task("send_mail", queue=queue).defer(n=n)
                for n in range(scheduled):
                    app.configure_task("send_mail", queue=queue, schedule_in={"hours": 1}).defer(n=n)
                for n in range(behind):
                    app.configure_task("send_mail", queue=queue, lock=f"{queue}-lock").defer(n=n)
            # mail: `digest` at priority 0, then one at priority 5: the later one goes first.
            app.configure_task("send_mail", queue="mail", lock="digest").defer(n=0)
            app.configure_task("send_mail", queue="mail", lock="digest", priority=5).defer(n=1)
            # reports: `nightly` scheduled in an hour, then a due one: the due one waits for it.
            app.configure_task("send_mail", queue="reports", lock="nightly", schedule_in={"hours": 1}).defer(n=0)
            app.configure_task("send_mail", queue="reports", lock="nightly").defer(n=1)
    expected = _expected(
        # ready: 3+v plain + the priority-5 digest; delayed: 2 scheduled + 1 back-off + blocked.
        mail={"ready": 4 + v, "in_flight": 1, "delayed": 2 + 1 + 3, "dead": 1, "blocked": 2 + 1},
        # ready: 2 plain; delayed: 1 scheduled + nightly's scheduled head + 1 back-off + blocked.
        reports={"ready": 2, "in_flight": 1, "delayed": 1 + 1 + 1 + (2 + v), "dead": 1, "blocked": 1 + v + 1},
    )
    rows = _count_jobs(dsn, schema, "true")
    return Workload(schema=schema, expected=expected, rows=rows, build_s=time.monotonic() - started, holders=[holder])


# -- the large workload ----------------------------------------------------------------------------

# The library's own finish, as JobManager.finish_job_by_id_async sends it once per job
# (procrastinate.sql.queries["finish_job"]: SELECT procrastinate_finish_job_v1(%(job_id)s,
# %(status)s, %(delete_job)s)), called here once per job of an array in one statement: tens of
# thousands of round trips through the JobManager cost ~0.2 ms each, and a real worker runs ~110
# jobs/s on this machine once a queue holds 60k jobs (its fetch scans the queue's todo jobs).
# procrastinate_finish_job_v1 takes todo jobs as well as doing ones (``WHERE id = job_id AND
# status IN ('todo', 'doing')``): such a job ends with attempts 0 and, for its events trigger, a
# 'cancelled' event (todo -> succeeded/failed); its status, all the figures look at, is the
# worker's.
FINISH_MANY = "SELECT procrastinate_finish_job_v1(id, %(status)s::procrastinate_job_status, false) FROM unnest(%(ids)s::bigint[]) AS id"

LARGE = {
    # queue: what it holds (the build below makes exactly this)
    "archive": "60,000 succeeded: only finished jobs",
    "backlog": "150,000 ready: 147,000 at priority 0, 2,500 at 5, 500 at 10",
    "mail": "20,000 ready; 12,000 scheduled in 10 min and 15,000 in 6 h; 2 backing off; 7 failed; 5 succeeded",
    "reports": "1 running; 3 blocked by its lock; 4 ready; 12,000 failed; 3,000 succeeded",
    "sync": "12,000 todo on one lock (`tenant-42`), none running: 1 ready, 11,999 blocked",
}
LARGE_EXPECTED = _expected(
    archive={},
    backlog={"ready": 150_000},
    mail={"ready": 20_000, "delayed": 12_000 + 15_000 + 2, "dead": 7},
    reports={"ready": 4, "in_flight": 1, "delayed": 3, "dead": 12_000, "blocked": 3},
    sync={"ready": 1, "delayed": 11_999, "blocked": 11_999},
)
LARGE_ROWS = 60_000 + 150_000 + (20_000 + 27_000 + 2 + 7 + 5) + (1 + 3 + 4 + 12_000 + 3_000) + 12_000
BATCH = 10_000


def build_large(dsn: str, schema: str = LARGE_SCHEMA) -> Workload:
    """LARGE_ROWS jobs in `schema`, with the shapes of LARGE (correlated: one queue holds every
    finished job, one the whole backlog; skewed priorities; bimodal schedules; small exact figures
    beside 10k-50k ones in one table). The jobs that end finished or failed are finished batch by
    batch on a second connection while the next batches are deferred. Ends with ANALYZE, as
    autovacuum would after such a load, so that the planner's statistics (and not their absence)
    are what estimates face."""
    phases: dict[str, float] = {}
    clock = time.monotonic()
    started = clock

    def phase(name: str) -> None:
        nonlocal clock
        now = time.monotonic()
        phases[name] = now - clock
        clock = now

    _install(dsn, schema)
    app = _app(dsn, schema)
    with _quiet():
        # A real worker: 5 succeed, 7 fail for good, 2 fail and back off (before the bulk, so that
        # its fetch is cheap).
        with app.open():
            app.configure_task("send_mail", queue="mail").batch_defer(*({"n": n} for n in range(5)))
            app.configure_task("bounce", queue="mail").batch_defer(*({"n": n} for n in range(7)))
            app.configure_task("flaky", queue="mail").batch_defer(*({"n": n} for n in range(2)))
        app.run_worker(queues=["mail"], wait=False, concurrency=1, install_signal_handlers=False)
        phase("worker")
        holder = _start_holder(dsn, schema, {"reports": "reports-lock"})
        with app.open():
            app.configure_task("send_mail", queue="reports", lock="reports-lock").batch_defer(*({"n": n} for n in range(3)))
            app.configure_task("send_mail", queue="reports").batch_defer(*({"n": n} for n in range(4)))
        phase("running")

    finisher = psycopg.connect(dsn, autocommit=True, options=f"-c search_path={schema}")
    pending: list[Future[Any]] = []

    def defer(count: int, finish: str | None = None, **options: Any) -> None:
        for start in range(0, count, BATCH):
            kwargs = ({"n": n} for n in range(start, min(count, start + BATCH)))
            ids = app.configure_task("send_mail", **options).batch_defer(*kwargs)
            if finish is not None:
                pending.append(pool.submit(finisher.execute, FINISH_MANY, {"status": finish, "ids": ids}))

    try:
        with app.open(), finisher, ThreadPoolExecutor(max_workers=1) as pool:
            defer(60_000, "succeeded", queue="archive")
            defer(3_000, "succeeded", queue="reports")
            defer(12_000, "failed", queue="reports")
            defer(147_000, queue="backlog")
            defer(2_500, queue="backlog", priority=5)
            defer(500, queue="backlog", priority=10)
            defer(20_000, queue="mail")
            defer(12_000, queue="mail", schedule_in={"minutes": 10})
            defer(15_000, queue="mail", schedule_in={"hours": 6})
            defer(12_000, queue="sync", lock="tenant-42")
            phase("defer")
            for future in pending:
                future.result()
            phase("finish (the rest)")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(schema, "procrastinate_jobs")))
        phase("analyze")
    except BaseException:
        holder.close()
        raise
    rows = _count_jobs(dsn, schema, "true")
    return Workload(schema=schema, expected=LARGE_EXPECTED, rows=rows, build_s=time.monotonic() - started,
                    report={"phases_s": phases, "shapes": LARGE}, holders=[holder])
