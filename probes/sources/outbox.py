"""The engine's transactional outbox (pattern 4) as a queue: its depth is the backlog of
messages not yet relayed; rows in a relay's open batch are in flight."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dbcore.database import one
from dbcore.sqlfiles import Queries

from .base import Detection, QueueDetails, QueueFigures, QueueSource, has_table

if TYPE_CHECKING:
    from ..session import ProbeConnection

OUTBOX_SQL = Queries("probes", "sources/outbox.sql")
HEAD_ROWS = 20


class Outbox(QueueSource):
    name = "outbox"
    kind = "outbox"
    order = 20
    dialects = ("postgresql", "mssql")

    def detect(self, conn: ProbeConnection) -> Detection | None:
        return Detection(schema="queuetop") if has_table(conn, "queuetop.outbox") else None

    def sample(self, conn: ProbeConnection, detection: Detection) -> list[QueueFigures]:
        window = self.config.window
        head = one(conn.execute(OUTBOX_SQL["head_window"], {"window": window + 1}))
        depth = head["head_rows"]
        if depth > window:
            depth += max(0, head["max_id"] - head["last_head_id"])
        return [QueueFigures(
            name="outbox", table="queuetop.outbox", relid=head["relid"], depth=depth, in_flight=head["in_flight"],
            delayed=0, ready=max(0, depth - head["in_flight"]), oldest_ready_age_s=head["oldest_ready_age_s"],
            depth_is_estimate=head["head_rows"] > window, rates_from="deletes",
        )]

    def details(self, conn: ProbeConnection, name: str) -> QueueDetails:
        return QueueDetails(head=conn.execute(OUTBOX_SQL["head"], {"limit": HEAD_ROWS}).fetchall())


SOURCE = Outbox
