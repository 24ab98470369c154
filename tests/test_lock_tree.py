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
