"""A long-running service's link to the database (a worker pool, a relay, the compactor), told
once per change: one line when the database is lost, one when it answers again, however many
threads notice and whenever each does (docs/reliability.md: at most 2 lines per restart).

A restart cuts every session at once, but a thread notices only when it next uses its
connection: an idle worker may do so after the others are already back. Told naively, that
late notice was a second "lost" and a second "back" for the same restart (6 and 8 lines for 2
restarts). So a connection that was opened before the latest outage began and fails after that
outage was told over is the same outage noticed late: its thread goes down and comes back
without a word. Should its reconnection fail too, the database is really gone again, and that
is said.
"""

from __future__ import annotations

import logging
import threading
import time

from dbcore.errors import connection_cause


class ConnectionState:
    """Who among a service's threads cannot reach the database now ("worker 3", "listener"),
    and whether that has been said. `subject` opens each line ("queue q", "relay r1")."""

    def __init__(self, subject: str, log: logging.Logger, *, retrying: str = "retrying") -> None:
        self.subject = subject
        self._log = log
        self._retrying = retrying
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._down: set[str] = set()
        self._said_down = False  # "lost" was said and "back" not yet
        self._outage_began: float | None = None  # when the latest outage that was said began (monotonic)
        self._recoveries = 0  # how often a thread that was down got through again

    def lost(self, who: str, exc: BaseException, *, opened_at: float | None = None) -> None:
        """`who` cannot reach the database: its attempt to connect failed (`opened_at` None), or
        the connection it opened at `opened_at` (time.monotonic()) was lost."""
        with self._lock:
            self._down.add(who)
            late = opened_at is not None and self._outage_began is not None and opened_at < self._outage_began
            if not self._said_down and not late:
                self._said_down = True
                self._outage_began = time.monotonic()
                self._log.warning("%s: lost the database (%s); %s", self.subject, connection_cause(exc), self._retrying)

    def back(self, who: str) -> None:
        """`who` got through again."""
        with self._lock:
            if who not in self._down:
                return
            self._down.discard(who)
            self._recoveries += 1
            self._changed.notify_all()  # the others' back-offs end now: the database answers
            if not self._down and self._said_down:
                self._said_down = False
                began = self._outage_began if self._outage_began is not None else time.monotonic()
                self._log.warning("%s: the database answers again after %.1f s", self.subject, time.monotonic() - began)

    @property
    def down(self) -> bool:
        """Whether a loss was said and its recovery not yet."""
        with self._lock:
            return self._said_down

    def pause(self, seconds: float, stop: threading.Event) -> None:
        """Wait out a back-off: `seconds`, or less if another thread got through meanwhile or the
        service is stopping (its stop() calls wake())."""
        with self._changed:
            seen = self._recoveries
            self._changed.wait_for(lambda: stop.is_set() or self._recoveries != seen, timeout=seconds)

    def wake(self) -> None:
        with self._changed:
            self._changed.notify_all()
