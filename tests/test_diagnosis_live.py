"""Queue verdicts on a real server (issues 29 and 43): the engine's queue with ready messages and
nobody on its table (from one sample, a one-shot `queuetop snapshot --json` too), a consumer
blocked behind a session that locked the table and went idle in its transaction, a migration's
ACCESS EXCLUSIVE lock on a queue's table (the engine's, a declared table's) that keeps its figures
from being read, a consumer holding the xmin horizon while it waits behind an idle transaction, a
standby's feedback holding it, and a backlog growing under bursts while a slower consumer drains
it. What the verdict names is checked against what the test built and what the server says
(pg_locks, pg_blocking_pids, pg_stat_activity's xmin). The last three hold a condition for their
rule's minimum (30 s, 10 s): marked `timed` too."""

from __future__ import annotations

import json
import threading
import time
from itertools import pairwise

import psycopg
import pytest
from psycopg import sql

from probes.config import Config, DeclaredQueue
from probes.diagnosis import HORIZON_HELD_S, MIN_WAIT_S, SATURATED_MIN_S, Diagnoser
from probes.sampler import probes_for, run_cycle
from queues.handlers import parse_handler
from queues.poolparts import WorkOptions
from queues.table_queue import TableQueue
from queues.worker import WorkerPool

from .conftest import flush_stats, wait_until
from .test_conformance_probes import IDLE_WITH_OPEN_TRANSACTION, Waiter
from .test_xmin_horizon import next_xid, oldest_running, standby

pytestmark = pytest.mark.matrix  # the server matrix runs these on every supported major


def verdict_of(snapshot, name):
    (queue,) = [q for q in snapshot.queues if q.name == name and q.source == "reference"]
    return queue


def test_ready_messages_with_nobody_on_the_table_are_no_consumers(engine_db):
    with engine_db.connect() as conn:
        queue = TableQueue.create(conn, "orphan")
        for n in range(3):
            queue.enqueue(conn, f'{{"n": {n}}}')
    diagnoser = Diagnoser()
    first = verdict_of(run_cycle(engine_db.target, diagnoser=diagnoser), "orphan")
    assert first.diagnosis.code == "no-consumers" and first.consumers == ()  # what one sample shows is said from one
    second = verdict_of(run_cycle(engine_db.target, diagnoser=diagnoser), "orphan")
    assert second.diagnosis.code == "no-consumers", second.diagnosis
    assert "3 ready" in second.diagnosis.reason and second.diagnosis.since_s is not None and second.diagnosis.since_s >= 0


def test_a_consumer_waiting_behind_an_idle_transaction_is_blocked_by_it(engine_db):
    with engine_db.connect() as conn:
        queue = TableQueue.create(conn, "stuck")
        queue.enqueue(conn, '{"n": 1}')
    blocker = engine_db.connect()
    try:
        with blocker.transaction():
            blocker.execute(queue.statement_for(blocker, "block_table"))  # then does nothing: idle, transaction open
            waiter = Waiter(engine_db, lambda s: queue.claim(s, visibility_s=30))
            wait_until(lambda: run_cycle(engine_db.target).blocked, timeout=20, what="the consumer blocked")
            diagnoser = Diagnoser()
            snapshots = [run_cycle(engine_db.target, diagnoser=diagnoser) for _ in range(2)]
            stuck = verdict_of(snapshots[-1], "stuck")
            roots = {b.pid: b for b in snapshots[-1].blockers}
            (waiting,) = [b for b in snapshots[-1].blocked if b.root_blocker in roots]
            assert stuck.diagnosis.code == "blocked", stuck.diagnosis
            assert stuck.diagnosis.pids[0] == waiting.root_blocker  # the root blocker first
            assert waiting.pid in stuck.diagnosis.pids
            assert IDLE_WITH_OPEN_TRANSACTION[engine_db.dialect] in stuck.diagnosis.reason
            consumer = next(c for c in stuck.consumers if c.pid == waiting.pid)
            assert consumer.waiting and consumer.evidence == "lock"
    finally:
        blocker.close()
    waiter.finish()


# -- one sample: what it shows is said, the rest is not judged (issue 43, point 3) -------------------

