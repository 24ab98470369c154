"""SQL Server through the dialect seam: SQLAlchemy Core engines over pyodbc.

A target is a SQLAlchemy URL, `mssql+pyodbc://user@host:1433/db?driver=ODBC+Driver+18+for+SQL+Server`
(or `driver=FreeTDS&TDS_Version=7.4`); every other query key is passed to the ODBC driver, as
SQLAlchemy does. queuetop reads one key of its own, `connect_timeout=S` (the login timeout,
default 10 s): without a login timeout, a listener that accepts and never answers hangs a
connection attempt forever (measured with FreeTDS), so there is always one.

Statements are the named queries of `<package>/sql/mssql/*.sql`, written like PostgreSQL's with
`%(name)s` placeholders; they are run through `sqlalchemy.text()` with bound parameters. A list
parameter is sent as a JSON array (the T-SQL reads it with OPENJSON): SQL Server has no arrays.

A session emulates psycopg's autocommit: a statement outside `transaction()` is committed at
once; inside, the block commits on success and rolls back on an exception. Rows are fetched
before the commit, so a result outlives it.

pyodbc is an optional extra (`pip install 'queuetop[mssql]'`), imported only when a SQL Server
target is used.
"""

from __future__ import annotations

import functools
import importlib
import json
import re
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .dialect import Capabilities
from .errors import ConnectionFailed, DatabaseRefused, MissingPrivilege, QueuetopError, UsageError, first_line
from .sqlfiles import NamedQuery, read_script

if TYPE_CHECKING:
    import sqlalchemy

    from .database import Target

DEFAULT_LOGIN_TIMEOUT_S = 10
PROBE_QUERY_TIMEOUT_S = 2  # PostgreSQL's probes have a 2,000 ms statement_timeout

# The URL keys queuetop reads itself and does not pass to the driver.
OWN_KEYS = ("connect_timeout",)
_PLACEHOLDER = re.compile(r"%\((\w+)\)s")
# "[FreeTDS][SQL Server]Unable to connect: ... (20009) (SQLDriverConnect)" -> "Unable to connect: ..."
_DRIVER_PREFIX = re.compile(r"^(\[[^\]]*\]\s*)+")
_DRIVER_SUFFIX = re.compile(r"(\s*\(\d+\))?(\s*\(SQL\w+\))+\s*$")
# SQLSTATEs of a connection that could not be made or was lost: the client's side (08xxx,
# HYT00 login timeout), the driver manager's (IM002 no such DSN, 01000 a driver that will not
# load) and the server's refusal of the login (28000).
_CONNECTION_STATES = ("08", "HYT", "IM", "28", "01000")
# Server errors that mean a missing permission (229: permission denied on an object; 230: on a
# column; 262: on a statement in a database; 297, 300: server-level permissions such as VIEW
# SERVER STATE).
_PRIVILEGE_ERRORS = (229, 230, 262, 297, 300)


