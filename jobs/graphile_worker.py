"""Graphile Worker's jobs (0.16 and later): `_private_jobs`, its tasks and named queues.

A queue is what the queues probe names a row (probes/sources/graphile_worker.py): a task,
`task:<identifier>`, or a named queue, `queue:<queue_name>`; a job is in both of its rows. States
are the probe's, which are get_job's: in flight = locked; dead = attempts used up ("permanently
failed", kept with `last_error`); delayed = run_at ahead (scheduled, or backing off after a failure)
or blocked; blocked = due, but its named queue is locked by the worker running another of its jobs;
ready = the rest. Graphile Worker deletes a job once it completes: no finished (`done`) job is kept.

Lists: Graphile Worker indexes `_private_jobs` on its primary key, its unique `key` and, for
get_job, on (priority, run_at) of available jobs; nothing leads a task's or a named queue's jobs,
nor a state that is not "available" (dead, in flight). Every list therefore walks the primary key
in id order (ids are an identity: they grow with time), reading at most SCAN_ROWS jobs a page, and
says where it stopped when that bound ended the page.

Actions are its admin SQL functions, the ones WorkerUtils calls: reschedule_jobs (retry, run-now),
permanently_fail_jobs (cancel: it has no cancelled state), complete_jobs (delete: completing a job
deletes it). Each leaves alone a job a worker has locked, and so does the compare-and-set before it.
reschedule_jobs sends no notification: after it, what add_job sends on `jobs:insert`, so that an
idle worker fetches now rather than at its next poll.
"""

from __future__ import annotations

from typing import Any, ClassVar

from psycopg import sql

from dbcore.database import DictRow, one
from dbcore.errors import UsageError
from dbcore.sqlfiles import Queries
from probes.sources.base import Identifier

from .library import JobLibrary, bigint_id
from .model import MAX_PAGE, SCAN_ROWS, Job, JobFilter, Page

GRAPHILE_JOBS_SQL = Queries("jobs", "graphile_worker.sql")

# What cancel writes as the job's last_error (permanently_fail_jobs' reason).
CANCEL_REASON = "cancelled from queuetop's job console"
# A listing by queuetop state: the states of Graphile Worker's jobs it takes in. Delayed is the
# snapshot's delayed figure: run_at ahead, and blocked behind a locked named queue.
LISTED = {"ready": ("ready",), "delayed": ("delayed", "blocked"), "blocked": ("blocked",), "in_flight": ("in_flight",),
          "dead": ("dead",), "done": ()}


