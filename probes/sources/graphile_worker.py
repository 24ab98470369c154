"""Graphile Worker 0.16+: `graphile_worker._private_jobs`, no state column, completed jobs deleted.

In its own terms (get_job): ready = not locked, attempts < max_attempts, `run_at <= now()`, and
its named queue (if any) not locked; in flight = locked; dead = attempts exhausted (kept, with
`last_error`); delayed = `run_at` ahead (scheduled, or backing off after a failure), or waiting
behind its named queue while another job of that queue runs - a locked queue is named in a note.
One row per task identifier (`task:<identifier>`) and per named queue (`queue:<name>`).

Row-level security is enabled on `_private_jobs` with no policy: a role that does not own it
sees no job at all, which the row says instead of showing an empty queue.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from psycopg import sql

from dbcore.database import one
from dbcore.sqlfiles import Queries

from ..config import DeclaredQueue
from .base import Detection, QueueDetails, QueueFigures, QueueSource, has_table
from .jobtable import COUNT_CAP, HEAD_ROWS, LARGE_TABLE_ROWS, JobTable, plan_rows

if TYPE_CHECKING:
    from ..config import Config
    from ..postgres import ProbeConnection

GRAPHILE_SQL = Queries("probes", "sources/graphile_worker.sql")


class GraphileWorker(QueueSource):
    name = "graphile-worker"
    order = 63
    options = ("schema",)
    default_schema = "graphile_worker"

    def __init__(self, config: Config, *, cap: int = COUNT_CAP) -> None:
        super().__init__(config)
        self.cap = cap
        # The catalog lookups and the planner's count, kept between samples.
        jobs = sql.Identifier(self.schema, "_private_jobs").as_string(None)
        self.jobs = JobTable(DeclaredQueue(name=self.name, table=jobs, order_by="id"), cap=cap)

    def _parts(self) -> dict[str, sql.Composable]:
        return {name: sql.Identifier(self.schema, table) for name, table in (
            ("jobs", "_private_jobs"), ("tasks", "_private_tasks"), ("job_queues", "_private_job_queues"),
            ("migrations", "migrations"))}

    def detect(self, conn: ProbeConnection) -> Detection | None:
        if not has_table(conn, sql.Identifier(self.schema, "_private_jobs").as_string(conn)):
            return None
        version = one(conn.execute(sql.SQL(GRAPHILE_SQL["version"]).format(**self._parts())))["version"]
        return Detection(version=f"migration {version}" if version else None, schema=self.schema)

    def sample(self, conn: ProbeConnection, detection: Detection) -> list[QueueFigures]:
        parts = self._parts()
        jobs = parts["jobs"].as_string(conn)
        table = self.jobs.resolved(conn)
        if not table.can_select:
            return [QueueFigures(name="jobs", table=jobs, error=f"no SELECT privilege on {jobs}")]
        names = conn.execute(sql.SQL(GRAPHILE_SQL["names"]).format(**parts)).fetchall()
        live = self.jobs.fingerprint(conn)["live"]
        cap = self.jobs.limit(live > LARGE_TABLE_ROWS)
        rows = {(r["kind"], r["name"]): r for r in conn.execute(sql.SQL(GRAPHILE_SQL["classified"]).format(**parts),
                                                               {"cap": cap})}
        scanned = max((r["scanned"] for r in rows.values()), default=0)
        factor, estimate = 1.0, False
        if scanned >= cap:  # more jobs than one bounded read: scale to the planner's count
            total = plan_rows(self.jobs.estimates.explain(conn, sql.SQL(GRAPHILE_SQL["estimate"]).format(**parts), {}))
            factor, estimate = max(total, scanned) / scanned, True
        if table.rls_active and not names:
            # Its tasks and queues are behind row-level security too: say it on the one row left.
            figures = QueueFigures(name="jobs", table=jobs, ready=0, in_flight=0, delayed=0, dead=0, depth=0)
            figures.notes.append(f"row-level security hides rows from this role: 0 visible of ~{live:,} live in {jobs}"
                                 " (tasks and named queues hidden too)")
            return [figures]
        out = []
        for entry in names:
            counts = rows.get((entry["kind"], entry["name"]))

            def scaled(key: str, counts: dict | None = counts) -> int:
                return round((counts[key] if counts else 0) * factor)

            figures = QueueFigures(
                name=f"{entry['kind']}:{entry['name']}", table=jobs, ready=scaled("ready"), in_flight=scaled("in_flight"),
                delayed=scaled("delayed") + scaled("blocked"), dead=scaled("dead"),
                oldest_ready_age_s=counts["oldest_ready_age_s"] if counts else None, depth_is_estimate=estimate,
            )
            figures.depth = (figures.ready or 0) + (figures.in_flight or 0) + (figures.delayed or 0)
            if entry["locked_at"] is not None:
                figures.notes.append(f"named queue locked by {entry['locked_by'] or '?'} since {entry['locked_at']:%H:%M:%S}"
                                     f": {scaled('blocked'):,} job(s) wait behind it")
            if table.rls_active:
                figures.notes.append(f"row-level security hides rows from this role: {figures.depth:,} visible"
                                     f" of ~{live:,} live in {jobs}")
            out.append(figures)
        return out

    def details(self, conn: ProbeConnection, name: str) -> QueueDetails:
        kind, _, value = name.partition(":")
        params = {"task": value if kind == "task" else None, "queue": value if kind == "queue" else None,
                  "limit": HEAD_ROWS}
        parts = self._parts()
        head = conn.execute(sql.SQL(GRAPHILE_SQL["head"]).format(**parts), params).fetchall()
        dead = conn.execute(sql.SQL(GRAPHILE_SQL["failures"]).format(**parts), params).fetchall()
        return QueueDetails(head=head, dead=dead)


SOURCE = GraphileWorker
