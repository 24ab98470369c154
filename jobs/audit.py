"""The audit file: every action on jobs, as it is done, one JSON line per committed batch and one
when the action ends. Readable by the user alone (a file of mode 0600 in a directory of mode 0700):
it names queues, filters and job ids. Where: $QUEUETOP_AUDIT, else `audit.jsonl` in the user's
state directory (platformdirs: ~/.local/state/queuetop on Linux).

Each line: `at` (UTC), `event` (`batch` | `done` | `refused`), `os_user`, `host`, `dsn` (masked),
`queue`, `source`, `action`, `filter`, and, for a batch, the `ids` it changed; for `done`, the
counts (`matched`, `changed`, `skipped`) and where a stopped action ended (`stopped_after`).
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from platformdirs import user_state_dir

from .model import JobFilter, Outcome

ENV_AUDIT = "QUEUETOP_AUDIT"


def audit_path() -> Path:
    given = os.environ.get(ENV_AUDIT, "").strip()
    return Path(given) if given else Path(user_state_dir("queuetop")) / "audit.jsonl"


def _os_user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no login name (a container's uid without a passwd entry)
        return str(os.getuid())


class Audit:
    """What one action writes to the audit file. Lines are appended whole (one write each), under
    a lock, so two threads' lines never interleave."""

    _lock = threading.Lock()

    def __init__(self, *, dsn: str, flt: JobFilter, path: Path | None = None) -> None:
        self.path = path or audit_path()
        self.common: dict[str, Any] = {"os_user": _os_user(), "host": socket.gethostname(), "dsn": dsn,
                                       "filter": flt.to_json()}

    def _write(self, record: dict[str, Any]) -> None:
        line = json.dumps({"at": datetime.now(UTC).isoformat(), **record, **self.common}, default=str) + "\n"
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.fchmod(fd, 0o600)  # one made before, by hand or by umask, is made the user's alone
                os.write(fd, line.encode("utf-8"))
            finally:
                os.close(fd)

    def batch(self, outcome: Outcome, ids: list[str]) -> None:
        self._write({"event": "batch", "queue": outcome.queue, "source": outcome.source, "action": outcome.action,
                     "count": len(ids), "ids": ids})

    def done(self, outcome: Outcome) -> None:
        self._write({"event": "done", **outcome.to_json()})

    def refused(self, *, queue: str, source: str | None, action: str, why: str) -> None:
        self._write({"event": "refused", "queue": queue, "source": source, "action": action, "why": why})

    def paused(self, *, queue: str, source: str, paused: bool) -> None:
        self._write({"event": "done", "queue": queue, "source": source, "action": "pause" if paused else "resume"})
