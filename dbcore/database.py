"""Opening psycopg connections with queuetop's identity, and what a statement runs on.

PostgreSQL is spoken through psycopg directly: the engine's hot paths (claim, ack) cannot afford
an ORM layer, and psycopg's automatic server-side preparation is what makes them fast.

Where to connect is a `Target` (dbcore/target.py), read from a DSN and masked for printing by
dbcore/dsn.py; both are re-exported here, where the engine, the probes and the dashboard have
always imported them from.
"""

from __future__ import annotations

import os
from typing import Any, Protocol, TypeAlias, TypeVar, overload

import psycopg
from psycopg import conninfo as pg_conninfo
from psycopg.rows import RowFactory, TupleRow

from .deadline import NoAnswer

# Re-exported (`X as X`): where the engine, the probes and the dashboard import them from.
from .dsn import ENV_DSN as ENV_DSN
from .dsn import has_password as has_password
from .dsn import hide_secrets as hide_secrets
from .dsn import mask_dsn as mask_dsn
from .dsn import resolve_target as resolve_target
from .dsn import secrets_of as secrets_of
from .errors import ConnectionFailed, OperationFailed, QueuetopError, Unanswered, UsageError, first_line
from .pgversions import UnsupportedServer, check_supported
from .pooler import settle, startup_options_allowed
from .redact import MASK as MASK
from .target import Target as Target
from .target import host_name as host_name

DictRow: TypeAlias = dict[str, Any]
Row = TypeVar("Row")
# What a statement runs on: a connection, or a cursor kept for a connection's life (the worker's
# loop), or a SQL Server session (dbcore/mssql.py). Each has execute(), which returns a cursor
# (or a cursor's surface: fetchone, fetchall, rowcount, iteration).
class Executor(Protocol):
    def execute(self, query: Any, params: Any = None, /) -> Any: ...

# What a session of either dialect raises when the database fails a statement or goes away:
# psycopg's own errors, or another dialect's driver errors translated to queuetop's.
SESSION_ERRORS: tuple[type[Exception], ...] = (psycopg.Error, QueuetopError)


def describe_connect_error(target: Target, exc: BaseException) -> str:
    """One line saying why a connection failed, with the DSN masked and no secret echoed."""
    return f"cannot connect to {target.masked}: {hide_secrets(first_line(exc), secrets_of(target.conninfo))}"


def for_child_process(target: Target) -> tuple[str, dict[str, str]]:
    """The conninfo and environment to hand a child process (pgbench, node): a command line is
    world-readable in /proc, so the password travels in the child's environment (PGPASSWORD,
    which libpq and node-postgres both read) and the conninfo keeps none."""
    params = pg_conninfo.conninfo_to_dict(target.conninfo)
    password = params.pop("password", None)
    env = {**os.environ}
    if password is not None:
        env["PGPASSWORD"] = str(password)
    return pg_conninfo.make_conninfo("", **params), env


def server_options(settings: dict[str, str]) -> str:
    """Server settings as libpq's `options` connection parameter (`-c key=value ...`)."""
    # libpq splits `options` at spaces; a backslash escapes one (read\\ committed).
    return " ".join(f"-c {key}={value.replace(chr(92), chr(92) * 2).replace(' ', chr(92) + ' ')}" for key, value in settings.items())


def connection_kwargs(application_name: str, connect_timeout: int, options: dict[str, str] | None,
                      conninfo: str = "") -> dict[str, Any]:
    """The connection parameters every queuetop session sets (pooled ones too). A connect
    timeout the DSN (or PGCONNECT_TIMEOUT) sets is the user's and is kept: `connect_timeout`
    is only the default."""
    kwargs: dict[str, Any] = {"application_name": application_name[:63]}
    if not _sets_connect_timeout(conninfo):
        kwargs["connect_timeout"] = connect_timeout
    if options:
        kwargs["options"] = server_options(options)
    return kwargs


