"""PGMQ's messages as jobs (https://github.com/pgmq/pgmq; its SQL as the PyPI client ships it,
PGMQ 1.13, and the extension).

A queue is a row of `pgmq.meta`; its messages are `pgmq.q_<name>`, its archive `pgmq.a_<name>`.
The states are the probe's (probes/sources/pgmq.py): ready = visible (`vt <= now()`) and not
blocked; blocked = visible but behind its FIFO group's invisible oldest message (PGMQ's grouped
reads skip it); in flight = invisible after a read (`read_ct > 0`: a consumer has it until `vt`);
delayed = invisible and never read (sent with a delay), the blocked ones listed with them (the
snapshot counts them in delayed); dead = archived. PGMQ keeps no finished message (pgmq.delete
and pgmq.pop remove it): `done` lists nothing. A message has no kind (task name), no error and no
holder recorded: PGMQ keeps none of those.

Actions, through PGMQ's own functions: delete = pgmq.delete; run-now = pgmq.set_vt(..., 0) on a
message sent with a delay and never read; retry = pgmq.send of the archived message (a new
msg_id) and its archive row deleted, in one statement. No cancel (PGMQ has no cancelled state)
and no pause (no paused queue): see `lacks`.

Table names come from `pgmq.meta` only: a queue that is not listed there is a usage error, and no
identifier is ever made from the name a user typed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from psycopg import sql

from dbcore.errors import UsageError
from dbcore.sqlfiles import Queries
from probes.sources.base import Identifier

from .library import HIGHEST, LOWEST, JobLibrary, int_ids, merge
from .model import SCAN_ROWS, Job, JobFilter, Page

PGMQ_JOBS_SQL = Queries("jobs", "pgmq.sql")
QUEUE_STATES = ("ready", "blocked", "delayed", "in_flight")


@dataclass(frozen=True, slots=True)
class _Queue:
    """One queue of pgmq.meta and what its install has."""

    name: str
    table: Identifier
    archive: Identifier
    table_name: str
    has_headers: bool
    archive_has_headers: bool
    notifies: bool


def listed(state: str | None) -> set[str]:
    """The queuetop states a list of `state` shows (delayed: the blocked ones too, as the
    snapshot counts them); None: every one."""
    if state is None:
        return {*QUEUE_STATES, "dead"}
    return {"delayed", "blocked"} if state == "delayed" else {state}


class PgmqJobs(JobLibrary):
    source = "pgmq"
    default_schema: ClassVar[str] = "pgmq"  # PGMQ's SQL names its schema `pgmq` in every statement
    mirrors: ClassVar[dict[str, str]] = {
        "retry": "pgmq.send(queue, message, headers, 0) of the archived message (a new msg_id, visible now), and its row "
                 "deleted from pgmq.a_<queue>, in one statement (PGMQ has no unarchive; the DELETE is the one write that is "
                 "not a PGMQ function); pgmq.send's insert fires the queue's notify trigger where enable_notify_insert set it",
        "run-now": "pgmq.set_vt(queue, msg_id, 0) on a message sent with a delay and never read; then the "
                   "`pgmq.q_<queue>.INSERT` notification its insert trigger sends, where enable_notify_insert set it",
        "delete": "pgmq.delete(queue, msg_ids[]) on messages not read by a consumer (ready, delayed, blocked)",
    }
    lacks: ClassVar[dict[str, str]] = {
        "cancel": "PGMQ has no cancelled state: its only other place for a message is the archive, which queuetop counts "
                  "dead (and a retry would send it again); delete the message instead (pgmq.delete)",
    }
    acts_on: ClassVar[dict[str, tuple[str, ...]]] = {
        "retry": ("dead",),
        # A blocked message is visible already: what holds it back is its group's head, which a
        # consumer has. A read (in flight) one is a consumer's until its vt: set_vt would hand it
        # to a second consumer.
        "run-now": ("delayed",),
        # pgmq.delete removes from the queue table only: PGMQ has no function that deletes from
        # the archive. In flight: a consumer has it (it deletes or archives it when done).
        "delete": ("ready", "delayed", "blocked"),
    }
    pause_lacks: ClassVar[str] = ("PGMQ has no paused queue: its consumers take messages whenever they call pgmq.read; "
                                  "nothing in the database holds them back")
    args_index: ClassVar[str | None] = None  # PGMQ keeps no index on `message`: a search reads SCAN_ROWS a page
    scan_rows: int = SCAN_ROWS

    # -- the queue --------------------------------------------------------------------------------

    def _queue(self, conn: Any, queue: str) -> _Queue:
        statement = sql.SQL(PGMQ_JOBS_SQL["queue"]).format(meta=Identifier(self.schema, "meta"))
        row = conn.execute(statement, {"schema": self.schema, "queue": queue}).fetchone()
        if row is None or not row["has_queue"] or not row["has_archive"]:
            raise UsageError(f"no PGMQ queue {queue!r} in {self.schema}.meta")
        return _Queue(name=row["queue_name"], table=Identifier(self.schema, row["queue_table"]),
                      archive=Identifier(self.schema, row["archive_table"]), table_name=row["queue_table"],
                      has_headers=row["has_headers"], archive_has_headers=row["archive_has_headers"],
                      notifies=row["notifies"])

    def _blocked(self, q: _Queue) -> sql.Composable:
        return sql.SQL(PGMQ_JOBS_SQL["blocked"]).format(table=q.table) if q.has_headers else sql.SQL("false")

    def _in_state(self, q: _Queue) -> sql.Composable:
        return sql.SQL(PGMQ_JOBS_SQL["in_state"]).format(blocked=self._blocked(q))

    @staticmethod
    def _flags(states: set[str]) -> dict[str, bool]:
        return {f"s_{state}": state in states for state in QUEUE_STATES}

    # -- reads ----------------------------------------------------------------------------------

    def page(self, conn: Any, queue: str, flt: JobFilter, *, after: str | None = None, limit: int = 50,
             newest_first: bool = False) -> Page:
        q = self._queue(conn, queue)
        if flt.kind is not None:
            return Page([], None, note="PGMQ messages have no kind (task name): none matches a kind")
        if flt.state == "done":
            return Page([], None, note="PGMQ keeps no finished message: pgmq.delete and pgmq.pop remove it "
                                       "(archived messages are listed dead)")
        states = listed(flt.state)
        position = None
        if after is not None:
            if not int_ids([after]):
                raise UsageError(f"{after!r} is not a PGMQ msg_id")
            position = int_ids([after])[0]
        lo, hi = (LOWEST, HIGHEST) if position is None else ((LOWEST, position) if newest_first else (position, HIGHEST))
        order = sql.SQL("DESC" if newest_first else "ASC")
        params: dict[str, Any] = {
            **self._flags(states), "lo": lo, "hi": hi, "limit": limit + 1, "scan": self.scan_rows,
            "ids": int_ids(flt.ids) if flt.ids else None, "match": flt.match_json, "pattern": flt.text_pattern,
        }
        bounded = flt.searches
        branches = []
        for table, section, wanted in ((q.table, PGMQ_JOBS_SQL["messages"], bool(states & set(QUEUE_STATES))),
                                       (q.archive, PGMQ_JOBS_SQL["archived"], "dead" in states)):
            if not wanted:
                continue
            rows_of: sql.Composable = (sql.SQL(PGMQ_JOBS_SQL["bounded"]).format(table=table, order=order) if bounded else table)
            statement = sql.SQL(section).format(rows=rows_of, order=order, blocked=self._blocked(q),
                                                in_state=self._in_state(q))
            rows = conn.execute(statement, params).fetchall()
            edge = None
            if bounded and len(rows) <= limit:
                window = conn.execute(sql.SQL(PGMQ_JOBS_SQL["window"]).format(rows=rows_of), params).fetchone()
                if window["scanned"] >= self.scan_rows:
                    edge = window["low"] if newest_first else window["high"]
            branches.append((rows, edge))
        rows, next_after, cut = merge(branches, limit, newest_first, "msg_id")
        note = None
        if cut is not None:
            note = (f"searched {self.scan_rows:,} messages of each table up to msg_id {cut} "
                    "(PGMQ has no index on the message): go on for more")
        return Page([self._job(q, r) for r in rows], None if next_after is None else str(next_after), note)

    def job(self, conn: Any, queue: str, job_id: str) -> Job | None:
        q = self._queue(conn, queue)
        ids = int_ids([job_id])
        if not ids:
            return None
        params = {"id": ids[0]}
        row = conn.execute(sql.SQL(PGMQ_JOBS_SQL["message"]).format(table=q.table, blocked=self._blocked(q)), params).fetchone()
        if row is None:
            row = conn.execute(sql.SQL(PGMQ_JOBS_SQL["archived_message"]).format(table=q.archive), params).fetchone()
        if row is None:
            return None
        return self._job(q, row, whole=True)

    @staticmethod
    def _job(q: _Queue, row: dict[str, Any], *, whole: bool = False) -> Job:
        if row["archived"]:
            state, status = "dead", "archived"
        elif row["visible"]:
            state, status = ("blocked" if row["blocked"] else "ready"), "visible"
        else:
            state, status = ("in_flight" if row["read_ct"] > 0 else "delayed"), "invisible"
        extra: dict[str, Any] = {}
        if whole:
            extra = {"vt": row["vt"], "last_read_at": row["last_read_at"], "headers": row.get("headers")}
            if row["archived_at"] is not None:
                extra["archived_at"] = row["archived_at"]
            if state == "blocked":
                extra["blocked"] = "its FIFO group's oldest message is invisible: PGMQ's grouped reads skip it"
        return Job(id=str(row["msg_id"]), queue=q.name, state=state, status=status, kind=None,
                   attempts=row["read_ct"], max_attempts=None, created_at=row["enqueued_at"], scheduled_at=row["vt"],
                   age_s=row["age_s"], last_error=None, args=row["message"], errors=[], held_by=None, extra=extra)

    # -- writes ---------------------------------------------------------------------------------

    def act(self, conn: Any, queue: str, action: str, ids: list[str], expect: str | None) -> list[str]:
        self.refuse(action)
        states = set(self.states_for(action))
        if expect is not None:
            states &= listed(expect)
        numbers = int_ids(ids)
        if not states or not numbers:
            return []
        q = self._queue(conn, queue)
        params: dict[str, Any] = {"queue": q.name, "ids": numbers, **self._flags(states)}
        if action == "delete":
            statement = sql.SQL(PGMQ_JOBS_SQL["delete"]).format(table=q.table, in_state=self._in_state(q))
            return [str(r["msg_id"]) for r in conn.execute(statement, params).fetchall()]
        if action == "run-now":
            done = [str(r["msg_id"]) for r in conn.execute(sql.SQL(PGMQ_JOBS_SQL["run_now"]).format(table=q.table), params).fetchall()]
            if done and q.notifies:
                conn.execute(PGMQ_JOBS_SQL["notify_insert"], {"table": q.table_name})
            return done
        # retry
        section = PGMQ_JOBS_SQL["retry"] if q.has_headers and q.archive_has_headers else PGMQ_JOBS_SQL["retry_no_headers"]
        rows = conn.execute(sql.SQL(section).format(archive=q.archive), params).fetchall()
        return [str(r["old_id"]) for r in rows]

    def pause(self, conn: Any, queue: str, paused: bool) -> None:
        self.refuse_pause()


LIBRARY = PgmqJobs
