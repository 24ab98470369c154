"""The job console on Procrastinate (jobs/procrastinate.py), proved by Procrastinate itself: its
schema applied by its own schema manager, jobs deferred through its API, run, failed, cancelled
and aborted by its real worker; every list agrees with its own fetch rule and with the snapshot;
every action is then seen by its worker (a retried job runs, a cancelled one never does, a job
run now runs now, an aborted one sees `context.should_abort()`) or by its JobManager (a deleted
job is gone from `list_jobs`)."""

from __future__ import annotations

import asyncio
import json
import logging
import multiprocessing
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from jobs.bulk import act_on_ids, run_bulk, write_session
from jobs.model import ActionRefused, JobFilter, Outcome
from jobs.procrastinate import LIBRARY, ProcrastinateJobs
from probes.sampler import run_cycle
from probes.session import open_probe_connection, probe_transaction

from .conftest import wait_until

pytestmark = pytest.mark.matrix

procrastinate = pytest.importorskip("procrastinate", reason="procrastinate is a test dependency (pip install -e '.[test]')")
from procrastinate.exceptions import JobAborted  # noqa: E402
from procrastinate.worker import Worker  # noqa: E402

LIB = ProcrastinateJobs("public", "3.x")

# Each job's state by procrastinate's own fetch (procrastinate_fetch_job_v2), written here from
# its source, not from the module under test: a due todo job is blocked when its lock is held by a
# doing job, or a todo job of that lock comes first in the fetch's order (priority DESC, id ASC).
TRUTH = """
WITH lock_line AS (
    SELECT lock, bool_or(status = 'doing') AS held,
           (array_agg(id ORDER BY priority DESC, id ASC) FILTER (WHERE status = 'todo'))[1] AS first_todo
    FROM procrastinate_jobs WHERE lock IS NOT NULL AND status IN ('todo', 'doing') GROUP BY lock
)
SELECT j.id,
       CASE WHEN j.status = 'todo' AND (j.scheduled_at IS NULL OR j.scheduled_at <= now())
                 AND j.lock IS NOT NULL AND (l.held OR j.id <> l.first_todo) THEN 'blocked'
            WHEN j.status = 'todo' AND (j.scheduled_at IS NULL OR j.scheduled_at <= now()) THEN 'ready'
            WHEN j.status = 'todo' THEN 'delayed'
            WHEN j.status IN ('doing', 'aborting') THEN 'in_flight'
            WHEN j.status = 'failed' THEN 'dead'
            ELSE 'done' END AS state
FROM procrastinate_jobs j LEFT JOIN lock_line l ON l.lock = j.lock
WHERE j.queue_name = %s ORDER BY j.id
"""


# -- Procrastinate, driven -------------------------------------------------------------------------


def make_app(dsn: str, gate: threading.Event | None = None, aborted: list[int] | None = None) -> Any:
    """An App with the tests' tasks: `record` (writes its run into `runs`; with fail_first, fails
    its first attempt), `bounce` (always fails), `hold` (a sync task that runs until `gate` opens,
    or until procrastinate asks it to abort: then it says so in `aborted` and ends aborted)."""
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))

    @app.task(name="record", pass_context=True)
    async def record(context: Any, fail_first: bool = False, **_: Any) -> None:
        await context.app.connector.execute_query_async("INSERT INTO runs (job_id, attempts) VALUES (%(id)s, %(attempts)s)",
                                                        id=context.job.id, attempts=context.job.attempts)
        if fail_first and context.job.attempts == 0:
            raise ValueError("the first attempt fails")

    @app.task(name="bounce")
    def bounce(**_: Any) -> None:
        raise ValueError("mailbox full")

    @app.task(name="hold", pass_context=True)
    def hold(context: Any, **_: Any) -> None:
        while not context.should_abort():
            if gate is not None and gate.wait(0.02):
                return
        if aborted is not None:
            aborted.append(context.job.id)
        raise JobAborted

    return app


