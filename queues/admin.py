"""The dashboard's one write to someone else's session: cancel or terminate a backend."""

from __future__ import annotations

from dbcore.database import Target, connect


def signal_backend(target: Target, pid: int, *, terminate: bool) -> bool:
    """pg_cancel_backend / pg_terminate_backend; False when the server refused or the pid is gone."""
    statement = "SELECT pg_terminate_backend(%s)" if terminate else "SELECT pg_cancel_backend(%s)"
    with connect(target, application_name="queuetop-admin") as conn:
        return bool(conn.execute(statement, (int(pid),)).fetchone()[0])
