"""Record and replay: snapshots as compressed JSON lines, and a clock that plays them back.

A recording is a gzip file of JSON lines, one snapshot each (`Snapshot.to_json`, with its
`host`), in the order they were taken. Each snapshot is a gzip member of its own, written whole
(one write): the file is a valid gzip file after every snapshot, whatever happens next. A write
that fails (a full disk) is cut back to the last whole snapshot, so `gzip -t` passes and every
snapshot written before it is read back; a recorder killed mid-write leaves at most the member
it was writing incomplete. When the file passes `max_bytes` it is rotated as logrotate does: FILE
becomes FILE.1, FILE.1 becomes FILE.2, ..., and at most `keep` old files are kept; recording into
a FILE that exists rotates it first. Files are created afresh, readable by their owner only (a
snapshot carries queries), and a symbolic link is not followed.

Reading takes what it can and says what it could not, in one warning line: a recording is read
back from all its files, oldest first; damaged gzip data is skipped up to the next member, an
incomplete last snapshot is dropped, and a line that is no snapshot (not JSON, nested too deep,
another shape than the model's: `"queues": null`, `"depth": "12"`) is skipped, counted, the first
named by file and line. Recordings by earlier versions (one gzip member, flushed after each line)
read as before. What is not a recording (not gzip, no line a snapshot, not a regular file: a
FIFO, a device, a directory) is a UsageError, one line, exit 2. Loading checks each line's
version, time and host (a replay of hours must open in seconds) and the first snapshot of each
host in full; every other snapshot is checked in full when it is shown (`Track.snapshot` raises
ShapeError), and what is shown instead of a damaged one is the one before it: the app only ever
sees whole snapshots.

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
import stat
import threading
import time
import zlib
from bisect import bisect_right
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import BinaryIO

from dbcore.errors import UsageError
from dbcore.text import inert

from .model import SNAPSHOT_VERSION, ServerInfo, ShapeError, Snapshot, as_utc, utc_text

log = logging.getLogger("queuetop.recording")
# What reading a recording could not use: one line per read (the command line prints it as a warning).
read_log = logging.getLogger("queuetop.recording.read")
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
        self._fd: int | None = None
        self._size = 0  # bytes of whole snapshots in the current file
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
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        self._size = 0

    def write(self, snapshot: Snapshot) -> None:
        """Append `snapshot`, a gzip member of its own; an OSError (a full disk) is raised once, the
        file is cut back to the snapshots written whole, and the recorder is then closed."""
        line = (json.dumps(snapshot.to_json(), separators=(",", ":")) + "\n").encode()
        member = gzip.compress(line, compresslevel=6, mtime=0)  # 9 costs twice as much for 3 % less
        with self._lock:
            if self._fd is None:
                return  # closed, or failed: a sampler's last snapshot after the end
            try:
                _write_all(self._fd, member)
            except OSError as exc:
                self.failed = exc
                try:
                    os.ftruncate(self._fd, self._size)  # part of this member was written: not any more
                except OSError:
                    pass
                self._close()
                raise
            self._size += len(member)
            self.snapshots += 1
            if self._size >= self.max_bytes:
                try:
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
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass  # every byte was written by os.write: nothing is buffered to lose

    def close(self) -> None:
        with self._lock:
            self._close()

    def files(self) -> list[Path]:
        return recording_files(self.path)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


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
    return [p for _n, p in sorted(numbered, reverse=True)] + ([path] if path.exists() or path.is_symlink() else [])


# -- reading -------------------------------------------------------------------------------


_GZIP_MAGIC = b"\x1f\x8b\x08"
_READ = 1 << 20  # read from the file at once
_FEED = 8 << 10  # given to the inflater at once: what it was not given back is copied at a member's end
_HOLD = 1 << 20  # a member's lines are held until its checksum is read, up to this much (one snapshot is far less)
MAX_LINE = 32 << 20  # a longer line is damage, not a snapshot (one of 120 queues is 60 KB)
_VERSION = re.compile(rb'\{"version":\s*(\d+)\s*,')
_TAKEN_AT = re.compile(rb'"taken_at":\s*"([^"]+)"')
_HOST = re.compile(rb'"host":\s*("(?:[^"\\]|\\.)*")')


@dataclass
class Damage:
    """What a read of a recording could not use: counted, the first of each kind located."""

    lines: int = 0  # lines that are no snapshot
    first_line: str = ""
    data: int = 0  # stretches of damaged gzip data
    first_data: str = ""
    incomplete: list[str] = field(default_factory=list)  # files whose last snapshot was cut off
    unfinished: int = 0  # files that end within a gzip member (an earlier version's, killed): nothing lost

    def line(self, file: Path, number: int, reason: str) -> None:
        self.lines += 1
        if not self.first_line:
            self.first_line = f"line {number} of {file}: {reason}"

    def damaged(self, file: Path, offset: int) -> None:
        self.data += 1
        if not self.first_data:
            self.first_data = f"at byte {offset:,} of {file}"

    def cut(self, file: Path) -> None:
        if str(file) not in self.incomplete:
            self.incomplete.append(str(file))

    def __bool__(self) -> bool:
        """Whether anything is worth a warning (an unfinished member that lost nothing is not)."""
        return bool(self.lines or self.data or self.incomplete)

    def summary(self) -> str:
        parts = []
        if self.lines:
            parts.append(f"{self.lines:,} line(s) that are no snapshot skipped (the first, {self.first_line})")
        if self.data:
            parts.append(f"{self.data:,} stretch(es) of damaged gzip data skipped (the first {self.first_data})")
        if self.incomplete:
            parts.append(f"an incomplete last snapshot dropped ({', '.join(self.incomplete)}: a recorder stopped mid-write, "
                         "or still writing)")
        return "; ".join(parts)


def _open_regular(file: Path) -> BinaryIO:
    """`file` opened for reading if it is a regular file: a FIFO would block, a device
    (/dev/zero) would never end, a directory is no recording."""
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO opens without a writer
    except OSError as exc:
        raise UsageError(f"cannot read {file}: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
                    else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode)
                    else "not a regular file")
            raise UsageError(f"{file} is {kind}: a recording is a file `queuetop record` wrote")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise


def read_lines(file: Path, damage: Damage) -> Iterator[bytes]:
    """The complete lines of every gzip member of `file`, each with its newline, in order; what
    could not be read is noted in `damage`. A member's lines are given once its checksum is read
    (a damaged member of one snapshot gives nothing; a long member of an earlier version, after
    each _HOLD of them); a member cut short, or damaged data that is not a checksum's, gives
    the lines before the damage; reading goes on from the next member's header."""
    with _open_regular(file) as f:
        buf, base, p = b"", 0, 0  # input read, its offset in the file, where reading is in it
        done = False

        def fill() -> bool:
            nonlocal buf, base, p, done
            if done:
                return False
            try:
                chunk = f.read(_READ)
            except OSError as exc:
                raise UsageError(f"cannot read {file}: {exc.strerror or exc}") from None
            if not chunk:
                done = True
                return False
            buf, base, p = buf[p:] + chunk, base + p, 0
            return True

        out = bytearray()  # inflated, not yet given as lines
        number = 0  # lines given (and skipped as too long): where the next one is
        skipping = False  # within a line longer than MAX_LINE: up to its end
        inflated = 0  # bytes inflated from the file

        def take(data: bytes) -> None:
            nonlocal skipping, inflated
            inflated += len(data)
            if skipping:
                end = data.find(b"\n")
                if end < 0:
                    return
                data, skipping = data[end + 1:], False
            out.extend(data)

        def complete() -> Iterator[bytes]:
            nonlocal number, skipping
            end = out.rfind(b"\n")
            if end >= 0:
                whole = bytes(out[:end + 1])
                del out[:end + 1]
                for line in whole.split(b"\n")[:-1]:
                    number += 1
                    if len(line) >= MAX_LINE:
                        damage.line(file, number, f"longer than {MAX_LINE >> 20} MiB")
                        continue
                    yield line + b"\n"
            if len(out) >= MAX_LINE:  # no end in sight: skipped, up to its end
                number += 1
                damage.line(file, number, f"longer than {MAX_LINE >> 20} MiB")
                out.clear()
                skipping = True

        first = True
        while True:
            while len(buf) - p < len(_GZIP_MAGIC) and fill():
                pass
            if p >= len(buf):
                break  # the end of the file, at a member's end
            if done and _GZIP_MAGIC.startswith(buf[p:]):
                damage.cut(file)  # a member cut short within its header: its snapshot is lost
                break
            if buf[p:p + len(_GZIP_MAGIC)] != _GZIP_MAGIC:
                if first:
                    raise UsageError(f"{file}: not a queuetop recording (not gzip)")
                damage.damaged(file, base + p)  # no member here (zeros a crash left, damage): to the next one
                if out:
                    damage.line(file, number + 1, "cut off by damaged data")
                    out.clear()
                while (found := buf.find(_GZIP_MAGIC, p + 1)) < 0:
                    p = max(p, len(buf) - len(_GZIP_MAGIC) + 1)
                    if not fill():
                        return
                p = found
                continue
            first = False
            inflate = zlib.decompressobj(wbits=31)
            ended = failed = False
            start = base + p  # the member's header, in the file
            before_member = inflated
            while True:
                if p >= len(buf) and not fill():
                    break  # cut short: the end of the file within the member
                piece = memoryview(buf)[p:p + _FEED]
                saved = inflate.copy()
                try:
                    take(inflate.decompress(piece))
                except zlib.error as exc:
                    failed = True
                    if "check" in str(exc):  # its CRC or length is wrong: none of the member can be trusted
                        out.clear()
                        damage.damaged(file, start)
                        p = max(p, start - base + 1)  # the next member is after this one's header
                        break
                    # Where the damage is, inflating byte by byte from the state before this piece.
                    inflate, before = saved, bytearray()
                    for offset in range(len(piece)):
                        try:
                            before += inflate.decompress(piece[offset:offset + 1])
                        except zlib.error:
                            break
                    while len(buf) - (p + offset) < len(_GZIP_MAGIC) and fill():
                        pass
                    if buf.find(_GZIP_MAGIC, max(p + offset - 2, 0), p + offset + 1 + len(_GZIP_MAGIC)) >= 0:
                        # A member that was cut short (a recorder of an earlier version killed: no
                        # end), and the next member's header where its data stops: what it gave is kept.
                        take(bytes(before))
                    else:  # damaged data: none of the member's lines given yet can be trusted
                        out.clear()
                    damage.damaged(file, base + p + offset)
                    p = max(p + offset - 2, start - base + 1)  # the next member may begin right here
                    break
                if inflate.eof:
                    p += len(piece) - len(inflate.unused_data)
                    ended = True
                    break
                p += len(piece)
                if len(out) >= _HOLD:
                    yield from complete()
            if ended:
                yield from complete()  # an incomplete line goes on in the next member, as gzip reads it
                continue
            yield from complete()
            if failed:
                if out:
                    damage.line(file, number + 1, "cut off by damaged data")
            elif out or inflated == before_member:
                damage.cut(file)  # the end of the file within a snapshot (or before any of it): it is lost
            else:
                damage.unfinished += 1  # within a member, after a whole line: nothing lost (an earlier version's)
            out.clear()
            if not failed:
                return
            skipping = False
            # On from the next member's header, if there is one.
            while (found := buf.find(_GZIP_MAGIC, p)) < 0:
                p = max(p, len(buf) - len(_GZIP_MAGIC) + 1)
                if not fill():
                    return
            p = found
        if out or skipping:
            damage.cut(file)  # the last line has no end


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
