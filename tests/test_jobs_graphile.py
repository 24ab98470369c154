"""Graphile Worker's job console (jobs/graphile_worker.py) against the real library: jobs made and
worked by Graphile Worker itself (npm, driven by node scripts of tests/peers), each action proved by
what Graphile Worker's own worker then does, or by its `jobs` view.

- Lists agree with ground truth on its tables and with the snapshot's figures of each task and named
  queue; keyset pages visit every job once, both ways; kind/match/text search; every list is a
  bounded walk of the primary key (no index of Graphile Worker's leads a task's jobs), with a note.
- job(): the last error Graphile Worker kept, the worker holding a locked job.
- retry: a permanently failed job is run again by a worker polling once an hour (the NOTIFY wakes
  it); run-now: a job scheduled an hour ahead runs now; cancel: the worker runs the jobs around it,
  never it; delete: gone from the `jobs` view; a job a worker holds, and one that changed state since
  it was listed, are skipped (and counted by the bulk layer).
"""

from __future__ import annotations

import json
import os
import queue as queues
import subprocess
import threading
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg.rows import dict_row

from jobs.bulk import act_on_ids, run_bulk
from jobs.graphile_worker import CANCEL_REASON, LIBRARY, GraphileWorkerJobs
from jobs.model import SCAN_ROWS, ActionRefused, JobFilter
from jobs.registry import library_for
from probes.sampler import run_cycle

from .conftest import REPO, NodeWorkload, end_process, wait_until
from .jobpages import every_page as pages_of
from .jobpages import ids_of, read

pytestmark = pytest.mark.matrix

# Graphile Worker's get_job, by queuetop state, over the whole table (the probe's meaning).
TRUTH = """
SELECT j.id::text AS id,
       CASE WHEN j.locked_at IS NOT NULL THEN 'in_flight'
            WHEN j.attempts >= j.max_attempts THEN 'dead'
            WHEN j.run_at > now() THEN 'delayed'
            WHEN q.locked_at IS NOT NULL THEN 'blocked'
            ELSE 'ready' END AS state
FROM graphile_worker._private_jobs j
JOIN graphile_worker._private_tasks t ON t.id = j.task_id
LEFT JOIN graphile_worker._private_job_queues q ON q.id = j.job_queue_id
WHERE (%(task)s::text IS NULL OR t.identifier = %(task)s) AND (%(queue)s::text IS NULL OR q.queue_name = %(queue)s)
ORDER BY j.id
"""


def truth(db, name: str) -> dict[str, list[str]]:
    kind, _, value = name.partition(":")
    with db.connect() as conn:
        rows = conn.execute(TRUTH, {"task": value if kind == "task" else None, "queue": value if kind == "queue" else None}).fetchall()
    out: dict[str, list[str]] = {s: [] for s in ("ready", "delayed", "blocked", "in_flight", "dead")}
    for job_id, state in rows:
        out[state].append(job_id)
    out["delayed"] = sorted(out["delayed"] + out["blocked"], key=int)  # the snapshot's delayed holds the blocked
    out["all"] = [r[0] for r in rows]
    return out


def every_page(target, queue: str, flt: JobFilter, *, limit: int, newest_first: bool = False, lib=None):
    """Every page of a list, as the console reads them (one probe transaction each)."""
    return pages_of(target, lib or LIBRARY("graphile_worker"), queue, flt, limit=limit, newest_first=newest_first)


@pytest.fixture
def workload(db, node_peers):
    """graphile_workload.mjs: send_email with a job failed for good, one backing off, 2 scheduled, 3
    ready; build_report in the named queue "reports", one running (held by a worker), one behind it."""
    running = NodeWorkload(node_peers, "graphile_workload.mjs", db.dsn)
    yield running
    running.close()


QUEUES = ("task:send_email", "task:build_report", "queue:reports")


