"""The worst minute on a real server (issue 43): 200 sessions updating one row behind an idle
holder, beside a chain ten deep; a READ ONLY DEFERRABLE transaction waiting for a safe snapshot.
The probe's picture is checked against the server's own truth (pg_blocking_pids,
pg_safe_snapshot_blocking_pids), read right before and right after it; the dashboard, sampling
the same server, draws the pile-up as one group, keeps answering keys and keeps its cursor on
the session it was on while the chain around it ends."""

from __future__ import annotations

import os
import subprocess
import tempfile
from contextlib import contextmanager

import pytest
from textual.widgets import Tree

from bench.engine import find_pgbench
from probes.postgres import PostgresProbes
from probes.sampler import run_cycle

from .conftest import wait_until
from .test_lock_layout import ended_said
from .test_probes import sessions, start_waiting
from .test_tui import live_app, settle

PILE = 200
CHAIN = 10
PILE_APP = "qt-pile-waiter"


def truth(db) -> dict[int, set[int]]:
    """Every session of the test's database waiting for a lock or a safe snapshot, with the
    sessions the server says block it."""
    with db.connect() as conn:
        rows = conn.execute(
            "SELECT pid, CASE WHEN wait_event = 'SafeSnapshot' THEN pg_safe_snapshot_blocking_pids(pid) ELSE pg_blocking_pids(pid) END "
            "FROM pg_stat_activity WHERE datname = current_database() AND (wait_event_type = 'Lock' OR wait_event = 'SafeSnapshot')"
        ).fetchall()
    return {pid: set(blockers) for pid, blockers in rows if blockers}


@contextmanager
def pile_up(db, holder, clients: int):
    """`holder` keeps row 1 of `pile` in an open transaction; `clients` pgbench sessions update it."""
    holder.run("BEGIN")
    holder.run("UPDATE pile SET v = v + 1 WHERE id = 1")
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
        f.write("UPDATE pile SET v = v + 1 WHERE id = 1;\n")
    path = f.name
    process = subprocess.Popen([find_pgbench(), "-n", "-f", path, "-c", str(clients), "-j", "4", "-T", "600", db.dsn],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "PGAPPNAME": PILE_APP})
    try:
        waiting = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'"
        with db.connect() as conn:
            wait_until(lambda: conn.execute(waiting, (PILE_APP,)).fetchone()[0] == clients, timeout=60,
                       what=f"{clients} pgbench sessions waiting")
        yield
    finally:
        process.kill()
        process.wait(10)
        os.unlink(path)


@contextmanager
def pile_and_chain(db):
    """PILE pgbench sessions waiting on row 1 of `pile` behind `holder`, and beside them a chain
    CHAIN deep: chain[0] holds row 2; chain[n] holds row n + 2, then waits for row n + 1.
    Yields (holder, chain)."""
    with db.connect() as conn:
        conn.execute("CREATE TABLE pile (id int PRIMARY KEY, v bigint NOT NULL DEFAULT 0)")
        conn.execute("INSERT INTO pile SELECT g, 0 FROM generate_series(1, 20) g")
    names = ["qt-pile-holder", *(f"qt-chain-{n}" for n in range(CHAIN + 1))]
    with sessions(db, *names) as (holder, *chain), pile_up(db, holder, PILE):
        for n, s in enumerate(chain):
            s.run("BEGIN")
            s.run("UPDATE pile SET v = 1 WHERE id = %s", (n + 2,))
        for n, s in enumerate(chain[1:], 1):
            start_waiting(db, s, f"UPDATE pile SET v = 2 WHERE id = {n + 1}", *chain[1:n])
        yield holder, chain


def test_a_pile_up_of_200_and_a_chain_of_10_as_the_server_says_them(db):
    with pile_and_chain(db) as (holder, chain):
        exactly = PostgresProbes()
        exactly.pile_up = 1000  # every waiter's blockers as pg_blocking_pids names them
        before = truth(db)
        snapshot, read_exactly = run_cycle(db.target), run_cycle(db.target, probes=exactly)
        after = truth(db)
        assert before == after and len(before) == PILE + CHAIN  # nothing moved while the probes read
        assert {b.pid: set(b.blocked_by) for b in read_exactly.blocked} == before
        # Past the pile-up threshold (100): each listed with the sessions holding what it waits for.
        seen = {b.pid: b for b in snapshot.blocked}
        assert set(seen) == set(before)
        for pid, server_says in before.items():
            assert seen[pid].blocked_by and set(seen[pid].blocked_by) <= server_says, pid
            assert set(seen[pid].root_blockers) == _roots(before, pid), pid
        for picture in (snapshot, read_exactly):
            roots = {r.pid: r.blocked_count for r in picture.blockers}
            assert roots == {holder.pid: PILE, chain[0].pid: CHAIN}
            pile_pids = {pid for pid in before if pid not in {s.pid for s in chain}}
            assert {b.pid for b in picture.blocked if b.root_blockers == (holder.pid,)} == pile_pids
            document = picture.to_json()
            assert {b["pid"] for b in document["blocked"]} == set(before)  # every pid in the JSON


