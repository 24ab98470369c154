"""The snapshot model: typed, frozen samples, and their JSON form (snapshot version 1).

Probes build these; the scheduler composes them into a `Snapshot`; the dashboard and
`queuetop snapshot --json` read them. Nothing here touches the database.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from datetime import UTC, datetime
from types import UnionType
from typing import Any, Union, get_args, get_origin, get_type_hints

SNAPSHOT_VERSION = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeStatus:
    elapsed_ms: float
    # Why the probe failed, or the part of it that did (a queue source, a queue's table): its
    # figures, or those of that part, are unknown. Only failures: what a probe that worked wants
    # said beside its figures (a locked named queue, rows row-level security hides, other roles'
    # queries hidden) is in `notes`.
    error: str | None = None
    notes: str | None = None
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
    # Messages enqueued and dequeued since this process's probes first saw the queue (what the
    # rates count, added up: a Prometheus counter, which restarts with the process); None where
    # the rates are (a table shared by several queues: its counters are none of them alone).
    enqueued_total: int | None = None
    dequeued_total: int | None = None
    # Due but not claimable now (a lock, a policy, a locked named queue): part of delayed.
    blocked: int | None = None
    # Figures that are estimates -> age (s) of the exact count behind each (None: never counted).
    estimated: dict[str, float | None] = field(default_factory=dict)
    schema: str | None = None  # the library install's schema (None: not a library's queue)


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
class AppLock:
    """An application lock held or waited for: PostgreSQL's advisory locks, SQL Server's
    sp_getapplock. A held one is worth seeing before anyone waits on it (schema changes and
    compactions are serialised by them)."""

    pid: int
    resource: str | None  # the key as the application passed it ("5", "(1902341488, 7)"), or SQL Server's name
    mode: str | None
    granted: bool
    wait_s: float | None  # a waiting request: how long it has waited
    application: str | None
    database: str | None
    owner_type: str | None = None  # SQL Server: TRANSACTION or SESSION (pg_locks does not say)
    principal: str | None = None  # SQL Server: the database principal the lock is scoped to


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
    # What holds the xmin horizon of this database's tables back (xmin_holder_age_xids is by how
    # much): "session" (xmin_holder_pid: its transaction's id or its snapshot), "prepared" (a
    # prepared transaction, which no session holds: xmin_holder_name is its gid) or "slot" (a
    # replication slot's xmin, a standby's feedback: xmin_holder_name is the slot's name). None
    # when nothing holds it, and in snapshots recorded before these were read (a pid there is a
    # session's).
    xmin_holder_kind: str | None = None
    xmin_holder_name: str | None = None


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
    app_locks: tuple[AppLock, ...] = ()
    connections: Connections | None = None
    compaction: tuple[CompactionSample, ...] = ()
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
            "server": _plain(self.server),
            "probes": {name: _plain(status) for name, status in self.probes.items()},
            "queues": [_plain(q) for q in self.queues],
            "rings": [_plain(r) for r in self.rings],
            "leases": [_plain(lease) for lease in self.leases],
            "blocked": [_plain(b) for b in self.blocked],
            "blockers": [_plain(b) for b in self.blockers],
            "prepared_xacts": [_plain(p) for p in self.prepared_xacts],
            "app_locks": [_plain(a) for a in self.app_locks],
            "connections": _plain(self.connections) if self.connections else _EMPTY_CONNECTIONS,
            "compaction": [_plain(c) for c in self.compaction],
            **self.extra,
        }
        # Unknown is absent: a list its probe could not read is null, not [] (which reads as "none");
        # the connections of a probe that failed are every key null, their maps too.
        for name in PROBE_OF:
            if self.unknown_list(name) is not None:
                document[name] = _UNKNOWN_CONNECTIONS if name == "connections" else None
        return {key: _jsonable(value) for key, value in document.items()}

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
            raise ShapeError(f"a snapshot is a JSON object, not {_kind(document)}")
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
                values[name] = None if name == "connections" else ()  # to_json's null for a list its probe could not read
                continue
            try:
                values[name] = decode(value)
            except ShapeError as exc:
                raise exc.within(name) from None
        extra = {key: value for key, value in document.items() if key not in _SNAPSHOT_KNOWN}
        for key, value in extra.items():
            _check_extra(key, value)
        return cls(**values, extra=extra)


# The probe each list of a snapshot (and its connections) comes from.
PROBE_OF: dict[str, str] = {
    "queues": "queues", "rings": "rings", "leases": "leases", "blocked": "locks", "blockers": "locks",
    "prepared_xacts": "locks", "app_locks": "locks", "connections": "connections", "compaction": "compaction",
}


def _failed(probes: object, probe: str) -> bool:
    """Whether a snapshot's probe statuses (as read so far) say that `probe` failed: only then may
    its list be null."""
    status = probes.get(probe) if isinstance(probes, dict) else None
    return isinstance(status, ProbeStatus) and status.error is not None


class ShapeError(ValueError):
    """A snapshot's JSON that is not of the model's shape: where (`queues[3].depth`) and what."""

    def __init__(self, message: str, where: str = "") -> None:
        super().__init__(f"{where}: {message}" if where else message)
        self.message, self.where = message, where

    def within(self, outer: str) -> ShapeError:
        """The same error, seen from the object that holds it."""
        where = outer + ("" if not self.where else self.where if self.where.startswith("[") else "." + self.where)
        return ShapeError(self.message, where)


_FIELDS: dict[type, tuple[str, ...]] = {}


def _plain(sample: object) -> dict[str, object]:
    """A sample's fields by name, nested samples too (dataclasses.asdict without its deep copy,
    which made to_json cost 14 ms for 120 queues)."""
    cls = type(sample)
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in fields(cls))  # type: ignore[arg-type]
    return {name: _nested(getattr(sample, name)) for name in names}


def _nested(value: object) -> object:
    if isinstance(value, tuple):
        return [_nested(v) for v in value]
    if is_dataclass(value) and not isinstance(value, type):
        return _plain(value)
    return value


def _jsonable(value: object) -> object:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, datetime):
        return as_utc(value).isoformat().replace("+00:00", "Z")
    return value


def as_utc(value: datetime) -> datetime:
    """`value` in UTC; a time without zone is taken as UTC (SQL Server's datetime2: queuetop's T-SQL
    reads UTC times; a recording's ISO time without zone)."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def utc_text(value: datetime) -> str:
    """A moment as queuetop names it to people: UTC, to the second."""
    return f"{as_utc(value):%Y-%m-%d %H:%M:%S}Z"


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = get_type_hints(cls)
    return hints


# Every key of Connections, null (its maps empty): what `connections` is when the probe gave nothing.
_EMPTY_CONNECTIONS: dict[str, object] = {
    name: {} if get_origin(hint) is dict else None for name, hint in _hints(Connections).items()
}
# Every key of Connections null, its maps too: the connections of a probe that failed (no map
# of sessions that reads as "no sessions").
_UNKNOWN_CONNECTIONS: dict[str, object] = dict.fromkeys(_hints(Connections))


# An integer beyond this is no figure a database keeps (bigint is 2**63): refused, since a float
# of it (a rate, a ratio, a Prometheus sample) would overflow long before Python's int does.
MAX_INT = 2**128
# How deep a value kept as it is (a key of `extra` the model does not know) may nest: printing or
# re-encoding it recurses.
MAX_EXTRA_DEPTH = 32

_Decoder = Callable[[Any], Any]
_DECODERS: dict[Any, _Decoder] = {}


def _kind(value: object) -> str:
    """What a JSON value is, in words, for an error message."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer out of range" if abs(value) > MAX_INT else "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def _wrong(expected: str, value: object) -> ShapeError:
    return ShapeError(f"expected {expected}, got {_kind(value)}")


def _str(value: Any) -> str:
    if type(value) is not str:
        raise _wrong("a string", value)
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (JSON's "\ud800"): no terminal or file can take it
            raise ShapeError("a string with a lone surrogate") from None
    return value


def _int(value: Any) -> int:
    if type(value) is not int or not -MAX_INT <= value <= MAX_INT:
        raise _wrong("an integer", value)
    return value


def _float(value: Any) -> float:
    if type(value) is float:
        return value
    if type(value) is int and -MAX_INT <= value <= MAX_INT:
        return float(value)
    raise _wrong("a number", value)


def _bool(value: Any) -> bool:
    if type(value) is not bool:
        raise _wrong("true or false", value)
    return value


def _datetime(value: Any) -> datetime:
    if type(value) is not str:
        raise _wrong("an ISO-8601 time", value)
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ShapeError(f"not an ISO-8601 time: {value[:40]!r}") from None


def _decoder(hint: Any) -> _Decoder:
    """A function reading a JSON value as the type `hint` names (dataclasses, tuples, dicts,
    datetimes, optional values), raising ShapeError for a value of another shape."""
    decode = _DECODERS.get(hint)
    if decode is None:
        decode = _DECODERS[hint] = _make_decoder(hint)
    return decode


def _make_decoder(hint: Any) -> _Decoder:
    origin = get_origin(hint)
    if origin in (Union, UnionType):
        options = [a for a in get_args(hint) if a is not type(None)]
        if len(options) != 1:
            raise TypeError(f"no decoder for {hint!r}")
        inner = _decoder(options[0])
        return lambda value: None if value is None else inner(value)
    if origin is tuple:
        item = _decoder(get_args(hint)[0])

        def decode_tuple(value: Any) -> tuple[Any, ...]:
            if type(value) is not list:
                raise _wrong("an array", value)
            out = []
            for index, element in enumerate(value):
                try:
                    out.append(item(element))
                except ShapeError as exc:
                    raise exc.within(f"[{index}]") from None
            return tuple(out)

        return decode_tuple
    if origin is dict:
        key_hint, item_hint = get_args(hint)
        if key_hint is not str:
            raise TypeError(f"no decoder for {hint!r}")
        if item_hint is object:
            return _extra_map
        item = _decoder(item_hint)

        def decode_dict(value: Any) -> dict[str, Any]:
            if type(value) is not dict:
                raise _wrong("an object", value)
            out = {}
            for key, element in value.items():
                try:
                    out[_str(key)] = item(element)
                except ShapeError as exc:
                    raise exc.within(f"[{key!r}]") from None
            return out

        return decode_dict
    if isinstance(hint, type) and is_dataclass(hint):
        return _dataclass_decoder(hint)
    simple = {str: _str, int: _int, float: _float, bool: _bool, datetime: _datetime}.get(hint)
    if simple is None:
        raise TypeError(f"no decoder for {hint!r}")
    return simple


def _dataclass_decoder(cls: type) -> _Decoder:
    hints = _hints(cls)
    spec = {f.name: (_decoder(hints[f.name]), f.default is MISSING and f.default_factory is MISSING)
            for f in fields(cls)}

    def decode_sample(value: Any) -> Any:
        if type(value) is not dict:
            raise _wrong("an object", value)
        values = {}
        for name, (decode, required) in spec.items():
            if name not in value:
                if required:
                    raise ShapeError("missing", name)
                continue
            try:
                values[name] = decode(value[name])
            except ShapeError as exc:
                raise exc.within(name) from None
        return cls(**values)  # keys it does not know are left out, as they always were

    return decode_sample


def _extra_map(value: Any) -> dict[str, object]:
    if type(value) is not dict:
        raise _wrong("an object", value)
    for key, element in value.items():
        _check_extra(key, element)
    return dict(value)


def _check_extra(key: str, value: object) -> None:
    """A key of `extra`, kept as it is: those the model reads (host, connected) of their type,
    strings readable, none nested beyond MAX_EXTRA_DEPTH."""
    try:
        if key == "host":
            _str(value)
        elif key == "connected":
            _bool(value)
        _check_nesting(value, MAX_EXTRA_DEPTH)
    except ShapeError as exc:
        raise exc.within(key) from None


def _check_nesting(value: object, depth: int) -> None:
    if isinstance(value, str):
        _str(value)
    elif isinstance(value, (list, dict)):
        if depth <= 0:
            raise ShapeError(f"nested deeper than {MAX_EXTRA_DEPTH}")
        if isinstance(value, dict):
            for key, element in value.items():
                _str(key)
                _check_nesting(element, depth - 1)
        else:
            for element in value:
                _check_nesting(element, depth - 1)
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
        raise _wrong("an integer", value)


_SNAPSHOT_FIELDS: dict[str, tuple[_Decoder, bool]] = {}
_SNAPSHOT_KNOWN = frozenset({f.name for f in fields(Snapshot)} | {"version"}) - {"extra"}


def _snapshot_fields() -> dict[str, tuple[_Decoder, bool]]:
    """Snapshot's fields but `extra`: each one's decoder, and whether the key is required."""
    if not _SNAPSHOT_FIELDS:
        hints = _hints(Snapshot)
        _SNAPSHOT_FIELDS.update({f.name: (_decoder(hints[f.name]), f.default is MISSING and f.default_factory is MISSING)
                                 for f in fields(Snapshot) if f.name != "extra"})
    return _SNAPSHOT_FIELDS
