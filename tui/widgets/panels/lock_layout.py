"""The Locks tree's layout: which node hangs under which, worked out in time proportional to the
sessions and their waits (never to the paths through them).

Each waiting session is shown once, under the session that holds what it wants (one of its
`holders`: the row's locker, the table's holder), else under a session it queues behind, else
under a prepared transaction it waits for; a wait cycle's members under their cycle. A pile-up
of sessions waiting for one row therefore lies flat under the row's holder, whatever order the
server queued them in (each waits, in pg_blocking_pids' words, for every one queued ahead of it:
a graph with as many paths as orderings). Identical waiters under one node (the same wants, the
same holders, query and application, nobody waiting on them) are one group node, "200 sessions
...", whose members are listed when it is opened, in the order they queue in. Below MAX_DEPTH, a chain goes on at that depth,
each label naming what it waits for.

Nothing here draws: LocksPanel (locks.py) turns the nodes into the Tree's."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from probes.model import BlockedSession, Blocker, PreparedXact, Snapshot

# Identical waiters under one node become a group from this many on (fewer read well one by one).
GROUP_MIN = 5
# The deepest level a node is drawn at: a longer chain goes on at this depth (a 50-deep chain
# would leave no room for its labels).
MAX_DEPTH = 8

# A node's key: ("s", pid) a session, ("p", gid) a prepared transaction, ("c", n) a wait cycle,
# ("g", parent key, signature) a group of identical waiters.
Key = tuple


@dataclass(frozen=True, slots=True)
class Node:
    key: Key
    parent: Key | None  # the node it is drawn under (None: at the top)
    depth: int  # 1 at the top
    under: int | None  # the session it is drawn under, which its label need not name again
    members: tuple[int, ...] = ()  # a group's sessions, by pid


@dataclass(frozen=True, slots=True)
class Layout:
    nodes: tuple[Node, ...]  # in the order shown (a group's members are not among them)
    blocked: dict[int, BlockedSession]
    roots: dict[int, Blocker]  # the root blockers shown (a wait cycle's members are under their cycle)
    prepared: dict[str, PreparedXact]
    cycles: dict[int, tuple[int, ...]]  # cycle number -> its members, in the order of their waits
    parents: frozenset[Key]  # the keys that have nodes under them


def wait_cycles(blocked: tuple[BlockedSession, ...]) -> list[list[int]]:
    """The sessions in wait cycles, one list per cycle, each in the order of its waits (for a
    recording from before cycles were an object of their own)."""
    members = {b.pid: b for b in blocked if b.in_cycle}
    cycles: list[list[int]] = []
    seen: set[int] = set()
    for start in sorted(members):
        if start in seen:
            continue
        order, current = [], start
        while current in members and current not in order:
            order.append(current)
            current = next((p for p in sorted(members[current].blocked_by) if p in members), start)
        seen.update(order)
        cycles.append(order)
    return cycles


def signature(b: BlockedSession, under: Key) -> tuple:
    """What identical waiters share: what they want, from whom (but the node they are under),
    their statement and application."""
    holders = tuple(h for h in b.holders if ("s", h) != under)
    return (b.wants or (b.lock_type, b.mode, b.relation, b.row), holders, b.blocked_by_prepared, b.database, b.query, b.application)


def lay_out(snapshot: Snapshot, matches: Callable[[Blocker | BlockedSession | PreparedXact], bool] | None = None) -> Layout:
    """The tree's nodes for `snapshot`; `matches(member)` says whether a root blocker, a waiting
    session or a prepared transaction passes the panel's filter. A tree is shown whole (its chain
    is what explains the wait) when any of its members passes: its root, a session anywhere under
    it, a member of its wait cycle."""
    def match(member: Blocker | BlockedSession | PreparedXact) -> bool:
        return matches is None or matches(member)

    blocked = {b.pid: b for b in snapshot.blocked}
    found_cycles = [tuple(c.members) for c in snapshot.cycles] or [tuple(c) for c in wait_cycles(snapshot.blocked)]
    cycles = {n: members for n, members in enumerate(found_cycles, 1) if members and all(m in blocked for m in members)}
    cycle_of = {m: n for n, members in cycles.items() for m in members}
    roots = {r.pid: r for r in snapshot.blockers if r.pid not in cycle_of}
    prepared = {p.gid: p for p in snapshot.prepared_xacts if p.blocked_count}

    def parent_of(b: BlockedSession) -> Key | None:
        if b.pid in cycle_of:
            return ("c", cycle_of[b.pid])
        for pid in b.holders:
            if pid != b.pid and (pid in blocked or pid in roots):
                return ("s", pid)
        for gid in b.blocked_by_prepared:
            if gid in prepared:
                return ("p", gid)
        for pid in (*b.blocked_by, *b.root_blockers):
            if pid != b.pid and (pid in blocked or pid in roots):
                return ("s", pid)
        for gid in b.root_prepared:
            if gid in prepared:
                return ("p", gid)
        return None

    children: dict[Key, list[int]] = {}
    orphans: list[int] = []  # waiting on sessions the picture does not hold (ended between its reads)
    for pid, b in blocked.items():
        parent = parent_of(b)
        if parent is None:
            orphans.append(pid)
        else:
            children.setdefault(parent, []).append(pid)

    def under_matches(key: Key) -> bool:
        """Whether a session anywhere under `key` passes the filter (each looked at once)."""
        if matches is None:
            return True
        stack, seen = [key], {key}
        while stack:
            for pid in children.get(stack.pop(), ()):
                if match(blocked[pid]):
                    return True
                if ("s", pid) not in seen:
                    seen.add(("s", pid))
                    stack.append(("s", pid))
        return False

    nodes: list[Node] = []
    placed: set[int] = set()
    group_members: dict[Key, tuple[int, ...]] = {}

    def place(key: Key, parent: Key | None, depth: int, under: int | None) -> None:
        """`key` and, depth first, everything under it (iteratively: a chain may be thousands long)."""
        work = [(key, parent, depth, under)]
        while work:
            key, parent, depth, under = work.pop()
            nodes.append(Node(key, parent, depth, under))
            kids = [pid for pid in children.get(key, ()) if pid not in placed]
            if not kids:
                continue
            placed.update(kids)
            # Beyond MAX_DEPTH the chain goes on beside its node, at its depth.
            host, host_depth = (key, depth) if depth < MAX_DEPTH else (parent, depth - 1)
            host_pid = host[1] if host is not None and host[0] == "s" else None
            singles: list[int] = []
            groups: dict[tuple, list[int]] = {}
            for pid in sorted(kids):
                if ("s", pid) in children or pid in cycle_of:
                    singles.append(pid)  # someone waits on it: shown as itself
                else:
                    groups.setdefault(signature(blocked[pid], key), []).append(pid)
            items: list[tuple[int, Key, tuple[int, ...]]] = []
            for sig, pids in groups.items():
                if len(pids) >= GROUP_MIN:
                    # In the order they queue in: the fewest ahead of it first.
                    # (A pile-up the probe did not read one by one: the longest wait first.)
                    in_line = tuple(sorted(pids, key=lambda pid: (-(blocked[pid].wait_s or 0.0), pid) if blocked[pid].ahead_unread
                                           else (len(blocked[pid].blocked_by), pid)))
                    items.append((pids[0], ("g", key, sig), in_line))
                else:
                    singles.extend(pids)
            # The biggest groups first (a pile-up is the headline), then each session by pid.
            items.sort(key=lambda item: (-len(item[2]), item[0]))
            ordered: list[tuple[Key, tuple[int, ...]]] = [(k, m) for _first, k, m in items]
            ordered += [(("s", pid), ()) for pid in sorted(singles)]
            for child_key, members in reversed(ordered):  # a stack: the first is placed first
                work.append((child_key, host, host_depth + 1, host_pid))
                if members:
                    group_members[child_key] = members

    for pid, root in roots.items():
        if match(root) or under_matches(("s", pid)):
            place(("s", pid), None, 1, None)
    for gid, p in prepared.items():
        if match(p) or under_matches(("p", gid)):
            place(("p", gid), None, 1, None)
    for n, members in cycles.items():
        if any(match(blocked[m]) or under_matches(("s", m)) for m in members) or under_matches(("c", n)):
            placed.update(members)
            nodes.append(Node(("c", n), None, 1, None))
            for m in members:
                # Its fellow members are listed once, beside it, not under it.
                place(("s", m), ("c", n), 2, None)
    for pid in sorted(orphans):
        if pid not in placed and (match(blocked[pid]) or under_matches(("s", pid))):
            placed.add(pid)
            place(("s", pid), None, 1, None)
    # A group's node carries its members; a group is a leaf (its members are drawn when opened).
    out = tuple(Node(n.key, n.parent, n.depth, n.under, group_members[n.key]) if n.key in group_members else n for n in nodes)
    return Layout(out, blocked, roots, prepared, cycles, frozenset(n.parent for n in out if n.parent is not None))