class WorkerThread:
    """A real Procrastinate worker (procrastinate.worker.Worker, `wait=True`, listening) in a thread
    with its own event loop, until stop(). Its polls are 60 s apart unless said otherwise: what
    it does within seconds, a notification woke it for."""

    def __init__(self, dsn: str, queues: list[str], *, concurrency: int = 1, poll_s: float = 60.0,
                 gate: threading.Event | None = None, aborted: list[int] | None = None) -> None:
        self.app = make_app(dsn, gate, aborted)
        self.queues = queues
        self.options = {"concurrency": concurrency, "fetch_job_polling_interval": poll_s, "abort_job_polling_interval": poll_s}
        self.worker: Any = None
        self.failed: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="procrastinate-worker", daemon=True)

    def _run(self) -> None:
        async def main() -> None:
            async with self.app.open_async():
                self.worker = Worker(self.app, queues=self.queues, wait=True, install_signal_handlers=False,
                                     listen_notify=True, **self.options)
                await self.worker.run()

        try:
            asyncio.run(main())
        except BaseException as exc:  # said by stop()
            self.failed = exc

    def start(self, dsn: str) -> WorkerThread:
        self.thread.start()
        # Its listener LISTENs on a connection of its own, which it opens while the first fetch
        # runs on a pooled one (a new connection takes longer than that fetch): once it listens,
        # a notification wakes its wait (a notification during that fetch would be cleared by it:
        # procrastinate clears its wake-up event after each fetch).
        wait_until(lambda: listening(dsn, self.queues[0]), timeout=30, what="the worker listening on its queue's channel")
        return self

    def stop(self) -> None:
        wait_until(lambda: self.worker is not None or not self.thread.is_alive(), timeout=10, what="the worker")
        if self.worker is not None:
            self.worker.stop()
        self.thread.join(60)
        assert not self.thread.is_alive(), "the worker did not stop"
        assert self.failed is None, f"the worker failed: {self.failed!r}"


