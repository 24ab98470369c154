"""The `queuetop` command's entry point (the console script, `python -m tui`): the process title
first, then the command line.

`ps` shows every process's command line to every user of the host (/proc/PID/cmdline), and
`--dsn` may hold a password. Importing tui.cli (psycopg, SQLAlchemy, the probes, the engine)
takes most of a second, so the title is rewritten here before that, with nothing but the
standard library and setproctitle: every argument that may hold a secret masked without a
parser, hiding more when in doubt (dbcore/redact.py). tui.cli's main then sets a finer title,
each --dsn masked by its own parser (both through tui/title.py: the imports go one way, entry
to cli).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from dbcore.redact import mask_raw
from tui.title import set_title


def hide_arguments(argv: Sequence[str]) -> None:
    """The title with every argument that may hold a secret masked, if any may."""
    shown = [mask_raw(arg) for arg in argv]
    if shown != list(argv):
        set_title(shown)


def main() -> int:
    hide_arguments(sys.argv[1:])
    from tui.cli import main as run  # the slow imports

    return run()
