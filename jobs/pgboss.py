"""pg-boss's jobs, versions 9 and 10: `<schema>.job` (v10: partitioned by queue name, primary key
(name, id); v9: one table, primary key (id)), a queue being a job name.

States are the probe's (probes/sources/pgboss.py), which are fetchNextJob's: ready = created or
retry with start_after past; delayed = the same with start_after ahead (scheduled, or backing off
before a retry); blocked (v10) = due, but its singleton or stately queue has a job of its key
active; in flight = active; dead = failed (v9: and expired); done = completed, cancelled. Archived
jobs (moved to `<schema>.archive` by pg-boss's maintenance) have left the queue: no list shows
them; `job()` finds one as getJobById does (v9 always, v10 with includeArchive), as done.

Ids are random uuids: every list is in uuid order (stable, not the order of arrival). A list is
led by the queue's partition's primary key (name, id) in v10; by the fetch index for the waiting
states (ready, delayed, blocked) in both; a list no index leads (in flight, dead, done, a search,
and in v9 any list of every state) walks the primary key in id order, at most SCAN_ROWS jobs a
page, and says where it stopped when that bound ended the page.

Actions are the statements pg-boss's client methods run (src/plans.js), narrowed to the queue (v10
always names it: its partition key) and to the states the job was listed in: v10 retry(name, ids)
(retryJobs), cancel(name, ids) (cancelJobs), deleteJob(name, ids) (deleteJobs); v9 cancel(ids)
and, for retry, resume(ids) (resumeJobs: pg-boss 9 has no retry(); its resume returns a job of any
state to `created`). Run-now is no client method: it sets start_after, the column fetchNextJob
reads. pg-boss's workers poll: it sends and listens to no notification, so none is sent.

Which schema is which: the probe's Detection.version is pg-boss's schema version (9.0.3: 20; 10.x:
21 and up). The constructor makes a `PgBoss9Jobs` of a version below 21 (its own mirrors and
refusals); with no version given, the schema's version table is read when first needed.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any, ClassVar

from psycopg import errors, sql

from dbcore.database import DictRow, one
from dbcore.sqlfiles import Queries
from probes.sources.base import Identifier
from probes.sources.pgboss import PGBOSS_SQL, V10

from .library import JobLibrary
from .model import MAX_PAGE, SCAN_ROWS, Job, JobFilter, Page

PGBOSS_JOBS_SQL = Queries("jobs", "pgboss.sql")

# A listing by queuetop state: the states of jobs it takes in. Delayed is the snapshot's delayed
# figure: start_after ahead, and blocked (v10's singleton/stately policy holding a due job back).
LISTED = {"ready": ("ready",), "delayed": ("delayed", "blocked"), "blocked": ("blocked",), "in_flight": ("in_flight",),
          "dead": ("dead",), "done": ("done",)}
# The states fetchNextJob's index (`WHERE state < 'active'`) holds: a list of them may be led by it.
WAITING = ("ready", "delayed", "blocked")
# Columns shown as the job's own fields; the rest go to `extra`.
SHOWN = ("id", "name", "status", "queuetop_state", "data", "created_on", "start_after", "age_s")


class PgBossJobs(JobLibrary):
    """pg-boss 10 (its schema version 21 and up), or either version when the version is not known
    (the schema's version table says which at the first read or write)."""

    source = "pg-boss"
    mirrors: ClassVar[dict[str, str]] = {
        "retry": "retry(name, ids): pg-boss 10's retryJobs - `state = 'retry', retry_limit = retry_limit + 1` of a failed job "
                 "(one more attempt; its next fetch takes it); pg-boss's workers poll, no notification",
        "run-now": "no client method of pg-boss's: `start_after = now()` of a created/retry job due later - the column "
                   "fetchNextJob reads (`start_after < now()`), as send() sets it for a job sent with no startAfter",
        "cancel": "cancel(name, ids): cancelJobs - `state = 'cancelled', completed_on = now()` of a job not finished "
                  "(created, retry, or active: a running handler is not stopped, its completion then changes nothing); "
                  "resume(name, ids) is pg-boss's way back",
        "delete": "deleteJob(name, ids): deleteJobs - the row deleted, in any state (an active one too, as deleteJob does)",
    }
    lacks: ClassVar[dict[str, str]] = {}
    acts_on: ClassVar[dict[str, tuple[str, ...]]] = {
        "retry": ("dead",),
        # A blocked job is due already: its queue's policy holds it, not its start_after.
        "run-now": ("delayed",),
        # cancelJobs takes every state before completed: created, retry and active.
        "cancel": ("ready", "delayed", "blocked", "in_flight"),
        # deleteJobs takes any state.
        "delete": ("ready", "delayed", "blocked", "in_flight", "dead", "done"),
    }
    pause_lacks: ClassVar[str] = (
        "pg-boss keeps no paused state for a queue: a worker stops fetching only in its own process (offWork, stop), and "
        "nothing in the database holds a queue's jobs back")
    args_index: ClassVar[str | None] = None

    def __new__(cls, schema: str, version: str | None = None, *, options: Mapping[str, Any] | None = None) -> PgBossJobs:
        generation = _schema_version(version)
        if cls is PgBossJobs and generation is not None and generation < V10:
            cls = PgBoss9Jobs
        return object.__new__(cls)

    def __init__(self, schema: str, version: str | None = None, *, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(schema, version, options=options)
        generation = _schema_version(version)
        # Whether the schema is pg-boss 10's: known from the version given, else read when needed.
        self._v10: bool | None = None if generation is None else generation >= V10
        self.scan_rows = SCAN_ROWS  # rows a page that no index leads reads at most

    # -- the install -----------------------------------------------------------------------------

    def is_v10(self, conn: Any) -> bool:
        """Whether the install is pg-boss 10's schema (its version table, read once)."""
        if self._v10 is None:
            found = one(conn.execute(sql.SQL(PGBOSS_SQL["version"]).format(versions=Identifier(self.schema, "version"))))
            self._v10 = (_schema_version(str(found["version"])) or 0) >= V10
        return self._v10

    def _rules(self, conn: Any) -> type[PgBossJobs]:
        """The class whose mirrors and states rule this install's actions."""
        return PgBossJobs if self.is_v10(conn) else PgBoss9Jobs

    def _parts(self, v10: bool) -> dict[str, sql.Composable]:
        state: sql.Composable
        if v10:
            blocked = sql.SQL(PGBOSS_SQL["blocked_v10"]).format(job=Identifier(self.schema, "job"))
            state = sql.SQL(PGBOSS_JOBS_SQL["state_v10"]).format(blocked=blocked)
            row = sql.SQL(PGBOSS_JOBS_SQL["row_v10"]).format(state=state)
        else:
            state = sql.SQL(PGBOSS_JOBS_SQL["state_v9"])
            row = sql.SQL(PGBOSS_JOBS_SQL["row_v9"]).format(state=state)
        return {"jobs": Identifier(self.schema, "job"), "archive": Identifier(self.schema, "archive"), "state": state, "row": row}

    # -- reads -----------------------------------------------------------------------------------

    def page(self, conn: Any, queue: str, flt: JobFilter, *, after: str | None = None, limit: int = 50,
             newest_first: bool = False) -> Page:
        v10 = self.is_v10(conn)
        limit = max(1, min(limit, MAX_PAGE))
        start = _uuid(after)
        if after is not None and start is None:
            return Page(jobs=[], after=None, note=f"{after!r} is no pg-boss job id (a uuid)")
        ids: list[str] | None = None
        if flt.ids:
            ids = [i for i in (_uuid(i) for i in flt.ids) if i is not None]
            if not ids:
                return Page(jobs=[], after=None)
        if flt.state == "blocked" and not v10:
            return Page(jobs=[], after=None, note="pg-boss 9 holds no due job back (its singleton-queue limit is a worker's option, "
                                                  "enforceSingletonQueueActiveLimit, not recorded in the database)")
        states = LISTED[flt.state] if flt.state is not None else None
        every = sql.SQL(PGBOSS_JOBS_SQL["every_row"])
        parts = self._parts(v10)
        fields: dict[str, sql.Composable] = {
            "after": every if start is None else sql.SQL(PGBOSS_JOBS_SQL["after_newest"] if newest_first
                                                          else PGBOSS_JOBS_SQL["after_oldest"]),
            "order": sql.SQL(PGBOSS_JOBS_SQL["newest"] if newest_first else PGBOSS_JOBS_SQL["oldest"]),
            "states": every if states is None else sql.SQL(PGBOSS_JOBS_SQL["state_in"]).format(state=parts["state"]),
            "kind": every if flt.kind is None else sql.SQL(PGBOSS_JOBS_SQL["kind_is"]),
            "match": every if flt.match is None else sql.SQL(PGBOSS_JOBS_SQL["args_contain"]),
            "text": every if not flt.text else sql.SQL(PGBOSS_JOBS_SQL["args_text"]),
        }
        params: dict[str, Any] = {"queue": queue, "after": start, "ids": ids, "states": list(states) if states else None,
                                  "kind": flt.kind, "match": flt.match_json, "text": flt.text_pattern, "limit": limit + 1}
        # Led by an index: some ids (the primary key); else, no search, v10's every state (its
        # primary key (name, id)) or a waiting state (a range of the fetch index, or the primary
        # key: the planner's pick). Anything else is a bounded walk of the primary key.
        waiting: sql.Composable | None = every if ids is not None or (v10 and states is None and not flt.searches) else None
        if waiting is None and not flt.searches and flt.state in WAITING:
            if flt.state == "ready":
                waiting = sql.SQL(PGBOSS_JOBS_SQL["due_v10"] if v10 else PGBOSS_JOBS_SQL["due_v9"])
            elif not v10:  # delayed (v9 holds no job back: blocked returned above)
                waiting = sql.SQL(PGBOSS_JOBS_SQL["later_v9"])
            else:
                # A due job is blocked only while a job of its singleton/stately queue is active:
                # with none, the delayed are the range ahead of now, and nothing is blocked.
                held = one(conn.execute(sql.SQL(PGBOSS_JOBS_SQL["held_v10"]).format(jobs=parts["jobs"]), {"queue": queue}))["held"]
                if flt.state == "blocked":
                    if not held:
                        return Page(jobs=[], after=None)
                    waiting = sql.SQL(PGBOSS_JOBS_SQL["due_v10"])
                else:
                    waiting = sql.SQL(PGBOSS_JOBS_SQL["waiting"] if held else PGBOSS_JOBS_SQL["later_v10"])
        led = waiting is not None
        if waiting is not None:
            fields["ids"] = every if ids is None else sql.SQL(PGBOSS_JOBS_SQL["ids_in"])
            fields["waiting"] = waiting
            statement = PGBOSS_JOBS_SQL["list_v10"] if v10 else PGBOSS_JOBS_SQL["list_v9"]
        else:
            statement = PGBOSS_JOBS_SQL["scan_v10"] if v10 else PGBOSS_JOBS_SQL["scan_v9"]
            params["scan"] = self.scan_rows
        rows = conn.execute(sql.SQL(statement).format(**parts, **fields), params).fetchall()
        jobs = [self._job(queue, row) for row in rows[:limit]]
        if len(rows) > limit:
            return Page(jobs=jobs, after=jobs[-1].id)
        if led:
            return Page(jobs=jobs, after=None)
        edge_statement = PGBOSS_JOBS_SQL["edge_v10"] if v10 else PGBOSS_JOBS_SQL["edge_v9"]
        edge = conn.execute(sql.SQL(edge_statement).format(jobs=parts["jobs"], after=fields["after"], order=fields["order"]),
                            {"queue": queue, "after": start, "skip": self.scan_rows - 1}).fetchone()
        if edge is None:  # the window reached the last job
            return Page(jobs=jobs, after=None)
        if not v10:
            why = "pg-boss 9 has no index on (name, id): every queue's jobs are read in id order"
        elif flt.searches:
            why = "no index of pg-boss's leads a search by arguments"
        else:
            why = f"no index of pg-boss's leads its {flt.state} jobs"
        return Page(jobs=jobs, after=edge["id"], note=f"searched {self.scan_rows:,} jobs{' of this queue' if v10 else ''} up to id "
                                                      f"{edge['id']} ({why}): go on from there for more")

    def job(self, conn: Any, queue: str, job_id: str) -> Job | None:
        found = _uuid(job_id)
        if found is None:
            return None
        v10 = self.is_v10(conn)
        parts = self._parts(v10)
        params = {"queue": queue, "id": found}
        row = conn.execute(sql.SQL(PGBOSS_JOBS_SQL["job_v10"] if v10 else PGBOSS_JOBS_SQL["job_v9"]).format(**parts), params).fetchone()
        archived = row is None
        if archived:
            row = conn.execute(sql.SQL(PGBOSS_JOBS_SQL["archived_v10"] if v10 else PGBOSS_JOBS_SQL["archived_v9"]).format(**parts),
                               params).fetchone()
            if row is None:
                return None
        shown = self._job(queue, row, archived=archived)
        error = _error_output(row)
        return Job(id=shown.id, queue=shown.queue, state=shown.state, status=shown.status, kind=shown.kind,
                   attempts=shown.attempts, max_attempts=shown.max_attempts, created_at=shown.created_at,
                   scheduled_at=shown.scheduled_at, age_s=shown.age_s, last_error=shown.last_error, args=shown.args,
                   # pg-boss keeps one output a job: its last failure's (each fail() overwrites it).
                   errors=[error] if error is not None else [],
                   # pg-boss records no worker on a job: an active one's fetcher is not in the database.
                   held_by=None,
                   # The output is the error above, or (completed) the handler's result: kept here.
                   extra={key: value for key, value in row.items() if key not in SHOWN and not (key == "output" and error is not None)})

    @staticmethod
    def _job(queue: str, row: DictRow, *, archived: bool = False) -> Job:
        started = row["started_on"] is not None
        return Job(id=row["id"], queue=queue,
                   # An archived job has left the queue for good, whatever state it was archived in.
                   state="done" if archived else row["queuetop_state"], status=row["status"], kind=row["name"],
                   # retry_count counts the runs after the first (fetch adds one to a job started before).
                   attempts=row["retry_count"] + (1 if started else 0), max_attempts=row["retry_limit"] + 1,
                   created_at=row["created_on"], scheduled_at=row["start_after"], age_s=row["age_s"],
                   last_error=_error_text(_error_output(row)), args=row["data"])

    # -- writes ----------------------------------------------------------------------------------

    def act(self, conn: Any, queue: str, action: str, ids: list[str], expect: str | None) -> list[str]:
        type(self).refuse(action)
        v10 = self.is_v10(conn)
        rules = self._rules(conn)
        rules.refuse(action)  # an install found at run time to be pg-boss 9's: its own refusals
        wanted = [i for i in (_uuid(i) for i in ids) if i is not None]
        states = [s for s in rules.states_for(action) if expect is None or s in LISTED.get(expect, (expect,))]
        if not wanted or not states:
            return []
        if action == "retry":
            statement = PGBOSS_JOBS_SQL["retry_v10"] if v10 else PGBOSS_JOBS_SQL["retry_v9"]
        elif action == "run-now":
            statement = PGBOSS_JOBS_SQL["run_now_v10"] if v10 else PGBOSS_JOBS_SQL["run_now_v9"]
        elif action == "cancel":
            statement = PGBOSS_JOBS_SQL["cancel_v10"] if v10 else PGBOSS_JOBS_SQL["cancel_v9"]
        else:
            statement = PGBOSS_JOBS_SQL["delete_v10"]
        query = sql.SQL(statement).format(**self._parts(v10))
        try:
            with conn.transaction():  # a savepoint: a unique index's refusal undoes this statement alone
                return [row["id"] for row in conn.execute(query, {"queue": queue, "ids": wanted, "states": states}).fetchall()]
        except errors.UniqueViolation:
            # A retried job whose singleton key is taken by another queued job (v9's job_singletonKey,
            # v10's stately job_i3): pg-boss's own statement fails the same way. Each job on its own,
            # the refused ones skipped.
            changed: list[str] = []
            for one_id in wanted:
                try:
                    with conn.transaction():
                        changed += [row["id"] for row in conn.execute(query, {"queue": queue, "ids": [one_id], "states": states})]
                except errors.UniqueViolation:
                    continue
            return changed

    def pause(self, conn: Any, queue: str, paused: bool) -> None:
        type(self).refuse_pause()


class PgBoss9Jobs(PgBossJobs):
    """pg-boss 9 (schema version 20 and before): no retry() and no deleteJob() in its client."""

    mirrors: ClassVar[dict[str, str]] = {
        "retry": "resume(ids): pg-boss 9's resumeJobs - `state = 'created', completedOn = NULL` of a failed or expired job "
                 "(9 has no retry(); its resume statement takes a job of any state); pg-boss's workers poll, no notification",
        "run-now": "no client method of pg-boss's: `startAfter = now()` of a created/retry job due later - the column "
                   "fetchNextJob reads (`startAfter < now()`), as send() sets it for a job sent with no startAfter",
        "cancel": "cancel(ids): cancelJobs - `state = 'cancelled', completedOn = now()` of a job not finished (created, "
                  "retry, or active: a running handler is not stopped, its completion then changes nothing); resume(ids) "
                  "is pg-boss's way back",
    }
    lacks: ClassVar[dict[str, str]] = {
        "delete": "pg-boss 9 deletes no single job: deleteQueue(name) deletes a whole queue's waiting jobs, its maintenance "
                  "archives and purges finished ones (deleteJob(name, id) is pg-boss 10's)",
    }
    acts_on: ClassVar[dict[str, tuple[str, ...]]] = {
        "retry": ("dead",),
        "run-now": ("delayed",),
        "cancel": ("ready", "delayed", "blocked", "in_flight"),
    }


def _schema_version(version: str | None) -> int | None:
    """pg-boss's schema version (Detection.version), or None where it is not a number."""
    if version is None:
        return None
    try:
        return int(version)
    except ValueError:
        return None


def _uuid(value: str | None) -> str | None:
    """A job id as pg-boss's (a uuid, canonical text), or None: no job has that id."""
    if value is None:
        return None
    try:
        return str(uuid.UUID(str(value).strip()))
    except ValueError:
        return None


def _error_output(row: DictRow) -> Any:
    """The job's output where it is an error: every state's but completed's (there its result).
    fail() and a worker's failed handler write it (the error serialized: {name, message, stack},
    or {value: ...} for a value that is not an object); expiry writes {value: {message}}."""
    if row["status"] == "completed":
        return None
    return row["output"]


def _error_text(output: Any) -> str | None:
    if output is None:
        return None
    if isinstance(output, dict):
        for candidate in (output.get("message"), output.get("value")):
            if isinstance(candidate, dict) and isinstance(candidate.get("message"), str):
                return str(candidate["message"])
            if isinstance(candidate, str):
                return candidate
    return str(output)


LIBRARY = PgBossJobs
