"""The aggregation compactor: sums stay exact under concurrent writers and compactions (random
interleavings), two compactors at once, a compactor killed mid-way. The tests that take
`engine_db` are the conformance suite's (PostgreSQL, and SQL Server when QUEUETOP_MSSQL_DSN is set)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading

from dbcore.dialect import dialect_of
from queues import compactor
from queues.compactor import answer, compact, create_task, status_counts, submit

from .conftest import REPO, wait_until

# What the tests read to check the compactor's work, in each dialect's SQL.
DELTAS = {
    "postgresql": "SELECT count(*) FILTER (WHERE NOT is_aggregate), count(*) FILTER (WHERE is_aggregate)"
                  " FROM queuetop.task_status_deltas WHERE task_id = %(task_id)s",
    "mssql": "SELECT SUM(CASE WHEN is_aggregate = 0 THEN 1 ELSE 0 END), SUM(CASE WHEN is_aggregate = 1 THEN 1 ELSE 0 END)"
             " FROM queuetop.task_status_deltas WHERE task_id = %(task_id)s",
}
RUNS = {
    "postgresql": "SELECT last_rows_folded, runs_total FROM queuetop.compactor_runs WHERE name = 'task_status'",
    "mssql": "SELECT last_rows_folded, runs_total FROM queuetop.compactor_runs WHERE name = N'task_status'",
}


def deltas(conn, task_id):
    row = conn.execute(DELTAS[dialect_of(conn).name], {"task_id": task_id}).fetchone()
    return tuple(value or 0 for value in row)  # SUM over no row is NULL


def test_writers_readers_and_one_compaction(engine_db):
    with engine_db.connect() as conn:
        task = create_task(conn, "survey")
        assert submit(conn, task, list(range(1, 11))) == 10
        assert submit(conn, task, list(range(5, 16))) == 5  # resubmission: only new users count
        for user in (1, 2, 3):
            assert answer(conn, task, user)
        assert not answer(conn, task, 1)  # answered already
        assert not answer(conn, task, 99)  # never received it
        assert status_counts(conn, task) == {"PENDING": 12, "DONE": 3}
        assert deltas(conn, task) == (8, 0)
        result = compact(conn)
        assert (result.groups, result.rows_deleted, result.aggregates_inserted) == (1, 8, 2)
        assert deltas(conn, task) == (0, 2)
        assert status_counts(conn, task) == {"PENDING": 12, "DONE": 3}
        assert compact(conn).groups == 0  # nothing pending
        run = conn.execute(RUNS[engine_db.dialect]).fetchone()
        assert tuple(run) == (0, 2)


def test_random_interleavings_of_writers_and_compactions_keep_every_sum_exact(db):
    rng = random.Random(20261121)
    with db.connect() as conn:
        tasks = [create_task(conn, f"t{i}") for i in range(3)]
    expected = {t: {"PENDING": 0, "DONE": 0} for t in tasks}
    lock = threading.Lock()
    stop = threading.Event()
    errors = []

    def writer(seed):
        r = random.Random(seed)
        with db.connect() as conn:
            for _step in range(150):
                task = r.choice(tasks)
                if r.random() < 0.3:
                    users = [r.randrange(1, 400) for _ in range(r.randrange(1, 6))]
                    added = submit(conn, task, users)
                    with lock:
                        expected[task]["PENDING"] += added
                else:
                    user = r.randrange(1, 400)
                    if answer(conn, task, user):
                        with lock:
                            expected[task]["PENDING"] -= 1
                            expected[task]["DONE"] += 1

    def compactor_loop(seed):
        r = random.Random(seed)
        try:
            with db.connect() as conn:
                while not stop.is_set():
                    compact(conn, r.choice([None, *tasks]))
        except Exception as exc:  # reported below
            errors.append(exc)

    writers = [threading.Thread(target=writer, args=(rng.random(),)) for _ in range(6)]
    compactors = [threading.Thread(target=compactor_loop, args=(rng.random(),)) for _ in range(2)]
    for t in writers + compactors:
        t.start()
    for t in writers:
        t.join(120)
    stop.set()
    for t in compactors:
        t.join(60)
    assert not errors
    with db.connect() as conn:
        for task in tasks:
            want = {k: v for k, v in expected[task].items() if v}
            assert status_counts(conn, task) == want
            # and the same from the users' own rows
            rows = dict(conn.execute(
                "SELECT status, count(*) FROM queuetop.user_tasks WHERE task_id = %s GROUP BY status", (task,)
            ).fetchall())
            assert rows == want
        compact(conn)
        for task in tasks:
            assert deltas(conn, task)[0] == 0
            assert status_counts(conn, task) == {k: v for k, v in expected[task].items() if v}


def test_two_compactors_at_once_never_double_count(db):
    with db.connect() as conn:
        task = create_task(conn, "race")
        submit(conn, task, list(range(1, 501)))
        for user in range(1, 301):
            answer(conn, task, user)
    barrier = threading.Barrier(2)
    results = []

    def run():
        with db.connect() as conn:
            barrier.wait()
            results.append(compact(conn, task))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sum(r.groups for r in results) + sum(r.groups_skipped for r in results) >= 1
    with db.connect() as conn:
        assert status_counts(conn, task) == {"PENDING": 200, "DONE": 300}
        assert deltas(conn, task) == (0, 2)


def test_the_fold_itself_cannot_double_count_without_the_lock(db):
    # Both transactions took the same ids; the second's DELETE finds them gone after the first
    # commits, and folds nothing: the lock is an optimisation, not the guarantee.
    from queues import schema

    with db.connect() as conn:
        task = create_task(conn, "fold")
        submit(conn, task, [1, 2, 3])
        answer(conn, task, 1)
        ids = [r[0] for r in conn.execute(schema.ENGINE_SQL["compaction_take_ids"], {"task_id": task})]
    with db.connect(autocommit=False) as first, db.connect(autocommit=False) as second:
        first.execute(schema.ENGINE_SQL["compaction_fold"], {"task_id": task, "ids": ids})
        done = threading.Event()

        def late():
            second.execute(schema.ENGINE_SQL["compaction_fold"], {"task_id": task, "ids": ids})
            second.commit()
            done.set()

        thread = threading.Thread(target=late)
        thread.start()
        first.commit()
        thread.join(30)
        assert done.is_set()
    with db.connect() as conn:
        assert status_counts(conn, task) == {"PENDING": 2, "DONE": 1}


CRASHING_COMPACTOR = r"""
import sys, time, psycopg
from queues import schema
dsn, task = sys.argv[1], int(sys.argv[2])
conn = psycopg.connect(dsn)
ids = [r[0] for r in conn.execute(schema.ENGINE_SQL["compaction_take_ids"], {"task_id": task})]
print(conn.execute(schema.ENGINE_SQL["compaction_fold"], {"task_id": task, "ids": ids}).fetchone(), flush=True)
time.sleep(600)  # killed here, before COMMIT
"""


def test_a_compactor_killed_mid_way_loses_nothing(db):
    with db.connect() as conn:
        task = create_task(conn, "crash")
        submit(conn, task, list(range(1, 51)))
        for user in range(1, 21):
            answer(conn, task, user)
        before = deltas(conn, task)
    proc = subprocess.Popen([sys.executable, "-c", CRASHING_COMPACTOR, db.dsn, str(task)],
                            stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        line = proc.stdout.readline()
        assert line.startswith("(41, 2)")  # folded inside its open transaction
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    with db.connect() as conn:
        assert deltas(conn, task) == before
        assert status_counts(conn, task) == {"PENDING": 30, "DONE": 20}
        assert compact(conn).rows_deleted == 41
        assert status_counts(conn, task) == {"PENDING": 30, "DONE": 20}


def test_engine_compact_cli(db, cli):
    with db.connect() as conn:
        task = create_task(conn, "cli")
        submit(conn, task, [1, 2])
        answer(conn, task, 2)
    result = cli("engine", "compact", "--dsn", db.dsn, "--group", str(task))
    assert result.returncode == 0, result.stderr
    [summary] = result.json_lines()
    assert summary["name"] == compactor.NAME and summary["groups"] == 1 and summary["rows_folded"] == 3
    bad = cli("engine", "compact", "--dsn", db.dsn, "--group", "x")
    assert bad.returncode == 2 and bad.stderr.startswith("queuetop: error: ")


def test_snapshot_shows_pending_deltas_and_the_last_run(db):
    from probes.sampler import run_cycle

    with db.connect() as conn:
        task = create_task(conn, "probe")
        submit(conn, task, [1, 2, 3, 4])
        answer(conn, task, 1)
        other = create_task(conn, "probe-2")
        submit(conn, other, [1])
    snap = run_cycle(db.target)
    assert snap.probes["compaction"].error is None
    [c] = snap.compaction
    assert (c.name, c.pending_deltas, c.groups, c.last_run_at) == ("task_status", 4, 2, None)
    # Per group, the most pending first, with the task's title.
    assert [(g.group, g.title, g.pending_deltas) for g in c.by_group] == [(task, "probe", 3), (other, "probe-2", 1)]
    assert snap.to_json()["compaction"][0]["by_group"][0] == {"group": task, "title": "probe", "pending_deltas": 3}
    with db.connect() as conn:
        compact(conn)
    [c] = run_cycle(db.target).compaction
    assert (c.pending_deltas, c.groups, c.last_rows_folded, c.runs_total) == (0, 0, 4, 1)  # 3 + 1
    assert c.by_group == ()
    assert c.last_run_at is not None and c.last_duration_ms > 0
    assert run_cycle(db.target).to_json()["compaction"][0]["pending_deltas"] == 0


def test_pending_count_is_capped_and_flagged(db, monkeypatch):
    from probes import postgres
    from probes.sampler import run_cycle

    monkeypatch.setattr(postgres, "COMPACTION_COUNT_CAP", 5)  # the probe reads at most this many rows
    with db.connect() as conn:
        task = create_task(conn, "big")
        submit(conn, task, list(range(1, 20)))
        for user in range(1, 8):
            answer(conn, task, user)  # 1 + 14 pending delta rows
    [c] = run_cycle(db.target).compaction
    assert c.pending_deltas == 5 and c.pending_is_estimate
    assert sum(g.pending_deltas for g in c.by_group) == 5


def test_scheduled_agent_folds_what_writers_leave(db):
    with db.connect() as conn:
        task = create_task(conn, "agent")
        submit(conn, task, list(range(1, 11)))
    agent = compactor.CompactorAgent(db.target, interval_s=0.05, application_name="queuetop-compactor:test")
    agent.start()
    try:
        with db.connect() as conn:
            for user in range(1, 6):
                answer(conn, task, user)
            wait_until(lambda: deltas(conn, task)[0] == 0, what="the agent to fold every delta")
            assert status_counts(conn, task) == {"PENDING": 5, "DONE": 5}
        # The agent counts a run after its transaction commits, so the deltas can be gone a moment
        # before the counters move (CI once read runs=1, rows_folded=7 here): poll them too.
        wait_until(lambda: agent.rows_folded >= 11, what="the agent to count the 11 rows it folded")
        assert agent.runs >= 1 and agent.errors == 0  # 1 submit + 10 answer rows; aggregates refold too
    finally:
        agent.stop()
    with db.connect() as conn:
        # Its session closed with it. The server ends a backend a moment after its client closed the
        # socket, so poll: CI once saw it still listed right after stop().
        wait_until(lambda: conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'queuetop-compactor:test'"
        ).fetchone()[0] == 0, timeout=10, what="the agent's session to end")
