"""A worker pool's parts that are not its threads: its options, its summary, the waker idle
workers sleep in, and the back-off after a lost database (worker.py runs the threads;
processes.py spreads them over processes)."""

from __future__ import annotations

import random
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from dbcore.errors import UsageError

MODES = ("claim", "hold-transaction")
UNTIL_EMPTY_POLL_S = 0.2  # when draining, other sessions' commits (no notification) end the wait
# A lost database is retried for as long as the pool runs: back-off from 0.5 s, doubling, capped
# at 10 s, with jitter so that many workers do not knock all at once. The first thread that gets
# through wakes the others, so a pool resumes within one capped back-off of the database's return.
RECONNECT_FIRST_S = 0.5
RECONNECT_CAP_S = 10.0


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def on_stop_signals(stop: Callable[[], None]) -> Callable[[], None]:
    """SIGINT and SIGTERM call `stop` (in the main thread only: elsewhere nothing is installed);
    returns what puts the previous handlers back."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda *_: stop())

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore


def reconnect_delay(failures: int) -> float:
    """How long to wait after `failures` failed attempts in a row (1, 2, ...)."""
    return min(RECONNECT_CAP_S, RECONNECT_FIRST_S * 2 ** (failures - 1)) * random.uniform(0.8, 1.2)


@dataclass(slots=True)
class WorkSummary:
    processed: int = 0
    retried: int = 0
    dead: int = 0
    stale_acks: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, *, processed: int = 0, retried: int = 0, dead: int = 0, stale_acks: int = 0) -> None:
        with self._lock:
            self.processed += processed
            self.retried += retried
            self.dead += dead
            self.stale_acks += stale_acks

    def as_dict(self) -> dict[str, int]:
        with self._lock:
            return {
                "processed": self.processed,
                "retried": self.retried,
                "dead": self.dead,
                "stale_acks": self.stale_acks,
            }


class Waker:
    """Idle workers sleep here. `wake_all` (a notification, or a full claim that suggests more
    work) releases everyone; `wake_one` (the poll tick) releases a single worker."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._generation = 0
        self._tickets = 0
        self._stopped = False

    def generation(self) -> int:
        with self._cond:
            return self._generation

    def wake_all(self) -> None:
        with self._cond:
            self._generation += 1
            self._cond.notify_all()

    def wake_one(self) -> None:
        with self._cond:
            self._tickets = 1  # ticks do not pile up while everyone is busy
            self._cond.notify(1)

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def wait(self, seen_generation: int, timeout: float | None = None) -> None:
        with self._cond:
            self._cond.wait_for(
                lambda: self._stopped or self._generation != seen_generation or self._tickets > 0, timeout
            )
            if self._tickets > 0 and self._generation == seen_generation and not self._stopped:
                self._tickets -= 1


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkOptions:
    workers: int = 1
    processes: int = 1  # the workers spread over this many processes (queues/processes.py)
    mode: str = "claim"
    max_attempts: int = 5
    visibility_s: float = 30.0
    batch: int = 1
    until_empty: bool = False
    duration_s: float | None = None
    poll_interval_s: float = 5.0
    retry_delay_s: float = 0.0  # back-off before a failed message is retried (doubles per attempt)
    # Claim mode: claim the next messages (with the ack of the last) before handling those in hand,
    # so that the server's work overlaps the handler's (see _prefetch_loop).
    prefetch: bool = False

    def validate(self) -> WorkOptions:
        if self.mode not in MODES:
            raise UsageError(f"invalid mode {self.mode!r}: use claim or hold-transaction")
        if not 1 <= self.workers <= 256:
            raise UsageError("--workers must be between 1 and 256")
        if not 1 <= self.processes <= self.workers:
            raise UsageError(f"--processes must be between 1 and --workers ({self.workers})")
        if self.max_attempts < 1:
            raise UsageError("--max-attempts must be at least 1")
        if self.visibility_s <= 0:
            raise UsageError("--visibility must be positive")
        if not 1 <= self.batch <= 10_000:
            raise UsageError("--batch must be between 1 and 10000")
        if self.duration_s is not None and self.duration_s < 0:
            raise UsageError("--duration must not be negative")
        if self.poll_interval_s <= 0:
            raise UsageError("--poll-interval must be positive")
        if self.retry_delay_s < 0:
            raise UsageError("--retry-delay must not be negative")
        if self.prefetch and self.mode != "claim":
            raise UsageError("--prefetch is for claim mode (hold-transaction holds its messages in an open transaction)")
        return self
