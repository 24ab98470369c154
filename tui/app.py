"""`queuetop` with no command. The live Textual dashboard is built on the probes (issue 4);
until then this prints one probe cycle as text, the same view as `queuetop snapshot`."""

from __future__ import annotations

import sys

from probes.config import load_config
from probes.sampler import run_cycle
from tui.report import render


def run_dashboard(ctx) -> int:
    config = load_config(getattr(ctx.args, "config", None))
    target = ctx.target  # starts the embedded server when no DSN is given
    print(render(run_cycle(target, config)))
    print(
        "\n(the live dashboard is not built yet: this is one probe cycle; "
        "`queuetop --help` lists the commands)",
        file=sys.stderr,
    )
    return 0
