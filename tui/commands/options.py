"""How a command's parser is made: the parser class (a usage error is our one line), numbers
bounded to what the engine and PostgreSQL can take, the connection options every command
shares, and `leaf`, which makes a command (and refuses a writing one under --read-only)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from dbcore.database import ENV_DSN
from dbcore.errors import UsageError
from dbcore.pooler import POOLER_MODES
from dbcore.redact import mask_arguments
from tui.title import PROG

from .context import Context


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports a usage error as our one-line error (exit 2) instead of a usage dump.

    No abbreviations, here and in every sub-command (allow_abbrev is this class's default, and
    the sub-parsers are of this class): `--ds` taken for `--dsn` is a DSN under a name nothing
    looks for to mask. argparse's messages quote the command line ("unrecognized arguments:
    --ds=postgresql://u:pw@h"): every argument that may hold a secret is masked in them."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**{"allow_abbrev": False, **kwargs})
        self._given: list[str] = []

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        self._given = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> None:  # type: ignore[override]
        # from None: with --debug the traceback would show argparse's own error, unmasked.
        raise UsageError(f"{mask_arguments(message, self._given)} (see `{self.prog} --help`)") from None


# Bounds that keep every number inside what the engine and PostgreSQL can take (an interval of
# 1e13 seconds, a bigint past 2**63, a count that would build 10**20 bodies): one line, exit 2.
MAX_SECONDS = 366 * 24 * 3600.0
MAX_COUNT = 100_000_000
BIGINT_MAX = 2**63 - 1


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def positive_float(text: str) -> float:
    """More than 0, at most a year's worth of seconds (or a rate as large)."""
    value = _number(text)
    if not 0 < value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"{text!r} must be more than 0 and at most {MAX_SECONDS:,.0f}")
    return value


positive_float.__name__ = "_positive_float"  # what argparse (and tests/test_cli_promises.py) knows it by


def _shown(value: float) -> str:
    """A bound as the error states it: 3,600, 0.1."""
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:g}"


def float_between(low: float, high: float) -> Callable[[str], float]:
    """A finite number from low to high, both included."""
    def parse(text: str) -> float:
        value = _number(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text!r} must be between {_shown(low)} and {_shown(high)}")
        return value

    parse.__name__ = "number"  # what argparse names in its own messages
    return parse


def int_between(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text!r} must be between {low:,} and {high:,}")
        return value

    parse.__name__ = "whole number"  # what argparse names in its own messages
    return parse


def ints_between(low: int, high: int) -> Callable[[str], list[int]]:
    """A comma-separated list of whole numbers, each between `low` and `high` (`2,8`)."""
    one = int_between(low, high)

    def parse(text: str) -> list[int]:
        values = [one(part.strip()) for part in text.split(",")]
        if len(set(values)) != len(values):
            raise argparse.ArgumentTypeError(f"{text!r} names a number twice")
        return values

    parse.__name__ = "list of whole numbers"
    return parse


positive_count = int_between(1, MAX_COUNT)
bigint = int_between(0, BIGINT_MAX)


def connection_options(parser: argparse.ArgumentParser, *, top: bool = False) -> None:
    # Leaf parsers use SUPPRESS so that an option given before the sub-command is not reset.
    default = None if top else argparse.SUPPRESS
    # Repeatable, before the sub-command and after it: the two lists are one (Context.dsns), rather
    # than the sub-command's replacing what was given before it.
    parser.add_argument("--dsn", default=default, action="append", dest="dsn" if top else "dsn_after",
                        help="database to use: SQLAlchemy URL, libpq URI or key=value string (default: "
                        f"${ENV_DSN}, "
                        "else the config's [[targets]], else the embedded server); repeat it to watch several "
                        "(the dashboard, snapshot, export and record)")
    parser.add_argument("--data-dir", default=default, help="data directory of the embedded server (default: the user's data dir)")
    parser.add_argument("--pooler", choices=POOLER_MODES, default=default,
                        help="what stands between queuetop and the server: a pooler in session or transaction mode, or "
                             "none (direct); default auto: found out, a pooler found is taken as transaction mode (no "
                             "prepared statements, no LISTEN, settings per transaction)")
    parser.add_argument("--debug", action="store_true", default=False if top else argparse.SUPPRESS, help="show tracebacks")
    if not top:  # the top level's own --read-only is the dashboard's too; given after the command, the same flag
        parser.add_argument("--read-only", action="store_true", default=argparse.SUPPRESS,
                            help="refuse every command that writes to the database (exit 2, nothing written)")


def pgbouncer_option(parser: argparse.ArgumentParser, *, top: bool = False) -> None:
    """--pgbouncer DSN, on the commands that watch (the dashboard, snapshot, export, record): the
    admin console of the PgBouncer in front of the target (the pooler probe). Repeatable as --dsn,
    before the sub-command and after it: one per --dsn, in the same order (Context.targets)."""
    parser.add_argument("--pgbouncer", default=None if top else argparse.SUPPRESS, action="append",
                        dest="pgbouncer" if top else "pgbouncer_after", metavar="DSN",
                        help="the admin console of the PgBouncer in front of the database (its `pgbouncer` database, as a "
                        "user in stats_users): adds its pools (the Pooler panel, snapshot's `pooler`, metrics) and the "
                        "`starved` verdict; with several --dsn, give it once per --dsn in the same order (\"\" for none)")


def leaf(sub: argparse._SubParsersAction, name: str, func: Callable[[Context], int], help_text: str, *,
         writes: bool = False) -> argparse.ArgumentParser:
    """A command. `writes`: it changes the database, so --read-only refuses it before it connects;
    declared here, where the command is, so that no write command can forget the check."""
    parser = sub.add_parser(name, help=help_text, description=help_text)
    connection_options(parser)
    if writes:
        command = parser.prog.removeprefix(f"{PROG} ")

        def refuse_when_read_only(ctx: Context) -> int:
            if getattr(ctx.args, "read_only", False):
                raise UsageError(f"--read-only: {command!r} writes to the database; refused, nothing written")
            ctx.writes = True  # so its sessions refuse a standby before anything is written (Context.session)
            return func(ctx)

        parser.set_defaults(func=refuse_when_read_only, writes=True)
    else:
        parser.set_defaults(func=func, writes=False)
    return parser
