"""Worker pools: exactly-once under concurrency, LISTEN/NOTIFY wake-up, idle cost, crash recovery
with kill -9 in both modes, crash loops dead-lettered. The tests that take `engine_db` are the
conformance suite's (PostgreSQL, and SQL Server when QUEUETOP_MSSQL_DSN is set)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from contextlib import contextmanager

import pytest

from bench.engine import queue_scans
from dbcore.errors import UsageError
from queues.handlers import parse_handler
from queues.table_queue import TableQueue
from queues.worker import WorkerPool, WorkOptions

from .conftest import REPO, wait_until
from .recorder import read_records

# The server matrix runs the marked tests on every supported major: the engine's guarantees, not
# its idle costs (the same statements on any server).


def fill(db, name, count):
    with db.connect() as conn:
        queue = TableQueue.create(conn, name)
        queue.enqueue_batch(conn, [json.dumps({"n": n}) for n in range(1, count + 1)])
        return queue


@contextmanager
def running(pool):
    """A started pool, stopped and joined however the test ends."""
    pool.start()
    try:
        yield pool
    finally:
        pool.stop()
        pool.join(10)


def count_sessions(conn, application_name_like, state):
    return conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE %s AND state = %s",
        (application_name_like, state),
    ).fetchone()[0]


class Recorder:
    def __init__(self):
        self.ids = []
        self.lock = threading.Lock()

    def __call__(self, message):
        with self.lock:
            self.ids.append(message.id)


@pytest.mark.matrix
@pytest.mark.parametrize(("mode", "batch", "prefetch"), [
    ("claim", 1, False), ("claim", 16, False), ("hold-transaction", 1, False), ("hold-transaction", 8, False),
    ("claim", 1, True), ("claim", 16, True),
])
def test_many_workers_process_every_message_exactly_once(db, mode, batch, prefetch):
    fill(db, "jobs", 1500)
    recorder = Recorder()
    # With --prefetch, 4 workers: single-message claims pipeline (and so prefetch) with 4 threads at most.
    options = WorkOptions(workers=4 if prefetch else 8, mode=mode, batch=batch, until_empty=True, prefetch=prefetch)
    pool = WorkerPool(db.target, "jobs", recorder, options)
    summary = pool.run()
    counts = Counter(recorder.ids)
    assert len(counts) == 1500 and set(counts.values()) == {1}
    assert summary.as_dict() == {"processed": 1500, "retried": 0, "dead": 0, "stale_acks": 0}
    with db.connect() as conn:
        assert TableQueue.open(conn, "jobs").counts(conn).depth == 0


@pytest.mark.parametrize(("batch", "prefetch"), [(5, False), (5, True), (1, True)])
def test_single_worker_processes_in_fifo_order(db, batch, prefetch):
    fill(db, "jobs", 300)
    recorder = Recorder()
    WorkerPool(db.target, "jobs", recorder, WorkOptions(workers=1, until_empty=True, batch=batch, prefetch=prefetch)).run()
    assert recorder.ids == list(range(1, 301))


@pytest.mark.matrix
@pytest.mark.parametrize(("mode", "prefetch"), [("claim", False), ("hold-transaction", False), ("claim", True)])
def test_failures_are_retried_then_dead_lettered(db, mode, prefetch):
    fill(db, "jobs", 40)
    summary = WorkerPool(
        db.target, "jobs", parse_handler("fail:1"),
        WorkOptions(workers=4, mode=mode, max_attempts=3, until_empty=True, prefetch=prefetch),
    ).run()
    assert summary.as_dict() == {"processed": 0, "retried": 80, "dead": 40, "stale_acks": 0}
    with db.connect() as conn:
        rows = conn.execute("SELECT attempts, last_error FROM queuetop.dead_letters WHERE queue = 'jobs'").fetchall()
    assert len(rows) == 40
    assert {r[0] for r in rows} == {3}
    assert all(r[1].startswith("HandlerFailure: fail:1.0 handler failed") for r in rows)


@pytest.mark.parametrize("batch", [1, 3])
def test_a_prefetching_pool_stops_with_nothing_left_claimed(db, batch):
    """--prefetch claims the next messages while those in hand are handled: a stop finishes both
    and acks them, so nothing stays hidden until its visibility ends."""
    fill(db, "jobs", 200)
    recorder = Recorder()

    def slow(message):
        recorder(message)
        threading.Event().wait(0.02)  # the handler's own work, during which the next claim is out

    pool = WorkerPool(db.target, "jobs", slow, WorkOptions(workers=2, batch=batch, prefetch=True, visibility_s=600))
    with running(pool):
        wait_until(lambda: len(recorder.ids) >= 10, timeout=20, what="some messages handled")
        with db.connect() as conn:
            queue = TableQueue.open(conn, "jobs")
            # Each worker holds what it handles and what it claimed ahead (a claim, as the server sees it).
            wait_until(lambda: queue.counts(conn).in_flight > 2 * batch, timeout=20, what="claims ahead of the handler")
    with db.connect() as conn:
        counts = TableQueue.open(conn, "jobs").counts(conn)
    assert counts.in_flight == 0  # every claimed message handled and acked before the pool ended
    assert counts.depth == 200 - len(recorder.ids) and len(set(recorder.ids)) == len(recorder.ids)
    assert pool.summary.processed == len(recorder.ids)


def test_prefetch_is_for_claim_mode(db):
    with pytest.raises(UsageError, match="--prefetch is for claim mode"):
        WorkOptions(mode="hold-transaction", prefetch=True).validate()


def test_without_notification_an_idle_pool_polls_once_per_interval_and_claims_through_plain_statements(db, monkeypatch):
    """SQL Server's way of working (no LISTEN/NOTIFY, no prepared hot path), run on PostgreSQL
    by turning those capabilities off: the pool's own behaviour, not SQL Server's cost. 8 idle
    workers at a 0.5 s poll interval send about 2 claims a second, not 16, with no listener
    session; a message is taken within about one interval; claims and acks go through the
    queue's ordinary statements."""
    import queues.worker
    from dbcore.dialect import Capabilities
    from dbcore.postgres import PostgresDialect

    monkeypatch.setattr(PostgresDialect, "capabilities", Capabilities(notify=False, arrays=True, prepared_hot_path=False))

    def no_hot_path(*_args):
        raise AssertionError("the prepared hot path was used")

    monkeypatch.setattr(queues.worker, "HotPath", no_hot_path)
    fill(db, "jobs", 0)
    recorder = Recorder()
    pool = WorkerPool(db.target, "jobs", recorder, WorkOptions(workers=8, poll_interval_s=0.5))
    with running(pool), db.connect() as conn:
        # Past their first claims (a session is idle at the start barrier too, before its first claim).
        wait_until(lambda: pool.polls >= 8 and count_sessions(conn, "queuetop-work:claim:jobs", "idle") == 8,
                   what="8 workers past their first claim, idle")
        assert count_sessions(conn, "queuetop-listen:%", "idle") == 0  # nobody listens
        polls_before, t0 = pool.polls, time.monotonic()
        threading.Event().wait(4.0)  # the measurement window itself, not a synchronisation
        claims_per_s = (pool.polls - polls_before) / (time.monotonic() - t0)
        assert 1.0 <= claims_per_s <= 3.0, claims_per_s
        queue = TableQueue.open(conn, "jobs")
        started = time.monotonic()
        message_id = queue.enqueue(conn, '{"polled": 1}')
        wait_until(lambda: recorder.ids == [message_id], timeout=10, what="the message taken by a poll")
        assert time.monotonic() - started < 0.5 + 1.5  # one interval, and some slack for a loaded machine
        wait_until(lambda: queue.counts(conn).depth == 0, timeout=10, what="the ack")