class MssqlDialect:
    name = "mssql"
    label = "SQL Server"
    capabilities = Capabilities(notify=False, arrays=False, prepared_hot_path=False, driver_pools=True, cancel_query=False)

    def __init__(self) -> None:
        self._engines: dict[tuple[str, str, int], sqlalchemy.Engine] = {}
        self._lock = threading.Lock()

    # -- connecting ----------------------------------------------------------------------------

    def _engine(self, target: Target, application_name: str, connect_timeout: int) -> sqlalchemy.Engine:
        """One pooled engine per target, application name and timeout."""
        key = (target.conninfo, application_name, connect_timeout)
        with self._lock:
            engine = self._engines.get(key)
            if engine is None:
                engine = self._engines[key] = _create_engine(target, application_name, connect_timeout)
        return engine

    def connect(self, target: Target, *, application_name: str, autocommit: bool = True,
                connect_timeout: int = DEFAULT_LOGIN_TIMEOUT_S, options: dict[str, str] | None = None) -> MssqlSession:
        from sqlalchemy import exc as sa_exc

        engine = self._engine(target, application_name[:128], connect_timeout)
        try:
            conn = engine.connect()
        except sa_exc.DBAPIError as exc:
            raise _cannot_connect(target, exc) from None
        return MssqlSession(self, conn, target)

    # -- SQL text ------------------------------------------------------------------------------

    def quote(self, *parts: str) -> str:
        return ".".join("[" + part.replace("]", "]]") + "]" for part in parts)

    def bind(self, query: str) -> str:
        """`%(name)s` placeholders as SQLAlchemy's `:name`, every other colon escaped so that
        `text()` does not read it as one ('00:00:00'), and `%%` as the `%` it stands for."""
        return _bind(query)

    def format(self, query: str, **identifiers: tuple[str, ...]) -> str:
        text = query.in_dialect(self.name) if isinstance(query, NamedQuery) else query
        return text.format(**{field: self.quote(*parts) for field, parts in identifiers.items()})

    def open_probe_session(self, target: Target, *, application_name: str, settings: dict[str, str]) -> MssqlSession:
        """A probe session: autocommit (no implicit transaction around a probe's SELECT), a 100 ms
        lock timeout, low deadlock priority, a 2 s query timeout (pyodbc's, whole seconds), rows as
        dictionaries. SQL Server has no read-only session: the probes' T-SQL is SELECT only
        (tests/test_mssql_probes_sql.py) and the login's grants do the rest."""
        from sqlalchemy import exc as sa_exc

        engine = self._engine(target, application_name[:128], DEFAULT_LOGIN_TIMEOUT_S)
        try:
            conn = engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            conn.exec_driver_sql(read_script("dbcore", "mssql", "probe_session.sql"))
            conn.connection.dbapi_connection.timeout = PROBE_QUERY_TIMEOUT_S  # type: ignore[union-attr]
        except sa_exc.DBAPIError as exc:
            raise _cannot_connect(target, exc) from None
        return MssqlSession(self, conn, target, dict_rows=True, autocommit=True)

    def set_isolation(self, session: MssqlSession, level: str) -> None:
        session.set_isolation(level)

    def run_script(self, session: MssqlSession, script: str) -> None:
        """A schema script: batches separated by a line `-- batch`, each run on its own (T-SQL's
        `GO` is a client convention that ODBC does not know)."""
        for batch in re.split(r"^\s*--\s*batch\s*$", script, flags=re.MULTILINE):
            if batch.strip() and not all(line.lstrip().startswith("--") or not line.strip() for line in batch.splitlines()):
                session.execute(batch)

    # -- errors --------------------------------------------------------------------------------

    def translate(self, exc: BaseException, target: Target | None) -> QueuetopError | None:
        from sqlalchemy import exc as sa_exc

        if not isinstance(exc, sa_exc.DBAPIError):
            return None
        state, number = _sqlstate(exc), _native_error(exc)
        message = _scrubbed(_driver_message(exc), target)
        # A statement's timeouts are the statement's failure, not the connection's; each carries
        # PostgreSQL's code for the same thing, which the probes explain (probes/postgres.py).
        if state == "HYT00":  # pyodbc's query timeout (at login it is the login timeout: connect() says so)
            return DatabaseRefused(f"statement timeout: {message}", sqlstate="57014")
        if number == 1222:  # SET LOCK_TIMEOUT expired
            return DatabaseRefused(f"lock timeout: {message}", sqlstate="55P03")
        if number in (1205, 3960) or state == "40001":  # deadlock victim, snapshot update conflict: retry the transaction
            return DatabaseRefused(f"transaction must be retried: {message}", sqlstate="40001")
        if state.startswith(_CONNECTION_STATES):
            return ConnectionFailed(f"database connection failed: {message}")
        if number in _PRIVILEGE_ERRORS:
            return MissingPrivilege(f"missing privilege: {message}")
        if number is not None and 50000 <= number < 60000:  # the engine's own THROW: its PostgreSQL code
            return DatabaseRefused(f"database error: {message}", sqlstate=f"QT{number - 50000:03d}")
        return DatabaseRefused(f"database error: {message}")


