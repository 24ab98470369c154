"""A probe session: what every probe runs on, and how one is opened.

A probe connection has an application_name that says whose it is (`open_probe_connection`); its
rows are dictionaries keyed by column name (`ProbeConnection`). The probes (probes/postgres.py,
probes/mssql.py) and the queue sources (probes/sources/) all take one; the sampler pools them.

Every probe runs in a transaction of its own (`probe_transaction`): READ ONLY, READ COMMITTED,
with `PROBE_SETTINGS` (short statement and lock timeouts, no JIT, ...) set for that transaction
only, in one round trip, and read back before any probe statement runs: a probe whose settings
the server did not take does not run (ProbeSettingsRefused, its status says why). Nothing relies
on the session's settings, which a connection pooler does not keep from one transaction to the
next (PgBouncer in transaction mode) and which a stock PgBouncer refuses at start-up (libpq's
`options`). The wait for the transaction's first answer is bounded on the client's side
(FIRST_ANSWER_S, dbcore/deadline.py): a pooler holds a query while its pool has no server
connection to give, where no statement timeout runs. A statement that fails aborts the
transaction: a probe that says the failure and goes on wraps the part that may fail in `contained`.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeAlias

import psycopg
from psycopg import sql
from psycopg.pq import TransactionStatus

from dbcore.database import DictRow, Target
from dbcore.deadline import WATCHDOG, NoAnswer
from dbcore.dialect import dialect_named
from dbcore.errors import DatabaseRefused, first_line
from dbcore.lockwait import setting_seconds
from dbcore.pooler import UNDETERMINED, found, link_of
from dbcore.sqlfiles import Queries

from .failures import LOCK_TIMEOUT_MS, STATEMENT_TIMEOUT_MS
from .samples import PROBE_APPLICATION

# Every probe session's application_name starts with it: the sessions view tells queuetop's own
# sessions by it (SessionSample.own), and the oldest transaction and the xmin holder leave them out.
APPLICATION_NAME = PROBE_APPLICATION
# Every probe runs with these: set in its own transaction (probe_transaction), and also at the
# session's start where the server is known to be reached directly (dbcore/pooler.py).
PROBE_SETTINGS = {
    "default_transaction_read_only": "on",
    "statement_timeout": str(STATEMENT_TIMEOUT_MS),
    "lock_timeout": str(LOCK_TIMEOUT_MS),
    "idle_in_transaction_session_timeout": "10000",
    # psycopg prepares a statement run five times; a generic plan cannot use the partial indexes
    # the queue libraries keep per state (WHERE status = 'doing'): always plan for the values.
    "plan_cache_mode": "force_custom_plan",
    # A probe reads a bounded handful of rows: it never takes parallel workers from the server,
    # and it reads a job table through an index scan that stops at its LIMIT, or not at all. A
    # sequential scan finds a frequent state's rows fast but a rare state's only after reading
    # the table; a bitmap scan collects every matching index entry before its LIMIT applies.
    # The queue sources check each read's plan and estimate a state no index leads to
    # (probes/sources/jobtable.py).
    "max_parallel_workers_per_gather": "0",
    "enable_seqscan": "off",
    "enable_bitmapscan": "off",
    # What a stock server's settings would otherwise make a monitor pay for:
    # - JIT (on by default wherever PostgreSQL is built with LLVM, as Debian's is): a read that
    #   no index serves is costed around 1e10 with the scans above disabled, far past
    #   jit_above_cost, and compiling it with inlining took 5.9 s for 2 ms of execution, past
    #   the statement timeout. A probe's statements are small and short: never worth compiling.
    "jit": "off",
    # A server (or role) whose default isolation is SERIALIZABLE would make every probe read take
    # predicate locks, which can fail the monitored application's transactions.
    "default_transaction_isolation": "read committed",
}


# A probe session's rows are dictionaries keyed by column name.
ProbeConnection: TypeAlias = psycopg.Connection[DictRow]


def open_probe_connection(target: Target, *, application_name: str = APPLICATION_NAME) -> ProbeConnection:
    """A session for the probes, with a name that says whose it is, autocommit: on PostgreSQL
    each probe runs in a probe_transaction on it (read-only, PROBE_SETTINGS, checked), which
    every caller opens; SQL Server's session has the equivalents for its life (dbcore/mssql.py)."""
    session: ProbeConnection = dialect_named(target.dialect).open_probe_session(
        target, application_name=application_name, settings=PROBE_SETTINGS)
    return session


# How long a probe transaction waits for its first answer (its settings read back): a few seconds
# more than the statement timeout. It runs no statement of the probe's: a server that is there
# answers it in a round trip, and only a pooler holding it in its wait queue (every server
# connection of the pool taken) or a network that lost the server makes it wait.
FIRST_ANSWER_S = STATEMENT_TIMEOUT_MS / 1000 + 3
TRANSACTION_SQL = Queries("probes", "transaction.sql")


class ProbeSettingsRefused(DatabaseRefused):
    """The probe transaction's settings were refused or did not hold as asked (read back otherwise):
    the probe did not run. Its message says which setting and what the server said."""


@dataclass(frozen=True, slots=True)
class _Opened:
    """What a probe transaction was opened with, to open it again (`contained`)."""

    settings: dict[str, str]
    group: object | None
    answer_within_s: float
    where: str | None
    late: Callable[[], bool | None] | None = None
    give_up_s: float | None = None


# The probe transaction open on each connection (probe_transaction, contained).
_OPEN: weakref.WeakKeyDictionary[Any, _Opened] = weakref.WeakKeyDictionary()
_BEGIN: dict[tuple[tuple[str, str], ...], str] = {}


