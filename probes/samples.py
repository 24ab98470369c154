"""The samples a probe returns, typed and frozen: a queue's figures (`QueueSample`), a ring's, a
lease's, the lock picture's parts (blocked sessions, root blockers, prepared transactions,
application locks), connections, every session (the sessions view), compaction, the server, and
each probe's status.

A `Snapshot` (probes/model.py) holds one cycle's of them; probes/jsonform.py turns them into
JSON and back. Nothing here touches the database.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

_Sample = TypeVar("_Sample")

# queuetop's own monitoring sessions' application_name starts with this (probes/session.py's
# APPLICATION_NAME: the probes, "queuetop-probe:details", "queuetop-probe:scenario"). The Sessions
# view hides them by default, and they are never the oldest transaction or the xmin holder.
PROBE_APPLICATION = "queuetop-probe"
# The backend types of clients' sessions: PostgreSQL's, SQL Server's user sessions.
CLIENT_BACKEND_TYPES = frozenset({"client backend", "user process"})


def quick_init(cls: type[_Sample]) -> type[_Sample]:
    """Give a frozen, slotted dataclass (keyword-only, no default factories, no __post_init__)
    an `__init__` as quick as a plain class's, with the same signature and defaults. The one
    dataclasses writes sets each field through `object.__setattr__`, around the frozen check: 6
    µs for BlockedSession's 21 fields. This one sets them through the fields' slot descriptors,
    which the frozen check does not see either: 2-3 µs (measured). For the samples made by the
    hundred each cycle: a pile-up's blocked sessions, the sessions view's rows."""
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    if hasattr(cls, "__post_init__") or any(f.default_factory is not dataclasses.MISSING or not f.kw_only for f in fields):
        raise TypeError(f"quick_init: {cls.__name__} needs keyword-only fields without factories, and no __post_init__")
    params = ", ".join(f.name if f.default is dataclasses.MISSING else f"{f.name}=_default_{f.name}" for f in fields)
    body = "".join(f"    _set_{f.name}(self, {f.name})\n" for f in fields)
    namespace: dict[str, Any] = {f"_set_{f.name}": getattr(cls, f.name).__set__ for f in fields}
    namespace.update({f"_default_{f.name}": f.default for f in fields if f.default is not dataclasses.MISSING})
    exec(f"def __init__(self, *, {params}):\n{body}", namespace)  # as dataclasses writes __init__
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__annotations__ = dict(cls.__init__.__annotations__)  # what typing.get_type_hints and inspect read
    cls.__init__ = init  # type: ignore[method-assign]
    return cls


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
class Consumer:
    """A session that works on a queue's table now, as the server shows it (probes/diagnosis.py)."""

    pid: int
    state: str | None
    application: str | None
    for_s: float | None  # how long it has been in that state: its query running, or idle
    waiting: bool = False  # waits for a lock (the lock tree has it)
    # How it was found: "lock" (holds or awaits a lock on the table or one of its indexes),
    # "query" (its current or last statement names the table or the library's fetch function),
    # "listen" (it waits for the library's notifications: an idle worker).
    evidence: str = "lock"
    # Found on a table (or a channel) that several queues share: it works one of them, maybe
    # another than this one (a Procrastinate worker for other queues).
    shared: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Locker:
    """A lock on a queue's table, or on one of its indexes or partitions, that stops its consumers:
    granted in a mode that conflicts with the ROW EXCLUSIVE their UPDATE or DELETE takes (SHARE,
    SHARE ROW EXCLUSIVE, EXCLUSIVE, ACCESS EXCLUSIVE: a migration's LOCK TABLE, an ALTER TABLE, a
    CREATE INDEX), as pg_locks shows it (the queues probe's `consumers` statement)."""

    pid: int  # 0: a prepared transaction (`gid`), as pg_blocking_pids says it
    mode: str  # as pg_locks says it ("AccessExclusiveLock"): the strongest such mode it holds there
    relation: str | None  # what it locked: the table, an index or a partition
    state: str | None
    application: str | None
    xact_age_s: float | None  # how long its transaction has been open (a prepared one: since PREPARE)
    waiting: bool = False  # it waits for a lock on the table itself (what else it waits for: the lock tree)
    gid: str | None = None  # a prepared transaction's


