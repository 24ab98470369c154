"""The dashboard's one write to someone else's session: cancel or terminate a backend."""

from __future__ import annotations

from dbcore.database import Target, connect, one

from .schema import ENGINE_SQL


def signal_backend(target: Target, pid: int, *, terminate: bool) -> bool:
    """pg_cancel_backend / pg_terminate_backend; False when the server refused or the pid is gone."""
    statement = ENGINE_SQL["terminate_backend" if terminate else "cancel_backend"]
    with connect(target, application_name="queuetop-admin") as conn:
        return bool(one(conn.execute(statement, {"pid": int(pid)}))[0])
