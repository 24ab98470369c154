"""The Locks tree's layout (tui/widgets/panels/lock_layout.py) and the panel that draws it, at the
size of an incident: each session once, under what it waits for; identical waiters one group,
every pid listed when it is opened; a long chain going on at the deepest level; the cursor on the
same node (a session's pid) while the tree is built again around it, and saying so when its
session ends (issue 43)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from textual.widgets import Tree

from probes.model import BlockedSession, Blocker, PreparedXact, WaitCycle
from tui.sample import pileup_snapshot, sample_snapshot
from tui.widgets.panels import LocksPanel
from tui.widgets.panels.lock_layout import GROUP_MIN, MAX_DEPTH, lay_out

from .test_tui import sample_app, settle

HOLDER, FIRST, CHAIN_ROOT = 50_000, 50_001, 60_000


def ended_said(tree, pid: int) -> bool:
    """The Locks root says the cursor's session ended: first, in fewer words where the panel is narrow."""
    label = str(tree.root.label)
    return label.startswith((f"session {pid} ended · ", f"{pid} ended · "))


def _placed(layout) -> list[int]:
    """Every session the layout shows, a group's members included, as often as it shows it."""
    out = []
    for node in layout.nodes:
        if node.key[0] == "s":
            out.append(node.key[1])
        elif node.key[0] == "g":
            out.extend(node.members)
    return out


def test_a_pile_up_of_two_thousand_lies_flat_under_its_holder_as_one_group():
    snapshot = pileup_snapshot(waiters=2000, chain=50)
    layout = lay_out(snapshot)
    placed = _placed(layout)
    assert sorted(placed) == sorted([*(b.pid for b in snapshot.blocked), HOLDER, CHAIN_ROOT])  # each once, and the roots
    [group] = [n for n in layout.nodes if n.key[0] == "g"]
    assert group.members == tuple(range(FIRST, FIRST + 2000)) and group.parent == ("s", HOLDER) and group.depth == 2
    # The chain: each under the one it waits for down to MAX_DEPTH, then on at that depth, beside.
    chain = [n for n in layout.nodes if n.key[0] == "s" and n.key[1] > CHAIN_ROOT]
    assert [n.key[1] for n in chain] == list(range(CHAIN_ROOT + 1, CHAIN_ROOT + 51))
    assert [n.depth for n in chain] == [min(d + 1, MAX_DEPTH) for d in range(1, 51)]
    deep = chain[-1]
    assert deep.depth == MAX_DEPTH and deep.under != deep.key[1] - 1  # drawn beside: its label names what it waits for
    assert len(layout.nodes) < 60  # 2,050 sessions, a handful of nodes


def test_identical_waiters_are_grouped_from_group_min_and_the_others_stay_themselves():
    def waiter(pid, query="UPDATE t SET v = 1 WHERE id = 1", **kw):
        fields = dict(blocked_by=(1,), root_blocker=1, root_blockers=(1,), wait_s=1.0, lock_type="transactionid", mode="ShareLock",
                      relation="t", query=query, application="app", wants="to update a row of t (0,1)", holders=(1,))
        return BlockedSession(pid=pid, **{**fields, **kw})

    root = Blocker(pid=1, blocked_count=GROUP_MIN * 2, state="idle in transaction", xact_age_s=5.0, query="BEGIN", application="x")
    same = [waiter(10 + n) for n in range(GROUP_MIN + 1)]
    fewer = [waiter(30 + n, query="DELETE FROM t WHERE id = 1") for n in range(GROUP_MIN - 1)]
    # One of a kind that someone waits on is shown as itself, with its waiter under it.
    behind = waiter(50, blocked_by=(10,), holders=(10,), root_blockers=(1,))
    snapshot = replace(sample_snapshot(), blocked=(*same, *fewer, behind), blockers=(root,), cycles=(), prepared_xacts=())
    layout = lay_out(snapshot)
    groups = [n for n in layout.nodes if n.key[0] == "g"]
    assert [g.members for g in groups] == [tuple(range(11, 11 + GROUP_MIN))]  # 10 has a waiter: itself
    singles = {n.key[1]: n for n in layout.nodes if n.key[0] == "s"}
    assert set(singles) == {1, 10, 50, *range(30, 30 + GROUP_MIN - 1)}
    assert singles[50].parent == ("s", 10) and singles[50].under == 10


