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
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any

from .errors import ConnectionFailed, DatabaseRefused, LockTimeout, MissingPrivilege, QueuetopError, UsageError, first_line
from .seam import Capabilities, LockTimeoutSetting
from .sqlfiles import NamedQuery, read_script

if TYPE_CHECKING:
    import sqlalchemy

    from .target import Target

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
        self._engines: dict[tuple[str, str, int, str, int | None], sqlalchemy.Engine] = {}
        self._lock = threading.Lock()

    # -- connecting ----------------------------------------------------------------------------

    def _engine(self, target: Target, application_name: str, connect_timeout: int, *, setup: str = "",
                query_timeout_s: int | None = None) -> sqlalchemy.Engine:
        """One pooled engine per target, application name, timeout and session setup: `setup`
        (T-SQL SET statements) and `query_timeout_s` (pyodbc's) are given to each connection the
        pool opens, so a connection that replaces a lost one is set up as the first was."""
        key = (target.conninfo, application_name, connect_timeout, setup, query_timeout_s)
        with self._lock:
            engine = self._engines.get(key)
            if engine is None:
                engine = self._engines[key] = _create_engine(target, application_name, connect_timeout,
                                                             setup=setup, query_timeout_s=query_timeout_s)
        return engine

    def connect(self, target: Target, *, application_name: str, autocommit: bool = True,
                connect_timeout: int = DEFAULT_LOGIN_TIMEOUT_S, options: dict[str, str] | None = None,
                lock_timeout: LockTimeoutSetting | None = None) -> MssqlSession:
        # SQL Server's LOCK_TIMEOUT 0 means "do not wait at all"; QUEUETOP_LOCK_TIMEOUT=0 means
        # "wait as long as it takes", which is SQL Server's default (-1): nothing to set.
        setup = (read_script("dbcore", "mssql", "lock_timeout.sql").replace("{lock_timeout_ms}", str(int(lock_timeout.ms)))
                 if lock_timeout is not None and lock_timeout.ms > 0 else "")
        engine = self._engine(target, application_name[:128], connect_timeout, setup=setup)
        return MssqlSession(self, _opener(engine, target), target)

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
        engine = self._engine(target, application_name[:128], DEFAULT_LOGIN_TIMEOUT_S,
                              setup=read_script("dbcore", "mssql", "probe_session.sql"), query_timeout_s=PROBE_QUERY_TIMEOUT_S)
        return MssqlSession(self, _opener(engine, target, isolation_level="AUTOCOMMIT"), target, dict_rows=True, autocommit=True)

    def set_isolation(self, session: MssqlSession, level: str) -> None:
        session.set_isolation(level)

    def in_recovery(self, session: MssqlSession) -> bool:
        """False: an Always On readable secondary is not told apart up front (its replica state needs
        VIEW SERVER STATE, and no SQL Server runs here to test it); a write there fails as SQL
        Server refuses it (read-only database: exit 1)."""
        return False

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
            return LockTimeout(f"lock timeout: {message} (another session holds a lock this statement needs: "
                               "`queuetop snapshot` shows the lock tree)")
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
    """One pooled SQLAlchemy connection, with psycopg's surface: `execute()` and `transaction()`.

    A failed statement never leaves the session unusable (the probes run one after another on one
    session, each failing on its own): outside `transaction()` the failure is rolled back at once;
    when it cost the connection (a lost link, a query timeout: SQLAlchemy invalidates the
    connection, and its next statement would raise PendingRollbackError), the connection is
    discarded and the next statement runs on a new one, set up as the first was (the engine's
    setup, the isolation level)."""

    def __init__(self, dialect: MssqlDialect, conn: sqlalchemy.Connection | Callable[[], sqlalchemy.Connection],
                 target: Target, *, dict_rows: bool = False, autocommit: bool = False) -> None:
        self.dialect = dialect
        self.target = target
        # How to open the connection again; a connection given as it is (tests) is reopened from
        # its engine, at its isolation level.
        self._open: Callable[[], sqlalchemy.Connection] = conn if callable(conn) else conn.engine.connect
        self._conn = conn() if callable(conn) else conn
        # set_isolation's level (or the given connection's), given again to a reopened connection
        self._isolation: str | None = None if callable(conn) else conn.get_execution_options().get("isolation_level")
        self._lost = False  # the connection was invalidated: the next statement opens another
        self._depth = 0
        self._dict_rows = dict_rows  # the probes read columns by name
        self._autocommit = autocommit  # the connection itself is in AUTOCOMMIT: nothing to commit

    def execute(self, query: Any, params: Mapping[str, Any] | None = None) -> _Buffered:
        from sqlalchemy import text

        text_sql = query.in_dialect(self.dialect.name) if hasattr(query, "in_dialect") else str(query)
        values = {key: json.dumps(list(value)) if isinstance(value, (list, tuple)) else value
                  for key, value in (params or {}).items()}
        self._reopen_if_lost()
        try:
            result = self._conn.execute(text(self.dialect.bind(text_sql)), values)
            rows: list[Any] = []
            if result.returns_rows:
                rows = [dict(row._mapping) for row in result] if self._dict_rows else [tuple(row) for row in result]
            buffered = _Buffered(rows, result.rowcount)
            if self._depth == 0 and not self._autocommit:
                self._conn.commit()
        except Exception as exc:
            if self._depth == 0:
                self._recover()
            error = self.dialect.translate(exc, self.target)
            if error is None:
                raise
            raise error from exc
        return buffered

    def _recover(self) -> None:
        """After a failure outside `transaction()`: roll back (in AUTOCOMMIT too: SQLAlchemy still
        keeps a transaction of its own, which an invalidated connection leaves pending), and
        when the connection was invalidated, have the next statement open another."""
        from sqlalchemy import exc as sa_exc

        if self._conn.closed:
            return
        try:
            self._conn.rollback()
        except sa_exc.SQLAlchemyError:  # the rollback itself failed: the link is gone
            self._lost = True
        if self._conn.invalidated:
            self._lost = True

    def _reopen_if_lost(self) -> None:
        """A connection lost by an earlier failure is closed (its pool slot freed) and another
        opened, as this session's first was; a failure to open is a ConnectionFailed, and the
        next statement tries again."""
        from sqlalchemy import exc as sa_exc

        if not self._lost:
            return
        with suppress(sa_exc.SQLAlchemyError):
            self._conn.close()
        try:
            conn = self._open()
            if self._isolation is not None:
                conn = conn.execution_options(isolation_level=self._isolation)
        except sa_exc.DBAPIError as exc:
            raise _cannot_connect(self.target, exc) from None
        self._conn, self._lost = conn, False

    @contextmanager
    def transaction(self, *, force_rollback: bool = False) -> Iterator[MssqlSession]:
        """A transaction; nested blocks are savepoints, as psycopg's are. `force_rollback`: rolled
        back even when the block succeeds (a trial, as psycopg's)."""
        if self._depth == 0:
            self._reopen_if_lost()
            if self._conn.in_transaction():
                self._conn.commit()
            block: Any = self._conn.begin()
        else:
            block = self._conn.begin_nested()
        self._depth += 1
        try:
            yield self
            if force_rollback:
                block.rollback()
            else:
                block.commit()
        except BaseException:  # the block's, or its commit's (a link lost at COMMIT)
            try:
                block.rollback()  # a no-op for a block already ended
            finally:
                if self._depth == 1:
                    self._recover()
            raise
        finally:
            self._depth -= 1

    def set_isolation(self, level: str) -> None:
        """SQLAlchemy's execution option, not a `SET` statement: the pool resets it when the
        connection is returned, so it does not leak to the connection's next user."""
        self._reopen_if_lost()
        if self._conn.in_transaction():
            self._conn.commit()
        self._isolation = level.upper()
        self._conn = self._conn.execution_options(isolation_level=self._isolation)

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


