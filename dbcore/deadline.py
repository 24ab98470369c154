"""A deadline on a server's answer, kept on the client's side.

The server's statement_timeout bounds a statement the server runs, not one nobody runs: a
connection pooler (PgBouncer) holds a client's query in its wait queue while every server
connection of the pool is taken, as long as its query_wait_timeout (two minutes by default), and
libpq waits as long. `Watchdog.watch(conn, seconds)` bounds that wait: when no answer has come by
the deadline, it shuts the connection's socket down (on a duplicate of its descriptor: libpq's own
stays open for libpq to close), which makes the blocked read return at once with an error, and the
watch raises `NoAnswer` (a psycopg OperationalError: the connection is broken, and a pool discards
it). `cut(group)` ends every wait of a group now (a sampler that stops must not wait for its
probes' deadlines), and every later one at once.

One daemon thread watches every deadline of the process; a watch costs a lock and a set insertion
(the thread is woken only when the new deadline is the earliest).
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import psycopg

# What a wait that a pooler holds is taken to be (and the one line that says so).
POOL_WAIT = "waiting for a server connection (pool exhausted?)"


class NoAnswer(psycopg.OperationalError):
    """No answer came from the server (or the pooler in front of it) within a watch's deadline:
    the wait was ended and the connection is broken. `waited_s`: how long it waited."""

    def __init__(self, message: str, waited_s: float = 0.0, *, pooled: bool = True) -> None:
        super().__init__(message)
        self.waited_s = waited_s
        self.pooled = pooled  # through a pooler (or not known to be direct): a pool with nothing to give


def no_answer_text(seconds: float, where: str | None = None, *, pooled: bool = True) -> str:
    """The one line a wait with no answer says: `no answer from WHERE in N s: waiting for a server
    connection (pool exhausted?)` (through a pooler, or where none is known to be direct)."""
    source = f" from {where}" if where else ""
    why = POOL_WAIT if pooled else "the server does not answer"
    return f"no answer{source} in {seconds:.0f} s: {why}"


class Watch:
    """One wait for an answer on one connection."""

    __slots__ = ("conn", "deadline", "fired", "give_up", "group", "late", "started")

    def __init__(self, conn: Any, deadline: float, group: object | None, late: Callable[[], bool | None] | None = None,
                 give_up: float = math.inf) -> None:
        self.conn = conn
        self.started = time.monotonic()
        self.deadline = deadline
        self.group = group
        self.fired = False
        # Told once when the deadline passes, the wait going on until `give_up` (monotonic), where
        # it is ended: a pooler holding the query keeps it in its wait queue, and a client that
        # leaves that queue is not seen gone until a server connection frees up (PgBouncer stops
        # reading a waiting client), so ending each wait would leave one ghost client per deadline
        # counted among the pool's waiting clients.
        self.late = late
        self.give_up = give_up


def shut(conn: Any) -> None:
    """Shut a psycopg connection's socket down, both ways, so that a read blocked on it returns."""
    try:
        fd = conn.pgconn.socket
    except Exception:  # closed already: nothing blocks on it
        return
    try:
        dup = socket.socket(fileno=os.dup(fd))
    except OSError:
        return
    try:
        dup.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        dup.close()


class Watchdog:
    """The deadlines of every wait for an answer in the process (module-level WATCHDOG)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._watches: set[Watch] = set()
        self._wake_at = math.inf
        self._thread: threading.Thread | None = None
        self._cut: weakref.WeakSet[Any] = weakref.WeakSet()  # groups whose every wait ends at once

    @contextlib.contextmanager
    def watch(self, conn: Any, seconds: float, *, group: object | None = None, what: str | None = None,
              pooled: bool = True, late: Callable[[], bool | None] | None = None, give_up_s: float | None = None) -> Iterator[Watch]:
        """Bound the wait for `conn`'s next answer to `seconds` (the block ends the watch, or
        `answered`). When the deadline passed the socket is shut down and NoAnswer raised, saying
        `what` (a masked DSN) did not answer. With `late`, the deadline calls it (once, on the
        watchdog's thread: it must be quick) and the wait goes on until `give_up_s` from its start,
        unless it returns False."""
        now = time.monotonic()
        watch = Watch(conn, now + seconds, group, late, now + give_up_s if late is not None and give_up_s is not None
                      else (math.inf if late is not None else now + seconds))
        with self._cond:
            if group is not None and group in self._cut:
                watch.deadline = -math.inf
            self._watches.add(watch)
            if watch.deadline < self._wake_at:
                self._wake_at = watch.deadline
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="queuetop-answer-watchdog", daemon=True)
                    self._thread.start()
                self._cond.notify()
        try:
            yield watch
        except psycopg.OperationalError as exc:
            if watch.fired and not isinstance(exc, NoAnswer):
                waited = time.monotonic() - watch.started
                raise NoAnswer(no_answer_text(max(seconds, waited) if not self._was_cut(watch) else waited, what,
                                              pooled=pooled), waited, pooled=pooled) from None
            raise
        finally:
            with self._cond:
                self._watches.discard(watch)
        if watch.fired:  # the answer came as the deadline passed: the socket is shut all the same
            waited = time.monotonic() - watch.started
            raise NoAnswer(no_answer_text(seconds, what, pooled=pooled), waited, pooled=pooled)

    def _was_cut(self, watch: Watch) -> bool:
        return watch.group is not None and watch.group in self._cut

    def cut(self, group: object) -> None:
        """End now every wait of `group` still without an answer, and any it starts later."""
        with self._cond:
            self._cut.add(group)
            for watch in [w for w in self._watches if w.group is group]:
                self._fire(watch)

    def _fire(self, watch: Watch) -> None:
        watch.fired = True
        self._watches.discard(watch)
        shut(watch.conn)

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                for watch in [w for w in self._watches if w.deadline <= now]:
                    if watch.late is not None and watch.deadline < watch.give_up:
                        late, watch.late, watch.deadline = watch.late, None, watch.give_up
                        try:
                            waits_on = late() is not False  # False: end it now after all
                        except Exception:  # a caller's note must not stop the watchdog
                            waits_on = True
                        if waits_on and watch.deadline > now:
                            continue
                    self._fire(watch)
                self._wake_at = min((w.deadline for w in self._watches), default=math.inf)
                self._cond.wait(None if self._wake_at == math.inf else max(0.0, self._wake_at - now))


WATCHDOG = Watchdog()
