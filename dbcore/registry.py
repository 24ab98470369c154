"""Which dialect speaks for a target or a session, created on first use, and what goes through
whichever it is: opening a session (`open_session`), translating a driver's error to queuetop's
(`translate_error`), telling a lost connection from a failed statement (`connection_lost`).
"""

from __future__ import annotations

from typing import Any

from .errors import ConnectionFailed, QueuetopError
from .seam import Dialect, Session, lock_timeout_for

_DIALECTS: dict[str, Dialect] = {}


def dialect_named(name: str) -> Dialect:
    """The dialect of a target (`Target.dialect`), created on first use: SQL Server's module
    loads SQLAlchemy's engine machinery, which a PostgreSQL user never pays for."""
    dialect = _DIALECTS.get(name)
    if dialect is None:
        if name == "postgresql":
            from .postgres import PostgresDialect

            dialect = PostgresDialect()
        elif name == "mssql":
            from .mssql import MssqlDialect

            dialect = MssqlDialect()
        else:
            raise ValueError(f"no dialect {name!r}")
        _DIALECTS[name] = dialect
    return dialect


def dialect_of(session: Any) -> Dialect:
    """The dialect a session speaks: a SQL Server session says so; a psycopg connection is PostgreSQL's."""
    dialect = getattr(session, "dialect", None)
    return dialect if dialect is not None else dialect_named("postgresql")


def open_session(target: Any, *, application_name: str, autocommit: bool = True, connect_timeout: int = 10,
                 options: dict[str, str] | None = None) -> Session:
    """A session on `target`, in its dialect; with a lock timeout when it is one of the command
    line's engine commands (`lock_timeout_for`)."""
    return dialect_named(target.dialect).connect(target, application_name=application_name, autocommit=autocommit,
                                                 connect_timeout=connect_timeout, options=options,
                                                 lock_timeout=lock_timeout_for(application_name))


def translate_error(exc: BaseException, target: Any = None) -> QueuetopError | None:
    """A driver's error, from whichever dialect raised it, as queuetop's; None for anything else."""
    for name in ("postgresql", *[n for n in _DIALECTS if n != "postgresql"]):
        error = dialect_named(name).translate(exc, target)
        if error is not None:
            return error
    return None


def connection_lost(exc: BaseException) -> bool:
    """Whether `exc`, from any dialect, says the database could not be reached or the connection
    was lost (a restart, an outage, too many connections), rather than that a statement failed."""
    return isinstance(exc, ConnectionFailed) or isinstance(translate_error(exc), ConnectionFailed)