def test_a_one_shot_snapshot_says_no_consumers_for_ready_messages_nobody_takes(db, cli):
    with db.connect() as conn:
        queue = TableQueue.create(conn, "unserved")
        queue.enqueue_batch(conn, [json.dumps({"n": n}) for n in range(20)])
        TableQueue.create(conn, "idle")  # empty: nothing wrong seen, but not judged in one sample either
    result = cli("snapshot", "--json", "--dsn", db.dsn)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    queues = {(q["source"], q["name"]): q for q in document["queues"]}
    unserved = queues["reference", "unserved"]
    assert unserved["ready"] == 20 and unserved["consumers"] == []
    assert unserved["diagnosis"]["code"] == "no-consumers", unserved["diagnosis"]
    assert unserved["diagnosis"]["reason"].startswith("20 ready and no session takes them")
    idle = queues["reference", "idle"]["diagnosis"]
    assert idle["code"] == "not-judged" and idle["reason"].startswith("one sample: rates and growth need two")
    assert all(q["diagnosis"]["code"] != "healthy" for q in document["queues"])  # no calm that was not judged


# -- a migration's lock on a queue's table (point 2) -------------------------------------------------

MAIL_TABLE = "public.mail_jobs"


def make_locked_queue(db, where: str) -> tuple[str, str, Config | None, str]:
    """A queue with 5 ready messages: the engine's, or a declared table's. Its name as listed, its
    source, the config that declares it, and its table for LOCK TABLE."""
    with db.connect() as conn:
        if where == "reference":
            queue = TableQueue.create(conn, "migrating")
            queue.enqueue_batch(conn, [json.dumps({"n": n}) for n in range(5)])
            return "migrating", "reference", None, queue.qualified_name
        conn.execute(f"CREATE TABLE {MAIL_TABLE} (id bigserial PRIMARY KEY, queued_at timestamptz NOT NULL DEFAULT now())")
        conn.execute(f"INSERT INTO {MAIL_TABLE} SELECT FROM generate_series(1, 5)")
    return "mail", "table", Config(queues=(DeclaredQueue(name="mail", table=MAIL_TABLE, order_by="id", age_column="queued_at"),)), \
        MAIL_TABLE


@pytest.mark.parametrize("where", ["reference", "declared"])
def test_a_table_held_access_exclusive_by_an_idle_transaction_is_blocked_by_it_though_its_figures_are_unknown(db, cli, where):
    name, source, config, table = make_locked_queue(db, where)
    migration = db.connect(autocommit=False, application_name="qt-migration")
    admin = db.connect()
    try:
        migration.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")  # then does nothing: idle in its transaction
        pid = migration.info.backend_pid
        held = admin.execute("SELECT pid, mode, granted FROM pg_locks WHERE locktype = 'relation' AND relation = %s::regclass "
                             "AND mode = 'AccessExclusiveLock'", (table,)).fetchall()
        assert held == [(pid, "AccessExclusiveLock", True)]  # the server's own word

        def judged():
            snapshot = run_cycle(db.target, config)
            (q,) = [q for q in snapshot.queues if q.source == source and q.name == name]
            return q if q.diagnosis.code == "blocked" else None

        # A lock held MIN_WAIT_S (its transaction that old): the verdict, from one sample.
        q = wait_until(judged, timeout=MIN_WAIT_S + 20, interval=0.3, what="the blocked verdict")
        assert q.diagnosis.pids[0] == pid
        assert f"pid {pid}, idle in transaction, application qt-migration" in q.diagnosis.reason
        assert "holding ACCESS EXCLUSIVE on" in q.diagnosis.reason
        assert [(lock.pid, lock.mode) for lock in q.lockers] == [(pid, "AccessExclusiveLock")]
        # Its figures could not be read (the probe's read gave up on its lock_timeout): unknown, not 0.
        assert q.depth is None and q.ready is None and q.error and "lock timeout" in q.error
        # The one-shot snapshot says the same, with its figures null.
        result = cli("snapshot", "--json", "--dsn", db.dsn, *(() if config is None else ("--config", write_config(db, config))))
        assert result.returncode == 0, result.stderr
        (listed,) = [q for q in json.loads(result.stdout)["queues"] if q["source"] == source and q["name"] == name]
        assert listed["depth"] is None and listed["ready"] is None
        assert listed["diagnosis"]["code"] == "blocked" and listed["diagnosis"]["pids"][0] == pid
        assert "ACCESS EXCLUSIVE" in listed["diagnosis"]["reason"]
    finally:
        migration.close()
        admin.close()
    # The lock gone: its figures are read again, and it is no longer blocked.
    (q,) = [q for q in run_cycle(db.target, config).queues if q.source == source and q.name == name]
    assert q.depth == 5 and q.diagnosis.code == "no-consumers" and not q.lockers


