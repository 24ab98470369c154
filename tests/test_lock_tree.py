"""The lock tree built cycle after cycle (probes/locks.py's LockTrees): a picture that holds what
the last one held but its times is not worked out again, and must still read exactly as one built
from nothing, with this cycle's times; anything else that changes is seen at once."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from probes.locks import LockTrees, build_lock_tree

PIDS = list(range(1, 9))
HOLDERS = [90, 91]


def _row(pid, blocked_by, lock_type, wait_s, **extra):
    return {"pid": pid, "leader_pid": None, "blocked_by": blocked_by, "wait_s": wait_s, "xact_age_s": wait_s + 1.0,
            "lock_type": lock_type, "mode": "ExclusiveLock", "relation": "t", "relation_oid": 7, "page": 0, "tuple": 1,
            "query": "UPDATE t SET n = 1", "application_name": "app", "state": "active", "database": "db",
            "row_relation_oid": None, "holders": [], **extra}


@st.composite
def pictures(draw):
    """Waiting rows (chains, rings, parallel workers, prepared transactions), the blockers' sessions
    and the prepared transactions, as PostgresProbes hands them to the tree."""
    pids = draw(st.lists(st.sampled_from(PIDS), min_size=1, max_size=len(PIDS), unique=True))
    rows = []
    for pid in pids:
        blocked_by = draw(st.lists(st.sampled_from([*pids, *HOLDERS, 0]), min_size=1, max_size=4, unique=True))
        lock_type = draw(st.sampled_from(["transactionid", "tuple", "relation", "advisory"]))
        leader = draw(st.sampled_from([None, None, None, *pids]))
        rows.append(_row(pid, blocked_by, lock_type, draw(st.floats(0, 100)), leader_pid=leader,
                         multixact_holders=draw(st.sampled_from([None, [HOLDERS[1]]]))))
    others = {pid: {"pid": pid, "leader_pid": None, "state": "idle in transaction", "xact_age_s": draw(st.floats(0, 100)),
                    "query": "BEGIN", "application_name": "holder"} for pid in HOLDERS}
    prepared = [{"gid": "g1", "owner": "o", "database": "db", "xid": "9", "age_s": draw(st.floats(0, 100))}]
    by_prepared = {r["pid"]: {"g1"} for r in rows if 0 in r["blocked_by"]}
    return rows, others, prepared, by_prepared


def _retimed(picture, times):
    """The same picture, every time moved on by `times` seconds."""
    rows, others, prepared, by_prepared = copy.deepcopy(picture)
    for row in rows:
        row["wait_s"] += times
        row["xact_age_s"] += times
    for other in others.values():
        other["xact_age_s"] += times
    for entry in prepared:
        entry["age_s"] += times
    return rows, others, prepared, by_prepared


@settings(max_examples=300, deadline=None)
@given(pictures(), st.floats(0.5, 50))
def test_a_picture_whose_times_alone_moved_reads_as_one_built_from_nothing(picture, later):
    trees = LockTrees()
    for times in (0.0, later, later * 2):
        rows, others, prepared, by_prepared = _retimed(picture, times)
        expected = build_lock_tree(*copy.deepcopy((rows, others, prepared, by_prepared)))
        assert trees.build(rows, others, prepared, by_prepared, ()) == expected


def test_what_else_changes_is_seen_at_once():
    trees = LockTrees()
    rows = [_row(1, [90], "transactionid", 1.0), _row(2, [1, 90], "tuple", 0.5)]
    others = {90: {"pid": 90, "leader_pid": None, "state": "idle in transaction", "xact_age_s": 3.0, "query": "BEGIN",
                   "application_name": "holder"}}

    def build():
        picture = trees.build(copy.deepcopy(rows), copy.deepcopy(others), [], {}, ())
        assert picture == build_lock_tree(copy.deepcopy(rows), copy.deepcopy(others))
        return picture

    first = build()
    assert [b.pid for b in first.blocked] == [1, 2] and first.blockers[0].state == "idle in transaction"
    rows[1]["wait_s"] = 2.5
    assert [b.wait_s for b in build().blocked] == [1.0, 2.5]
    others[90]["state"] = "active"  # the holder got going: nothing else moved
    assert build().blockers[0].state == "active"
    rows[0]["query"] = "DELETE FROM t"  # a waiter's next statement
    assert build().blocked[0].query == "DELETE FROM t"
    rows[1]["blocked_by"] = [1]  # the holder no longer ahead of the second one
    assert build().blocked[1].blocked_by == (1,)
    rows.append(_row(3, [2, 1, 90], "tuple", 0.1))  # and one more queued behind
    seen = build()
    assert [b.pid for b in seen.blocked] == [1, 2, 3] and seen.blockers[0].blocked_count == 3


@st.composite
def wait_graphs(draw):
    """Waiters and their blockers (other waiters, sessions that do not wait, prepared transactions):
    chains, shared blockers, pile-ups (each waiter blocked by every one ahead of it) and cycles."""
    pids = draw(st.lists(st.integers(1, 40), min_size=1, max_size=25, unique=True))
    blockers_of = {}
    for n, pid in enumerate(pids):
        if draw(st.booleans()):  # a pile-up's waiter: every one queued ahead of it, and the holder
            chosen = [*pids[:n], 100]
        else:
            chosen = draw(st.lists(st.sampled_from([*pids, 100, 101, 102]), max_size=4, unique=True))
        blockers_of[pid] = frozenset(b for b in chosen if b != pid)
    gids_of = {pid: frozenset(draw(st.lists(st.sampled_from(["g1", "g2"]), max_size=1))) for pid in pids}
    return blockers_of, gids_of


@settings(max_examples=400, deadline=None)
@given(wait_graphs())
def test_the_quick_roots_of_a_graph_without_cycles_are_tarjans(graph):
    """A pile-up's waits are as many as pairs of its sessions: the roots are worked out in set
    operations when the graph has no cycle, and must then be exactly what Tarjan's algorithm says
    (roots, prepared transactions, no cycles); with a cycle the quick way gives up."""
    from probes.locks import _roots_in_general, _roots_without_cycles

    blockers_of, gids_of = graph
    quick, general = _roots_without_cycles(blockers_of, gids_of), _roots_in_general(blockers_of, gids_of)
    has_cycle = any(c.cycle is not None for c in general.values())
    if has_cycle:
        assert quick is None
        return
    assert quick is not None
    for pid in blockers_of:
        assert quick[pid].roots == general[pid].roots and quick[pid].gids == general[pid].gids, pid
        assert quick[pid].cycle is None and quick[pid].cycles == []


def test_a_pile_up_of_two_thousand_is_worked_out_without_a_step_per_wait():
    """2,000 sessions on one row as the server reports them (1,999,000 waits): one root for all,
    each blocked by all queued ahead of it, and the picture holds every one of them."""
    holder, pids = 100_000, list(range(1, 2001))
    rows = [_row(pid, [holder] if n == 0 else pids[:n], "transactionid" if n == 0 else "tuple", 1.0) for n, pid in enumerate(pids)]
    others = {holder: {"pid": holder, "leader_pid": None, "state": "idle in transaction", "xact_age_s": 9.0,
                       "query": "BEGIN", "application_name": "holder"}}
    picture = build_lock_tree(rows, others)
    assert len(picture.blocked) == 2000 and {b.root_blockers for b in picture.blocked} == {(holder,)}
    assert [(r.pid, r.blocked_count) for r in picture.blockers] == [(holder, 2000)]
    assert next(b for b in picture.blocked if b.pid == 2000).blocked_by == tuple(range(1, 2000))
