"""PostgreSQL probes: queues, rings, leases, blocked sessions, connections and every session.

Each probe is a method taking a probe connection (autocommit, read-only, statement and lock
timeouts, application_name `queuetop-probe`: probes/session.py, whose names are re-exported
here) and returning frozen samples. The queries live in `probes/sql/postgresql/<probe>.sql`. A
probe raises on failure; the sampler records the reason and the other probes go on.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import replace
from datetime import datetime
from functools import cache
from typing import Any, TypeAlias

from psycopg import sql

from dbcore.database import DictRow, one
from dbcore.pgversions import check_supported, versioned
from dbcore.sqlfiles import Queries

from .config import Config
from .elsewhere import RelationsElsewhere
from .failures import PROBE_FAILURES, describe_error, describe_failure
from .locklabels import MULTIXACT_MODES, row_locks_conflict, row_strength
from .lockrows import may_be_shared, picture_parts
from .locks import LockPicture, LockTrees, prepared_blockers
from .model import (
    CompactionGroup,
    CompactionSample,
    Connections,
    Consumer,
    LeaseSample,
    Locker,
    QueueSample,
    Replication,
    ReplicationSlot,
    RingSample,
    ServerInfo,
    ServerStats,
    SessionSample,
    Standby,
)
from .rates import QueueRates
from .serverstats import ServerCounters
from .session import APPLICATION_NAME as APPLICATION_NAME
from .session import PROBE_SETTINGS as PROBE_SETTINGS
from .session import ProbeConnection as ProbeConnection
from .session import contained
from .session import open_probe_connection as open_probe_connection
from .sources import QueueFigures, QueueSource, SourceSet
from .sources.base import has_table, is_relation_name
from .sources.flows import Flows
from .sources.tally import CycleTallies
from .xidclock import XidClock

PROBE_NAMES = ("queues", "rings", "leases", "locks", "connections", "compaction", "replication", "server_stats")
# The method a probe runs, where it is not the probe's name: the connections probe also lists
# every session (the sessions view), a statement of its own, so that a cycle's connections and
# sessions are read by one probe with one status.
PROBE_METHODS = {"connections": "connections_and_sessions"}
COMPACTION_COUNT_CAP = 20_000
COMPACTION_TOP_GROUPS = 20
# The connections probe lists at most this many sessions (the oldest transactions first), each
# query cut to SESSION_QUERY_CHARS characters (the whole text is the session's details).
SESSIONS_CAP = 5_000
SESSION_QUERY_CHARS = 300


# Each probe's statements (probes/sql/postgresql/<probe>.sql).
SERVER_SQL = Queries("probes", "server.sql")
QUEUES_SQL = Queries("probes", "queues.sql")  # what every queue's table shares: its statistics
RINGS_SQL = Queries("probes", "rings.sql")
LEASES_SQL = Queries("probes", "leases.sql")
LOCKS_SQL = Queries("probes", "locks.sql")
# A pile-up, for the locks and sessions probes: more lock waiters than this. Up to it each waiter's
# blockers are pg_blocking_pids' exactly, at no more than pg_activity's blocking query costs (100
# waiters on a row: 0.88 of it; 150: 1.07); past it, the sessions holding what it waits for (200:
# 0.87 of pg_activity's query, where the exact list cost 1.25; 2,000: 70-140 ms, where
# pg_blocking_pids for each took the server 0.9 s, past the probe's statement timeout).
PILE_UP_WAITERS = 100
CONNECTIONS_SQL = Queries("probes", "connections.sql")
# The sessions listed, and how many there were before the cap.
SessionPicture: TypeAlias = "tuple[tuple[SessionSample, ...], int]"
# What the connections probe returns: the connections' figures, and the sessions (None when
# their statement failed: unknown, the probe's error says why).
ConnectionsPicture: TypeAlias = "tuple[Connections, SessionPicture | None]"
COMPACTION_SQL = Queries("probes", "compaction.sql")
REPLICATION_SQL = Queries("probes", "replication.sql")  # PostgreSQL only


class PostgresProbes:
    """The probes for one monitored PostgreSQL database. Holds what successive samples need:
    the previous counters (rates) and resolved user-declared tables."""

    dialect = "postgresql"
    # connections.sql's `sessions` sends them in the Sessions panel's default order (the dashboard
    # then sorts nothing: 5,000 sessions a sample).
    SESSIONS_IN_ORDER = True

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or Config()
        self.rates = QueueRates()  # each queue's counters from one cycle to the next
        # Every source, and each library's installs (one instance per schema), kept across cycles.
        self.tallies = CycleTallies()
        self.flows = Flows()  # the libraries' own records of their jobs' traffic: the rates
        self._flow_notes: list[str] = []
        self.sources = SourceSet(self.config, self.dialect)
        self._server: ServerInfo | None = None
        # Relation names of other databases, looked up there (a lock in another database); and of
        # this one's tables whose shared rows the locks probe reads: oid -> (until, schema, table).
        self._table_names: dict[int, tuple[float, str, str]] = {}
        self.elsewhere = RelationsElsewhere()
        # The lock tree, worked out again only when more than its times changed (bench probes
        # replaces it to time a picture that changes every cycle).
        self.lock_trees = LockTrees()
        # Past this many lock waiters the locks probe lists each one's holders, not every session
        # queued ahead of it (locks.sql's `pile`: pg_blocking_pids for each is quadratic).
        self.pile_up = PILE_UP_WAITERS
        # The next transaction id, read each cycle: how old a standby's or a slot's horizon is in time.
        self.xid_clock = XidClock()
        # The server's cumulative counters as last read (the server_stats probe's rates), and its size.
        self.server_counters = ServerCounters()
        self._version_num = 0
        # What a probe that worked says beside its figures (privileges that hide some, a locked
        # named queue), by probe name; and what part of it failed (a queue source), by probe name.
        self.notes: dict[str, str] = {}
        self.errors: dict[str, str] = {}
        # What a probe that succeeded could not read (the queue sources that failed), by probe name.
        self.unread: dict[str, tuple[str, ...]] = {}

    # -- server --------------------------------------------------------------------------

    def server(self, conn: ProbeConnection, label: str | None = None) -> ServerInfo:
        row = one(conn.execute(SERVER_SQL["server_info"]))
        self._version_num = row["version_num"]
        check_supported(self._version_num)
        self._server = ServerInfo(dialect=self.dialect, version=row["version"], database=row["database"], label=label,
                                  deadlock_timeout_s=row["deadlock_timeout_s"])
        return self.recovery(conn, self._server)

    def recovery(self, conn: ProbeConnection, server: ServerInfo) -> ServerInfo:
        """`server` with its role and a standby's replay as they are now (server.sql's `recovery`):
        the sampler reads them every cycle (a standby's lag moves, a standby may be promoted). On a
        standby the queues' table statistics are the standby's own, not the primary's: see queues()."""
        row = one(conn.execute(self._versioned(SERVER_SQL["recovery"])))
        self._server = replace(server, role=row["role"], replay_lag_s=row["replay_lag_s"],
                               replay_lag_bytes=None if row["replay_lag_bytes"] is None else int(row["replay_lag_bytes"]),
                               replay_paused=row["replay_paused"], replayed_at=row["replayed_at"])
        return self._server

    @property
    def standby(self) -> bool:
        """Whether the server was a hot standby when last read (server() or recovery())."""
        return self._server is not None and self._server.standby

    def _versioned(self, query: str) -> sql.SQL:
        """`query` as this server's major writes it (dbcore/pgversions.py; the version is the
        server probe's, which every cycle runs first)."""
        return sql.SQL(versioned(query, self._version_num))

    # -- queues --------------------------------------------------------------------------

    def queues(self, conn: ProbeConnection) -> tuple[QueueSample, ...]:
        """Every queue of every source found in this database (probes/sources/): the engine's,
        the declared tables, and the libraries detected with no config."""
        figures: list[tuple[QueueSource, QueueFigures]] = []
        problems = []
        unread = []
        self._flow_notes = []
        present: set[tuple[str, str]] = set()  # the sources sampled: their flow readers are kept
        # Which sources are installed, and where (every library in every schema): one catalog
        # statement for all of them (probes/sources/__init__.py, SourceSet).
        # The job tables' tallies share a time budget a cycle (probes/sources/tally.py).
        with self.sources.cycle(conn) as found, self.tallies.cycle():
            for source, install in found:
                try:
                    with contained(conn):  # a statement of its that fails leaves the probe's transaction usable
                        detection = source.detect(conn) if install is None else source.detected(conn, install)
                        if detection is None:
                            continue
                        sampled = source.sample(conn, detection)
                        present.add((source.name, source.schema))
                        if not self.standby:  # (a standby's figures come from the primary's work: no rates there)
                            self._read_flows(conn, source, sampled)
                        figures.extend((source, f) for f in source.qualified(sampled))
                except Exception as exc:  # a source's failure, whatever it is, is its own: the others go on
                    problems.append(f"{source.label}: {describe_failure(exc)}")
                    if source.name not in unread:
                        unread.append(source.name)
        self.flows.keep_only(present)
        if unread:
            self.unread["queues"] = tuple(unread)
        notes = [*self._flow_notes, *self.sources.out_of_reach, *(f"{f.name}: {note}" for _source, f in figures for note in f.notes)]
        problems.extend(f"{f.name}: {f.error}" for _source, f in figures if f.error)
        if problems:
            self.errors["queues"] = "; ".join(problems)
        if notes:
            self.notes["queues"] = "; ".join(notes)
        relids = sorted({f.relid for _, f in figures if f.relid is not None})
        # A standby's table statistics count its own work, not the primary's (replayed inserts and
        # deletes are not counted, nor dead tuples, nor vacuums): no rates and no bloat figures
        # there (unknown, not a calm 0/s).
        stats = {row["relid"]: row for row in conn.execute(QUEUES_SQL["table_stats"], {"relids": relids})} \
            if relids and not self.standby else {}
        # A queue whose figures failed before its table was resolved (a declared table locked
        # ACCESS EXCLUSIVE: reading its catalog facts times out too) is found on its table's locks
        # all the same, by the table's name (to_regclass takes no lock).
        unresolved = sorted({f.table for _, f in figures if f.relid is None and f.error is not None and is_relation_name(f.table)})
        named = {row["name"]: row["relid"] for row in conn.execute(QUEUES_SQL["relids"], {"tables": unresolved})
                 if row["relid"] is not None} if unresolved else {}
        on_table = [(f, f.relid if f.relid is not None else named.get(f.table)) for _, f in figures]
        # A table several queues share (Procrastinate's, River's, a job table's groups): the
        # sessions on its locks work it, for one of those queues or another.
        per_relid = Counter(relid for _, relid in on_table if relid is not None)
        on_locks = self._consumers(conn, sorted(per_relid), {relid for relid, n in per_relid.items() if n > 1})
        now = time.monotonic()
        return tuple(replace(self._queue_sample(source, f, stats.get(f.relid), now),
                             consumers=None if on_locks is None or relid is None else on_locks[0].get(relid, ()),
                             lockers=None if on_locks is None or relid is None else on_locks[1].get(relid, ()))
                     for (source, f), (_, relid) in zip(figures, on_table, strict=True))

    def _read_flows(self, conn: ProbeConnection, source: QueueSource, sampled: list[QueueFigures]) -> None:
        """Each of the source's queues' traffic since the last cycle, from the library's own
        records (probes/sources/flows.py). A reader that fails leaves its queues' rates to the
        tables' statistics, said in the probe's notes; the figures stand."""
        try:
            with contained(conn):
                self.flows.read(conn, source, sampled)
        except PROBE_FAILURES as exc:
            self._flow_notes.append(f"{source.label}: rates from its table's statistics: {describe_error(exc)}")

    def _consumers(self, conn: ProbeConnection, relids: list[int],
                   shared: set[int]) -> tuple[dict[int, tuple[Consumer, ...]], dict[int, tuple[Locker, ...]]] | None:
        """Each queue table's sessions on its locks (queues.sql's `consumers`), marked `shared` on
        a table several queues share, and those holding a lock there that stops its consumers
        (the lockers, prepared transactions too): None when they could not be read (said in the
        probe's notes; the figures stand)."""
        if not relids:
            return {}, {}
        try:
            with contained(conn):
                rows = conn.execute(QUEUES_SQL["consumers"], {"relids": relids}).fetchall()
        except PROBE_FAILURES as exc:
            self.notes["queues"] = "; ".join(filter(None, [self.notes.get("queues"), f"consumers: {describe_error(exc)}"]))
            return None
        found: dict[int, list[Consumer]] = {}
        lockers: dict[int, list[Locker]] = {}
        for row in rows:
            if row["holds"] is not None:
                lockers.setdefault(row["relid"], []).append(Locker(
                    pid=row["pid"], mode=row["holds"], relation=row["locked"], state=row["state"],
                    application=row["application_name"], xact_age_s=row["xact_age_s"], waiting=bool(row["waiting"]),
                    gid=row["gid"]))
            if row["pid"]:
                found.setdefault(row["relid"], []).append(Consumer(
                    pid=row["pid"], state=row["state"], application=row["application_name"],
                    for_s=float(row["for_s"]) if row["for_s"] is not None else None, waiting=bool(row["waiting"]),
                    shared=row["relid"] in shared))
        return ({relid: tuple(consumers) for relid, consumers in found.items()},
                {relid: tuple(held) for relid, held in lockers.items()})

    def _queue_sample(self, source: QueueSource, f: QueueFigures, st: DictRow | None, now: float) -> QueueSample:
        rates = self.rates.of_flow(source, f, now) if f.flow is not None else self.rates.of_statistics(source, f, st, now)
        enq, deq, failed, enqueued_total, dequeued_total, failed_total = rates
        estimated = dict(f.estimated)
        for figure in f.flow.estimated if f.flow is not None else ():  # a share of jobs whose queue is not known
            estimated[f"{figure}_per_s"] = None
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
            failed_per_s=failed,
            depth_is_estimate=f.depth_is_estimate,
            dead_tuples=st["n_dead_tup"] if st else None,
            live_tuples=st["n_live_tup"] if st else None,
            last_vacuum_at=_latest(st["last_vacuum"], st["last_autovacuum"]) if st else None,
            last_autovacuum_at=st["last_autovacuum"] if st else None,
            inserted_total=st["n_tup_ins"] if st else None,
            deleted_total=st["n_tup_del"] if st else None,
            enqueued_total=enqueued_total,
            dequeued_total=dequeued_total,
            failed_total=failed_total,
            rates_from=("records" if f.flow is not None else "statistics" if enq is not None or deq is not None else None),
            blocked=f.blocked,
            estimated=estimated,
            counting=tuple(f.counting),
            schema=f.schema,
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
                    for g in json_value(row["top_groups"])
                ),
            ),
        )

    # -- locks ---------------------------------------------------------------------------

    def locks(self, conn: ProbeConnection) -> LockPicture:
        """Blocked sessions, root blockers, prepared transactions, advisory locks and wait cycles
        (see probes/locks.py), in one statement: one round trip. Two rarer cases cost more, only
        while they last: a row shared by several lockers (a multixact: one statement reads its
        lockers) and a lock in another database (its relation named there, cached)."""
        # pg_locks and pg_blocking_pids are not read at one instant: a wait that ended in between
        # has no blockers left and is not reported.
        # Binary results: the server sends, and psycopg reads, each value without text formatting
        # and parsing (0.1-0.15 ms of the statement in a pile-up of 16, measured).
        rows = conn.execute(self._versioned(LOCKS_SQL["picture"]), {"pile_up": self.pile_up}, binary=True).fetchall()
        waiting_rows, others, granted, prepared, app_locks = picture_parts(rows)
        named = set().union(*(r["blocked_by"] for r in waiting_rows)) if waiting_rows else set()
        unread = named - others.keys() - {r["pid"] for r in waiting_rows} - {0}
        if unread:  # a blocker the statement did not find holding what its waiters wait for: rare
            found = conn.execute(self._versioned(LOCKS_SQL["sessions_of"]), {"pids": sorted(unread)}).fetchall()
            others.update({r["pid"]: r for r in found})
        by_prepared: dict[int, set[str]] = {}
        if prepared and any(0 in r["blocked_by"] for r in waiting_rows):
            by_prepared = prepared_blockers(waiting_rows, prepared, [g for g in granted if g["pid"] is None])
        notes = []
        if any(r["row_table_locks"] for r in waiting_rows):
            notes += self._row_lockers(conn, waiting_rows, others)
        here = self._server.database if self._server is not None else None
        if any(r["database"] != here and (r["relation_oid"] or r["row_relation_oid"]) for r in waiting_rows):
            notes += self.elsewhere.name(conn, waiting_rows, here)
        unread_ahead = sum(1 for r in waiting_rows if r["ahead_unread"])
        if unread_ahead:
            notes.append(f"a pile-up of {len(waiting_rows):,} waiters: {unread_ahead:,} of them listed with the sessions holding what "
                         "they wait for, not those they only queue behind (pg_blocking_pids for each would cost the server a time "
                         "that grows with the square of the pile-up)")
        if any(r["state"] is None for r in [*waiting_rows, *others.values()]):
            notes.append("queries and states of other roles' sessions hidden: grant pg_read_all_stats to see them")
        if notes:
            self.notes["locks"] = "; ".join(dict.fromkeys(notes))
        return self.lock_trees.build(waiting_rows, others, prepared, by_prepared, app_locks)

    def _row_lockers(self, conn: ProbeConnection, waiting_rows: list[dict], others: dict[int, dict]) -> list[str]:
        """Every locker of a row that several transactions lock (a multixact: three FOR SHARE, or
        FOR KEY SHARE and an UPDATE), for the waiters of rows that may be shared. The server makes
        such a waiter wait for one locker at a time, and pg_blocking_pids names only that one: the
        row's xmax, read by its ctid, is the multixact, and pg_get_multixact_members names the
        others, whose sessions join the picture. Sets each waiter's `multixact_holders` (or
        `holders_note`, why not); returns notes for the probe. One statement (a TID scan of one
        row) for a row that may be shared, a second when it is; only while such a wait lasts."""
        notes: list[str] = []
        waiters = {r["pid"] for r in waiting_rows}
        queued_exclusive = {r["relation_oid"] for r in waiting_rows if r["lock_type"] == "relation" and r["mode"] == "AccessExclusiveLock"}
        done: dict[tuple, tuple[list[int], str | None]] = {}
        for row in waiting_rows:
            if not may_be_shared(row, waiters):
                continue
            key = (row["row_relation_oid"], row["row_page"], row["row_tuple"], row["transactionid"])
            if key not in done:
                done[key] = self._read_row_lockers(conn, row, queued_exclusive, others)
            row["multixact_holders"], row["holders_note"] = done[key]
            if row["holders_note"]:
                notes.append(row["holders_note"])
        return notes

    def _read_row_lockers(self, conn: ProbeConnection, row: dict, queued_exclusive: set,
                          others: dict[int, dict]) -> tuple[list[int], str | None]:
        if row["row_relation_oid"] in queued_exclusive:
            # Reading the row takes ACCESS SHARE on its table, which would queue behind that request.
            return [], f"the other lockers of a row of {row['row_relation']} not read: an ACCESS EXCLUSIVE request is queued on it"
        try:
            with contained(conn):
                oid, now = row["row_relation_oid"], time.monotonic()
                if oid not in self._table_names or self._table_names[oid][0] < now:  # (a table renamed: a minute at most)
                    found_names = conn.execute(LOCKS_SQL["table_names"], {"oid": oid}).fetchone()
                    if found_names is None:
                        return [], None  # dropped since
                    if len(self._table_names) > 1000:
                        self._table_names.clear()
                    self._table_names[oid] = (now + 60.0, found_names["schema"], found_names["table"])
                _expires, schema, table = self._table_names[oid]
                statement = sql.SQL(LOCKS_SQL["row_xmax"]).format(table=sql.Identifier(schema, table))
                read = conn.execute(statement, {"ctid": f"({row['row_page']},{row['row_tuple']})"}).fetchone()
        except PROBE_FAILURES as exc:
            return [], f"the other lockers of a row of {row['row_relation']} not read: {describe_error(exc)}"
        if read is None or read["xmax"] in (row["transactionid"], "0"):
            return [], None  # locked by the transaction waited for alone (or gone): the server's blocker holds it
        try:
            with contained(conn):
                found = conn.execute(self._versioned(LOCKS_SQL["row_lockers"]), {"xmax": read["xmax"]}).fetchall()
        except PROBE_FAILURES:
            return [], None  # a plain transaction id is not a multixact (an xmax set since): nothing shares the row
        if row["transactionid"] not in {r["member"] for r in found}:
            return [], None  # not a multixact (or no longer the one waited on): the server's blocker is the holder
        wanted = row_strength(row["row_mode"])
        lockers = [r for r in found if r["pid"] is not None and row_locks_conflict(MULTIXACT_MODES.get(r["member_mode"]), wanted)]
        for r in lockers:
            if r["pid"] not in others:
                others[r["pid"]] = r
        return sorted({r["pid"] for r in lockers}), None

    # -- connections ---------------------------------------------------------------------

    def connections(self, conn: ProbeConnection) -> Connections:
        """Connections by state and application against max_connections (queuetop's own sessions
        counted: they take connections), the oldest transaction and what holds the xmin horizon
        back (never one of queuetop's own sessions). Where other roles' sessions are hidden from
        this role (no pg_read_all_stats), the oldest transaction is unknown, not this role's own
        oldest (`oldest_xact_unknown` says why), and so is the xmin horizon's holder when the
        server names a session the role cannot see (`xmin_holder_unknown`)."""
        rows = conn.execute(CONNECTIONS_SQL["connections"]).fetchall()
        settings = one(conn.execute(CONNECTIONS_SQL["max_connections"]))
        by_state: dict[str, int] = {}
        by_app: dict[str, int] = {}
        oldest = None
        hidden = 0
        for r in rows:
            state = r["state"] or "unknown"  # other roles' sessions without pg_read_all_stats
            app = r["application_name"] or ""
            if state == "idle in transaction" and app.startswith(APPLICATION_NAME):
                # A probe session between two statements of its own transaction (read-only: no
                # xid, no snapshot held): idle, not the culprit an idle transaction is.
                state = "idle"
            by_state[state] = by_state.get(state, 0) + 1
            by_app[app] = by_app.get(app, 0) + 1
            if app.startswith(APPLICATION_NAME):
                continue  # queuetop's own: never the oldest transaction
            if r["state"] is None:
                hidden += 1
            elif r["xact_age_s"] is not None and (oldest is None or r["xact_age_s"] > oldest["xact_age_s"]):
                oldest = r
        others = [r for r in rows if not (r["application_name"] or "").startswith(APPLICATION_NAME)]
        xmin = self.xmin_horizon_holder(conn, others)
        oldest_unknown = xmin_unknown = None
        if hidden:
            why = f"{hidden} other roles' session(s) hidden: grant pg_read_all_stats (or pg_monitor) to see them"
            oldest_unknown = why
            self.notes["connections"] = f"the oldest transaction unknown: {why}"
            if xmin is not None and xmin.get("hidden"):
                xmin_unknown = why
                self.notes["connections"] = f"the oldest transaction and the xmin horizon's holder unknown: {why}"
                xmin = None
        age_s, at_least = (xmin.get("age_s"), False) if xmin is not None else (None, False)
        if xmin is not None and age_s is None:
            age_s, at_least = self._horizon_age(xmin)
        return Connections(
            total=len(rows) + 1,  # and this probe's own session
            max=settings["max_connections"],
            usable=settings["max_connections"] - settings["reserved"],
            by_state=dict(sorted(by_state.items(), key=lambda kv: -kv[1])),
            by_application=dict(sorted(by_app.items(), key=lambda kv: -kv[1])),
            oldest_xact_age_s=oldest["xact_age_s"] if oldest and not hidden else None,
            oldest_xact_pid=oldest["pid"] if oldest and not hidden else None,
            oldest_xact_state=oldest["state"] if oldest and not hidden else None,
            xmin_holder_pid=xmin["pid"] if xmin else None,
            xmin_holder_age_xids=xmin["age_xids"] if xmin else None,
            xmin_holder_application=xmin["application_name"] if xmin else None,
            xmin_holder_kind=xmin["kind"] if xmin else None,
            xmin_holder_name=xmin["name"] if xmin else None,
            xmin_holder_client=xmin.get("client") if xmin else None,
            xmin_holder_age_s=float(age_s) if age_s is not None else None,
            xmin_holder_age_at_least=at_least,
            oldest_xact_unknown=oldest_unknown,
            xmin_holder_unknown=xmin_unknown,
        )

    def _horizon_age(self, holder: DictRow) -> tuple[float | None, bool]:
        """The age in time of a horizon the statement gives no time for (a standby's feedback, a
        slot): when the next transaction id was the horizon's, from the xid clock's history."""
        next_xid, age_xids = holder.get("next_xid"), holder.get("age_xids")
        if next_xid is None or age_xids is None:
            return None, False
        found = self.xid_clock.age(int(next_xid) - int(age_xids))
        return (found.seconds, found.at_least) if found is not None else (None, False)

    # -- replication ---------------------------------------------------------------------

    def replication(self, conn: ProbeConnection) -> Replication | None:
        """The standbys streaming from this server and its replication slots (replication.sql),
        on a primary and on a standby alike. Without pg_read_all_stats the server hides each
        standby's state, client and lags: they are None, `standbys_unknown` and the probe's note
        say why."""
        standbys = []
        hidden = 0
        for r in conn.execute(REPLICATION_SQL["standbys"]).fetchall():
            hidden += bool(r["hidden"])
            lags = [r["write_lag_s"], r["flush_lag_s"], r["replay_lag_s"]]
            if not r["hidden"] and r["replay_lag_bytes"] == 0:
                # Caught up, nothing new written: the server shows no lag (NULL) then; it is 0.
                lags = [0.0 if lag is None else lag for lag in lags]
            standbys.append(Standby(
                application=r["application_name"], client=r["client"], state=r["state"], sync_state=r["sync_state"],
                write_lag_s=lags[0], flush_lag_s=lags[1], replay_lag_s=lags[2],
                replay_lag_bytes=None if r["replay_lag_bytes"] is None else int(r["replay_lag_bytes"]), pid=r["pid"]))
        slots = tuple(
            ReplicationSlot(
                name=r["name"], type=r["type"], active=bool(r["active"]), active_pid=r["active_pid"],
                retained_wal_bytes=None if r["retained_wal_bytes"] is None else int(r["retained_wal_bytes"]),
                xmin_age=r["xmin_age"], catalog_xmin_age=r["catalog_xmin_age"], database=r["database"], plugin=r["plugin"],
                wal_status=r["wal_status"])
            for r in conn.execute(self._versioned(REPLICATION_SQL["slots"])).fetchall())
        unknown = None
        if hidden:
            unknown = (f"{hidden} standby(s)' state, address and lag hidden from this role: grant pg_read_all_stats "
                       "(or pg_monitor) to see them")
            self.notes["replication"] = unknown
        return Replication(standbys=tuple(standbys), slots=slots, standbys_unknown=unknown)

    # -- the server's figures ------------------------------------------------------------

    def server_stats(self, conn: ProbeConnection) -> ServerStats | None:
        """The whole server's figures (probes/serverstats.py): pg_stat_database's counters summed
        over every database, the WAL position, and every DATABASE_SIZE_EVERY_S the databases' size;
        the rates over the interval since this probe's previous read (None on the first)."""
        notes: list[str] = []
        stats = self.server_counters.read(conn, notes)
        if notes:
            self.notes["server_stats"] = "; ".join(notes)
        return stats

    # -- sessions ------------------------------------------------------------------------

    def connections_and_sessions(self, conn: ProbeConnection) -> ConnectionsPicture:
        """The connections probe as the sampler runs it: the connections' figures, then every
        session, the one that holds the xmin horizon flagged as the connections' figures name it
        (Connections.xmin_holder_pid: found once a cycle). When the sessions' statement fails the
        connections' figures stand: the sessions are unknown (the probe's `unread` is
        ("sessions",)) and its error says why."""
        connections = self.connections(conn)
        try:
            with contained(conn):
                sessions, total = self.sessions(conn)
            listed: SessionPicture | None = (flag_xmin_holder(sessions, connections.xmin_holder_pid), total)
        except PROBE_FAILURES as exc:
            self.errors["connections"] = f"sessions: {describe_error(exc)}"
            self.unread["connections"] = ("sessions",)
            listed = None
        said = [note for note in (self.notes.pop("connections", None), self.notes.pop("sessions", None)) if note]
        if said:
            self.notes["connections"] = "; ".join(said)
        return connections, listed

    def sessions(self, conn: ProbeConnection) -> SessionPicture:
        """Every session the role can see but this probe's (pg_activity's list), the oldest
        transaction first, at most SESSIONS_CAP, and how many there were: one statement
        (connections.sql's `sessions`), bounded by the number of backends. None is flagged as the
        xmin horizon's holder: connections_and_sessions flags it (flag_xmin_holder). (Other roles'
        sessions whose state privileges hide are the connections' note.)"""
        rows = conn.execute(self._sessions_query(), {"cap": SESSIONS_CAP, "query_chars": SESSION_QUERY_CHARS,
                                                     **self._sessions_parameters()}).fetchall()
        total = int(rows[0]["total"]) if rows else 0
        if total > len(rows):
            self.notes["sessions"] = f"{len(rows):,} of {total:,} sessions listed, the oldest transactions first"
        return tuple(
            SessionSample(
                pid=r["pid"], database=r["database"], user=r["usename"], application=r["application_name"], client=r["client"],
                backend_type=r["backend_type"], state=r["state"], xact_age_s=r["xact_age_s"], query_age_s=r["query_age_s"],
                wait_event_type=r["wait_event_type"], wait_event=r["wait_event"],
                blocked_by=tuple(json_value(r["blocked_by"]) or ()), leader_pid=r["leader_pid"], query=r["query"],
                query_is_cut=bool(r["query_is_cut"]), backend_start=r["backend_start"],
            )
            for r in rows
        ), total

    def _sessions_parameters(self) -> dict[str, object]:
        """The sessions statement's parameters but the cap and the query's length: past how many
        lock waiters it leaves their blockers to the locks probe's picture (compose)."""
        return {"pile_up": self.pile_up}

    def _sessions_query(self) -> sql.SQL | str:
        return sessions_statement(self._version_num)

    def xmin_horizon_holder(self, conn: ProbeConnection, sessions: list[DictRow]) -> DictRow | None:
        """What holds this database's xmin horizon back the most (kind, pid, name,
        application_name, client, age_xids, age_s, hidden, next_xid), as the server computes it
        (connections.sql's xmin_horizon): a session's transaction id or snapshot, a standby's
        feedback, a prepared transaction, a replication slot; never queuetop's own sessions.
        Each call reads the next transaction id into the xid clock too. `sessions`: the
        connections statement's rows but queuetop's own, for a dialect that finds it among them."""
        row: DictRow | None = conn.execute(CONNECTIONS_SQL["xmin_horizon"], {"own": APPLICATION_NAME}).fetchone()
        if row is None:
            return None
        if row["next_xid"] is not None:
            self.xid_clock.record(time.monotonic(), int(row["next_xid"]))
        return row if row["kind"] is not None else None


@cache
def sessions_statement(version_num: int) -> sql.SQL:
    """connections.sql's `sessions` for a server of `version_num`."""
    return sql.SQL(versioned(CONNECTIONS_SQL["sessions"], version_num))


def flag_xmin_holder(sessions: tuple[SessionSample, ...], holder_pid: int | None) -> tuple[SessionSample, ...]:
    """`sessions`, the one whose pid is `holder_pid` (Connections.xmin_holder_pid: the session
    that holds this database's xmin horizon back the most, None when no session does) flagged."""
    if holder_pid is None:
        return sessions
    return tuple(replace(s, xmin_holder=True) if s.pid == holder_pid else s for s in sessions)


def _latest(a: datetime | None, b: datetime | None) -> datetime | None:
    values = [v for v in (a, b) if v is not None]
    return max(values) if values else None


def json_value(value: Any) -> Any:
    """A column that is an array (or JSON decoded by psycopg) on PostgreSQL and JSON text on SQL
    Server, which has no arrays: as Python values either way."""
    return json.loads(value) if isinstance(value, str) else value
