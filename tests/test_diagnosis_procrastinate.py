"""Queue verdicts on Procrastinate, the real library (issue 29, point 5): each cause made for real
with its own API (its schema manager, `defer`, real workers in threads), and the verdict checked
against what the test built and what the server says: the blocker from pg_blocking_pids, the
horizon's holder from backend_xmin, the waiting worker from pg_locks.

Procrastinate keeps every queue in one table, `procrastinate_jobs`: a worker's sessions on it
serve some queues, not necessarily this one (the verdicts' `shared` consumers). Each test says
how long the verdict took to come, sampling every second as a dashboard would; the bound it
asserts is the rule's own minimum plus two refresh intervals.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from probes.diagnosis import HORIZON_HELD_S, MIN_WAIT_S, SATURATED_MIN_S, SHARED_IDLE_S, Diagnoser
from probes.model import QueueSample, Snapshot
from probes.sampler import probes_for, run_cycle

from .conftest import wait_until

procrastinate = pytest.importorskip("procrastinate", reason="procrastinate is a test dependency (pip install -e '.[test]')")

INTERVAL_S = 1.0  # the dashboard's refresh in these tests


def make_app(dsn: str):
    """An app with the tests' tasks (each thread has its own: an app's connector is one loop's)."""
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))

    @app.task(queue="mail", name="send_mail")
    def send_mail() -> None:
        pass

    @app.task(queue="mail", name="bounce")
    def bounce() -> None:
        raise ValueError("mailbox full")

    @app.task(queue="mail", name="slow_mail")
    def slow_mail() -> None:
        threading.Event().wait(0.25)  # a handler that takes its time: 4 a second per worker

    @app.task(queue="reports", name="build_report")
    def build_report() -> None:
        pass

    return app


class Worker:
    """`app.run_worker_async` in a thread of its own, until stop()."""

    def __init__(self, dsn: str, **options) -> None:
        self.app = make_app(dsn)
        self.options = {"wait": True, "install_signal_handlers": False, **options}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.task: asyncio.Task | None = None
        self.started = threading.Event()
        self.thread = threading.Thread(target=asyncio.run, args=(self._main(),), daemon=True)
        self.thread.start()
        assert self.started.wait(30), "the worker did not start"

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        async with self.app.open_async():
            self.task = asyncio.create_task(self.app.run_worker_async(**self.options))
            self.started.set()
            try:
                await self.task
            except asyncio.CancelledError:
                pass

    def stop(self) -> None:
        if self.loop is not None and self.task is not None and not self.task.done():
            self.loop.call_soon_threadsafe(self.task.cancel)
        self.thread.join(30)


class Producer:
    """Defers `task` at `rate` a second through the library, until stop()."""

    def __init__(self, dsn: str, task: str, rate: float) -> None:
        self.app, self.task, self.rate = make_app(dsn), task, rate
        self.sent = 0
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with self.app.open():
            task = self.app.tasks[self.task]
            started = time.monotonic()
            while not self._stop.is_set():
                task.defer()
                self.sent += 1
                self._stop.wait(max(0.0, started + self.sent / self.rate - time.monotonic()))

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(30)


@pytest.fixture
def app(db) -> Iterator[object]:
    logging.getLogger("procrastinate").setLevel(logging.CRITICAL)  # the failing task logs its tracebacks
    app = make_app(db.dsn)
    with app.open():
        app.schema_manager.apply_schema()
        # A second queue on the same table with nothing ready: it is never held up by the causes.
        app.tasks["build_report"].configure(schedule_in={"hours": 1}).defer()
        # A job of mail scheduled an hour ahead: mail is listed from the first sample on, before a
        # producer's first job (a queue is one procrastinate_jobs holds a row of, finished or not).
        app.tasks["send_mail"].configure(schedule_in={"hours": 1}).defer()
        yield app


@dataclass
class Verdict:
    queue: QueueSample
    snapshot: Snapshot
    after_s: float  # since the condition was in place
    refreshes: int
    seen: Counter


class Watcher:
    """Samples as the dashboard does: the same probes (their counters, the queues they saw) and
    one Diagnoser (its window) from one cycle to the next."""

    def __init__(self, db) -> None:
        self.target, self.probes, self.diagnoser = db.target, probes_for(db.target), Diagnoser()

    def cycle(self) -> Snapshot:
        return run_cycle(self.target, probes=self.probes, diagnoser=self.diagnoser)