@pytest.mark.matrix
def test_idle_workers_wake_on_notify_not_on_poll(db):
    fill(db, "jobs", 0)
    pool = WorkerPool(db.target, "jobs", parse_handler("noop"), WorkOptions(workers=4, poll_interval_s=60))
    with running(pool), db.connect() as conn:
        wait_until(
            lambda: conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'queuetop-listen:claim:jobs' "
                "AND state = 'idle' AND query LIKE 'LISTEN%%'"
            ).fetchone()[0] == 1,
            what="listener",
        )
        queue = TableQueue.open(conn, "jobs")
        started = time.monotonic()
        queue.enqueue(conn, '{"wake": 1}')
        wait_until(lambda: pool.summary.processed == 1, timeout=10, what="processing after NOTIFY")
        # Far sooner than the 60 s poll interval: the notification woke a worker.
        assert time.monotonic() - started < 5


def test_idle_queue_costs_about_one_query_per_poll_interval(db):
    fill(db, "jobs", 0)
    pool = WorkerPool(db.target, "jobs", parse_handler("noop"), WorkOptions(workers=8, poll_interval_s=1.0))
    with running(pool), db.connect() as conn:
        queue = TableQueue.open(conn, "jobs")

        def scans():
            conn.execute("SELECT pg_stat_clear_snapshot()")
            return queue_scans(conn, queue)

        # Every worker's first claim made (a session is idle before it too, while its worker waits
        # at the start barrier: under load such first claims fell into the window), then all idle.
        wait_until(
            lambda: pool.polls >= 8 and count_sessions(conn, "queuetop-%:claim:jobs", "idle") == 9,
            what="8 workers past their first claim, idle, and the listener",
        )
        before, polls_before, t0 = scans(), pool.polls, time.monotonic()
        threading.Event().wait(6.0)  # the measurement window itself, not a synchronisation
        after, polls_after, t1 = scans(), pool.polls, time.monotonic()
    claims_per_s = (polls_after - polls_before) / (t1 - t0)
    scans_per_s = (after - before) / (t1 - t0)
    # 8 idle workers, 1 s poll interval: about one claim per second, not 8, not a busy loop;
    # the server agrees (each empty claim plans as a few scans of the table at most).
    assert 0.5 <= claims_per_s <= 1.5, claims_per_s
    assert scans_per_s <= 4 * 1.5, scans_per_s


