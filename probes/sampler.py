"""Running the probes: one cycle on demand (`queuetop snapshot`), or on a schedule (the dashboard).

The schedule is APScheduler's: one interval job per probe, `max_instances=1` so a probe never
overlaps itself, `coalesce=True` so runs missed while the database was slow collapse into one.
Probe sessions come from a small psycopg pool (at most two sessions on the monitored server),
each probe run in a probe transaction of its own (probes/session.py: read-only, its settings set
and checked in it). Whenever the probes that were running have all finished, the latest sample of
every probe is composed into one `Snapshot` and handed to the sink (the dashboard posts it to its
event loop; the sink must not block).

No wait for the server is unbounded: connecting has its timeout, and each probe transaction's
first answer a deadline (FIRST_ANSWER_S), past which the sampler is without an answer ("waiting
for a server connection (N s): pool exhausted?", N counting since the last answer) until one
comes. That probe waits on (up to GIVE_UP_S, then its connection is given up), the only one: the
others say so at once. A client that leaves PgBouncer's wait queue is not seen gone until a
server connection frees up, so ending every wait at its deadline would pile queuetop's ghosts
among the pool's waiting clients, the figure the Pooler panel shows. `stop` ends the waits under
way: it never waits for a deadline.
"""

from __future__ import annotations

import importlib
import logging
import select
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

import psycopg
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from dbcore.database import Target, connection_kwargs, hide_secrets, refuse_if_too_old, secrets_of
from dbcore.deadline import WATCHDOG, NoAnswer
from dbcore.dialect import dialect_named
from dbcore.errors import ConnectionFailed, Unanswered, connection_cause
from dbcore.pgversions import UnsupportedServer
from dbcore.pooler import UNDETERMINED, link_of, settle, startup_options_allowed

from .config import Config
from .diagnosis import Diagnoser
from .failures import PROBE_FAILURES, describe_error, describe_failure
from .locks import LockPicture
from .model import (
    BlockedSession,
    Connections,
    PoolerSample,
    ProbeStatus,
    Replication,
    ServerInfo,
    ServerStats,
    SessionSample,
    Snapshot,
)
from .pooler_console import POOLER, run_pooler
from .postgres import (
    APPLICATION_NAME,
    PROBE_METHODS,
    PROBE_NAMES,
    PROBE_SETTINGS,
    PostgresProbes,
    ProbeConnection,
    SessionPicture,
    open_probe_connection,
)
from .session import ProbeSettingsRefused, probe_transaction

log = logging.getLogger("queuetop.sampler")
# psycopg_pool warns on every failed attempt, over several lines, to stderr (under a dashboard,
# across the screen); the sampler says it once per change instead, and the snapshot and the
# status line say why the database is unreachable.
logging.getLogger("psycopg.pool").setLevel(logging.CRITICAL)
# A probe still running at its next turn is skipped, by design (a probe never overlaps itself):
# APScheduler warns of each skip, which under a host that is down is every turn of every probe.
logging.getLogger("apscheduler.scheduler").setLevel(logging.ERROR)
logging.getLogger("apscheduler.executors.default").setLevel(logging.ERROR)
Sink = Callable[[Snapshot], None]
T = TypeVar("T")
MAX_PROBE_SESSIONS = 2
# How long a probe waits on for its first answer past that answer's deadline (FIRST_ANSWER_S, when
# the sampler starts saying it has none) before its connection is given up: a wait a pooler holds
# ends when a server connection frees up (or at PgBouncer's query_wait_timeout, 120 s by default);
# a connection to a server that is gone (a network lost) is replaced after this.
GIVE_UP_S = 60.0
# The probe whose run also reads the server's role and a standby's replay lag (server.sql's
# `recovery`, a few function calls) again, on its connection: once a round.
RECOVERY_READ_WITH = "connections"


