"""The blocking tree, built from what pg_locks and pg_blocking_pids say (probes/sql/postgresql/
locks.sql): who waits for whom, every root of every chain, wait cycles, prepared transactions,
and what each session waits on, named as the application would name it."""

from __future__ import annotations

from collections.abc import Iterable

from .model import BlockedSession, Blocker, PreparedXact

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

# What identifies a lockable object in pg_locks (the columns that are set depend on its type).
_TARGET = ("lock_type", "database_oid", "relation_oid", "page", "tuple", "virtualxid", "transactionid", "classid", "objid",
           "objsubid")


def conflicts(held: str | None, wanted: str | None) -> bool:
    return held is not None and wanted is not None and held in _CONFLICTS.get(wanted, set(MODES))


def target_of(row: dict) -> tuple:
    return tuple(row.get(column) for column in _TARGET)


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


def build_lock_tree(
    waiting_rows: Iterable[dict], others: dict[int, dict], prepared: Iterable[dict] = (), by_prepared: dict[int, set[str]] | None = None,
) -> tuple[tuple[BlockedSession, ...], tuple[Blocker, ...], tuple[PreparedXact, ...]]:
    """Blocked sessions with every blocker and every root, the root blockers with how many
    sessions each holds up, and the prepared transactions with the same count. Parallel workers
    fold into their leader; wait cycles (a deadlock the server has not yet broken) are marked
    instead of followed forever."""
    waiting_rows = list(waiting_rows)
    prepared = list(prepared)
    by_prepared = by_prepared or {}
    # A parallel worker's leader (PostgreSQL 13+); most pictures have none, and then a pid is its own.
    leader = {r["pid"]: r["leader_pid"] for r in waiting_rows if r["leader_pid"] not in (None, r["pid"])}
    leader.update({pid: r["leader_pid"] for pid, r in others.items() if r.get("leader_pid") not in (None, pid)})

    waiting: dict[int, dict] = {}  # pid -> its row (a leader's own when it waits too)
    blockers_of: dict[int, set[int]] = {}
    gids_of: dict[int, set[str]] = {}
    for row in sorted(waiting_rows, key=lambda r: (r["pid"] in leader, r["pid"])) if leader else waiting_rows:
        pid = leader.get(row["pid"], row["pid"])
        if leader:
            blockers = {leader.get(b, b) for b in row["blocked_by"] if b != 0}  # 0: a prepared transaction
        else:
            blockers = set(row["blocked_by"])
            blockers.discard(0)
        blockers.discard(pid)
        gids = set(by_prepared[row["pid"]]) if row["pid"] in by_prepared else set()
        if pid in waiting:  # a parallel worker of a leader already listed: merge its blockers
            blockers_of[pid] |= blockers
            gids_of[pid] |= gids
            continue
        waiting[pid], blockers_of[pid], gids_of[pid] = row, blockers, gids

    reached = _roots_by_component(blockers_of, gids_of)
    ordered: dict[int, tuple[tuple[int, ...], tuple[str, ...]]] = {}  # per component: its roots, sorted once

    blocked: list[BlockedSession] = []
    counts: dict[int, int] = {}
    prepared_counts: dict[str, int] = {}
    for pid in sorted(waiting):
        row = waiting[pid]
        component = reached[pid]
        roots_set, gids_set, cycle = component
        if id(component) not in ordered:
            ordered[id(component)] = (tuple(sorted(roots_set)), tuple(sorted(gids_set)))
        roots, root_gids = ordered[id(component)]
        for root in roots:
            counts[root] = counts.get(root, 0) + 1
        for gid in root_gids:
            prepared_counts[gid] = prepared_counts.get(gid, 0) + 1
        relation, ctid = lock_target(row)
        blocked.append(
            BlockedSession(
                pid=pid,
                blocked_by=tuple(sorted(blockers_of[pid])),
                root_blocker=roots[0] if roots else None,
                root_blockers=roots,
                blocked_by_prepared=tuple(sorted(gids_of[pid])),
                root_prepared=root_gids,
                wait_s=row["wait_s"],
                lock_type=row["lock_type"],
                mode=row["mode"],
                relation=relation,
                row=ctid,
                database=row.get("database"),
                query=visible_text(row["query"]),
                application=row["application_name"],
                state=row["state"],
                in_cycle=cycle,
            )
        )
    roots_found: list[Blocker] = []
    for root, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        info = others.get(root) or {}
        roots_found.append(
            Blocker(
                pid=root,
                blocked_count=count,
                state=info.get("state"),
                xact_age_s=info.get("xact_age_s"),
                query=visible_text(info.get("query")),
                application=info.get("application_name"),
            )
        )
    prepared_found = tuple(
        PreparedXact(gid=p["gid"], owner=p["owner"], database=p["database"], age_s=p["age_s"],
                     blocked_count=prepared_counts.get(p["gid"], 0))
        for p in prepared
    )
    return tuple(blocked), tuple(roots_found), prepared_found