def test_a_cycle_a_prepared_transaction_and_a_shared_row_each_place_a_session_once():
    row = dict(lock_type="transactionid", mode="ShareLock", relation="t", application="app", wait_s=2.0)
    blocked = (
        # 3 and 4 wait on each other; 5 waits behind the cycle.
        BlockedSession(pid=3, blocked_by=(4,), root_blocker=4, root_blockers=(4,), in_cycle=True, holders=(4,), query="A", **row),
        BlockedSession(pid=4, blocked_by=(3,), root_blocker=3, root_blockers=(3,), in_cycle=True, holders=(3,), query="B", **row),
        BlockedSession(pid=5, blocked_by=(3,), root_blocker=3, root_blockers=(3, 4), holders=(3,), query="C", **row),
        # 6 waits for a prepared transaction.
        BlockedSession(pid=6, blocked_by=(), root_blocker=None, root_blockers=(), blocked_by_prepared=("g",), root_prepared=("g",),
                       query="D", **row),
        # 7 wants a row two sessions share (both hold it): under the first, the other named in its label.
        BlockedSession(pid=7, blocked_by=(8, 9), root_blocker=8, root_blockers=(8, 9), holders=(8, 9), query="E", **row),
    )
    blockers = tuple(Blocker(pid=p, blocked_count=1, state="idle in transaction", xact_age_s=1.0, query="x", application="a")
                     for p in (8, 9))
    snapshot = replace(sample_snapshot(), blocked=blocked, blockers=blockers,
                       prepared_xacts=(PreparedXact(gid="g", owner="o", database="d", age_s=9.0, blocked_count=1),),
                       cycles=(WaitCycle(id=1, members=(3, 4), waiting=(5,), wait_s=2.0),))
    layout = lay_out(snapshot)
    parents = {n.key[1]: n.parent for n in layout.nodes if n.key[0] == "s"}
    assert sorted(_placed(layout)) == [3, 4, 5, 6, 7, 8, 9]
    assert parents[3] == parents[4] == ("c", 1) and parents[5] == ("s", 3) and parents[6] == ("p", "g") and parents[7] == ("s", 8)
    assert layout.parents >= {("c", 1), ("s", 3), ("p", "g"), ("s", 8)}


async def test_the_dashboard_draws_a_pile_up_of_two_thousand_and_opens_its_group():
    frames = [pileup_snapshot(waiters=2000, chain=50, step=n) for n in range(2)]
    app = sample_app(snapshots=frames)
    async with app.run_test(size=(100, 30)) as pilot:
        panel = app.query_one(LocksPanel)
        tree = panel.query_one(Tree)

        def group_node():
            return next((n for n in tree.root.children[0].children if str(n.label).startswith("2,000 sessions")), None)

        await settle(pilot, app, lambda: group_node() is not None, "the pile-up's group under its holder")
        assert str(tree.root.label).startswith("2,050 blocked session(s)")
        label = " ".join(str(n.label) for n in [group_node(), *group_node().children])
        assert "wait 0.1s–3m20s" in label and "wants to update a row of accounts (0,7)" in label
        # Selecting a member opens the group's list and puts the cursor on it: every pid is there.
        assert panel.select_pid(FIRST + 1234)
        assert panel.selected_pid == FIRST + 1234
        listed = [n for n in group_node().children if n.allow_expand and not n.data and n.children]
        members = [n.data for n in listed[0].children]
        assert members == list(range(FIRST, FIRST + 2000))
        # A key is answered: the next sample applied and the help opened and closed.
        await pilot.press("r")
        await pilot.press("question_mark")
        await settle(pilot, app, lambda: type(app.screen).__name__ == "HelpScreen", "the help")
        await pilot.press("escape")
        await settle(pilot, app, lambda: panel.selected_pid == FIRST + 1234, "the cursor still on the same session")


