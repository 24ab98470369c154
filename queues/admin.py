"""The dashboard's one write to someone else's session: cancel or terminate a backend, the one the
operator chose and no other."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from dbcore.database import Target, one
from dbcore.dialect import dialect_named, open_session
from dbcore.errors import UsageError

from .schema import ENGINE_SQL


@dataclass(frozen=True, slots=True)
class Signalled:
    """How a cancel or terminate went: true when the server signalled the backend. Otherwise
    `why`: "gone" (no backend has that pid now), "another backend" (the pid is now another
    backend's: nothing was signalled), "start hidden" (this role may not see when the pid's
    backend started, so it cannot tell it is the one chosen: nothing was signalled), "refused"
    (the server did not signal it: not allowed, or it ended meanwhile)."""

    done: bool
    why: str | None = None
    started: datetime | None = None  # the start of the backend that has the pid now, where it could be seen

    def __bool__(self) -> bool:
        return self.done


def signal_backend(target: Target, pid: int, *, terminate: bool, started: datetime | None = None) -> Signalled:
    """Terminate a session (pg_terminate_backend, KILL) or cancel its running statement
    (pg_cancel_backend, where the dialect can), identified by its pid and when its backend started
    (`started`; None: the pid alone): a backend that got the pid since is not signalled, and the
    check is made in the statement that signals."""
    dialect = dialect_named(target.dialect)
    if not terminate and not dialect.capabilities.cancel_query:
        raise UsageError(f"{dialect.label} cannot cancel another session's statement: terminate the session instead")
    statement = ENGINE_SQL["terminate_backend" if terminate else "cancel_backend"]
    with open_session(target, application_name="queuetop-admin") as conn:
        row = one(conn.execute(statement, {"pid": int(pid), "started": started}))
    found, now_started, signalled = bool(row[0]), row[1], bool(row[2])
    if signalled:
        return Signalled(True, started=now_started)
    if not found:
        return Signalled(False, "gone")
    if started is not None and now_started is None:
        return Signalled(False, "start hidden")
    if started is not None and now_started != started:
        return Signalled(False, "another backend", now_started)
    return Signalled(False, "refused", now_started)