def _opener(engine: sqlalchemy.Engine, target: Target, *, isolation_level: str | None = None) -> Callable[[], sqlalchemy.Connection]:
    """How a session opens its connection (again, after one is lost): a driver error is a ConnectionFailed."""

    def open_connection() -> sqlalchemy.Connection:
        from sqlalchemy import exc as sa_exc

        try:
            conn = engine.connect()
            return conn.execution_options(isolation_level=isolation_level) if isolation_level else conn
        except sa_exc.DBAPIError as exc:
            raise _cannot_connect(target, exc) from None

    return open_connection


def _create_engine(target: Target, application_name: str, connect_timeout: int, *, setup: str = "",
                   query_timeout_s: int | None = None) -> sqlalchemy.Engine:
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
    engine = create_engine(
        url,
        connect_args={"timeout": int(str(timeout)) if timeout else connect_timeout},  # the login timeout
        pool_pre_ping=True,  # a pooled connection the server dropped is replaced, not handed out
        pool_size=5,
        max_overflow=20,
    )
    if setup or query_timeout_s:
        from sqlalchemy import event

        @event.listens_for(engine, "connect")
        def _set_up(dbapi_connection: Any, _record: Any) -> None:
            """Each new connection of this engine: its SET statements, its query timeout."""
            if setup:
                cursor = dbapi_connection.cursor()
                try:
                    cursor.execute(setup)
                finally:
                    cursor.close()
            if query_timeout_s:
                dbapi_connection.timeout = query_timeout_s

    return engine


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