def listening(dsn: str, queue: str) -> bool:
    """Whether a session of the database has LISTENed on the queue's procrastinate channel (its
    listener's last statement, while it waits for notifications)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                           " AND query LIKE %s", (f'LISTEN "procrastinate_queue_v1#{queue}"%',)).fetchone()
    return bool(row and row[0])


def drain(dsn: str, queue: str) -> None:
    """A worker (`wait=False`) that runs what the queue has due, and returns."""
    make_app(dsn).run_worker(queues=[queue], wait=False, concurrency=4, install_signal_handlers=False)


@pytest.fixture
def app(db) -> Iterator[Any]:
    """Procrastinate installed by its schema manager, and the `runs` table its `record` task writes."""
    logging.getLogger("procrastinate").setLevel(logging.CRITICAL)  # the failing tasks log tracebacks
    app = make_app(db.dsn)
    with app.open():
        app.schema_manager.apply_schema()
    with db.connect() as conn:
        conn.execute("CREATE TABLE runs (job_id bigint NOT NULL, attempts int, at timestamptz DEFAULT clock_timestamp())")
    with app.open():
        yield app


def truth(db, queue: str) -> dict[str, list[str]]:
    with db.connect() as conn:
        rows = conn.execute(TRUTH, (queue,)).fetchall()
    out: dict[str, list[str]] = {s: [] for s in ("ready", "delayed", "blocked", "in_flight", "dead", "done")}
    for job_id, state in rows:
        out[state].append(str(job_id))
    return out


def status_of(app: Any, job_id: int | str) -> str | None:
    """The job's status by the library's own API (None: it has no such job)."""
    found = app.job_manager.list_jobs(id=int(job_id))
    return found[0].status if found else None


def runs(db) -> list[tuple[int, int]]:
    with db.connect() as conn:
        return [(r[0], r[1]) for r in conn.execute("SELECT job_id, attempts FROM runs ORDER BY at").fetchall()]


def every_page(target, queue: str, flt: JobFilter, *, limit: int, newest_first: bool = False) -> tuple[list[str], list[str]]:
    """All the pages of a list, each read as the console reads it: (the ids in order, the notes)."""
    conn = open_probe_connection(target)
    ids: list[str] = []
    notes: list[str] = []
    after = None
    try:
        for _ in range(1000):
            with probe_transaction(conn):
                page = LIB.page(conn, queue, flt, after=after, limit=limit, newest_first=newest_first)
            assert len(page.jobs) <= limit
            ids += [job.id for job in page.jobs]
            notes += [page.note] if page.note else []
            after = page.after
            if after is None:
                return ids, notes
    finally:
        conn.close()
    raise AssertionError("the pages did not end")


def read(target, fn):
    conn = open_probe_connection(target)
    try:
        with probe_transaction(conn):
            return fn(conn)
    finally:
        conn.close()


@pytest.fixture
def workload(db, app) -> Iterator[dict[str, Any]]:
    """Queue `mail` in every state, made by procrastinate: finished and failed by its worker, one
    cancelled by its JobManager, one running (`hold`, lock `H`, held by a worker until the end),
    ready, scheduled, and blocked (behind the running job's lock; behind a later-scheduled job of
    lock `N`); and a `reports` queue beside it."""
    mail = app.configure_task
    mail("record", queue="mail").batch_defer({"n": 1}, {"n": 2}, {"n": 3})
    bounced = [mail("bounce", queue="mail").defer(to="a@example.com"), mail("bounce", queue="mail").defer(to="b@example.com")]
    cancelled = mail("record", queue="mail", schedule_in={"hours": 1}).defer(n=-1)
    assert app.job_manager.cancel_job_by_id(cancelled)
    drain(db.dsn, "mail")
    gate = threading.Event()
    held = mail("hold", queue="mail", lock="H").defer()
    worker = WorkerThread(db.dsn, ["mail"], concurrency=1, gate=gate).start(db.dsn)
    wait_until(lambda: status_of(app, held) == "doing", timeout=30, what="the worker running the held job")
    # Its one slot is taken: it fetches nothing more while these wait.
    ready = mail("record", queue="mail").batch_defer({"n": 10, "tag": "needle"}, {"n": 11}, {"n": 12, "user": {"id": 7}})
    scheduled = mail("record", queue="mail", schedule_in={"hours": 1}).batch_defer({"n": 20}, {"n": 21})
    behind_held = mail("record", queue="mail", lock="H").defer(n=30)
    nightly = mail("record", queue="mail", lock="N", schedule_in={"hours": 1}).defer(n=31)
    behind_nightly = mail("record", queue="mail", lock="N").defer(n=32)
    other = mail("record", queue="reports").batch_defer({"n": 40}, {"n": 41})
    try:
        yield {"app": app, "held": held, "bounced": bounced, "cancelled": cancelled, "ready": ready, "scheduled": scheduled,
               "blocked": [behind_held, behind_nightly], "nightly": nightly, "other": other, "worker": worker}
    finally:
        gate.set()
        worker.stop()


# -- lists -----------------------------------------------------------------------------------------


def test_every_state_lists_what_procrastinates_fetch_and_the_snapshot_say(db, workload):
    want = truth(db, "mail")
    # The shape of the workload, as procrastinate made it:
    assert {state: len(ids) for state, ids in want.items()} == {
        "ready": 3, "delayed": 3, "blocked": 2, "in_flight": 1, "dead": 2, "done": 4}
    assert want["blocked"] == sorted(str(i) for i in workload["blocked"])
    for state in want:
        listed, notes = every_page(db.target, "mail", JobFilter(state=state), limit=50)
        expected = sorted(want[state] + (want["blocked"] if state == "delayed" else []), key=int)
        assert listed == expected, state
        assert notes == []
    everything, _ = every_page(db.target, "mail", JobFilter(), limit=50)
    assert everything == sorted((i for ids in want.values() for i in ids), key=int)
    # The snapshot's figures for the queue are the lists' lengths.
    snap = run_cycle(db.target)
    row = next(q for q in snap.queues if q.source == "procrastinate" and q.name == "mail")
    assert (row.ready, row.delayed, row.blocked, row.in_flight, row.dead) == (
        len(want["ready"]), len(want["delayed"]) + len(want["blocked"]), len(want["blocked"]), len(want["in_flight"]),
        len(want["dead"]))
    # Each job says its state, its status and its task in procrastinate's words.
    jobs = read(db.target, lambda conn: LIB.page(conn, "mail", JobFilter(), limit=100).jobs)
    by_id = {job.id: job for job in jobs}
    assert by_id[str(workload["held"])].status == "doing" and by_id[str(workload["held"])].state == "in_flight"
    assert by_id[str(workload["cancelled"])].status == "cancelled" and by_id[str(workload["cancelled"])].state == "done"
    assert {by_id[str(i)].kind for i in workload["bounced"]} == {"bounce"}
    assert by_id[str(workload["ready"][0])].args == {"n": 10, "tag": "needle"}
    assert all(job.queue == "mail" and job.created_at is not None and 0 <= (job.age_s or -1) < 120 for job in jobs)
    assert by_id[str(workload["scheduled"][0])].scheduled_at is not None


def test_keyset_pages_visit_every_job_once_both_ways(db, workload):
    want = sorted((i for ids in truth(db, "mail").values() for i in ids), key=int)
    oldest, _ = every_page(db.target, "mail", JobFilter(), limit=2)
    assert oldest == want
    newest, _ = every_page(db.target, "mail", JobFilter(), limit=3, newest_first=True)
    assert newest == want[::-1]
    done, _ = every_page(db.target, "mail", JobFilter(state="done"), limit=1, newest_first=True)
    assert done == sorted(truth(db, "mail")["done"], key=int, reverse=True) and len(done) == 4
    other, _ = every_page(db.target, "reports", JobFilter(state="ready"), limit=1)
    assert other == [str(i) for i in workload["other"]]


def test_search_by_task_arguments_and_text_and_its_bounded_scan(db, workload, monkeypatch):
    ready = [str(i) for i in workload["ready"]]
    bounced = sorted(str(i) for i in workload["bounced"])
    assert every_page(db.target, "mail", JobFilter(kind="bounce"), limit=10)[0] == bounced
    assert every_page(db.target, "mail", JobFilter(state="ready", kind="bounce"), limit=10)[0] == []
    assert every_page(db.target, "mail", JobFilter(match={"user": {"id": 7}}), limit=10)[0] == [ready[2]]
    assert every_page(db.target, "mail", JobFilter(match={"n": 11}), limit=10)[0] == [ready[1]]
    assert every_page(db.target, "mail", JobFilter(text="NEEDLE"), limit=10)[0] == [ready[0]]
    assert every_page(db.target, "mail", JobFilter(text="b@example"), limit=10)[0] == [bounced[1]]
    assert every_page(db.target, "mail", JobFilter(text="%"), limit=10)[0] == []  # the pattern's own % is escaped
    assert every_page(db.target, "mail", JobFilter(ids=(ready[1], bounced[0], "nope")), limit=10)[0] == sorted(
        [ready[1], bounced[0]], key=int)
    # A search reads a bounded number of jobs a page, says so, and goes on from where it stopped.
    monkeypatch.setattr("jobs.procrastinate.SCAN_ROWS", 4)
    everything = sorted((i for ids in truth(db, "mail").values() for i in ids), key=int)
    found, notes = every_page(db.target, "mail", JobFilter(kind="record"), limit=50)
    with db.connect() as conn:
        records = [str(r[0]) for r in conn.execute(
            "SELECT id FROM procrastinate_jobs WHERE queue_name = 'mail' AND task_name = 'record' ORDER BY id").fetchall()]
    assert found == records
    assert len(notes) == len(everything) // 4
    assert notes[0] == f"searched 4 jobs up to id {everything[3]} (procrastinate has no index on task_name or args)"
    newest, notes = every_page(db.target, "mail", JobFilter(kind="record"), limit=50, newest_first=True)
    assert newest == records[::-1] and notes[0].startswith(f"searched 4 jobs up to id {everything[-4]} ")
    # Failed and finished jobs have no index of their own: their lists are bounded reads too.
    want = truth(db, "mail")
    for state in ("dead", "done"):
        listed, notes = every_page(db.target, "mail", JobFilter(state=state), limit=50)
        assert listed == want[state] and len(notes) == len(everything) // 4
        assert notes[0] == (f"searched 4 jobs up to id {everything[3]} (procrastinate has no index that leads to {state} "
                            "jobs: 4 of the queue's jobs a page)")
    # The others are read through procrastinate's (id, lock) index of todo/doing jobs: no bound.
    for state in ("ready", "delayed", "blocked", "in_flight"):
        listed, notes = every_page(db.target, "mail", JobFilter(state=state), limit=50)
        assert listed == sorted(want[state] + (want["blocked"] if state == "delayed" else []), key=int) and notes == []


def test_a_job_whole_with_its_failures_and_the_worker_holding_it(db, workload):
    app = workload["app"]
    held = read(db.target, lambda conn: LIB.job(conn, "mail", str(workload["held"])))
    worker_id = app.job_manager.list_jobs(id=workload["held"])[0].worker_id
    assert worker_id is not None and held is not None
    assert held.held_by == f"worker {worker_id}"
    assert held.extra["lock"] == "H" and held.extra["last_heartbeat"] is not None
    assert [e["type"] for e in held.extra["events"]] == ["deferred", "started"]
    dead = read(db.target, lambda conn: LIB.job(conn, "mail", str(workload["bounced"][0])))
    assert dead is not None and dead.status == "failed" and dead.state == "dead" and dead.attempts == 1
    assert [e["type"] for e in dead.errors] == ["failed"] and dead.held_by is None and dead.last_error is None
    assert dead.args == {"to": "a@example.com"}
    assert read(db.target, lambda conn: LIB.job(conn, "reports", str(workload["bounced"][0]))) is None  # another queue's
    assert read(db.target, lambda conn: LIB.job(conn, "mail", "12abc")) is None


# -- actions, proved by procrastinate ------------------------------------------------------------


def test_a_retried_job_is_run_by_the_worker_at_once(db, app):
    failing = app.configure_task("record", queue="jobs").batch_defer({"fail_first": True, "n": 1}, {"fail_first": True, "n": 2})
    drain(db.dsn, "jobs")
    assert [status_of(app, i) for i in failing] == ["failed", "failed"]
    worker = WorkerThread(db.dsn, ["jobs"], concurrency=2).start(db.dsn)
    try:
        started = time.monotonic()
        outcome = act_on_ids(db.target, LIB, "jobs", "retry", [str(failing[0])])
        assert (outcome.changed, outcome.skipped, outcome.ids) == (1, 0, [str(failing[0])])
        # Its poll is 60 s away: the notification sent with the retry woke it.
        wait_until(lambda: status_of(app, failing[0]) == "succeeded", timeout=15, what="the retried job run by the worker")
        assert time.monotonic() - started < 15
    finally:
        worker.stop()
    assert runs(db) == [(failing[0], 0), (failing[1], 0), (failing[0], 2)]  # the retry's attempt after the 2 failed
    assert status_of(app, failing[1]) == "failed"  # not retried: still failed, never run again
    with db.connect() as conn:
        events = [r[0] for r in conn.execute("SELECT type::text FROM procrastinate_events WHERE job_id = %s ORDER BY id",
                                             (failing[0],)).fetchall()]
    # Its own retry's record: the `retried` event (failed -> todo) and the `scheduled` one (for now).
    assert events == ["deferred", "started", "failed", "scheduled", "retried", "started", "succeeded"]


def test_a_cancelled_job_is_never_run_and_the_others_are(db, app):
    ids = app.configure_task("record", queue="jobs").batch_defer(*({"n": n} for n in range(5)))
    later = app.configure_task("record", queue="jobs", schedule_in={"hours": 1}).defer(n=9)
    outcome = act_on_ids(db.target, LIB, "jobs", "cancel", [str(ids[1]), str(ids[3]), str(later)])
    assert (outcome.changed, outcome.skipped) == (3, 0)
    drain(db.dsn, "jobs")
    assert sorted(job for job, _ in runs(db)) == [ids[0], ids[2], ids[4]]
    assert [status_of(app, i) for i in (ids[1], ids[3], later)] == ["cancelled"] * 3
    assert [status_of(app, i) for i in (ids[0], ids[2], ids[4])] == ["succeeded"] * 3
    # Cancelled again, or a finished job: nothing to do.
    again = act_on_ids(db.target, LIB, "jobs", "cancel", [str(ids[1]), str(ids[0])])
    assert (again.changed, again.skipped) == (0, 2)


def test_run_now_makes_a_scheduled_job_run_now(db, app):
    later = app.configure_task("record", queue="jobs", schedule_in={"hours": 2}).batch_defer({"n": 1}, {"n": 2})
    worker = WorkerThread(db.dsn, ["jobs"]).start(db.dsn)
    try:
        outcome = act_on_ids(db.target, LIB, "jobs", "run-now", [str(later[0])])
        assert outcome.ids == [str(later[0])]
        wait_until(lambda: status_of(app, later[0]) == "succeeded", timeout=15, what="the job run now by the worker")
    finally:
        worker.stop()
    assert [job for job, _ in runs(db)] == [later[0]]
    assert status_of(app, later[1]) == "todo"  # the other one waits for its time
    # A job that is due already (or finished) is not one run-now applies to.
    assert act_on_ids(db.target, LIB, "jobs", "run-now", [str(later[0])]).skipped == 1


def test_delete_is_the_librarys_and_gone_from_its_api(db, app):
    todo = app.configure_task("record", queue="jobs").defer(n=1)
    failed = app.configure_task("bounce", queue="jobs").defer()
    done = app.configure_task("record", queue="jobs").defer(n=2)
    drain(db.dsn, "jobs")
    waiting = app.configure_task("record", queue="jobs").defer(n=3)
    scheduled = app.configure_task("record", queue="jobs", schedule_in={"hours": 1}).defer(n=4)
    gate = threading.Event()
    held = app.configure_task("hold", queue="held").defer()
    worker = WorkerThread(db.dsn, ["held"], gate=gate).start(db.dsn)
    try:
        wait_until(lambda: status_of(app, held) == "doing", timeout=30, what="the held job running")
        assert [status_of(app, i) for i in (todo, failed, done)] == ["succeeded", "failed", "succeeded"]
        outcome = act_on_ids(db.target, LIB, "jobs", "delete", [str(i) for i in (failed, done, waiting, scheduled)])
        assert sorted(outcome.ids, key=int) == sorted(str(i) for i in (failed, done, waiting, scheduled))
        for job_id in (failed, done, waiting, scheduled):
            assert asyncio.run(_listed(db.dsn, job_id)) == []  # JobManager.list_jobs_async(id=...)
        assert status_of(app, todo) == "succeeded"  # not asked for: kept
        # A running job is not deleted: procrastinate's own delete leaves it.
        kept = act_on_ids(db.target, LIB, "held", "delete", [str(held)])
        assert (kept.changed, kept.skipped) == (0, 1) and status_of(app, held) == "doing"
        with db.connect() as conn:
            left = conn.execute("SELECT count(*) FROM procrastinate_events WHERE job_id = ANY(%s)",
                                ([failed, done, waiting, scheduled],)).fetchone()[0]
        assert left == 0
    finally:
        gate.set()
        worker.stop()


async def _listed(dsn: str, job_id: int) -> list[Any]:
    app = make_app(dsn)
    async with app.open_async():
        return list(await app.job_manager.list_jobs_async(id=job_id))


def test_cancel_of_a_running_job_is_its_abort_which_the_task_sees(db, app):
    aborted: list[int] = []
    gate = threading.Event()
    held = app.configure_task("hold", queue="jobs").defer()
    worker = WorkerThread(db.dsn, ["jobs"], gate=gate, aborted=aborted).start(db.dsn)
    try:
        wait_until(lambda: status_of(app, held) == "doing", timeout=30, what="the held job running")
        assert read(db.target, lambda conn: LIB.page(conn, "jobs", JobFilter(state="in_flight"))).jobs[0].id == str(held)
        outcome = act_on_ids(db.target, LIB, "jobs", "cancel", [str(held)])
        assert outcome.ids == [str(held)]
        # The abort poll is 60 s away: the abort_job_requested notification told the worker.
        wait_until(lambda: aborted == [held], timeout=15, what="the task seeing context.should_abort()")
        wait_until(lambda: status_of(app, held) == "aborted", timeout=15, what="the job ending aborted")
        assert not gate.is_set()
    finally:
        gate.set()
        worker.stop()


def test_a_job_that_changed_since_it_was_listed_is_skipped_and_counted(db, app):
    ids = app.configure_task("record", queue="jobs", schedule_in={"hours": 1}).batch_defer(*({"n": n} for n in range(4)))
    listed = read(db.target, lambda conn: LIB.page(conn, "jobs", JobFilter(state="delayed"))).jobs
    assert [job.id for job in listed] == [str(i) for i in ids]
    # Meanwhile, through procrastinate: one is cancelled, one deleted.
    assert app.job_manager.cancel_job_by_id(ids[0])
    assert app.job_manager.cancel_job_by_id(ids[1], delete_job=True)
    with write_session(db.target) as conn, conn.transaction():
        changed = LIB.act(conn, "jobs", "run-now", [job.id for job in listed], expect="delayed")
    assert changed == [str(ids[2]), str(ids[3])]
    # Now ready, no longer delayed: a second run-now or a cancel of `delayed` ones skips them.
    with write_session(db.target) as conn, conn.transaction():
        assert LIB.act(conn, "jobs", "cancel", [str(ids[2]), str(ids[3])], expect="delayed") == []
        assert LIB.act(conn, "jobs", "cancel", [str(ids[2])], expect="ready") == [str(ids[2])]
    assert [status_of(app, i) for i in ids] == ["cancelled", None, "cancelled", "todo"]
    # A retry of a job that is not failed (any more) is skipped, not an error of its function.
    outcome = act_on_ids(db.target, LIB, "jobs", "retry", [str(i) for i in ids] + ["x"])
    assert (outcome.matched, outcome.changed, outcome.skipped) == (5, 0, 5)


def test_blocked_jobs_are_acted_on_by_their_own_list(db, workload):
    app = workload["app"]
    blocked = [str(i) for i in workload["blocked"]]
    # Due already, held by their lock: run-now does not apply to them.
    assert act_on_ids(db.target, LIB, "mail", "run-now", blocked).skipped == 2
    with write_session(db.target) as conn, conn.transaction():
        assert LIB.act(conn, "mail", "run-now", blocked, expect="blocked") == []
        assert LIB.act(conn, "mail", "cancel", blocked + [str(i) for i in workload["ready"]], expect="blocked") == blocked
    assert [status_of(app, i) for i in workload["blocked"]] == ["cancelled", "cancelled"]
    assert [status_of(app, i) for i in workload["ready"]] == ["todo"] * 3
    # The nightly job's lock has nothing behind it now; the bulk cancel of `delayed` takes it and
    # the two scheduled ones, never the running job.
    outcome = run_bulk(db.target, LIB, "mail", "cancel", JobFilter(state="delayed"))
    assert sorted(outcome.ids, key=int) == sorted(str(i) for i in [*workload["scheduled"], workload["nightly"]])
    assert status_of(app, workload["held"]) == "doing"


def test_what_procrastinate_does_not_have_is_refused_with_why(db, app):
    with pytest.raises(ActionRefused, match="no paused queue"):
        LIB.refuse_pause()
    with write_session(db.target) as conn, pytest.raises(ActionRefused, match="no paused queue"):
        LIB.pause(conn, "jobs", True)
    with pytest.raises(ActionRefused, match="unknown action"):
        LIB.refuse("explode")
    old = ProcrastinateJobs("public", "2.x or older")
    with write_session(db.target) as conn, conn.transaction(), pytest.raises(ActionRefused, match=r"3\.x"):
        old.act(conn, "jobs", "retry", ["1"], None)
    assert set(LIBRARY.mirrors) == {"retry", "run-now", "cancel", "delete"} and LIBRARY.source == "procrastinate"
    assert LIBRARY.states_for("cancel") == ("ready", "delayed", "blocked", "in_flight")
    assert LIBRARY.states_for("run-now") == ("delayed",)


def test_the_notification_is_the_one_procrastinates_insert_trigger_sends(db, app):
    failed = app.configure_task("bounce", queue="jobs").defer()
    drain(db.dsn, "jobs")
    scheduled = app.configure_task("record", queue="jobs", schedule_in={"hours": 1}).defer(n=1)
    with psycopg.connect(db.dsn, autocommit=True) as listener:
        listener.execute('LISTEN "procrastinate_queue_v1#jobs"')
        listener.execute('LISTEN "procrastinate_any_queue_v1"')
        inserted = app.configure_task("record", queue="jobs").defer(n=2)  # what procrastinate itself sends
        act_on_ids(db.target, LIB, "jobs", "retry", [str(failed)])
        act_on_ids(db.target, LIB, "jobs", "run-now", [str(scheduled)])
        got = [(n.channel, json.loads(n.payload)) for n in listener.notifies(timeout=5, stop_after=6)]
    sent = [{"type": "job_inserted", "job_id": job_id} for job_id in (inserted, failed, scheduled)]
    assert got == [(channel, payload) for payload in sent
                   for channel in ("procrastinate_queue_v1#jobs", "procrastinate_any_queue_v1")]


def test_an_install_in_its_own_schema_is_acted_on_there(db):
    # Procrastinate's functions name its tables unqualified: the action sets the install's schema
    # (here one with a `%` in its name) as the transaction's search_path.
    logging.getLogger("procrastinate").setLevel(logging.CRITICAL)
    with db.connect() as conn:
        conn.execute('CREATE SCHEMA "pro%cr"')
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=db.dsn, kwargs={"options": "-c search_path=pro%cr"}))

    @app.task(name="bounce")
    def bounce() -> None:
        raise ValueError("no")

    with app.open():
        app.schema_manager.apply_schema()
        failed = app.configure_task("bounce", queue="jobs").defer()
    app.run_worker(queues=["jobs"], wait=False, install_signal_handlers=False)
    lib = ProcrastinateJobs("pro%cr", "3.x")
    listed = read(db.target, lambda conn: lib.page(conn, "jobs", JobFilter(state="dead")))
    assert [job.id for job in listed.jobs] == [str(failed)]
    assert act_on_ids(db.target, lib, "jobs", "retry", [str(failed)]).ids == [str(failed)]
    with app.open():
        assert app.job_manager.list_jobs(id=failed)[0].status == "todo"


# -- bulk retry while the worker runs --------------------------------------------------------------


def fail_in_bulk(db, app: Any, queue: str, count: int, by_worker: int) -> list[int]:
    """`count` failed `record` jobs (failing their first attempt) in `queue`: `by_worker` of them
    run and failed by a real worker, the rest deferred through procrastinate's batch_defer and
    failed as its worker records a failure: its fetch's UPDATE (todo -> doing, worker_id; its
    trigger's `started` event), then its own procrastinate_finish_job_v1(id, 'failed', false)
    (attempts + 1, the `failed` event), then the worker unregistered."""
    task = app.configure_task("record", queue=queue)
    ids = task.batch_defer(*({"fail_first": True, "n": n} for n in range(by_worker)))
    drain(db.dsn, queue)
    for start in range(by_worker, count, 10_000):
        ids += task.batch_defer(*({"fail_first": True, "n": n} for n in range(start, min(count, start + 10_000))))
    with db.connect() as conn:
        # Statistics that know of todo jobs, as autovacuum would have them once the retry made
        # them todo: analyzed while every job is failed, procrastinate's fetch plans its
        # lock check as a scan of every todo job for each job it considers (seconds a fetch).
        conn.execute("ANALYZE procrastinate_jobs")
        worker = conn.execute("SELECT worker_id FROM procrastinate_register_worker_v1()").fetchone()[0]
        conn.execute("UPDATE procrastinate_jobs SET status = 'doing', worker_id = %s WHERE queue_name = %s AND status = 'todo'",
                     (worker, queue))
        conn.execute("SELECT procrastinate_finish_job_v1(id, 'failed', false) FROM procrastinate_jobs"
                     " WHERE queue_name = %s AND status = 'doing'", (queue,))
        conn.execute("SELECT procrastinate_unregister_worker_v1(%s)", (worker,))
        conn.execute("TRUNCATE runs")  # the first attempts' runs: what follows counts the retry's
        statuses = dict(conn.execute("SELECT status::text, count(*) FROM procrastinate_jobs WHERE queue_name = %s"
                                     " GROUP BY 1", (queue,)).fetchall())
    assert statuses == {"failed": count}
    return ids


def ran_once_each(db, ids: list[int]) -> None:
    """Every job ran exactly once since the retry, with the retry's attempt, and ended succeeded."""
    with db.connect() as conn:
        total, distinct, first_attempt = conn.execute(
            "SELECT count(*), count(DISTINCT job_id), count(*) FILTER (WHERE attempts < 2) FROM runs").fetchone()
        missing = conn.execute("SELECT count(*) FROM unnest(%s::bigint[]) AS i(id) WHERE id NOT IN (SELECT job_id FROM runs)",
                               (ids,)).fetchone()[0]
        statuses = dict(conn.execute("SELECT status::text, count(*) FROM procrastinate_jobs WHERE id = ANY(%s) GROUP BY 1",
                                     (ids,)).fetchall())
    assert (total, distinct, missing, first_attempt) == (len(ids), len(ids), 0, 0)
    assert statuses == {"succeeded": len(ids)}