async def test_the_cursor_stays_on_its_session_while_the_tree_moves_and_says_when_it_ended():
    base = pileup_snapshot(waiters=20, chain=6)
    newcomer = Blocker(pid=40_000, blocked_count=1, state="idle in transaction", xact_age_s=999.0, query="LOCK t", application="ops")
    waiter = BlockedSession(pid=40_001, blocked_by=(40_000,), root_blocker=40_000, root_blockers=(40_000,), wait_s=1.0,
                            lock_type="relation", mode="AccessShareLock", relation="t", query="SELECT 1 FROM t", application="r",
                            wants="ACCESS SHARE on t to SELECT", holders=(40_000,))
    # Then a root with the most waiters comes first: every line below it moves down.
    moved = replace(base, blocked=(waiter, *base.blocked), blockers=(newcomer, *base.blockers))
    # Then the chain's end is gone (ended) along with everything after the session the cursor is on.
    ended = replace(base, blocked=tuple(b for b in base.blocked if b.pid < CHAIN_ROOT + 3))
    later = replace(ended, blocked=tuple(replace(b, wait_s=(b.wait_s or 0) + 2) for b in ended.blocked))
    app = sample_app(snapshots=[base, moved, ended, later])
    async with app.run_test(size=(100, 30)) as pilot:
        panel = app.query_one(LocksPanel)
        tree = panel.query_one(Tree)
        target = CHAIN_ROOT + 4
        await settle(pilot, app, lambda: panel.select_pid(target), "the chain's fourth session selected")
        line = tree.cursor_line
        await pilot.press("r")
        await settle(pilot, app, lambda: any(n.data == 40_000 for n in tree.root.children), "the new root drawn")
        assert panel.selected_pid == target and tree.cursor_line != line  # the same session, on another line
        await pilot.press("r")
        await settle(pilot, app, lambda: ended_said(tree, target), "its end said")
        assert panel.selected_pid is None  # on the root: nothing to cancel, no other session taken for it
        await pilot.press("down")  # the operator moves on: at the next sample the notice is gone
        await pilot.press("r")
        await settle(pilot, app, lambda: not ended_said(tree, target), "the notice read and gone")


@pytest.mark.parametrize("size", [(80, 24), (100, 30)])
async def test_when_the_last_blocked_session_ends_the_root_still_says_none_are_blocked(size):
    """The cursor's session ends with the whole pile-up: the Locks panel narrows to what it holds
    now, and its root line says no blocked sessions (the ended notice beside it where it fits, after
    it where not), never an empty line (watched in tmux: a bare ▼ at 100x30 after K on the holder)."""
    base = pileup_snapshot(waiters=20, chain=6)
    calm = replace(base, blocked=(), blockers=(), cycles=())
    app = sample_app(snapshots=[base, calm, calm])
    async with app.run_test(size=size) as pilot:
        panel = app.query_one(LocksPanel)
        tree = panel.query_one(Tree)
        target = CHAIN_ROOT + 4
        await settle(pilot, app, lambda: panel.select_pid(target), "a chain's session selected")
        await pilot.press("r")
        await settle(pilot, app, lambda: "no blocked sessions" in str(tree.root.label), "none blocked, said")
        await pilot.pause(0.2)  # the row's widths shared again after the tree narrowed
        label = str(tree.root.label)
        width = tree.size.width - 4  # the root's ▼ and the tree's guides
        assert "no blocked sessions" in label
        if width >= len(f"{target} ended · no blocked sessions"):
            assert ended_said(tree, target), (label, width)
        else:
            assert label.startswith("no blocked sessions"), (label, width)
        assert panel.selected_pid is None