async def test_the_dashboard_in_a_pile_up_groups_it_answers_keys_and_keeps_its_cursor(db):
    from tui.widgets.panels import LocksPanel

    with pile_and_chain(db) as (holder, chain):
        app = live_app(db)
        async with app.run_test(size=(100, 30)) as pilot:
            panel = app.query_one(LocksPanel)
            tree = panel.query_one(Tree)

            def holder_node():
                return next((n for n in tree.root.children if n.data == holder.pid), None)

            await settle(pilot, app, lambda: (node := holder_node()) is not None
                         and any(str(c.label).startswith(f"{PILE} sessions") for c in node.children), "the pile-up as one group", 1500)
            # Keys are answered while the pile-up is sampled.
            await pilot.press("question_mark")
            await settle(pilot, app, lambda: type(app.screen).__name__ == "HelpScreen", "the help, at once", 100)
            await pilot.press("escape")
            # The cursor on the chain's sixth session stays there while its tail ends and the tree is built again.
            target = chain[6].pid
            await settle(pilot, app, lambda: panel.select_pid(target), "the chain's session selected", 500)
            with db.connect() as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (chain[CHAIN].pid,))
            await settle(pilot, app, lambda: not any(b.pid == chain[CHAIN].pid for b in app.snapshot.blocked), "the tail gone", 1000)
            await pilot.pause(0.1)
            assert panel.selected_pid == target
            with db.connect() as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (target,))
            await settle(pilot, app, lambda: ended_said(tree, target), "its end said", 1000)
            assert panel.selected_pid is None  # no other session slipped under the cursor


@pytest.mark.matrix
def test_a_transaction_waiting_for_a_safe_snapshot_is_blocked_by_the_sessions_the_server_names(db):
    with db.connect() as conn:
        conn.execute("CREATE TABLE ledger (id int PRIMARY KEY, v int)")
        conn.execute("INSERT INTO ledger VALUES (1, 0)")
    with sessions(db, "qt-serializable-writer", "qt-deferrable-reader") as (writer, reader):
        writer.run("BEGIN ISOLATION LEVEL SERIALIZABLE")
        writer.run("UPDATE ledger SET v = v + 1 WHERE id = 1")
        reader.start("BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY DEFERRABLE; SELECT sum(v) FROM ledger")
        wait_until(lambda: truth(db).get(reader.pid) == {writer.pid}, timeout=15, what="the reader waiting for a safe snapshot")
        before = truth(db)
        snapshot = run_cycle(db.target)
        after = truth(db)
        assert before == after == {reader.pid: {writer.pid}}
        [waiting] = [b for b in snapshot.blocked if b.pid == reader.pid]
        assert waiting.lock_type == "safe snapshot" and waiting.blocked_by == (writer.pid,) and waiting.holders == (writer.pid,)
        assert waiting.wants == "a safe snapshot (SERIALIZABLE READ ONLY DEFERRABLE)"
        assert [(r.pid, r.blocked_count) for r in snapshot.blockers] == [(writer.pid, 1)]
        assert next(s for s in snapshot.sessions if s.pid == reader.pid).blocked_by == (writer.pid,)  # the Sessions list too
        from tui.format import wait_phrase

        assert wait_phrase(waiting, None) == f"wants a safe snapshot (SERIALIZABLE READ ONLY DEFERRABLE) until {writer.pid} ends"
        writer.run("COMMIT")
        wait_until(lambda: reader.pid not in truth(db), timeout=15, what="the reader running once the writer ended")
        assert not any(b.pid == reader.pid for b in run_cycle(db.target).blocked)


