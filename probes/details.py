"""Details on demand (the dashboard's Enter): bounded reads on a probe session."""

from __future__ import annotations

from dbcore.sqlfiles import Queries

from .config import Config
from .postgres import ProbeConnection
from .sources import QueueDetails, source_classes

DETAILS_SQL = Queries("probes", "details.sql")


def queue_details(conn: ProbeConnection, source: str, name: str, config: Config | None = None) -> QueueDetails:
    """Head rows and failed/dead rows of one queue, as its source reads them (the library's own
    error text where it keeps one). An unknown source or queue has no details."""
    cls = source_classes().get(source)
    if cls is None:
        return QueueDetails()
    return cls(config or Config()).details(conn, name)


def session_details(conn: ProbeConnection, pid: int) -> dict[str, object]:
    session = conn.execute(DETAILS_SQL["session"], {"pid": pid}).fetchone()
    locks = conn.execute(DETAILS_SQL["session_locks"], {"pid": pid}).fetchall()
    return {"session": session, "locks": locks}