def succeeded(db, queue: str) -> int:
    with db.connect() as conn:
        return conn.execute("SELECT count(*) FROM procrastinate_jobs WHERE queue_name = %s AND status = 'succeeded'",
                            (queue,)).fetchone()[0]


def test_a_bulk_retry_while_the_worker_runs_stops_resumes_and_runs_each_job_once(db, app):
    ids = fail_in_bulk(db, app, "bulk", 2_000, by_worker=20)
    stop = threading.Event()
    progress: list[int] = []

    def on_progress(outcome: Outcome) -> None:
        progress.append(outcome.changed)
        if outcome.changed >= 1_000:
            stop.set()

    worker = WorkerThread(db.dsn, ["bulk"], concurrency=20).start(db.dsn)
    try:
        first = run_bulk(db.target, LIB, "bulk", "retry", JobFilter(state="dead"), batch=100, progress=on_progress, stop=stop)
        assert first.stopped_after is not None and first.changed == 1_000 and first.skipped == 0
        assert first.stopped_after == first.ids[-1] and progress == list(range(100, 1_001, 100))
        # Stopped: the rest is still failed, untouched, while the worker runs the first half.
        with db.connect() as conn:
            failed = [r[0] for r in conn.execute("SELECT id FROM procrastinate_jobs WHERE queue_name = 'bulk'"
                                                 " AND status = 'failed' ORDER BY id").fetchall()]
        assert failed == ids[1_000:]
        rest = run_bulk(db.target, LIB, "bulk", "retry", JobFilter(state="dead"), after=first.stopped_after)
        assert rest.stopped_after is None and (rest.matched, rest.changed, rest.skipped) == (1_000, 1_000, 0)
        assert sorted(int(i) for i in first.ids + rest.ids) == ids  # the union: each job once
        wait_until(lambda: succeeded(db, "bulk") == len(ids), timeout=120, interval=0.2, what="the worker running them all")
    finally:
        worker.stop()
    ran_once_each(db, ids)


