"""The fault suite (marked `faults`; part of `make test`): worker process groups killed -9 at random
moments, immediate server restarts mid-run with a producer writing, the server down for longer
than any timeout, max_connections exhausted. Each test runs on a private embedded PostgreSQL that
it may stop and restart (never the suite's shared server), and runs both processing modes side by
side, against the real `queuetop engine work` and `engine enqueue` commands.

Every message is recorded by the handler (`tests.recorder:record`) when it has been processed,
before its ack. So "lost" is a message enqueued (by a command that exited 0) that no handler ever
recorded, and "duplicated" a message recorded more than once: at-least-once delivery allows that,
within a bound each test states. Each test adds its figures to the `fault suite` section of
pytest's summary, which docs/reliability.md quotes."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import psycopg
import pytest
from psycopg import sql

from queues.table_queue import TableQueue
from queues.worker import RECONNECT_CAP_S

from .conftest import REPO, Database, PrivateServer, report_fault, wait_until
from .recorder import read_records

pytestmark = pytest.mark.faults

MODES = ("claim", "hold-transaction")
MAX_CONNECTIONS = 40  # the private server's; small, so that the exhaustion test can fill it
RESERVED = 3  # superuser_reserved_connections (the default): slots only superusers may take


@pytest.fixture(scope="module")
def fault_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateServer]:
    server = PrivateServer(tmp_path_factory.mktemp("faults") / "data", max_connections=MAX_CONNECTIONS, reserved=RESERVED)
    yield server
    server.cleanup()


@pytest.fixture
def fault_db(fault_server: PrivateServer) -> Iterator[Database]:
    yield fault_server.database()
    while Pool.started:  # a test that failed leaves no pool running
        pool = Pool.started.pop()
        if pool.alive():
            pool.kill_group()


# -- the parts ------------------------------------------------------------------------------------


def _env(record_dir: Path, work_s: float) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "QUEUETOP_DSN"}
    env.update(QT_RECORD_DIR=str(record_dir), QT_RECORD_WORK_S=str(work_s))
    return env


class Pool:
    """One `queuetop engine work` process in a process group of its own (kill -9 reaches all of
    it), its output in files (a pipe nobody reads could block it)."""

    _serial = 0
    started: ClassVar[list[Pool]] = []  # every pool a test started, killed at its end if still alive

    def __init__(self, dsn: str, queue: str, mode: str, record_dir: Path, *args: str, work_s: float = 0.005) -> None:
        Pool._serial += 1
        self.mode = mode
        self.out_path = record_dir.parent / f"{record_dir.name}-{Pool._serial}.out"
        self.err_path = record_dir.parent / f"{record_dir.name}-{Pool._serial}.err"
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tui", "engine", "work", queue, "--dsn", dsn, "--mode", mode,
                 "--handler", "tests.recorder:record", "--poll-interval", "0.2", *args],
                cwd=REPO, env=_env(record_dir, work_s), stdout=out, stderr=err, start_new_session=True,
            )
        Pool.started.append(self)

    def kill_group(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def finish(self, timeout: float = 120) -> dict[str, int]:
        """Wait for the exit; the pool must end well and say what it did on its last line."""
        rc = self.proc.wait(timeout)
        err = self.stderr()
        assert rc == 0, f"{self.mode} pool exited {rc}: {err[-3000:]}"
        assert "Traceback" not in err, err
        return json.loads(self.out_path.read_text().splitlines()[-1])

    def stderr(self) -> str:
        return self.err_path.read_text()

    def warnings(self) -> list[str]:
        return [line for line in self.stderr().splitlines() if line.strip()]


def _fill(db: Database, queue: str, count: int) -> list[int]:
    with db.connect() as conn:
        table_queue = TableQueue.create(conn, queue)
        table_queue.enqueue_batch(conn, [json.dumps({"n": n}) for n in range(count)])
        return [row[0] for row in conn.execute(sql.SQL("SELECT id FROM {}").format(sql.Identifier("queuetop", f"q_{queue}")))]


def _left(db: Database, queue: str) -> tuple[int, int]:
    """(messages still in the queue, dead letters), asked on a new connection each time: the server
    may just have come back."""
    with db.connect(connect_timeout=5) as conn:
        depth = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier("queuetop", f"q_{queue}"))).fetchone()
        dead = conn.execute("SELECT count(*) FROM queuetop.dead_letters WHERE queue = %s", (queue,)).fetchone()
    assert depth is not None and dead is not None
    return depth[0], dead[0]


def _left_or_none(db: Database, queue: str) -> tuple[int, int] | None:
    try:
        return _left(db, queue)
    except psycopg.OperationalError:
        return None


def _recorded(record_dir: Path) -> int:
    return len(read_records(record_dir))


@dataclass
class Deliveries:
    """What the handlers recorded against what was enqueued."""

    expected: set[int]
    counts: Counter[int] = field(default_factory=Counter)

    @classmethod
    def read(cls, record_dir: Path, expected: set[int]) -> Deliveries:
        return cls(expected, Counter(record[0] for record in read_records(record_dir)))

    @property
    def lost(self) -> set[int]:
        return self.expected - set(self.counts)

    @property
    def unknown(self) -> set[int]:
        return set(self.counts) - self.expected

    @property
    def duplicated(self) -> int:
        """Messages processed more than once."""
        return sum(1 for n in self.counts.values() if n > 1)

    @property
    def extra_deliveries(self) -> int:
        return sum(n - 1 for n in self.counts.values() if n > 1)


# -- the faults -----------------------------------------------------------------------------------


KILLS_PER_MODE = 5
WORKERS = 3


def test_kill_9_of_worker_groups_at_random_moments_loses_nothing(fault_db, tmp_path):
    """Two `engine work` processes per mode, 3 workers each; ten times, at a random moment, a
    process group of one mode (alternating) is killed -9 and a fresh process takes its place.
    Every message is processed at least once; a kill can repeat at most the messages its
    workers had in hand (3), so duplicates are bounded by kills × workers."""
    rng = random.Random()
    count = 2500
    expected, record_dirs, pools = {}, {}, {}
    for mode in MODES:
        queue = f"kill_{mode.split('-')[0]}"
        expected[mode] = set(_fill(fault_db, queue, count))
        record_dirs[mode] = tmp_path / mode
        record_dirs[mode].mkdir()
    queues = {mode: f"kill_{mode.split('-')[0]}" for mode in MODES}

    def start(mode: str) -> Pool:
        return Pool(fault_db.dsn, queues[mode], mode, record_dirs[mode], "--workers", str(WORKERS), "--until-empty",
                    "--visibility", "1", "--max-attempts", "1000", work_s=0.01)

    for mode in MODES:
        pools[mode] = [start(mode), start(mode)]
    kills = Counter[str]()
    delays = []
    for n in range(2 * KILLS_PER_MODE):
        mode = MODES[n % 2]
        delay = rng.uniform(0.15, 0.6)
        delays.append(round(delay, 3))
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline:  # a random moment; the pools keep working meanwhile
            time.sleep(0.01)
        depth, _ = _left(fault_db, queues[mode])
        alive = [pool for pool in pools[mode] if pool.alive()]
        if depth == 0 or not alive:
            continue  # nothing left to interrupt: not a fault
        victim = rng.choice(alive)
        victim.kill_group()
        kills[mode] += 1
        pools[mode].remove(victim)
        pools[mode].append(start(mode))
    summaries = {mode: [pool.finish() for pool in pools[mode]] for mode in MODES}

    for mode in MODES:
        deliveries = Deliveries.read(record_dirs[mode], expected[mode])
        report_fault(f"kill -9 of worker process groups ({mode})", injected=kills[mode], survived=kills[mode],
                 messages=count, lost=len(deliveries.lost), duplicated=deliveries.duplicated,
                 extra_deliveries=deliveries.extra_deliveries)
        assert kills[mode] >= 3, f"only {kills[mode]} kills landed while {mode} work remained (delays {delays})"
        assert not deliveries.lost, f"{mode}: {len(deliveries.lost)} messages never processed"
        assert not deliveries.unknown
        assert _left(fault_db, queues[mode]) == (0, 0), f"{mode}: messages left or dead-lettered"
        # Each kill can repeat only what its process had in hand: 3 workers, one message each.
        assert deliveries.extra_deliveries <= kills[mode] * WORKERS, (mode, deliveries.extra_deliveries, kills)
        assert sum(s["processed"] for s in summaries[mode]) <= count  # survivors did not claim more than existed


class Producer(threading.Thread):
    """`queuetop engine enqueue` of 50 messages at a time, alternating between queues, until stopped;
    each command's exit code is kept, with its batch number in every body."""

    def __init__(self, dsn: str, queues: list[str]) -> None:
        super().__init__(daemon=True)
        self.dsn, self.queues = dsn, queues
        self.results: list[tuple[str, int, int, str]] = []  # (queue, batch, exit code, stderr)
        self.halt = threading.Event()

    def run(self) -> None:
        batch = 0
        env = {key: value for key, value in os.environ.items() if key != "QUEUETOP_DSN"}
        while not self.halt.is_set():
            batch += 1
            queue = self.queues[batch % len(self.queues)]
            proc = subprocess.run(
                [sys.executable, "-m", "tui", "engine", "enqueue", queue, "--count", "50", "--batch", "50",
                 "--body", json.dumps({"batch": batch}), "--dsn", self.dsn],
                cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
            )
            self.results.append((queue, batch, proc.returncode, proc.stderr))


