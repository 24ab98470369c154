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
from typing import TypeAlias

import psycopg
from psycopg.rows import dict_row

from dbcore.database import DictRow, Target, connect, one
from dbcore.errors import first_line
from dbcore.sqlfiles import Queries

from .config import Config
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
from .sources import QueueFigures, QueueSource, sources_for
from .sources.base import has_table, tables_checked_together

APPLICATION_NAME = "queuetop-probe"
STATEMENT_TIMEOUT_MS = 2000
LOCK_TIMEOUT_MS = 100
# Every probe session, however opened (one-off or pooled), runs with these.
PROBE_SETTINGS = {
    "default_transaction_read_only": "on",
    "statement_timeout": str(STATEMENT_TIMEOUT_MS),
    "lock_timeout": str(LOCK_TIMEOUT_MS),
    "idle_in_transaction_session_timeout": "10000",
    # psycopg prepares a statement run five times; a generic plan cannot use the partial indexes
    # the queue libraries keep per state (WHERE status = 'doing'): always plan for the values.
    "plan_cache_mode": "force_custom_plan",
    # A probe reads a bounded handful of rows: it never takes parallel workers from the server,
    # and it reads a job table through an index scan that stops at its LIMIT, or not at all. A
    # sequential scan finds a frequent state's rows fast but a rare state's only after reading
    # the table; a bitmap scan collects every matching index entry before its LIMIT applies.
    # The queue sources check each read's plan and estimate a state no index leads to
    # (probes/sources/jobtable.py).
    "max_parallel_workers_per_gather": "0",
    "enable_seqscan": "off",
    "enable_bitmapscan": "off",
}
PROBE_NAMES = ("queues", "rings", "leases", "locks", "connections", "compaction")
COMPACTION_COUNT_CAP = 20_000
COMPACTION_TOP_GROUPS = 20


# Each probe's statements (probes/sql/postgresql/<probe>.sql).
SERVER_SQL = Queries("probes", "server.sql")
QUEUES_SQL = Queries("probes", "queues.sql")  # what every queue's table shares: its statistics
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
    depth: int | None  # exact depths only


class PostgresProbes:
    """The probes for one monitored PostgreSQL database. Holds what successive samples need:
    the previous counters (rates) and resolved user-declared tables."""

    dialect = "postgresql"

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or Config()
        self._previous: dict[str, _Counters] = {}
        self.sources = sources_for(self.config)
        self._tables_asked: set[str] = set()  # what the sources' detect() asked the last time
        self._server: ServerInfo | None = None
        self._version_num = 0
        # What a probe that succeeded could not see (privileges), by probe name.
        self.notes: dict[str, str] = {}
        # What a probe that succeeded could not read (the queue sources that failed), by probe name.
        self.unread: dict[str, tuple[str, ...]] = {}

    # -- server --------------------------------------------------------------------------

    def server(self, conn: ProbeConnection, label: str | None = None) -> ServerInfo:
        row = one(conn.execute(SERVER_SQL["server_info"]))
        self._version_num = row["version_num"]
        self._server = ServerInfo(dialect=self.dialect, version=row["version"], database=row["database"], label=label)
        return self._server

    # -- queues --------------------------------------------------------------------------

    def queues(self, conn: ProbeConnection) -> tuple[QueueSample, ...]:
        """Every queue of every source found in this database (probes/sources/): the engine's,
        the declared tables, and the libraries detected with no config."""
        figures: list[tuple[QueueSource, QueueFigures]] = []
        problems = []
        unread = []
        # Whether each source is installed: its tables checked in one statement, not one each.
        with tables_checked_together(conn, self._tables_asked) as known:
            for source in self.sources:
                try:
                    detection = source.detect(conn)
                    if detection is None:
                        continue
                    figures.extend((source, f) for f in source.sample(conn, detection))
                except psycopg.Error as exc:
                    problems.append(f"{source.name}: {describe_error(exc)}")
                    unread.append(source.name)
        self._tables_asked = set(known)
        if unread:
            self.unread["queues"] = tuple(unread)
        for _source, f in figures:
            problems.extend(f"{f.name}: {note}" for note in f.notes)
            if f.error:
                problems.append(f"{f.name}: {f.error}")
        if problems:
            self.notes["queues"] = "; ".join(problems)
        relids = sorted({f.relid for _, f in figures if f.relid is not None})
        stats = {row["relid"]: row for row in conn.execute(QUEUES_SQL["table_stats"], {"relids": relids})} if relids else {}
        now = time.monotonic()
        return tuple(self._queue_sample(source, f, stats.get(f.relid), now) for source, f in figures)

    def _queue_sample(self, source: QueueSource, f: QueueFigures, st: DictRow | None, now: float) -> QueueSample:
        enq = deq = None
        if st is not None and f.rates_from is not None:
            key = f"{source.name}:{f.name}"
            current = _Counters(now, st["n_tup_ins"], st["n_tup_del"], f.depth if not f.depth_is_estimate else None)
            previous = self._previous.get(key)
            self._previous[key] = current
            if previous is not None and current.at > previous.at:
                span = current.at - previous.at
                enq = max(0.0, (current.inserted - previous.inserted) / span)
                if f.rates_from == "deletes":
                    deq = max(0.0, (current.deleted - previous.deleted) / span)
                elif current.depth is not None and previous.depth is not None:
                    # Finished rows may stay: what arrived and is no longer waiting has left.
                    deq = max(0.0, enq - (current.depth - previous.depth) / span)
        return QueueSample(
            name=f.name,
            kind=source.kind,
            source=source.name,
            table=f.table,
            depth=f.depth,
            ready=f.ready,
            in_flight=f.in_flight,
            delayed=f.delayed,
            dead=f.dead,
            oldest_ready_age_s=f.oldest_ready_age_s,
            enqueued_per_s=enq,
            dequeued_per_s=deq,
            depth_is_estimate=f.depth_is_estimate,
            dead_tuples=st["n_dead_tup"] if st else None,
            live_tuples=st["n_live_tup"] if st else None,
            last_vacuum_at=_latest(st["last_vacuum"], st["last_autovacuum"]) if st else None,
            last_autovacuum_at=st["last_autovacuum"] if st else None,
            inserted_total=st["n_tup_ins"] if st else None,
            deleted_total=st["n_tup_del"] if st else None,
            error=f.error,
        )

    # -- rings and leases ----------------------------------------------------------------

    def rings(self, conn: ProbeConnection) -> tuple[RingSample, ...]:
        if not has_table(conn, "queuetop.rings"):
            return ()
        rows = conn.execute(RINGS_SQL["rings"]).fetchall()
        return tuple(RingSample(name=r["name"], capacity=r["capacity"], used=r["used"], refused_total=r["refused_total"]) for r in rows)

    def leases(self, conn: ProbeConnection) -> tuple[LeaseSample, ...]:
        if not has_table(conn, "queuetop.leases"):
            return ()
        rows = conn.execute(LEASES_SQL["leases"]).fetchall()
        return tuple(
            LeaseSample(name=r["name"], holder=r["holder"], token=r["token"], expires_in_s=r["expires_in_s"], state=r["state"])
            for r in rows
        )

    def compaction(self, conn: ProbeConnection) -> tuple[CompactionSample, ...]:
        if not has_table(conn, "queuetop.task_status_deltas"):
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