def first_verdict(db, code: str, timeout: float, queue: str = "mail", every: Callable[[Snapshot], None] | None = None) -> Verdict:
    """Sample every INTERVAL_S, as the dashboard does, until `queue`'s verdict is `code`."""
    watcher = Watcher(db)
    started = time.monotonic()
    seen: Counter = Counter()
    for refresh in range(1, 10_000):
        snapshot = watcher.cycle()
        if every is not None:
            every(snapshot)
        found = [q for q in snapshot.queues if q.source == "procrastinate" and q.name == queue]
        # A drained queue stays listed: its finished jobs stay in the table (sources/queuenames.py).
        assert found, f"{queue} is not listed"
        q = found[0]
        seen[q.diagnosis.code] += 1
        if q.diagnosis.code == code:
            print(f"procrastinate {code}: {time.monotonic() - started:.1f} s, refresh {refresh}")  # the note's table (-s)
            return Verdict(q, snapshot, time.monotonic() - started, refresh, seen)
        if time.monotonic() - started > timeout:
            raise AssertionError(f"no {code} verdict in {timeout} s: {dict(seen)}; last {q.diagnosis}")
        threading.Event().wait(max(0.0, started + refresh * INTERVAL_S - time.monotonic()))  # the refresh's pace
    raise AssertionError("unreachable")


def others_healthy(snapshot: Snapshot) -> None:
    (reports,) = [q for q in snapshot.queues if q.source == "procrastinate" and q.name == "reports"]
    # Nothing of it is ready: nothing holds it up (not judged on a first sample: rates need two).
    d = reports.diagnosis
    assert d.code == "healthy" or (d.code == "not-judged" and d.reason.startswith("one sample")), d


def test_a_worker_blocked_behind_an_idle_transaction_names_the_blocker(db, app):
    for _ in range(3):
        app.tasks["send_mail"].defer()
    blocker = db.connect(autocommit=False, application_name="migration")
    blocker.execute("LOCK TABLE procrastinate_jobs IN SHARE ROW EXCLUSIVE MODE")  # then idle, its transaction open
    worker = Worker(db.dsn, queues=["mail"])
    try:
        with db.connect() as conn:
            def waiting() -> tuple | None:
                return conn.execute("SELECT l.pid, pg_blocking_pids(l.pid) FROM pg_locks l WHERE NOT l.granted"
                                    " AND l.relation = 'procrastinate_jobs'::regclass").fetchone()
            worker_pid, blocking = wait_until(waiting, timeout=30, what="the worker waiting for the table")
        verdict = first_verdict(db, "blocked", timeout=30)
        d = verdict.queue.diagnosis
        assert blocking == [blocker.info.backend_pid]
        assert d.pids[0] == blocker.info.backend_pid and worker_pid in d.pids, d
        assert "holding SHARE ROW EXCLUSIVE on procrastinate_jobs" in d.reason, d
        # The table lock stops every queue in the table: reports too, nothing of it ready (its
        # producers could not add any), by the same locker (issue 43: from the locks on its table).
        (reports,) = [q for q in verdict.snapshot.queues if q.source == "procrastinate" and q.name == "reports"]
        assert reports.diagnosis.code == "blocked" and reports.diagnosis.pids[0] == blocker.info.backend_pid, reports.diagnosis
        assert "idle in transaction" in d.reason and "application migration" in d.reason
        consumer = next(c for c in verdict.queue.consumers if c.pid == worker_pid)
        assert consumer.waiting and consumer.shared and consumer.evidence == "lock"
        assert verdict.after_s <= MIN_WAIT_S + 2 * INTERVAL_S + 1, verdict  # a 2 s wait is evidence in one sample
    finally:
        blocker.rollback()
        blocker.close()
        worker.stop()


def test_ready_jobs_and_no_worker_at_all_is_no_consumers(db, app):
    for _ in range(3):
        app.tasks["send_mail"].defer()
    verdict = first_verdict(db, "no-consumers", timeout=10, every=others_healthy)
    assert "3 ready and no session takes them" in verdict.queue.diagnosis.reason
    assert verdict.refreshes == 1  # what one sample shows is said from one sample


def test_a_worker_of_other_queues_only_does_not_hide_that_nobody_serves_this_one(db, app):
    worker = Worker(db.dsn, queues=["reports"])
    try:
        for _ in range(3):
            app.tasks["send_mail"].defer()
        in_place = time.monotonic()
        verdict = first_verdict(db, "no-consumers", timeout=SHARED_IDLE_S + 20, every=others_healthy)
        d = verdict.queue.diagnosis
        assert "3 ready" in d.reason
        # The table is worked: reports' worker LISTENs on reports' own channel, so it is no
        # consumer of mail. (Its pooled connections say only COMMIT between jobs: no evidence.)
        listening = [c for q in verdict.snapshot.queues if q.name == "reports" for c in q.consumers if c.evidence == "listen"]
        assert listening and not listening[0].shared
        assert all(c.shared for c in verdict.queue.consumers), verdict.queue.consumers
        assert time.monotonic() - in_place <= SHARED_IDLE_S + 2 * INTERVAL_S + 2, verdict
    finally:
        worker.stop()


