"""A recording read back: each host's snapshots in time order (`Recording`, `Track`).

A recording is read from all its files, oldest first (probes/recordfile.py gives their lines);
a line that is no snapshot (not JSON, nested too deep, another shape than the model's:
`"queues": null`, `"depth": "12"`) is skipped, counted, the first named by file and line, and
what was skipped is said in one warning line (`read_log`, `read_warnings`). Loading checks each
line's version, time and host (a replay of hours must open in seconds) and the first snapshot of
each host in full; every other snapshot is checked in full when it is shown (`Track.snapshot`
raises ShapeError), and what is shown instead of a damaged one is the one before it.

probes/recording.py describes the whole format and re-exports these names.
"""

from __future__ import annotations

import json
import logging
import re
import zlib
from bisect import bisect_right
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from dbcore.errors import UsageError
from dbcore.text import inert

from .model import SNAPSHOT_VERSION, ShapeError, Snapshot, as_utc, utc_text
from .recorder import recording_files
from .recordfile import Damage, read_lines

# What reading a recording could not use: one line per read (the command line prints it as a warning).
read_log = logging.getLogger("queuetop.recording.read")
_VERSION = re.compile(rb'\{"version":\s*(\d+)\s*,')
_TAKEN_AT = re.compile(rb'"taken_at":\s*"([^"]+)"')
_HOST = re.compile(rb'"host":\s*("(?:[^"\\]|\\.)*")')


def parse_line(line: bytes) -> Snapshot:
    """A recorded line as a snapshot; ShapeError (a ValueError) saying why it is none."""
    try:
        document = json.loads(line)
    except RecursionError:
        raise ShapeError("nested too deeply") from None
    except ValueError as exc:  # not JSON, not UTF-8
        raise ShapeError(f"not JSON ({exc})") from None
    try:
        return Snapshot.from_json(document)
    except ShapeError:
        raise
    except ValueError as exc:
        raise ShapeError(str(exc)) from None


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
        """The snapshot, checked in full: ShapeError (a ValueError) if its line is no snapshot."""
        snapshot = self._parsed.get(index)
        if snapshot is None:
            if len(self._parsed) > 64:
                self._parsed.clear()
            snapshot = self._parsed[index] = self.parse(self.line(index))
        return snapshot

    def parse(self, line: bytes) -> Snapshot:
        snapshot = parse_line(line)
        if snapshot.host != self.host:
            raise ShapeError(f"its host is {snapshot.host!r}, not {self.host!r}")
        return snapshot

    def at(self, when: datetime) -> int | None:
        """The index of the latest snapshot taken at or before `when`, or None."""
        index = bisect_right(self.times, when) - 1
        return index if index >= 0 else None