def test_lists_agree_with_its_tables_and_the_snapshot(db, workload):
    lib = library_for("graphile-worker")
    assert lib is GraphileWorkerJobs
    snap = {q.name: q for q in run_cycle(db.target).queues if q.source == "graphile-worker"}
    for name in QUEUES:
        truth_ids = truth(db, name)
        figures = snap[name]
        for state, figure in (("ready", figures.ready), ("delayed", figures.delayed), ("blocked", figures.blocked),
                              ("in_flight", figures.in_flight), ("dead", figures.dead)):
            listed = ids_of(every_page(db.target, name, JobFilter(state=state), limit=1000))
            assert listed == truth_ids[state], (name, state)
            assert len(listed) == figure, (name, state)
        assert ids_of(every_page(db.target, name, JobFilter(), limit=1000)) == truth_ids["all"]
    # The workload's shape, so that each state above was a real check: 3 ready, 3 delayed, 1 dead;
    # the report in flight, the other blocked behind it.
    assert [len(truth(db, "task:send_email")[s]) for s in ("ready", "delayed", "dead")] == [3, 3, 1]
    assert [len(truth(db, "queue:reports")[s]) for s in ("in_flight", "blocked")] == [1, 1]
    # Graphile Worker keeps no finished job: `done` lists nothing, and says why.
    [done] = every_page(db.target, "task:send_email", JobFilter(state="done"), limit=10)
    assert done.jobs == [] and "deletes a job once it completes" in (done.note or "")


def test_keyset_pages_both_ways_and_searches(db, workload):
    everything = truth(db, "task:send_email")["all"]
    assert len(everything) == 7
    pages = every_page(db.target, "task:send_email", JobFilter(), limit=2)
    assert [len(p.jobs) for p in pages] == [2, 2, 2, 1]  # each job once, in id order
    assert ids_of(pages) == everything and all(p.note is None for p in pages)
    newest = every_page(db.target, "task:send_email", JobFilter(), limit=3, newest_first=True)
    assert ids_of(newest) == everything[::-1]
    # Kind (the task), exact: the named queue's jobs are all build_report ones.
    assert len(ids_of(every_page(db.target, "queue:reports", JobFilter(kind="build_report"), limit=10))) == 2
    assert ids_of(every_page(db.target, "queue:reports", JobFilter(kind="send_email"), limit=10)) == []
    # The payload: JSON containment, and its text case-insensitively ('%' is a character, not a wildcard).
    bounce = workload.report["bounce"]
    assert ids_of(every_page(db.target, "task:send_email", JobFilter(match={"to": "bounce@example.com"}), limit=10)) == [bounce]
    assert ids_of(every_page(db.target, "task:send_email", JobFilter(text="FLAKY@"), limit=10)) == [workload.report["flaky"]]
    assert ids_of(every_page(db.target, "task:send_email", JobFilter(text="%"), limit=10)) == []
    assert len(ids_of(every_page(db.target, "task:send_email", JobFilter(text="later", state="delayed"), limit=10))) == 2
    # By ids: only those of the queue.
    report = truth(db, "queue:reports")["all"][0]
    assert ids_of(every_page(db.target, "task:send_email", JobFilter(ids=(bounce, report, "x")), limit=10)) == [bounce]
    # A page's fields.
    [job] = every_page(db.target, "task:send_email", JobFilter(ids=(bounce,)), limit=10)[0].jobs
    assert (job.queue, job.state, job.status, job.kind, job.attempts, job.max_attempts) == \
        ("task:send_email", "dead", "permanently failed", "send_email", 1, 1)
    assert job.args == {"to": "bounce@example.com", "fail": True} and "smtp said no to bounce@example.com" in job.last_error
    assert job.age_s is not None and job.age_s >= 0 and job.scheduled_at is not None


