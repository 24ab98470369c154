"""Where to connect: DSN parsing (SQLAlchemy URLs, libpq URIs and key=value strings), masking of
passwords for anything printed, and opening psycopg connections with queuetop's identity.

PostgreSQL is spoken through psycopg directly: the engine's hot paths (claim, ack) cannot afford
an ORM layer, and psycopg's automatic server-side preparation is what makes them fast.
SQLAlchemy's URL parser is used so that `postgresql+psycopg://` URLs work as users expect.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias, TypeVar, overload
from urllib.parse import quote, urlencode

import psycopg
from psycopg import conninfo as pg_conninfo
from psycopg.rows import RowFactory, TupleRow
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from .errors import ConnectionFailed, OperationFailed, QueuetopError, UsageError, first_line

DictRow: TypeAlias = dict[str, Any]
Row = TypeVar("Row")
# What a statement runs on: a connection, or a cursor kept for a connection's life (the worker's
# loop), or a SQL Server session (dbcore/mssql.py). Each has execute(), which returns a cursor
# (or a cursor's surface: fetchone, fetchall, rowcount, iteration).
class Executor(Protocol):
    def execute(self, query: Any, params: Any = None, /) -> Any: ...

ENV_DSN = "QUEUETOP_DSN"
MASK = "***"
# What a session of either dialect raises when the database fails a statement or goes away:
# psycopg's own errors, or another dialect's driver errors translated to queuetop's.
SESSION_ERRORS: tuple[type[Exception], ...] = (psycopg.Error, QueuetopError)

# libpq URI schemes; anything of the form `word+driver://` is a SQLAlchemy URL.
_LIBPQ_SCHEMES = ("postgresql://", "postgres://")
_SQLALCHEMY_URL = re.compile(r"^[A-Za-z][A-Za-z0-9]*(\+[A-Za-z0-9_]+)?://")


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """A database to connect to, resolved from what the user typed."""

    dialect: str  # "postgresql" | "mssql"
    conninfo: str  # libpq conninfo for PostgreSQL; the SQLAlchemy URL string for others
    masked: str  # printable form, password replaced by ***
    embedded: bool = False

    def __str__(self) -> str:  # never let the raw DSN leak through formatting
        return self.masked

    def __repr__(self) -> str:
        return f"Target(dialect={self.dialect!r}, dsn={self.masked!r}, embedded={self.embedded})"


def has_password(target: Target) -> bool:
    """Whether the DSN itself carries a password (rather than ~/.pgpass, PGPASSWORD or a service)."""
    try:
        if target.dialect == "postgresql":
            return bool(pg_conninfo.conninfo_to_dict(target.conninfo).get("password"))
        return bool(make_url(target.conninfo).password)
    except (psycopg.Error, ArgumentError, ValueError):
        return True


def host_name(target: Target) -> str:
    """A short name for a target, for a tab or a metric label: `host[:port]/database`, `service
    NAME`, or `embedded`; never a password (built from the parsed DSN's host, port and database)."""
    if target.embedded:
        return "embedded"
    try:
        if target.dialect == "postgresql":
            params = pg_conninfo.conninfo_to_dict(target.conninfo)
            host, port, database = params.get("host"), params.get("port"), params.get("dbname")
            if not host and params.get("service"):
                return f"service {params['service']}" + (f"/{database}" if database else "")
            default_port = "5432"
        else:
            url = make_url(target.conninfo)
            host, port, database = url.host, url.port, url.database
            default_port = "1433"
    except (psycopg.Error, ArgumentError, ValueError):
        return target.masked
    host = str(host or os.environ.get("PGHOST") or "localhost").split(",")[0]
    if host.startswith("/"):
        host = "local"  # a Unix socket directory
    port_text = f":{port}" if port and str(port).split(",")[0] != default_port else ""
    return f"{host}{port_text}/{database}" if database else f"{host}{port_text}"


def mask_dsn(dsn: str) -> str:
    """`dsn` as it may be printed or logged: any password replaced by ***, whatever form the DSN
    is in. Every DSN queuetop shows goes through here.

    The DSN is read with the parser that will use it (libpq's, through psycopg, for a URI or a
    key=value string; SQLAlchemy's for a URL), not guessed at with a pattern: a password may
    hold `?`, `#`, `/`, quotes or backslashes. A DSN with a password is shown rebuilt from what
    the parser found; one the parser cannot read, or that still looks like it carries a
    password the parser did not see (`user:pa/ss@host` reads to libpq as host `user`), is
    shown with everything that could be secret cut out."""
    text = dsn.strip()
    if text.startswith(_LIBPQ_SCHEMES) or not _SQLALCHEMY_URL.match(text):
        try:
            params = pg_conninfo.conninfo_to_dict(text)
        except psycopg.Error:
            return _mask_unread(text)
        uri = text.startswith(_LIBPQ_SCHEMES)
        if "password" in params:
            return _libpq_uri(params) if uri else pg_conninfo.make_conninfo("", **{**params, "password": MASK})
        return _mask_unread(text) if uri and _userinfo_password(text) else text
    try:
        url = make_url(text)
    except (ArgumentError, ValueError):
        return _mask_unread(text)
    if any(key.lower() == "password" for key in url.query):
        url = url.update_query_dict({key: MASK for key in url.query if key.lower() == "password"})
    return url.render_as_string(hide_password=True).replace("%2A%2A%2A", MASK)


def _userinfo_password(uri: str) -> bool:
    """Whether a URI has `user:something@` before its host, read the way a person typed it."""
    rest = uri.split("://", 1)[1]
    return "@" in rest and ":" in rest.rsplit("@", 1)[0]


def _mask_unread(text: str) -> str:
    """A DSN the parser could not read: keep the scheme and what follows the last @, the user
    name, and no value of any password parameter."""
    if "://" in text:
        scheme, rest = text.split("://", 1)
        if "@" in rest:
            userinfo, after = rest.rsplit("@", 1)
            user = userinfo.split(":", 1)[0]
            text = f"{scheme}://{user}{':' + MASK if ':' in userinfo else ''}@{after}"
        return re.sub(r"([?&]password=)[^&]*", rf"\g<1>{MASK}", text, flags=re.IGNORECASE)
    index = text.lower().find("password")
    return text if index < 0 else text[:index] + f"password={MASK}"  # the rest may be part of it


def _libpq_uri(params: dict[str, Any]) -> str:
    """A libpq URI rebuilt from its parsed parameters, the password as ***."""
    hosts = [h for h in str(params.get("host", "")).split(",") if h] if params.get("host") else []
    ports = str(params.get("port", "")).split(",") if params.get("port") else []
    sockets = any(h.startswith("/") for h in hosts)
    netloc = ""
    if hosts and not sockets:
        netloc = ",".join(h + (f":{ports[i] if len(ports) > 1 else ports[0]}" if ports else "") for i, h in enumerate(hosts))
    user = quote(str(params.get("user", "")), safe="")
    query = {k: str(v) for k, v in params.items()
             if k not in ("user", "password", "dbname") and (sockets or k not in ("host", "port"))}
    return (f"postgresql://{user}:{MASK}@{netloc}" + (f"/{quote(str(params['dbname']), safe='')}" if params.get("dbname") else "")
            + (f"?{urlencode(query, safe='/,')}" if query else ""))


def resolve_target(dsn: str | None) -> Target | None:
    """Turn --dsn / QUEUETOP_DSN into a Target; None means "use the embedded server"."""
    raw = dsn if dsn is not None else os.environ.get(ENV_DSN)
    if raw is None or not raw.strip():
        return None
    raw = raw.strip()
    masked = mask_dsn(raw)
    if raw.startswith(_LIBPQ_SCHEMES) or not _SQLALCHEMY_URL.match(raw):
        # libpq URI or key=value: let libpq's own parser judge it (and keep PGHOST,
        # PGSERVICE, ~/.pgpass working for whatever the string leaves out).
        try:
            pg_conninfo.conninfo_to_dict(raw)
        except psycopg.ProgrammingError as exc:
            raise UsageError(f"invalid DSN {masked}: {first_line(exc)}") from None
        return Target(dialect="postgresql", conninfo=raw, masked=masked)
    try:
        url = make_url(raw)
    except (ArgumentError, ValueError) as exc:
        raise UsageError(f"invalid DSN {masked}: {exc}") from None
    backend = url.get_backend_name()
    if backend in ("postgresql", "postgres"):
        return Target(dialect="postgresql", conninfo=_url_to_conninfo(url), masked=masked)
    if backend == "mssql":
        from .mssql import parse_url

        parse_url(raw, masked)
        return Target(dialect="mssql", conninfo=raw, masked=masked)
    raise UsageError(f"unsupported database {backend!r} in DSN {masked}")


def _url_to_conninfo(url: URL) -> str:
    params: dict[str, Any] = {}
    if url.host:
        params["host"] = url.host
    if url.port:
        params["port"] = url.port
    if url.username:
        params["user"] = url.username
    if url.password is not None:
        params["password"] = url.password
    if url.database:
        params["dbname"] = url.database
    for key, value in url.query.items():
        # SQLAlchemy keeps repeated keys as tuples; libpq wants comma-separated lists (host=a,b).
        params[key] = ",".join(value) if isinstance(value, tuple) else value
    return pg_conninfo.make_conninfo(**params)


def describe_connect_error(target: Target, exc: BaseException) -> str:
    """One line saying why a connection failed, with the DSN masked and no password echoed."""
    reason = first_line(exc)
    password = pg_conninfo.conninfo_to_dict(target.conninfo).get("password") if target.dialect == "postgresql" else None
    if password:
        reason = reason.replace(str(password), MASK)
    return f"cannot connect to {target.masked}: {reason}"


def server_options(settings: dict[str, str]) -> str:
    """Server settings as libpq's `options` connection parameter (`-c key=value ...`)."""
    return " ".join(f"-c {key}={value}" for key, value in settings.items())


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

    `options` are server settings applied at connection start (statement_timeout, ...), so they
    cost no extra round trip.
    """
    if target.dialect != "postgresql":
        # The engine and the probes reach SQL Server through the dialect seam (dbcore/dialect.py)
        # command by command; those not moved yet say so rather than hand a URL to libpq.
        raise UsageError(f"this command does not reach SQL Server yet (docs/mssql.md lists those that do): {target.masked}")
    kwargs = connection_kwargs(application_name, connect_timeout, options, target.conninfo)
    if row_factory is not None:
        kwargs["row_factory"] = row_factory
    try:
        return psycopg.connect(target.conninfo, autocommit=autocommit, **kwargs)
    except psycopg.OperationalError as exc:
        raise ConnectionFailed(describe_connect_error(target, exc)) from None


def one(cursor: psycopg.Cursor[Row]) -> Row:
    """The row of a statement that always returns one (an aggregate, a function call, an
    INSERT ... RETURNING): its absence is a failure, not a case to handle."""
    row = cursor.fetchone()
    if row is None:
        raise OperationFailed("the database returned no row where one was expected")
    return row