class Recording:
    """A recording read whole: each host's snapshots in time order. `keep_lines=False` keeps only
    the times (a replay holds every line, each deflated on its own: about the size of the file;
    one instant, `snapshot --from`, needs two passes and little memory). What could not be read
    is in `damage`, and said in one warning on `read_log`."""

    def __init__(self, path: str | Path, *, keep_lines: bool = True) -> None:
        self.path = Path(path)
        self.keep_lines = keep_lines
        self._files = recording_files(self.path)
        if not self._files:
            raise UsageError(f"no recording at {self.path}")
        self.tracks: dict[str, Track] = {}
        self.damage = Damage()
        checked: set[str] = set()  # hosts whose first snapshot was checked in full
        lines = 0
        for seq, (file, number, line) in enumerate(self._every_line(self.damage), 1):
            lines += 1
            version, taken, hosts = _VERSION.match(line), _TAKEN_AT.search(line), list(_HOST.finditer(line))
            if version is not None and int(version.group(1)) != SNAPSHOT_VERSION:
                if number == 1:  # a file of another version (a later queuetop's): none of it can be read
                    raise UsageError(f"{file}: snapshot version {int(version.group(1))}: "
                                     f"this queuetop reads version {SNAPSHOT_VERSION}")
                self.damage.line(file, number, f"snapshot version {int(version.group(1))} among version {SNAPSHOT_VERSION}")
                continue
            try:
                when = _parse_time(taken.group(1).decode()) if version and taken else None
                host = json.loads(hosts[-1].group(1)) if hosts else ""  # the snapshot's own `host` is its last key
            except (ValueError, OverflowError):
                when = None
            if when is None:
                self.damage.line(file, number, "not a snapshot (no version and time)")
                continue
            track = self.tracks.get(host)
            if host not in checked:  # each host's first snapshot in full: a file of none is no recording
                try:
                    Track(host).parse(line)
                except ShapeError as exc:
                    self.damage.line(file, number, str(exc))
                    continue
                checked.add(host)
            if track is None:
                track = self.tracks[host] = Track(host)
            track.times.append(when)
            track.seqs.append(seq)
            if keep_lines:
                track.lines.append(zlib.compress(line, 1))
        if not self.tracks:
            what = "no snapshot" if not lines else "no readable snapshot"
            raise UsageError(f"{self.path}: not a queuetop recording: it holds {what}"
                             + (f" ({self.damage.summary()})" if self.damage else ""))
        for track in self.tracks.values():  # rotated files are in order; a clock step back is not
            if any(b < a for a, b in zip(track.times, track.times[1:], strict=False)):
                order = sorted(range(len(track.times)), key=track.times.__getitem__)
                track.times = [track.times[i] for i in order]
                track.seqs = [track.seqs[i] for i in order]
                track.lines = [track.lines[i] for i in order] if keep_lines else []
        self.start = min(t.times[0] for t in self.tracks.values())
        self.end = max(t.times[-1] for t in self.tracks.values())
        if self.damage:
            read_log.warning("%s: %s; the rest is read", self.path, self.damage.summary())

    @property
    def truncated(self) -> bool:
        """Whether the files were not all read to a whole end: damage, a snapshot cut off, a
        member without its end (a recorder of an earlier version killed)."""
        return bool(self.damage) or self.damage.unfinished > 0

    def _every_line(self, damage: Damage | None = None) -> Iterator[tuple[Path, int, bytes]]:
        """Every line of every file, oldest first, with its file and its number there: numbered
        alike on each pass."""
        damage = damage if damage is not None else Damage()
        for file in self._files:
            for number, line in enumerate(read_lines(file, damage), 1):
                yield file, number, line

    @property
    def hosts(self) -> list[str]:
        return list(self.tracks)

    def instants(self) -> list[datetime]:
        """Every time a snapshot was taken, any host's, in order."""
        return sorted({t for track in self.tracks.values() for t in track.times})

    def at(self, when: datetime) -> dict[str, Snapshot]:
        """Each host's latest readable snapshot taken at or before `when` (a host with none yet is
        left out): a damaged one is passed over for the one before it, and said so on `read_log`."""
        found: dict[str, Snapshot] = {}
        passed: list[str] = []  # why each damaged snapshot passed over is no snapshot
        pending = {host: index for host, track in self.tracks.items() if (index := track.at(when)) is not None}
        while pending:
            # Each host's latest snapshots, up to a window of them: its lines, if read for its times only, in one pass.
            windows = {host: range(index, max(0, index - 64) - 1, -1) for host, index in pending.items()}
            lines: dict[tuple[str, int], bytes] = {}
            if not self.keep_lines:
                wanted = {self.tracks[host].seqs[i]: (host, i) for host, window in windows.items() for i in window}
                lines = {wanted[seq]: line for seq, (_f, _n, line) in enumerate(self._every_line(), 1) if seq in wanted}
            for host, window in windows.items():
                track = self.tracks[host]
                del pending[host]
                for i in window:
                    try:
                        if self.keep_lines:
                            found[host] = track.snapshot(i)
                        elif (host, i) in lines and as_utc((parsed := track.parse(lines[host, i])).taken_at) == track.times[i]:
                            found[host] = parsed
                        else:
                            raise ShapeError("not found again (the files changed since they were read)")
                        break
                    except ShapeError as exc:
                        passed.append(f"{'host ' + inert(host) + ' ' if host else ''}at {utc_text(track.times[i])}: {exc}")
                else:
                    if window[-1] > 0:
                        pending[host] = window[-1] - 1  # the whole window damaged: the one before it
        if passed:
            read_log.warning("%s: %d snapshot(s) at or before %s passed over, unreadable (the first, %s); the one before is "
                             "shown", self.path, len(passed), utc_text(when), passed[0])
        return found

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


@contextmanager
def read_warnings(say: Callable[[str], None]) -> Iterator[None]:
    """Within the block, each warning of reading a recording (`read_log`: what was skipped, one
    line) is given to `say` instead of the log (the command line prints it as its warning)."""

    class Say(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            say(record.getMessage())

    handler, propagate = Say(logging.WARNING), read_log.propagate
    read_log.addHandler(handler)
    read_log.propagate = False
    try:
        yield
    finally:
        read_log.removeHandler(handler)
        read_log.propagate = propagate


def _parse_time(text: str) -> datetime:
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return as_utc(value)