def test_job_shows_the_last_error_and_the_worker_holding_it(db, workload):
    lib = LIBRARY("graphile_worker")
    with db.connect() as conn:
        running, locked_by = conn.execute("SELECT id::text, locked_by FROM graphile_worker.jobs"
                                          " WHERE queue_name = 'reports' AND locked_at IS NOT NULL").fetchone()
        waiting = conn.execute("SELECT id::text FROM graphile_worker.jobs WHERE queue_name = 'reports' AND locked_at IS NULL").fetchone()[0]
    bounce = read(db.target, lambda c: lib.job(c, "task:send_email", workload.report["bounce"]))
    assert bounce is not None and len(bounce.errors) == 1 and "smtp said no to bounce@example.com" in bounce.errors[0]
    assert bounce.held_by is None and bounce.extra["is_available"] is False
    held = read(db.target, lambda c: lib.job(c, "queue:reports", running))
    assert held is not None and held.state == "in_flight" and held.status == "locked"
    assert locked_by and held.held_by == locked_by and held.errors == []
    behind = read(db.target, lambda c: lib.job(c, "task:build_report", waiting))
    assert behind is not None and behind.state == "blocked" and behind.extra["queue_holder"] == locked_by
    # Not a job of that queue, no such job, no such id.
    assert read(db.target, lambda c: lib.job(c, "queue:reports", workload.report["bounce"])) is None
    assert read(db.target, lambda c: lib.job(c, "task:send_email", "999999")) is None
    assert read(db.target, lambda c: lib.job(c, "task:send_email", "abc")) is None


def test_bulk_acts_skip_the_job_a_worker_holds_and_pause_is_refused(db, workload):
    lib = LIBRARY("graphile_worker")
    # Both reports listed (no state filter): the running one is skipped, the waiting one cancelled.
    outcome = run_bulk(db.target, lib, "queue:reports", "cancel", JobFilter())
    assert (outcome.matched, outcome.changed, outcome.skipped) == (2, 1, 1)
    with db.connect() as conn:
        rows = conn.execute("SELECT locked_at IS NOT NULL, attempts >= max_attempts, last_error FROM graphile_worker.jobs"
                            " WHERE queue_name = 'reports' ORDER BY id").fetchall()
    assert rows == [(True, False, None), (False, True, CANCEL_REASON)]
    # Every action on the running job: skipped, as Graphile Worker's functions skip a locked job.
    running = truth(db, "queue:reports")["in_flight"]
    for action in ("retry", "run-now", "cancel", "delete"):
        done = act_on_ids(db.target, lib, "queue:reports", action, running)
        assert (done.matched, done.changed, done.skipped) == (1, 0, 1), action
    # The dead jobs of send_email, retried by filter: its one exhausted job (bounce).
    retried = run_bulk(db.target, lib, "task:send_email", "retry", JobFilter(state="dead"))
    assert (retried.matched, retried.changed, retried.ids) == (1, 1, [workload.report["bounce"]])
    with pytest.raises(ActionRefused, match="no paused queue"):
        with lib_write(db) as conn:
            lib.pause(conn, "task:send_email", True)
    with pytest.raises(ActionRefused, match="unknown action"):
        act_on_ids(db.target, lib, "task:send_email", "archive", ["1"])
    from dbcore.errors import UsageError

    with pytest.raises(UsageError, match="task:<identifier>"):
        read(db.target, lambda c: lib.page(c, "send_email", JobFilter()))


def lib_write(db):
    return psycopg.connect(db.dsn, autocommit=True)


# -- the actions, proved by Graphile Worker's own worker ----------------------------------------


