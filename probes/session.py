"""A probe session: what every probe runs on, and how one is opened.

A probe connection is autocommit, read-only, with short statement and lock timeouts and an
application_name that says whose it is (`PROBE_SETTINGS`, `open_probe_connection`); its rows
are dictionaries keyed by column name (`ProbeConnection`). The probes (probes/postgres.py,
probes/mssql.py) and the queue sources (probes/sources/) all take one; the sampler pools them.
"""

from __future__ import annotations

from typing import TypeAlias

import psycopg

from dbcore.database import DictRow, Target
from dbcore.dialect import dialect_named

from .failures import LOCK_TIMEOUT_MS, STATEMENT_TIMEOUT_MS
from .samples import PROBE_APPLICATION

# Every probe session's application_name starts with it: the sessions view tells queuetop's own
# sessions by it (SessionSample.own), and the oldest transaction and the xmin holder leave them out.
APPLICATION_NAME = PROBE_APPLICATION
# Every probe session, however opened (one-off or pooled), runs with these.
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
    """A session that cannot hurt the monitored database: read-only, autocommit, short
    statement and lock timeouts, and a name that says whose it is (in the target's dialect:
    PROBE_SETTINGS on PostgreSQL, their equivalents on SQL Server)."""
    session: ProbeConnection = dialect_named(target.dialect).open_probe_session(
        target, application_name=application_name, settings=PROBE_SETTINGS)
    return session
