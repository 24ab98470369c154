"""Procrastinate, the real library: its schema applied by its own schema manager, jobs deferred
through its API, a real worker that finishes, fails, retries with back-off and holds a running
job; queuetop finds it with no config and every figure matches ground truth in SQL."""

from __future__ import annotations

import logging
import threading

import pytest

from probes.details import queue_details
from probes.postgres import open_probe_connection
from probes.sampler import run_cycle

from .conftest import wait_until

pytestmark = pytest.mark.matrix  # the server matrix runs these on every supported major

procrastinate = pytest.importorskip("procrastinate", reason="procrastinate is a test dependency (pip install -e '.[test]')")


def ground_truth(db, queue: str) -> dict[str, int]:
    """Procrastinate's own definitions (procrastinate_fetch_job_v2), counted over the table."""
    with db.connect() as conn:
        ready, delayed, in_flight, dead = conn.execute(
            """SELECT count(*) FILTER (WHERE status = 'todo' AND (scheduled_at IS NULL OR scheduled_at <= now())),
                      count(*) FILTER (WHERE status = 'todo' AND scheduled_at > now()),
                      count(*) FILTER (WHERE status IN ('doing', 'aborting')),
                      count(*) FILTER (WHERE status = 'failed')
               FROM procrastinate_jobs WHERE queue_name = %s""",
            (queue,),
        ).fetchone()
    return {"ready": ready, "delayed": delayed, "in_flight": in_flight, "dead": dead, "depth": ready + delayed + in_flight}


@pytest.fixture
def workload(db):
    """Two queues in every state: finished, failed, retrying after a back-off, scheduled, ready,
    and a job a real worker is running until the test lets it go."""
    logging.getLogger("procrastinate").setLevel(logging.CRITICAL)  # the failing tasks log tracebacks
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=db.dsn))
    gate = threading.Event()

    @app.task(queue="mail", name="send_mail")
    def send_mail() -> None:
        pass

    @app.task(queue="mail", name="bounce")
    def bounce() -> None:
        raise ValueError("mailbox full")

    @app.task(queue="mail", name="flaky", retry=procrastinate.RetryStrategy(max_attempts=5, wait=600))
    def flaky() -> None:
        raise ConnectionError("smtp timeout")

    @app.task(queue="reports", name="build_report")
    def build_report() -> None:
        gate.wait(60)

    with app.open():
        app.schema_manager.apply_schema()
        for _ in range(4):
            send_mail.defer()
        bounce.defer()
        flaky.defer()
    app.run_worker(queues=["mail"], wait=False)  # finishes 4, fails 1 for good, 1 retries in 10 min
    with app.open():
        for _ in range(3):
            send_mail.defer()  # ready
        for _ in range(2):
            send_mail.configure(schedule_in={"hours": 1}).defer()  # scheduled
        build_report.defer()
        build_report.defer()
    worker = threading.Thread(target=app.run_worker, kwargs={"queues": ["reports"], "wait": False,
                                                           "concurrency": 1}, daemon=True)
    worker.start()

    def running() -> bool:
        with db.connect() as conn:
            return conn.execute("SELECT count(*) FROM procrastinate_jobs WHERE status = 'doing'").fetchone()[0] == 1

    wait_until(running, timeout=30, what="the worker running a report")
    yield app
    gate.set()
    worker.join(60)


def rows_of(snap) -> dict[str, object]:
    return {q.name: q for q in snap.queues if q.source == "procrastinate"}


def test_procrastinate_queues_are_found_with_no_config_and_every_figure_is_right(db, workload):
    before = {queue: ground_truth(db, queue) for queue in ("mail", "reports")}
    snap = run_cycle(db.target)
    after = {queue: ground_truth(db, queue) for queue in ("mail", "reports")}
    assert before == after  # nothing moved while we looked: the figures must equal it
    rows = rows_of(snap)
    assert set(rows) == {"mail", "reports"}
    for queue in ("mail", "reports"):
        q, g = rows[queue], after[queue]
        assert (q.ready, q.delayed, q.in_flight, q.dead, q.depth) == (g["ready"], g["delayed"], g["in_flight"], g["dead"], g["depth"])
        assert q.kind == "table" and q.error is None and q.depth_is_estimate is False
    # The shape of the workload, as Procrastinate defines its states:
    assert (rows["mail"].ready, rows["mail"].delayed, rows["mail"].dead) == (3, 3, 1)  # 2 scheduled + 1 retrying
    assert (rows["reports"].in_flight, rows["reports"].ready) == (1, 1)
    assert rows["mail"].depth == 6  # the 4 succeeded jobs kept in the table are in no count
    # Ready since their deferral (from procrastinate_events): seconds, not unknown.
    assert rows["mail"].oldest_ready_age_s is not None and 0 <= rows["mail"].oldest_ready_age_s < 120
    assert snap.probes["queues"].error is None


def test_procrastinate_details_show_the_head_and_the_failed_jobs(db, workload):
    with open_probe_connection(db.target) as conn:
        details = queue_details(conn, "procrastinate", "mail")
    # The head: what waits or runs (the 4 finished jobs and the failed one are not in it).
    assert sorted(row["task_name"] for row in details.head) == ["flaky", *["send_mail"] * 5]
    assert {row["status"] for row in details.head} == {"todo"}
    assert [row["task_name"] for row in details.dead] == ["bounce"]
    assert details.dead[0]["failed_at"] is not None


def test_a_queue_whose_jobs_all_finished_is_listed_at_zero(db):
    # Procrastinate keeps finished jobs in procrastinate_jobs and no list of queues: a queue
    # whose jobs all succeeded or were cancelled is still one the table holds, found through
    # its queue_name index (not only while an unfinished job of it is there).
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=db.dsn))

    @app.task(queue="nightly", name="tidy")
    def tidy() -> None:
        pass

    with app.open():
        app.schema_manager.apply_schema()
        for _ in range(3):
            tidy.defer()
        cancelled = tidy.configure(schedule_in={"hours": 1}).defer()
        assert app.job_manager.cancel_job_by_id(cancelled)
    app.run_worker(queues=["nightly"], wait=False)  # runs the three, returns once none is left
    with db.connect() as conn:
        statuses = dict(conn.execute("SELECT status::text, count(*) FROM procrastinate_jobs"
                                     " WHERE queue_name = 'nightly' GROUP BY status").fetchall())
    assert statuses == {"succeeded": 3, "cancelled": 1}
    snap = run_cycle(db.target)
    nightly = rows_of(snap)["nightly"]
    assert (nightly.ready, nightly.delayed, nightly.in_flight, nightly.dead, nightly.depth) == (0, 0, 0, 0, 0) == tuple(
        ground_truth(db, "nightly")[k] for k in ("ready", "delayed", "in_flight", "dead", "depth"))
    assert nightly.error is None and snap.probes["queues"].error is None
    assert "queue_column" not in (snap.probes["queues"].notes or "")  # read through its index: no note
