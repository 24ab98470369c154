"""The blocking tree, built from what pg_locks and pg_blocking_pids say (probes/sql/postgresql/
locks.sql): who waits for whom, every root of every chain, wait cycles, prepared transactions,
and what each session waits on, named as the application would name it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, NamedTuple

from .locklabels import lock_target, visible_text, wants_of
from .model import AppLock, BlockedSession, Blocker, PreparedXact, WaitCycle

# PostgreSQL's table-level lock modes, weakest first, and which modes each one conflicts with
# (the "Conflicting Lock Modes" table of the documentation). Row-level and advisory locks use
# the same modes.
MODES = ("AccessShareLock", "RowShareLock", "RowExclusiveLock", "ShareUpdateExclusiveLock", "ShareLock",
         "ShareRowExclusiveLock", "ExclusiveLock", "AccessExclusiveLock")
_CONFLICTS = {
    "AccessShareLock": {"AccessExclusiveLock"},
    "RowShareLock": {"ExclusiveLock", "AccessExclusiveLock"},
    "RowExclusiveLock": {"ShareLock", "ShareRowExclusiveLock", "ExclusiveLock", "AccessExclusiveLock"},
    "ShareUpdateExclusiveLock": {"ShareUpdateExclusiveLock", "ShareLock", "ShareRowExclusiveLock", "ExclusiveLock",
                                 "AccessExclusiveLock"},
    "ShareLock": {"RowExclusiveLock", "ShareUpdateExclusiveLock", "ShareRowExclusiveLock", "ExclusiveLock",
                  "AccessExclusiveLock"},
    "ShareRowExclusiveLock": {"RowExclusiveLock", "ShareUpdateExclusiveLock", "ShareLock", "ShareRowExclusiveLock",
                              "ExclusiveLock", "AccessExclusiveLock"},
    "ExclusiveLock": set(MODES[1:]),
    "AccessExclusiveLock": set(MODES),
}

MODE_RANK = {mode: n for n, mode in enumerate(MODES)}

# What identifies a lockable object in pg_locks (the columns that are set depend on its type).
TARGET_COLUMNS = ("lock_type", "database_oid", "relation_oid", "page", "tuple", "virtualxid", "transactionid", "classid", "objid",
           "objsubid")


def conflicts(held: str | None, wanted: str | None) -> bool:
    return held is not None and wanted is not None and held in _CONFLICTS.get(wanted, set(MODES))


def target_of(row: dict) -> tuple:
    return tuple(row.get(column) for column in TARGET_COLUMNS)


def prepared_blockers(waiting_rows: Iterable[dict], prepared: Iterable[dict], held: Iterable[dict]) -> dict[int, set[str]]:
    """For each waiter that pg_blocking_pids says is blocked by a prepared transaction (pid 0):
    the gids of the prepared transactions holding a conflicting lock on what it waits for. A
    prepared transaction's locks have no pid; they share a virtual transaction with the lock on
    its own transaction id (pg_prepared_xacts.transaction), which says which gid it is."""
    held = list(held)
    gid_of_xid = {p["xid"]: p["gid"] for p in prepared}
    gid_of = {lock["virtualtransaction"]: gid_of_xid[lock["transactionid"]] for lock in held
              if lock["lock_type"] == "transactionid" and lock["transactionid"] in gid_of_xid}
    holders: dict[tuple, list[tuple[str, str]]] = {}
    for lock in held:
        gid = gid_of.get(lock["virtualtransaction"])
        if gid is not None:
            holders.setdefault(target_of(lock), []).append((gid, lock["mode"]))
    found: dict[int, set[str]] = {}
    for row in waiting_rows:
        if 0 in row["blocked_by"]:
            found[row["pid"]] = {gid for gid, mode in holders.get(target_of(row), []) if conflicts(mode, row["mode"])}
    return found


class LockPicture(NamedTuple):
    """What the locks probe returns: the blocked sessions, the root blockers (a wait cycle's
    members among them), the prepared transactions, the application locks and the wait cycles."""

    blocked: tuple[BlockedSession, ...]
    blockers: tuple[Blocker, ...]
    prepared_xacts: tuple[PreparedXact, ...]
    app_locks: tuple[AppLock, ...]
    cycles: tuple[WaitCycle, ...]


def build_lock_tree(
    waiting_rows: Iterable[dict], others: dict[int, dict], prepared: Iterable[dict] = (), by_prepared: dict[int, set[str]] | None = None,
    app_locks: tuple[AppLock, ...] = (),
) -> LockPicture:
    """The lock picture: blocked sessions with every blocker and every root, the root blockers
    with how many sessions (and processes) each holds up, the prepared transactions with the same
    count, `app_locks` as given, and the wait cycles. Parallel workers fold into their leader, counted; a wait cycle (a deadlock the
    server has not yet broken) is an object of its own, whose members are the roots of everything
    that waits on it.

    A waiting row may carry, besides what locks.sql's `picture` gives: `multixact_holders`, the
    other sessions sharing the row it waits on (PostgresProbes reads the row's multixact), and
    `holders_note`, why they could not be read. `LockTrees` builds a host's successive pictures."""
    waiting_rows, prepared = list(waiting_rows), list(prepared)
    return _tree(waiting_rows, others, prepared, by_prepared or {}).picture(waiting_rows, others, prepared, app_locks)


RECENT_SHAPES = 8  # wait graphs a host's LockTrees remembers


class LockTrees:
    """build_lock_tree for one host's pictures, cycle after cycle. A pile-up keeps its shape while
    its waits grow: when a picture holds all that the last one held but its times (wait_s,
    xact_age_s, age_s), the tree is not worked out again, only its samples made with the new
    times (a pile-up of 16: 0.115 -> 0.07 ms of the client's time, measured)."""

    def __init__(self) -> None:
        self._last: tuple[tuple, _Tree] | None = None
        # The last few wait graphs' shapes: when the picture changes but its graph is one of them
        # (a pile-up of 16 waits is 136 edges: walking them and sorting what they give was most of
        # working out the tree, measured), only the rest is worked out again.
        self._shapes: dict[tuple, _Shape] = {}

    def build(self, waiting_rows: list[dict], others: dict[int, dict], prepared: list[dict],
              by_prepared: dict[int, set[str]], app_locks: tuple[AppLock, ...]) -> LockPicture:
        key = (_untimed(waiting_rows, "wait_s", "xact_age_s"), _untimed(others.values(), "xact_age_s"),
               _untimed(prepared, "age_s"), by_prepared)
        if self._last is not None and self._last[0] == key:
            tree = self._last[1]
        else:
            tree = _tree(waiting_rows, others, prepared, by_prepared, self._shapes)
            self._last = (key, tree)
        return tree.picture(waiting_rows, others, prepared, app_locks)


def _untimed(rows: Iterable[dict], *times: str) -> list[tuple] | list[dict]:
    """What `rows` hold but the fields named `times`, for comparing with another cycle's: each row's
    other values in one tuple, taken by one itemgetter when every row has the first one's keys (a
    pile-up's 200 rows: C loops, not a copy of each row), else copies of the rows without them."""
    rows = list(rows)
    if not rows:
        return []
    keys = [key for key in rows[0] if key not in times]
    if len(keys) > 1:
        getter = itemgetter(*keys)
        size = len(rows[0])
        if all(len(row) == size for row in rows):
            try:
                return [tuple(keys), *(getter(row) for row in rows)]
            except KeyError:
                pass  # another row has other keys
    copies = []
    for row in rows:
        copy = dict(row)
        for name in times:
            copy.pop(name, None)
        copies.append(copy)
    return copies


@dataclass(frozen=True, slots=True)
class _Tree:
    """A lock picture but its times: each sample's other fields, and where its time is read from
    (an index into the waiting rows or the prepared transactions, a blocker's pid)."""

    blocked: tuple[tuple[int, dict[str, Any]], ...]  # (its waiting row, BlockedSession's fields but wait_s)
    roots: tuple[tuple[int | None, int | None, dict[str, Any]], ...]  # (pid in others, or its waiting row; Blocker's fields but xact_age_s)
    cycles: tuple[tuple[tuple[int, ...], dict[str, Any]], ...]  # (its members' waiting rows, WaitCycle's fields but wait_s)
    prepared: tuple[tuple[int, dict[str, Any]], ...]  # (its prepared row, PreparedXact's fields but age_s)

    def picture(self, waiting_rows: list[dict], others: dict[int, dict], prepared: list[dict],
                app_locks: tuple[AppLock, ...]) -> LockPicture:
        blocked = tuple(BlockedSession(wait_s=waiting_rows[i]["wait_s"], **fields) for i, fields in self.blocked)
        roots = tuple(
            Blocker(xact_age_s=(others[pid] if pid is not None else waiting_rows[i] if i is not None else {}).get("xact_age_s"), **fields)
            for pid, i, fields in self.roots
        )
        cycles = tuple(
            WaitCycle(wait_s=max((wait for i in members if (wait := waiting_rows[i]["wait_s"]) is not None), default=None), **fields)
            for members, fields in self.cycles
        )
        prepared_found = tuple(PreparedXact(age_s=prepared[i]["age_s"], **fields) for i, fields in self.prepared)
        return LockPicture(blocked, roots, prepared_found, app_locks, cycles)


def _tree(waiting_rows: list[dict], others: dict[int, dict], prepared: list[dict], by_prepared: dict[int, set[str]],
          shapes: dict[tuple, _Shape] | None = None) -> _Tree:
    # A parallel worker's leader (PostgreSQL 13+); most pictures have none, and then a pid is its own.
    leader = {r["pid"]: r["leader_pid"] for r in waiting_rows if r.get("leader_pid") not in (None, r["pid"])}
    leader.update({pid: r["leader_pid"] for pid, r in others.items() if r.get("leader_pid") not in (None, pid)})

    waiting: dict[int, int] = {}  # pid -> the index of its row (a leader's own when it waits too)
    blockers_of: dict[int, frozenset[int]] = {}
    holders_of: dict[int, set[int]] = {}
    gids_of: dict[int, frozenset[str]] = {}
    workers_of: dict[int, list[int]] = {}
    # A row's lockers, as its first waiter (the one waiting on the locker's transaction id) knows
    # them: the waiters queued behind it on the row's tuple lock want the same row.
    row_holders: dict[tuple, set[int]] = {}
    in_order: Iterable[int] = range(len(waiting_rows))
    if leader:
        in_order = sorted(in_order, key=lambda i: (waiting_rows[i]["pid"] in leader, waiting_rows[i]["pid"]))
    for index in in_order:
        row = waiting_rows[index]
        pid = leader.get(row["pid"], row["pid"])
        shared = row.get("multixact_holders") or ()
        if leader:
            blockers = {leader.get(b, b) for b in (*row["blocked_by"], *shared) if b != 0}  # 0: a prepared transaction
        else:
            blockers = {*row["blocked_by"], *shared}
            blockers.discard(0)
        blockers.discard(pid)
        holders = _holders(row, blockers, leader)
        if row.get("lock_type") == "transactionid" and row.get("row_relation_oid") is not None:
            row_holders.setdefault((row["row_relation_oid"], row["row_page"], row["row_tuple"]), set()).update(holders)
        gids = frozenset(by_prepared[row["pid"]]) if row["pid"] in by_prepared else _NO_GIDS
        if pid in waiting:  # a parallel worker of a leader already listed: merge its blockers
            blockers_of[pid] |= blockers
            holders_of[pid] |= holders
            gids_of[pid] |= gids
            workers_of[pid].append(row["pid"])
            continue
        waiting[pid], blockers_of[pid], holders_of[pid], gids_of[pid] = index, frozenset(blockers), holders, gids
        workers_of[pid] = [] if pid == row["pid"] else [row["pid"]]  # a worker that waits while its leader does not
    for pid, index in waiting.items():
        row = waiting_rows[index]
        if row.get("lock_type") == "tuple" and row.get("relation_oid") is not None:
            holders_of[pid] |= row_holders.get((row["relation_oid"], row.get("page"), row.get("tuple")), set()) - {pid}

    shape = _shape_of(blockers_of, gids_of, shapes)
    blocked: list[tuple[int, dict[str, Any]]] = []
    workers_behind: dict[int, int] = {}  # root -> the parallel workers among the processes behind it
    for pid in shape.order:
        index = waiting[pid]
        row = waiting_rows[index]
        roots = shape.roots[pid]
        workers = _sorted(workers_of[pid])
        if workers:
            for root in roots:
                workers_behind[root] = workers_behind.get(root, 0) + len(workers)
        relation, ctid = lock_target(row)
        query = visible_text(row["query"])
        blocked.append((index, {
            "pid": pid,
            "blocked_by": shape.blocked_by[pid],
            "root_blocker": roots[0] if roots else None,
            "root_blockers": roots,
            "blocked_by_prepared": shape.gids[pid],
            "root_prepared": shape.root_gids[pid],
            "lock_type": row["lock_type"],
            "mode": row["mode"],
            "relation": relation,
            "row": ctid,
            "database": row.get("database"),
            "query": query,
            "application": row["application_name"],
            "state": row["state"],
            "in_cycle": pid in shape.member_of,
            "wants": wants_of(row, relation, ctid, query),
            "holders": _sorted(holders_of[pid]),
            "holders_note": row.get("holders_note"),
            "worker_pids": workers,
            "root_cycles": shape.root_cycles[pid],
            "ahead_unread": bool(row.get("ahead_unread")),
        }))
    cycles = tuple((tuple(waiting[m] for m in members), {"id": n, "members": members, "waiting": waiting_on})
                   for n, members, waiting_on in shape.cycles)
    # The strongest mode each session holds on what someone waits for (a table, an object, a key:
    # a row's lock is no mode of pg_locks), for the roots.
    held: dict[int, str] = {}
    for row in waiting_rows:
        for holder, mode in row.get("holders") or ():
            holder = leader.get(holder, holder)
            if conflicts(mode, row.get("mode")) and MODE_RANK.get(mode, -1) > MODE_RANK.get(held.get(holder, ""), -1):
                held[holder] = mode
    roots_found: list[tuple[int | None, int | None, dict[str, Any]]] = []
    for root, count in shape.counts:
        other = root if others.get(root) else None  # a cycle's member waits itself
        info = others[root] if other is not None else waiting_rows[waiting[root]] if root in waiting else {}
        roots_found.append((other, waiting.get(root) if other is None else None, {
            "pid": root,
            "blocked_count": count,
            "state": info.get("state"),
            "query": visible_text(info.get("query")),
            "application": info.get("application_name"),
            "blocked_processes": count + workers_behind.get(root, 0),
            "cycle": shape.member_of.get(root),
            "held_mode": held.get(root),
        }))
    prepared_found = tuple(
        (i, {"gid": p["gid"], "owner": p["owner"], "database": p["database"], "blocked_count": shape.prepared_counts.get(p["gid"], 0)})
        for i, p in enumerate(prepared)
    )
    return _Tree(tuple(blocked), tuple(roots_found), cycles, prepared_found)


_NO_GIDS: frozenset[str] = frozenset()


def _sorted(items: Iterable) -> tuple:
    """`items` sorted, as a tuple: most sets here hold one item or none (a pile-up's lock tree is
    built every cycle)."""
    items = tuple(items)
    return items if len(items) < 2 else tuple(sorted(items))


def _holders(row: dict, blockers: set[int], leader: dict[int, int]) -> set[int]:
    """Those of a waiter's blockers that hold what it wants (not only queue ahead of it). A wait
    for a transaction (a row's locker, an INSERT's duplicate key) or a virtual transaction (CREATE
    INDEX CONCURRENTLY) is a wait for its one owner, and every other member of a shared row lock
    holds the row too; otherwise the granted locks on the same object in a conflicting mode
    (locks.sql's `holders`). A tuple lock's waiter gets its row's lockers from the row's first
    waiter (build_lock_tree)."""
    lock_type = row.get("lock_type")
    if lock_type in ("transactionid", "virtualxid", "safe snapshot"):
        return set(blockers)
    if lock_type == "tuple":
        return set()
    held = row.get("holders")
    if held is None:  # SQL Server's rows: its blockers are the holders it reports
        return set(blockers)
    return {leader.get(pid, pid) for pid, mode in held if conflicts(mode, row.get("mode"))} & blockers


def _in_order_of_waits(members: frozenset[int], blockers_of: Mapping[int, AbstractSet[int]]) -> tuple[int, ...]:
    """A cycle's members from the lowest pid, each followed by the (lowest) member it waits for."""
    order: list[int] = []
    current = min(members)
    while current not in order:
        order.append(current)
        current = min((b for b in blockers_of[current] if b in members), default=order[0])
    return tuple(order) + tuple(sorted(members - set(order)))  # a component may be more than one ring


# The lock modes as a DBA writes them (LOCK TABLE's words).
@dataclass(frozen=True, slots=True)
class _Shape:
    """What a wait graph (each waiter's blockers and prepared transactions) says by itself, with
    every list sorted as the picture gives it. Each mapping is keyed by waiting pid."""

    order: tuple[int, ...]  # the waiting pids, in order
    blocked_by: dict[int, tuple[int, ...]]
    gids: dict[int, tuple[str, ...]]
    roots: dict[int, tuple[int, ...]]  # the sessions at the root of its chains (not itself)
    root_gids: dict[int, tuple[str, ...]]
    root_cycles: dict[int, tuple[int, ...]]
    counts: tuple[tuple[int, int], ...]  # (root, sessions behind it), the most first
    prepared_counts: dict[str, int]  # gid -> sessions behind it
    cycles: tuple[tuple[int, tuple[int, ...], tuple[int, ...]], ...]  # (id, members in order of waits, waiting on it)
    member_of: dict[int, int]  # a cycle's member -> the cycle's id


def _shape_of(blockers_of: dict[int, frozenset[int]], gids_of: dict[int, frozenset[str]],
              shapes: dict[tuple, _Shape] | None) -> _Shape:
    """The wait graph's shape, from `shapes` (a host's last few: LockTrees') when it is there."""
    if shapes is None:
        return _shape(blockers_of, gids_of)
    key = (tuple(blockers_of.items()), tuple(gids_of.items()))
    shape = shapes.get(key)
    if shape is None:
        shape = _shape(blockers_of, gids_of)
        if len(shapes) >= RECENT_SHAPES:
            del shapes[next(iter(shapes))]
        shapes[key] = shape
    return shape


def _shape(blockers_of: dict[int, frozenset[int]], gids_of: dict[int, frozenset[str]]) -> _Shape:
    reached = _roots_by_component(blockers_of, gids_of)
    # The wait cycles, numbered from 1 in the order of their lowest member.
    cycle_components = sorted({id(c): c for c in reached.values() if c.cycle is not None}.values(), key=lambda c: min(c.cycle or ()))
    cycle_id = {id(c): n for n, c in enumerate(cycle_components, 1)}
    ordered: dict[int, tuple[tuple[int, ...], tuple[str, ...], tuple[int, ...]]] = {}  # per component: sorted once
    order = tuple(sorted(blockers_of))
    roots: dict[int, tuple[int, ...]] = {}
    root_gids: dict[int, tuple[str, ...]] = {}
    root_cycles: dict[int, tuple[int, ...]] = {}
    counts: dict[int, int] = {}
    prepared_counts: dict[str, int] = {}
    waiting_on_cycle: dict[int, list[int]] = {}
    for pid in order:
        component = reached[pid]
        if id(component) not in ordered:
            ordered[id(component)] = (tuple(sorted(component.roots)), tuple(sorted(component.gids)),
                                      tuple(sorted(cycle_id[id(c)] for c in component.cycles)))
        all_roots, root_gids[pid], root_cycles[pid] = ordered[id(component)]
        roots[pid] = all_roots if pid not in component.roots else tuple(r for r in all_roots if r != pid)  # a cycle's member
        for root in roots[pid]:
            counts[root] = counts.get(root, 0) + 1
        for gid in root_gids[pid]:
            prepared_counts[gid] = prepared_counts.get(gid, 0) + 1
        for n in root_cycles[pid]:
            if component.cycle is None or cycle_id.get(id(component)) != n:
                waiting_on_cycle.setdefault(n, []).append(pid)
    cycles = tuple((n, _in_order_of_waits(c.cycle or frozenset(), blockers_of), tuple(waiting_on_cycle.get(n, ())))
                   for n, c in enumerate(cycle_components, 1))
    return _Shape(
        order=order,
        blocked_by={pid: _sorted(blockers) for pid, blockers in blockers_of.items()},
        gids={pid: _sorted(gids) for pid, gids in gids_of.items()},
        roots=roots,
        root_gids=root_gids,
        root_cycles=root_cycles,
        counts=tuple(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))),
        prepared_counts=prepared_counts,
        cycles=cycles,
        member_of={m: n for n, members, _waiting in cycles for m in members},
    )


