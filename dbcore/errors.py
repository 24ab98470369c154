"""Errors the engine raises on purpose, each carrying the CLI exit code PRODUCT.md defines."""

from __future__ import annotations

import re


class QueuetopError(Exception):
    """An expected failure: reported as one line on stderr, never as a traceback."""

    exit_code = 1


class OperationFailed(QueuetopError):
    """The operation was valid but failed at run time (exit 1)."""

    exit_code = 1


class DatabaseRefused(OperationFailed):
    """A statement the database refused (exit 1), from a dialect whose driver errors are not
    psycopg's (or, for a lock timeout, from either: LockTimeout). `sqlstate` is PostgreSQL's code
    for the same refusal, or queuetop's own where the refusal is the engine's: SQL Server's
    THROW 50404 in the engine's T-SQL is PostgreSQL's RAISE ... ERRCODE 'QT404' (unknown ring)."""

    def __init__(self, message: str, sqlstate: str | None = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


class LockTimeout(DatabaseRefused):
    """A statement waited its session's whole lock timeout for a lock another session holds, and
    was cancelled (exit 1: the operation failed at run time; run it again once the holder is
    done). The message names the holder where it could be seen (dbcore/lockwait.py)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, sqlstate="55P03")


class UsageError(QueuetopError):
    """Bad arguments or input: malformed JSON, an invalid or unknown name (exit 2)."""

    exit_code = 2


class MissingPrivilege(UsageError):
    """The role may not do or see this (exit 2: grant it, or use another role). `sqlstate` is
    PostgreSQL's code for it, whichever database said so."""

    sqlstate = "42501"


class StandbyReadOnly(UsageError):
    """A write aimed at a hot standby (a server in recovery): refused up front, nothing written
    (exit 2: point the command at the primary). `where` is the masked target."""

    def __init__(self, where: str) -> None:
        super().__init__(f"{where} is a standby: read-only")
        self.where = where


class ConnectionFailed(QueuetopError):
    """The database could not be reached or refused us (exit 2)."""

    exit_code = 2


class Unanswered(ConnectionFailed):
    """Connected, but no answer came within the deadline: a pooler (PgBouncer) holds the queries
    of a pool whose every server connection is taken (exit 2). Its message says what was waited for."""


class RingFull(QueuetopError):
    """A put was refused because the ring has no free cell; nothing was written (exit 3)."""

    exit_code = 3


class LeaseHeld(QueuetopError):
    """The lease belongs to another holder (exit 4)."""

    exit_code = 4


def first_line(exc: BaseException) -> str:
    """An exception as one line: its message's first line, or its type when it has none."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def connection_cause(exc: BaseException) -> str:
    """Why a connection attempt failed, in the words an operator acts on: libpq's
    'connection failed: connection to server at "h", port p failed: FATAL:  password
    authentication failed for user "u"' becomes 'password authentication failed for user "u"';
    a refused or timed-out TCP connection says where ('Connection refused at h:p')."""
    line = first_line(exc)
    if "failed: " not in line:
        return line
    head, _, cause = line.rpartition("failed: ")
    cause = cause.strip()
    for prefix in ("FATAL:", "ERROR:"):
        if cause.startswith(prefix):
            return cause[len(prefix):].strip()
    where = re.search(r'server at "([^"]+)"(?: \([^)]*\))?, port (\d+)', head)
    return f"{cause} at {where[1]}:{where[2]}" if where else cause