@dataclass(frozen=True, slots=True, kw_only=True)
class Diagnosis:
    """Why a queue is as it is: a verdict judged over a window of samples (probes/diagnosis.py)."""

    code: str  # healthy | blocked | starved | no-consumers | failing | bloat | saturated | not-judged
    reason: str  # one line, for an operator
    pids: tuple[int, ...] = ()  # the sessions involved: the root blocker first, the xmin holder
    objects: tuple[str, ...] = ()  # the relations, prepared transactions or slots involved
    since_s: float | None = None  # how long the condition has held (None: not known)


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
    # Jobs that failed for good (to the library's failed, discarded or dead state), where its own
    # records tell (probes/sources/flows.py): per second over the last interval, and added up.
    failed_per_s: float | None = None
    failed_total: int | None = None
    # Where the rates came from: "records" (the library's own records of its jobs, or a table's
    # recorded times: each queue's own), "statistics" (the table's counters), None (no rates).
    rates_from: str | None = None
    # Figures not known yet and being counted (each None): a table larger than the first cycle's
    # reading, where a sample of its unread pages bounds them no better than 5 % (tally.py).
    counting: tuple[str, ...] = ()
    # Due but not claimable now (a lock, a policy, a locked named queue): part of delayed.
    blocked: int | None = None
    # Figures that are estimates -> age (s) of the exact count behind each (None: never counted).
    estimated: dict[str, float | None] = field(default_factory=dict)
    schema: str | None = None  # the library install's schema (None: not a library's queue)
    # The sessions working on its table now (None: not looked for), and the verdict on it (None:
    # not judged, e.g. a snapshot recorded before verdicts).
    consumers: tuple[Consumer, ...] | None = None
    diagnosis: Diagnosis | None = None
    # The sessions (and prepared transactions) holding a lock on its table that stops its
    # consumers, read from pg_locks alone, so known when its figures are not (None: not looked for).
    lockers: tuple[Locker, ...] | None = None


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