def _sets_connect_timeout(conninfo: str) -> bool:
    if os.environ.get("PGCONNECT_TIMEOUT"):
        return True
    try:
        return "connect_timeout" in pg_conninfo.conninfo_to_dict(conninfo) if conninfo else False
    except psycopg.Error:
        return False


@overload
def connect(target: Target, *, application_name: str, autocommit: bool = True, connect_timeout: int = 10,
            options: dict[str, str] | None = None) -> psycopg.Connection[TupleRow]: ...
@overload
def connect(target: Target, *, application_name: str, autocommit: bool = True, connect_timeout: int = 10,
            options: dict[str, str] | None = None, row_factory: RowFactory[Row]) -> psycopg.Connection[Row]: ...
def connect(
    target: Target,
    *,
    application_name: str,
    autocommit: bool = True,
    connect_timeout: int = 10,
    options: dict[str, str] | None = None,
    row_factory: RowFactory[Any] | None = None,
) -> psycopg.Connection[Any]:
    """Open a psycopg connection that identifies itself as queuetop's (rows as tuples, or as
    `row_factory` makes them).

    `options` are server settings for the session (statement_timeout, ...): sent at connection
    start to a server known to be direct (no extra round trip), set by one statement after it on
    a session a pooler pins, and not set on one it does not pin (dbcore/pooler.py: each
    transaction then sets its own).
    """
    if target.dialect != "postgresql":
        # The engine and the probes reach SQL Server through the dialect seam (dbcore/dialect.py)
        # command by command; those not moved yet say so rather than hand a URL to libpq.
        raise UsageError(f"this command does not reach SQL Server yet (docs/mssql.md lists those that do): {target.masked}")
    # Settings go in libpq's `options` only to a server known to be direct: a stock PgBouncer
    # refuses that start-up parameter (dbcore/pooler.py); elsewhere `settle` applies them.
    at_startup = bool(options) and startup_options_allowed(target)
    kwargs = connection_kwargs(application_name, connect_timeout, options if at_startup else None, target.conninfo)
    if row_factory is not None:
        kwargs["row_factory"] = row_factory
    try:
        conn = psycopg.connect(target.conninfo, autocommit=autocommit, **kwargs)
    except psycopg.OperationalError as exc:
        refuse_if_too_old(target.conninfo, exc)
        raise ConnectionFailed(describe_connect_error(target, exc)) from None
    try:
        check_supported(conn.info.server_version)  # before any statement: nothing is written on a server too old
        # Its statements (through a pooler, a server connection to wait for) within the connect timeout too.
        settle(conn, target, options, sent_at_startup=at_startup, answer_within_s=connect_timeout)
    except UnsupportedServer:
        conn.close()
        raise
    except NoAnswer as exc:  # a pooler with no server connection to give (dbcore/deadline.py): its one line
        conn.close()
        raise Unanswered(str(exc)) from None
    except psycopg.OperationalError as exc:
        conn.close()
        raise ConnectionFailed(describe_connect_error(target, exc)) from None
    except BaseException:
        conn.close()
        raise
    return conn


def refuse_if_too_old(conninfo: str, exc: BaseException) -> None:
    """A server that does not know a setting a session asks for at its start (the probes'
    plan_cache_mode is PostgreSQL 12's) refuses the connection: if the server is older than the
    minimum, that is what to say, not the setting (UnsupportedServer). Asked on a plain connection."""
    if "unrecognized configuration parameter" not in str(exc):
        return
    try:
        with psycopg.connect(conninfo, **connection_kwargs("queuetop-version-check", 5, None, conninfo)) as conn:
            version_num = conn.info.server_version
    except psycopg.Error:
        return
    check_supported(version_num)


def one(cursor: psycopg.Cursor[Row]) -> Row:
    """The row of a statement that always returns one (an aggregate, a function call, an
    INSERT ... RETURNING): its absence is a failure, not a case to handle."""
    row = cursor.fetchone()
    if row is None:
        raise OperationFailed("the database returned no row where one was expected")
    return row
