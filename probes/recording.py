"""Record and replay: snapshots as compressed JSON lines, and a clock that plays them back.

A recording is a gzip file of JSON lines, one snapshot each (`Snapshot.to_json`, with its
`host`), in the order they were taken. Each snapshot is flushed as it is written (a full flush:
a reader, or a recording cut short by a crash, loses at most the line being written). When the
file passes `max_bytes` it is rotated as logrotate does: FILE becomes FILE.1, FILE.1 becomes
FILE.2, ..., and at most `keep` old files are kept; recording into a FILE that exists rotates
it first (a recorder killed mid-run left no gzip trailer, and a gzip member appended after that
would not be readable). A recording is read back from all of them, oldest first; a damaged part
is skipped, from the next gzip member on. Files are created afresh, readable by their owner
only (a snapshot carries queries), and a symbolic link is not followed.

`ReplayClock` plays a recording on a recorded clock: its position is a time of the recording,
advanced at `speed` times real time while playing, moved by seek and step, and each host's
sink gets the latest snapshot taken at or before the position. Nothing here touches a database.
"""

from __future__ import annotations

import glob
import gzip
import json
import logging
import os
import re
import threading
import time
import zlib
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import BinaryIO

from dbcore.errors import UsageError

from .model import SNAPSHOT_VERSION, ServerInfo, Snapshot, as_utc, utc_text

log = logging.getLogger("queuetop.recording")
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_KEEP = 5


# -- writing -------------------------------------------------------------------------------


class Recorder:
    """Writes snapshots to FILE (thread-safe: each host's sampler calls `write` from its thread)."""

    def __init__(self, path: str | Path, *, max_bytes: int = DEFAULT_MAX_BYTES, keep: int = DEFAULT_KEEP) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.keep = keep
        self.snapshots = 0
        self._lock = threading.Lock()
        self._raw: BinaryIO | None = None
        self._gzip: gzip.GzipFile | None = None
        self.failed: OSError | None = None  # the write that failed (a full disk): nothing is written after it
        if self.path.is_dir():
            raise UsageError(f"{self.path} is a directory: name a file to record into")
        if self.path.is_symlink():
            raise UsageError(f"{self.path} is a symbolic link: queuetop records into a file of its own, never through a link")
        if self.path.exists() and not self.path.is_file():
            raise UsageError(f"{self.path} is not a regular file: name a file to record into")
        try:
            if self.path.exists():
                self._shift()  # an earlier recording (perhaps cut short) becomes FILE.1
            self._open()
        except OSError as exc:
            raise UsageError(f"cannot record into {self.path}: {exc.strerror or exc}") from None

    def _open(self) -> None:
        """FILE, created afresh (never through a symbolic link), mode 600."""
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        self._raw = os.fdopen(fd, "wb")
        self._gzip = gzip.GzipFile(fileobj=self._raw, mode="wb", mtime=0, compresslevel=6)  # 9 costs twice as much for 3 % less

    def write(self, snapshot: Snapshot) -> None:
        """Append `snapshot`; an OSError (a full disk) is raised once, and the recorder is then
        closed: what was written stays readable."""
        line = (json.dumps(snapshot.to_json(), separators=(",", ":")) + "\n").encode()
        with self._lock:
            if self._gzip is None:
                return  # closed, or failed: a sampler's last snapshot after the end
            try:
                self._gzip.write(line)
                self._gzip.flush(zlib.Z_FULL_FLUSH)  # readable up to here, even if the process dies now
                self.snapshots += 1
                assert self._raw is not None
                if self._raw.tell() >= self.max_bytes:
                    self._close()
                    self._shift()
                    self._open()
            except OSError as exc:
                self.failed = exc
                self._close()
                raise

    def _shift(self) -> None:
        """FILE becomes FILE.1, FILE.1 FILE.2, ...; beyond `keep`, the oldest goes."""
        for n in range(self.keep, 0, -1):
            older = _numbered(self.path, n)
            if n == self.keep:
                older.unlink(missing_ok=True)
            elif older.exists():
                older.rename(_numbered(self.path, n + 1))
        if self.keep:
            self.path.rename(_numbered(self.path, 1))
        else:
            self.path.unlink()

    def _close(self) -> None:
        """Close both layers, whatever fails (a full disk fails the gzip trailer): never a leak."""
        gz, raw, self._gzip, self._raw = self._gzip, self._raw, None, None
        try:
            if gz is not None:
                gz.close()
        except OSError:
            pass  # the trailer is lost; what was flushed before it is readable
        finally:
            if raw is not None:
                try:
                    raw.close()
                except OSError:
                    pass

    def close(self) -> None:
        with self._lock:
            self._close()

    def files(self) -> list[Path]:
        return recording_files(self.path)