@quick_init
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
    # What its statement wants, from its own point of view: "to update a row of p6 (0,1)",
    # "ACCESS EXCLUSIVE on t10 to TRUNCATE" (probes/locklabels.py's wants_of); lock_type and mode stay
    # as the server says them, for detail.
    wants: str | None = None
    # The sessions holding what it wants (every member of a shared row lock, read from the row's
    # multixact), as opposed to those only queued ahead of it; all of them are in blocked_by.
    holders: tuple[int, ...] = ()
    # Why holders may be incomplete ("the row's other lockers not read: ..."), or None.
    holders_note: str | None = None
    # Its parallel workers that wait too, folded into it (pg_stat_activity.leader_pid, 13+).
    worker_pids: tuple[int, ...] = ()
    # The wait cycles (WaitCycle.id) at the root of its chains: their members are in root_blockers.
    root_cycles: tuple[int, ...] = ()
    # In a pile-up (more waiters than the probe reads one by one): blocked_by holds the sessions
    # holding what it waits for, not those it only queues behind (probes/postgres.py PILE_UP_WAITERS).
    ahead_unread: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Blocker:
    pid: int
    blocked_count: int  # sessions it blocks directly or transitively
    state: str | None
    xact_age_s: float | None
    query: str | None
    application: str | None
    # The processes waiting behind it: the sessions of blocked_count and their parallel workers.
    blocked_processes: int | None = None
    # A member of a wait cycle (WaitCycle.id): a deadlock's members are each other's roots.
    cycle: int | None = None
    # The strongest mode it holds on what a session waiting for it wants (a table, an object, a
    # key), as pg_locks names it ("AccessExclusiveLock"); None for a row's holder (a row lock is no
    # mode of pg_locks) and where it is not known.
    held_mode: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitCycle:
    """Sessions waiting on each other in a ring (a deadlock the server has not broken yet):
    members in the order of their waits, and the sessions that wait on them from outside."""

    id: int  # 1, 2, ... within a snapshot: what BlockedSession.root_cycles and Blocker.cycle name
    members: tuple[int, ...]
    waiting: tuple[int, ...]  # sessions outside the cycle whose chains end in it
    wait_s: float | None  # the longest wait among its members (the deadlock check comes after deadlock_timeout)


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
    # kind "standby": a standby's hot_standby_feedback through its walsender, with no slot
    # (xmin_holder_pid is the walsender's, xmin_holder_name the standby's name as
    # pg_stat_replication says it: its application_name). For a standby and for a slot a standby
    # is streaming from, xmin_holder_application is the standby's name too.
    # Where the holder connects from (a standby's or a session's address or host name; "local" for
    # a Unix socket), where it can be known.
    xmin_holder_client: str | None = None
    # The horizon's age in time (seconds), where it can be known: a session's transaction's age
    # (its xid or its snapshot was taken within it), a prepared transaction's since PREPARE; a
    # standby's feedback or a slot's xmin, from the probe's own history of the next transaction
    # id (PostgresProbes.xid_clock): when the history does not reach back to it, the history's
    # span with xmin_holder_age_at_least set (the horizon is at least that old); None where
    # nothing says (a one-shot snapshot's standby or slot).
    xmin_holder_age_s: float | None = None
    xmin_holder_age_at_least: bool = False
    # Why the oldest transaction (oldest_xact_*), and why the xmin holder (xmin_holder_*), are
    # unknown though sessions exist: other roles' sessions whose transactions the role may not see
    # (no pg_read_all_stats). None: known (the figures, or their absence, are the answer).
    oldest_xact_unknown: str | None = None
    xmin_holder_unknown: str | None = None
    # The connections ordinary roles may use: max_connections less the slots kept for superusers
    # (superuser_reserved_connections) and, from PostgreSQL 16, for roles with
    # pg_use_reserved_connections (reserved_connections). An ordinary role's connection is refused
    # once `total` (every client session takes one) reaches it. None in snapshots recorded before it
    # was read.
    usable: int | None = None

    @property
    def near_limit(self) -> bool:
        """At least NEAR_LIMIT of the connections ordinary roles may use are taken: consumers may
        soon be unable to connect (at `usable`, they are refused)."""
        return self.usable is not None and self.usable > 0 and self.total >= NEAR_LIMIT * self.usable


# Connections.near_limit: this share of the usable connections in use.
NEAR_LIMIT = 0.9


@dataclass(frozen=True, slots=True, kw_only=True)
class Standby:
    """A standby (or a logical replication subscriber, pg_basebackup, pg_receivewal) streaming from
    this server: a row of pg_stat_replication. Where the probe's role lacks pg_read_all_stats (or
    pg_monitor) the server hides everything but its name: state, sync_state, client and the lags are
    None (Replication.standbys_unknown says why), never a calm 0."""

    application: str | None  # its application_name: the standby's name (cluster_name, or "walreceiver")
    client: str | None  # its host name or address; "local" for a Unix socket
    state: str | None  # startup, catchup, streaming, backup, stopping
    sync_state: str | None  # async, potential, sync, quorum
    # How long the last WAL this server flushed took to be written, flushed and replayed there
    # (pg_stat_replication's lags, in seconds). The server shows NULL once a standby has caught up
    # and nothing new is written: the probe says 0 then (everything replayed, replay_lag_bytes 0),
    # and None where it is not known.
    write_lag_s: float | None
    flush_lag_s: float | None
    replay_lag_s: float | None
    # WAL written here and not yet replayed there, in bytes (pg_current_wal_lsn() - replay_lsn; on a
    # standby that cascades, from what it has received or replayed).
    replay_lag_bytes: int | None
    pid: int | None = None  # its walsender's


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicationSlot:
    """A replication slot (pg_replication_slots): every role may read them all."""

    name: str
    type: str  # physical | logical
    active: bool  # a consumer streams from it now
    # WAL the server keeps for it (pg_current_wal_lsn() - restart_lsn): what an inactive slot grows
    # until the disk is full. 0 for a slot that reserves none (restart_lsn NULL) and for one the
    # server invalidated (wal_status "lost", which keeps none).
    retained_wal_bytes: int | None
    xmin_age: int | None  # age(xmin): a standby's feedback through the slot holds every table's horizon back
    catalog_xmin_age: int | None  # age(catalog_xmin): logical decoding holds the system catalogs' horizon back
    database: str | None = None  # a logical slot's
    plugin: str | None = None  # a logical slot's output plugin
    # PostgreSQL 13+: reserved | extended | unreserved (at risk under max_slot_wal_keep_size) | lost
    # (invalidated: its consumer can no longer resume from it); None before 13, and for a slot that
    # reserves no WAL.
    wal_status: str | None = None
    active_pid: int | None = None  # the walsender streaming from it


