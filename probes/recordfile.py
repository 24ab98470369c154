"""Reading a recording's files back: the complete lines of every gzip member, tolerantly.

Damaged gzip data is skipped up to the next member, an incomplete last line is dropped, and a
line longer than MAX_LINE is skipped as damage; what could not be used is counted in a `Damage`
(the first of each kind located by file and line or byte). What is not gzip, or not a regular
file (a FIFO, a device, a directory), is a UsageError. Recordings by earlier versions (one gzip
member, flushed after each line) read as before.

Turning the lines into snapshots is probes/readback.py's; probes/recording.py describes the
whole format and re-exports these names.
"""

from __future__ import annotations

import os
import stat
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from dbcore.errors import UsageError

_GZIP_MAGIC = b"\x1f\x8b\x08"
_READ = 1 << 20  # read from the file at once
_FEED = 8 << 10  # given to the inflater at once: what it was not given back is copied at a member's end
_HOLD = 1 << 20  # a member's lines are held until its checksum is read, up to this much (one snapshot is far less)
MAX_LINE = 32 << 20  # a longer line is damage, not a snapshot (one of 120 queues is 60 KB)


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
