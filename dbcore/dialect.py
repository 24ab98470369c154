"""The dialect seam: what differs between PostgreSQL and SQL Server, behind one small interface.

A `Dialect` knows how to open a `Session` on a target, how to quote an identifier, how to turn
its driver's errors into queuetop's (each with the exit code PRODUCT.md defines), and what it
can do (`Capabilities`): whether idle consumers can be woken by a notification or must poll,
whether statements take and return arrays, whether the engine's prepared hot path exists.
Engine and probe code ask the capability, never the dialect's name.

Both dialects read the same named queries (`Queries`), each from its own directory
(`<package>/sql/<dialect.name>/`), with the same bind style (`%(name)s`) and the same `{field}`
identifier slots: a statement is chosen by name and the dialect supplies its text.

- PostgreSQL: the session *is* a psycopg connection. psycopg already has the interface the
  engine uses (`execute()` returning a cursor, `transaction()`), and the measured hot path
  (queues/hotpath.py) needs the connection itself.
- SQL Server: a SQLAlchemy Core connection over pyodbc (dbcore/mssql.py), pooled per target.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from .errors import ConnectionFailed, QueuetopError, UsageError

# The engine's commands on the command line (`queuetop-cli:<command>`: enqueue, ring put and take,
# lease acquire, renew and release, compact, init...) write the engine's tables on behalf of
# someone who waits for the answer: behind a lock another session holds, they give up after
# this long with one line naming the holder (exit 1), rather than wait as long as it is held.
# 5 s: far above the few milliseconds the engine's own statements hold a lock for, far below
# "is it hung?". QUEUETOP_LOCK_TIMEOUT=SECONDS changes it (0: wait as long as it takes).
LOCK_TIMEOUT_ENV = "QUEUETOP_LOCK_TIMEOUT"
DEFAULT_LOCK_TIMEOUT_S = 5.0
LOCK_TIMEOUT_APPLICATIONS = ("queuetop-cli:",)
MAX_LOCK_TIMEOUT_S = 86_400.0


@dataclass(frozen=True, slots=True)
class LockTimeoutSetting:
    """A session's lock timeout: `ms` (0: none); `given` when QUEUETOP_LOCK_TIMEOUT set it, which
    overrides the database's own settings; queuetop's default does not (PostgreSQL: a
    lock_timeout the server, database, role or DSN sets is kept)."""

    ms: int
    given: bool


def lock_timeout_for(application_name: str) -> LockTimeoutSetting | None:
    """The lock timeout of a session opened under `application_name`: the command line's engine
    commands get one; every other session (a worker pool, a relay, the probes) keeps its own rules."""
    if not application_name.startswith(LOCK_TIMEOUT_APPLICATIONS):
        return None
    raw = os.environ.get(LOCK_TIMEOUT_ENV, "").strip()
    if not raw:
        return LockTimeoutSetting(ms=int(DEFAULT_LOCK_TIMEOUT_S * 1000), given=False)
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not (math.isfinite(seconds) and 0 <= seconds <= MAX_LOCK_TIMEOUT_S):
        raise UsageError(f"{LOCK_TIMEOUT_ENV} must be a number of seconds from 0 to {MAX_LOCK_TIMEOUT_S:.0f} "
                         f"(0: wait as long as a lock is held), not {raw!r}")
    return LockTimeoutSetting(ms=math.ceil(seconds * 1000), given=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class Capabilities:
    notify: bool  # LISTEN/NOTIFY wakes idle consumers; without it they poll at a bounded, measured cost
    arrays: bool  # statements take array parameters and return array columns; else JSON text in, rows out
    prepared_hot_path: bool  # queues/hotpath.py: the claim loop's statements prepared through libpq
    advisory_locks: bool = True  # an application lock scoped to a transaction (pg_advisory_xact_lock, sp_getapplock)
    kill_session: bool = True  # terminate another session (pg_terminate_backend, KILL)
    cancel_query: bool = True  # cancel another session's running statement, keeping the session (pg_cancel_backend)
    binary_params: bool = False  # psycopg's `%(x)b`: parameters sent in binary (the engine's measured PostgreSQL text)
    driver_pools: bool = False  # the driver keeps a pool of connections itself (SQLAlchemy's), so sessions are cheap to reopen


class Result(Protocol):
    """What `Session.execute` returns: psycopg's cursor has exactly this surface."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


@runtime_checkable
class Session(Protocol):
    """One connection as the engine uses it: statements in autocommit unless inside
    `transaction()`, which commits on success and rolls back on an exception."""

    def execute(self, query: Any, params: Mapping[str, Any] | None = None) -> Any: ...

    def transaction(self, *, force_rollback: bool = False) -> AbstractContextManager[Any]: ...

    def close(self) -> None: ...

    @property
    def closed(self) -> bool: ...

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: Any) -> Any: ...


class Dialect(Protocol):
    name: str  # the directory of its .sql files; never a branch in engine or probe code
    label: str  # how the dashboard names it ("PostgreSQL", "SQL Server")
    capabilities: Capabilities

    def connect(self, target: Any, *, application_name: str, autocommit: bool = True, connect_timeout: int = 10,
                options: dict[str, str] | None = None, lock_timeout: LockTimeoutSetting | None = None) -> Session:
        """A session; `lock_timeout`: how long its statements wait for a lock (None: the database's
        own setting), a lock timeout raised as LockTimeout (exit 1)."""
        ...

    def quote(self, *parts: str) -> str:
        """A (schema-qualified) identifier as SQL text."""
        ...

    def translate(self, exc: BaseException, target: Any) -> QueuetopError | None:
        """The driver's error as queuetop's (one line, DSN masked), or None when it is not the driver's."""
        ...

    def run_script(self, session: Any, script: str) -> None:
        """Run a whole `.sql` script (the schema) on `session`."""
        ...

    def format(self, query: str, **identifiers: tuple[str, ...]) -> Any:
        """`query` (a named query) in this dialect, its `{field}` slots filled with quoted
        identifiers (`table=("queuetop", "q_jobs")`): what a session of this dialect executes."""
        ...

    def set_isolation(self, session: Any, level: str) -> None:
        """The isolation level of `session`'s next transactions ("SERIALIZABLE", "READ COMMITTED"),
        undone when the session is closed (a pooled connection does not carry it to its next user)."""
        ...

    def open_probe_session(self, target: Any, *, application_name: str, settings: dict[str, str]) -> Any:
        """A session for the probes: autocommit, short lock and statement timeouts, rows as
        dictionaries keyed by column name. `settings` are PostgreSQL's (PROBE_SETTINGS); a dialect
        without them applies its own equivalents."""
        ...


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
