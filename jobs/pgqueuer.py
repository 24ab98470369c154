"""PgQueuer's jobs (https://github.com/janbjorge/pgqueuer, 1.x; read from pgqueuer 1.6's own
queries: adapters/persistence/qb.py and queries.py).

Every job is a row of `pgqueuer` until it ends, in one table for every entrypoint (an
entrypoint is a queue); `pgqueuer_log` has a row per change of a job's status, with the
traceback of a failure, until someone clears it. The states are the probe's
(probes/sources/pgqueuer.py), from its dequeue: ready = `queued` and due, and `picked` gone stale
(no heartbeat for the workers' heartbeat_timeout: its dequeue takes those again); delayed =
`queued` due later; in flight = the other `picked`; dead = `failed` rows (on_failure 'hold') and
the log's `exception` rows (failed and deleted, the default); done = the log's `successful`,
`canceled` and `deleted` rows. Blocked is unknown: the concurrency limit that holds due jobs back
is in the workers' code, not in the database.

Actions are PgQueuer's own statements: retry = Queries.requeue_jobs (held `failed` jobs only: a
failed-and-deleted job left only its log row, not its payload); cancel = mark_job_as_cancelled
(the row deleted, logged `canceled`, and its `cancellation_event`, which cancels a running job's
context); delete = clear_queue's statement for the given ids (logged `deleted`); run-now =
`execute_after = NOW()` on a job queued for later. Retry and run-now are UPDATEs, on which
PgQueuer's trigger sends nothing: the `table_changed_event` it sends on an INSERT is sent after
them, so that workers dequeue now rather than at their next poll. No pause: PgQueuer has none.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from psycopg import sql

from dbcore.errors import UsageError
from dbcore.sqlfiles import Queries
from probes.sources.base import Identifier
from probes.sources.pgqueuer import DEFAULT_HEARTBEAT_TIMEOUT_S

from .library import HIGHEST, LOWEST, JobLibrary, int_ids, merge
from .model import SCAN_ROWS, ActionRefused, Job, JobFilter, Page

PGQUEUER_JOBS_SQL = Queries("jobs", "pgqueuer.sql")
DEFAULT_CHANNEL = "ch_pgqueuer"  # DBSettings.channel, where the install's trigger cannot be read
BRANCHES = ("due", "later", "stale", "running", "failed")
# queuetop's states -> the branches of the job table that hold them.
STATE_BRANCHES = {
    "ready": ("due", "stale"),
    "delayed": ("later",),
    "in_flight": ("running",),
    "dead": ("failed",),
    "blocked": (),
    "done": (),
}
BRANCH_STATE = {"due": "ready", "stale": "ready", "later": "delayed", "running": "in_flight", "failed": "dead"}
# Which branches each action takes (narrowed by the state the caller listed them in).
ACTION_BRANCHES = {
    "retry": ("failed",),
    "run-now": ("later",),
    # A stale job is ready (its dequeue takes it again): cancel tells its worker, should it live.
    "cancel": ("due", "later", "stale", "running"),
    # Not a picked job, stale or not: a worker may still have it (cancel is for that).
    "delete": ("due", "later", "failed"),
}


@dataclass(frozen=True, slots=True)
class _Install:
    has_log: bool
    has_failed: bool
    has_traceback: bool
    channel: str


def decode_payload(payload: bytes | None) -> Any:
    """A job's payload (bytea) as the console shows its arguments: the JSON value it holds, else
    its text, else its bytes in hex."""
    if payload is None:
        return None
    data = bytes(payload)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "\\x" + data.hex()
    try:
        return json.loads(text)
    except ValueError:
        return text


def escape_bytea(text: str) -> str:
    """`text` as PostgreSQL's encode(<its UTF-8 bytes>, 'escape') writes it: a backslash doubled,
    a zero byte or one with the high bit set as \\ooo."""
    out = []
    for byte in text.encode("utf-8"):
        if byte == 0x5C:
            out.append("\\\\")
        elif byte == 0 or byte >= 0x80:
            out.append(f"\\{byte:03o}")
        else:
            out.append(chr(byte))
    return "".join(out)


def payload_pattern(text: str | None) -> str | None:
    """An ILIKE pattern finding `text` in encode(payload, 'escape')."""
    if not text:
        return None
    escaped = escape_bytea(text).replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def contains(doc: Any, pattern: Any, *, top: bool = True) -> bool:
    """jsonb's `doc @> pattern` (https://www.postgresql.org/docs/current/datatype-json.html#JSON-CONTAINMENT)."""
    if isinstance(pattern, dict):
        return isinstance(doc, dict) and all(k in doc and contains(doc[k], v, top=False) for k, v in pattern.items())
    if isinstance(pattern, list):
        return isinstance(doc, list) and all(any(contains(d, p, top=False) for d in doc) for p in pattern)
    if isinstance(doc, list) and top:  # an array contains a primitive at the top level
        return any(_same(d, pattern) for d in doc)
    return _same(doc, pattern)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (dict, list)) or isinstance(b, (dict, list)):
        return False
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


