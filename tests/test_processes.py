"""`engine work --processes`: a worker pool spread over processes (queues/processes.py). Real
processes, a real server; kills are real signals."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
from collections import Counter

import psutil
import pytest

from queues.processes import SPAWN, ProcessPool
from queues.table_queue import TableQueue
from queues.worker import WorkerPool, WorkOptions

from .conftest import REPO, wait_until
from .recorder import read_records


def fill(db, name: str, count: int) -> list[int]:
    with db.connect() as conn:
        queue = TableQueue.create(conn, name)
        queue.enqueue_batch(conn, [json.dumps({"n": n}) for n in range(count)])
        return [r[0] for r in conn.execute(f'SELECT id FROM queuetop."q_{name}" ORDER BY id')]


def sessions(db, name: str) -> int:
    with db.connect() as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE %s",
                            (f"queuetop-%:{name}",)).fetchone()[0]


def spawned(pid: int) -> list[psutil.Process]:
    """The worker processes of the queuetop process `pid` (not multiprocessing's resource tracker)."""
    try:
        children = psutil.Process(pid).children()
    except psutil.NoSuchProcess:
        return []
    return [c for c in children if "spawn_main" in " ".join(c.cmdline())]


def start_cli(db, *args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "QUEUETOP_DSN"}
    return subprocess.Popen([sys.executable, "-m", "tui", "engine", "work", *args, "--dsn", db.dsn], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def test_processes_share_a_queue_exactly_once(db, tmp_path, monkeypatch):
    ids = fill(db, "jobs", 300)
    monkeypatch.setenv("QT_RECORD_DIR", str(tmp_path))
    options = WorkOptions(workers=4, processes=3, until_empty=True)
    # Every worker of every process starts claiming at once: each process gets its share.
    pool = ProcessPool(db.target, "jobs", "sleep:0.003,tests.recorder:record", options, start_barrier=SPAWN.Barrier(4))
    assert pool.shares() == [2, 1, 1]
    summary = pool.run()
    records = read_records(tmp_path)
    assert sorted(r[0] for r in records) == ids  # each message once
    assert summary.processed == 300 and summary.stale_acks == 0
    assert len(os.listdir(tmp_path)) == 3  # a file per process: all three worked
    wait_until(lambda: sessions(db, "jobs") == 0, timeout=10, what="every session closed")


def test_a_killed_process_is_replaced_and_its_messages_come_back(db, tmp_path, monkeypatch, caplog):
    # 300 messages of 30 ms: 9 s for one worker alone, so that the other, however slow its
    # process is to start on a busy machine, finds some left.
    ids = fill(db, "jobs", 300)
    monkeypatch.setenv("QT_RECORD_DIR", str(tmp_path))
    monkeypatch.setenv("QT_RECORD_WORK_S", "0.03")  # a kill lands, most often, between the record and the ack
    options = WorkOptions(workers=2, processes=2, until_empty=True, visibility_s=1.0)
    pool = ProcessPool(db.target, "jobs", "tests.recorder:record", options)
    result: list[object] = []
    runner = threading.Thread(target=lambda: result.append(pool.run()))
    runner.start()
    try:
        wait_until(lambda: len(os.listdir(tmp_path)) == 2, timeout=30, what="both processes working")
        victim = pool.pids()[0]
        os.kill(victim, signal.SIGKILL)
    finally:
        runner.join(90)
    assert not runner.is_alive()
    (summary,) = result
    records = read_records(tmp_path)
    assert {r[0] for r in records} == set(ids)  # nothing lost
    # Acked once each (the dead process's unacked message was claimed again and acked by another).
    assert summary.processed == 300, summary
    twice = [i for i, n in Counter(r[0] for r in records).items() if n > 1]
    assert len(twice) <= 1  # the victim ran one worker: at most the message in its hands
    for message_id in twice:  # first by the victim, then again once its visibility ended
        assert sorted(r[1] for r in records if r[0] == message_id) == [1, 2]
    assert pool.restarts == 1 and victim not in pool.pids()
    assert any("died (killed by signal 9)" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


@pytest.mark.parametrize("how", ["SIGINT to the process group", "SIGTERM to the parent"])
def test_a_signal_stops_every_process_cleanly(db, how):
    """Ctrl-C reaches every process of the group, SIGTERM only the parent: either way each
    process stops, the summary is printed, exit 0, no traceback; sent while the processes start
    up (their signals are blocked until they can handle them)."""
    fill(db, "jobs", 0)
    proc = start_cli(db, "jobs", "--workers", "3", "--processes", "3", "--duration", "120")
    children = wait_until(lambda: (lambda c: c if len(c) == 3 else None)(spawned(proc.pid)), timeout=30,
                          what="three worker processes")
    if how.startswith("SIGINT"):
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert json.loads(out.strip().splitlines()[-1])["processed"] == 0
    assert not any(child.is_running() and child.status() != psutil.STATUS_ZOMBIE for child in children)
    wait_until(lambda: sessions(db, "jobs") == 0, timeout=10, what="every session closed")


def test_a_killed_parent_takes_its_processes_with_it(db):
    """kill -9 of the command: its worker processes see their pipe to it end and stop as SIGTERM
    would (no orphan keeps claiming)."""
    fill(db, "jobs", 0)
    proc = start_cli(db, "jobs", "--workers", "2", "--processes", "2", "--duration", "120")
    children = wait_until(lambda: (lambda c: c if len(c) == 2 else None)(spawned(proc.pid)), timeout=30,
                          what="two worker processes")
    wait_until(lambda: sessions(db, "jobs") >= 4, timeout=30, what="the workers and listeners connected")
    proc.kill()
    proc.communicate(timeout=30)
    wait_until(lambda: not any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE for c in children), timeout=15,
               what="the worker processes gone")
    wait_until(lambda: sessions(db, "jobs") == 0, timeout=10, what="their sessions closed")


def test_more_processes_than_workers_is_refused(db, cli):
    fill(db, "jobs", 1)
    result = cli("engine", "work", "jobs", "--dsn", db.dsn, "--workers", "2", "--processes", "3")
    assert result.returncode == 2
    assert result.stderr.strip() == "queuetop: error: --processes must be between 1 and --workers (2)"
    with db.connect() as conn:
        assert TableQueue.open(conn, "jobs").counts(conn).depth == 1  # nothing claimed


def test_processes_poll_an_idle_queue_in_turn(db):
    """P processes poll every P intervals each, their first ticks one interval apart: together
    as often as one process. The first tick comes when it is told to (a minute's interval here:
    without it, no second claim would come for a minute)."""
    pool = ProcessPool(db.target, "jobs", "noop", WorkOptions(workers=3, processes=3, poll_interval_s=2.0))
    plans = [pool._plan(i) for i in range(3)]
    assert [p.options.poll_interval_s for p in plans] == [6.0] * 3
    assert [p.first_tick_s for p in plans] == [2.0, 4.0, 6.0]
    assert [p.options.workers for p in plans] == [1, 1, 1] and {p.options.processes for p in plans} == {1}
    fill(db, "idle", 0)
    single = WorkerPool(db.target, "idle", lambda _m: None, WorkOptions(workers=1, poll_interval_s=60.0), first_tick_s=0.3)
    single.start()
    try:
        wait_until(lambda: single.polls >= 2, timeout=10, what="the first tick's claim")
    finally:
        single.stop()
        single.join(10)
