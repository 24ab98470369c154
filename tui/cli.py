"""The `queuetop` command line. The contract (commands, output, exit codes) is PRODUCT.md's.

The commands are in tui/commands/, a module per group; this module builds the parser from the
groups, runs the command, and is the one place an error becomes its line on stderr and its
exit code."""

from __future__ import annotations

import logging
import os
import sys
import traceback
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from dbcore.database import mask_dsn
from dbcore.dialect import translate_error
from dbcore.errors import QueuetopError, first_line
from dbcore.redact import mask_raw
from dbcore.text import inert_line
from queues import __version__
from tui.commands import bench, demo, engine, export, jobs, recording, server, snapshot
from tui.commands.context import Context, HostsUnreachable
from tui.commands.options import ArgumentParser, connection_options, float_between, pgbouncer_option
from tui.title import PROG, set_title

# The command groups, in the order `queuetop --help` lists them (recording: record and replay).
GROUPS = (snapshot, recording, engine, jobs, export, demo, bench, server)


def cmd_dashboard(ctx: Context) -> int:
    from tui.app import run_dashboard

    return run_dashboard(ctx)


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog=PROG, description="A terminal dashboard for database-backed queues and locks.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    connection_options(parser, top=True)
    pgbouncer_option(parser, top=True)
    parser.add_argument("--interval", type=float_between(0.1, 3600), default=2.0,
                        help="dashboard refresh interval in seconds, 0.1 to 3600 (default 2)")
    parser.add_argument("--read-only", action="store_true", help="disable every action that changes the database")
    parser.add_argument("--no-demo", action="store_true", help="do not start the demo workload on the embedded server")
    parser.add_argument("--engine", action="store_true",
                        help="turn the reference engine's controls on for a database other than the embedded one")
    parser.add_argument("--filter", default=None, metavar="EXPR",
                        help="the Sessions panel's filter at start, as / takes it: app:worker user:ops state:idle db:x "
                             "query:UPDATE pid:N dur>5s, or a word (docs/dashboard.md)")
    parser.add_argument("--min-duration", type=float_between(0, 86_400), default=None, metavar="SECONDS",
                        help="list only the sessions at it this long or longer, 0 to 86,400 (the filter's dur>=S: "
                             "a running query's age, an idle transaction's)")
    parser.add_argument("--config", default=None, help="TOML file declaring your own queue tables (default: the user's config dir)")
    parser.set_defaults(func=cmd_dashboard)
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", parser_class=ArgumentParser)
    for group in GROUPS:
        group.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    _mask_process_title(argv)  # first: ps shows the command line to every user of the host
    logging.basicConfig(level=logging.WARNING, format="queuetop: %(levelname)s: %(message)s")
    # platformdirs warns, over two lines, on a host without a login session (SSH without systemd,
    # CI) whenever pgserver is imported: nothing an operator can act on, and an error must be one line.
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    debug = "--debug" in argv
    ctx: Context | None = None
    # Every log record (stderr, the dashboard's log file), whoever writes it, without the DSNs' secrets.
    records = logging.getLogRecordFactory()
    logging.setLogRecordFactory(_scrubbed_records(records, lambda text: ctx.scrub(text) if ctx is not None else text))
    try:
        args = build_parser().parse_args(argv)
        ctx = Context(args)
        return args.func(ctx)
    except HostsUnreachable as exc:
        # After what the others showed: a line per host that could not be reached, no traceback.
        for host, reason in exc.failures:
            _error_line(f"{inert_line(host)}: {inert_line(ctx.scrub(reason) if ctx is not None else reason)}")
        return exc.exit_code
    except QueuetopError as exc:
        return _fail(ctx, str(exc), exc.exit_code, debug)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # Output piped into `head` and friends: not an error worth a traceback.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except Exception as exc:
        # A driver's error: a lost connection (exit 2), a missing privilege (a configuration
        # problem, exit 2), anything else the database refused (exit 1). See the dialects' translate().
        error = translate_error(exc, ctx._target if ctx is not None else None)
        if error is not None:
            return _fail(ctx, str(error), error.exit_code, debug)
        return _fail(ctx, f"internal error: {type(exc).__name__}: {first_line(exc)} (rerun with --debug for details)", 1, debug)
    finally:
        logging.setLogRecordFactory(records)


def _mask_process_title(argv: list[str]) -> None:
    """`ps` shows a process's command line to every user for its whole life: rewrite the title
    with every argument that may hold a secret masked, a --dsn value by its parser (mask_dsn),
    any other by the parser-free mask (dbcore/redact.py: a DSN given where none is expected).
    The console script (tui/entry.py) set a coarser one before the slow imports."""
    shown = []
    for index, arg in enumerate(argv):
        try:
            if index and argv[index - 1] in ("--dsn", "--pgbouncer"):
                value = mask_dsn(arg)
            elif arg.startswith(("--dsn=", "--pgbouncer=")):
                option, _, dsn = arg.partition("=")
                value = f"{option}={mask_dsn(dsn)}"
            else:
                value = mask_raw(arg)
        except Exception:  # the title must never stop the command
            value = mask_raw(arg)
        shown.append(value)
    if shown != argv:
        set_title(shown)


def _scrubbed_records(factory: Callable[..., logging.LogRecord], scrub: Callable[[str], str]) -> Callable[..., logging.LogRecord]:
    """A log record factory: `factory`'s records, their message (and traceback) through `scrub`."""

    def make(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = factory(*args, **kwargs)
        try:
            message = record.getMessage()
            clean = scrub(message)
            if clean != message:
                record.msg, record.args = clean, None
            if record.exc_info and not record.exc_text:
                record.exc_text = scrub(logging.Formatter().formatException(record.exc_info))
        except Exception:  # a record that cannot be formatted: logging reports it as it would have
            pass
        return record

    return make


def _fail(ctx: Context | None, message: str, code: int, debug: bool) -> int:
    scrub = ctx.scrub if ctx is not None else str
    if debug:
        print(scrub(traceback.format_exc()), end="", file=sys.stderr)
    # One line, inert: an error may quote a name or a message another application wrote.
    _error_line(inert_line(scrub(message)))
    return code


def _error_line(text: str) -> None:
    print(f"{PROG}: error: {text}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
