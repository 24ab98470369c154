"""The snapshot model: typed, frozen samples, and their JSON form (snapshot version 1).

Probes build these; the scheduler composes them into a `Snapshot`; the dashboard and
`queuetop snapshot --json` read them. Nothing here touches the database.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

SNAPSHOT_VERSION = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeStatus:
    elapsed_ms: float
    error: str | None = None
    # What the probe could not read this cycle, so a view can keep the last figures of it, marked
    # stale: the queue sources that failed (by source name), or ("all",) when the probe failed.
    unread: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueSample:
    name: str
    kind: str  # "reference" (the engine's table queue), "table" (a job table: declared in the
    # config, or a library's), "outbox" (the transactional outbox's unrelayed rows) or "inbox"
    table: str  # schema-qualified, quoted as SQL
    depth: int | None
    ready: int | None
    in_flight: int | None
    delayed: int | None  # waiting out a retry back-off: neither ready nor in flight
    dead: int | None
    oldest_ready_age_s: float | None
    enqueued_per_s: float | None
    dequeued_per_s: float | None
    depth_is_estimate: bool
    dead_tuples: int | None
    live_tuples: int | None
    last_vacuum_at: datetime | None  # the later of manual and auto vacuum
    last_autovacuum_at: datetime | None
    inserted_total: int | None  # cumulative counters the rates come from (pg_stat_user_tables)
    deleted_total: int | None
    error: str | None = None
    source: str = "reference"  # which source found it: reference | outbox | inbox | table | pgmq | ...


@dataclass(frozen=True, slots=True, kw_only=True)
class RingSample:
    name: str
    capacity: int
    used: int
    refused_total: int


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseSample:
    name: str
    holder: str | None
    token: int
    expires_in_s: float | None
    state: str  # held | expired | free


@dataclass(frozen=True, slots=True, kw_only=True)
class BlockedSession:
    pid: int
    blocked_by: tuple[int, ...]  # sessions only: a prepared transaction is in blocked_by_prepared
    root_blocker: int | None  # the lowest of root_blockers (version 1 had only one)
    wait_s: float | None
    lock_type: str | None  # as pg_locks says: a row wait is "transactionid" (or "tuple")
    mode: str | None
    relation: str | None  # the table, also for a row wait; "db:oid N" for another database's
    query: str | None
    application: str | None
    state: str | None = None
    in_cycle: bool = False  # part of a wait cycle (a deadlock the server has not broken yet)
    root_blockers: tuple[int, ...] = ()  # every session at the root of its chains
    blocked_by_prepared: tuple[str, ...] = ()  # gids of prepared transactions it waits for
    root_prepared: tuple[str, ...] = ()  # gids of prepared transactions at the root of its chains
    database: str | None = None  # the database of the lock it waits for
    row: str | None = None  # the row's ctid "(page,tuple)", where it can be known


@dataclass(frozen=True, slots=True, kw_only=True)
class Blocker:
    pid: int
    blocked_count: int  # sessions it blocks directly or transitively
    state: str | None
    xact_age_s: float | None
    query: str | None
    application: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedXact:
    """A transaction prepared for two-phase commit: it holds its locks with no session behind
    it until COMMIT PREPARED or ROLLBACK PREPARED."""

    gid: str
    owner: str | None
    database: str | None
    age_s: float | None
    blocked_count: int  # sessions it holds up, directly or behind others


@dataclass(frozen=True, slots=True, kw_only=True)
class Connections:
    total: int
    max: int
    by_state: dict[str, int]
    by_application: dict[str, int]
    oldest_xact_age_s: float | None
    oldest_xact_pid: int | None
    xmin_holder_pid: int | None
    xmin_holder_age_xids: int | None
    xmin_holder_application: str | None
    oldest_xact_state: str | None = None  # e.g. "idle in transaction": the usual culprit
    # SQL Server: the version store's size (tempdb's, plus the persistent one under accelerated
    # recovery), which the oldest snapshot transaction (xmin_holder_pid there) keeps from shrinking.
    version_store_kb: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionGroup:
    group: int  # the group's key (a task id)
    title: str | None
    pending_deltas: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionSample:
    name: str
    pending_deltas: int
    groups: int
    last_run_at: datetime | None
    last_duration_ms: float | None = None
    last_rows_folded: int | None = None
    runs_total: int = 0
    pending_is_estimate: bool = False  # at least this many (the count is capped)
    by_group: tuple[CompactionGroup, ...] = ()  # the groups with the most pending deltas


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerInfo:
    dialect: str
    version: str | None
    database: str | None
    label: str | None = None  # the masked DSN or the embedded server's description
    deadlock_timeout_s: float | None = None  # how long a wait cycle lasts before the server breaks it


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    taken_at: datetime
    server: ServerInfo
    probes: dict[str, ProbeStatus]
    queues: tuple[QueueSample, ...] = ()
    rings: tuple[RingSample, ...] = ()
    leases: tuple[LeaseSample, ...] = ()
    blocked: tuple[BlockedSession, ...] = ()
    blockers: tuple[Blocker, ...] = ()
    prepared_xacts: tuple[PreparedXact, ...] = ()
    connections: Connections | None = None
    compaction: tuple[CompactionSample, ...] = ()
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def elapsed_ms(self) -> float:
        return sum(p.elapsed_ms for p in self.probes.values())

    def to_json(self) -> dict[str, object]:
        """The v1 JSON object of PRODUCT.md (more keys than it requires, none fewer)."""
        document: dict[str, object] = {
            "version": SNAPSHOT_VERSION,
            "taken_at": self.taken_at,
            "server": asdict(self.server),
            "probes": {name: asdict(status) for name, status in self.probes.items()},
            "queues": [asdict(q) for q in self.queues],
            "rings": [asdict(r) for r in self.rings],
            "leases": [asdict(lease) for lease in self.leases],
            "blocked": [asdict(b) for b in self.blocked],
            "blockers": [asdict(b) for b in self.blockers],
            "prepared_xacts": [asdict(p) for p in self.prepared_xacts],
            "connections": asdict(self.connections) if self.connections else _EMPTY_CONNECTIONS,
            "compaction": [asdict(c) for c in self.compaction],
            **self.extra,
        }
        return {key: _jsonable(value) for key, value in document.items()}


_EMPTY_CONNECTIONS: dict[str, object] = {
    "total": None,
    "max": None,
    "by_state": {},
    "by_application": {},
    "oldest_xact_age_s": None,
    "xmin_holder_pid": None,
    "version_store_kb": None,
}


def _jsonable(value: object) -> object:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, float):
        return round(value, 3)
    return value
