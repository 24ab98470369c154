"""Child processes that die with the process that started them.

The dashboard and the scenarios start relays and receivers through multiprocessing's fork
server, so the dashboard is not their parent: a SIGKILL of the dashboard left them running
(parent 1), still renewing the relay lease. Each child is handed a token for the process that
started it, its pid and its start time (a reused pid has another), and a watchdog thread in the
child exits at once when that process is gone.
"""

from __future__ import annotations

import os
import threading

Token = tuple[int, str | None]

CHECK_EVERY_S = 0.25


def token() -> Token:
    """This process, as a child will recognise it."""
    return os.getpid(), _start_time(os.getpid())


def die_with(parent: Token | None, check_every_s: float = CHECK_EVERY_S) -> None:
    """In a child: exit (no cleanup: the leases it holds expire) as soon as `parent` is gone."""
    if parent is None:
        return
    pid, started = parent

    def watch() -> None:
        while _start_time(pid) == started:
            threading.Event().wait(check_every_s)
        os._exit(3)

    threading.Thread(target=watch, name="lifeline", daemon=True).start()


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat, field 22), or None
    if it is gone. Elsewhere than Linux: whether the pid exists."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()  # after the command name, which may hold anything
    except FileNotFoundError:
        return None
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        return "alive"
    return fields[19] if len(fields) > 19 and fields[0] != "Z" else None  # a zombie is gone too
