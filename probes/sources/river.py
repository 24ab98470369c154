"""River: `river_job`, one table for every queue, a `river_job_state` enum.

In its own terms (its fetch: `state = 'available' AND scheduled_at <= now()`): ready =
available and due; delayed = available with a schedule ahead, `scheduled`, `retryable` (backing
off) and `pending` (waiting on something else before it may run); in flight = `running`; dead =
`discarded`; `completed` and `cancelled` are finished. Its queues: those `river_queue` names (where
River keeps it: a queue its producers registered, empty or not), and every queue `river_job` holds
a job of, finished ones too (at 0), read through River's fetching index `(state, queue, ...)`, one
probe per state and queue (queuenames.py): a job inserted for a queue no producer has served is
listed too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from psycopg import sql

from dbcore.database import one
from dbcore.sqlfiles import Queries

from ..configmodel import DeclaredQueue
from .base import Detection, Identifier, Install, QueueDetails, QueueFigures, QueueSource, has_table
from .jobtable import HEAD_ROWS, JobTable

if TYPE_CHECKING:
    from ..configmodel import Config
    from ..session import ProbeConnection

RIVER_SQL = Queries("probes", "sources/river.sql")


class River(QueueSource):
    name = "river"
    order = 64
    options = ("schema",)
    # Its job table, by the columns River gives it; its schema is the connection's search_path
    # (or River's `Schema` option): any, several in one database. The migration table (its
    # version) and the queue registry (River 0.5 and later) may be missing.
    signature = ("river_job.queue", "river_job.state", "river_job.kind", "river_job.scheduled_at",
                 "river_job.attempted_by", "river_job.finalized_at")
    signature_extras = ("river_migration", "river_queue")

    def __init__(self, config: Config, schema: str | None = None) -> None:
        super().__init__(config, schema)
        self.table = JobTable(DeclaredQueue(
            name="", table=sql.Identifier(self.schema, "river_job").as_string(None), order_by="id",
            age_column="scheduled_at", queue_column="queue", state_column="state", not_before_column="scheduled_at",
            ready_states=("available",), in_flight_states=("running",),
            delayed_states=("scheduled", "retryable", "pending"), done_states=("completed", "cancelled"),
            dead_states=("discarded",),
        ), index_note=False, held_by_transactions=False)

    def _parts(self) -> dict[str, sql.Composable]:
        return {"jobs": Identifier(self.schema, "river_job"), "queues": Identifier(self.schema, "river_queue"),
                "migrations": Identifier(self.schema, "river_migration")}

    def detected(self, conn: ProbeConnection, install: Install) -> Detection | None:
        version = None
        if "river_migration" in install.extras:
            version = one(conn.execute(sql.SQL(RIVER_SQL["version"]).format(**self._parts())))["version"]
        return Detection(version=version, schema=install.schema)

    def sample(self, conn: ProbeConnection, detection: Detection) -> list[QueueFigures]:
        out = None
        registry = has_table(conn, sql.Identifier(self.schema, "river_queue").as_string(conn))
        # Due jobs of a paused queue are not fetched (its producer asks for none): blocked.
        self.table.set_blocked(sql.SQL(RIVER_SQL["blocked"]).format(**self._parts()) if registry else None)
        if registry:
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

    def moved(self, blocks: set[int]) -> None:
        self.table.tally.moved(blocks)

    def details(self, conn: ProbeConnection, name: str) -> QueueDetails:
        generic = self.table.details(conn, name)
        failures = sql.SQL(RIVER_SQL["failures"]).format(**self._parts())
        blocked = []
        if has_table(conn, sql.Identifier(self.schema, "river_queue").as_string(conn)):
            head = sql.SQL(RIVER_SQL["blocked_head"]).format(**self._parts())
            blocked = conn.execute(head, {"queue": name, "limit": HEAD_ROWS}).fetchall()
        return QueueDetails(head=generic.head, dead=conn.execute(failures, {"queue": name, "limit": HEAD_ROWS}).fetchall(),
                            blocked=blocked)


SOURCE = River
