"""PostgreSQL through the dialect seam: the session is a psycopg connection (dbcore/database.py
opens it), which already has the surface the engine uses; the engine's prepared hot path and
LISTEN/NOTIFY need the connection itself."""

from __future__ import annotations

import contextlib
import os
import re
from typing import Any

import psycopg
from psycopg import errors, pq, sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row

from .database import Target, connect
from .errors import ConnectionFailed, LockTimeout, OperationFailed, QueuetopError, StandbyReadOnly, UsageError, first_line
from .lockwait import apply_lock_timeout
from .seam import Capabilities, LockTimeoutSetting
from .sqlfiles import Queries

SESSION_SQL = Queries("dbcore", "session.sql")  # (in_recovery)


class PostgresDialect:
    name = "postgresql"
    label = "PostgreSQL"
    capabilities = Capabilities(notify=True, arrays=True, prepared_hot_path=True, binary_params=True, hot_standby=True)

    def connect(self, target: Target, *, application_name: str, autocommit: bool = True, connect_timeout: int = 10,
                options: dict[str, str] | None = None, lock_timeout: LockTimeoutSetting | None = None) -> psycopg.Connection[Any]:
        conn = connect(target, application_name=application_name, autocommit=autocommit,
                       connect_timeout=connect_timeout, options=options)
        if lock_timeout is not None:
            try:
                apply_lock_timeout(conn, target, ms=lock_timeout.ms, given=lock_timeout.given)
            except BaseException:
                conn.close()
                raise
        return conn

    def quote(self, *parts: str) -> str:
        return sql.Identifier(*parts).as_string(None)

    def run_script(self, session: psycopg.Connection[Any], script: str) -> None:
        session.execute(script)  # psycopg sends a parameterless script as one simple query

    def format(self, query: str, **identifiers: tuple[str, ...]) -> sql.Composed:
        return sql.SQL(query).format(**{field: sql.Identifier(*parts) for field, parts in identifiers.items()})

    def set_isolation(self, session: psycopg.Connection[Any], level: str) -> None:
        session.isolation_level = psycopg.IsolationLevel[level.upper().replace(" ", "_")]  # psycopg's own, per connection

    def open_probe_session(self, target: Target, *, application_name: str, settings: dict[str, str]) -> psycopg.Connection[Any]:
        return connect(target, application_name=application_name, options=settings, row_factory=dict_row)

    def in_recovery(self, session: psycopg.Connection[Any]) -> bool:
        row = session.execute(SESSION_SQL["in_recovery"]).fetchone()
        return bool(row is not None and row[0])

    def translate(self, exc: BaseException, target: Target | None) -> QueuetopError | None:
        if not isinstance(exc, psycopg.Error):
            return None
        # psycopg files a timeout, a cancel, a deadlock and a full disk under OperationalError,
        # with a lost connection: only the SQLSTATE tells a statement's failure (exit 1) from
        # the connection's (exit 2).
        if isinstance(exc, psycopg.errors.QueryCanceled):
            return OperationFailed(statement_cancelled(exc, target))
        if isinstance(exc, psycopg.errors.LockNotAvailable):  # a session without dbcore/lockwait.py's watch
            return LockTimeout(f"lock timeout: {first_line(exc)} (the lock_timeout setting)")
        if isinstance(exc, psycopg.OperationalError) and connection_lost(exc):
            return ConnectionFailed(f"database connection failed: {first_line(exc)}")
        if isinstance(exc, psycopg.errors.InsufficientPrivilege):
            return UsageError(f"missing privilege: {first_line(exc)}")
        if isinstance(exc, psycopg.errors.ReadOnlySqlTransaction) and target is not None and self._standby(target):
            return StandbyReadOnly(target.masked)  # a write that got past the check up front (a server demoted since)
        return OperationFailed(f"database error: {first_line(exc)}")

    def _standby(self, target: Target) -> bool:
        """Whether the server that refused a write as read-only (25006) is a hot standby, not a
        read-only transaction or setting (a role's default_transaction_read_only): asked on a
        connection of its own (the one that failed may be in a failed transaction, or gone)."""
        try:
            with connect(target, application_name="queuetop-cli:check", connect_timeout=5) as conn:
                return self.in_recovery(conn)
        except Exception:  # the server is gone meanwhile: the read-only refusal is said as it is
            return False


# SQLSTATEs of a connection lost or refused, rather than a statement's failure: class 08
# (connection exception), the server shutting down or starting (57P01-57P05), too many
# connections (53300). libpq's own errors (the server closed the connection) carry none.
_CONNECTION_STATES = ("08", "57P0", "53300")
# `-c statement_timeout=1`, `--statement-timeout=1` in libpq's `options` (the DSN's, PGOPTIONS).
_STATEMENT_TIMEOUT_OPTION = re.compile(r"(?:-c\s*|--)statement[_-]timeout\s*=\s*(\S+)")


def connection_lost(exc: psycopg.Error) -> bool:
    """Whether a psycopg error says the connection could not be made or was lost."""
    state = exc.sqlstate or ""
    return isinstance(exc, psycopg.OperationalError) and (not state or state.startswith(_CONNECTION_STATES))


def statement_cancelled(exc: psycopg.Error, target: Target | None) -> str:
    """A cancelled statement (57014) in one line: by the statement timeout, naming the setting
    and, when the DSN or PGOPTIONS sets it, its value; or by another session (pg_cancel_backend)."""
    line = first_line(exc)
    if "statement timeout" not in line:
        return f"statement cancelled: {line} (another session cancelled it: pg_cancel_backend, or the dashboard)"
    where = "the statement_timeout setting of the server, database or role"
    options = [("PGOPTIONS", os.environ.get("PGOPTIONS", ""))]
    if target is not None:
        with contextlib.suppress(psycopg.Error):
            options.insert(0, ("the DSN's options", str(conninfo_to_dict(target.conninfo).get("options") or "")))
    for source, text in options:
        found = _STATEMENT_TIMEOUT_OPTION.findall(text)
        if found:
            where = f"statement_timeout={found[-1]} in {source}"
            break
    return f"statement timeout: {line} ({where}: raise it)"


def check_result(pgconn: pq.abc.PGconn, result: pq.abc.PGresult, expected: pq.ExecStatus, encoding: str) -> pq.abc.PGresult:
    """`result` of a statement sent through libpq directly (queues/hotpath.py, queues/producer.py),
    or the error psycopg's own call would have raised. A lost connection: the status says so, or
    (an immediate server shutdown, measured) libpq still says OK and the result is an error the
    server never sent, with no SQLSTATE. Both are psycopg's OperationalError, which the worker pool
    reconnects on."""
    if result.status == expected:
        return result
    if pgconn.status != pq.ConnStatus.OK or result.error_field(pq.DiagnosticField.SQLSTATE) is None:
        message = result.error_message.decode(encoding, "replace").strip() or pgconn.get_error_message(encoding)
        raise psycopg.OperationalError(message.strip())
    raise errors.error_from_result(result, encoding=encoding)
