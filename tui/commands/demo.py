"""`queuetop demo reset`: remove what the demo workload and the dashboard's prompts made."""

from __future__ import annotations

import argparse

from .context import Context, emit
from .options import ArgumentParser, leaf


def cmd_demo_reset(ctx: Context) -> int:
    from queues.demo import reset

    with ctx.engine_session("reset") as conn:
        report = reset(conn, force=ctx.args.force)
    emit(report.to_json())
    return 0


def register(commands: argparse._SubParsersAction) -> None:
    demo = commands.add_parser("demo", help="the demo workload of the embedded server")
    demo_sub = demo.add_subparsers(title="demo commands", metavar="ACTION", required=True, parser_class=ArgumentParser)
    p = leaf(demo_sub, "reset", cmd_demo_reset,
             "remove what the demo and the dashboard's prompts made (demo.* queues with their dead letters, rings, "
             "leases and tasks; the outbox relays' queues and lease; queues and leases created from prompts); "
             "prints a JSON summary", writes=True)
    p.add_argument("--force", action="store_true", help="reset even while the engine's sessions are connected")
