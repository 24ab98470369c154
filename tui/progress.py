"""What a slow step before a command's real work is doing, on stderr (issue 28, point 6).

The embedded server's first start (a new data directory, then the server), a start after it
was stopped, and the schema's first installation take seconds, before the dashboard's first
frame or a snapshot's line: each says so as it begins, and how long it took as it ends,

    queuetop: first run: creating the embedded PostgreSQL server in ~/.local/share/queuetop/pgdata... done (1.6 s)

A step that does not run (the server already up, the schema current) says nothing. Like git's
progress, it is written only when stderr is a terminal: a script that reads stderr, a test, a
cron job see nothing but what they saw before (a failure is still one `queuetop: error:` line),
and stdout is never touched. QUEUETOP_PROGRESS=1 writes it to any stderr, =0 to none.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from tui.title import PROG

ENV_PROGRESS = "QUEUETOP_PROGRESS"


def enabled() -> bool:
    """Whether steps are narrated: QUEUETOP_PROGRESS=1/0 if set, else when stderr is a terminal."""
    forced = os.environ.get(ENV_PROGRESS, "").strip()
    if forced in {"0", "1"}:
        return forced == "1"
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced by something without a file, or closed
        return False


@contextmanager
def step(what: str) -> Iterator[None]:
    """`queuetop: what...` as the step begins, `done (N s)` on the same line as it ends, `failed`
    if it raises (the error's own line then follows, whole, on a line of its own)."""
    if not enabled():
        yield
        return
    _write(f"{PROG}: {what}... ")
    started = time.monotonic()
    try:
        yield
    except BaseException:
        _write("failed\n")
        raise
    _write(f"done ({time.monotonic() - started:.1f} s)\n")


def _write(text: str) -> None:
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed or broken stderr: the command goes on without it
        pass
