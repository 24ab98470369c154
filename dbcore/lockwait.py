"""A lock timeout for the engine's commands on PostgreSQL, and the one line that names the holder.

A command such as `queuetop engine enqueue` used to wait as long as another session held a lock
it needed (a `LOCK TABLE`, an open transaction that changed the same lease or ring row, the
schema's init lock), silently. Its session now runs with a lock timeout (dbcore/seam.py:
`lock_timeout_for`), and when the timeout ends the wait, the error says who held the lock: its
pid, application_name, state, and how long its transaction has been open.

Who held it is asked *while the statement waits*, from a second session, with
`pg_blocking_pids(pid)`: the server's own answer, for every kind of lock (a table's; a row's,
whose wait is on the transaction that changed the row; an advisory lock). Asking after the
timeout instead cannot be right: by then the statement waits for nothing, pg_locks no longer says
what it wanted, and a row lock's holder does not appear in pg_locks under the row's table at all.
So a `LockWatch` looks at a statement only once it has run for a while (`interval_s`, at most
0.5 s): a command whose statements are quick never opens the second session.

Through a connection pooler (dbcore/pooler.py) the session's pid as libpq knows it is one the
pooler made up: the watch follows the server's own, `pg_backend_pid()`. Where the pooler pins the
server session (session mode) the lock timeout is the session's, as on a direct connection (the
pooler's reset query, DISCARD ALL, takes it away when the client leaves). Where it does not
(transaction mode), a session-level setting would stay behind on a server session that other
clients get next, and each transaction may run on another one: so each transaction sets its own
(`set_config(..., true)`, SET LOCAL) in its first statement, which also says which server session
the pooler gave it; a statement sent in autocommit is sent inside a transaction of its own for
that (three round trips more: the command line's engine commands alone have a lock timeout).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg

from .database import Target, connect
from .errors import LockTimeout, QueuetopError, first_line
from .pooler import link_of
from .sqlfiles import Queries
from .text import inert

SESSION_SQL = Queries("dbcore", "session.sql")
WATCH_APPLICATION = "queuetop-cli:lock-watch"
# The watching session reads pg_locks and pg_stat_activity, and must never wait or linger itself.
WATCH_SETTINGS = {"default_transaction_read_only": "on", "statement_timeout": "2000", "lock_timeout": "100"}
# The same for a watching session a pooler does not pin, set in its transaction (SET LOCAL).
WATCH_LOCAL_SETTINGS = {"transaction_read_only": "on", "statement_timeout": "2000", "lock_timeout": "100"}
MAX_INTERVAL_S = 0.5
# pg_settings.source, as the error says where a lock timeout queuetop did not set came from.
SOURCES = {
    "client": "the DSN's options or PGOPTIONS",
    "user": "the role (ALTER ROLE ... SET lock_timeout)",
    "database": "the database (ALTER DATABASE ... SET lock_timeout)",
    "database user": "the role in this database (ALTER ROLE ... IN DATABASE ... SET lock_timeout)",
    "configuration file": "the server's configuration",
}


@dataclass(frozen=True, slots=True)
class Holder:
    pid: int
    application: str | None
    state: str | None  # None: hidden from this role (pg_read_all_stats shows it)
    xact_s: float | None
    waiting: bool  # itself waiting for a lock: queued ahead, or a holder held up in turn


@dataclass(frozen=True, slots=True)
class Wait:
    """What one statement was seen waiting for, and who held it up."""

    statement: int
    lock: str
    holders: tuple[Holder, ...]


def describe_lock(row: tuple[Any, ...]) -> str:
    locktype, relation, mode, row_of = row[5], row[6], row[7], row[8]
    if locktype in ("transactionid", "tuple"):
        table = row_of or relation
        return f"a row of {inert(table)}" if table else "a row"
    if locktype == "relation" and relation:
        return f"a {mode} on {inert(relation)}" if mode else f"a lock on {inert(relation)}"
    if locktype == "advisory":
        return "an advisory lock"
    return f"a {locktype} lock" if locktype else "a lock"


def describe_holder(holder: Holder) -> str:
    if holder.pid == 0:
        return "a prepared transaction (pid 0: see pg_prepared_xacts; COMMIT PREPARED or ROLLBACK PREPARED ends it)"
    facts = [f"application_name {inert(holder.application)!r}" if holder.application else "no application_name"]
    if holder.state is None:
        facts.append("its state hidden from this role (pg_read_all_stats shows it)")
    else:
        facts.append(holder.state)
        if holder.xact_s is not None:
            facts.append(f"transaction open {holder.xact_s:.1f} s")
    if holder.waiting:
        facts.append("itself waiting for a lock")
    return f"pid {holder.pid} ({', '.join(facts)})"


class LockWatch:
    """Watches one session (by its server's backend pid) while its statements run, and keeps what
    the latest statement that waited for a lock was seen waiting for (`error()` reads it).

    `per_transaction`: the session's server session is not pinned (a pooler in transaction mode):
    each statement's transaction sets `local_ms` as its lock timeout (None: the server's own
    applies) and says its server pid, which the watch then follows (`watching()`)."""

    def __init__(self, target: Target, conn: psycopg.Connection[Any], *, timeout: str, origin: str, timeout_s: float,
                 pid: int, per_transaction: bool = False, local_ms: str | None = None) -> None:
        self.target = target
        self.pid = pid  # the server's (pg_backend_pid()), not libpq's: a pooler makes that one up
        self.per_transaction = per_transaction
        self.local_ms = local_ms
        self.timeout = timeout  # as the server writes it: "5s"
        self.origin = origin  # where it comes from, for the error
        self.interval_s = min(MAX_INTERVAL_S, max(0.02, timeout_s / 5))
        self._conn = weakref.ref(conn)
        self._lock = threading.Lock()
        self._serial = 0
        self._running = 0  # the serial of the statement running, 0 when none
        self._started_at = 0.0
        self._seen: Wait | None = None
        self._failure: str | None = None  # why the holders could not be read
        self._thread: threading.Thread | None = None

    # -- the session's side (LockWatchedCursor) ------------------------------------------------

    @contextmanager
    def watching(self, conn: psycopg.Connection[Any]) -> Iterator[None]:
        """Around one statement of the watched session (its cursors', queues/producer.py's): the
        watch follows it, a lock timeout comes out as LockTimeout naming the holder, and on a
        session a pooler does not pin its transaction first sets its lock timeout and says its
        server pid (a statement in autocommit gets a transaction of its own for that)."""
        serial = self.begin()
        try:
            if not self.per_transaction:
                yield
            elif conn.autocommit and conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE:
                with conn.transaction():
                    self._start_transaction(conn)
                    yield
            else:
                self._start_transaction(conn)
                yield
        except psycopg.errors.LockNotAvailable as exc:
            raise self.error(serial, exc) from exc
        finally:
            self.end(serial)

    def _start_transaction(self, conn: psycopg.Connection[Any]) -> None:
        row = psycopg.Cursor(conn).execute(SESSION_SQL["transaction_lock_timeout"], {"ms": self.local_ms},
                                           prepare=False).fetchone()
        if row is not None:
            with self._lock:
                self.pid = int(row[1])

    def begin(self) -> int:
        with self._lock:
            self._serial += 1
            self._running, self._started_at = self._serial, time.monotonic()
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name=f"lock-watch:{self.pid}", daemon=True)
                self._thread.start()
            return self._serial

    def end(self, serial: int) -> None:
        with self._lock:
            if self._running == serial:
                self._running = 0

    def error(self, serial: int, exc: psycopg.Error) -> LockTimeout:
        """The lock timeout of statement `serial` as one line, naming who held the lock."""
        with self._lock:
            seen = self._seen if self._seen is not None and self._seen.statement == serial else None
            failure = self._failure
        waited = f"lock timeout: waited {self.timeout} ({self.origin})"
        if seen is None:
            context = exc.diag.context.strip().splitlines()[0] if exc.diag.context and exc.diag.context.strip() else ""
            why = f"it could not be read: {failure}" if failure else "the wait was not seen in time"
            return LockTimeout(f"{waited} for a lock another session holds{f' ({context})' if context else ''}; "
                               f"its holder is not known ({why}): `queuetop snapshot` shows the lock tree")
        first, others = seen.holders[0], len(seen.holders) - 1
        more = f", and {others} other session{'s' if others > 1 else ''}" if others else ""
        return LockTimeout(f"{waited} for {seen.lock}, held by {describe_holder(first)}{more}")

    # -- the watching thread -------------------------------------------------------------------

    def _watch(self) -> None:
        side: psycopg.Connection[Any] | None = None
        try:
            while True:
                time.sleep(self.interval_s)
                conn = self._conn()
                if conn is None or conn.closed:
                    return
                del conn
                with self._lock:
                    serial, started, pid = self._running, self._started_at, self.pid
                if not serial or time.monotonic() - started < self.interval_s:
                    if side is not None and not serial:  # nothing waits: the second session goes
                        side.close()
                        side = None
                    continue
                try:
                    if side is None or side.closed:
                        side = connect(self.target, application_name=WATCH_APPLICATION, connect_timeout=5,
                                       options=WATCH_SETTINGS)
                    if link_of(side).pinned:
                        rows = side.execute(SESSION_SQL["lock_holders"], {"pid": pid}).fetchall()
                    else:  # its settings are its transaction's (a pooler in transaction mode)
                        with side.transaction():
                            set_local(side, WATCH_LOCAL_SETTINGS)
                            rows = side.execute(SESSION_SQL["lock_holders"], {"pid": pid}).fetchall()
                except (psycopg.Error, QueuetopError) as exc:
                    with self._lock:
                        self._failure = first_line(exc)
                    if side is not None:
                        side.close()
                        side = None
                    continue
                if rows:
                    wait = Wait(serial, describe_lock(rows[0]), tuple(
                        Holder(pid=r[0], application=r[1], state=r[2], xact_s=r[3], waiting=bool(r[4])) for r in rows))
                    with self._lock:
                        if self._running == serial:
                            self._seen = wait
        finally:
            if side is not None:
                side.close()


# The watch of each session that has one, found by its cursors.
_WATCHES: weakref.WeakKeyDictionary[psycopg.Connection[Any], LockWatch] = weakref.WeakKeyDictionary()


def watch_of(conn: psycopg.Connection[Any]) -> LockWatch | None:
    """The session's LockWatch, for statements sent without its cursors (queues/producer.py)."""
    return _WATCHES.get(conn)