def run_probe(probes: PostgresProbes, name: str, conn: ProbeConnection, *, group: object | None = None,
              where: str | None = None) -> tuple[ProbeStatus, object]:
    """One probe, timed, in a probe transaction of its own (probes/session.py; or the one `conn` is
    in already); its failure is its status, not an exception: whatever it raised (a fault of
    queuetop's own too, said as an internal error; settings the server did not take, and the probe
    did not run), it is unknown with that reason and the other probes go on, in a snapshot, the
    dashboard and the exporter alike. No answer within the first answer's deadline (NoAnswer) and
    a lost connection are the caller's: raised."""
    started = time.perf_counter()
    for pending in (probes.notes, probes.errors, probes.unread):
        pending.pop(name, None)
    unread: tuple[str, ...] = ()
    notes = None
    try:
        with probe_transaction(conn, group=group, where=where):
            try:
                result = getattr(probes, PROBE_METHODS.get(name, name))(conn)
                error = probes.errors.pop(name, None)  # the part of it that failed (a queue source)
                notes = probes.notes.pop(name, None)  # what it says beside figures it read
                unread = probes.unread.pop(name, ())
            except NoAnswer:
                raise
            except PROBE_FAILURES as exc:
                result, error, unread = None, describe_error(exc), ("all",)
            except Exception as exc:
                log.debug("probe %s failed", name, exc_info=True)  # its status says why; the traceback is for --debug logs
                result, error, unread = None, describe_failure(exc), ("all",)
    except ProbeSettingsRefused as exc:
        result, error, unread = None, str(exc), ("all",)
    return ProbeStatus(elapsed_ms=(time.perf_counter() - started) * 1000, error=error, notes=notes, unread=unread), result


def compose(server: ServerInfo, results: dict[str, tuple[ProbeStatus, object]], extra: dict | None = None,
            host: str | None = None, *, sessions_in_order: bool = False) -> Snapshot:
    """The probes' results as one snapshot; `host`, the target's name among several, goes into its
    `extra` (Snapshot.host)."""

    def value(name: str, default: T) -> T:
        result = results.get(name)
        return default if result is None or result[1] is None else cast(T, result[1])

    blocked, blockers, prepared, app_locks, cycles = value("locks", LockPicture((), (), (), (), ()))
    connections, listed = value("connections", cast("tuple[Connections | None, SessionPicture | None]", (None, None)))
    sessions, sessions_total = listed if listed is not None else ((), None)  # unknown: no count either
    if blocked and any(s.wait_event_type == "Lock" and not s.blocked_by for s in sessions):
        sessions = with_blockers(sessions, blocked)
    return Snapshot(
        taken_at=datetime.now(UTC),
        server=server,
        probes={name: results[name][0] for name in (*PROBE_NAMES, POOLER) if name in results},
        queues=value("queues", ()),
        rings=value("rings", ()),
        leases=value("leases", ()),
        blocked=blocked,
        blockers=blockers,
        prepared_xacts=prepared,
        app_locks=app_locks,
        cycles=cycles,
        connections=connections,
        compaction=value("compaction", ()),
        replication=value("replication", cast("Replication | None", None)),
        pooler=value(POOLER, cast("PoolerSample | None", None)),
        server_stats=value("server_stats", cast("ServerStats | None", None)),
        sessions=sessions,
        sessions_total=sessions_total,
        sessions_in_order=sessions_in_order and listed is not None,
        extra={**(extra or {}), **({"host": host} if host is not None else {})},
    )


def with_blockers(sessions: tuple[SessionSample, ...], blocked: tuple[BlockedSession, ...]) -> tuple[SessionSample, ...]:
    """The sessions, those waiting on a lock whose blockers the sessions statement left unread (a
    pile-up: connections.sql's `sessions`) given the lock picture's (0 for a prepared transaction)."""
    picture = {b.pid: b for b in blocked}

    def blockers(b: BlockedSession) -> tuple[int, ...]:
        return (*b.blocked_by, *((0,) if b.blocked_by_prepared else ()))

    return tuple(replace(s, blocked_by=blockers(picture[s.pid])) if s.wait_event_type == "Lock" and not s.blocked_by and s.pid in picture
                 else s for s in sessions)


# The probes of each dialect, by module and class (SQL Server's are PostgreSQL's logic on its DMVs).
PROBES_BY_DIALECT = {"postgresql": ("probes.postgres", "PostgresProbes"), "mssql": ("probes.mssql", "MssqlProbes")}


def probes_for(target: Target, config: Config | None = None) -> PostgresProbes:
    """The probes of the target's dialect, loaded on first use."""
    module, name = PROBES_BY_DIALECT[target.dialect]
    cls: type[PostgresProbes] = getattr(importlib.import_module(module), name)
    return cls(config)


@contextmanager
def blocked_applications(target: Target) -> Iterator[Callable[[], list[str | None]]]:
    """One probe session for a caller that asks many times who is blocked (the contention
    scenario, which the engine runs without importing the probes): each call returns the
    application name of every blocked session, read by the same code as the Locks panel, in
    the target's dialect."""
    probes = probes_for(target)
    with open_probe_connection(target, application_name=f"{APPLICATION_NAME}:scenario") as conn:
        with probe_transaction(conn, where=target.masked):
            here = probes.server(conn).database

        def blocked() -> list[str | None]:
            # The lock views are the whole server's: only this database's sessions are the scenario's
            # (another run, or a test in a database of its own, may use the same application name).
            with probe_transaction(conn, where=target.masked):
                return [session.application for session in probes.locks(conn)[0] if session.database in (None, here)]

        yield blocked


