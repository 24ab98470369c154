"""PostgreSQL through the dialect seam: the session is a psycopg connection (dbcore/database.py
opens it), which already has the surface the engine uses; the engine's prepared hot path and
LISTEN/NOTIFY need the connection itself."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from .database import Target, connect
from .dialect import Capabilities
from .errors import ConnectionFailed, OperationFailed, QueuetopError, UsageError, first_line


class PostgresDialect:
    name = "postgresql"
    label = "PostgreSQL"
    capabilities = Capabilities(notify=True, arrays=True, prepared_hot_path=True, binary_params=True)

    def connect(self, target: Target, *, application_name: str, autocommit: bool = True, connect_timeout: int = 10,
                options: dict[str, str] | None = None) -> psycopg.Connection[Any]:
        return connect(target, application_name=application_name, autocommit=autocommit,
                       connect_timeout=connect_timeout, options=options)

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

    def translate(self, exc: BaseException, target: Target | None) -> QueuetopError | None:
        if isinstance(exc, psycopg.OperationalError):
            return ConnectionFailed(f"database connection failed: {first_line(exc)}")
        if isinstance(exc, psycopg.errors.InsufficientPrivilege):
            return UsageError(f"missing privilege: {first_line(exc)}")
        if isinstance(exc, psycopg.Error):
            return OperationFailed(f"database error: {first_line(exc)}")
        return None