def write_config(db, config: Config) -> str:
    """The declared queue as a config file for the CLI (TOML), beside the test's database name."""
    import tempfile

    (declared,) = config.queues
    handle = tempfile.NamedTemporaryFile("w", suffix=f"-{db.name}.toml", delete=False)
    with handle:
        handle.write(f'[[queues]]\nname = "{declared.name}"\ntable = "{declared.table}"\norder_by = "{declared.order_by}"\n'
                     f'age_column = "{declared.age_column}"\n')
    return handle.name


# -- the chain behind bloat (point 4) -----------------------------------------------------------------

def churn(conn: psycopg.Connection, queue: TableQueue, rows: int = 200) -> None:
    """Messages in and out of a queue's table: dead tuples nobody may remove under a held horizon."""
    queue.enqueue_batch(conn, ["{}"] * rows)
    conn.execute(sql.SQL("DELETE FROM {}").format(sql.Identifier("queuetop", queue.table_name)))
    flush_stats(conn)


def watch_until(db, queue_name: str, code: str, timeout: float, step=None, interval: float = 1.0):
    """Sample as a dashboard does (one probes object, one Diagnoser) every `interval`, running
    `step` before each, until the reference queue `queue_name` is judged `code`."""
    probes, diagnoser = probes_for(db.target), Diagnoser()
    deadline = time.monotonic() + timeout
    seen = []
    while True:
        if step is not None:
            step()
        snapshot = run_cycle(db.target, probes=probes, diagnoser=diagnoser)
        q = verdict_of(snapshot, queue_name)
        seen.append(q)
        if q.diagnosis.code == code:
            return snapshot, q, seen
        assert time.monotonic() < deadline, f"no {code} in {timeout} s: {[(s.depth, s.diagnosis.code) for s in seen[-5:]]}"
        threading.Event().wait(interval)


@pytest.mark.timed  # the horizon held HORIZON_HELD_S
def test_bloat_behind_a_consumer_that_holds_the_horizon_while_it_waits_names_its_root_blocker_first(db):
    """B, a consumer of another queue, took a snapshot (REPEATABLE READ) and then waits for a row A
    holds, idle in its transaction: B's snapshot holds the horizon, and A holds B. The bloating
    queue's verdict names A first, B beside it."""
    with db.connect() as conn:
        churned = TableQueue.create(conn, "churned")
        other = TableQueue.create(conn, "other")
        other.enqueue(conn, '{"n": 1}')
        row = conn.execute(sql.SQL("SELECT min(id) FROM {}").format(sql.Identifier("queuetop", other.table_name))).fetchone()[0]
    other_table = sql.Identifier("queuetop", other.table_name)
    b = db.connect(autocommit=False, application_name="qt-consumer")
    b.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    a = db.connect(autocommit=False, application_name="qt-forgotten")
    admin = db.connect()
    waiting = None
    try:
        b.execute(sql.SQL("SELECT count(*) FROM {}").format(other_table))  # its snapshot: the horizon from here
        next_xid(admin)  # A's transaction id comes after B's snapshot (else the same: a tie the probe may break either way)
        a.execute(sql.SQL("SELECT id FROM {} WHERE id = %s FOR UPDATE").format(other_table), (row,))  # a row lock, then idle
        errors: list[BaseException] = []

        def consume() -> None:
            try:
                b.execute(sql.SQL("DELETE FROM {} WHERE id = %s").format(other_table), (row,))
            except psycopg.Error as exc:  # (its snapshot is older than A's rollback: a serialization failure is fine)
                errors.append(exc)

        waiting = threading.Thread(target=consume, daemon=True)
        waiting.start()
        a_pid, b_pid = a.info.backend_pid, b.info.backend_pid
        wait_until(lambda: admin.execute("SELECT pg_blocking_pids(%s)", (b_pid,)).fetchone()[0] == [a_pid], what="B waits for A")
        with db.connect() as writer:
            snapshot, q, _seen = watch_until(db, "churned", "bloat", HORIZON_HELD_S + 30, step=lambda: churn(writer, churned))
        assert snapshot.connections.xmin_holder_pid == b_pid  # the probe's holder: B, the victim
        assert q.diagnosis.pids[:2] == (a_pid, b_pid), q.diagnosis  # the root first
        assert f"pid {b_pid}, active, application qt-consumer" in q.diagnosis.reason
        assert f"itself waiting for a lock held by pid {a_pid}, idle in transaction, application qt-forgotten" in q.diagnosis.reason
        # The server's own words: B's snapshot is the oldest horizon, and A blocks B.
        xmins = dict(admin.execute("SELECT pid, age(backend_xmin) FROM pg_stat_activity WHERE backend_xmin IS NOT NULL "
                                   "AND datname = current_database()").fetchall())
        assert max(xmins, key=xmins.__getitem__) == b_pid
        assert admin.execute("SELECT pg_blocking_pids(%s)", (b_pid,)).fetchone()[0] == [a_pid]
    finally:
        a.close()
        if waiting is not None:
            waiting.join(30)
        b.close()
        admin.close()