def test_jobs_failing_for_good_is_failing(db, app):
    worker = Worker(db.dsn, queues=["mail"], concurrency=2)
    producer = Producer(db.dsn, "bounce", rate=10)
    try:
        with db.connect() as conn:
            wait_until(lambda: conn.execute("SELECT count(*) FROM procrastinate_jobs WHERE status = 'failed'").fetchone()[0],
                       timeout=30, what="a first failed job")
        verdict = first_verdict(db, "failing", timeout=15, every=others_healthy)
        d = verdict.queue.diagnosis
        assert "went dead" in d.reason and "completions unknown" in d.reason, d
        with db.connect() as conn:
            failed = conn.execute("SELECT count(*) FROM procrastinate_jobs WHERE status = 'failed'").fetchone()[0]
        assert 0 < verdict.queue.dead <= failed
        assert verdict.after_s <= 2 * INTERVAL_S + 1, verdict
    finally:
        producer.stop()
        worker.stop()


@pytest.mark.timed  # (make test-timed, beside test-main)
def test_a_transaction_holding_the_horizon_while_jobs_churn_is_bloat_named_by_its_holder(db, app):
    holder = db.connect(autocommit=False, application_name="report-export")
    holder.execute("SELECT txid_current()")  # an xid: the horizon stays here while it is open
    held_at = time.monotonic()
    worker = Worker(db.dsn, queues=["mail"], concurrency=2)
    producer = Producer(db.dsn, "send_mail", rate=40)
    try:
        # (The table's bloat is every queue's in it: reports' verdict is bloat too.)
        verdict = first_verdict(db, "bloat", timeout=HORIZON_HELD_S + 30)
        d = verdict.queue.diagnosis
        with db.connect() as conn:
            oldest = conn.execute("SELECT pid FROM pg_stat_activity WHERE backend_xmin IS NOT NULL OR backend_xid IS NOT NULL"
                                  " ORDER BY age(coalesce(backend_xid, backend_xmin)) DESC LIMIT 1").fetchone()[0]
        assert d.pids == (holder.info.backend_pid,) == (oldest,), d
        assert "application report-export" in d.reason and "xmin horizon" in d.reason
        assert verdict.queue.dead_tuples > 50 + 0.2 * (verdict.queue.live_tuples or 0)
        # Judged once the holder's transaction is HORIZON_HELD_S old, then within two refreshes
        # (and the server's statistics, which backends send at most every second).
        assert time.monotonic() - held_at <= HORIZON_HELD_S + 2 * INTERVAL_S + 3, verdict
    finally:
        producer.stop()
        worker.stop()
        holder.rollback()
        holder.close()


@pytest.mark.timed  # (make test-timed, beside test-main)
def test_arrivals_outrunning_a_busy_worker_is_saturated(db, app):
    worker = Worker(db.dsn, queues=["mail"], concurrency=1)  # 4 a second
    producer = Producer(db.dsn, "slow_mail", rate=15)
    try:
        in_place = time.monotonic()
        verdict = first_verdict(db, "saturated", timeout=SATURATED_MIN_S + 20, every=others_healthy)
        d = verdict.queue.diagnosis
        assert "backlog +" in d.reason and d.pids and set(d.pids) <= {c.pid for c in verdict.queue.consumers}
        assert verdict.seen["blocked"] == verdict.seen["failing"] == verdict.seen["bloat"] == 0, verdict.seen
        assert time.monotonic() - in_place <= SATURATED_MIN_S + 2 * INTERVAL_S + 2, verdict
    finally:
        producer.stop()
        worker.stop()


@pytest.mark.timed  # (make test-timed, beside test-main)
def test_a_busy_queue_that_keeps_up_is_never_flagged(db, app):
    """The no-false-alarm control: 10 jobs a second, two workers far faster, 25 refreshes."""
    worker = Worker(db.dsn, queues=["mail"], concurrency=2)
    producer = Producer(db.dsn, "send_mail", rate=10)
    watcher = Watcher(db)
    seen: Counter = Counter()
    try:
        started = time.monotonic()
        for refresh in range(1, 26):
            snapshot = watcher.cycle()
            (q,) = [q for q in snapshot.queues if q.source == "procrastinate" and q.name == "mail"]
            seen[q.diagnosis.code] += 1
            assert q.diagnosis.code == ("not-judged" if refresh == 1 else "healthy"), (refresh, q.diagnosis, q)
            threading.Event().wait(max(0.0, started + refresh * INTERVAL_S - time.monotonic()))
        assert producer.sent >= 200 and seen == {"not-judged": 1, "healthy": 24}  # one sample judges no rate
    finally:
        producer.stop()
        worker.stop()