def _roots(graph: dict[int, set[int]], pid: int) -> set[int]:
    """The sessions at the root of `pid`'s chains in a wait graph without cycles."""
    found, todo, seen = set(), [pid], set()
    while todo:
        for blocker in graph.get(todo.pop(), ()):
            if blocker in seen:
                continue
            seen.add(blocker)
            (todo.append(blocker) if blocker in graph else found.add(blocker))
    return found


def test_past_the_pile_up_threshold_each_waiter_is_listed_with_its_holders_and_the_same_roots(db):
    """More lock waiters than the probe reads one by one (its threshold lowered to 20 here, 100 in
    use): each waiter's blockers are the sessions holding what it waits for, a subset of what
    pg_blocking_pids says, with the same roots; one waiting only behind a queued request (readers
    behind a queued ACCESS EXCLUSIVE) is still read exactly; the probe's note says so, and each
    root says the mode it holds where it is a table's."""
    with db.connect() as conn:
        conn.execute("CREATE TABLE pile (id int PRIMARY KEY, v bigint NOT NULL DEFAULT 0)")
        conn.execute("INSERT INTO pile SELECT g, 0 FROM generate_series(1, 20) g")
        conn.execute("CREATE TABLE reports (id int)")
    names = ("qt-pile-holder", "qt-report", "qt-migration", "qt-reader-1", "qt-reader-2")
    with sessions(db, *names) as (holder, report, migration, *readers), pile_up(db, holder, 30):
        report.run("BEGIN")
        report.run("SELECT count(*) FROM reports")  # holds ACCESS SHARE on reports
        migration.run("BEGIN")
        start_waiting(db, migration, "LOCK TABLE reports IN ACCESS EXCLUSIVE MODE")
        for n, reader in enumerate(readers):
            start_waiting(db, reader, "SELECT count(*) FROM reports", migration, *readers[:n])
        probes = PostgresProbes()
        probes.pile_up = 20
        before = truth(db)
        snapshot = run_cycle(db.target, probes=probes)
        after = truth(db)
        assert before == after and len(before) == 30 + 1 + len(readers)
        seen = {b.pid: b for b in snapshot.blocked}
        assert set(seen) == set(before)
        for pid, server_says in before.items():
            assert set(seen[pid].blocked_by) <= server_says and seen[pid].blocked_by, (pid, seen[pid].blocked_by, server_says)
            assert set(seen[pid].root_blockers) == _roots(before, pid), pid
        for reader in readers:  # behind a queued request alone: read exactly
            assert set(seen[reader.pid].blocked_by) == before[reader.pid] and not seen[reader.pid].ahead_unread
        piled = [b for b in snapshot.blocked if b.application == PILE_APP]
        assert all(b.ahead_unread for b in piled) and len(piled) == 30
        assert "a pile-up of 33 waiters" in snapshot.probes["locks"].notes
        # The sessions statement leaves a pile-up's blockers to the lock picture, which gives them.
        listed = {s.pid: s for s in snapshot.sessions}
        assert all(listed[pid].blocked_by == seen[pid].blocked_by for pid in before)
        roots = {r.pid: r for r in snapshot.blockers}
        assert roots[report.pid].held_mode == "AccessShareLock" and roots[holder.pid].held_mode is None
        assert roots[holder.pid].blocked_count == 30 and roots[report.pid].blocked_count == 1 + len(readers)


@pytest.mark.matrix
def test_another_queuetop_probe_waiting_on_a_lock_is_not_listed_as_blocked(db):
    """A second dashboard's or an exporter's probe session waiting on a lock (for at most its
    lock_timeout) is queuetop's own: never a blocked session; the client session beside it is."""
    with db.connect() as conn:
        conn.execute("CREATE TABLE held (id int PRIMARY KEY)")
        conn.execute("INSERT INTO held VALUES (1)")
    with sessions(db, "qt-holder", "queuetop-probe-other", "qt-client") as (holder, probe, client):
        holder.run("BEGIN")
        holder.run("LOCK TABLE held IN ACCESS EXCLUSIVE MODE")
        probe.start("SELECT count(*) FROM held")
        client.start("SELECT count(*) FROM held")
        wait_until(lambda: {probe.pid, client.pid} <= set(truth(db)), timeout=15, what="both waiting")
        snapshot = run_cycle(db.target)
        assert {b.pid for b in snapshot.blocked} == {client.pid}
        assert [(r.pid, r.blocked_count, r.held_mode) for r in snapshot.blockers] == [(holder.pid, 1, "AccessExclusiveLock")]
