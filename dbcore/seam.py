"""The dialect seam's interface: what a dialect is (`Dialect`), what it opens (`Session`, whose
statements return a `Result`), what it can do (`Capabilities`), and the lock timeout a session
of the command line's engine commands gets (`lock_timeout_for`).

Each dialect (dbcore/postgres.py, dbcore/mssql.py) implements it; dbcore/registry.py picks the
one of a target or a session; dbcore/dialect.py is where the engine and the probes import both.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from .errors import QueuetopError, UsageError

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
    hot_standby: bool = False  # Dialect.in_recovery tells a hot standby (PostgreSQL in recovery) from a primary


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

    def in_recovery(self, session: Any) -> bool:
        """Whether `session`'s server is a hot standby, where nothing can be written (the engine's
        commands refuse up front: dbcore.errors.StandbyReadOnly)."""
        ...

    def open_probe_session(self, target: Any, *, application_name: str, settings: dict[str, str]) -> Any:
        """A session for the probes: autocommit, short lock and statement timeouts, rows as
        dictionaries keyed by column name. `settings` are PostgreSQL's (PROBE_SETTINGS); a dialect
        without them applies its own equivalents."""
        ...
