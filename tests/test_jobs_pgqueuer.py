"""The job console on PgQueuer (jobs/pgqueuer.py), against the real library (pgqueuer 1.6 over its
psycopg driver): its schema from its own install, jobs enqueued, failed, retried and cancelled
through its API, real QueueManager workers. Every list agrees with ground truth counted from its
tables and with the snapshot; every action is proved by PgQueuer afterwards: its worker runs the
retried and run-now jobs (woken by the notification, long before its poll), never a cancelled
one, cancels a running one through its own cancellation_event, and its API finds no deleted job."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from jobs.model import ActionRefused, JobFilter
from jobs.pgqueuer import PgQueuerJobs, contains, decode_payload, payload_pattern
from jobs.registry import library_for
from probes.sampler import run_cycle
from probes.session import open_probe_connection, probe_transaction

from .conftest import Database, Server, drop_database, make_database, wait_until
from .jobpages import act as act_on
from .jobpages import every_page, jobs_and_notes
from .oracle.pgqueuer import DEFAULT_SCHEMA, PgQueuer, Workload, build_small

pytestmark = pytest.mark.matrix  # the server matrix runs these on every supported major

pytest.importorskip("pgqueuer", reason="PgQueuer is a test dependency (pip install -e '.[test]')")

LIB = PgQueuerJobs(DEFAULT_SCHEMA)
STATES = ("ready", "delayed", "in_flight", "dead", "done")
RECORDER = "queuetop-test-recorder"  # the recording worker's session

# Ground truth of each state's job ids, from PgQueuer's dequeue (tests/oracle/pgqueuer.py's TRUTH;
# its workers' default heartbeat_timeout, 30 s).
TRUTH_IDS = """
SELECT 'ready', id FROM pgqueuer WHERE entrypoint = %(q)s AND ((status = 'queued' AND execute_after < now())
    OR (status = 'picked' AND heartbeat < now() - interval '30 seconds' AND execute_after < now()))
UNION ALL SELECT 'delayed', id FROM pgqueuer WHERE entrypoint = %(q)s AND status = 'queued' AND execute_after >= now()
UNION ALL SELECT 'in_flight', id FROM pgqueuer WHERE entrypoint = %(q)s AND status = 'picked'
    AND NOT (heartbeat < now() - interval '30 seconds' AND execute_after < now())