def run_cycle(target: Target, config: Config | None = None, *, probes: PostgresProbes | None = None,
              conn: ProbeConnection | None = None, host: str | None = None, diagnoser: Diagnoser | None = None) -> Snapshot:
    """Every probe once, in turn, on one probe session (opened here unless given). `host`: the
    target's name among several, in the snapshot's `host`. The queues' verdicts are judged by
    `diagnoser` (a fresh one: from this sample alone), which keeps the samples it has seen."""
    probes = probes or probes_for(target, config)
    session = conn or open_probe_connection(target)
    try:
        try:
            first, *rest = PROBE_NAMES
            # The server's facts in the first probe's transaction (no round trip of their own).
            with probe_transaction(session, where=target.masked):
                server = probes.server(session, label=target.masked)
                results = {first: run_probe(probes, first, session)}
            results.update((name, run_probe(probes, name, session, where=target.masked)) for name in rest)
        except NoAnswer as exc:  # a pooler with no server connection to give: said in one line (exit 2)
            raise Unanswered(str(exc)) from None
        if target.pgbouncer is not None:  # its console, on a connection of its own, just after the sessions were read
            results[POOLER] = run_pooler(target.pgbouncer, target)
    finally:
        if conn is None:
            session.close()
    snapshot = compose(server, results, {"connected": True}, host, sessions_in_order=probes.SESSIONS_IN_ORDER)
    try:
        return (diagnoser or Diagnoser()).diagnose(snapshot)
    except Exception as exc:  # a verdict that cannot be judged must not stop the figures (as Sampler._emit)
        log.warning("queue verdicts failed: %s", describe_failure(exc))
        log.debug("queue verdicts failed", exc_info=True)
        return snapshot



PooledConnection = TypeVar("PooledConnection", bound="psycopg.Connection[Any]")


class ExplainingPool(ConnectionPool[PooledConnection]):
    """A pool that remembers why its last attempt to connect failed (password refused, too many
    clients, connection refused), so a disconnect can say so instead of the pool's timeout."""

    last_connect_error: str | None = None

    def _connect(self, timeout: float | None = None) -> PooledConnection:  # psycopg_pool's one place that opens a connection
        try:
            conn = super()._connect(timeout)
        except Exception as exc:
            # libpq does not echo a password today; the reason goes into snapshots and recordings,
            # so it is scrubbed of the DSN's secrets all the same.
            self.last_connect_error = hide_secrets(connection_cause(exc), secrets_of(str(self.conninfo)))
            try:
                refuse_if_too_old(str(self.conninfo), exc)  # PostgreSQL 11 refuses the probes' settings: say why
            except UnsupportedServer as too_old:
                self.last_connect_error = str(too_old)
            raise
        self.last_connect_error = None
        return conn

def still_open(conn: ProbeConnection) -> None:
    """The pool's check of a connection it gives out, without a round trip (a query would take a
    server connection from a pooler, and wait for one when its pool has none): a session sitting
    in the pool is sent nothing but its end (the server's FATAL as it shuts down or terminates it,
    a pooler's close), so anything readable on its socket means it is gone. A connection lost
    silently is found by the probe transaction's first answer (its deadline)."""
    if conn.closed or conn.broken or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise psycopg.OperationalError("the probe session is closed")
    fd = conn.pgconn.socket
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        readable = bool(poller.poll(0))
    else:  # (no poll: Windows)
        readable = bool(select.select([fd], [], [], 0)[0])
    if readable:
        conn.close()  # (closed: the pool discards it and opens another, rather than giving it out again)
        raise psycopg.OperationalError("the probe session was sent something while idle: its end")