@dataclass(slots=True, eq=False)
class _Component:
    """A strongly connected component of the wait graph, and what its members' chains end in."""

    roots: set[int]  # the sessions at the root (a wait cycle's members are among them)
    gids: set[str]  # the prepared transactions at the root
    cycles: list[_Component]  # the wait cycles at the root (itself, when it is one)
    cycle: frozenset[int] | None  # its members, when it is a wait cycle


def _roots_by_component(blockers_of: Mapping[int, AbstractSet[int]], gids_of: Mapping[int, AbstractSet[str]]) -> dict[int, _Component]:
    """For every waiting session: the sessions, prepared transactions and wait cycles at the root
    of its chains. The waits form a graph (waiter -> blocker); its strongly connected components
    (Tarjan's algorithm, without recursion: a chain may be thousands long) come out blockers first,
    so each component's roots are its own outside blockers plus the roots of the components it
    waits on: linear in the waits, where walking every chain from every waiter was cubic in a
    pile-up (each waiter of a row lock waits for all the waiters queued ahead of it). A component
    of more than one session is a wait cycle: its members are roots (ending one ends the wait),
    of one another and of everything behind them."""
    acyclic = _roots_without_cycles(blockers_of, gids_of)
    return acyclic if acyclic is not None else _roots_in_general(blockers_of, gids_of)


