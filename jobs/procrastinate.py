"""Procrastinate's jobs (https://procrastinate.readthedocs.io, 3.x): `procrastinate_jobs`, every
queue in one table, read and acted on as procrastinate itself does.

States, as the snapshot counts them (probes/sources/procrastinate.py, from its fetch
procrastinate_fetch_job_v2): ready = `todo`, due (scheduled_at null or past), not behind its lock;
blocked = `todo`, due, behind its lock (a `doing` job holds the lock, or a todo job of the lock
comes first in the fetch's order: probes' `blocked` fragment, the very one the snapshot counts
with); delayed = `todo` scheduled later, and the blocked ones; in_flight = `doing` (and the legacy
`aborting`); dead = `failed`; done = `succeeded`, `cancelled`, `aborted` (kept in the table).

Actions, through its own functions (the ones JobManager calls) with the notification that wakes
its workers: retry = procrastinate_retry_job_v2 (failed -> todo, now) and the `job_inserted`
payload of its insert trigger; run-now = a todo job's scheduled_at set to now (it has no call
for that) and the same payload; cancel = procrastinate_cancel_job_v1(id, abort, false): a todo
job cancelled, a doing one asked to abort (abort_requested, its trigger's `abort_job_requested`
notification; the task sees `context.should_abort()`); delete = procrastinate_cancel_job_v1(id,
false, true) for a todo job, the DELETE of JobManager.delete_old_jobs for a finished or failed
one. It has no paused queue. It keeps no error text: a job's errors are its failure events.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from psycopg import sql

from dbcore.database import DictRow
from dbcore.sqlfiles import Queries
from probes.sources.base import Identifier
from probes.sources.procrastinate import PROCRASTINATE_SQL

from .library import JobLibrary
from .model import SCAN_ROWS, ActionRefused, Job, JobFilter, Page

PROCRASTINATE_JOBS_SQL = Queries("jobs", "procrastinate.sql")

# Events that record a failed run: `deferred_for_retry` (failed, retried by its RetryStrategy),
# `failed` (failed for good), `aborted` (stopped on request).
FAILURE_EVENTS = ("deferred_for_retry", "failed", "aborted")
# The job row's columns shown as they are in `extra` (the others are Job's own fields).
# The states a list reads through an index in id order: procrastinate's (id, lock) index of its
# todo and doing jobs (procrastinate_jobs_id_lock_idx_v1), or its primary key for all of a queue's
# jobs. Failed and finished jobs have no index of their own: their lists are bounded reads.
INDEX_LED = (None, "ready", "delayed", "blocked", "in_flight")
EXTRA_COLUMNS = ("priority", "lock", "queueing_lock", "abort_requested", "worker_id", "last_heartbeat")


class ProcrastinateJobs(JobLibrary):
    source = "procrastinate"
    mirrors: ClassVar[dict[str, str]] = {
        "retry": "procrastinate_retry_job_v2(id, now(), NULL, NULL, NULL), as JobManager.retry_job_by_id (the shell's "
                 "`retry`): failed -> todo, due now; then the job_inserted NOTIFY of its insert trigger "
                 "(procrastinate_queue_v1#<queue>, procrastinate_any_queue_v1), which its retry does not send",
        "run-now": "a todo job scheduled later gets scheduled_at = now() (procrastinate has no call for it; its trigger "
                   "records the `scheduled` event), then the job_inserted NOTIFY of its insert trigger",
        "cancel": "procrastinate_cancel_job_v1(id, abort, false), as JobManager.cancel_job_by_id: a todo job -> cancelled "
                  "(abort false); a doing job: abort true, its abort request (abort_requested, the abort_job_requested "
                  "NOTIFY of its trigger; the task sees context.should_abort() and ends aborted)",
        "delete": "procrastinate_cancel_job_v1(id, false, true), as JobManager.cancel_job_by_id(delete_job=True), for a "
                  "todo job; for a failed or finished one the DELETE of JobManager.delete_old_jobs; never a doing job",
    }
    acts_on: ClassVar[dict[str, tuple[str, ...]]] = {
        "retry": ("dead",),
        # A blocked job is due already: its lock, not its schedule, holds it.
        "run-now": ("delayed",),
        "cancel": ("ready", "delayed", "blocked", "in_flight"),
        "delete": ("ready", "delayed", "blocked", "dead", "done"),
    }
    pause_lacks: ClassVar[str] = ("Procrastinate has no paused queue: a worker takes the queues it was started with "
                                  "(`procrastinate worker --queue`); stop those workers to stop a queue")
    args_index: ClassVar[str | None] = None  # procrastinate has no index on args

    # -- the install's parts ---------------------------------------------------------------------

    def _parts(self) -> dict[str, sql.Composable]:
        parts: dict[str, sql.Composable] = {
            "jobs": Identifier(self.schema, "procrastinate_jobs"),
            "events": Identifier(self.schema, "procrastinate_events"),
            "workers": Identifier(self.schema, "procrastinate_workers"),
            "retry_fn": Identifier(self.schema, "procrastinate_retry_job_v2"),
            "cancel_fn": Identifier(self.schema, "procrastinate_cancel_job_v1"),
        }
        parts["blocked"] = sql.SQL(PROCRASTINATE_SQL["blocked"]).format(**parts)
        parts["state_of"] = sql.SQL(PROCRASTINATE_JOBS_SQL["state_of"]).format(**parts)
        parts["columns"] = sql.SQL(PROCRASTINATE_JOBS_SQL["columns"]).format(**parts)
        return parts

    def _in_state(self, state: str | None, parts: dict[str, sql.Composable]) -> sql.Composable:
        fragments = {
            None: PROCRASTINATE_JOBS_SQL["in_any"],
            "ready": PROCRASTINATE_JOBS_SQL["in_ready"],
            "delayed": PROCRASTINATE_JOBS_SQL["in_delayed"],
            "blocked": PROCRASTINATE_JOBS_SQL["in_blocked"],
            "in_flight": PROCRASTINATE_JOBS_SQL["in_in_flight"],
            "dead": PROCRASTINATE_JOBS_SQL["in_dead"],
            "done": PROCRASTINATE_JOBS_SQL["in_done"],
        }
        return sql.SQL(fragments[state]).format(**parts)

    # -- reads -----------------------------------------------------------------------------------

    def page(self, conn: Any, queue: str, flt: JobFilter, *, after: str | None = None, limit: int = 50,
             newest_first: bool = False) -> Page:
        parts = self._parts()
        parts["direction"] = sql.SQL("DESC" if newest_first else "ASC")
        parts["after_cmp"] = sql.SQL("<" if newest_first else ">")
        limit = max(1, limit)
        start = _as_id(after) if after is not None else None
        ids = sorted({i for i in (_as_id(x) for x in flt.ids) if i is not None}) or None
        if (after is not None and start is None) or (flt.ids and ids is None):
            return Page(jobs=[], after=None)
        led = flt.state in INDEX_LED
        if led and flt.kind is None and not flt.searches:
            parts["in_state"] = self._in_state(flt.state, parts)
            rows = conn.execute(sql.SQL(PROCRASTINATE_JOBS_SQL["page"]).format(**parts),
                                {"queue": queue, "ids": ids, "after": start, "limit": limit + 1}).fetchall()
            jobs = [self._job(row) for row in rows[:limit]]
            return Page(jobs=jobs, after=jobs[-1].id if len(rows) > limit else None)
        # Read at most SCAN_ROWS jobs: of the state, where an index leads to it, else of the queue.
        parts["in_scan"] = self._in_state(flt.state if led else None, parts)
        states = None if led else [flt.state]
        rows = conn.execute(sql.SQL(PROCRASTINATE_JOBS_SQL["search"]).format(**parts), {
            "queue": queue, "ids": ids, "after": start, "limit": limit + 1, "scan": SCAN_ROWS, "states": states,
            "kind": flt.kind, "match": flt.match_json, "pattern": flt.text_pattern}).fetchall()
        scanned = int(rows[0]["scanned"]) if rows else 0
        found = [row for row in rows if row["id"] is not None]
        jobs = [self._job(row) for row in found[:limit]]
        if len(found) > limit:
            return Page(jobs=jobs, after=jobs[-1].id)
        if scanned < SCAN_ROWS:
            return Page(jobs=jobs, after=None)
        reached = str(rows[0]["lowest"] if newest_first else rows[0]["highest"])
        if led:
            why = "procrastinate has no index on task_name or args"
        else:
            why = f"procrastinate has no index that leads to {flt.state} jobs: {SCAN_ROWS} of the queue's jobs a page"
        return Page(jobs=jobs, after=reached, note=f"searched {scanned} jobs up to id {reached} ({why})")

    def job(self, conn: Any, queue: str, job_id: str) -> Job | None:
        key = _as_id(job_id)
        if key is None:
            return None
        parts = self._parts()
        row = conn.execute(sql.SQL(PROCRASTINATE_JOBS_SQL["job"]).format(**parts), {"id": key, "queue": queue}).fetchone()
        if row is None:
            return None
        events = conn.execute(sql.SQL(PROCRASTINATE_JOBS_SQL["events"]).format(**parts), {"id": key}).fetchall()
        return self._job(row, events)

    def _job(self, row: DictRow, events: list[DictRow] | None = None) -> Job:
        created: datetime | None = row["created_at"]
        now: datetime = row["now"]
        failures = [{"type": e["type"], "at": e["at"].isoformat() if e["at"] else None}
                    for e in (events or []) if e["type"] in FAILURE_EVENTS]
        extra: dict[str, Any] = {key: row[key] for key in EXTRA_COLUMNS if key in row}
        if events is not None:
            extra["events"] = [{"type": e["type"], "at": e["at"].isoformat() if e["at"] else None} for e in events]
        holding = row["status"] in ("doing", "aborting") and row["worker_id"] is not None
        return Job(
            id=str(row["id"]), queue=row["queue_name"], state=row["state"], status=row["status"], kind=row["task_name"],
            attempts=row["attempts"], max_attempts=None,  # a task's RetryStrategy lives in its code, not in the table
            created_at=created, scheduled_at=row["scheduled_at"],
            age_s=(now - created).total_seconds() if created is not None else None,
            last_error=None,  # procrastinate keeps no error text
            args=row["args"], errors=failures, held_by=f"worker {row['worker_id']}" if holding else None, extra=extra,
        )

    # -- writes ----------------------------------------------------------------------------------

    def act(self, conn: Any, queue: str, action: str, ids: list[str], expect: str | None) -> list[str]:
        type(self).refuse(action)
        if self.version is not None and self.version != "3.x":
            raise ActionRefused(f"procrastinate {self.version}: the job console acts through procrastinate 3.x's functions "
                                "(procrastinate_retry_job_v2, procrastinate_cancel_job_v1) only")
        states = [s for s in type(self).states_for(action) if expect is None or s == expect]
        keys = sorted({k for k in (_as_id(i) for i in ids) if k is not None})
        if not states or not keys:
            return []
        parts = self._parts()
        conn.execute(PROCRASTINATE_JOBS_SQL["search_path"], {"schema": self.schema})
        params = {"ids": keys, "queue": queue, "states": states}
        if action == "retry":
            rows = conn.execute(sql.SQL(PROCRASTINATE_JOBS_SQL["retry"]).format(**parts), params).fetchall()
        elif action == "run-now":
            rows = conn.execute(sql.SQL(PROCRASTINATE_JOBS_SQL["run_now"]).format(**parts), params).fetchall()
        elif action == "cancel":
            rows = conn.execute(sql.SQL(PROCRASTINATE_JOBS_SQL["cancel"]).format(**parts), params).fetchall()
        else:
            rows = conn.execute(sql.SQL(PROCRASTINATE_JOBS_SQL["delete_todo"]).format(**parts), params).fetchall()
            rows += conn.execute(sql.SQL(PROCRASTINATE_JOBS_SQL["delete_finished"]).format(**parts), params).fetchall()
        return [str(i) for i in sorted(row["id"] for row in rows if row["id"] is not None)]

    def pause(self, conn: Any, queue: str, paused: bool) -> None:
        type(self).refuse_pause()


def _as_id(value: str) -> int | None:
    """A procrastinate job id (bigint) from its text, or None where it cannot be one."""
    try:
        number = int(str(value).strip())
    except ValueError:
        return None
    return number if 0 < number < 2**63 else None


LIBRARY = ProcrastinateJobs