@dataclass(frozen=True, slots=True, kw_only=True)
class Replication:
    """Who replicates from this server: its standbys and its replication slots."""

    standbys: tuple[Standby, ...] = ()
    slots: tuple[ReplicationSlot, ...] = ()
    # Why the standbys' state, client and lags are unknown though they are listed: the probe's role
    # lacks pg_read_all_stats. None: known.
    standbys_unknown: str | None = None


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class SessionSample:
    """One backend as the sessions view lists it (pg_activity's columns): every backend the
    probe's role can see but the probe's own session. Text is kept as the server gave it (a view
    makes it inert: dbcore/text.py)."""

    pid: int
    database: str | None  # None for a background process not connected to one
    user: str | None
    application: str | None
    client: str | None  # address or host name; "local" for a Unix socket; None for a background process
    backend_type: str | None  # "client backend", "autovacuum worker", ...; None where privileges hide it
    state: str | None  # active, idle, idle in transaction, ...; None where privileges hide it
    xact_age_s: float | None  # how long its transaction has lasted (server clock); None: no transaction
    query_age_s: float | None  # how long its current query has run, or, idle, its state has lasted
    wait_event_type: str | None
    wait_event: str | None
    blocked_by: tuple[int, ...] = ()  # pg_blocking_pids of a session waiting on a lock (0: a prepared transaction)
    xmin_holder: bool = False  # it is what holds this database's xmin horizon back the most (Connections.xmin_holder_pid)
    leader_pid: int | None = None  # a parallel worker's leader (PostgreSQL 13+)
    query: str | None = None  # its query cut to probes.postgres.SESSION_QUERY_CHARS (the whole: session details)
    query_is_cut: bool = False  # the query was longer than what is kept here
    # When the backend started (SQL Server: the session's login_time): with the pid, the session's
    # identity (a pid is reused by a later backend). None where privileges hide it, and in
    # snapshots recorded before it was read.
    backend_start: datetime | None = None

    @property
    def identity(self) -> tuple[int, datetime | None]:
        """(pid, backend_start): what stays the same while the session lives, and only then."""
        return self.pid, self.backend_start

    @property
    def own(self) -> bool:
        """One of queuetop's own monitoring sessions (a probe's, a details' read: application_name
        starting with PROBE_APPLICATION), not the workload (the engine's workers, the demo's, a
        scenario's are)."""
        return self.application is not None and self.application.startswith(PROBE_APPLICATION)

    @property
    def background(self) -> bool:
        """A server process rather than a client's session (checkpointer, walwriter, autovacuum,
        a walsender, ...). Where privileges hide the backend type, a session with a user and a
        database is taken as a client's (a background process has neither, or no database)."""
        if self.backend_type is None:
            return self.user is None or self.database is None
        return self.backend_type not in CLIENT_BACKEND_TYPES


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
    # "primary" or "standby" (a hot standby: PostgreSQL in recovery), read every cycle (None: not
    # read: a server never reached, a recording older than it). A standby's figures are the
    # primary's as of the last transaction it replayed (`replayed_at`, when that transaction
    # committed on the primary); `replay_lag_s` and `replay_lag_bytes` say how far replay is behind
    # the WAL it received (0 when caught up; bytes None without a WAL receiver), `replay_paused`
    # whether replay is paused (pg_wal_replay_pause). All four None on a primary.
    role: str | None = None
    replay_lag_s: float | None = None
    replay_lag_bytes: int | None = None
    replay_paused: bool | None = None
    replayed_at: datetime | None = None

    @property
    def standby(self) -> bool:
        """A hot standby: nothing can be written there, and queues' consumers run on the primary."""
        return self.role == "standby"


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerStats:
    """The whole server's figures each cycle (the server_stats probe: probes/serverstats.py), as
    pg_activity's header gives them: every database of pg_stat_database summed, the WAL position.
    A rate is a difference of the server's cumulative counters between this read and the
    previous one, over the server's clock (`interval_s`): None on the first read, and for an
    interval in which a counter was reset (pg_stat_reset, a crash): unknown, never 0 or negative."""

    read_at: datetime  # the server's clock when they were read (clock_timestamp(), UTC)
    interval_s: float | None  # since the previous read (the rates' span); None: the first read
    xact_commit_per_s: float | None
    xact_rollback_per_s: float | None
    # None on a hot standby: its statistics count its own work (none written there), not the
    # primary's that it replays, so 0/s would read as calm while the primary writes.
    tup_inserted_per_s: float | None
    tup_updated_per_s: float | None
    tup_deleted_per_s: float | None
    temp_bytes_per_s: float | None
    # WAL written per second (pg_current_wal_lsn()); on a standby, replayed (pg_last_wal_replay_lsn():
    # `wal_position` says which).
    wal_bytes_per_s: float | None
    # Blocks found in shared buffers among those read over the interval (blks_hit / (blks_hit +
    # blks_read) of the differences); None when no block was read.
    cache_hit_ratio: float | None
    # Every database's size the role may read (pg_database_size walks files: read at most every
    # serverstats.DATABASE_SIZE_EVERY_S seconds, the last value kept; `database_size_read_at` is
    # when). None when a database may not be read by this role (the probe's notes say so).
    database_size_bytes: int | None
    deadlocks_total: int | None  # deadlocks the server detected (and broke) since its statistics were reset
    database_size_read_at: datetime | None = None
    wal_position: str | None = None  # "insert" (a primary's pg_current_wal_lsn()) or "replay" (a standby's)
    # Deadlocks by database (those with any), and those new since the previous read (each a notice on
    # the dashboard: probes/serverstats.py deadlock_notices); empty on the first read.
    deadlocks_by_database: dict[str, int] = field(default_factory=dict)
    deadlocks_new: dict[str, int] = field(default_factory=dict)
    # The cumulative counters the rates come from (Prometheus counters: queuetop_server_*), summed
    # over the databases; the WAL position in bytes. None where the rate is for want of a reading.
    xact_commit_total: int | None = None
    xact_rollback_total: int | None = None
    tup_inserted_total: int | None = None
    tup_updated_total: int | None = None
    tup_deleted_total: int | None = None
    temp_bytes_total: int | None = None
    wal_bytes_total: int | None = None
    blks_hit_total: int | None = None
    blks_read_total: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolSample:
    """A PgBouncer pool (a row of its admin console's SHOW POOLS): the clients of one database
    alias and user, and the server connections it keeps for them (probes/pooler_console.py)."""

    database: str  # the pool's database, as PgBouncer names it (an alias in its [databases])
    user: str
    cl_active: int  # clients linked to a server connection, or idle with none needed
    cl_waiting: int  # clients that sent a query and wait for a server connection
    sv_active: int  # server connections linked to a client
    sv_idle: int  # server connections free to be given to a client
    maxwait_s: float  # how long the oldest waiting client has waited (0: none waits)
    pool_mode: str | None = None  # session | transaction | statement
    # The server database the alias connects to (SHOW DATABASES): the pools of the monitored
    # database are those whose server_database is its name. None: not listed there.
    server_database: str | None = None
    pool_size: int | None = None  # the most server connections the pool may open (SHOW DATABASES)


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolerSample:
    """What a PgBouncer's admin console said (the pooler probe): its pools, but the console's own."""

    pools: tuple[PoolSample, ...] = ()
    # The pooler database (alias) the monitored DSN names: its pools while the server's database
    # is not known (probes/pooler_console.py pools_of). None: not known.
    through: str | None = None