def _roots_by_component(blockers_of: dict[int, set[int]], gids_of: dict[int, set[str]]) -> dict[int, tuple[set[int], set[str], bool]]:
    """For every waiting session: the sessions and prepared transactions at the root of its
    chains, and whether it is part of a wait cycle. The waits form a graph (waiter -> blocker);
    its strongly connected components (Tarjan's algorithm, without recursion: a chain may be
    thousands long) come out blockers first, so each component's roots are its own outside
    blockers plus the roots of the components it waits on: linear in the waits, where walking
    every chain from every waiter was cubic in a pile-up (each waiter of a row lock waits for
    all the waiters queued ahead of it)."""
    # The roots are unions, so the order in which the graph is walked changes nothing.
    waiting = blockers_of
    edges = {pid: [b for b in blockers if b in waiting] for pid, blockers in blockers_of.items()}
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    component_of: dict[int, int] = {}
    results: list[tuple[set[int], set[str], bool]] = []
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
                roots: set[int] = set()
                gids: set[str] = set()
                here = len(results)
                for member in members:
                    component_of[member] = here
                for member in members:
                    gids |= gids_of[member]
                    for blocker in blockers_of[member]:
                        if blocker not in waiting:
                            roots.add(blocker)
                        elif component_of[blocker] != here:  # a component already done: blockers first
                            before = results[component_of[blocker]]
                            roots |= before[0]
                            gids |= before[1]
                results.append((roots, gids, len(members) > 1))
    return {pid: results[component_of[pid]] for pid in waiting}


def lock_target(row: dict) -> tuple[str | None, str | None]:
    """(relation, row ctid) a waiter waits on, as an operator would name them.

    A row wait is a wait for the other transaction's id (lock type transactionid, no relation):
    the table and row come from the tuple lock the waiter holds, or else from the one table it
    holds a row-level lock on. A relation of another database is `db:oid N`: its OID means
    nothing here. An advisory lock is its key as the application passed it."""
    lock_type = row.get("lock_type")
    if lock_type == "advisory":
        return advisory_key(row), None
    if lock_type == "transactionid":
        if row.get("row_relation_oid") is not None:
            name = row.get("row_relation") or f"{row.get('database') or '?'}:oid {row['row_relation_oid']}"
            return name, f"({row['row_page']},{row['row_tuple']})"
        tables = row.get("held_tables") or []
        return (tables[0] if len(tables) == 1 else None), None
    if row.get("relation_oid") is not None:
        name = row.get("relation") or f"{row.get('database') or 'db ' + str(row.get('database_oid'))}:oid {row['relation_oid']}"
        ctid = f"({row['page']},{row['tuple']})" if lock_type == "tuple" and row.get("page") is not None else None
        return name, ctid
    return row.get("relation"), None


def advisory_key(row: dict) -> str | None:
    """The key as the application passed it. pg_advisory_lock(bigint) is stored as classid (high
    32 bits) and objid (low 32 bits), objsubid 1; the two-int4 form as classid, objid, objsubid 2.
    Both are stored unsigned: -5 would read 18446744073709551611."""
    if row.get("lock_type") != "advisory" or row.get("classid") is None:
        return None
    high, low = int(row["classid"]), int(row["objid"])
    if row.get("objsubid") == 1:
        key = (high << 32) | low
        return f"advisory {key - (1 << 64) if key >= 1 << 63 else key}"
    return f"advisory ({_int4(high)}, {_int4(low)})"


def _int4(value: int) -> int:
    return value - (1 << 32) if value >= 1 << 31 else value


def visible_text(value: str | None) -> str | None:
    # pg_stat_activity's placeholder for what this role may not see.
    return None if value in (None, "<insufficient privilege>") else value
