"""Writing a recording: snapshots as gzip members of JSON lines, into a file that rotates.

Each snapshot (`Snapshot.to_json`, with its `host`) is a gzip member of its own, written whole
(one write): the file is a valid gzip file after every snapshot, whatever happens next. A write
that fails (a full disk) is cut back to the last whole snapshot, so `gzip -t` passes and every
snapshot written before it is read back; a recorder killed mid-write leaves at most the member
it was writing incomplete. When the file passes `max_bytes` it is rotated as logrotate does: FILE
becomes FILE.1, FILE.1 becomes FILE.2, ..., and at most `keep` old files are kept; recording into
a FILE that exists rotates it first. Files are created afresh, readable by their owner only (a
snapshot carries queries), and a symbolic link is not followed.

With `retain_s` (`record --retain`) the recording keeps a time window instead: FILE is also
rotated by time, a segment of an eighth of the window each (RETAIN_SEGMENTS), and a rotated file
whose last write is older than the window is deleted, so what is on disk is the last window and
at most a segment more (a file is only ever deleted whole: the file stays valid). `keep` then caps
the rotated files only where it is given (a disk bound that wins over the window).

`encode_member` makes a snapshot's member, `write_member` writes one made earlier: the dashboard's
flight recorder (probes/flight.py) keeps members in memory and, on R, writes them as they are.

probes/recording.py describes the whole format and re-exports these names.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from dbcore.errors import UsageError

from .model import Snapshot

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_KEEP = 5
COMPRESS_LEVEL = 6  # 9 costs three times as much for 11 % less (bench tui, 500 queues and 5,000 sessions)
RETAIN_SEGMENTS = 8  # with a time window: FILE rotates every eighth of it, so at most an eighth more is kept


def encode_member(snapshot: Snapshot) -> bytes:
    """A snapshot as a recording's member: its JSON line, gzip-compressed (a member of its own)."""
    line = (json.dumps(snapshot.to_json(), separators=(",", ":")) + "\n").encode()
    return gzip.compress(line, compresslevel=COMPRESS_LEVEL, mtime=0)


class Recorder:
    """Writes snapshots to FILE (thread-safe: each host's sampler calls `write` from its thread)."""

    def __init__(self, path: str | Path, *, max_bytes: int = DEFAULT_MAX_BYTES, keep: int = DEFAULT_KEEP,
                 retain_s: float | None = None, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.keep = keep
        self.retain_s = retain_s  # a time window: rotated by time too, and what is older deleted
        self._clock = clock  # wall-clock seconds: compared with the rotated files' modification times
        self._opened_at = 0.0  # when the current file got its first member (a segment's start)
        self._next_prune = 0.0
        self.dropped_files = 0  # rotated files deleted as older than the window
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
        self.write_member(encode_member(snapshot))

    def write_member(self, member: bytes) -> None:
        """Append a member `encode_member` made (compressed earlier, in another thread or kept in
        memory): written whole, counted, rotated as `write`'s."""
        with self._lock:
            if self._fd is None:
                return  # closed, or failed: a sampler's last snapshot after the end
            try:
                write_all(self._fd, member)
            except OSError as exc:
                self.failed = exc
                try:
                    os.ftruncate(self._fd, self._size)  # part of this member was written: not any more
                except OSError:
                    pass
                self._close()
                raise
            if not self._size:
                self._opened_at = self._clock()
            self._size += len(member)
            self.snapshots += 1
            if self._size >= self.max_bytes or self._segment_ended():
                try:
                    self._close()
                    self._shift()
                    self._open()
                except OSError as exc:
                    self.failed = exc
                    self._close()
                    raise
            if self.retain_s is not None and self._clock() >= self._next_prune:
                self._prune()

    def _segment_ended(self) -> bool:
        """With a time window: the current file holds a segment's worth of time (rotate it)."""
        return self.retain_s is not None and self._clock() - self._opened_at >= self.retain_s / RETAIN_SEGMENTS

    def _prune(self) -> None:
        """Delete the rotated files last written before the window began (each whole: what is
        kept stays valid). Looked at a few times a segment, not at every snapshot."""
        assert self.retain_s is not None
        now = self._clock()
        self._next_prune = now + self.retain_s / RETAIN_SEGMENTS / 4
        for older in recording_files(self.path)[:-1]:
            try:
                if older.lstat().st_mtime < now - self.retain_s:
                    older.unlink()
                    self.dropped_files += 1
            except FileNotFoundError:
                pass
            except OSError:
                pass  # cannot be deleted now (its directory's permissions): tried again at the next look

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


def write_all(fd: int, data: bytes) -> None:
    """All of `data` to `fd` (os.write may write less than asked)."""
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