class PgQueuerJobs(JobLibrary):
    source = "pgqueuer"
    mirrors: ClassVar[dict[str, str]] = {
        "retry": "Queries.requeue_jobs (QueueManagementService.requeue, `pgq requeue`): a held `failed` job back to `queued`, "
                 "due now, attempts 0, logged `queued`; then the `table_changed_event` its trigger sends on an INSERT "
                 "(its UPDATE sends none), so its workers dequeue now",
        "run-now": "execute_after = NOW() on a job queued for later (PgQueuer has no call for it; the job stays `queued`, "
                   "so nothing is logged); then the `table_changed_event` its trigger sends on an INSERT, so its workers "
                   "dequeue now",
        "cancel": "Queries.mark_job_as_cancelled (QueueManagementService.cancel): the row deleted, logged `canceled`, and "
                  "its `cancellation_event` NOTIFY with the ids: a worker running one cancels its Context.cancellation",
        "delete": "Queries.clear_queue's statement (DELETE, each row logged `deleted`; its trigger's `table_changed_event`) "
                  "for the given jobs rather than a whole entrypoint",
    }
    lacks: ClassVar[dict[str, str]] = {}
    acts_on: ClassVar[dict[str, tuple[str, ...]]] = {
        # A failed job PgQueuer deleted (on_failure 'delete') left a log row, not its payload:
        # only held ones can run again; the others are listed dead and skipped.
        "retry": ("dead",),
        "run-now": ("delayed",),
        # PgQueuer's cancel reaches a running job too (its cancellation_event).
        "cancel": ("ready", "delayed", "in_flight"),
        # Logged jobs (dead or done in the log) have no row left to delete: skipped.
        "delete": ("ready", "delayed", "dead"),
    }
    pause_lacks: ClassVar[str] = ("PgQueuer has no paused entrypoint: each worker dequeues every entrypoint its code "
                                  "registers, until its QueueManager is shut down")
    args_index: ClassVar[str | None] = None  # the payload is bytea, in no index: a search reads SCAN_ROWS a page
    scan_rows: int = SCAN_ROWS

    def __init__(self, schema: str, version: str | None = None, *, options: Mapping[str, Any] | None = None,
                 heartbeat_timeout_s: float | None = None) -> None:
        super().__init__(schema, version, options=options)
        # The workers' heartbeat_timeout (the source's `heartbeat_timeout_s` option, as the probe
        # reads it): a picked job silent longer is stale, counted ready.
        if heartbeat_timeout_s is None:
            heartbeat_timeout_s = float(self.options.get("heartbeat_timeout_s", DEFAULT_HEARTBEAT_TIMEOUT_S))
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.jobs_table = Identifier(schema, "pgqueuer")
        self.log_table = Identifier(schema, "pgqueuer_log")

    # -- the install ----------------------------------------------------------------------------

    def _install(self, conn: Any) -> _Install:
        names = {"log": sql.Identifier(self.schema, "pgqueuer_log").as_string(None),
                 "jobs": sql.Identifier(self.schema, "pgqueuer").as_string(None)}
        row = conn.execute(PGQUEUER_JOBS_SQL["install"], {**names, "schema": self.schema}).fetchone()
        return _Install(has_log=row["has_log"], has_failed=row["has_failed"], has_traceback=row["has_traceback"],
                        channel=row["channel"] or DEFAULT_CHANNEL)

    def _flags(self, branches: set[str]) -> dict[str, Any]:
        return {**{f"b_{b}": b in branches for b in BRANCHES}, "timeout_s": self.heartbeat_timeout_s}

    # -- reads ----------------------------------------------------------------------------------

    def page(self, conn: Any, queue: str, flt: JobFilter, *, after: str | None = None, limit: int = 50,
             newest_first: bool = False) -> Page:
        install = self._install(conn)
        if flt.state == "blocked":
            return Page([], None, note="PgQueuer's blocked jobs are unknown: the concurrency_limit that holds due jobs back "
                                       "is in its workers' code, not in the database")
        if flt.kind is not None and flt.kind != queue:
            return Page([], None, note="a PgQueuer job's kind is its entrypoint, the queue itself")
        position = None
        if after is not None:
            if not int_ids([after]):
                raise UsageError(f"{after!r} is not a PgQueuer job id")
            position = int_ids([after])[0]
        lo, hi = (LOWEST, HIGHEST) if position is None else ((LOWEST, position) if newest_first else (position, HIGHEST))
        order = sql.SQL("DESC" if newest_first else "ASC")
        searching = flt.searches
        branches = set(BRANCHES) if flt.state is None else set(STATE_BRANCHES[flt.state])
        # Log rows keep no payload: a search by arguments cannot match them.
        exceptions = install.has_log and not searching and flt.state in (None, "dead")
        finished = install.has_log and not searching and flt.state in (None, "done")
        # Where a search matches JSON (in Python: the payload is bytes), a branch returns every
        # candidate of its bounded rows.
        fetch = self.scan_rows + 1 if flt.match is not None else limit + 1
        params: dict[str, Any] = {
            **self._flags(branches), "queue": queue, "lo": lo, "hi": hi, "limit": fetch, "scan": self.scan_rows,
            "ids": int_ids(flt.ids) if flt.ids else None, "pattern": payload_pattern(flt.text),
        }
        parts: list[tuple[list[dict[str, Any]], int | None]] = []
        if branches:
            parts.append(self._job_rows(conn, install, flt, params, order, searching, newest_first, limit))
        if exceptions:
            section = PGQUEUER_JOBS_SQL["exceptions"] if install.has_traceback else PGQUEUER_JOBS_SQL["exceptions_no_traceback"]
            statement = sql.SQL(section).format(log=self.log_table, order=order)
            parts.append(([{**r, "logged": True} for r in conn.execute(statement, {**params, "limit": limit + 1})], None))
        if finished:
            rows_of = sql.SQL(PGQUEUER_JOBS_SQL["bounded"]).format(table=self.log_table, key=sql.Identifier("job_id"), order=order)
            statement = sql.SQL(PGQUEUER_JOBS_SQL["finished"]).format(rows=rows_of, log=self.log_table, order=order)
            rows = [{**r, "logged": True} for r in conn.execute(statement, {**params, "limit": limit + 1})]
            edge = None
            if len(rows) <= limit:
                edge = self._edge(conn, rows_of, sql.Identifier("job_id"), params, newest_first, whole_keys=False)
            parts.append((rows, edge))
        rows, next_after, cut = merge(parts, limit, newest_first, "id")
        note = None
        if cut is not None:
            if searching:
                why = f"read {self.scan_rows:,} jobs up to id {cut}: PgQueuer keeps no index on the payload"
            else:
                why = (f"read {self.scan_rows:,} rows up to id {cut}: PgQueuer keeps no index that leads these "
                       "(its log's finished rows; held failures where it has no log)")
            note = why + ": go on for more"
        return Page([self._job(queue, r) for r in rows], None if next_after is None else str(next_after), note)

    def _job_rows(self, conn: Any, install: _Install, flt: JobFilter, params: dict[str, Any], order: sql.Composable,
                  searching: bool, newest_first: bool, limit: int) -> tuple[list[dict[str, Any]], int | None]:
        """The job table's rows of the page, and the edge of its bounded read (held failures,
        which no index leads, and searches), where it stopped short."""
        bounded = sql.SQL(PGQUEUER_JOBS_SQL["bounded"]).format(table=self.jobs_table, key=sql.Identifier("id"), order=order)
        last_error = (sql.SQL(PGQUEUER_JOBS_SQL["last_error"]).format(log=self.log_table) if install.has_log and install.has_traceback
                      else sql.SQL("NULL::text"))
        rows_of: sql.Composable = bounded if searching else self.jobs_table
        # Held failures: through their `failed` log rows; without a log (an older PgQueuer), its
        # bounded rows (no index of the job table leads them); without the status, none.
        held_rows: sql.Composable = rows_of
        held: sql.Composable = sql.SQL(PGQUEUER_JOBS_SQL["held"]).format(log=self.log_table)
        scans_held = False
        if not install.has_failed:
            held = sql.SQL("false")
        elif not install.has_log:
            held_rows, held, scans_held = bounded, sql.SQL("true"), bool(params["b_failed"])
        statement = sql.SQL(PGQUEUER_JOBS_SQL["jobs"]).format(
            rows=rows_of, held_rows=held_rows, held=held, order=order, last_error=last_error, filters=sql.SQL(PGQUEUER_JOBS_SQL["filters"]))
        rows = [{**r, "logged": False} for r in conn.execute(statement, params)]
        if flt.match is not None:
            rows = [r for r in rows if contains(decode_payload(r["payload"]), flt.match)][:limit + 1]
        edge = None
        if (searching or scans_held) and len(rows) <= limit:
            edge = self._edge(conn, bounded, sql.Identifier("id"), params, newest_first, whole_keys=True)
        return rows, edge

    def _edge(self, conn: Any, rows_of: sql.Composable, key: sql.Identifier, params: dict[str, Any], newest_first: bool,
              *, whole_keys: bool) -> int | None:
        """Where a bounded read stopped (None: it read to the end). Where several rows share a key
        (the log's job_id), the last key may be cut in two: the page stops before it."""
        window = conn.execute(sql.SQL(PGQUEUER_JOBS_SQL["window"]).format(rows=rows_of, key=key), params).fetchone()
        if window["scanned"] < self.scan_rows:
            return None
        edge: int = window["low"] if newest_first else window["high"]
        if not whole_keys and window["low"] != window["high"]:
            edge += 1 if newest_first else -1
        return edge

    def job(self, conn: Any, queue: str, job_id: str) -> Job | None:
        install = self._install(conn)
        ids = int_ids([job_id])
        if not ids:
            return None
        params = {"id": ids[0], "queue": queue, "timeout_s": self.heartbeat_timeout_s}
        row = conn.execute(sql.SQL(PGQUEUER_JOBS_SQL["job"]).format(jobs=self.jobs_table), params).fetchone()
        history = (conn.execute(sql.SQL(PGQUEUER_JOBS_SQL["history"]).format(log=self.log_table), params).fetchall()
                   if install.has_log else [])
        if row is None:
            mine = [h for h in history if h["entrypoint"] == queue]
            if not mine:
                return None
            last = mine[-1]
            row = {"id": ids[0], "status": last["status"], "entrypoint": queue, "priority": last["priority"],
                   "created": mine[0]["created"], "logged_at": last["created"], "age_s": mine[0]["age_s"], "logged": True,
                   "last_error": None}
        else:
            row = {**row, "logged": False}
        errors = [{"at": h["created"].isoformat(), "status": h["status"], "error": _error(h["traceback"]),
                   "traceback": (h["traceback"] or {}).get("traceback")}
                  for h in history if h["traceback"]]
        if errors:
            row["last_error"] = errors[-1]["error"]
        job = self._job(queue, row)
        extra = dict(row.get("columns") or {})
        extra["log"] = [{"at": h["created"].isoformat(), "status": h["status"]} for h in history]
        if row.get("branch") == "stale":
            extra["stale"] = (f"no heartbeat for over {self.heartbeat_timeout_s:g} s: its worker died or hangs; "
                              "PgQueuer's dequeue takes it again")
        return Job(id=job.id, queue=job.queue, state=job.state, status=job.status, kind=job.kind, attempts=job.attempts,
                   max_attempts=None, created_at=job.created_at, scheduled_at=job.scheduled_at, age_s=job.age_s,
                   last_error=job.last_error, args=job.args, errors=errors, held_by=job.held_by, extra=extra)

    @staticmethod
    def _job(queue: str, row: dict[str, Any]) -> Job:
        status = row["status"]
        if row["logged"]:
            state = "dead" if status == "exception" else "done"
            return Job(id=str(row["id"]), queue=queue, state=state, status=status, kind=row["entrypoint"],
                       created_at=row["created"], age_s=row["age_s"], last_error=row["last_error"],
                       extra={"logged_at": row["logged_at"], "priority": row["priority"]})
        state = BRANCH_STATE.get(row["branch"], "done")
        return Job(id=str(row["id"]), queue=queue, state=state, status=status, kind=row["entrypoint"],
                   attempts=row["attempts"], max_attempts=None, created_at=row["created"], scheduled_at=row["execute_after"],
                   age_s=row["age_s"], last_error=row.get("last_error"), args=decode_payload(row["payload"]),
                   held_by=row["queue_manager_id"] if status == "picked" else None,
                   extra={"priority": row["priority"], "heartbeat": row["heartbeat"]})

    # -- writes ---------------------------------------------------------------------------------

    def act(self, conn: Any, queue: str, action: str, ids: list[str], expect: str | None) -> list[str]:
        self.refuse(action)
        states = set(self.states_for(action))
        if expect is not None:
            states &= {expect}
        branches = {b for s in states for b in STATE_BRANCHES[s]} & set(ACTION_BRANCHES[action])
        numbers = int_ids(ids)
        if not branches or not numbers:
            return []
        install = self._install(conn)
        if not install.has_log:
            raise ActionRefused("this PgQueuer install has no pgqueuer_log: it is older than the releases whose "
                                "statements queuetop runs (each logs the job's change of status there)")
        params = {**self._flags(branches), "queue": queue, "ids": numbers}
        in_state = sql.SQL(PGQUEUER_JOBS_SQL["in_state"])
        parts = {"jobs": self.jobs_table, "log": self.log_table, "in_state": in_state}
        if action == "retry":
            statement = sql.SQL(PGQUEUER_JOBS_SQL["retry"]).format(**parts)
        elif action == "run-now":
            statement = sql.SQL(PGQUEUER_JOBS_SQL["run_now"]).format(**parts)
        elif action == "cancel":
            statement = sql.SQL(PGQUEUER_JOBS_SQL["cancel"]).format(**parts)
        else:
            statement = sql.SQL(PGQUEUER_JOBS_SQL["delete"]).format(**parts)
        changed = [r["id"] for r in conn.execute(statement, params).fetchall()]
        if changed and action in ("retry", "run-now"):
            conn.execute(PGQUEUER_JOBS_SQL["notify_changed"], {"channel": install.channel, "table": "pgqueuer"})
        if changed and action == "cancel":
            conn.execute(PGQUEUER_JOBS_SQL["notify_cancellation"], {"channel": install.channel, "ids": changed})
        return [str(i) for i in changed]

    def pause(self, conn: Any, queue: str, paused: bool) -> None:
        self.refuse_pause()


def _error(traceback: Any) -> str | None:
    if not isinstance(traceback, dict):
        return None
    return ": ".join(str(traceback[k]) for k in ("exception_type", "exception_message") if traceback.get(k)) or None


LIBRARY = PgQueuerJobs
