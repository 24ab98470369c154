"""Procrastinate: `procrastinate_jobs`, one table for every queue, with a status enum.

In its own terms (procrastinate_fetch_job_v2): ready = `todo` with `scheduled_at` null or past;
delayed = `todo` scheduled later (a deferred schedule or a retry's back-off); in flight = `doing`
(and the legacy `aborting`); dead = `failed`; `succeeded`, `cancelled` and `aborted` jobs are kept
in the table, finished, and in no count. The oldest ready age comes from its events table (the
job row has no enqueue time). Its queues: every queue `procrastinate_jobs` holds a job of,
finished ones too (at 0), read through its `queue_name` index, one probe per queue
(queuenames.py): it keeps no registry of queues.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from psycopg import sql

from dbcore.sqlfiles import Queries

from ..configmodel import DeclaredQueue
from .base import Detection, Identifier, Install, QueueDetails, QueueFigures, QueueSource
from .jobtable import HEAD_ROWS, JobTable

if TYPE_CHECKING:
    from ..configmodel import Config
    from ..session import ProbeConnection

PROCRASTINATE_SQL = Queries("probes", "sources/procrastinate.sql")


class Procrastinate(QueueSource):
    name = "procrastinate"
    order = 61
    options = ("schema",)
    # Its two tables; it takes its schema from the connection's search_path, so it may be in any.
    signature = ("procrastinate_jobs.queue_name", "procrastinate_jobs.status", "procrastinate_jobs.scheduled_at",
                 "procrastinate_events.job_id")
    # Procrastinate records no schema version: its 3.x schema has procrastinate_fetch_job_v2.
    signature_extras = ("procrastinate_fetch_job_v2()",)

    def __init__(self, config: Config, schema: str | None = None) -> None:
        super().__init__(config, schema)
        schema = self.schema
        self.table = JobTable(DeclaredQueue(
            name="", table=sql.Identifier(schema, "procrastinate_jobs").as_string(None), order_by="id",
            queue_column="queue_name", state_column="status", not_before_column="scheduled_at",
            ready_states=("todo",), in_flight_states=("doing", "aborting"),
            done_states=("succeeded", "cancelled", "aborted"), dead_states=("failed",),
        ), index_note=False, held_by_transactions=False)

    def _parts(self) -> dict[str, sql.Composable]:
        return {"jobs": Identifier(self.schema, "procrastinate_jobs"),
                "events": Identifier(self.schema, "procrastinate_events")}

    def detected(self, conn: ProbeConnection, install: Install) -> Detection | None:
        version = "3.x" if "procrastinate_fetch_job_v2()" in install.extras else "2.x or older"
        return Detection(version=version, schema=install.schema)

    def sample(self, conn: ProbeConnection, detection: Detection) -> list[QueueFigures]:
        # Due todo jobs its fetch skips for their lock (procrastinate_fetch_job_v2, 3.x): blocked.
        self.table.set_blocked(sql.SQL(PROCRASTINATE_SQL["blocked"]).format(**self._parts())
                               if detection.version == "3.x" else None)
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
        params = {"queue": name, "limit": HEAD_ROWS}
        blocked = []
        detection = self.detect(conn)
        if detection is not None and detection.version == "3.x":  # its fetch's lock rule (procrastinate_fetch_job_v2)
            blocked = conn.execute(sql.SQL(PROCRASTINATE_SQL["blocked_head"]).format(**self._parts()), params).fetchall()
        return QueueDetails(head=generic.head, dead=conn.execute(failures, params).fetchall(), blocked=blocked)

    def moved(self, blocks: set[int]) -> None:
        self.table.tally.moved(blocks)


SOURCE = Procrastinate