class _Buffered:
    """A statement's result, read before its commit: rows (if any) and the row count."""

    __slots__ = ("_rows", "rowcount")

    def __init__(self, rows: list[Any], rowcount: int) -> None:
        self._rows = rows
        self.rowcount = rowcount

    def fetchone(self) -> Any:
        return self._rows.pop(0) if self._rows else None

    def fetchall(self) -> list[Any]:
        rows, self._rows = self._rows, []
        return rows

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchall())


class MssqlSession:
    """One pooled SQLAlchemy connection, with psycopg's surface: `execute()` and `transaction()`."""

    def __init__(self, dialect: MssqlDialect, conn: sqlalchemy.Connection, target: Target, *, dict_rows: bool = False,
                 autocommit: bool = False) -> None:
        self.dialect = dialect
        self.target = target
        self._conn = conn
        self._depth = 0
        self._dict_rows = dict_rows  # the probes read columns by name
        self._autocommit = autocommit  # the connection itself is in AUTOCOMMIT: nothing to commit

    def execute(self, query: Any, params: Mapping[str, Any] | None = None) -> _Buffered:
        from sqlalchemy import text

        text_sql = query.in_dialect(self.dialect.name) if hasattr(query, "in_dialect") else str(query)
        values = {key: json.dumps(list(value)) if isinstance(value, (list, tuple)) else value
                  for key, value in (params or {}).items()}
        try:
            result = self._conn.execute(text(self.dialect.bind(text_sql)), values)
            rows: list[Any] = []
            if result.returns_rows:
                rows = [dict(row._mapping) for row in result] if self._dict_rows else [tuple(row) for row in result]
            buffered = _Buffered(rows, result.rowcount)
            if self._depth == 0 and not self._autocommit:
                self._conn.commit()
        except Exception as exc:
            if self._depth == 0 and not self._autocommit and not self._conn.closed:
                self._conn.rollback()
            error = self.dialect.translate(exc, self.target)
            if error is None:
                raise
            raise error from exc
        return buffered

    @contextmanager
    def transaction(self, *, force_rollback: bool = False) -> Iterator[MssqlSession]:
        """A transaction; nested blocks are savepoints, as psycopg's are. `force_rollback`: rolled
        back even when the block succeeds (a trial, as psycopg's)."""
        if self._depth == 0:
            if self._conn.in_transaction():
                self._conn.commit()
            block: Any = self._conn.begin()
        else:
            block = self._conn.begin_nested()
        self._depth += 1
        try:
            yield self
        except BaseException:
            block.rollback()
            raise
        else:
            if force_rollback:
                block.rollback()
            else:
                block.commit()
        finally:
            self._depth -= 1

    def set_isolation(self, level: str) -> None:
        """SQLAlchemy's execution option, not a `SET` statement: the pool resets it when the
        connection is returned, so it does not leak to the connection's next user."""
        if self._conn.in_transaction():
            self._conn.commit()
        self._conn = self._conn.execution_options(isolation_level=level.upper())

    def cursor(self) -> MssqlSession:
        """psycopg's `conn.cursor()`, kept by the worker for a connection's life: here the
        session is its own cursor."""
        return self

    def close(self) -> None:
        self._conn.close()

    @property
    def closed(self) -> bool:
        return self._conn.closed

    def __enter__(self) -> MssqlSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def parse_url(raw: str, masked: str) -> tuple[str, int | None]:
    """Check a SQL Server URL before any connection: the driver must be pyodbc and an ODBC
    driver must be named. Returns the URL to keep and the login timeout it sets, if any."""
    from sqlalchemy.engine import make_url

    url = make_url(raw)
    if url.get_driver_name() != "pyodbc":
        raise UsageError(f"SQL Server is reached through pyodbc: use mssql+pyodbc://… (not {url.drivername}) in {masked}")
    if "driver" not in url.query and "odbc_connect" not in url.query and url.host:
        raise UsageError(
            f"name the ODBC driver in {masked}: add ?driver=ODBC+Driver+18+for+SQL+Server "
            "(or driver=FreeTDS&TDS_Version=7.4)")
    timeout = url.query.get("connect_timeout")
    if timeout is None:
        return raw, None
    try:
        seconds = int(str(timeout))
    except ValueError:
        seconds = -1
    if not 0 < seconds <= 3600:
        raise UsageError(f"connect_timeout in {masked} must be a whole number of seconds from 1 to 3600")
    return raw, seconds


