"""The Locks tree at the sizes operators use (issue 31): at 100×30 and 80×24 every explanation is
whole (what a session wants and who holds it, when a wait cycle is broken, what ends a prepared
transaction), carried onto the lines below its node; nothing is cut inside a word; no line is
wider than the tree (the tree would crop it)."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from rich.cells import cell_len
from textual.widgets import Tree

from probes.model import BlockedSession, Blocker, PreparedXact, ServerInfo, WaitCycle
from tui.sample import sample_snapshot
from tui.widgets.panels import LocksPanel
from tui.widgets.panels.lock_tree import label_width

from .test_tui import sample_app, settle

ROOT_QUERY = "SELECT pg_sleep(3600) FROM accounts WHERE id IN (SELECT account_id FROM transfers WHERE day = current_date)"
WAIT_QUERY = "UPDATE accounts SET balance = balance - 100 WHERE id = 7"
GID = "pay-7f3a-settlement-batch"


def _waiting(pid: int, **kwargs) -> BlockedSession:
    defaults = dict(pid=pid, blocked_by=(1000,), root_blocker=1000, root_blockers=(1000,), wait_s=12.5,
                    lock_type="transactionid", mode="ShareLock", relation="accounts", row="(0,7)", database="app",
                    query=WAIT_QUERY, application="billing-worker", state="active",
                    wants="to update a row of accounts (0,7)", holders=(1000,))
    return BlockedSession(**{**defaults, **kwargs})


def locks_snapshot():
    base = sample_snapshot(step=0)
    blocked = (
        _waiting(1001),
        _waiting(1002, blocked_by=(1001,), lock_type="tuple", mode="ExclusiveLock", wait_s=3.0),
        _waiting(1003, blocked_by=(1000,), lock_type="relation", mode="AccessExclusiveLock", row=None, relation="ledger_entries",
                 wants="ACCESS EXCLUSIVE on ledger_entries to TRUNCATE", query="TRUNCATE ledger_entries",
                 worker_pids=(1031, 1032, 1033)),
        _waiting(1004, blocked_by=(), root_blocker=None, root_blockers=(), blocked_by_prepared=(GID,), root_prepared=(GID,),
                 holders=(), wants="to update a row of payments (0,1)", relation="payments", row="(0,1)"),
        _waiting(2001, blocked_by=(2002,), root_blocker=2002, root_blockers=(2002,), in_cycle=True, root_cycles=(1,), wait_s=0.4,
                 holders=(2002,), wants="to update a row of accounts (0,9)", row="(0,9)"),
        _waiting(2002, blocked_by=(2001,), root_blocker=2001, root_blockers=(2001,), in_cycle=True, root_cycles=(1,), wait_s=0.3,
                 holders=(2001,), wants="to update a row of accounts (0,8)", row="(0,8)"),
        _waiting(2003, blocked_by=(2002,), root_blocker=2001, root_blockers=(2001, 2002), root_cycles=(1,),
                 lock_type="tuple", holders=(2001,), wants="to update a row of accounts (0,8)", row="(0,8)"),
    )
    blockers = (
        Blocker(pid=1000, blocked_count=3, blocked_processes=6, state="idle in transaction", xact_age_s=754.0,
                query=ROOT_QUERY, application="reporting"),
        Blocker(pid=2001, blocked_count=2, blocked_processes=2, state="active", xact_age_s=4.0, query=WAIT_QUERY,
                application="billing-worker", cycle=1),
        Blocker(pid=2002, blocked_count=2, blocked_processes=2, state="active", xact_age_s=4.0, query=WAIT_QUERY,
                application="billing-worker", cycle=1),
    )
    prepared = (PreparedXact(gid=GID, owner="billing", database="app", age_s=300.0, blocked_count=1),)
    cycles = (WaitCycle(id=1, members=(2001, 2002), waiting=(2003,), wait_s=0.4),)
    server = ServerInfo(dialect="postgresql", version="16.2", database="app", label="sample", deadlock_timeout_s=1.0)
    return replace(base, blocked=blocked, blockers=blockers, prepared_xacts=prepared, cycles=cycles, server=server)


def tree_lines(tree: Tree) -> list[tuple[int, str]]:
    """(depth, label) of every node under the root, in the order shown."""
    out: list[tuple[int, str]] = []

    def walk(node, depth: int) -> None:
        for child in node.children:
            out.append((depth, str(child.label)))
            walk(child, depth + 1)

    walk(tree.root, 1)
    return out


def _ends_a_word(source: str, shown: str) -> bool:
    """Whether `shown` is a part of `source` that ends where one of its words ends."""
    at = source.find(shown)
    return at >= 0 and (at + len(shown) == len(source) or source[at + len(shown)] == " ")


def words(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


# (What the tree says by nesting goes unsaid: 1001 and 1002, under the row's holder 1000, just want
# the row, and 1002 says whom it queues behind; 2003, under its row's holder 2001, queues behind 2002.)
SYNTHETIC_EXPLANATIONS = (
    "1001 waits 12.5s wants to update a row of accounts (0,7)",
    "1002 waits 3.0s wants to update a row of accounts (0,7) queued behind 1001",
    "1003 waits 12.5s wants ACCESS EXCLUSIVE on ledger_entries to TRUNCATE",
    "2003 waits 12.5s wants to update a row of accounts (0,8) queued behind 2002",
    "2001 waits 0.4s wants to update a row of accounts (0,9) held by 2002",
    f"wants to update a row of payments (0,1) held by prepared '{GID}'",
    "no session: COMMIT or ROLLBACK PREPARED",
    "wait cycle 2001 → 2002 → 2001",
    "deadlock: broken in ≤0.6s (deadlock_timeout 1s)",
    "blocks 3 (6 processes)",
    "+3 parallel workers",
)


def assert_whole(tree: Tree, lines: list[tuple[int, str]], explanations, sources: list[str]) -> None:
    """No line wider than its room (the tree would crop it, mid-word); every explanation whole
    (its words in order, over the lines it wraps onto); a text cut short cut after a whole word of
    what it shows."""
    width = tree.size.width
    for depth, text in lines:
        assert cell_len(text) <= label_width(width, depth), (depth, text, width)
    said = words(" ".join(text for _depth, text in lines))
    # Each session once: under what it waits for, never again under each one queued ahead of it.
    starts = [m.group(1) for _depth, text in lines if (m := re.match(r"(\d+) (waits|idle|active)", text))]
    assert len(starts) == len(set(starts)), starts
    for explanation in explanations:
        assert explanation in said, (explanation, lines)
    for _depth, text in lines:
        for cut in re.findall(r"(?:^|  )([^ ][^…]*?)…", text):
            tail = cut.split("  ")[-1]
            assert any(_ends_a_word(source, tail) for source in sources), (tail, text)


@pytest.mark.parametrize("size", [(100, 30), (80, 24)], ids=["100x30", "80x24"])
async def test_the_locks_tree_says_everything_whole_at_the_sizes_operators_use(size):
    snapshot = locks_snapshot()
    async with sample_app(snapshots=[snapshot]).run_test(size=size) as pilot:
        app = pilot.app
        tree = app.query_one(LocksPanel).query_one(Tree)
        await settle(pilot, app, lambda: len(tree.root.children) >= 3, "the tree built")
        lines = tree_lines(tree)
        assert_whole(tree, lines, SYNTHETIC_EXPLANATIONS, [ROOT_QUERY, WAIT_QUERY, "TRUNCATE ledger_entries", "billing-worker",
                                                          "reporting", f"'{GID}'"])
        # The cycle's members are under their cycle, not roots of their own beside it.
        roots = [text for depth, text in lines if depth == 1]
        assert not any(text.startswith(("2001 ", "2002 ")) for text in roots)


def test_a_waiting_sessions_details_say_what_it_wants_its_lock_and_its_workers():
    """Enter on a waiting session: what it wants and who holds it (the tree's words), the server's
    own lock type and mode beside them, and its parallel workers waiting with it (issue 31)."""
    from tests.test_tui import rendered_text
    from tui.screens.details import session_renderables

    waiting = next(b for b in locks_snapshot().blocked if b.pid == 1003)
    session = {"pid": 1003, "usename": "ops", "application_name": "billing-worker", "client_addr": None, "state": "active",
               "wait_event_type": "Lock", "wait_event": "relation", "session_age_s": 30.0, "xact_age_s": 12.5,
               "query_age_s": 12.5, "query": "TRUNCATE ledger_entries"}
    renderables = session_renderables({"session": session, "locks": []}, blocked_by=waiting.blocked_by, waiting=waiting, here="app")
    text = words(" ".join(rendered_text(r, width=200) for r in renderables))
    assert ("Waits: wants ACCESS EXCLUSIVE on ledger_entries to TRUNCATE held by 1000 "
            "(the server's lock: relation AccessExclusiveLock)") in text
    assert "Parallel workers waiting with it: 3 (pids 1031, 1032, 1033)" in text


LIVE_ROOT_QUERY = "SELECT * FROM payments WHERE id = 1 FOR UPDATE"


@pytest.mark.parametrize("size", [(100, 30), (80, 24)], ids=["100x30", "80x24"])
async def test_the_locks_tree_of_a_real_server_says_everything_whole(db, size):
    """The same, on what a real server says: an idle root with a session waiting for its row, a
    session waiting for a prepared transaction, and a wait cycle (deadlock_timeout raised for its
    members), sampled by the dashboard's own sampler."""
    from probes.sampler import Sampler
    from tui.backend import DatabaseBackend
    from tui.dashboard import QueuetopApp

    from .test_locks import prepared
    from .test_probes import sessions

    gid = f"qt-tree-{db.name}"
    with db.connect() as setup:
        setup.execute("CREATE TABLE payments (id int PRIMARY KEY, amount int)")
        setup.execute("INSERT INTO payments SELECT g, 0 FROM generate_series(1, 10) g")
    with prepared(db, gid, "UPDATE payments SET amount = 9 WHERE id = 2"), \
            sessions(db, "reporting", "billing-worker", "settlement", "transfer-a", "transfer-b") as (root, waiter, on_prepared, a, b):
        root.run("BEGIN")
        root.run(LIVE_ROOT_QUERY)
        waiter.start("UPDATE payments SET amount = amount - 100 WHERE id = 1")
        on_prepared.start("UPDATE payments SET amount = 1 WHERE id = 2")
        for s in (a, b):
            s.run("SET deadlock_timeout = '120s'")
            s.run("BEGIN")
        a.run("UPDATE payments SET amount = 5 WHERE id = 5")
        b.run("UPDATE payments SET amount = 6 WHERE id = 6")
        a.start("UPDATE payments SET amount = 5 WHERE id = 6")
        b.start("UPDATE payments SET amount = 6 WHERE id = 5")
        app = QueuetopApp(lambda sink: Sampler(db.target, sink, interval_s=0.3), backend=DatabaseBackend(db.target))
        async with app.run_test(size=size) as pilot:
            tree = app.query_one(LocksPanel).query_one(Tree)

            def complete() -> bool:
                said = words(" ".join(text for _depth, text in tree_lines(tree)))
                return "wait cycle" in said and f"prepared '{gid}'" in said and "idle in xact" in said

            await settle(pilot, app, complete, "the whole picture in the tree", 1500)
            cycle = next(c for c in app.snapshot.cycles)
            first, second = cycle.members
            assert_whole(tree, tree_lines(tree), (
                f"{waiter.pid} waits",
                "wants to update a row of payments (0,1)",
                f"wants to update a row of payments (0,2) held by prepared '{gid}'",
                "no session: COMMIT or ROLLBACK PREPARED",
                f"wait cycle {first} → {second} → {first}",
                "deadlock, past deadlock_timeout 1s (a session set its own?)" if (cycle.wait_s or 0) > 1 else "deadlock: broken in",
            ), [LIVE_ROOT_QUERY, "UPDATE payments SET amount = amount - 100 WHERE id = 1", "UPDATE payments SET amount = 1 WHERE id = 2",
                "UPDATE payments SET amount = 5 WHERE id = 6", "UPDATE payments SET amount = 6 WHERE id = 5", "reporting",
                "billing-worker", "settlement", "transfer-a", "transfer-b", f"'{gid}'", f"postgres@{db.name}"])