def _roots_in_general(blockers_of: Mapping[int, AbstractSet[int]], gids_of: Mapping[int, AbstractSet[str]]) -> dict[int, _Component]:
    """_roots_by_component by Tarjan's algorithm: any wait graph, cycles included, a step per wait."""
    # The roots are unions, so the order in which the graph is walked changes nothing.
    waiting = blockers_of
    edges = {pid: [b for b in blockers if b in waiting] for pid, blockers in blockers_of.items()}
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    component_of: dict[int, int] = {}
    results: list[_Component] = []
    counter = 0
    for start in waiting:
        if start in index:
            continue
        work = [(start, iter(edges[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, blockers = work[-1]
            advanced = False
            for blocker in blockers:
                if blocker not in index:
                    index[blocker] = low[blocker] = counter
                    counter += 1
                    stack.append(blocker)
                    on_stack.add(blocker)
                    work.append((blocker, iter(edges[blocker])))
                    advanced = True
                    break
                if blocker in on_stack and index[blocker] < low[node]:
                    low[node] = index[blocker]
            if advanced:
                continue
            work.pop()
            if work and low[node] < low[work[-1][0]]:
                low[work[-1][0]] = low[node]
            if low[node] == index[node]:  # node is the head of a component: pop it
                members = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member == node:
                        break
                here = len(results)
                component = _Component(roots=set(), gids=set(), cycles=[], cycle=frozenset(members) if len(members) > 1 else None)
                if component.cycle is not None:
                    component.roots |= component.cycle
                    component.cycles.append(component)
                for member in members:
                    component_of[member] = here
                for member in members:
                    component.gids |= gids_of[member]
                    for blocker in blockers_of[member]:
                        if blocker not in waiting:
                            component.roots.add(blocker)
                        elif component_of[blocker] != here:  # a component already done: blockers first
                            before = results[component_of[blocker]]
                            component.roots |= before.roots
                            component.gids |= before.gids
                            if before.cycles:
                                component.cycles += [c for c in before.cycles if c not in component.cycles]
                results.append(component)
    return {pid: results[component_of[pid]] for pid in waiting}


def _roots_without_cycles(blockers_of: Mapping[int, AbstractSet[int]],
                          gids_of: Mapping[int, AbstractSet[str]]) -> dict[int, _Component] | None:
    """_roots_by_component's answer for a wait graph without cycles (almost every one: the server
    breaks a deadlock within deadlock_timeout), in set operations rather than a step per wait: a
    pile-up on one row is as many waits as pairs of its sessions (each waits, in pg_blocking_pids'
    words, for every one queued ahead of it), 20,000 at 200 waiters, two million at 2,000. Each
    session's roots are its blockers that do not wait, and the roots of those that do, worked out
    first (depth first, blockers before their waiters; the sessions taken fewest waits first, so
    that a pile-up is worked out in its queue's order without a step down). Sessions whose roots
    are the same share one _Component. None when a cycle is met: the general algorithm then."""
    waiting = set(blockers_of)
    ahead = {pid: (blockers if isinstance(blockers, frozenset) else frozenset(blockers)) & waiting
             for pid, blockers in blockers_of.items()}
    done: dict[int, _Component] = {}
    resolved: set[int] = set()
    entered: set[int] = set()
    shared: dict[tuple[frozenset[int], frozenset[str]], _Component] = {}
    def work_out(pid: int) -> None:
        roots = set(blockers_of[pid]) - waiting
        gids = set(gids_of[pid])
        for part in set(map(done.__getitem__, ahead[pid])):  # the distinct components: few
            roots |= part.roots
            gids |= part.gids
        key = (frozenset(roots), frozenset(gids))
        component = shared.get(key)
        if component is None:
            component = shared[key] = _Component(roots=roots, gids=gids, cycles=[], cycle=None)
        done[pid] = component
        resolved.add(pid)

    for start in sorted(blockers_of, key=lambda pid: len(ahead[pid])):
        if start in entered:
            continue
        stack: list[tuple[int, bool]] = [(start, False)]  # (pid, its blockers entered already)
        while stack:
            pid, expanded = stack.pop()
            if expanded:
                if not ahead[pid] <= resolved:
                    return None  # one of them is still being worked out, below it: a cycle
                work_out(pid)
                continue
            if pid in entered:
                continue  # met again before it was worked out: its own entry below does it
            entered.add(pid)
            missing = ahead[pid] - resolved
            if not missing:  # (a pile-up taken in its queue's order: always)
                work_out(pid)
                continue
            stack.append((pid, True))
            stack.extend((blocker, False) for blocker in missing)
    return done