def _start_worker(db, queue, *args, record_dir=None):
    env = {k: v for k, v in os.environ.items() if k != "QUEUETOP_DSN"}
    if record_dir:
        env["QT_RECORD_DIR"] = str(record_dir)
    return subprocess.Popen(
        [sys.executable, "-m", "tui", "engine", "work", queue, "--dsn", db.dsn, *args],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _finish(proc, timeout=60):
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    return json.loads(out.strip().splitlines()[-1])


def fill_ids(db, name, count):
    """A queue of `count` messages and their ids (ids only grow; on SQL Server they need not start at 1)."""
    with db.connect() as conn:
        queue = TableQueue.create(conn, name)
        return queue, [queue.enqueue(conn, json.dumps({"n": n})) for n in range(1, count + 1)]


@pytest.mark.matrix
def test_several_worker_processes_share_a_queue_exactly_once(engine_db, tmp_path):
    _, ids = fill_ids(engine_db, "jobs", 900)
    procs = [
        _start_worker(engine_db, "jobs", "--workers", "3", "--until-empty", "--handler", "tests.recorder:record", record_dir=tmp_path)
        for _ in range(3)
    ]
    summaries = [_finish(p) for p in procs]
    records = read_records(tmp_path)
    assert sorted(r[0] for r in records) == ids
    assert sum(s["processed"] for s in summaries) == 900


@pytest.mark.matrix
def test_kill_9_in_claim_mode_recovers_after_the_visibility_deadline(engine_db, tmp_path):
    db = engine_db
    queue, ids = fill_ids(db, "jobs", 8)
    victim = _start_worker(db, "jobs", "--workers", "4", "--handler", "sleep:120", "--visibility", "3")
    with db.connect() as conn:
        wait_until(lambda: queue.counts(conn).in_flight == 4, timeout=20, what="4 claimed messages")
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        killed_at = time.monotonic()
        # The dead worker's messages stay hidden until their deadline; the rest are ready.
        counts = queue.counts(conn)
        assert (counts.in_flight, counts.ready) == (4, 4)
    survivor = _start_worker(
        db, "jobs", "--workers", "4", "--until-empty", "--poll-interval", "0.2",
        "--handler", "tests.recorder:record", record_dir=tmp_path,
    )
    summary = _finish(survivor)
    assert summary["processed"] == 8
    records = read_records(tmp_path)
    assert sorted(r[0] for r in records) == ids
    assert sorted(r[1] for r in records) == [1, 1, 1, 1, 2, 2, 2, 2]  # four were second attempts
    assert time.monotonic() - killed_at >= 1.5  # had to wait for the visibility deadline


@pytest.mark.matrix
def test_kill_9_in_hold_transaction_mode_gives_messages_back_at_once(db):
    queue = fill(db, "jobs", 8)
    victim = _start_worker(db, "jobs", "--workers", "4", "--handler", "sleep:120", "--mode", "hold-transaction")
    with db.connect() as conn:
        wait_until(
            lambda: count_sessions(conn, "queuetop-work:hold-transaction:jobs", "idle in transaction") == 4,
            timeout=20,
            what="4 open transactions",
        )
        assert queue.counts(conn).depth == 8  # deletes not committed: still visible to others
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        # The server aborts the dead client's transactions as soon as it sees the socket close:
        # each of the 4 backends on its own, so a first claim may still skip a row that one of
        # them holds a moment longer. Every row is back within 3 s, each claimed once.
        claimed: list = []
        wait_until(lambda: claimed.extend(queue.claim(conn, visibility_s=30, batch=8)) or len(claimed) >= 8,
                   timeout=3, what="every row back")
        assert len(claimed) == 8 and len({m.id for m in claimed}) == 8


@pytest.mark.matrix
def test_crash_looping_message_is_dead_lettered_in_claim_mode(db):
    fill(db, "jobs", 1)
    crashes = 0
    for _ in range(6):
        proc = _start_worker(
            db, "jobs", "--handler", "crash:1", "--max-attempts", "2", "--visibility", "0.3",
            "--poll-interval", "0.1", "--until-empty",
        )
        out, err = proc.communicate(timeout=60)
        if proc.returncode == -signal.SIGKILL:
            crashes += 1
            continue
        assert proc.returncode == 1, err  # --until-empty: a message dead-lettered in this run is a failure
        assert json.loads(out.strip().splitlines()[-1])["dead"] == 1
        assert "1 message(s) of queue 'jobs' went to the dead-letter table" in err
        break
    assert crashes == 2
    with db.connect() as conn:
        attempts, error = conn.execute("SELECT attempts, last_error FROM queuetop.dead_letters").fetchone()
    assert attempts == 3 and "never completed" in error


# -- issue 15: a pool that does not give up -------------------------------------------------


def test_more_workers_than_connections_run_with_those_that_connect(db, cli, pg_server):
    """A role limited to 3 connections, a pool of 6 workers: the pool runs with the workers that
    got a connection, finishes the queue, exits 0, and says so in a line or two, not one per try."""
    role = f"qt_limited_work_{db.name}"[:60]
    with db.connect() as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN CONNECTION LIMIT 3')
        conn.execute(f'GRANT ALL ON SCHEMA queuetop TO "{role}"')
        conn.execute(f'GRANT ALL ON ALL TABLES IN SCHEMA queuetop TO "{role}"')
        conn.execute(f'GRANT ALL ON ALL SEQUENCES IN SCHEMA queuetop TO "{role}"')
        TableQueue.create(conn, "limited").enqueue_batch(conn, [json.dumps({"n": n}) for n in range(200)])
        conn.execute(f'GRANT ALL ON queuetop."q_limited" TO "{role}"')
    try:
        result = cli("engine", "work", "limited", "--workers", "6", "--until-empty", "--handler", "noop",
                     "--dsn", pg_server.uri(db.name, user=role), timeout=120)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout.splitlines()[-1])["processed"] == 200
        warnings = [line for line in result.stderr.splitlines() if "WARNING" in line]
        assert 1 <= len(warnings) <= 2, result.stderr  # "lost the database (too many connections ...)", not one per try
        assert "too many connections" in warnings[0]
    finally:
        with db.connect() as conn:
            conn.execute(f'DROP OWNED BY "{role}"')
            conn.execute(f'DROP ROLE IF EXISTS "{role}"')


