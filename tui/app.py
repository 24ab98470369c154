"""The dashboard entry point (the full Textual dashboard is built on the probes)."""

from __future__ import annotations

import sys


def run_dashboard(ctx) -> int:
    target = ctx.target  # starts the embedded server when no DSN is given
    print(
        f"queuetop: the live dashboard is not available in this version yet; connected to {target.masked}.\n"
        "Use `queuetop engine ...` to drive the engine (see `queuetop --help`).",
        file=sys.stderr,
    )
    return 0
