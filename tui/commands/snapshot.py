"""`queuetop snapshot`: every probe once on every target (or an instant of a recording), printed
as the readable report or as JSON (PRODUCT.md's snapshot, version 1)."""

from __future__ import annotations

import argparse

from dbcore.database import Target
from dbcore.errors import QueuetopError, UsageError, first_line
from dbcore.text import inert_line
from probes.config import Config

from .context import Context, HostsUnreachable, emit, warn
from .options import float_between, leaf, pgbouncer_option


def cmd_snapshot(ctx: Context) -> int:
    from concurrent.futures import ThreadPoolExecutor

    from probes.config import load_config

    args = ctx.args
    if args.from_file is not None:
        return _recorded_snapshot(ctx)
    if args.at is not None:
        raise UsageError("--at reads a recording: give --from FILE")
    config = load_config(getattr(args, "config", None))
    targets = ctx.targets(config)
    if len(targets) == 1:  # one database: its failure is the command's (one line, exit 2)
        name, target = targets[0]
        snapshots = [_snapshot_of(target, config, name, args.rates)]
    else:
        # Several: each on its own thread, so that one that is down costs its own timeout only;
        # one that cannot be reached is a disconnected snapshot, as the dashboard shows it.
        with ThreadPoolExecutor(max_workers=len(targets), thread_name_prefix="snapshot") as pool:
            futures = [pool.submit(_snapshot_or_disconnected, target, config, name, args.rates) for name, target in targets]
            snapshots = [future.result() for future in futures]
    _print_snapshots(snapshots, args.json)
    unreachable = [(s.host, str(s.extra.get("connection_error"))) for s in snapshots if not s.connected]
    if unreachable:
        raise HostsUnreachable(unreachable)
    return 0


def _recorded_snapshot(ctx: Context) -> int:
    """`snapshot --from FILE --at TIME`: each recorded host as it was at TIME (the latest snapshot
    taken at or before it), as `snapshot` printed it then. No database is touched."""
    from probes.recording import Recording, read_warnings

    args = ctx.args
    if ctx.dsns or ctx.pgbouncers or args.rates:
        raise UsageError("--from reads a recording: --dsn, --pgbouncer and --rates do not apply")
    with read_warnings(warn):  # what was skipped as damaged: one warning line; no snapshot at all: exit 2
        recording = Recording(args.from_file, keep_lines=False)  # one instant: its times, then its lines
        snapshots = recording.at(recording.instant(args.at) if args.at is not None else recording.end)
    _print_snapshots(list(snapshots.values()), args.json)
    return 0


def _print_snapshots(snapshots: list, as_json: bool) -> None:
    """One JSON line each, or the readable report under a line naming its host when there are several."""
    from tui.report import render

    for snapshot in snapshots:
        if as_json:
            emit(snapshot.to_json())
        else:
            if len(snapshots) > 1:
                print(f"== {inert_line(snapshot.host)} ==")
            print(render(snapshot))


def _snapshot_of(target: Target, config: Config, host: str, rates: float):
    import time as _time

    from probes.diagnosis import Diagnoser
    from probes.postgres import open_probe_connection
    from probes.sampler import probes_for, run_cycle

    probes = probes_for(target, config)
    diagnoser = Diagnoser()  # the queues' verdicts: over both cycles with --rates
    with open_probe_connection(target) as conn:
        snapshot = run_cycle(target, probes=probes, conn=conn, host=host, diagnoser=diagnoser)
        if rates:
            # Rates are differences of cumulative counters: a second cycle after --rates seconds.
            _time.sleep(rates)
            snapshot = run_cycle(target, probes=probes, conn=conn, host=host, diagnoser=diagnoser)
    return snapshot


def _snapshot_or_disconnected(target: Target, config: Config, host: str, rates: float):
    from probes.sampler import unreachable_snapshot

    try:
        return _snapshot_of(target, config, host, rates)
    except QueuetopError as exc:
        return unreachable_snapshot(target, first_line(exc), host)


def register(commands: argparse._SubParsersAction) -> None:
    p = leaf(commands, "snapshot", cmd_snapshot, "run every probe once and print what they saw")
    pgbouncer_option(p)
    p.add_argument("--json", action="store_true", help="print the snapshot as one JSON object (version 1)")
    p.add_argument("--config", default=argparse.SUPPRESS, help="TOML file declaring your own queue tables")
    p.add_argument("--rates", type=float_between(0, 3600), default=0.0, metavar="SECONDS",
                   help="sample twice, SECONDS apart, so that the queues' and the server's rates are known (default: once, "
                   "rates null)")
    p.add_argument("--from", dest="from_file", default=None, metavar="FILE",
                   help="print a recorded instant instead (queuetop record): no database is touched")
    p.add_argument("--at", default=None, metavar="TIME",
                   help="with --from: ISO-8601 (UTC unless it says), HH:MM[:SS] (UTC) or +SECONDS from the start "
                   "(default: the recording's last instant)")