class GraphileWorkerJobs(JobLibrary):
    source = "graphile-worker"
    mirrors: ClassVar[dict[str, str]] = {
        "retry": "graphile_worker.reschedule_jobs(ids, run_at := now(), attempts := 0) (WorkerUtils.rescheduleJobs),"
                 " then pg_notify('jobs:insert', '{\"r\":...,\"count\":n}') as add_job sends",
        "run-now": "graphile_worker.reschedule_jobs(ids, run_at := now()) (WorkerUtils.rescheduleJobs),"
                   " then pg_notify('jobs:insert', '{\"r\":...,\"count\":n}') as add_job sends",
        "cancel": f"graphile_worker.permanently_fail_jobs(ids, '{CANCEL_REASON}') (WorkerUtils.permanentlyFailJobs):"
                  " kept, failed for good (Graphile Worker has no cancelled state)",
        "delete": "graphile_worker.complete_jobs(ids) (WorkerUtils.completeJobs): completing a job deletes it",
    }
    lacks: ClassVar[dict[str, str]] = {}
    acts_on: ClassVar[dict[str, tuple[str, ...]]] = {
        # A blocked job is due already: making it due "now" would only move it behind its named
        # queue's other jobs (get_job takes them by priority, then run_at).
        "run-now": ("delayed",),
        # Graphile Worker keeps no finished job: there is no `done` to delete.
        "delete": ("ready", "delayed", "blocked", "dead"),
    }
    pause_lacks: ClassVar[str] = (
        "Graphile Worker has no paused queue or task: get_job takes any available job of the tasks a worker knows; a named "
        "queue's lock is the worker running one of its jobs (released when it ends), and forbiddenFlags are a worker's own "
        "option, not something a queue's jobs carry in the database")
    args_index: ClassVar[str | None] = None

    # -- the queue a name means ------------------------------------------------------------------

    def _parts(self) -> dict[str, sql.Composable]:
        parts: dict[str, sql.Composable] = {name: Identifier(self.schema, name) for name in (
            "reschedule_jobs", "permanently_fail_jobs", "complete_jobs")}
        parts.update({"jobs": Identifier(self.schema, "_private_jobs"), "tasks": Identifier(self.schema, "_private_tasks"),
                      "job_queues": Identifier(self.schema, "_private_job_queues")})
        parts["state"] = sql.SQL(GRAPHILE_JOBS_SQL["state"])
        parts["status"] = sql.SQL(GRAPHILE_JOBS_SQL["status"])
        return parts

    @staticmethod
    def scope(queue: str) -> dict[str, str | None]:
        """The queue's name as the probe gives it: a task or a named queue (the parameters)."""
        kind, _, name = queue.partition(":")
        if kind not in ("task", "queue") or not name:
            raise UsageError(f"{queue!r} is no Graphile Worker queue: its queues are `task:<identifier>` and `queue:<queue name>`")
        return {"task": name if kind == "task" else None, "queue_name": name if kind == "queue" else None}

    @staticmethod
    def _states(action_states: tuple[str, ...], expect: str | None) -> list[str]:
        """The job states an action takes: its own, narrowed to those a listing by `expect` holds."""
        if expect is None:
            return list(action_states)
        return [s for s in action_states if s in LISTED.get(expect, (expect,))]

    # -- reads -----------------------------------------------------------------------------------

    def page(self, conn: Any, queue: str, flt: JobFilter, *, after: str | None = None, limit: int = 50,
             newest_first: bool = False) -> Page:
        params: dict[str, Any] = self.scope(queue)
        states = LISTED[flt.state] if flt.state is not None else None
        if states == ():
            return Page(jobs=[], after=None, note="Graphile Worker deletes a job once it completes: no finished job is kept")
        limit = max(1, min(limit, MAX_PAGE))
        start = _bigint(after, "after")
        ids: list[int] | None = None
        if flt.ids:
            ids = [n for n in (bigint_id(i) for i in flt.ids) if n is not None]
            if not ids:
                return Page(jobs=[], after=None)
        parts = self._parts()
        upto: str | None = None
        scanned = 0
        if ids is None:  # no index leads the queue's jobs: a bounded walk of the primary key
            window = GRAPHILE_JOBS_SQL["window_newest"] if newest_first else GRAPHILE_JOBS_SQL["window"]
            row = one(conn.execute(sql.SQL(window).format(**parts), {"after": start, "scan": SCAN_ROWS}))
            upto, scanned = row["upto"], row["scanned"]
            if upto is None:  # nothing left after `after`
                return Page(jobs=[], after=None)
        statement = GRAPHILE_JOBS_SQL["page_newest"] if newest_first else GRAPHILE_JOBS_SQL["page"]
        params.update({"after": start, "upto": _bigint(upto, "upto"), "ids": ids, "states": list(states) if states else None,
                       "kind": flt.kind, "match": flt.match_json, "text": flt.text_pattern, "limit": limit + 1})
        rows = conn.execute(sql.SQL(statement).format(**parts), params).fetchall()
        jobs = [self._job(queue, row) for row in rows[:limit]]
        if len(rows) > limit:
            return Page(jobs=jobs, after=jobs[-1].id)
        if ids is None and scanned >= SCAN_ROWS:
            return Page(jobs=jobs, after=upto,
                        note=f"searched {scanned:,} jobs up to id {upto}: no index of Graphile Worker's leads a task's or a"
                             " named queue's jobs (go on from there for more)")
        return Page(jobs=jobs, after=None)

    def job(self, conn: Any, queue: str, job_id: str) -> Job | None:
        number = bigint_id(job_id)
        if number is None:
            return None
        params: dict[str, Any] = {**self.scope(queue), "id": number}
        row = conn.execute(sql.SQL(GRAPHILE_JOBS_SQL["job"]).format(**self._parts()), params).fetchone()
        if row is None:
            return None
        shown = self._job(queue, row)
        extra = {key: row[key] for key in ("task", "queue_name", "priority", "key", "revision", "flags", "locked_at", "updated_at",
                                           "is_available", "task_id", "job_queue_id", "queue_holder", "queue_since")}
        return Job(id=shown.id, queue=shown.queue, state=shown.state, status=shown.status, kind=shown.kind,
                   attempts=shown.attempts, max_attempts=shown.max_attempts, created_at=shown.created_at,
                   scheduled_at=shown.scheduled_at, age_s=shown.age_s, last_error=shown.last_error, args=shown.args,
                   # Graphile Worker keeps only the last error of a job (each failure overwrites it).
                   errors=[row["last_error"]] if row["last_error"] is not None else [],
                   held_by=row["locked_by"], extra=extra)

    @staticmethod
    def _job(queue: str, row: DictRow) -> Job:
        return Job(id=row["id"], queue=queue, state=row["state"], status=row["status"], kind=row["task"],
                   attempts=row["attempts"], max_attempts=row["max_attempts"], created_at=row["created_at"],
                   scheduled_at=row["run_at"], age_s=row["age_s"], last_error=row["last_error"], args=row["args"])

    # -- writes ----------------------------------------------------------------------------------

    def act(self, conn: Any, queue: str, action: str, ids: list[str], expect: str | None) -> list[str]:
        type(self).refuse(action)
        numbers = [n for n in (bigint_id(i) for i in ids) if n is not None]
        states = self._states(type(self).states_for(action), expect)
        if not numbers or not states:
            return []
        parts = self._parts()
        picked = [row["id"] for row in conn.execute(sql.SQL(GRAPHILE_JOBS_SQL["pick"]).format(**parts),
                                                    {**self.scope(queue), "ids": numbers, "states": states}).fetchall()]
        if not picked:
            return []
        params: dict[str, Any] = {"ids": picked}
        if action == "retry":
            statement = GRAPHILE_JOBS_SQL["retry"]
        elif action == "run-now":
            statement = GRAPHILE_JOBS_SQL["run_now"]
        elif action == "cancel":
            statement = GRAPHILE_JOBS_SQL["cancel"]
            params["reason"] = CANCEL_REASON
        else:
            statement = GRAPHILE_JOBS_SQL["delete"]
        changed = [row["id"] for row in conn.execute(sql.SQL(statement).format(**parts), params).fetchall()]
        if changed and action in ("retry", "run-now"):
            # Sent when the transaction commits, as add_job's is.
            conn.execute(GRAPHILE_JOBS_SQL["notify"], {"count": len(changed)})
        return changed

    def pause(self, conn: Any, queue: str, paused: bool) -> None:
        type(self).refuse_pause()


def _bigint(value: str | None, what: str) -> int | None:
    if value is None:
        return None
    number = bigint_id(value)
    if number is None:
        raise UsageError(f"{what} {value!r} is no Graphile Worker job id (a whole number)")
    return number


LIBRARY = GraphileWorkerJobs