UNION ALL SELECT 'dead', id FROM pgqueuer WHERE entrypoint = %(q)s AND status = 'failed'
UNION ALL SELECT 'dead', job_id FROM pgqueuer_log WHERE entrypoint = %(q)s AND status = 'exception'
UNION ALL SELECT 'done', job_id FROM pgqueuer_log WHERE entrypoint = %(q)s AND status IN ('successful', 'canceled', 'deleted')
"""


@pytest.fixture(scope="module")
def small(pg_server: Server) -> Iterator[tuple[Database, Workload]]:
    """The oracle's small workload in `public` (every state, made by real workers; worker H keeps
    running two jobs of `running`)."""
    database = make_database(pg_server, prefix="pqj")
    workload = None
    try:
        workload = build_small(database.dsn, DEFAULT_SCHEMA)
        yield database, workload
    finally:
        if workload is not None:
            workload.close()
        with psycopg.connect(pg_server.admin_uri, autocommit=True) as admin:
            drop_database(admin, database.name)


@pytest.fixture
def pgq(db) -> Iterator[PgQueuer]:
    driven = PgQueuer(db.dsn, DEFAULT_SCHEMA)
    try:
        driven.install()
        yield driven
    finally:
        driven.close()


class Recorder:
    """A real QueueManager working `work` and `slow` (which runs until its Context.cancellation is
    cancelled), recording the ids it ran. `dequeue_timeout`: how long it waits for a notification
    before it polls again."""

    def __init__(self, pgq: PgQueuer, dequeue_timeout: float = 30) -> None:
        from pgqueuer.qm import QueueManager

        self.pgq = pgq
        self.ran: list[int] = []
        self.started: list[int] = []
        self.cancelled: list[int] = []
        conn = pgq.loop.run(psycopg.AsyncConnection.connect(pgq.dsn, autocommit=True, application_name=RECORDER))
        self.qm = QueueManager(pgq.queries(conn))

        @self.qm.entrypoint("work")
        async def work(job: Any) -> None:
            self.ran.append(job.id)

        @self.qm.entrypoint("slow", accepts_context=True)
        async def slow(job: Any, ctx: Any) -> None:
            self.started.append(job.id)
            with ctx.cancellation:
                await asyncio.sleep(60)
            if ctx.cancellation.cancel_called:
                self.cancelled.append(job.id)

        self.done = pgq.loop.spawn(self.qm.run(dequeue_timeout=timedelta(seconds=dequeue_timeout)))

    def stop(self) -> None:
        self.pgq.loop.call(self.qm.shutdown.set)
        self.done.result(60)

    def idle(self) -> None:
        """Wait until it waits: its loop's last query (QueueManager._effective_dequeue_timeout's
        next_deferred_eta, the next job being an hour away) answered, and nothing since."""
        self.pgq.wait_for("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state = 'idle'"
                          f" AND application_name = '{RECORDER}' AND query LIKE '%%execute_after - NOW() AS eta%%'",
                          (1,), "the worker waiting", timeout=20)


def page(db, queue: str, flt: JobFilter, lib: PgQueuerJobs = LIB, **kwargs: Any) -> Any:
    with open_probe_connection(db.target) as conn, probe_transaction(conn):
        return lib.page(conn, queue, flt, **kwargs)


def every(db, queue: str, flt: JobFilter, *, limit: int = 2, newest_first: bool = False,
          lib: PgQueuerJobs = LIB) -> tuple[list[Any], list[str]]:
    return jobs_and_notes(every_page(db.target, lib, queue, flt, limit=limit, newest_first=newest_first))


def act(db, queue: str, action: str, ids: list[Any], expect: str | None = None) -> list[str]:
    return act_on(db, LIB, queue, action, ids, expect)


def truth_ids(db, queue: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {s: set() for s in STATES}
    with db.connect() as conn:
        for state, job_id in conn.execute(TRUTH_IDS, {"q": queue}).fetchall():
            out[state].add(str(job_id))
    return out


def test_the_registry_serves_pgqueuer_with_this_module():
    assert library_for("pgqueuer") is PgQueuerJobs


def test_each_states_list_is_pgqueuers_own_and_the_snapshots(small):
    database, _ = small
    snap = {q.name: q for q in run_cycle(database.target).queues if q.source == "pgqueuer" and q.schema == DEFAULT_SCHEMA}
    assert set(snap) == {"mail", "reports", "held", "running", "orphaned"}
    for queue in (*snap, "archive"):
        ids = truth_ids(database, queue)
        for state in STATES:
            listed, notes = every(database, queue, JobFilter(state=state))
            assert notes == [], (queue, state)
            assert [j.id for j in listed] == sorted((j.id for j in listed), key=int)
            assert {j.id for j in listed} == ids[state] and len(listed) == len(ids[state]), (queue, state)
            assert {j.state for j in listed} <= {state} and all(j.kind == queue for j in listed)
            if queue in snap and state != "done":
                assert len(listed) == getattr(snap[queue], state), (queue, state)
        assert page(database, queue, JobFilter(state="blocked")).note is not None
    # PgQueuer's meaning, as the oracle built it.
    assert len(truth_ids(database, "orphaned")["ready"]) == 3  # two of them picked by a worker that died
    assert [j.status for j in every(database, "orphaned", JobFilter(state="ready"))[0]].count("picked") == 2
    assert {j.status for j in every(database, "mail", JobFilter(state="done"))[0]} == {"successful", "canceled"}
    assert {j.status for j in every(database, "held", JobFilter(state="dead"))[0]} == {"failed"}
    assert {j.status for j in every(database, "mail", JobFilter(state="dead"))[0]} == {"exception"}
    assert len(every(database, "archive", JobFilter(state="done"))[0]) == 3


def test_paging_visits_every_job_once_both_ways(small):
    database, _ = small
    ids = truth_ids(database, "mail")
    whole = set().union(*ids.values())
    oldest, _ = every(database, "mail", JobFilter(), limit=3)
    newest, _ = every(database, "mail", JobFilter(), limit=2, newest_first=True)
    assert [j.id for j in oldest] == sorted(whole, key=int)
    assert [j.id for j in newest] == sorted(whole, key=int, reverse=True)
    assert page(database, "mail", JobFilter(kind="reports")).jobs == []
    assert len(page(database, "mail", JobFilter(kind="mail"), limit=100).jobs) == len(whole)
    some = sorted(ids["delayed"], key=int)[0]
    assert [j.id for j in page(database, "mail", JobFilter(ids=(some, "x"))).jobs] == [some]


def test_job_shows_pgqueuers_errors_and_holder(small):
    database, _ = small
    with database.connect() as conn:
        [failed] = conn.execute("SELECT job_id FROM pgqueuer_log WHERE entrypoint = 'mail' AND status = 'exception'").fetchone()
        [retried] = conn.execute("SELECT id FROM pgqueuer WHERE entrypoint = 'mail' AND attempts = 1").fetchone()
        [finished] = conn.execute("SELECT job_id FROM pgqueuer_log WHERE entrypoint = 'archive' AND status = 'successful'"
                                  " ORDER BY job_id LIMIT 1").fetchone()
        held = [r[0] for r in conn.execute("SELECT id FROM pgqueuer WHERE entrypoint = 'held' AND status = 'failed'")]
        running = {r[0]: r[1] for r in conn.execute(
            "SELECT id, queue_manager_id::text FROM pgqueuer WHERE entrypoint = 'running' AND status = 'picked'")}
    with open_probe_connection(database.target) as conn, probe_transaction(conn):
        gone = LIB.job(conn, "mail", str(failed))
        again = LIB.job(conn, "mail", str(retried))
        kept = LIB.job(conn, "held", str(held[0]))
        runs = {i: LIB.job(conn, "running", str(i)) for i in running}
        done = LIB.job(conn, "archive", str(finished))
        assert LIB.job(conn, "reports", str(failed)) is None  # another entrypoint's
        assert LIB.job(conn, "mail", "987654") is None and LIB.job(conn, "mail", "x") is None
    assert gone is not None and (gone.state, gone.status, gone.args) == ("dead", "exception", None)
    assert gone.created_at is not None and gone.age_s is not None and gone.age_s >= 0
    assert [e["error"] for e in gone.errors] == ["ValueError: mail: mailbox full"] and gone.last_error == gone.errors[0]["error"]
    assert [s["status"] for s in gone.extra["log"]] == ["queued", "picked", "exception"]
    assert again is not None and again.state == "delayed" and again.attempts == 1
    assert [e["error"] for e in again.errors] == ["RetryRequested: smtp timeout"]
    assert kept is not None and (kept.state, kept.status, kept.args) == ("dead", "failed", "fail")
    assert kept.errors[-1]["error"] == "ValueError: held: mailbox full" and "raise ValueError" in kept.errors[-1]["traceback"]
    assert done is not None and (done.state, done.status, done.errors) == ("done", "successful", [])
    assert [s["status"] for s in done.extra["log"]] == ["queued", "picked", "successful"]
    for job_id, manager in running.items():
        job = runs[job_id]
        assert job is not None and (job.state, job.held_by, job.args) == ("in_flight", manager, "wait")


def test_search_by_payload_and_the_bounded_scan(pgq, db):
    ids = pgq.enqueue("found", 1, payload='{"to": "Ann@Example.com", "kind": "mail"}')
    ids += pgq.enqueue("found", 1, payload='{"to": "bob@example.com", "kind": "sms"}')
    ids += pgq.enqueue("found", 1, payload="plain text, 100% not JSON")
    ids += pgq.enqueue("other", 1, payload='{"kind": "mail"}')
    ids += pgq.enqueue("found", 1, payload='{"to": "zoë@example.com", "kind": "mail"}', delay=timedelta(hours=1))
    assert [j.id for j in every(db, "found", JobFilter(match={"kind": "mail"}))[0]] == [str(ids[0]), str(ids[4])]
    assert [j.id for j in every(db, "found", JobFilter(state="ready", match={"kind": "mail"}))[0]] == [str(ids[0])]
    assert [j.id for j in every(db, "found", JobFilter(text="ann@EXAMPLE"))[0]] == [str(ids[0])]
    assert [j.id for j in every(db, "found", JobFilter(text="100%"))[0]] == [str(ids[2])]
    assert [j.id for j in every(db, "found", JobFilter(text="zoë"))[0]] == [str(ids[4])]
    bounded = PgQueuerJobs(DEFAULT_SCHEMA)
    bounded.scan_rows = 2
    first = page(db, "found", JobFilter(match={"kind": "mail"}), bounded, limit=10)
    assert [j.id for j in first.jobs] == [str(ids[0])] and first.after == str(ids[1])
    assert first.note is not None and "read 2 jobs" in first.note
    found, notes = every(db, "found", JobFilter(match={"kind": "mail"}), limit=10, lib=bounded)
    assert [j.id for j in found] == [str(ids[0]), str(ids[4])] and notes
    # The helpers: jsonb's containment, the payload as arguments, the escaped pattern.
    assert contains({"a": [1, 2, {"b": True}]}, {"a": [{"b": True}]}) and contains([1, 2], 1)
    assert not contains({"a": 1}, {"a": True}) and not contains({"a": [1]}, {"a": 1})
    assert decode_payload(b'{"a": 1}') == {"a": 1} and decode_payload(b"\xff") == "\\xff"
    assert payload_pattern("a_b\\") == "%a\\_b\\\\\\\\%"


def test_actions_are_proved_by_pgqueuers_worker(pgq, db):
    later = pgq.enqueue("work", delay=timedelta(hours=1))[0]
    now = pgq.enqueue("work", delay=timedelta(hours=1))[0]
    cancelled = pgq.enqueue("work", delay=timedelta(hours=1))[0]
    deleted = pgq.enqueue("work", delay=timedelta(hours=1))[0]
    [failing] = pgq.enqueue("work", payload="fail")
    holding = pgq.worker({"work": {"on_failure": "hold"}})  # the oracle's worker: a `fail` payload raises
    pgq.wait_for(f"SELECT status::text FROM {{jobs}} WHERE id = {failing}", ("failed",), "its run failing (held)")
    holding.stop()
    pgq.workers.remove(holding)
    assert [j.id for j in page(db, "work", JobFilter(state="dead")).jobs] == [str(failing)]
    # It polls every 30 s (its next job is an hour away): only a notification wakes it sooner.
    worker = Recorder(pgq, dequeue_timeout=30)
    try:
        worker.idle()
        assert act(db, "work", "run-now", [now], expect="delayed") == [str(now)]
        wait_until(lambda: worker.ran == [now], timeout=10, what="the worker woken for the run-now job")
        assert act(db, "work", "retry", [failing], expect="dead") == [str(failing)]
        wait_until(lambda: worker.ran == [now, failing], timeout=10, what="the worker running the retried job")
        assert act(db, "work", "cancel", [cancelled], expect="delayed") == [str(cancelled)]
        assert act(db, "work", "delete", [deleted]) == [str(deleted)]
        # Run now: the one left of the three; the cancelled and the deleted one are gone.
        assert act(db, "work", "run-now", [cancelled, deleted, later]) == [str(later)]
        wait_until(lambda: worker.ran[2:] == [later], timeout=10, what="the worker running the last one")
    finally:
        worker.stop()  # (its log buffer flushed as it stops)
    assert worker.ran == [now, failing, later]  # never the cancelled or the deleted one
    # PgQueuer's own API: no such jobs; its log says what became of them.
    q = pgq.q

    async def status() -> Any:
        return (await q.queue_job_by_id(cancelled), await q.queue_job_by_id(deleted),
                dict(await q.job_status([cancelled, deleted, now, failing])))

    by_id_cancelled, by_id_deleted, statuses = pgq.loop.run(status())
    assert by_id_cancelled is None and by_id_deleted is None
    assert statuses == {cancelled: "canceled", deleted: "deleted", now: "successful", failing: "successful"}
    assert page(db, "work", JobFilter(state="delayed")).jobs == []


def test_cancelling_a_running_job_reaches_its_worker(pgq, db):
    [running] = pgq.enqueue("slow")
    worker = Recorder(pgq, dequeue_timeout=30)
    try:
        wait_until(lambda: worker.started == [running], timeout=20, what="the slow job running")
        assert [j.id for j in page(db, "slow", JobFilter(state="in_flight")).jobs] == [str(running)]
        assert act(db, "slow", "delete", [running]) == []  # a worker has it: not deleted under it
        assert act(db, "slow", "cancel", [running], expect="in_flight") == [str(running)]
        wait_until(lambda: worker.cancelled == [running], timeout=10, what="the worker cancelling its running job")
    finally:
        worker.stop()
    with db.connect() as conn:
        assert conn.execute("SELECT count(*) FROM pgqueuer").fetchone() == (0,)
        assert conn.execute("SELECT status::text FROM pgqueuer_log WHERE job_id = %s ORDER BY id", (running,)).fetchall() == [
            ("queued",), ("picked",), ("canceled",)]


def test_compare_and_set_skips_what_changed(pgq, db):
    [waiting] = pgq.enqueue("cas", delay=timedelta(hours=1))
    [due] = pgq.enqueue("cas")
    assert [j.id for j in page(db, "cas", JobFilter(state="delayed")).jobs] == [str(waiting)]
    pgq.cancel([waiting])  # PgQueuer's own cancel, after the listing
    assert act(db, "cas", "run-now", [waiting], expect="delayed") == []
    assert act(db, "cas", "run-now", [due]) == []  # due already: not delayed
    assert act(db, "cas", "retry", [due]) == []  # not a held failure
    assert act(db, "cas", "cancel", [due], expect="delayed") == []  # listed as delayed, it is ready
    assert act(db, "cas", "delete", [due], expect="ready") == [str(due)]
    assert act(db, "cas", "delete", [due]) == []  # gone
    assert act(db, "other", "delete", [waiting, "nope"]) == []


def test_a_failed_and_deleted_job_cannot_be_retried_and_pause_is_refused(small):
    database, _ = small
    with database.connect() as conn:
        [failed] = conn.execute("SELECT job_id FROM pgqueuer_log WHERE entrypoint = 'mail' AND status = 'exception'").fetchone()
    assert [j.id for j in page(database, "mail", JobFilter(state="dead")).jobs] == [str(failed)]
    with database.connect(row_factory=psycopg.rows.dict_row) as conn:
        with conn.transaction(force_rollback=True):
            assert LIB.act(conn, "mail", "retry", [str(failed)], "dead") == []  # its payload went with it
            assert LIB.act(conn, "mail", "delete", [str(failed)], "dead") == []  # only its log row is left
        with pytest.raises(ActionRefused, match="no paused entrypoint"):
            LIB.pause(conn, "mail", True)
    assert PgQueuerJobs.pause_mirrors is None and set(PgQueuerJobs.mirrors) == {"retry", "run-now", "cancel", "delete"}


def test_the_notifications_its_workers_listen_for(pgq, db):
    """On `ch_pgqueuer` (read from its trigger function), the payloads PgQueuer's listener parses:
    a table_changed_event after a run-now or retry (its trigger sends none for an UPDATE), its
    cancellation_event with the ids after a cancel."""
    from pgqueuer.domain.models import AnyEvent, CancellationEvent, TableChangedEvent

    [waiting] = pgq.enqueue("loud", delay=timedelta(hours=1))
    [doomed] = pgq.enqueue("loud", delay=timedelta(hours=1))
    with psycopg.connect(db.dsn, autocommit=True) as listener:
        listener.execute("LISTEN ch_pgqueuer")
        with db.connect() as conn:
            conn.execute("UPDATE pgqueuer SET updated = now() WHERE id = %s", (waiting,))
        assert list(listener.notifies(timeout=0.3)) == []  # PgQueuer's own trigger: nothing for an UPDATE
        assert act(db, "loud", "run-now", [waiting]) == [str(waiting)]
        [changed] = [AnyEvent.model_validate_json(n.payload).root for n in listener.notifies(timeout=5, stop_after=1)]
        assert isinstance(changed, TableChangedEvent) and (changed.operation, changed.table) == ("update", "pgqueuer")
        assert act(db, "loud", "cancel", [doomed]) == [str(doomed)]
        events = [AnyEvent.model_validate_json(n.payload).root for n in listener.notifies(timeout=5, stop_after=2)]
        cancellations = [e for e in events if isinstance(e, CancellationEvent)]
        assert [e.ids for e in cancellations] == [[doomed]]
        assert [e.operation for e in events if isinstance(e, TableChangedEvent)] == ["delete"]  # its trigger, on the DELETE


def test_the_command_line_lists_shows_and_acts(small, cli, tmp_path):
    """`queuetop jobs` on a PgQueuer entrypoint, end to end: the dead list and a job with its
    errors and log as JSON; pause refused with why (exit 2)."""
    import json

    database, _ = small
    env = {"QUEUETOP_AUDIT": str(tmp_path / "audit.jsonl")}
    ids = truth_ids(database, "held")
    listed = cli("jobs", "list", "held", "--dsn", database.dsn, "--state", "dead", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    page_ = json.loads(listed.stdout)
    assert page_["source"] == "pgqueuer" and {j["id"] for j in page_["jobs"]} == ids["dead"]
    shown = cli("jobs", "show", "held", sorted(ids["dead"])[0], "--dsn", database.dsn, "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    job = json.loads(shown.stdout)["job"]
    assert job["state"] == "dead" and job["errors"][-1]["error"] == "ValueError: held: mailbox full"
    assert [s["status"] for s in job["extra"]["log"]] == ["queued", "picked", "failed"]
    paused = cli("jobs", "pause", "held", "--dsn", database.dsn, "--yes", env=env)
    assert paused.returncode == 2 and "no paused entrypoint" in paused.stderr