class LockWatchedCursor(psycopg.Cursor[Any]):
    """psycopg's cursor, whose statements the session's LockWatch follows; a lock timeout comes
    out as queuetop's LockTimeout (exit 1), naming the holder. Inside `transaction()` the block
    still rolls back, as for any exception."""

    def execute(self, query: Any, params: Any = None, *, prepare: bool | None = None,
                binary: bool | None = None) -> LockWatchedCursor:
        watch = _WATCHES.get(self.connection)
        if watch is None:
            return super().execute(query, params, prepare=prepare, binary=binary)
        with watch.watching(self.connection):
            return super().execute(query, params, prepare=prepare, binary=binary)

    def executemany(self, query: Any, params_seq: Any, *, returning: bool = False) -> None:
        watch = _WATCHES.get(self.connection)
        if watch is None:
            return super().executemany(query, params_seq, returning=returning)
        with watch.watching(self.connection):
            return super().executemany(query, params_seq, returning=returning)


def apply_lock_timeout(conn: psycopg.Connection[Any], target: Target, *, ms: int, given: bool) -> None:
    """Give `conn` its lock timeout (`ms`; `given`: QUEUETOP_LOCK_TIMEOUT's, which overrides the
    server's settings, else queuetop's default, which does not) and, unless the timeout in force
    is 0 (wait as long as it takes: someone chose that), a LockWatch. On a session a pooler does
    not pin, nothing is set here (it is looked at in a transaction rolled back): each transaction
    sets its own (LockWatch.watching)."""
    pinned = link_of(conn).pinned
    params = {"given": given, "ms": str(ms), "local": not pinned}
    if pinned:
        row = conn.execute(SESSION_SQL["lock_timeout"], params).fetchone()
        if not conn.autocommit:
            conn.commit()
    else:
        with conn.transaction(force_rollback=True):
            row = conn.execute(SESSION_SQL["lock_timeout"], params).fetchone()
    if row is None:
        return
    timeout, source, pid = str(row[0]), str(row[1]), int(row[2])
    timeout_s = _seconds(timeout)
    if not timeout_s:
        return
    if given:
        origin = "QUEUETOP_LOCK_TIMEOUT"
    elif source == "default":
        origin = "queuetop's default for its commands; QUEUETOP_LOCK_TIMEOUT=SECONDS changes it"
    else:
        origin = f"lock_timeout set by {SOURCES.get(source, f'its {source} setting')}"
    sets = given or source == "default"
    _WATCHES[conn] = LockWatch(target, conn, timeout=timeout, origin=origin, timeout_s=timeout_s, pid=pid,
                               per_transaction=not pinned, local_ms=str(ms) if sets and not pinned else None)
    conn.cursor_factory = LockWatchedCursor


