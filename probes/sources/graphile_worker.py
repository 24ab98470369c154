"""Graphile Worker 0.16+: `graphile_worker._private_jobs`, no state column, completed jobs deleted.

In its own terms (get_job): ready = not locked, attempts < max_attempts, `run_at <= now()`, and
its named queue (if any) not locked; in flight = locked; dead = attempts exhausted (kept, with
`last_error`); delayed = `run_at` ahead (scheduled, or backing off after a failure), or waiting
behind its named queue while another job of that queue runs - a locked queue is named in a note.
One row per task identifier (`task:<identifier>`) and per named queue (`queue:<name>`).

Its queues: Graphile Worker deletes a job once it completes, so its jobs table holds no finished
job to find a queue by. Its registries do: `add_job` records each task identifier
(`_private_tasks`) and named queue (`_private_job_queues`) its jobs use, and they stay after their
last job is done, until the library's `cleanup` (GC_TASK_IDENTIFIERS, GC_JOB_QUEUES) removes those
with no job left. Every task and named queue of the registries is listed, at 0 once its jobs are
done; a permanently failed job is kept (dead) and keeps its task and queue listed.

Row-level security is enabled on `_private_jobs` with no policy: a role that does not own it
sees no job at all, which the row says instead of showing an empty queue.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from psycopg import sql

from dbcore.database import one
from dbcore.sqlfiles import Queries

from ..configmodel import DeclaredQueue
from .base import Detection, Identifier, Install, QueueDetails, QueueFigures, QueueSource
from .jobtable import COUNT_CAP, HEAD_ROWS, JobTable

if TYPE_CHECKING:
    from ..configmodel import Config
    from ..session import ProbeConnection

GRAPHILE_SQL = Queries("probes", "sources/graphile_worker.sql")


class GraphileWorker(QueueSource):
    name = "graphile-worker"
    order = 63
    options = ("schema",)
    default_schema = "graphile_worker"
    # 0.16's renamed tables (`_private_*`), its migrations table and its add_job(); its schema is
    # the `schema` option of its runner and utilities: any, several in one database.
    signature = ("_private_jobs.task_id", "_private_jobs.run_at", "_private_jobs.locked_at", "_private_tasks.identifier",
                 "_private_job_queues.queue_name", "migrations.id", "add_job()")

    def __init__(self, config: Config, schema: str | None = None, *, cap: int = COUNT_CAP) -> None:
        super().__init__(config, schema)
        self.cap = cap
        # Counted by the job-table layer as get_job sees a job: in flight when locked, dead when
        # out of attempts, delayed until run_at, blocked behind a locked named queue; grouped by
        # (task, named queue), which sample() adds up per task and per named queue.
        parts = self._parts()
        jobs = parts["jobs"].as_string(None)
        self.jobs = JobTable(DeclaredQueue(
            name=self.name, table=jobs, order_by="id", age_column="run_at", not_before_column="run_at",
            in_flight_when_not_null="locked_at", attempts_column="attempts", max_attempts_column="max_attempts",
        ), cap=cap, group=sql.SQL(GRAPHILE_SQL["group"]), blocked=sql.SQL(GRAPHILE_SQL["blocked"]).format(**parts),
            held_by_transactions=False)

    def _parts(self) -> dict[str, sql.Composable]:
        return {name: Identifier(self.schema, table) for name, table in (
            ("jobs", "_private_jobs"), ("tasks", "_private_tasks"), ("job_queues", "_private_job_queues"),
            ("migrations", "migrations"))}

    def detected(self, conn: ProbeConnection, install: Install) -> Detection | None:
        version = one(conn.execute(sql.SQL(GRAPHILE_SQL["version"]).format(**self._parts())))["version"]
        return Detection(version=f"migration {version}" if version else None, schema=install.schema)

    def sample(self, conn: ProbeConnection, detection: Detection) -> list[QueueFigures]:
        parts = self._parts()
        jobs = parts["jobs"].as_string(conn)
        table = self.jobs.resolved(conn)
        if not table.can_select:
            return [QueueFigures(name="jobs", table=jobs, error=f"no SELECT privilege on {jobs}")]
        names = conn.execute(sql.SQL(GRAPHILE_SQL["names"]).format(**parts)).fetchall()
        live = self.jobs.facts(conn).live
        if table.rls_active and not names:
            # Its tasks and queues are behind row-level security too: say it on the one row left.
            figures = QueueFigures(name="jobs", table=jobs, ready=0, in_flight=0, delayed=0, dead=0, depth=0, blocked=0)
            figures.notes.append(f"row-level security hides rows from this role: 0 visible of ~{live:,} live in {jobs}"
                                 " (tasks and named queues hidden too)")
            return [figures]
        by_group, estimated, view = self.jobs.counts(conn)
        # A job is in its task's row and in its named queue's row.
        totals: dict[tuple[str, str], dict[str, float]] = {}
        oldest: dict[tuple[str, str], float] = {}
        members: dict[tuple[str, str], list[str | None]] = {}  # the tally's groups a row adds up
        for group, counts in by_group.items():
            task_id, _, queue_id = (group or ":").partition(":")
            for key in (("task", task_id), ("queue", queue_id)):
                if not key[1]:
                    continue
                members.setdefault(key, []).append(group)
                total = totals.setdefault(key, dict.fromkeys(counts, 0.0))
                for cls, n in counts.items():
                    total[cls] += n
                if group in view.oldest:
                    oldest[key] = min(oldest.get(key, view.oldest[group]), view.oldest[group])
        server_now = time.time() + view.server_offset
        out = []
        for entry in names:
            key = (entry["kind"], entry["id"])
            counts = totals.get(key, {})

            def whole(cls: str, counts: dict[str, float] = counts) -> int:
                return round(counts.get(cls, 0))

            figures = QueueFigures(
                name=f"{entry['kind']}:{entry['name']}", table=jobs, ready=whole("ready"), in_flight=whole("in_flight"),
                delayed=whole("delayed") + whole("blocked"), blocked=whole("blocked"), dead=whole("dead"),
                estimated=dict(estimated),
            )
            figures.depth_is_estimate = any(k in estimated for k in ("ready", "in_flight", "delayed", "blocked"))
            figures.depth = (figures.ready or 0) + (figures.in_flight or 0) + (figures.delayed or 0)
            # (a row none of whose jobs were read yet: a group of its own, bounded by the sample's floor)
            self.jobs.mark_counting(figures, members.get(key) or [f"{key[0]}:{key[1]}"])
            if figures.ready and key in oldest:
                figures.oldest_ready_age_s = max(0.0, server_now - oldest[key])
            if entry["locked_at"] is not None:
                figures.notes.append(f"named queue locked by {entry['locked_by'] or '?'} since {entry['locked_at']:%H:%M:%S}"
                                     f": {whole('blocked'):,} job(s) wait behind it")
            if table.rls_active:
                figures.notes.append(f"row-level security hides rows from this role: {figures.depth or 0:,} visible"
                                     f" of ~{live:,} live in {jobs}")
            out.append(figures)
        return out

    def moved(self, blocks: set[int]) -> None:
        self.jobs.tally.moved(blocks)

    def details(self, conn: ProbeConnection, name: str) -> QueueDetails:
        kind, _, value = name.partition(":")
        params = {"task": value if kind == "task" else None, "queue": value if kind == "queue" else None,
                  "limit": HEAD_ROWS}
        parts = self._parts()
        head = conn.execute(sql.SQL(GRAPHILE_SQL["head"]).format(**parts), params).fetchall()
        dead = conn.execute(sql.SQL(GRAPHILE_SQL["failures"]).format(**parts), params).fetchall()
        blocked = (conn.execute(sql.SQL(GRAPHILE_SQL["blocked_head"]).format(**parts), {"queue": value, "limit": HEAD_ROWS}).fetchall()
                   if kind == "queue" else [])
        return QueueDetails(head=head, dead=dead, blocked=blocked)


SOURCE = GraphileWorker
