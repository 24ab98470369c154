"""River's jobs (https://riverqueue.com, a Go library): `river_job`, one table for every queue.

States as the probe maps them (probes/sources/river.py): ready = `available` and due (River's
fetch, JobGetAvailable: `state = 'available' AND scheduled_at <= now()`); blocked = that in a
queue paused in `river_queue` (its producer fetches nothing while paused); delayed = available
with a schedule ahead, `scheduled`, `retryable`, `pending` (and blocked, as the snapshot counts
it); in_flight = `running`; dead = `discarded`; done = `completed`, `cancelled`.

Every action is River's own statement (River 0.44, riverdriver/riverpgxv5/internal/dbsqlc), over a
batch of ids, each id only while it is still in a state the action applies to:

- retry and run-now: JobRetry (what `Client.JobRetry` runs). River sends no notification for it: a
  producer fetches the job at its next poll (FetchPollInterval, 1 s by default).
- cancel: JobCancel, with the control notification it sends (`<schema>.river_control`); a running
  job is cancelled by its producer on that notification, as River's own `Client.JobCancel` does.
- delete: JobDelete (never a running job).
- pause/resume: QueuePause/QueueResume on `river_queue`, then the control notification
  `{"action":"pause","queue":..}` as `Client.QueuePause` sends it.

Keyset: job ids (bigserial, growing with time). A state's list is led by River's fetching index
(state, queue, priority, scheduled_at, id), a search by arguments by River's GIN index on args
(`river_job_args_index`, migration 002) where the install has it; a text search (and a search by
arguments without that index) reads at most SCAN_ROWS jobs a page, in id order, and says so.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, ClassVar, NamedTuple

from psycopg import sql

from dbcore.database import one
from dbcore.errors import UsageError
from dbcore.sqlfiles import Queries
from probes.sources.base import Identifier

from .library import ACTS_ON, JobLibrary, bigint_id
from .model import MAX_PAGE, SCAN_ROWS, ActionRefused, Job, JobFilter, Page

RIVER_JOBS_SQL = Queries("jobs", "river.sql")

# queuetop's states -> the finer states a job is put in by `state_of` (delayed includes blocked,
# as the snapshot's delayed figure does), and the River states each may hold (for River's index).
CLASSES: dict[str, tuple[str, ...]] = {
    "ready": ("ready",), "blocked": ("blocked",), "delayed": ("delayed", "blocked"), "in_flight": ("in_flight",),
    "dead": ("dead",), "done": ("done",),
}
RIVER_STATES: dict[str, tuple[str, ...]] = {
    "ready": ("available",), "blocked": ("available",), "delayed": ("available", "scheduled", "retryable", "pending"),
    "in_flight": ("running",), "dead": ("discarded",), "done": ("completed", "cancelled"),
}
CONTROL_TOPIC = "river_control"  # River's notifier.NotificationTopicControl, prefixed with the schema
# The row's columns a Job shows in its own fields; the rest are `extra`.
SHOWN = {"id", "queue", "state", "kind", "attempt", "max_attempts", "created_at", "scheduled_at", "args", "errors"}


class Install(NamedTuple):
    labels: tuple[str, ...]  # river_job_state's labels here
    has_registry: bool  # river_queue exists (River 0.5 and later)
    args_index: str | None  # a GIN index on args
    fetch_index: str | None  # River's fetching index (state, queue, priority, scheduled_at, id)


class RiverJobs(JobLibrary):
    source = "river"
    mirrors: ClassVar[dict[str, str]] = {
        "retry": "River's Client.JobRetry (JobRetry: available now, one more attempt if all were used; never a running job; "
                 "River sends no notification, a producer fetches it at its next poll)",
        "run-now": "River's Client.JobRetry (JobRetry: scheduled_at = now(), state available)",
        "cancel": "River's Client.JobCancel (JobCancel: a waiting job cancelled; a running one marked cancel_attempted_at, "
                  "its producer told on <schema>.river_control to cancel it)",
        "delete": "River's Client.JobDelete (JobDelete: never a running job)",
    }
    acts_on: ClassVar[dict[str, tuple[str, ...]]] = {
        # JobRetry re-drives any job not running: discarded, and finished ones (completed, cancelled) too.
        "retry": ("dead", "done"),
        "run-now": ("delayed",),
        # JobCancel cancels a running job too (its producer does it, on the control notification).
        "cancel": ("ready", "delayed", "blocked", "in_flight"),
        "delete": ACTS_ON["delete"],
    }
    pause_mirrors: ClassVar[str | None] = ("River's Client.QueuePause / QueueResume (river_queue.paused_at, then "
                                           "{\"action\":\"pause\"|\"resume\",\"queue\":..} on <schema>.river_control)")
    args_index: ClassVar[str | None] = "river_job_args_index (GIN on args, River's migration 002), where the install has it"

    def _parts(self) -> dict[str, sql.Composable]:
        return {"jobs": Identifier(self.schema, "river_job"), "queues": Identifier(self.schema, "river_queue"),
                "state_type": Identifier(self.schema, "river_job_state"), "state_of": sql.SQL(RIVER_JOBS_SQL["state_of"])}

    def _composed(self, text: str) -> sql.Composed:
        return sql.SQL(text).format(**self._parts())

    # -- what is installed ----------------------------------------------------------------------

    def install(self, conn: Any) -> Install:
        row = one(conn.execute(self._composed(RIVER_JOBS_SQL["install"]), {
            "jobs_table": sql.Identifier(self.schema, "river_job").as_string(None),
            "queues_table": sql.Identifier(self.schema, "river_queue").as_string(None)}))
        return Install(tuple(row["labels"]), bool(row["has_registry"]), row["args_index"], row["fetch_index"])

    def _paused(self, conn: Any, queue: str, install: Install) -> bool:
        if not install.has_registry:
            return False  # no registry: no queue is paused (the probe's rule too)
        row = conn.execute(self._composed(RIVER_JOBS_SQL["paused"]), {"queue": queue}).fetchone()
        return bool(row and row["paused"])

    # -- reads --------------------------------------------------------------------------------

    def page(self, conn: Any, queue: str, flt: JobFilter, *, after: str | None = None, limit: int = 50,
             newest_first: bool = False) -> Page:
        limit = max(1, min(int(limit), MAX_PAGE))
        install = self.install(conn)
        params: dict[str, Any] = {
            "queue": queue, "after": _job_id(after) if after is not None else None, "limit": limit, "scan": SCAN_ROWS,
            "paused": self._paused(conn, queue, install), "kind": flt.kind, "match": flt.match_json, "text": flt.text_pattern,
            "ids": [_job_id(i) for i in flt.ids] or None,
            "classes": list(CLASSES[flt.state]) if flt.state else None,
            # Only the labels this River has (`pending` came with its migration 004).
            "states": [s for s in RIVER_STATES[flt.state] if s in install.labels] if flt.state else None,
        }
        if (flt.state == "blocked" and not params["paused"]) or (flt.state == "ready" and params["paused"]):
            return Page([], None)  # a queue not paused blocks nothing; a paused one has nothing ready
        # What no index leads: a text search; a search by args without the GIN index; anything
        # else without River's fetching index (an install from the Python client's schema only).
        unled = bool(flt.text) or (flt.match is not None and install.args_index is None) or (
            flt.match is None and install.fetch_index is None and not flt.ids)
        # First a bounded walk of the primary key: a page at once where the jobs asked for are many.
        rows = conn.execute(self._composed(RIVER_JOBS_SQL["walk_desc" if newest_first else "walk_asc"]), params).fetchall()
        if len(rows) == limit:
            return Page([_job(row) for row in rows], str(rows[-1]["id"]))
        if unled:  # no index leads: the walk is all there is; go on from where it stopped
            jobs = [_job(row) for row in rows]
            window = one(conn.execute(self._composed(RIVER_JOBS_SQL["walked_desc" if newest_first else "walked_asc"]), params))
            if window["scanned"] < SCAN_ROWS:
                return Page(jobs, None)  # it read to the end of the table
            if flt.text:
                why = "a text search"
            elif flt.match is not None:
                why = "a search by arguments with no GIN index on river_job.args (River's river_job_args_index is missing here)"
            else:
                why = "a list with no index on river_job (state, queue) (River's river_job_prioritized_fetching_index is missing here)"
            note = (f"searched {window['scanned']:,} jobs up to id {window['last_id']}: {why} reads at most "
                    f"{SCAN_ROWS:,} jobs a page")
            return Page(jobs, str(window["last_id"]), note=note)
        # Few among the jobs: read through River's fetching index (a state; every state when none
        # is asked) or its GIN index on args.
        if params["states"] is None and flt.match is None:
            params["states"] = list(install.labels)
        conn.execute(RIVER_JOBS_SQL["bitmap_on"])
        rows = conn.execute(self._composed(RIVER_JOBS_SQL["led_desc" if newest_first else "led_asc"]), params).fetchall()
        conn.execute(RIVER_JOBS_SQL["bitmap_off"])
        jobs = [_job(row) for row in rows]
        return Page(jobs, jobs[-1].id if len(jobs) == limit else None)

    def job(self, conn: Any, queue: str, job_id: str) -> Job | None:
        install = self.install(conn)
        params = {"id": _job_id(job_id), "queue": queue, "paused": self._paused(conn, queue, install)}
        row = conn.execute(self._composed(RIVER_JOBS_SQL["job"]), params).fetchone()
        if row is None:
            return None
        attempted_by = row["attempted_by"] or []
        whole = dict(row["whole"])
        return _job(row, errors=list(row["errors"] or []),
                    held_by=attempted_by[-1] if row["status"] == "running" and attempted_by else None,
                    extra={k: v for k, v in whole.items() if k not in SHOWN})

    # -- writes -------------------------------------------------------------------------------

    def act(self, conn: Any, queue: str, action: str, ids: list[str], expect: str | None) -> list[str]:
        self.refuse(action)
        classes = self._classes(action, expect)
        if not ids:
            return []
        install = self.install(conn)
        params = {"ids": [_job_id(i) for i in ids], "queue": queue, "classes": classes,
                  "paused": self._paused(conn, queue, install), "schema": self.schema, "control_topic": CONTROL_TOPIC,
                  "cancel_attempted_at": json.dumps(_go_time(datetime.now(UTC)))}
        if action in ("retry", "run-now"):
            statement = RIVER_JOBS_SQL["retry"]
        elif action == "cancel":
            statement = RIVER_JOBS_SQL["cancel"]
        else:
            statement = RIVER_JOBS_SQL["delete"]
        rows = conn.execute(self._composed(statement), params).fetchall()
        return [str(r["id"]) for r in sorted(rows, key=lambda r: r["id"])]

    @classmethod
    def _classes(cls, action: str, expect: str | None) -> list[str]:
        """The finer states an action may change a job in: the action's, narrowed to `expect`."""
        states = cls.states_for(action)
        allowed = {c for s in states for c in CLASSES[s]}
        if expect is not None:
            allowed &= set(CLASSES[expect])
            if not allowed:
                raise ActionRefused(f"river's {action} is for {', '.join(states)} jobs, not {expect} ones")
        return sorted(allowed)

    def pause(self, conn: Any, queue: str, paused: bool) -> None:
        install = self.install(conn)
        if not install.has_registry:
            raise ActionRefused("river cannot pause a queue here: this install has no river_queue table "
                                "(River before 0.5, or the schema of River's Python client only)")
        payload = _go_json({"action": "pause" if paused else "resume", "queue": queue})
        params = {"queue": queue, "schema": self.schema, "control_topic": CONTROL_TOPIC, "payload": payload}
        rows = conn.execute(self._composed(RIVER_JOBS_SQL["pause" if paused else "resume"]), params).fetchall()
        if not rows:
            raise ActionRefused(f"river has no queue {queue!r} in river_queue (no producer has served it): "
                                f"River's Queue{'Pause' if paused else 'Resume'} finds none (ErrNotFound)")