def test_reconnect_back_off_is_capped_with_jitter():
    from queues.worker import RECONNECT_CAP_S, reconnect_delay

    first = [reconnect_delay(1) for _ in range(200)]
    assert 0.4 <= min(first) and max(first) <= 0.6 and len({round(d, 3) for d in first}) > 10  # jittered
    assert all(RECONNECT_CAP_S * 0.8 <= reconnect_delay(50) <= RECONNECT_CAP_S * 1.2 for _ in range(50))
    assert reconnect_delay(3) > reconnect_delay(1) * 2  # doubling (beyond the jitter)


def test_a_late_notice_of_a_told_outage_is_not_told_again(caplog):
    """The pool's link (queues/link.py): lost and back once per outage. A thread that finds, after
    the outage was told over, that its connection from before it was cut, goes down and comes
    back silently; if it then cannot connect either, that is a new outage, and is told."""
    import logging

    from queues.link import ConnectionState

    link = ConnectionState("queue q", logging.getLogger("queuetop.worker"))
    cut = ConnectionError("server closed the connection unexpectedly")
    refused = ConnectionError("Connection refused")
    with caplog.at_level(logging.WARNING, logger="queuetop.worker"):
        before = time.monotonic()  # the connections every thread opened at the start
        link.lost("listener", cut, opened_at=before)
        link.lost("worker 0", cut, opened_at=before)
        link.back("listener")
        link.back("worker 0")
        assert [r.getMessage() for r in caplog.records] == [
            "queue q: lost the database (server closed the connection unexpectedly); retrying",
            caplog.records[1].getMessage()]
        assert caplog.records[1].getMessage().startswith("queue q: the database answers again after ")
        link.lost("worker 1", cut, opened_at=before)  # busy in its handler: it notices only now
        link.back("worker 1")
        assert len(caplog.records) == 2 and not link.down
        link.lost("worker 2", cut, opened_at=before)  # another late one, whose reconnection fails:
        link.lost("worker 2", refused)  # the database is gone again
        assert len(caplog.records) == 3 and caplog.records[2].getMessage().endswith("(Connection refused); retrying")
        link.back("worker 2")
        assert len(caplog.records) == 4 and caplog.records[3].getMessage().startswith("queue q: the database answers again")
        reopened = time.monotonic()  # a connection opened after that outage began: its loss is news
        link.lost("worker 0", cut, opened_at=reopened)
        assert len(caplog.records) == 5 and link.down
