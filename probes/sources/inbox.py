"""The engine's exactly-once endpoints (pattern 4): each endpoint's inbox as a queue, its depth
the messages in flight to it (claimed ones are being processed)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dbcore.sqlfiles import Queries

from .base import Detection, QueueDetails, QueueFigures, QueueSource, has_table

if TYPE_CHECKING:
    from ..session import ProbeConnection

INBOX_SQL = Queries("probes", "sources/inbox.sql")
HEAD_ROWS = 20


class Inboxes(QueueSource):
    name = "inbox"
    kind = "inbox"
    order = 30
    dialects = ("postgresql", "mssql")

    def detect(self, conn: ProbeConnection) -> Detection | None:
        return Detection(schema="queuetop") if has_table(conn, "queuetop.eo_inbox") else None

    def sample(self, conn: ProbeConnection, detection: Detection) -> list[QueueFigures]:
        window = self.config.window
        out = []
        for row in conn.execute(INBOX_SQL["heads"], {"window": window + 1}):
            depth = row["head_rows"]
            out.append(QueueFigures(
                name=row["endpoint"], table="queuetop.eo_inbox", depth=depth, in_flight=row["in_flight"], delayed=0,
                ready=depth - row["in_flight"], oldest_ready_age_s=row["oldest_ready_age_s"],
                # The window is shared: past it, every endpoint's count is a lower bound.
                depth_is_estimate=row["read_rows"] > window,
            ))
        return out

    def details(self, conn: ProbeConnection, name: str) -> QueueDetails:
        return QueueDetails(head=conn.execute(INBOX_SQL["head"], {"endpoint": name, "limit": HEAD_ROWS}).fetchall())


SOURCE = Inboxes