class SessionPerUse:
    """Probe sessions for a dialect without a psycopg pool (SQL Server): a session opened for
    each probe run and closed after it. The driver's own pool (SQLAlchemy's) keeps the network
    connections, so opening costs the session's setup statement, not a login. Same surface as
    ExplainingPool, as far as the sampler uses it."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.last_connect_error: str | None = None

    def open(self, wait: bool = False) -> None:
        pass

    def close(self, timeout: float | None = None) -> None:
        pass

    @contextmanager
    def connection(self, timeout: float | None = None) -> Iterator[ProbeConnection]:
        try:
            session = open_probe_connection(self.target)
        except ConnectionFailed as exc:
            self.last_connect_error = str(exc).removeprefix(f"cannot connect to {self.target.masked}: ")
            raise
        self.last_connect_error = None
        try:
            yield session
        finally:
            session.close()


def unknown_server(target: Target) -> ServerInfo:
    """What is known of a server never reached: its dialect and its (masked) DSN."""
    return ServerInfo(dialect=target.dialect, version=None, database=None, label=target.masked)


def unreachable_status(reason: str) -> ProbeStatus:
    """A probe's status when there is no connection to run it on."""
    return ProbeStatus(elapsed_ms=0.0, error=f"cannot reach the database: {reason}")


def unreachable_snapshot(target: Target, reason: str, host: str | None = None) -> Snapshot:
    """A snapshot of a database that could not be reached: every probe says why."""
    return compose(unknown_server(target), dict.fromkeys(PROBE_NAMES, (unreachable_status(reason), None)),
                   {"connected": False, "connection_error": reason}, host)


def stop_all(sources: Iterable[Any]) -> None:
    """Stop samplers (anything with `stop()`) at once: each waits for its running probes and
    closes its pool, and several hosts that are down must not add up their timeouts."""
    stoppers = [threading.Thread(target=source.stop, daemon=True) for source in sources]
    for stopper in stoppers:
        stopper.start()
    for stopper in stoppers:
        stopper.join(15)


