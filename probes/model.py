"""The snapshot model (snapshot version 1): a `Snapshot`, one cycle of every probe's samples
of one database, and its JSON form (`to_json`, `from_json`).

Probes build the samples (probes/samples.py); the scheduler composes them into a `Snapshot`; the
dashboard, the recorder and `queuetop snapshot --json` read them. The JSON machinery (turning a
sample into plain values and checking one read back) is probes/jsonform.py's. The samples and
the JSON helpers others use are re-exported here, where they have always been imported from.
Nothing here touches the database.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from datetime import datetime
from typing import Any, get_origin

from .jsonform import MAX_EXTRA_DEPTH as MAX_EXTRA_DEPTH
from .jsonform import MAX_INT as MAX_INT
from .jsonform import Decoder, check_extra, decoder_for, jsonable, kind_of, plain, type_hints_of
from .jsonform import ShapeError as ShapeError
from .jsonform import as_utc as as_utc
from .jsonform import utc_text as utc_text
from .samples import AppLock as AppLock
from .samples import BlockedSession as BlockedSession
from .samples import Blocker as Blocker
from .samples import CompactionGroup as CompactionGroup
from .samples import CompactionSample as CompactionSample
from .samples import Connections as Connections
from .samples import Consumer as Consumer
from .samples import Diagnosis as Diagnosis
from .samples import LeaseSample as LeaseSample
from .samples import Locker as Locker
from .samples import PoolerSample as PoolerSample
from .samples import PoolSample as PoolSample
from .samples import PreparedXact as PreparedXact
from .samples import ProbeStatus as ProbeStatus
from .samples import QueueSample as QueueSample
from .samples import Replication as Replication
from .samples import ReplicationSlot as ReplicationSlot
from .samples import RingSample as RingSample
from .samples import ServerInfo as ServerInfo
from .samples import ServerStats as ServerStats
from .samples import SessionSample as SessionSample
from .samples import Standby as Standby
from .samples import WaitCycle as WaitCycle

SNAPSHOT_VERSION = 1


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
    app_locks: tuple[AppLock, ...] = ()
    cycles: tuple[WaitCycle, ...] = ()  # wait cycles (deadlocks not broken yet), with who waits on them
    connections: Connections | None = None
    compaction: tuple[CompactionSample, ...] = ()
    # The standbys and replication slots (the replication probe); None where it did not read them
    # (SQL Server, the probe failed, a snapshot recorded before it).
    replication: Replication | None = None
    # A PgBouncer's pools (the pooler probe, on its admin console: --pgbouncer, a target's
    # `pgbouncer`); None where no PgBouncer was given, or its console could not be read (the
    # pooler probe's status says why).
    pooler: PoolerSample | None = None
    # The whole server's figures (the server_stats probe: transactions, rows, temp and WAL bytes per
    # second, cache hit ratio, size, deadlocks); None where they were not read (SQL Server, the probe
    # failed: its status says why; a snapshot recorded before them).
    server_stats: ServerStats | None = None
    # Every session the connections probe saw (the sessions view), the oldest transaction first,
    # at most probes.postgres.SESSIONS_CAP of them; sessions_total counts them all (more than
    # len(sessions) when the list was capped; None when they were not read, or in a snapshot
    # recorded before sessions were, which has none).
    sessions: tuple[SessionSample, ...] = ()
    sessions_total: int | None = None
    # The sessions come in the Sessions panel's default order (the oldest transaction first, then
    # the longest query or idle time, then the pid): the database sorted them (PostgreSQL's probe).
    sessions_in_order: bool = field(default=False, compare=False)  # a hint, not recorded: a replay sorts
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def elapsed_ms(self) -> float:
        return sum(p.elapsed_ms for p in self.probes.values())

    @property
    def host(self) -> str:
        """The target's name among several (the sampler's `host`); "" when it was not given one."""
        return str(self.extra.get("host", ""))

    @property
    def connected(self) -> bool:
        """False when the database could not be reached (the sampler says so in `extra`)."""
        return bool(self.extra.get("connected", True))

    def unknown_list(self, name: str) -> str | None:
        """Why the list `name` of this snapshot (or its `connections`) is unknown, or None when it
        is what was read. Unknown: empty (None) while its probe reported an error. A probe that
        failed returns nothing (the sampler's status says why and that it read nothing: `unread`),
        and so does one for a host that cannot be reached; one that read its figures but could not
        see everything (other roles' queries) has something to show, and its error is a note
        beside the figures. An unknown list is null in the JSON and "unknown: <why>" on screen,
        never an empty list or a 0, which would read as calm."""
        if getattr(self, name):
            return None
        status = self.probes.get(PROBE_OF[name])
        if status is None or status.error is None:
            return None
        # Failed, or some of it unread (a queue source), or never ran (no connection): a note
        # beside a complete empty list (other roles' queries hidden, nobody blocked) is no reason
        # to call it unknown.
        return status.error if status.unread or not self.connected else None

    def to_json(self) -> dict[str, object]:
        """The v1 JSON object of PRODUCT.md (more keys than it requires, none fewer). Exact:
        `Snapshot.from_json(s.to_json()) == s` (floats as they are, every key of an empty
        connections object), so that a recording replays what was seen."""
        document: dict[str, object] = {
            "version": SNAPSHOT_VERSION,
            "taken_at": self.taken_at,
            "server": plain(self.server),
            "probes": {name: plain(status) for name, status in self.probes.items()},
            "queues": [plain(q) for q in self.queues],
            "rings": [plain(r) for r in self.rings],
            "leases": [plain(lease) for lease in self.leases],
            "blocked": [plain(b) for b in self.blocked],
            "blockers": [plain(b) for b in self.blockers],
            "prepared_xacts": [plain(p) for p in self.prepared_xacts],
            "app_locks": [plain(a) for a in self.app_locks],
            "cycles": [plain(c) for c in self.cycles],
            "connections": plain(self.connections) if self.connections else _EMPTY_CONNECTIONS,
            "compaction": [plain(c) for c in self.compaction],
            "replication": plain(self.replication) if self.replication is not None else None,
            "pooler": plain(self.pooler) if self.pooler is not None else None,
            "server_stats": plain(self.server_stats) if self.server_stats is not None else None,
            "sessions": [plain(s) for s in self.sessions],
            "sessions_total": self.sessions_total,
            **self.extra,
        }
        # Unknown is absent: a list its probe could not read is null, not [] (which reads as "none");
        # the connections of a probe that failed are every key null, their maps too.
        for name in PROBE_OF:
            if self.unknown_list(name) is not None:
                document[name] = _UNKNOWN_CONNECTIONS if name == "connections" else None
        return {key: jsonable(value) for key, value in document.items()}

    @classmethod
    def from_json(cls, document: Any) -> Snapshot:
        """A snapshot from its JSON object (`to_json`, or a line of a recording). Keys it does not
        know are kept in `extra`, as `to_json` writes them; a later version is refused. Every
        value is checked against the model (`ShapeError`, a ValueError naming where and what):
        what a recording holds may have been damaged or written by something else, and nothing
        downstream should meet `"queues": null` or `"depth": "12"`. A null list is read only where
        to_json writes one, for a probe whose status (read first: `probes` precedes the lists)
        has an error, and as the empty tuple: the status says why it is unknown."""
        if not isinstance(document, Mapping):
            raise ShapeError(f"a snapshot is a JSON object, not {kind_of(document)}")
        version = document.get("version")
        if type(version) is not int or version != SNAPSHOT_VERSION:
            raise ValueError(f"snapshot version {version!r}: this queuetop reads version {SNAPSHOT_VERSION}")
        values: dict[str, Any] = {}
        for name, (decode, required) in _snapshot_fields().items():
            if name not in document:
                if required:
                    raise ShapeError(f"{name}: missing")
                continue
            value = document[name]
            if name == "connections" and isinstance(value, Mapping) and value.get("total") is None:
                values["connections"] = None  # to_json's empty object: the probe did not run or failed
                continue
            if value is None and name in PROBE_OF and _failed(values.get("probes"), PROBE_OF[name]):
                # to_json's null for a list (or an object) its probe could not read
                values[name] = None if name in ("connections", "replication", "pooler", "server_stats") else ()
                continue
            try:
                values[name] = decode(value)
            except ShapeError as exc:
                raise exc.within(name) from None
        extra = {key: value for key, value in document.items() if key not in _SNAPSHOT_KNOWN}
        for key, value in extra.items():
            check_extra(key, value)
        return cls(**values, extra=extra)


# The probe each list of a snapshot (and its connections) comes from.
PROBE_OF: dict[str, str] = {
    "queues": "queues", "rings": "rings", "leases": "leases", "blocked": "locks", "blockers": "locks",
    "prepared_xacts": "locks", "app_locks": "locks", "cycles": "locks", "connections": "connections", "compaction": "compaction",
    "sessions": "connections", "replication": "replication", "pooler": "pooler", "server_stats": "server_stats",
}


def _failed(probes: object, probe: str) -> bool:
    """Whether a snapshot's probe statuses (as read so far) say that `probe` failed: only then may
    its list be null."""
    status = probes.get(probe) if isinstance(probes, dict) else None
    return isinstance(status, ProbeStatus) and status.error is not None


# Every key of Connections, null (its maps empty): what `connections` is when the probe gave nothing.
_EMPTY_CONNECTIONS: dict[str, object] = {
    name: {} if get_origin(hint) is dict else None for name, hint in type_hints_of(Connections).items()
}
# Every key of Connections null, its maps too: the connections of a probe that failed (no map
# of sessions that reads as "no sessions").
_UNKNOWN_CONNECTIONS: dict[str, object] = dict.fromkeys(type_hints_of(Connections))


_SNAPSHOT_FIELDS: dict[str, tuple[Decoder, bool]] = {}
_SNAPSHOT_KNOWN = frozenset({f.name for f in fields(Snapshot)} | {"version"}) - {"extra"}


def _snapshot_fields() -> dict[str, tuple[Decoder, bool]]:
    """Snapshot's fields but `extra`: each one's decoder, and whether the key is required."""
    if not _SNAPSHOT_FIELDS:
        hints = type_hints_of(Snapshot)
        _SNAPSHOT_FIELDS.update({f.name: (decoder_for(hints[f.name]), f.default is MISSING and f.default_factory is MISSING)
                                 for f in fields(Snapshot) if f.name != "extra"})
    return _SNAPSHOT_FIELDS