def begin_statement(settings: dict[str, str]) -> str:
    """transaction.sql's `begin` with `settings` in it (built once per settings)."""
    key = tuple(settings.items())
    statement = _BEGIN.get(key)
    if statement is None:
        literal = sql.Literal(json.dumps(settings)).as_string(None)
        statement = _BEGIN[key] = TRANSACTION_SQL["begin"].replace("{settings}", literal)
    return statement


@contextmanager
def probe_transaction(conn: Any, *, settings: dict[str, str] | None = None, group: object | None = None,
                      answer_within_s: float = FIRST_ANSWER_S, where: str | None = None,
                      late: Callable[[], bool | None] | None = None, give_up_s: float | None = None) -> Iterator[Any]:
    """`conn` inside a probe transaction: read-only, READ COMMITTED, `settings` (PROBE_SETTINGS)
    for this transaction only, verified before the block runs; ended (committed, or rolled back
    after a failure) when the block ends. The first answer is awaited `answer_within_s` at most
    (NoAnswer; `group`: whose waits `WATCHDOG.cut` may end at once, a sampler's); with `late`, that
    deadline only calls it and the wait goes on until `give_up_s` (dbcore/deadline.py). A session of
    another dialect (SQL Server's: its settings are the session's, dbcore/mssql.py) and a
    connection already in a transaction are used as they are."""
    if not isinstance(conn, psycopg.Connection) or conn.info.transaction_status != TransactionStatus.IDLE:
        yield conn
        return
    opened = _Opened(settings if settings is not None else PROBE_SETTINGS, group, answer_within_s, where, late, give_up_s)
    _begin(conn, opened)
    _OPEN[conn] = opened
    try:
        yield conn
    except BaseException:
        _OPEN.pop(conn, None)
        _end(conn, commit=False)
        raise
    _OPEN.pop(conn, None)
    _end(conn, commit=True)


@contextmanager
def contained(conn: Any) -> Iterator[None]:
    """Around a part of a probe that may fail while the probe goes on (a queue source, a note's
    statement): a statement that fails there aborts the probe transaction, which is then rolled
    back and opened again with its settings (one round trip, and only on a failure: a savepoint
    would cost two on every success), so that what follows runs. The exception goes on to the
    caller, which says it."""
    try:
        yield
    except BaseException:
        opened = _OPEN.get(conn)
        if opened is not None and conn.info.transaction_status == TransactionStatus.INERROR:
            try:
                conn.rollback()
                _begin(conn, opened)
            except Exception:  # (no answer, settings refused, the connection gone)
                conn.close()  # nothing more runs on it: never a probe statement without its settings
        raise


def _begin(conn: psycopg.Connection[Any], opened: _Opened) -> None:
    """BEGIN, the settings and their read-back, in one round trip under the first answer's deadline."""
    link = link_of(conn)
    try:
        with WATCHDOG.watch(conn, opened.answer_within_s, group=opened.group, what=opened.where,
                            pooled=link.pooled or link is UNDETERMINED, late=opened.late, give_up_s=opened.give_up_s):
            cursor = conn.execute(begin_statement(opened.settings))
            cursor.nextset()
            row = cursor.fetchone()
    except NoAnswer:
        raise
    except psycopg.OperationalError as exc:
        if conn.closed or conn.broken:
            raise  # the connection is gone: the caller's to say, as any lost connection
        _end(conn, commit=False)
        raise ProbeSettingsRefused(f"the probe's settings were refused, so it did not run: {first_line(exc)}") from None
    except psycopg.Error as exc:
        _end(conn, commit=False)
        raise ProbeSettingsRefused(f"the probe's settings were refused, so it did not run: {first_line(exc)}") from None
    if row is None:
        _end(conn, commit=False)
        raise ProbeSettingsRefused("the probe's settings were not read back, so it did not run")
    values = row if isinstance(row, dict) else dict(zip([c.name for c in cursor.description or ()], row, strict=False))
    if link is UNDETERMINED:
        found(conn, int(values["backend_pid"]))
    wrong = settings_not_held(opened.settings, values["settings"] or {}, values["transaction_read_only"])
    if wrong:
        _end(conn, commit=False)
        raise ProbeSettingsRefused(f"the probe's settings did not hold, so it did not run: {wrong}")


def _end(conn: psycopg.Connection[Any], *, commit: bool) -> None:
    """End the probe transaction: commit it, or roll it back (also one that failed); nothing on a
    connection that is gone (the pool discards it)."""
    if conn.closed or conn.broken or conn.info.transaction_status == TransactionStatus.IDLE:
        return
    try:
        if commit and conn.info.transaction_status == TransactionStatus.INTRANS:
            conn.commit()
        else:
            conn.rollback()
    except psycopg.OperationalError:
        pass  # the connection went: the pool discards it, and the probe's own failure is what is said


def settings_not_held(asked: dict[str, str], shown: dict[str, str], read_only: str | None) -> str | None:
    """What of `asked` the server does not have as asked (`shown`: set_config's read-back, name to
    value as the server writes it), and whether the transaction is not read-only; None when all holds."""
    wrong = [f"{name} is {shown.get(name)!r}, not {value!r}" for name, value in asked.items()
             if not same_setting(value, shown.get(name))]
    if read_only != "on":
        wrong.append(f"transaction_read_only is {read_only!r}, not 'on'")
    return "; ".join(wrong) or None


def same_setting(asked: str, shown: str | None) -> bool:
    """Whether a setting read back is the value asked: the same words (case aside), or the same
    time (`2000` milliseconds asked, `2s` shown)."""
    if shown is None:
        return False
    if asked.strip().lower() == shown.strip().lower():
        return True
    a, b = setting_seconds(asked), setting_seconds(shown)
    return a is not None and a == b
