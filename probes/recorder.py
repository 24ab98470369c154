"""Writing a recording: snapshots as gzip members of JSON lines, into a file that rotates.

Each snapshot (`Snapshot.to_json`, with its `host`) is a gzip member of its own, written whole
(one write): the file is a valid gzip file after every snapshot, whatever happens next. A write
that fails (a full disk) is cut back to the last whole snapshot, so `gzip -t` passes and every
snapshot written before it is read back; a recorder killed mid-write leaves at most the member
it was writing incomplete. When the file passes `max_bytes` it is rotated as logrotate does: FILE
becomes FILE.1, FILE.1 becomes FILE.2, ..., and at most `keep` old files are kept; recording into
a FILE that exists rotates it first. Files are created afresh, readable by their owner only (a
snapshot carries queries), and a symbolic link is not followed.

probes/recording.py describes the whole format and re-exports these names.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import threading
from pathlib import Path

from dbcore.errors import UsageError

from .model import Snapshot

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_KEEP = 5


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
