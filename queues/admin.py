"""The dashboard's one write to someone else's session: cancel or terminate a backend."""

from __future__ import annotations

from dbcore.database import Target, one
from dbcore.dialect import dialect_named, open_session
from dbcore.errors import UsageError

from .schema import ENGINE_SQL


def signal_backend(target: Target, pid: int, *, terminate: bool) -> bool:
    """Terminate a session (pg_terminate_backend, KILL) or cancel its running statement
    (pg_cancel_backend, where the dialect can); False when the server refused or the pid is gone."""
    dialect = dialect_named(target.dialect)
    if not terminate and not dialect.capabilities.cancel_query:
        raise UsageError(f"{dialect.label} cannot cancel another session's statement: terminate the session instead")
    statement = ENGINE_SQL["terminate_backend" if terminate else "cancel_backend"]
    with open_session(target, application_name="queuetop-admin") as conn:
        return bool(one(conn.execute(statement, {"pid": int(pid)}))[0])