class Driver:
    """graphile_jobs.mjs: commands in, JSON lines out (read by a thread as they come)."""

    def __init__(self, modules, dsn: str) -> None:
        env = {**os.environ, "QUEUETOP_NODE_PEERS": str(modules)}
        self.proc = subprocess.Popen(["node", str(REPO / "tests" / "peers" / "graphile_jobs.mjs"), dsn], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.lines: list[dict] = []
        self.answers: queues.Queue[dict] = queues.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.wait(lambda line: line.get("ready"), "the driver to migrate")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = json.loads(raw)
            self.lines.append(line)
            if {"added", "rescheduled", "started", "error"} & set(line):
                self.answers.put(line)

    def wait(self, predicate, what: str, timeout: float = 15.0) -> dict:
        def found():
            return next((line for line in list(self.lines) if predicate(line)), None)
        try:
            return wait_until(found, timeout=timeout, what=what)
        except AssertionError:
            raise AssertionError(f"{what}: {self.lines[-10:]} {self._stderr()}") from None

    def _stderr(self) -> str:
        if self.proc.poll() is None:
            return ""
        return (self.proc.stderr.read() if self.proc.stderr else "")[-2000:]

    def send(self, **cmd) -> dict:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        try:
            answer = self.answers.get(timeout=15)
        except queues.Empty:
            raise AssertionError(f"no answer to {cmd}: {self._stderr()}") from None
        assert "error" not in answer, answer
        return answer

    def add(self, tag: str, task: str = "mail", **spec) -> str:
        return self.send(op="add", task=task, payload={"tag": tag, **({"fail": True} if tag == "bounce" else {})}, spec=spec)["added"]

    def ran(self, job_id: str) -> int:
        return sum(1 for line in list(self.lines) if line.get("ran") == job_id)

    def idle_after(self, job_id: str, times: int = 1) -> None:
        """Wait until the worker ran `job_id` (`times` in all) and then found nothing to fetch:
        it now waits its poll interval, unless a notification nudges it."""
        def settled():
            seen, lines = 0, list(self.lines)
            for i, line in enumerate(lines):
                if line.get("ran") == job_id:
                    seen += 1
                    if seen == times:
                        return any(later.get("idle") for later in lines[i + 1:])
            return False
        self.wait(lambda _: settled(), f"the worker to run {job_id} ({times}x) and go idle")

    def close(self) -> None:
        end_process(self.proc)


@pytest.fixture
def driver(db, node_peers):
    running = Driver(node_peers, db.dsn)
    yield running
    running.close()


def act(db, action: str, ids: list[str], expect: str | None = None, queue: str = "task:mail") -> list[str]:
    lib = LIBRARY("graphile_worker")
    with psycopg.connect(db.dsn, autocommit=True, row_factory=dict_row) as conn, conn.transaction():
        return lib.act(conn, queue, action, ids, expect)


def in_view(db, job_id: str):
    """The job as Graphile Worker's public `jobs` view shows it (None: not there)."""
    with db.connect() as conn:
        return conn.execute("SELECT attempts, max_attempts, last_error, run_at <= now() FROM graphile_worker.jobs WHERE id = %s",
                            (int(job_id),)).fetchone()


def test_each_action_as_graphile_worker_itself_then_runs_it(db, driver):
    in_an_hour = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    bounce = driver.add("bounce", maxAttempts=1)  # its task throws: failed for good on its first run
    later = driver.add("later", runAt=in_an_hour)
    moved = driver.add("moved", runAt=in_an_hour)
    cancel_me = driver.add("cancel-me")
    delete_me = driver.add("delete-me")
    control = driver.add("control")
    hold = driver.add("hold", task="hold")
    driver.send(op="hold")
    driver.wait(lambda line: line.get("holding") == hold, "the hold runner to lock its job")

    # Before any worker of `mail` runs: cancel and delete two ready jobs.
    assert act(db, "cancel", [cancel_me], "ready") == [cancel_me]
    assert act(db, "delete", [delete_me], "ready") == [delete_me]
    assert in_view(db, delete_me) is None  # completed = deleted: gone from Graphile Worker's jobs view
    assert in_view(db, cancel_me)[:3] == (25, 25, CANCEL_REASON)  # kept, failed for good
    # A job a worker holds: every action leaves it (Graphile Worker's functions skip locked jobs).
    for action in ("retry", "run-now", "cancel", "delete"):
        assert act(db, action, [hold], None, "task:hold") == [], action
    assert in_view(db, hold)[:3] == (1, 25, None)  # attempted once: running
    # Compare-and-set: listed delayed, then made due by Graphile Worker (rescheduleJobs): skipped.
    assert [j.id for j in read(db.target, lambda c: LIBRARY("graphile_worker").page(
        c, "task:mail", JobFilter(state="delayed"))).jobs] == [later, moved]
    driver.send(op="reschedule", ids=[moved], runAt=(datetime.now(UTC) - timedelta(seconds=1)).isoformat())
    assert act(db, "run-now", [moved], "delayed") == []
    # Not an action for these states (a ready job is no retry's; a dead one no run-now's).
    assert act(db, "retry", [control]) == [] and act(db, "run-now", [cancel_me]) == []

    # The worker: polls once an hour, so only a notification on jobs:insert makes it fetch again.
    driver.send(op="work", pollInterval=3_600_000)
    driver.wait(lambda line: line.get("listening"), "the worker to LISTEN")
    driver.idle_after(control)
    assert driver.ran(bounce) == 1 and driver.ran(moved) == 1
    wait_until(lambda: in_view(db, bounce)[:2] == (1, 1), what="the bounce to be failed for good")
    assert driver.ran(cancel_me) == 0 and driver.ran(delete_me) == 0

    with psycopg.connect(db.dsn, autocommit=True) as listener:
        listener.execute('LISTEN "jobs:insert"')
        # retry: the permanently failed job is due again with its attempts reset, and the worker
        # (idle for the next hour) is woken to run it.
        assert act(db, "retry", [bounce], "dead") == [bounce]
        [note] = list(listener.notifies(timeout=5, stop_after=1))
        assert note.channel == "jobs:insert" and json.loads(note.payload)["count"] == 1
    driver.idle_after(bounce, times=2)
    assert any(line.get("notified") == note.payload for line in driver.lines)  # the worker got that very payload
    # run-now: the job an hour ahead runs now.
    assert act(db, "run-now", [later], "delayed") == [later]
    driver.idle_after(later)
    # Cancelled: never run, kept failed for good with why; the held job untouched meanwhile.
    assert driver.ran(cancel_me) == 0 and driver.ran(delete_me) == 0 and driver.ran(hold) == 0
    assert in_view(db, cancel_me)[:3] == (25, 25, CANCEL_REASON)
    assert driver.ran(later) == 1 and driver.ran(bounce) == 2 and driver.ran(control) == 1


def test_a_list_no_index_leads_is_bounded_and_says_where_it_stopped(db, node_peers):
    driver = Driver(node_peers, db.dsn)
    try:
        first = driver.add("first")
    finally:
        driver.close()
    # Graphile Worker's add_jobs (what WorkerUtils.addJobs runs): the rows that fill one window.
    with db.connect() as conn:
        conn.execute("SELECT graphile_worker.add_jobs(array_agg(row('filler', json_build_object('n', n), NULL, now() + interval '1 hour',"
                     " NULL, NULL, NULL, NULL)::graphile_worker.job_spec)) FROM generate_series(1, %s) AS n", (SCAN_ROWS,))
        conn.execute("SELECT graphile_worker.add_job('mail', json_build_object('tag', 'needle'))")
        needle = str(conn.execute("SELECT max(id) FROM graphile_worker._private_jobs").fetchone()[0])
    lib = LIBRARY("graphile_worker")
    pages = every_page(db.target, "task:mail", JobFilter(), limit=50, lib=lib)
    assert [[j.id for j in p.jobs] for p in pages] == [[first], [needle]]
    # The first page read SCAN_ROWS jobs (its job and all but one filler) and said where it stopped.
    assert pages[0].note is not None and f"searched {SCAN_ROWS:,} jobs up to id" in pages[0].note
    assert pages[0].after == str(int(first) + SCAN_ROWS - 1) and pages[1].note is None
    # Newest first: the needle at once, then the bound.
    newest = every_page(db.target, "task:mail", JobFilter(text="NEEDLE"), limit=50, newest_first=True, lib=lib)
    assert [[j.id for j in p.jobs] for p in newest] == [[needle], []]
    assert newest[0].note is not None and newest[1].note is None