@pytest.mark.timed  # the horizon's age known past HORIZON_HELD_S
def test_bloat_behind_a_standbys_feedback_names_the_standby_and_the_horizons_age(db):
    """A standby's hot_standby_feedback (no slot) holds the horizon through its walsender, which
    has no transaction: the verdict names the standby, where it connects from, and how old the
    horizon is in time (the probe's own history of transaction ids) and in transactions."""
    with db.connect() as conn:
        churned = TableQueue.create(conn, "fed")
    admin = db.connect()
    try:
        with standby(db, admin, slot=False) as (walsender, _slot):
            held = oldest_running(admin)
            walsender.feedback(held)
            wait_until(lambda: admin.execute("SELECT backend_xmin::text::bigint FROM pg_stat_activity WHERE pid = %s",
                                             (walsender.pid,)).fetchone()[0] == held & 0xFFFFFFFF, what="the walsender's xmin")
            next_xid(admin)
            with db.connect() as writer:
                snapshot, q, seen = watch_until(db, "fed", "bloat", HORIZON_HELD_S + 30, step=lambda: churn(writer, churned))
            c = snapshot.connections
            assert (c.xmin_holder_kind, c.xmin_holder_pid, c.xmin_holder_name) == ("standby", walsender.pid, "qt-standby")
            assert q.diagnosis.objects[-1] == "standby:qt-standby" and q.diagnosis.pids == ()
            assert "standby feedback from qt-standby at local (horizon at least" in q.diagnosis.reason
            assert c.xmin_holder_age_s is not None and c.xmin_holder_age_s >= HORIZON_HELD_S
            # Not before the horizon was known to be that old (a standby's feedback moves, as a rule).
            assert all(s.diagnosis.code != "bloat" for s in seen[:-1])
    finally:
        admin.close()


# -- behind under bursts (point 4) ---------------------------------------------------------------------

@pytest.mark.timed  # a backlog growing SATURATED_MIN_S
def test_a_backlog_growing_under_bursts_while_a_slower_consumer_drains_it_is_behind(db):
    """A producer thread puts 1,200 messages every 2 s; one worker takes them one by one at a few
    hundred a second: the backlog falls between bursts and grows over the window. One falling
    sample used to reset the rule."""
    with db.connect() as conn:
        TableQueue.create(conn, "bursty")
    stop = threading.Event()
    produced = [0]

    def produce() -> None:
        with db.connect() as conn:
            queue = TableQueue.open(conn, "bursty")
            while not stop.is_set():
                produced[0] += queue.enqueue_batch(conn, ["{}"] * 1200)
                stop.wait(2.0)

    producer = threading.Thread(target=produce, daemon=True)
    pool = WorkerPool(db.target, "bursty", parse_handler("sleep:0.004"), WorkOptions(workers=1, poll_interval_s=0.5))
    pool.start()
    producer.start()
    try:
        snapshot, q, seen = watch_until(db, "bursty", "saturated", SATURATED_MIN_S + 30, interval=0.5)
        depths = [s.depth for s in seen]
        assert any(later < earlier for earlier, later in pairwise(depths)), depths  # it fell between bursts
        assert q.depth > depths[0] + 1000 and pool.summary.processed > 0  # and grew, consumed all along
        workers = {s.pid for s in snapshot.sessions if (s.application or "").startswith("queuetop-work")}
        assert set(q.diagnosis.pids) & workers, (q.diagnosis, workers)
        assert "/min in" in q.diagnosis.reason and "consumer" in q.diagnosis.reason
    finally:
        stop.set()
        producer.join(30)
        pool.stop()
        pool.join(30)
