"""Procrastinate: `procrastinate_jobs`, one table for every queue, with a status enum.

In its own terms (procrastinate_fetch_job_v2): ready = `todo` with `scheduled_at` null or past;
delayed = `todo` scheduled later (a deferred schedule or a retry's back-off); in flight = `doing`
(and the legacy `aborting`); dead = `failed`; `succeeded`, `cancelled` and `aborted` jobs are kept
in the table, finished, and in no count. The oldest ready age comes from its events table (the
job row has no enqueue time).
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

PROCRASTINATE_SQL = Queries("probes", "sources/procrastinate.sql")


class Procrastinate(QueueSource):
    name = "procrastinate"
    order = 61
    options = ("schema",)

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        schema = self.schema
        self.table = JobTable(DeclaredQueue(
            name="", table=sql.Identifier(schema, "procrastinate_jobs").as_string(None), order_by="id",
            queue_column="queue_name", state_column="status", not_before_column="scheduled_at",
            ready_states=("todo",), in_flight_states=("doing", "aborting"),
            done_states=("succeeded", "cancelled", "aborted"), dead_states=("failed",),
        ), index_note=False)

    def _parts(self) -> dict[str, sql.Composable]:
        return {"jobs": sql.Identifier(self.schema, "procrastinate_jobs"),
                "events": sql.Identifier(self.schema, "procrastinate_events")}

    def detect(self, conn: ProbeConnection) -> Detection | None:
        if not has_table(conn, sql.Identifier(self.schema, "procrastinate_jobs").as_string(conn)):
            return None
        fetch_v2 = sql.Identifier(self.schema, "procrastinate_fetch_job_v2").as_string(conn)
        version = one(conn.execute(PROCRASTINATE_SQL["version"], {"fetch_v2": fetch_v2}))["version"]
        return Detection(version=version, schema=self.schema)

    def sample(self, conn: ProbeConnection, detection: Detection) -> list[QueueFigures]:
        out = self.table.sample(conn)
        waiting = [f.name for f in out if f.error is None and f.ready]
        if waiting:
            oldest = sql.SQL(PROCRASTINATE_SQL["oldest_ready"]).format(**self._parts())
            ages = {r["queue"]: r["age_s"] for r in conn.execute(oldest, {"queues": waiting})}
            for figures in out:
                if figures.name in waiting:
                    figures.oldest_ready_age_s = ages.get(figures.name)
        return out

    def details(self, conn: ProbeConnection, name: str) -> QueueDetails:
        generic = self.table.details(conn, name)
        failures = sql.SQL(PROCRASTINATE_SQL["failures"]).format(**self._parts())
        return QueueDetails(head=generic.head, dead=conn.execute(failures, {"queue": name, "limit": HEAD_ROWS}).fetchall())


SOURCE = Procrastinate