def _numbered(path: Path, n: int) -> Path:
    return path.with_name(f"{path.name}.{n}")


def recording_files(path: str | Path) -> list[Path]:
    """FILE and its rotated predecessors, oldest first."""
    path = Path(path)
    numbered = []
    for candidate in path.parent.glob(f"{glob.escape(path.name)}.*"):
        suffix = candidate.name[len(path.name) + 1:]
        if suffix.isdigit():
            numbered.append((int(suffix), candidate))
    return [p for _n, p in sorted(numbered, reverse=True)] + ([path] if path.exists() else [])


# -- reading -------------------------------------------------------------------------------


_GZIP_MAGIC = b"\x1f\x8b\x08"
_CHUNK = 64 * 1024
_VERSION = re.compile(rb'\{"version":\s*(\d+)\s*,')
_TAKEN_AT = re.compile(rb'"taken_at":\s*"([^"]+)"')
_HOST = re.compile(rb'"host":\s*("(?:[^"\\]|\\.)*")')


@dataclass
class Track:
    """One host's snapshots in a recording: times, and the lines they are parsed from when needed."""

    host: str
    times: list[datetime] = field(default_factory=list)
    # Each line deflated on its own (a replay holds every snapshot: this way a seventh of their
    # size, docs/performance.md); empty when the recording was read for its times only.
    lines: list[bytes] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)  # each snapshot's place among the recording's lines
    _parsed: dict[int, Snapshot] = field(default_factory=dict)

    def line(self, index: int) -> bytes:
        """The snapshot's line as it was recorded."""
        return zlib.decompress(self.lines[index])

    def snapshot(self, index: int) -> Snapshot:
        snapshot = self._parsed.get(index)
        if snapshot is None:
            if len(self._parsed) > 64:
                self._parsed.clear()
            snapshot = self._parsed[index] = Snapshot.from_json(json.loads(self.line(index)))
        return snapshot

    def at(self, when: datetime) -> int | None:
        """The index of the latest snapshot taken at or before `when`, or None."""
        index = bisect_right(self.times, when) - 1
        return index if index >= 0 else None


