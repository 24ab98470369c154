"""Details on demand (the dashboard's Enter): bounded reads on a probe session."""

from __future__ import annotations

from datetime import datetime

from dbcore.sqlfiles import Queries

from .config import Config
from .session import ProbeConnection
from .sources import QueueDetails, source_classes
from .sources.base import find_installs

DETAILS_SQL = Queries("probes", "details.sql")


def queue_details(conn: ProbeConnection, source: str, name: str, config: Config | None = None, *,
                  schema: str | None = None) -> QueueDetails:
    """Head rows and failed/dead rows of one queue, as its source reads them (the library's own
    error text where it keeps one). An unknown source or queue has no details.

    A library's queue is read in the install it belongs to: `schema` when given (the row's
    `schema`), else the one its name says (`<schema>.<queue>` outside the library's home schema,
    the longest such schema found first), else the home schema with the name as it is."""
    config = config or Config()
    cls = source_classes().get(source)
    if cls is None:
        return QueueDetails()
    if not cls.signature:
        return cls(config).details(conn, name)
    home = cls.home_schema_in(config)
    if schema is None:
        installs, _ = find_installs(conn, [cls]) if cls.looks_in_every_schema(config) else ([], {})
        others = sorted((i.schema for i in installs if i.schema != home), key=len, reverse=True)
        schema = next((s for s in others if name.startswith(f"{s}.")), home)
    if schema != home:
        prefix = f"{schema}."
        if not name.startswith(prefix):
            return QueueDetails()
        name = name[len(prefix):]
    return cls(config, schema).details(conn, name)


def session_details(conn: ProbeConnection, pid: int, started: datetime | None = None) -> dict[str, object]:
    """A session's facts, whole query and locks. `started`: when its backend started (with the
    pid, its identity): a session that ended since, its pid now another backend's, has no details
    (`session` None), never that other backend's. None: the pid alone."""
    session = conn.execute(DETAILS_SQL["session"], {"pid": pid, "started": started}).fetchone()
    locks = conn.execute(DETAILS_SQL["session_locks"], {"pid": pid}).fetchall() if session is not None else []
    return {"session": session, "locks": locks}
