"""PostgreSQL probes: queues, rings, leases, blocked sessions, connections.

Each probe is a method taking a probe connection (autocommit, read-only, statement and lock
timeouts, application_name `queuetop-probe`; see `open_probe_connection`) and returning frozen
samples. The queries live in `probes/sql/postgresql/<probe>.sql`. A probe raises on failure; the
sampler records the reason and the other probes go on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeAlias

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from dbcore.database import DictRow, Target, connect, one
from dbcore.errors import first_line
from dbcore.sqlfiles import Queries

from .config import Config, DeclaredQueue
from .model import (
    BlockedSession,
    Blocker,
    CompactionGroup,
    CompactionSample,
    Connections,
    LeaseSample,
    QueueSample,
    RingSample,
    ServerInfo,
)

APPLICATION_NAME = "queuetop-probe"
STATEMENT_TIMEOUT_MS = 2000
LOCK_TIMEOUT_MS = 100
DEAD_COUNT_CAP = 10_000
_TIMESTAMPS = ("timestamp", "date")
# Every probe session, however opened (one-off or pooled), runs with these.
PROBE_SETTINGS = {
    "default_transaction_read_only": "on",
    "statement_timeout": str(STATEMENT_TIMEOUT_MS),
    "lock_timeout": str(LOCK_TIMEOUT_MS),
    "idle_in_transaction_session_timeout": "10000",
}
PROBE_NAMES = ("queues", "rings", "leases", "locks", "connections", "compaction")
COMPACTION_COUNT_CAP = 20_000
COMPACTION_TOP_GROUPS = 20


# Each probe's statements (probes/sql/postgresql/<probe>.sql).
SERVER_SQL = Queries("probes", "server.sql")
QUEUES_SQL = Queries("probes", "queues.sql")
RINGS_SQL = Queries("probes", "rings.sql")
LEASES_SQL = Queries("probes", "leases.sql")
LOCKS_SQL = Queries("probes", "locks.sql")
CONNECTIONS_SQL = Queries("probes", "connections.sql")
COMPACTION_SQL = Queries("probes", "compaction.sql")


# A probe session's rows are dictionaries keyed by column name.
ProbeConnection: TypeAlias = psycopg.Connection[DictRow]


def open_probe_connection(target: Target, *, application_name: str = APPLICATION_NAME) -> ProbeConnection:
    """A session that cannot hurt the monitored database: read-only, autocommit, short
    statement and lock timeouts, and a name that says whose it is."""
    return connect(target, application_name=application_name, options=PROBE_SETTINGS, row_factory=dict_row)


@dataclass(frozen=True, slots=True)
class _Counters:
    at: float
    inserted: int
    deleted: int


@dataclass(frozen=True, slots=True)
class _ResolvedTable:
    relid: int
    table: sql.Composable  # quoted from the catalog's names
    qualified: str
    head: sql.Composed
    max_key: sql.Composed | None  # integer ordering: depth above the window from the key span
    indexed: bool  # order_by leads an index: the head window is read in index order, not sorted


class PostgresProbes:
    """The probes for one monitored PostgreSQL database. Holds what successive samples need:
    the previous counters (rates) and resolved user-declared tables."""

    dialect = "postgresql"

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or Config()
        self._previous: dict[str, _Counters] = {}
        self._resolved: dict[str, _ResolvedTable] = {}
        self._server: ServerInfo | None = None
        self._version_num = 0
        # What a probe that succeeded could not see (privileges), by probe name.
        self.notes: dict[str, str] = {}

    # -- server --------------------------------------------------------------------------

    def server(self, conn: ProbeConnection, label: str | None = None) -> ServerInfo:
        row = one(conn.execute(SERVER_SQL["server_info"]))
        self._version_num = row["version_num"]
        self._server = ServerInfo(dialect=self.dialect, version=row["version"], database=row["database"], label=label)
        return self._server

    # -- queues --------------------------------------------------------------------------

    def queues(self, conn: ProbeConnection) -> tuple[QueueSample, ...]:
        window = self.config.window
        samples: list[tuple[str, str, str, int | None, dict | None, str | None]] = []
        reference = []
        if _has_table(conn, "queuetop.queues"):
            try:
                reference = conn.execute(QUEUES_SQL["registry"]).fetchall()
            except psycopg.errors.InsufficientPrivilege as exc:
                self.notes["queues"] = f"reference queues hidden: {first_line(exc)}"
        problems = []
        for entry in reference:
            table = sql.Identifier(entry["schema_name"], entry["table_name"])
            head, error = None, None
            try:
                head = one(conn.execute(sql.SQL(QUEUES_SQL["reference_head"]).format(table=table), {"window": window + 1}))
                dead = one(conn.execute(QUEUES_SQL["dead_letters"], {"queue": entry["name"], "cap": DEAD_COUNT_CAP}))
                head = {
                    **head,
                    "beyond_window": (head["max_id"] - head["last_head_id"]) if head["last_head_id"] else 0,
                    "dead": dead["counted"] if dead["counted"] < DEAD_COUNT_CAP else dead["span"],
                    "dead_is_estimate": dead["counted"] >= DEAD_COUNT_CAP,
                }
            except psycopg.Error as exc:
                error = describe_error(exc)
                problems.append(f"{entry['name']}: {error}")
            samples.append(("reference", entry["name"], table.as_string(conn), entry["relid"], head, error))
        for declared in self.config.queues:
            head, error, relid, qualified = None, None, None, declared.table
            try:
                resolved = self._resolve(conn, declared)
                relid, qualified = resolved.relid, resolved.qualified
                head = self._declared_head(conn, declared, resolved)
                if not resolved.indexed:
                    problems.append(f"{declared.name}: no index leads with order_by column {declared.order_by!r}, "
                                    "so every sample sorts the whole table (create one)")
            except (psycopg.Error, LookupError) as exc:
                error = describe_error(exc) if isinstance(exc, psycopg.Error) else str(exc.args[0])
                problems.append(f"{declared.name}: {error}")
            samples.append(("table", declared.name, qualified, relid, head, error))

        samples.extend(self._outbox_and_inboxes(conn, window, problems))
        if problems:
            self.notes["queues"] = "; ".join(([self.notes["queues"]] if "queues" in self.notes else []) + problems)
        stats = {}
        relids = [s[3] for s in samples if s[3] is not None]
        if relids:
            stats = {row["relid"]: row for row in conn.execute(QUEUES_SQL["table_stats"], {"relids": relids})}
        now = time.monotonic()
        out = []
        for kind, name, qualified, relid, head, error in samples:
            st = stats.get(relid)
            out.append(self._queue_sample(kind, name, qualified, head, st, error, now))
        return tuple(out)

    def _outbox_and_inboxes(self, conn: ProbeConnection, window: int, problems: list[str]) -> list[tuple]:
        """The transactional outbox (kind `outbox`) and each endpoint's inbox (kind `inbox`),
        shown as queues: their depth is the backlog of messages not yet relayed / processed."""
        samples: list[tuple] = []
        if _has_table(conn, "queuetop.outbox"):
            try:
                head = dict(one(conn.execute(QUEUES_SQL["outbox_head"], {"window": window + 1})))
                head["beyond_window"] = (head["max_id"] - head["last_head_id"]) if head["last_head_id"] else 0
                head["dead"] = None
                samples.append(("outbox", "outbox", "queuetop.outbox", head.pop("relid"), head, None))
            except psycopg.Error as exc:
                problems.append(f"outbox: {describe_error(exc)}")
        if _has_table(conn, "queuetop.eo_inbox"):
            try:
                for row in conn.execute(QUEUES_SQL["inbox_heads"], {"window": window + 1}):
                    head = dict(row)
                    # The window is shared: past it, every endpoint's count is a lower bound.
                    head.update(beyond_window=0, dead=None, dead_is_estimate=head.pop("read_rows") > window)
                    samples.append(("inbox", head.pop("endpoint"), "queuetop.eo_inbox", None, head, None))
            except psycopg.Error as exc:
                problems.append(f"inbox: {describe_error(exc)}")
        return samples

    def _queue_sample(self, kind: str, name: str, qualified: str, head: dict[str, Any] | None, st: DictRow | None,
                      error: str | None, now: float) -> QueueSample:
        enq = deq = None
        if st is not None:
            current = _Counters(now, st["n_tup_ins"], st["n_tup_del"])
            previous = self._previous.get(f"{kind}:{name}")
            self._previous[f"{kind}:{name}"] = current
            if previous is not None and current.at > previous.at:
                span = current.at - previous.at
                enq = max(0.0, (current.inserted - previous.inserted) / span)
                deq = max(0.0, (current.deleted - previous.deleted) / span)
        depth = ready = in_flight = delayed = dead = age = None
        estimate = False
        if head is not None:
            window = self.config.window
            head_rows = head["head_rows"]
            in_flight = head["in_flight"]
            delayed = head.get("delayed", 0)
            dead = head.get("dead")
            age = head["oldest_ready_age_s"]
            # The probe reads one row more than the window: whether there is more is then known.
            if head_rows <= window:
                depth = head_rows
            else:
                estimate = True
                depth = head_rows + max(0, head.get("beyond_window", 0))
            if kind != "table":
                ready = max(0, depth - in_flight - delayed)
            else:
                # Declared tables: ready counted in the window; beyond it, every row is taken
                # to be ready (the ordering puts claimed and failed rows first).
                ready = head["ready"] + max(0, depth - head_rows)
            estimate = estimate or bool(head.get("dead_is_estimate"))  # (inbox: the shared window ran out)
        return QueueSample(
            name=name,
            kind=kind,
            table=qualified,
            depth=depth,
            ready=ready,
            in_flight=in_flight,
            delayed=delayed,
            dead=dead,
            oldest_ready_age_s=age,
            enqueued_per_s=enq,
            dequeued_per_s=deq,
            depth_is_estimate=estimate,
            dead_tuples=st["n_dead_tup"] if st else None,
            live_tuples=st["n_live_tup"] if st else None,
            last_vacuum_at=_latest(st["last_vacuum"], st["last_autovacuum"]) if st else None,
            last_autovacuum_at=st["last_autovacuum"] if st else None,
            inserted_total=st["n_tup_ins"] if st else None,
            deleted_total=st["n_tup_del"] if st else None,
            error=error,
        )

    def _resolve(self, conn: ProbeConnection, declared: DeclaredQueue) -> _ResolvedTable:
        cached = self._resolved.get(declared.name)
        if cached is not None:
            return cached
        row = conn.execute(QUEUES_SQL["resolve_table"], {"table": declared.table}).fetchone()
        if row is None:
            raise LookupError(f"table {declared.table!r} not found (or not a table)")
        columns = {r["name"]: r["type"] for r in conn.execute(QUEUES_SQL["table_columns"], {"relid": row["relid"]})}

        def column(key: str, value: str | None, types: tuple[str, ...] = ()) -> sql.Composable:
            if value is None:
                return sql.Literal(None)  # the query casts it to the column's type
            if value not in columns:
                raise LookupError(f"{declared.name}: {key} column {value!r} not in {declared.table}")
            if types and not columns[value].startswith(types):
                raise LookupError(f"{declared.name}: {key} column {value!r} is {columns[value]}, not a timestamp")
            return sql.Identifier(value)

        table = sql.Identifier(row["schema_name"], row["table_name"])
        order = column("order_by", declared.order_by)
        parts = {
            "table": table,
            "order": order,
            "age": column("age_column", declared.age_column, _TIMESTAMPS),
            "visible": column("visible_at_column", declared.visible_at_column, _TIMESTAMPS),
            "state": column("state_column", declared.state_column),
        }
        integer_order = columns[declared.order_by] in ("bigint", "integer", "smallint")
        leading = {r["name"] for r in conn.execute(QUEUES_SQL["leading_index_columns"], {"relid": row["relid"]})}
        resolved = _ResolvedTable(
            relid=row["relid"],
            table=table,
            qualified=table.as_string(conn),
            head=sql.SQL(QUEUES_SQL["user_head"]).format(**parts),
            max_key=sql.SQL(QUEUES_SQL["user_max_key"]).format(table=table, order=order) if integer_order else None,
            indexed=declared.order_by in leading,
        )
        self._resolved[declared.name] = resolved
        return resolved

    def _declared_head(self, conn: ProbeConnection, declared: DeclaredQueue, resolved: _ResolvedTable) -> dict:
        window = self.config.window
        head = one(conn.execute(
            resolved.head,
            {
                "window": window + 1,
                "ready_states": list(declared.ready_states),
                "in_flight_states": list(declared.in_flight_states),
                "dead_states": list(declared.dead_states),
            },
        ))
        head = dict(head)
        if head["head_rows"] > window:
            if resolved.max_key is not None and head["last_head_key"] is not None:
                max_key = one(conn.execute(resolved.max_key))["max_key"]
                head["beyond_window"] = int(max_key) - int(head["last_head_key"])
            else:
                planner = one(conn.execute(QUEUES_SQL["planner_rows"], {"relid": resolved.relid}))
                head["beyond_window"] = (planner["estimate"] or 0) - head["head_rows"]
            head["dead_is_estimate"] = bool(declared.dead_states)
        return head

    # -- rings and leases ----------------------------------------------------------------

    def rings(self, conn: ProbeConnection) -> tuple[RingSample, ...]:
        if not _has_table(conn, "queuetop.rings"):
            return ()
        rows = conn.execute(RINGS_SQL["rings"]).fetchall()
        return tuple(RingSample(name=r["name"], capacity=r["capacity"], used=r["used"], refused_total=r["refused_total"]) for r in rows)

    def leases(self, conn: ProbeConnection) -> tuple[LeaseSample, ...]:
        if not _has_table(conn, "queuetop.leases"):
            return ()
        rows = conn.execute(LEASES_SQL["leases"]).fetchall()
        return tuple(
            LeaseSample(name=r["name"], holder=r["holder"], token=r["token"], expires_in_s=r["expires_in_s"], state=r["state"])
            for r in rows
        )

    def compaction(self, conn: ProbeConnection) -> tuple[CompactionSample, ...]:
        if not _has_table(conn, "queuetop.task_status_deltas"):
            return ()
        row = one(conn.execute(
            COMPACTION_SQL["compaction"], {"cap": COMPACTION_COUNT_CAP, "top": COMPACTION_TOP_GROUPS}
        ))
        return (
            CompactionSample(
                name="task_status",
                pending_deltas=row["pending_deltas"],
                groups=row["groups"],
                last_run_at=row["last_run_at"],
                last_duration_ms=row["last_duration_ms"],
                last_rows_folded=row["last_rows_folded"],
                runs_total=row["runs_total"] or 0,
                pending_is_estimate=row["pending_deltas"] >= COMPACTION_COUNT_CAP,
                by_group=tuple(
                    CompactionGroup(group=g["group"], title=g["title"], pending_deltas=g["pending_deltas"])
                    for g in row["top_groups"]
                ),
            ),
        )

    # -- locks ---------------------------------------------------------------------------

    def locks(self, conn: ProbeConnection) -> tuple[tuple[BlockedSession, ...], tuple[Blocker, ...]]:
        query = LOCKS_SQL["waiting_post_140000"] if self._version_num >= 140000 else LOCKS_SQL["waiting"]
        # pg_locks and pg_blocking_pids are not read at one instant: a wait that ended in between
        # has no blockers left and is not reported.
        waiting_rows = [r for r in conn.execute(query).fetchall() if r["blocked_by"]]
        if not waiting_rows:
            return (), ()
        mentioned = {pid for row in waiting_rows for pid in row["blocked_by"]} - {r["pid"] for r in waiting_rows}
        others = {r["pid"]: r for r in conn.execute(LOCKS_SQL["sessions"], {"pids": sorted(mentioned)})} if mentioned else {}
        if any(r["state"] is None for r in [*waiting_rows, *others.values()]):
            self.notes["locks"] = "queries and states of other roles' sessions hidden: grant pg_read_all_stats to see them"
        return build_lock_tree(waiting_rows, others)

    # -- connections ---------------------------------------------------------------------

    def connections(self, conn: ProbeConnection) -> Connections:
        rows = conn.execute(CONNECTIONS_SQL["connections"]).fetchall()
        settings = one(conn.execute(CONNECTIONS_SQL["max_connections"]))
        by_state: dict[str, int] = {}
        by_app: dict[str, int] = {}
        oldest = xmin = None
        for r in rows:
            state = r["state"] or "unknown"  # other roles' sessions without pg_read_all_stats
            by_state[state] = by_state.get(state, 0) + 1
            app = r["application_name"] or ""
            by_app[app] = by_app.get(app, 0) + 1
            if r["xact_age_s"] is not None and (oldest is None or r["xact_age_s"] > oldest["xact_age_s"]):
                oldest = r
            if r["xmin_age"] is not None and (xmin is None or r["xmin_age"] > xmin["xmin_age"]):
                xmin = r
        hidden = sum(1 for r in rows if r["state"] is None)
        if hidden:
            self.notes["connections"] = (
                f"state, transaction age and xmin of {hidden} other roles' sessions hidden: "
                "grant pg_read_all_stats to see them"
            )
        return Connections(
            total=len(rows) + 1,  # and this probe's own session
            max=settings["max_connections"],
            by_state=dict(sorted(by_state.items(), key=lambda kv: -kv[1])),
            by_application=dict(sorted(by_app.items(), key=lambda kv: -kv[1])),
            oldest_xact_age_s=oldest["xact_age_s"] if oldest else None,
            oldest_xact_pid=oldest["pid"] if oldest else None,
            xmin_holder_pid=xmin["pid"] if xmin else None,
            xmin_holder_age_xids=xmin["xmin_age"] if xmin else None,
            xmin_holder_application=xmin["application_name"] if xmin else None,
        )


@contextmanager
def blocked_applications(target: Target) -> Iterator[Callable[[], list[str | None]]]:
    """One probe session for a caller that asks many times who is blocked (the contention
    scenario, which the engine runs without importing the probes): each call returns the
    application_name of every blocked session, read by the same code as the Locks panel."""
    probes = PostgresProbes()
    with open_probe_connection(target, application_name=f"{APPLICATION_NAME}:scenario") as conn:
        probes.server(conn)
        yield lambda: [session.application for session in probes.locks(conn)[0]]


def _visible_text(value: str | None) -> str | None:
    # pg_stat_activity's placeholder for what this role may not see.
    return None if value in (None, "<insufficient privilege>") else value


def build_lock_tree(waiting_rows: Iterable[dict], others: dict[int, dict]) -> tuple[tuple[BlockedSession, ...], tuple[Blocker, ...]]:
    """Blocked sessions with every blocker and their root, and the root blockers with how many
    sessions each holds up. Parallel workers fold into their leader; wait cycles (a deadlock the
    server has not yet broken) are marked instead of followed forever."""
    waiting_rows = list(waiting_rows)
    leader = {r["pid"]: r["leader_pid"] or r["pid"] for r in waiting_rows}
    leader.update({pid: r["leader_pid"] or pid for pid, r in others.items()})

    def lead(pid: int) -> int:
        return leader.get(pid, pid)

    waiting: dict[int, dict] = {}
    for row in sorted(waiting_rows, key=lambda r: (lead(r["pid"]) != r["pid"], r["pid"])):
        pid = lead(row["pid"])
        blockers = {lead(b) for b in row["blocked_by"]} - {pid}
        if pid in waiting:  # a parallel worker of a leader already listed: merge its blockers
            waiting[pid]["blocked_by"] |= blockers
            continue
        waiting[pid] = {**row, "pid": pid, "blocked_by": blockers}

    def roots_of(pid: int) -> tuple[list[int], bool]:
        roots, seen, stack, cycle = [], {pid}, [pid], False
        while stack:
            current = stack.pop()
            for blocker in sorted(waiting[current]["blocked_by"], reverse=True):
                if blocker in waiting:
                    if blocker in seen:
                        cycle = cycle or blocker == pid
                        continue
                    seen.add(blocker)
                    stack.append(blocker)
                elif blocker not in roots:
                    roots.append(blocker)
        return roots, cycle

    blocked: list[BlockedSession] = []
    counts: dict[int, int] = {}
    for pid in sorted(waiting):
        row = waiting[pid]
        roots, cycle = roots_of(pid)
        for root in roots:
            counts[root] = counts.get(root, 0) + 1
        blocked.append(
            BlockedSession(
                pid=pid,
                blocked_by=tuple(sorted(row["blocked_by"])),
                root_blocker=min(roots) if roots else None,
                wait_s=row["wait_s"],
                lock_type=row["lock_type"],
                mode=row["mode"],
                relation=row["relation"] or _advisory_key(row),
                query=_visible_text(row["query"]),
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
                query=_visible_text(info.get("query")),
                application=info.get("application_name"),
            )
        )
    return tuple(blocked), tuple(roots_found)


def _advisory_key(row: dict) -> str | None:
    if row.get("lock_type") != "advisory":
        return None
    # pg_advisory_lock(bigint) is stored as classid (high 32 bits), objid (low 32), objsubid 1;
    # the two-int4 form as classid, objid, objsubid 2.
    if row.get("objsubid") == 1:
        return f"advisory {(int(row['classid']) << 32) | int(row['objid'])}"
    return f"advisory ({row['classid']}, {row['objid']})"


def _has_table(conn: ProbeConnection, name: str) -> bool:
    return bool(one(conn.execute(SERVER_SQL["table_present"], {"table": name}))["present"])


def _latest(a: datetime | None, b: datetime | None) -> datetime | None:
    values = [v for v in (a, b) if v is not None]
    return max(values) if values else None


def describe_error(exc: psycopg.Error) -> str:
    """One line for a failed probe statement, saying what the operator can do about it."""
    line = first_line(exc)
    if isinstance(exc, psycopg.errors.LockNotAvailable):
        return f"skipped: lock timeout ({LOCK_TIMEOUT_MS} ms), the table is locked by another session ({line})"
    if isinstance(exc, psycopg.errors.QueryCanceled):
        return f"skipped: statement timeout ({STATEMENT_TIMEOUT_MS} ms) reached"
    if isinstance(exc, psycopg.errors.InsufficientPrivilege):
        return f"no privilege: {line}"
    return line
