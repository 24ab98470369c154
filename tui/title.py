"""The process title `ps` shows: `queuetop` and the arguments, with every secret masked.

`ps` shows every process's command line to every user of the host (/proc/PID/cmdline), and
`--dsn` may hold a password. The console script (tui/entry.py) sets a coarse title before the
slow imports, the command line (tui/cli.py) a finer one once it can parse a DSN: both through
this module, which imports nothing but the standard library (and setproctitle, when called).
"""

from __future__ import annotations

from collections.abc import Sequence

PROG = "queuetop"


def set_title(shown: Sequence[str]) -> None:
    """Make `ps` show `queuetop` and `shown` (setproctitle overwrites the memory that
    /proc/PID/cmdline reads: the arguments as given are gone from it)."""
    try:
        import setproctitle
    except ImportError:  # a dependency: only a broken install lacks it
        return
    setproctitle.setproctitle(" ".join([PROG, *shown]))
