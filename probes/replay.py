"""Playing a recording back: `ReplayClock`, a recorded clock whose position is a time of the
recording, advanced at `speed` times real time while playing, moved by seek and step; each
host's sink gets the latest snapshot taken at or before the position (or, before the host's
first one, a gap snapshot saying when it begins). `ReplaySource` is one host's view of it, with
the dashboard's SnapshotSource surface. Nothing here touches a database.

probes/recording.py re-exports these names.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from dbcore.text import inert

from .model import ServerInfo, Snapshot, utc_text
from .readback import Recording, Track

log = logging.getLogger("queuetop.recording")
SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
_GAP = -1  # what a host shows before its first recorded snapshot
GAP_KEY = "replay_first_at"  # in a gap snapshot's extra: when the host's first snapshot was taken


def gap_snapshot(track: Track, when: datetime) -> Snapshot:
    """What a host's tab shows at a time before its first recorded snapshot: nothing sampled (no
    probe ran, so no panel keeps figures), and when its recording begins."""
    try:
        server = track.snapshot(0).server
    except (ValueError, TypeError, KeyError):  # a damaged first line: the server is not known
        server = ServerInfo(dialect="unknown", version=None, database=None)
    return Snapshot(taken_at=when, server=server, probes={},
                    extra={"host": track.host, GAP_KEY: utc_text(track.times[0])})


def first_recorded_at(snapshot: Snapshot) -> str | None:
    """When the host's recording begins, if `snapshot` is a gap before it (gap_snapshot)."""
    value = snapshot.extra.get(GAP_KEY)
    return str(value) if value is not None else None


class ReplayClock:
    """The recorded clock and what it shows: each host's sink gets the snapshot in force at the
    position whenever that changes (played, sought, stepped)."""

    TICK_S = 0.05

    def __init__(self, recording: Recording, *, speed: float = 1.0, playing: bool = True) -> None:
        self.recording = recording
        self.position = recording.start
        self.speed = speed
        self.playing = playing
        self._sinks: dict[str, Callable[[Snapshot], None]] = {}
        self._shown: dict[str, int | None] = {}
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_tick = time.monotonic()
        self.unreadable = 0  # snapshots whose line could not be read (skipped)

    def attach(self, host: str, sink: Callable[[Snapshot], None]) -> None:
        with self._lock:
            self._sinks[host] = sink
            self._shown[host] = None

    def start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._last_tick = time.monotonic()
            self._emit()
            self._thread = threading.Thread(target=self._run, name="replay", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self.TICK_S):
            with self._lock:
                now = time.monotonic()
                if self.playing:
                    self.position = min(self.recording.end, self.position + timedelta(seconds=(now - self._last_tick) * self.speed))
                    if self.position >= self.recording.end:
                        self.playing = False  # the end: stays on the last instant
                    self._emit()
                self._last_tick = now

    def _emit(self) -> None:
        for host, sink in self._sinks.items():
            track = self.recording.tracks.get(host)
            index = track.at(self.position) if track is not None else None
            if index is None:
                # Before this host's first snapshot (at the start, or sought back to it): its tab
                # must not keep showing a later one as if it were of this time.
                if track is not None and self._shown.get(host) != _GAP:
                    self._shown[host] = _GAP
                    sink(gap_snapshot(track, self.position))
                continue
            if index != self._shown.get(host):
                self._shown[host] = index
                snapshot = self._readable(self.recording.tracks[host], index)
                if snapshot is not None:
                    sink(snapshot)

    def _readable(self, track: Track, index: int) -> Snapshot | None:
        """The snapshot at `index`, or, that one damaged, the latest readable one before it (a
        track's first snapshot was checked as the recording was read)."""
        for i in range(index, max(-1, index - 64), -1):
            try:
                return track.snapshot(i)
            except (ValueError, TypeError, KeyError) as exc:  # ShapeError: the line is no snapshot
                self.unreadable += 1
                log.warning("replay: snapshot %d of %s unreadable, the one before is shown: %s", i,
                            inert(track.host) or "the recording", exc)
        return None  # 64 damaged in a row: what is shown stays

    # -- what the keys do ------------------------------------------------------------------

    def pause(self) -> None:
        with self._lock:
            self.playing = False

    def resume(self) -> None:
        with self._lock:
            if self.position >= self.recording.end:
                self.position = self.recording.start  # played to the end: play again from the start
                self._shown = dict.fromkeys(self._shown)
            self.playing = True
            self._last_tick = time.monotonic()

    def seek(self, when: datetime) -> datetime:
        with self._lock:
            self.position = max(self.recording.start, min(self.recording.end, when))
            self._last_tick = time.monotonic()
            self._emit()
            return self.position

    def step(self, direction: int, host: str | None = None) -> datetime:
        """To the next (1) or previous (-1) snapshot of `host` (of any host when None); pauses."""
        with self._lock:
            self.playing = False
            track = self.recording.tracks.get(host) if host is not None else None
            instants = track.times if track is not None else self.recording.instants()
            if direction > 0:
                later = [t for t in instants if t > self.position]
                target = later[0] if later else self.position
            else:
                # The instant in force is the latest at or before the position: the previous is before it.
                current = [t for t in instants if t <= self.position]
                target = current[-2] if len(current) >= 2 else instants[0]
            return self.seek(target)

    def faster(self, step: int) -> float:
        with self._lock:
            index = min(range(len(SPEEDS)), key=lambda i: abs(SPEEDS[i] - self.speed))
            self.speed = SPEEDS[max(0, min(len(SPEEDS) - 1, index + step))]
            return self.speed

    def now(self) -> datetime:
        """The recorded clock's time: what a countdown counts against."""
        with self._lock:
            if self.playing:
                moved = timedelta(seconds=(time.monotonic() - self._last_tick) * self.speed)
                return min(self.recording.end, self.position + moved)
            return self.position


class ReplaySource:
    """One host's view of a shared ReplayClock, with the dashboard's SnapshotSource surface."""

    replay = True

    def __init__(self, clock: ReplayClock, host: str, sink: Callable[[Snapshot], None]) -> None:
        self.clock = clock
        self.host = host
        self.interval_s = 0.0
        clock.attach(host, sink)

    def start(self) -> None:
        self.clock.start()

    def stop(self) -> None:
        self.clock.stop()

    def pause(self) -> None:
        self.clock.pause()

    def resume(self) -> None:
        self.clock.resume()

    def refresh_now(self) -> None:
        pass  # a recording does not change

    def set_interval(self, seconds: float) -> None:
        pass  # the speed is the clock's
