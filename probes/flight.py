"""The flight recorder: the dashboard's last minutes of snapshots, every host's, kept in memory.

Each snapshot is kept as the gzip member a recording holds (`recorder.encode_member`): what is
counted against the bound is the memory it takes, and saving it (R) is writing those bytes, oldest
first, before what follows (`Recorder.write_member`). The members are made where the snapshot is
delivered, in its sampler's thread, never on the event loop; `add` and `taken` may be called
from any thread (one sampler thread per host, R on the event loop).

Two bounds, both from the config's [dashboard] table: age (`flight_minutes`, 15 by default) and
memory (`flight_mb`, 50 by default); the oldest members go first, whichever bound they break.
0 for either turns it off. Members of several snapshots would not compress better: a snapshot
of 500 queues and 5,000 sessions is 4.8 MB of JSON, far beyond deflate's 32 KB window, so the
previous one is out of its reach (bench tui measures it: docs/performance.md).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from .model import Snapshot
from .recorder import encode_member

DEFAULT_MINUTES = 15.0
DEFAULT_MB = 50.0
MB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Kept:
    """What the flight recorder holds now: how many snapshots, their bytes, how far back."""

    snapshots: int
    bytes: int
    span_s: float  # from the oldest kept to now (0 with none)


class FlightRecorder:
    """The last `minutes` of snapshots (at most `mb` megabytes of members), oldest first."""

    def __init__(self, *, minutes: float = DEFAULT_MINUTES, mb: float = DEFAULT_MB,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_age_s = minutes * 60
        self.max_bytes = int(mb * MB)
        self._clock = clock
        self._lock = threading.Lock()
        self._members: deque[tuple[float, bytes]] = deque()  # (when it was added, the member)
        self._bytes = 0
        self.evicted_by_bytes = 0  # members dropped to stay under the memory bound (not by age)

    @property
    def enabled(self) -> bool:
        return self.max_age_s > 0 and self.max_bytes > 0

    def add(self, snapshot: Snapshot) -> bytes | None:
        """Keep `snapshot` (compressed here, in the caller's thread); the member made, for a
        recording running meanwhile to write as it is (None when the recorder is off)."""
        if not self.enabled:
            return None
        member = encode_member(snapshot)
        self.keep(member)
        return member

    def keep(self, member: bytes) -> None:
        """Keep a member made earlier, then drop the oldest past either bound."""
        if not self.enabled:
            return
        now = self._clock()
        with self._lock:
            self._members.append((now, member))
            self._bytes += len(member)
            self._evict(now)

    def _evict(self, now: float) -> None:
        members = self._members
        while members and (members[0][0] < now - self.max_age_s or self._bytes > self.max_bytes):
            if members[0][0] >= now - self.max_age_s:
                self.evicted_by_bytes += 1
            self._bytes -= len(members.popleft()[1])

    def taken(self) -> tuple[list[bytes], Kept]:
        """The members kept now, oldest first, and what they amount to (they stay kept: a second
        R saves them again)."""
        with self._lock:
            kept = self._kept_now()
            return [member for _at, member in self._members], kept

    def kept(self) -> Kept:
        """What is kept now (the help and the notice say it)."""
        with self._lock:
            return self._kept_now()

    def _kept_now(self) -> Kept:
        """Past either bound dropped, what is kept (the caller holds the lock)."""
        now = self._clock()
        self._evict(now)
        span = now - self._members[0][0] if self._members else 0.0
        return Kept(snapshots=len(self._members), bytes=self._bytes, span_s=span)

    @property
    def bytes_bound_hit(self) -> bool:
        """Whether the memory bound, not the age, has dropped snapshots: fewer minutes are kept."""
        return self.evicted_by_bytes > 0

    def bound_note(self) -> str | None:
        """Where the memory bound, not the age, dropped snapshots: `the 50 MB bound keeps less than 15 min`."""
        return f"the {size_text(self.max_bytes)} bound keeps less than {self.max_age_s / 60:g} min" if self.bytes_bound_hit else None

    def describe(self) -> str:
        """The bounds in words, for the help's line for R: `the last 15 min (at most 50 MB)`."""
        if not self.enabled:
            return "no history is kept in memory (the config's [dashboard] flight_minutes or flight_mb is 0)"
        return f"the last {_minutes(self.max_age_s)} (at most {_mb(self.max_bytes)}) kept in memory"


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:g} min"


def _mb(size: float) -> str:
    return f"{size / MB:g} MB"


def span_text(seconds: float) -> str:
    """14m32s, 45s, 1h02m."""
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


def size_text(size: int) -> str:
    """31 MB, 412 KB: a figure whole, rounded as people read it."""
    if size >= MB:
        return f"{size / MB:.0f} MB" if size >= 10 * MB else f"{size / MB:.1f} MB"
    return f"{max(1, round(size / 1024)) if size else 0} KB"