class Sampler:
    """The probes on a schedule, feeding complete snapshots to `sink`."""

    def __init__(self, target: Target, sink: Sink, config: Config | None = None, *, interval_s: float | None = None,
                 host: str | None = None) -> None:
        self.target = target
        self.host = host  # its name among several targets: each snapshot says which it is
        self.sink = sink
        self.config = config or Config()
        self.interval_s = interval_s or self.config.interval_s
        self.probes = probes_for(target, self.config)
        # The probes it runs: the database's, and the pooler probe where a PgBouncer is given.
        self.names: tuple[str, ...] = (*PROBE_NAMES, POOLER) if target.pgbouncer is not None else PROBE_NAMES
        self._diagnoser = Diagnoser()  # the queues' verdicts, over the samples of a window
        self._diagnosing = threading.Lock()
        self._results: dict[str, tuple[ProbeStatus, object]] = {}
        self._server: ServerInfo | None = None
        self._running = 0
        self._last_emit = 0.0
        self._fresh: set[str] = set()  # the probes run since the last snapshot
        self._lock = threading.Lock()
        self._connected = False
        self._last_error: str | None = None
        # The last answer from the server (monotonic; the start until one came), and since when no
        # answer comes (a pooler holding the probes' queries: pool exhausted?), with whether a probe
        # is waiting for one now: while one is, the others do not wait too but say so at once.
        self._answered_at = time.monotonic()
        self._unanswered_since: float | None = None
        self._unanswered_pooled = True
        self._scout: str | None = None
        self._stopping = False
        # A driver that pools its own connections (SQLAlchemy's, for SQL Server) gets a session per
        # probe run; psycopg's connections come from a psycopg pool.
        driver_pools = dialect_named(target.dialect).capabilities.driver_pools
        self._pool: ExplainingPool[Any] | SessionPerUse = SessionPerUse(target) if driver_pools else ExplainingPool(
            target.conninfo,
            min_size=1,
            max_size=MAX_PROBE_SESSIONS,
            open=False,
            timeout=5.0,
            reconnect_timeout=365 * 24 * 3600.0,  # keep trying: the database may come back
            check=still_open,
            configure=self._configure,
            connection_class=ProbeConnection,
            kwargs={
                "autocommit": True,
                "row_factory": dict_row,
                # The settings at start-up only where the server is known to be reached directly
                # (a stock PgBouncer refuses libpq's `options`); each probe transaction sets them
                # all the same, and checks them (probes/session.py).
                **connection_kwargs(APPLICATION_NAME, connect_timeout=5, conninfo=target.conninfo,
                                    options=PROBE_SETTINGS if startup_options_allowed(target) else None),
            },
            name="queuetop-probes",
        )
        self._scheduler = BackgroundScheduler(
            # The pooler probe's thread of its own: a console slow to answer delays no probe.
            executors={"default": ThreadPoolExecutor(MAX_PROBE_SESSIONS), "pooler": ThreadPoolExecutor(1)},
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
            timezone=UTC,
        )

    # -- control --------------------------------------------------------------------------

    def start(self) -> None:
        self._answered_at = time.monotonic()
        self._pool.open(wait=False)
        for name in self.names:
            self._scheduler.add_job(
                self._run, "interval", args=(name,), id=name, name=f"probe {name}",
                seconds=self.interval_s, next_run_time=datetime.now(UTC), executor="pooler" if name == POOLER else "default",
            )
        self._scheduler.start()

    def stop(self) -> None:
        # A probe waiting for a first answer that may never come (a pooler with no server
        # connection to give) stops waiting now: the scheduler's threads end at once.
        self._stopping = True
        WATCHDOG.cut(self)
        if self._scheduler.running:
            self._scheduler.shutdown(wait=True)
        self._pool.close(timeout=1.0)  # a connection attempt still under way is left to its connect_timeout

    def _configure(self, conn: ProbeConnection) -> None:
        """A new pooled probe connection: what stands between it and its server session
        (dbcore/pooler.py), not asked if not known (the first probe transaction's round trip reads
        it): a query here would wait, unbounded by the pool, for a pooler's server connection.
        No session settings: each probe transaction sets its own."""
        settle(conn, self.target, None, ask=False)

    def set_interval(self, seconds: float) -> None:
        self.interval_s = seconds
        for name in self.names:
            self._scheduler.reschedule_job(name, trigger="interval", seconds=seconds)

    def pause(self) -> None:
        self._scheduler.pause()

    def resume(self) -> None:
        self._scheduler.resume()

    def refresh_now(self) -> None:
        """Run every probe now (a probe already running is not started twice)."""
        now = datetime.now(UTC)
        for name in self.names:
            job = self._scheduler.get_job(name)
            if job is not None:
                job.modify(next_run_time=now)

    # -- jobs -----------------------------------------------------------------------------

    def _run(self, name: str) -> None:
        if name == POOLER:
            self._run_pooler()
            return
        with self._lock:
            self._running += 1
            # While no answer comes, one probe at a time waits for one; the others say so at once.
            waiting = self._unanswered_since is not None and self._scout is not None
            if self._unanswered_since is not None and self._scout is None:
                self._scout = name
        try:
            if self._stopping:
                return
            if waiting:
                with self._lock:
                    self._last_error = reason = self._no_answer_reason()
                    self._results[name] = (unreachable_status(reason), None)
                return
            try:
                # Once the database is known to be down, the other probes fail fast.
                with self._pool.connection(timeout=5.0 if self._connected else 0.5) as conn, \
                        probe_transaction(conn, group=self, where=self.target.masked, late=lambda: self._late(name, conn),
                                          give_up_s=GIVE_UP_S):
                    if self._server is None:
                        self._server = self.probes.server(conn, label=self.target.masked)
                    elif name == RECOVERY_READ_WITH:  # once a round: a standby's lag moves, a standby may be promoted
                        self._server = self.probes.recovery(conn, self._server)
                    result = run_probe(self.probes, name, conn)
                if not self._connected and self._last_error is not None:
                    log.warning("the database answers again")
                self._connected, self._last_error = True, None
                self._answered_at, self._unanswered_since = time.monotonic(), None
            except NoAnswer as exc:  # connected, but nothing answers: a pooler with no server connection to give
                result = self._unanswered(exc.pooled)
            except PoolTimeout as exc:
                if self._unanswered_since is not None and not self._pool.last_connect_error:
                    result = self._unanswered(self._unanswered_pooled)  # the broken connections' replacements not made yet
                else:
                    result = self._lost(exc)
            except (psycopg.OperationalError, ConnectionFailed, UnsupportedServer) as exc:
                result = self._lost(exc)
            except Exception as exc:  # anything else (the server's own probe refused): this probe unknown, the round goes on
                log.debug("probe %s failed", name, exc_info=True)
                result = (ProbeStatus(elapsed_ms=0.0, error=describe_failure(exc), unread=("all",)), None)
            with self._lock:
                self._results[name] = result
        finally:
            with self._lock:
                if self._scout == name:
                    self._scout = None
            self._finished(name)

    def _lost(self, exc: Exception) -> tuple[ProbeStatus, None]:
        """No connection to run a probe on: the database is down, refuses, or is too old."""
        was_connected, self._connected = self._connected, False
        self._unanswered_since = None  # (an answer that does not come is another story: _unanswered)
        # The pool's own timeout says only "couldn't get a connection after 0.50 sec";
        # the reason is what its last attempt to connect was told.
        # A server too old is a host the probes cannot use: shown as one that is down, with its reason.
        cause = str(exc) if isinstance(exc, UnsupportedServer) else (
            self._pool.last_connect_error if isinstance(exc, (PoolTimeout, ConnectionFailed)) else None)
        reason = cause or hide_secrets(connection_cause(exc), secrets_of(self.target.conninfo))
        if was_connected or reason != self._last_error:  # one line per change, not per probe
            log.warning("lost the database: %s; retrying", reason)
        self._last_error = reason
        return unreachable_status(reason), None

    def _late(self, name: str, conn: ProbeConnection) -> bool:
        """The probe `name` has waited its first answer's deadline out (on the watchdog's thread:
        only flags): the sampler is without an answer from now, and this probe and every one not
        run yet say so. The first probe late waits on for its answer (True), the only one: another
        late meanwhile ends its wait (False), so that a probe thread stays free to say the wait
        each round, and queuetop keeps one client in the pooler's wait queue, not one per deadline."""
        link = link_of(conn)
        status, _ = self._unanswered(link.pooled or link is UNDETERMINED)
        with self._lock:
            self._results[name] = (status, None)
            if self._scout is None or self._scout == name:
                self._scout = name
                return True
            return False

    def _unanswered(self, pooled: bool) -> tuple[ProbeStatus, None]:
        """A probe's wait for its first answer ended with none: the sampler is without an answer
        (disconnected, the reason counting the seconds), and every probe that has not run yet says
        so too, so that the snapshot saying it is out at once."""
        with self._lock:
            self._connected = False
            self._unanswered_pooled = pooled
            reason = self._no_answer_reason()
            if self._unanswered_since is None:  # one line when it starts, not one per probe
                self._unanswered_since = time.monotonic()
                log.warning("no answer from the database: %s", reason)
            self._last_error = reason
            status = unreachable_status(reason)
            for other in PROBE_NAMES:  # (not the pooler probe: its console answers on a connection of its own)
                self._results.setdefault(other, (status, None))
        return status, None

    def _no_answer_reason(self) -> str:
        """How long the sampler has been without an answer, and what it takes that to be."""
        waited = time.monotonic() - self._answered_at
        if self._unanswered_pooled:
            return f"waiting for a server connection ({waited:.0f} s): pool exhausted?"
        return f"no answer from the server ({waited:.0f} s)"

    def _run_pooler(self) -> None:
        """The pooler probe: PgBouncer's admin console on a connection of its own
        (probes/pooler_console.py), never one of the probe pool's: a console that hangs holds no
        probe session, and a database that is down, or a pool with no connection left, stops it not."""
        assert self.target.pgbouncer is not None
        with self._lock:
            self._running += 1
        try:
            result = run_pooler(self.target.pgbouncer, self.target)
            with self._lock:
                self._results[POOLER] = result
        finally:
            self._finished(POOLER)

    def _finished(self, name: str) -> None:
        """A probe ended: the snapshot of the round, once every probe has run since the last one."""
        with self._lock:
            self._running -= 1
            self._fresh.add(name)
            complete = all(p in self._results for p in self.names)
            # Probes due together are reported together: one snapshot once every probe has
            # run since the last one (the scheduler starts them one after another, and a fast
            # one may end before the last one starts: "none running" is no sign of a round's
            # end; emitting then and again at its end wrote two snapshots 10 ms apart). When
            # a round never completes (a probe slower than the interval is skipped), still a
            # snapshot every interval and a half, with what the others read.
            overdue = time.monotonic() - self._last_emit >= 1.5 * self.interval_s
            ready = complete and (self._fresh.issuperset(self.names) or overdue)
            if ready:
                self._last_emit = time.monotonic()
                self._fresh.clear()
            results = dict(self._results)
        if ready:
            self._emit(results)

    def _emit(self, results: dict[str, tuple[ProbeStatus, object]]) -> None:
        server = self._server or unknown_server(self.target)
        snapshot = compose(server, results, {"connected": self._connected, "connection_error": self._last_error}, self.host,
                           sessions_in_order=self.probes.SESSIONS_IN_ORDER)
        try:
            with self._diagnosing:  # two probes that finish together may emit together
                snapshot = self._diagnoser.diagnose(snapshot)
        except Exception:  # a verdict that cannot be judged must not stop the figures
            log.exception("queue verdicts failed")
        try:
            self.sink(snapshot)
        except Exception:  # a failing sink must not stop the probes
            log.exception("snapshot sink failed")