def server_pid(conn: psycopg.Connection[Any]) -> int:
    """The server's pid of `conn`'s session: libpq's where nothing stands between, else asked
    (a pooler makes libpq's up; in transaction mode, the one of this transaction's server session)."""
    if not link_of(conn).pooled:
        return conn.info.backend_pid
    row = psycopg.Cursor(conn).execute(SESSION_SQL["server_pid"], prepare=False).fetchone()
    return int(row[0]) if row else conn.info.backend_pid


def set_local(conn: psycopg.Connection[Any], settings: dict[str, str]) -> None:
    """Inside a transaction: `settings` for the rest of it only (SET LOCAL), in one statement; what
    a session a pooler does not pin gets instead of session settings (a session-level SET would
    stay on a server session the pooler hands to other clients next)."""
    psycopg.Cursor(conn).execute(SESSION_SQL["local_settings"], {"names": list(settings), "values": list(settings.values())},
                                 prepare=False)


_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


def setting_seconds(setting: str) -> float | None:
    """A time setting as the server shows it ('5s', '500ms', '1min', '0', or a bare number of
    milliseconds) in seconds; None when it is not one."""
    text = setting.strip().lower()
    number = text.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = text[len(number):].strip() or "ms"
    if unit not in _UNITS:
        return None
    try:
        return float(number) * _UNITS[unit]
    except ValueError:
        return None


def _seconds(setting: str) -> float:
    return setting_seconds(setting) or 0.0