def _job_id(text: str) -> int:
    number = bigint_id(text)
    if number is None:
        raise UsageError(f"{text!r} is not a River job id (a number)")
    return number


def _job(row: Any, *, errors: list[Any] | None = None, held_by: str | None = None, extra: dict[str, Any] | None = None) -> Job:
    return Job(id=str(row["id"]), queue=row["queue"], state=row["state"], status=row["status"], kind=row["kind"],
               attempts=row["attempts"], max_attempts=row["max_attempts"], created_at=row["created_at"],
               scheduled_at=row["scheduled_at"], age_s=row["age_s"], last_error=row["last_error"], args=row["args"],
               errors=errors or [], held_by=held_by, extra=extra or {})


def _go_time(at: datetime) -> str:
    """A time as Go's time.Time.MarshalJSON writes it in UTC (RFC 3339, fraction without trailing zeros):
    River's cancel_attempted_at."""
    fraction = f"{at.microsecond:06d}".rstrip("0")
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S") + (f".{fraction}" if fraction else "") + "Z"


def _go_json(value: dict[str, Any]) -> str:
    """JSON as Go's encoding/json.Marshal writes it: compact, keys in the struct's order, and <, >,
    & and the line separators escaped (River's control payloads are marshalled so)."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(char, escaped)
    return text


LIBRARY = RiverJobs