def _create_engine(target: Target, application_name: str, connect_timeout: int) -> sqlalchemy.Engine:
    try:
        importlib.import_module("pyodbc")  # the driver SQLAlchemy will load: a clear error if it is missing
    except ImportError as exc:  # not installed, or its libodbc.so.2 is not (unixODBC)
        raise UsageError(
            "SQL Server needs pyodbc and an ODBC driver: pip install 'queuetop[mssql]', and unixODBC "
            f"with Microsoft's ODBC Driver 18 or FreeTDS ({first_line(exc)})") from None
    from sqlalchemy import create_engine, make_url

    url = make_url(target.conninfo)
    timeout = url.query.get("connect_timeout")
    url = url.difference_update_query(OWN_KEYS).update_query_dict({"APP": application_name})
    return create_engine(
        url,
        connect_args={"timeout": int(str(timeout)) if timeout else connect_timeout},  # the login timeout
        pool_pre_ping=True,  # a pooled connection the server dropped is replaced, not handed out
        pool_size=5,
        max_overflow=20,
    )


@functools.lru_cache(maxsize=1024)
def _bind(query: str) -> str:
    """MssqlDialect.bind, once per statement text: a worker sends the same few statements for
    its whole life, and each would otherwise be rewritten by three passes on every execute."""
    text = query.replace(":", "\\:")
    text = _PLACEHOLDER.sub(r":\1", text)
    return text.replace("%%", "%")


def _cannot_connect(target: Target, exc: BaseException) -> ConnectionFailed:
    return ConnectionFailed(f"cannot connect to {target.masked}: {_scrubbed(_driver_message(exc), target)}")


def _scrubbed(message: str, target: Target | None) -> str:
    """A driver's message with the target's password, should it echo it, replaced by ***."""
    if target is None:
        return message
    from sqlalchemy import make_url

    password = make_url(target.conninfo).password
    return message.replace(password, "***") if password else message


def _sqlstate(exc: Any) -> str:
    args: tuple[Any, ...] = getattr(getattr(exc, "orig", None), "args", ())
    return str(args[0]) if args else ""


def _native_error(exc: Any) -> int | None:
    """SQL Server's error number, which the ODBC message carries as `(229)` before the call name."""
    match = re.search(r"\((\d+)\)\s*\(SQL\w+\)", _raw_message(exc))
    return int(match.group(1)) if match else None


def _raw_message(exc: Any) -> str:
    args: tuple[Any, ...] = getattr(getattr(exc, "orig", None), "args", ())
    return str(args[1]) if len(args) > 1 else first_line(exc)


def _driver_message(exc: Any) -> str:
    """The driver's message without the bracketed driver names, the error number and the ODBC call."""
    text = _raw_message(exc).strip().splitlines()[0] if _raw_message(exc).strip() else type(exc).__name__
    text = _DRIVER_PREFIX.sub("", text)
    text = _DRIVER_SUFFIX.sub("", text)
    state = _sqlstate(exc)
    return f"{text} (SQLSTATE {state})" if state else text
