"""River: `river_job`, one table for every queue, a `river_job_state` enum.

In its own terms (its fetch: `state = 'available' AND scheduled_at <= now()`): ready =
available and due; delayed = available with a schedule ahead, `scheduled`, `retryable` (backing
off) and `pending` (waiting on something else before it may run); in flight = `running`; dead =
`discarded`; `completed` and `cancelled` are finished. Queues come from `river_queue` where River
keeps it, else from the distinct queue names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from psycopg import sql

from dbcore.database import one
from dbcore.sqlfiles import Queries

from ..config import DeclaredQueue
from .base import Detection, QueueDetails, QueueFigures, QueueSource, has_table
from .jobtable import HEAD_ROWS, JobTable

if TYPE_CHECKING:
    from ..config import Config
    from ..postgres import ProbeConnection

RIVER_SQL = Queries("probes", "sources/river.sql")


class River(QueueSource):
    name = "river"
    order = 64
    options = ("schema",)

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self.table = JobTable(DeclaredQueue(
            name="", table=sql.Identifier(self.schema, "river_job").as_string(None), order_by="id",
            age_column="scheduled_at", queue_column="queue", state_column="state", not_before_column="scheduled_at",
            ready_states=("available",), in_flight_states=("running",),
            delayed_states=("scheduled", "retryable", "pending"), done_states=("completed", "cancelled"),
            dead_states=("discarded",),
        ), index_note=False)

    def _parts(self) -> dict[str, sql.Composable]:
        return {"jobs": sql.Identifier(self.schema, "river_job"), "queues": sql.Identifier(self.schema, "river_queue"),
                "migrations": sql.Identifier(self.schema, "river_migration")}

    def detect(self, conn: ProbeConnection) -> Detection | None:
        if not has_table(conn, sql.Identifier(self.schema, "river_job").as_string(conn)):
            return None
        version = None
        if has_table(conn, sql.Identifier(self.schema, "river_migration").as_string(conn)):
            version = one(conn.execute(sql.SQL(RIVER_SQL["version"]).format(**self._parts())))["version"]
        return Detection(version=version, schema=self.schema)

    def sample(self, conn: ProbeConnection, detection: Detection) -> list[QueueFigures]:
        out = None
        if has_table(conn, sql.Identifier(self.schema, "river_queue").as_string(conn)):
            names = [r["name"] for r in conn.execute(sql.SQL(RIVER_SQL["queues"]).format(**self._parts()))]
            if names:
                out = self.table.sample(conn, queues=names)
        if out is None:
            out = self.table.sample(conn)  # no registry: the distinct queue names
        # An estimated count's rows were a sample: the oldest ready job is looked up in River's order.
        estimated = [f.name for f in out if f.error is None and f.ready and f.depth_is_estimate]
        if estimated:
            oldest = sql.SQL(RIVER_SQL["oldest_ready"]).format(**self._parts())
            ages = {r["queue"]: r["age_s"] for r in conn.execute(oldest, {"queues": estimated})}
            for figures in out:
                if figures.name in estimated:
                    figures.oldest_ready_age_s = ages.get(figures.name, figures.oldest_ready_age_s)
        return out

    def details(self, conn: ProbeConnection, name: str) -> QueueDetails:
        generic = self.table.details(conn, name)
        failures = sql.SQL(RIVER_SQL["failures"]).format(**self._parts())
        return QueueDetails(head=generic.head, dead=conn.execute(failures, {"queue": name, "limit": HEAD_ROWS}).fetchall())


SOURCE = River
