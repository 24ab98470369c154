"""How a probe statement's failure is told, in any dialect: what counts as one (the probe reports
it and the others go on), and the one line that says what the operator can do about it. Here,
not in probes/postgres.py, so that the queue sources (which probes/postgres.py imports) can use it."""

from __future__ import annotations

import psycopg

from dbcore.errors import ConnectionFailed, DatabaseRefused, MissingPrivilege, first_line

STATEMENT_TIMEOUT_MS = 2000
LOCK_TIMEOUT_MS = 100


def describe_error(exc: Exception) -> str:
    """One line for a failed probe statement, saying what the operator can do about it."""
    line = first_line(exc)
    # By SQLSTATE, which psycopg's errors carry and SQL Server's are given (dbcore/mssql.py).
    code = getattr(exc, "sqlstate", None)
    if code == "55P03":  # lock_not_available
        return f"skipped: lock timeout ({LOCK_TIMEOUT_MS} ms), the table is locked by another session ({line})"
    if code == "57014":  # query_canceled
        return f"skipped: statement timeout ({STATEMENT_TIMEOUT_MS} ms) reached"
    if code == "42501":  # insufficient_privilege
        return f"no privilege: {line}"
    return line


# What a probe statement's failure can be, in any dialect: a lost connection too (psycopg's is a
# psycopg.Error; SQL Server's a ConnectionFailed, after which its session reopens for the next probe).
PROBE_FAILURES = (psycopg.Error, DatabaseRefused, MissingPrivilege, ConnectionFailed)


class NotAsDeclared(LookupError):
    """What a declaration names (a table, a dead-letter table, a column) is not in the database,
    not what the declaration says (a column that is no timestamp) or not readable by this role:
    that queue's failure, said on its row, never the probe's."""


def describe_failure(exc: Exception) -> str:
    """One line for anything a probe, a queue source or a queue raised: a statement's failure as
    describe_error says it, a declaration's name not found as it is, and whatever else (a fault of
    queuetop's own) as an internal error with its type, so the part that failed is unknown with a
    reason while the rest goes on."""
    if isinstance(exc, PROBE_FAILURES):
        return describe_error(exc)
    if isinstance(exc, NotAsDeclared):
        return first_line(exc)
    return f"internal error: {type(exc).__name__}: {first_line(exc)}"
