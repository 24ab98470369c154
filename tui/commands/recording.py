"""`queuetop record` (every target's snapshots into a file) and `queuetop replay` (the dashboard
on such a file)."""

from __future__ import annotations

import argparse
import re
import sys
import threading

from dbcore.errors import OperationFailed
from tui.title import PROG

from .context import Context, emit, warn
from .options import float_between, int_between, leaf, pgbouncer_option, positive_float
from .watching import sampling, watched


def cmd_record(ctx: Context) -> int:
    """Sample every target on its schedule and write each snapshot to FILE (compressed JSON lines,
    rotated by size) until --duration ends or SIGINT/SIGTERM; then one JSON line of what was written."""
    from probes.recording import DEFAULT_KEEP, Recorder

    args = ctx.args
    config, targets, interval = watched(ctx)
    # With a time window, the window decides which rotated files go; --keep caps them only if given.
    keep = args.keep if args.keep is not None else MAX_KEEP if args.retain is not None else DEFAULT_KEEP
    recorder = Recorder(args.file, max_bytes=int(args.max_size * 1024 * 1024), keep=keep, retain_s=args.retain)
    stop = threading.Event()
    failures: list[OSError] = []

    def write(snapshot) -> None:  # in each sampler's thread
        try:
            recorder.write(snapshot)
        except OSError as exc:  # a full disk: stop, say so, keep what was written
            failures.append(exc)
            stop.set()

    print(f"{PROG}: recording {', '.join(name for name, _t in targets)} every {interval:g}s into {args.file}",
          file=sys.stderr, flush=True)
    try:
        with sampling(targets, config, interval, write, stop):
            stop.wait(args.duration)
    finally:
        try:
            recorder.close()
        except OSError as exc:
            failures.append(exc)
    said = {"file": str(args.file), "snapshots": recorder.snapshots, "hosts": [name for name, _t in targets],
            "files": [str(path) for path in recorder.files()]}
    if args.retain is not None:
        said |= {"retain_s": args.retain, "files_dropped": recorder.dropped_files}
    emit(said)
    if failures:
        raise OperationFailed(f"recording stopped after {recorder.snapshots} snapshot(s): {failures[0].strerror or failures[0]}")
    return 0


def cmd_replay(ctx: Context) -> int:
    """The dashboard on a recording. What reading it skipped as damaged is one warning line on
    the terminal before the dashboard opens; while it runs, warnings go to the log file (on the
    terminal they would scribble over the dashboard)."""
    from probes.recording import read_warnings
    from tui import app

    log_to_file = getattr(app, "_log_to_file", None)
    if log_to_file is not None:
        log_to_file()
    with read_warnings(warn):
        return app.run_replay(ctx)


MAX_KEEP = 1000
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd]?)")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str) -> float:
    """A time window: `24h`, `90m`, `3600s`, `2d` or plain seconds; 1 s to 366 days."""
    match = _DURATION.fullmatch(text.strip().lower())
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (e.g. 24h, 90m, 3600s, or seconds)")
    seconds = float(match.group(1)) * _UNIT_S[match.group(2)]
    if not 1 <= seconds <= 366 * 86400:
        raise argparse.ArgumentTypeError(f"{text!r} must be between 1s and 366d")
    return seconds


duration.__name__ = "number"  # bounded: what argparse (and tests/test_cli_promises.py) knows it by


def register(commands: argparse._SubParsersAction) -> None:
    p = leaf(commands, "record", cmd_record, "write every target's snapshots to FILE as compressed JSON lines")
    pgbouncer_option(p)
    p.add_argument("file", metavar="FILE")
    p.add_argument("--duration", type=positive_float, default=None, metavar="SECONDS",
                   help="stop after this long (default: until Ctrl-C or SIGTERM)")
    p.add_argument("--interval", type=float_between(0.1, 3600), default=None, metavar="SECONDS",
                   help="seconds between samples, 0.1 to 3600 (default: the config's probes.interval, 2)")
    p.add_argument("--max-size", type=float_between(0.01, 1_000_000), default=64.0, metavar="MB",
                   help="rotate FILE when it passes this size: FILE.1, FILE.2, ...; 0.01 to 1000000 (default 64)")
    p.add_argument("--keep", type=int_between(0, MAX_KEEP), default=None,
                   help="rotated files to keep, 0 to 1000 (default 5; with --retain, no cap but the window's: a --keep given "
                        "still caps them, a disk bound that wins over the window)")
    p.add_argument("--retain", type=duration, default=None, metavar="DURATION",
                   help="keep a time window on disk (24h, 90m, 3600s, or seconds): FILE is also rotated every eighth of "
                        "it, and a rotated file last written before the window is deleted whole, so the files hold the "
                        "last DURATION and at most an eighth more; beside --max-size")
    p.add_argument("--config", default=argparse.SUPPRESS, help="TOML file declaring your queue tables and [[targets]]")

    p = leaf(commands, "replay", cmd_replay, "the dashboard on a recording (queuetop record): no database")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--at", default=None, metavar="TIME", help="start at this time (as snapshot --at; default: the start)")
    p.add_argument("--speed", type=float_between(0.01, 1000), default=1.0, help="times real time, 0.01 to 1000 (default 1)")
    p.add_argument("--paused", action="store_true", help="open paused (p plays)")