class Recording:
    """A recording read whole: each host's snapshots in time order. `keep_lines=False` keeps only
    the times (a replay holds every line, each deflated on its own: about the size of the file;
    one instant, `snapshot --from`, needs two passes and little memory)."""

    def __init__(self, path: str | Path, *, keep_lines: bool = True) -> None:
        self.path = Path(path)
        self.keep_lines = keep_lines
        self._files = recording_files(self.path)
        if not self._files:
            raise UsageError(f"no recording at {self.path}")
        self.tracks: dict[str, Track] = {}
        self.truncated = False
        read, current = 0, None
        for seq, (file, line) in enumerate(self._every_line(), 1):
            if file != current:
                read, current = 0, file
            version, taken = _VERSION.match(line), _TAKEN_AT.search(line)
            if version is not None and int(version.group(1)) != SNAPSHOT_VERSION:
                raise UsageError(f"{file}: snapshot version {int(version.group(1))}: this queuetop reads version {SNAPSHOT_VERSION}")
            try:
                when = _parse_time(taken.group(1).decode()) if version and taken else None
            except ValueError:
                when = None
            if when is None:
                if read == 0 and not self.truncated:
                    raise UsageError(f"{file}: not a queuetop recording (its first line is no snapshot)")
                self.truncated = True  # a line of a damaged part: skipped
                continue
            read += 1
            hosts = list(_HOST.finditer(line))  # the snapshot's own `host` is its last key
            host = json.loads(hosts[-1].group(1)) if hosts else ""
            track = self.tracks.setdefault(host, Track(host))
            track.times.append(when)
            track.seqs.append(seq)
            if keep_lines:
                track.lines.append(zlib.compress(line, 1))
        if not self.tracks:
            raise UsageError(f"{self.path}: the recording holds no snapshot")
        for track in self.tracks.values():  # rotated files are in order; a clock step back is not
            if any(b < a for a, b in zip(track.times, track.times[1:], strict=False)):
                order = sorted(range(len(track.times)), key=track.times.__getitem__)
                track.times = [track.times[i] for i in order]
                track.seqs = [track.seqs[i] for i in order]
                track.lines = [track.lines[i] for i in order] if keep_lines else []
        self.start = min(t.times[0] for t in self.tracks.values())
        self.end = max(t.times[-1] for t in self.tracks.values())

    def _every_line(self) -> Iterator[tuple[Path, bytes]]:
        """Every line of every file, oldest first, with its file: numbered alike on each pass."""
        for file in self._files:
            for line in self._lines(file):
                yield file, line

    def _lines(self, file: Path) -> Iterator[bytes]:
        """The complete lines of every gzip member of `file`. A member cut short (a recorder
        killed, or still writing) gives what was flushed; damaged data is skipped up to the next
        member's header."""
        try:
            data = file.read_bytes()
        except OSError as exc:
            raise UsageError(f"cannot read {file}: {exc.strerror or exc}") from None
        if data and not data.startswith(_GZIP_MAGIC):
            raise UsageError(f"{file}: not a queuetop recording (not gzip)")
        position = 0
        while position < len(data):
            inflate = zlib.decompressobj(wbits=31)
            pending, failed = b"", False
            for start in range(position, len(data), _CHUNK):
                saved = inflate.copy()
                try:
                    pending += inflate.decompress(data[start:start + _CHUNK])
                except zlib.error:
                    # Damage (or the next member's header after one cut short) in this piece: what
                    # inflates before it, byte by byte from the state before the piece, is kept.
                    inflate, failed = saved, True
                    for offset in range(start, min(start + _CHUNK, len(data))):
                        try:
                            pending += inflate.decompress(data[offset:offset + 1])
                        except zlib.error:
                            break
                    *complete, pending = pending.split(b"\n")
                    yield from (line + b"\n" for line in complete)
                    break
                *complete, pending = pending.split(b"\n")
                yield from (line + b"\n" for line in complete)
                if inflate.eof:
                    break
            if inflate.eof and not failed:
                position = len(data) - len(inflate.unused_data)
                if pending:
                    self.truncated = True
                continue
            self.truncated = True  # cut short, or damaged: on from the next member, if there is one
            following = data.find(_GZIP_MAGIC, position + 1) if failed else -1
            if following < 0:
                return
            position = following

    @property
    def hosts(self) -> list[str]:
        return list(self.tracks)

    def instants(self) -> list[datetime]:
        """Every time a snapshot was taken, any host's, in order."""
        return sorted({t for track in self.tracks.values() for t in track.times})

    def at(self, when: datetime) -> dict[str, Snapshot]:
        """Each host's latest snapshot taken at or before `when` (a host with none yet is left out)."""
        indexes = {host: index for host, track in self.tracks.items() if (index := track.at(when)) is not None}
        if not self.keep_lines:  # read for its times only: a second pass for these lines
            wanted = {self.tracks[host].seqs[index]: host for host, index in indexes.items()}
            lines = {wanted[seq]: line for seq, (_file, line) in enumerate(self._every_line(), 1) if seq in wanted}
            return {host: Snapshot.from_json(json.loads(line)) for host, line in lines.items()}
        return {host: self.tracks[host].snapshot(index) for host, index in indexes.items()}

    def instant(self, text: str) -> datetime:
        """`parse_time`, which must fall within the recording."""
        when = self.parse_time(text)
        if self.start - timedelta(seconds=1) < when < self.start:
            when = self.start  # the recording's first second, named to the second
        if not self.start <= when <= self.end:
            raise UsageError(f"{text} ({utc_text(when)}) is not in the recording: "
                             f"it runs from {utc_text(self.start)} to {utc_text(self.end)}")
        return when

    def parse_time(self, text: str) -> datetime:
        """A time in the recording: ISO-8601 (a time without zone is UTC), HH:MM[:SS] (UTC, the
        first such time from the recording's start), or +SECONDS from its start."""
        try:
            return self._recorded_time(text.strip())
        except (ValueError, OverflowError):
            raise UsageError(f"invalid time {text!r}: use ISO-8601 (2026-11-23T03:12:00Z), HH:MM[:SS] (UTC) "
                             "or +SECONDS from the start") from None

    def _recorded_time(self, text: str) -> datetime:
        if re.fullmatch(r"\+\d+(\.\d+)?", text):
            return self.start + timedelta(seconds=float(text[1:]))
        clock = re.fullmatch(r"(\d{1,2}):(\d{2})(?::(\d{2}(?:\.\d+)?))?", text)
        if clock:
            hours, minutes, seconds = int(clock.group(1)), int(clock.group(2)), float(clock.group(3) or 0)
            if hours > 23 or minutes > 59 or seconds >= 60:
                raise ValueError(text)
            candidate = self.start.replace(hour=hours, minute=minutes, second=0, microsecond=0) + timedelta(seconds=seconds)
            return candidate if candidate >= self.start.replace(microsecond=0) else candidate + timedelta(days=1)
        return _parse_time(text)


def _parse_time(text: str) -> datetime:
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return as_utc(value)


# -- playing -------------------------------------------------------------------------------


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
                try:
                    snapshot = self.recording.tracks[host].snapshot(index)
                except (ValueError, TypeError, KeyError) as exc:  # a damaged line: the one before stays shown
                    self.unreadable += 1
                    log.warning("replay: snapshot %d of %s unreadable: %s", index, host or "the recording", exc)
                    continue
                sink(snapshot)

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
