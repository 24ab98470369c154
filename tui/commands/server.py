"""`queuetop server status | stop`: the embedded PostgreSQL server."""

from __future__ import annotations

import argparse
from pathlib import Path

from .context import Context, emit
from .options import ArgumentParser, leaf


def cmd_server_status(ctx: Context) -> int:
    from queues.embedded import server_status

    data_dir = getattr(ctx.args, "data_dir", None)
    status = server_status(Path(data_dir) if data_dir else None)
    emit(status)
    return 0


def cmd_server_stop(ctx: Context) -> int:
    from queues.embedded import stop_server

    data_dir = getattr(ctx.args, "data_dir", None)
    emit({"stopped": stop_server(Path(data_dir) if data_dir else None)})
    return 0


def register(commands: argparse._SubParsersAction) -> None:
    server = commands.add_parser("server", help="the embedded PostgreSQL server")
    server_sub = server.add_subparsers(title="server commands", metavar="ACTION", required=True, parser_class=ArgumentParser)
    leaf(server_sub, "status", cmd_server_status, "show whether the embedded server runs, and where")
    leaf(server_sub, "stop", cmd_server_stop, "stop the embedded server")