def _worker_process(dsn: str, queue: str, concurrency: int) -> None:
    """A Procrastinate worker in a process of its own (the oracle's bulk retry): until SIGTERM,
    which procrastinate's own signal handler turns into a graceful stop."""
    logging.getLogger("procrastinate").setLevel(logging.CRITICAL)
    make_app(dsn).run_worker(queues=[queue], wait=True, concurrency=concurrency, fetch_job_polling_interval=1.0)


@pytest.mark.oracle
@pytest.mark.timeout(1800)
def test_bulk_retry_of_100k_jobs_while_the_librarys_workers_run_runs_each_once(db, app):
    """Bulk retry of 100k jobs while the library's worker runs: no job run twice, none lost."""
    count = 100_000
    ids = fail_in_bulk(db, app, "bulk", count, by_worker=100)
    spawn = multiprocessing.get_context("spawn")
    workers = [spawn.Process(target=_worker_process, args=(db.dsn, "bulk", 10), daemon=True) for _ in range(3)]
    for proc in workers:
        proc.start()
    try:
        wait_until(lambda: listening(db.dsn, "bulk"), timeout=60, what="the workers listening")
        started = time.monotonic()
        outcome = run_bulk(db.target, LIB, "bulk", "retry", JobFilter(state="dead"))
        retried_s = time.monotonic() - started
        assert (outcome.matched, outcome.changed, outcome.skipped, outcome.stopped_after) == (count, count, 0, None)
        assert sorted(int(i) for i in outcome.ids) == ids
        wait_until(lambda: succeeded(db, "bulk") == count, timeout=1500, interval=1.0, what="the workers running them all")
        print(f"\nbulk retry of {count} jobs: {retried_s:.1f} s; all run {time.monotonic() - started:.1f} s after it began")
    finally:
        for proc in workers:
            proc.terminate()
        for proc in workers:
            proc.join(60)
    assert all(proc.exitcode == 0 for proc in workers), [proc.exitcode for proc in workers]
    ran_once_each(db, ids)
    with db.connect() as conn:
        assert conn.execute("SELECT count(*) FROM procrastinate_jobs WHERE status = 'failed'").fetchone()[0] == 0
