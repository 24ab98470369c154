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
"""

from __future__ import annotations

import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any

import psycopg

from .database import Target, connect
from .errors import LockTimeout, QueuetopError, first_line
from .sqlfiles import Queries
from .text import inert

SESSION_SQL = Queries("dbcore", "session.sql")
WATCH_APPLICATION = "queuetop-cli:lock-watch"
# The watching session reads pg_locks and pg_stat_activity, and must never wait or linger itself.
WATCH_SETTINGS = {"default_transaction_read_only": "on", "statement_timeout": "2000", "lock_timeout": "100"}
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
    """Watches one session (by its backend pid) while its statements run, and keeps what the
    latest statement that waited for a lock was seen waiting for (`error()` reads it)."""

    def __init__(self, target: Target, conn: psycopg.Connection[Any], *, timeout: str, origin: str, timeout_s: float) -> None:
        self.target = target
        self.pid = conn.info.backend_pid
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
                    serial, started = self._running, self._started_at
                if not serial or time.monotonic() - started < self.interval_s:
                    if side is not None and not serial:  # nothing waits: the second session goes
                        side.close()
                        side = None
                    continue
                try:
                    if side is None or side.closed:
                        side = connect(self.target, application_name=WATCH_APPLICATION, connect_timeout=5,
                                       options=WATCH_SETTINGS)
                    rows = side.execute(SESSION_SQL["lock_holders"], {"pid": self.pid}).fetchall()
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
        serial = watch.begin()
        try:
            return super().execute(query, params, prepare=prepare, binary=binary)
        except psycopg.errors.LockNotAvailable as exc:
            raise watch.error(serial, exc) from exc
        finally:
            watch.end(serial)

    def executemany(self, query: Any, params_seq: Any, *, returning: bool = False) -> None:
        watch = _WATCHES.get(self.connection)
        if watch is None:
            return super().executemany(query, params_seq, returning=returning)
        serial = watch.begin()
        try:
            return super().executemany(query, params_seq, returning=returning)
        except psycopg.errors.LockNotAvailable as exc:
            raise watch.error(serial, exc) from exc
        finally:
            watch.end(serial)


def apply_lock_timeout(conn: psycopg.Connection[Any], target: Target, *, ms: int, given: bool) -> None:
    """Give `conn` its lock timeout (`ms`; `given`: QUEUETOP_LOCK_TIMEOUT's, which overrides the
    server's settings, else queuetop's default, which does not) and, unless the timeout in force
    is 0 (wait as long as it takes: someone chose that), a LockWatch."""
    row = conn.execute(SESSION_SQL["lock_timeout"], {"given": given, "ms": str(ms)}).fetchone()
    if not conn.autocommit:
        conn.commit()
    if row is None:
        return
    timeout, source = str(row[0]), str(row[1])
    timeout_s = _seconds(timeout)
    if not timeout_s:
        return
    if given:
        origin = "QUEUETOP_LOCK_TIMEOUT"
    elif source == "default":
        origin = "queuetop's default for its commands; QUEUETOP_LOCK_TIMEOUT=SECONDS changes it"
    else:
        origin = f"lock_timeout set by {SOURCES.get(source, f'its {source} setting')}"
    _WATCHES[conn] = LockWatch(target, conn, timeout=timeout, origin=origin, timeout_s=timeout_s)
    conn.cursor_factory = LockWatchedCursor


_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


def _seconds(setting: str) -> float:
    """A time setting as the server shows it ('5s', '500ms', '1min', '0') in seconds."""
    number = setting.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = setting[len(number):] or "ms"
    try:
        return float(number) * _UNITS.get(unit, 1e-3)
    except ValueError:
        return 0.0
