"""How long ago a transaction id was handed out: the probes' clock of transaction ids.

A standby's hot_standby_feedback or a replication slot holds the xmin horizon at a transaction
id, with no transaction (and no start time) behind it: the server says how many ids old the
horizon is (age()), not how long. Each cycle the connections probe reads the next transaction id
(txid_snapshot_xmax(txid_current_snapshot()): reading it assigns none) and records it with the
monotonic time here; the horizon's age in time is when the next transaction id was the
horizon's, interpolated linearly between the two readings around it (so within one cycle, as
exact as the ids' pace was even between them). A horizon older than the first reading is at
least as old as the history is long (`at_least`); with a single reading nothing is known.

The history is kept for as long as the probes' object lives (the dashboard's, the exporter's),
at most MAX_READINGS readings: when full, every other one of its older half is dropped, so it
reaches further back, more coarsely, rather than forgetting the past. Nothing here touches the
database.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

MAX_READINGS = 2048


@dataclass(frozen=True, slots=True)
class XidAge:
    seconds: float
    at_least: bool  # the horizon is older than the history: at least `seconds`


class XidClock:
    def __init__(self) -> None:
        self._times: list[float] = []
        self._xids: list[int] = []

    def __len__(self) -> int:
        return len(self._times)

    def last(self) -> tuple[float, int] | None:
        """The last reading (monotonic time, next transaction id), if any."""
        return (self._times[-1], self._xids[-1]) if self._times else None

    def record(self, at: float, next_xid: int) -> None:
        """A reading: the next transaction id (64-bit) at monotonic time `at`. A reading that goes
        back (another server behind the same name, a restore) starts the history afresh."""
        if self._times and (at < self._times[-1] or next_xid < self._xids[-1]):
            self._times.clear()
            self._xids.clear()
        self._times.append(at)
        self._xids.append(next_xid)
        if len(self._times) > MAX_READINGS:
            half = len(self._times) // 2
            self._times[:half] = self._times[:half:2]
            self._xids[:half] = self._xids[:half:2]

    def age(self, xid: int) -> XidAge | None:
        """How long ago `xid` was the next transaction id, as of the last reading; None with no
        history to tell (a single reading, or none)."""
        if not self._times:
            return None
        now, latest = self._times[-1], self._xids[-1]
        if xid >= latest:
            return XidAge(0.0, False)  # as new as the last reading
        if xid < self._xids[0]:
            span = now - self._times[0]
            return XidAge(span, True) if span > 0 else None
        # The last reading at or below xid, and the next one, above it.
        i = bisect_right(self._xids, xid) - 1
        t0, x0 = self._times[i], self._xids[i]
        t1, x1 = self._times[i + 1], self._xids[i + 1]
        at = t0 + (t1 - t0) * (xid - x0) / (x1 - x0)
        return XidAge(max(0.0, now - at), False)