def test_immediate_server_restarts_mid_run_lose_nothing(fault_server, fault_db, tmp_path):
    """Two immediate restarts (every session cut, crash recovery) while a pool of each mode works
    and a producer enqueues. The pools live through both and finish; every enqueue that exited 0
    is processed; one that failed wrote all of its 50 messages or none; a pool says one line when it
    loses the database and one when it is back."""
    count, restarts = 1500, 2
    queues = {mode: f"restart_{mode.split('-')[0]}" for mode in MODES}
    expected = {mode: set(_fill(fault_db, queues[mode], count)) for mode in MODES}
    record_dirs = {mode: tmp_path / mode for mode in MODES}
    for directory in record_dirs.values():
        directory.mkdir()
    pools = {mode: Pool(fault_db.dsn, queues[mode], mode, record_dirs[mode], "--workers", "4", "--visibility", "2",
                        "--max-attempts", "1000", work_s=0.005) for mode in MODES}
    producer = Producer(fault_db.dsn, list(queues.values()))
    producer.start()
    try:
        for n in range(restarts):
            wait_until(lambda n=n: all(_recorded(d) >= count * (n + 1) // (restarts + 2) for d in record_dirs.values()),
                       timeout=60, what="the pools to make progress")
            fault_server.restart("immediate")
        wait_until(lambda: len(producer.results) >= 4 and producer.results[-1][2] == 0, timeout=60,
                   what="the producer to enqueue again after the restarts")
    finally:
        producer.halt.set()
        producer.join(120)
    assert all(pool.alive() for pool in pools.values()), "a pool gave up"

    batches: dict[str, dict[int, int]] = {mode: {} for mode in MODES}  # batch → exit code
    for queue, batch, rc, stderr in producer.results:
        mode = next(m for m, q in queues.items() if q == queue)
        batches[mode][batch] = rc
        if rc != 0:  # an enqueue the restart interrupted: a connection error, said in one line
            assert rc == 2 and stderr.count("\n") == 1 and stderr.startswith("queuetop: error: "), stderr
    wait_until(lambda: all(_left_or_none(fault_db, q) == (0, 0) for q in queues.values()), timeout=90,
               what="both queues drained")
    for pool in pools.values():
        pool.proc.send_signal(signal.SIGTERM)
    summaries = {mode: pool.finish() for mode, pool in pools.items()}

    for mode in MODES:
        records = read_records(record_dirs[mode])
        by_batch: dict[int, set[int]] = {}
        for message_id, _attempt, batch in records:
            by_batch.setdefault(batch, set()).add(message_id)
        produced = {batch for batch, rc in batches[mode].items() if rc == 0}
        failed = {batch for batch, rc in batches[mode].items() if rc != 0}
        committed_anyway = {batch for batch in failed if by_batch.get(batch)}
        ids = expected[mode] | {i for batch in produced | committed_anyway for i in by_batch.get(batch, set())}
        deliveries = Deliveries.read(record_dirs[mode], ids)
        lost_batches = {batch for batch in produced if len(by_batch.get(batch, ())) != 50}
        report_fault(f"immediate server restart mid-run ({mode})", injected=restarts, survived=restarts,
                 messages=len(deliveries.expected), lost=len(deliveries.lost) + 50 * len(lost_batches),
                 duplicated=deliveries.duplicated, extra_deliveries=deliveries.extra_deliveries,
                 enqueues_failed=len(failed), enqueues_committed_anyway=len(committed_anyway),
                 log_lines=len(pools[mode].warnings()))
        assert not lost_batches, f"{mode}: enqueues that exited 0 but were not all processed: {sorted(lost_batches)}"
        assert not deliveries.lost and not deliveries.unknown
        # An enqueue is one transaction: one the restart interrupted wrote its 50 messages or none.
        assert all(len(by_batch[batch]) == 50 for batch in committed_anyway)
        assert summaries[mode]["dead"] == 0
        # A restart repeats at most what the 4 workers had in hand: recorded, not yet acked or committed.
        assert deliveries.extra_deliveries <= restarts * 4, deliveries.extra_deliveries
        # One line lost, one line back, per restart, however many workers noticed, and when (docs/reliability.md).
        assert len(pools[mode].warnings()) <= 2 * restarts, pools[mode].stderr()
        assert any("lost the database" in line for line in pools[mode].warnings())


def test_a_restart_is_two_lines_however_late_the_workers_notice_it(fault_server, fault_db, tmp_path):
    """A restart while every worker is busy in its handler: the listener notices at once and is
    back before the workers, who notice only at their ack, seconds later, each on a connection
    the restart had already cut. The pool still says one line lost, one line back (it said
    three pairs before: the workers' late notices were told as new outages)."""
    workers, work_s = 4, 3.0
    queues = {mode: f"late_{mode.split('-')[0]}" for mode in MODES}
    expected = {mode: set(_fill(fault_db, queues[mode], workers)) for mode in MODES}
    record_dirs = {mode: tmp_path / mode for mode in MODES}
    for directory in record_dirs.values():
        directory.mkdir()
    # A claim stays hidden longer than its work lasts: only the restart makes a message come back.
    pools = {mode: Pool(fault_db.dsn, queues[mode], mode, record_dirs[mode], "--workers", str(workers), "--until-empty",
                        "--visibility", str(work_s + 1), "--max-attempts", "1000", work_s=work_s) for mode in MODES}
    # Every worker has recorded its message and works on it for work_s: all are in their handlers.
    wait_until(lambda: all(_recorded(d) >= workers for d in record_dirs.values()), timeout=30,
               what="every worker in its handler")
    fault_server.restart("immediate")
    summaries = {mode: pool.finish(timeout=120) for mode, pool in pools.items()}
    for mode in MODES:
        deliveries = Deliveries.read(record_dirs[mode], expected[mode])
        warnings = pools[mode].warnings()
        report_fault(f"immediate server restart, workers noticing late ({mode})", injected=1, survived=1,
                     messages=workers, lost=len(deliveries.lost), duplicated=deliveries.duplicated, log_lines=len(warnings))
        assert not deliveries.lost and summaries[mode]["dead"] == 0
        assert len(warnings) == 2, pools[mode].stderr()
        assert "lost the database" in warnings[0] and "answers again after" in warnings[1], warnings


OUTAGE_S = 35.0  # longer than the connect timeout (10 s), the back-off cap, and the 30 s after which pools used to give up


def test_the_pools_outlive_a_server_down_longer_than_any_timeout(fault_server, fault_db, tmp_path):
    """The server stopped (immediate) for 35 s mid-run: the pools of both modes keep running,
    resume within one capped back-off of its return, finish the queue and exit 0."""
    count = 1200
    queues = {mode: f"outage_{mode.split('-')[0]}" for mode in MODES}
    expected = {mode: set(_fill(fault_db, queues[mode], count)) for mode in MODES}
    record_dirs = {mode: tmp_path / mode for mode in MODES}
    for directory in record_dirs.values():
        directory.mkdir()
    pools = {mode: Pool(fault_db.dsn, queues[mode], mode, record_dirs[mode], "--workers", "3", "--until-empty",
                        "--visibility", "2", "--max-attempts", "1000", work_s=0.01) for mode in MODES}
    wait_until(lambda: all(_recorded(d) >= count // 5 for d in record_dirs.values()), timeout=60,
               what="the pools to make progress")
    fault_server.stop()
    stopped_at = time.monotonic()
    try:
        while time.monotonic() - stopped_at < OUTAGE_S:  # the outage itself: the pools must stay up through it
            assert all(pool.alive() for pool in pools.values()), {m: p.stderr() for m, p in pools.items()}
            time.sleep(0.5)
        at_return = {mode: _recorded(d) for mode, d in record_dirs.items()}
    finally:
        fault_server.start()
    started_at = time.monotonic()
    wait_until(lambda: all(_recorded(record_dirs[m]) > at_return[m] for m in MODES), timeout=RECONNECT_CAP_S * 1.2 + 10,
               what="both pools to resume work")
    resumed_after = time.monotonic() - started_at
    summaries = {mode: pool.finish() for mode, pool in pools.items()}

    for mode in MODES:
        deliveries = Deliveries.read(record_dirs[mode], expected[mode])
        report_fault(f"server down {OUTAGE_S:.0f} s ({mode})", injected=1, survived=1, messages=count,
                 lost=len(deliveries.lost), duplicated=deliveries.duplicated,
                 extra_deliveries=deliveries.extra_deliveries, resumed_after_s=round(resumed_after, 1))
        assert not deliveries.lost and not deliveries.unknown
        assert _left(fault_db, queues[mode]) == (0, 0)
        # A message is deleted once, so counted at most once; a commit whose reply the outage swallowed
        # happened but is not counted: at most one per worker (3).
        assert count - 3 <= summaries[mode]["processed"] <= count, summaries[mode]
        warnings = pools[mode].warnings()
        assert 1 <= len(warnings) <= 4, pools[mode].stderr()  # not one line per attempt over 35 s
        assert "lost the database" in warnings[0] and "answers again after" in warnings[-1], warnings


@pytest.mark.parametrize("mode", MODES)
def test_a_pool_runs_with_the_connections_left_when_max_connections_is_exhausted(fault_server, fault_db, tmp_path, mode):
    """All but two of the server's ordinary connection slots are taken; a pool of 6 workers runs
    on what it gets, and when the slots are freed every worker connects and the queue is finished."""
    role = "qt_faults_worker"
    with psycopg.connect(fault_server.admin_uri, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    queue = f"full_{mode.split('-')[0]}"
    expected = set(_fill(fault_db, queue, 800))
    with fault_db.connect() as conn:
        for grant in ("GRANT ALL ON SCHEMA queuetop TO {}", "GRANT ALL ON ALL TABLES IN SCHEMA queuetop TO {}",
                      "GRANT ALL ON ALL SEQUENCES IN SCHEMA queuetop TO {}"):
            conn.execute(sql.SQL(grant).format(sql.Identifier(role)))
    monitor = fault_db.connect()
    holders: list[psycopg.Connection] = []
    try:
        used = monitor.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'").fetchone()
        assert used is not None
        # Leave two ordinary slots; superusers keep the reserved ones, as on a real server.
        for _ in range(MAX_CONNECTIONS - RESERVED - 2 - used[0]):
            holders.append(psycopg.connect(fault_db.dsn, autocommit=True))
        record_dir = tmp_path / "records"
        record_dir.mkdir()
        pool = Pool(fault_server.server.uri(fault_db.name, user=role), queue, mode, record_dir, "--workers", "6",
                    "--until-empty", "--max-attempts", "1000", work_s=0.01)

        def sessions() -> int:
            row = monitor.execute("SELECT count(*) FROM pg_stat_activity WHERE usename = %s", (role,)).fetchone()
            return row[0] if row else 0

        wait_until(lambda: _recorded(record_dir) >= 50, timeout=30, what="the pool to work on the connections left")
        assert sessions() <= 2
        for holder in holders:
            holder.close()
        holders.clear()
        freed_at = time.monotonic()
        # The listener and all six workers (the seventh session is the pool's start-up, gone by now).
        wait_until(lambda: sessions() == 7, timeout=RECONNECT_CAP_S * 1.2 + 10, what="every worker connected")
        connected_after = time.monotonic() - freed_at
        summary = pool.finish()
    finally:
        for holder in holders:
            holder.close()
        monitor.close()
    deliveries = Deliveries.read(record_dir, expected)
    report_fault(f"max_connections exhausted ({mode})", injected=1, survived=1, messages=len(expected),
             lost=len(deliveries.lost), duplicated=deliveries.duplicated, all_connected_after_s=round(connected_after, 1))
    assert not deliveries.lost and deliveries.duplicated == 0
    assert summary["processed"] == len(expected)
    warnings = pool.warnings()
    # "remaining connection slots are reserved ...": the server's word for a full house, to an ordinary role.
    assert 1 <= len(warnings) <= 2 and "lost the database (remaining connection slots" in warnings[0], pool.stderr()
