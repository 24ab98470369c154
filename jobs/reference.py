"""The reference engine's table queues (queuetop's own engine, `queuetop engine ...`).

A queue is one table of messages (`queuetop.q_<name>`, listed in `queuetop.queues`), deleted when
acked; a message that failed max_attempts times moves to `queuetop.dead_letters`. States as the
probe reads them (probes/sources/reference.py): in_flight = claimed (a claim token, its visibility
deadline ahead) or held (a hold-transaction worker's open transaction has it); delayed = backing off
after a failure (visible_at ahead, no claim); ready = the rest; dead = a dead letter. The engine
keeps nothing once finished (done) and blocks nothing (blocked): those lists are empty.

Job ids: a message's id (`"42"`), a dead letter's `"dead:<id>"` (its own id in dead_letters; the
message it was is `extra["message_id"]`). Keyset order: messages by id, then dead letters by id
(newest first: the reverse). The queue's table has only its primary key: every list of messages
reads at most SCAN_ROWS of them a page, in id order, and says how far it read when it found too
few; dead letters are read through their index (queue, id).

The engine's own statements (queues/sql/postgresql/queries.sql), with the same meaning: retry =
retry_dead_letters for the chosen dead letters (new messages, attempts 0, in one statement; the
INSERT fires the queue's trigger, which wakes its workers: NOTIFY queuetop_enqueue, the queue's
name); run-now = release_for_retry's no-delay case for a backing-off message (visible_at NULL),
with the same NOTIFY; delete = purge_dead_letters for the chosen dead letters, or a waiting message
deleted as an ack deletes one. The engine has no cancelled state and no paused queue.
"""

from __future__ import annotations

from typing import Any, ClassVar

from psycopg import sql

from dbcore.errors import UsageError
from dbcore.sqlfiles import Queries
from probes.sources.base import Identifier

from .library import JobLibrary
from .model import MAX_PAGE, SCAN_ROWS, ActionRefused, Job, JobFilter, Page

REFERENCE_JOBS_SQL = Queries("jobs", "reference.sql")

DEAD_PREFIX = "dead:"
CHANNEL = "queuetop_enqueue"  # the engine's waker: schema.sql's notify_enqueue, queues/worker.py's LISTEN
MESSAGE_STATES = ("ready", "delayed", "in_flight")


class ReferenceJobs(JobLibrary):
    source = "reference"
    default_schema = "queuetop"  # the engine's own schema (queues/sql/postgresql/schema.sql)
    mirrors: ClassVar[dict[str, str]] = {
        "retry": "the engine's retry_dead_letters, for these dead letters (new messages, attempts 0, gone from the "
                 "dead letters, in one statement; the INSERT's trigger NOTIFYs queuetop_enqueue)",
        "run-now": "the engine's release_for_retry with no delay (visible_at NULL), then NOTIFY queuetop_enqueue "
                   "as an enqueue does",
        "delete": "the engine's purge_dead_letters for these dead letters; a waiting message deleted as an ack "
                  "deletes one (never one a worker has claimed or holds)",
    }
    lacks: ClassVar[dict[str, str]] = {
        "cancel": "the engine has no cancelled state: a message waits, is in flight, or is a dead letter after "
                  "max_attempts failures (dead letters are failures: a cancel put there would count as one); "
                  "delete removes a waiting message for good",
    }
    acts_on: ClassVar[dict[str, tuple[str, ...]]] = {
        "retry": ("dead",),
        "run-now": ("delayed",),
        "delete": ("ready", "delayed", "dead"),
    }
    pause_lacks: ClassVar[str] = ("the engine has no notion of a paused queue: its workers claim whatever is visible "
                                  "(stop the queue's workers to stop it)")
    args_index: ClassVar[str | None] = None

    def _parts(self, table: str | None = None) -> dict[str, sql.Composable]:
        parts: dict[str, sql.Composable] = {
            "queues": Identifier(self.schema, "queues"), "dead": Identifier(self.schema, "dead_letters"),
            "state_of": sql.SQL(REFERENCE_JOBS_SQL["state_of"])}
        if table is not None:
            parts["table"] = Identifier(self.schema, table)
        return parts

    def _table(self, conn: Any, queue: str) -> str:
        rows = _run(conn, REFERENCE_JOBS_SQL["table_of"], self._parts(), {"queue": queue})
        row = rows[0] if rows else None
        if row is None:
            raise UsageError(f"the engine has no queue {queue!r}")
        return str(row["table_name"])

    # -- reads --------------------------------------------------------------------------------

    def page(self, conn: Any, queue: str, flt: JobFilter, *, after: str | None = None, limit: int = 50,
             newest_first: bool = False) -> Page:
        limit = max(1, min(int(limit), MAX_PAGE))
        if flt.kind is not None:
            return Page([], None, note="the engine's messages have no kind (a queue's messages are bodies only)")
        if flt.state in ("blocked", "done"):
            why = "blocks no message" if flt.state == "blocked" else "keeps no finished message (an ack deletes it)"
            return Page([], None, note=f"the engine {why}")
        parts = self._parts(self._table(conn, queue))
        message_ids = [int(i) for i in flt.ids if not i.startswith(DEAD_PREFIX) and _is_id(i)]
        dead_ids = [int(i[len(DEAD_PREFIX):]) for i in flt.ids if i.startswith(DEAD_PREFIX) and _is_id(i[len(DEAD_PREFIX):])]
        if flt.ids and len(message_ids) + len(dead_ids) < len(flt.ids):
            bad = next(i for i in flt.ids if not _is_id(i.removeprefix(DEAD_PREFIX)))
            raise UsageError(f"{bad!r} is not a job id of the engine (a message's number, or dead:<number>)")
        base: dict[str, Any] = {"queue": queue, "match": flt.match_json, "text": flt.text_pattern, "scan": SCAN_ROWS}
        wants_messages = flt.state in (None, *MESSAGE_STATES) and (not flt.ids or bool(message_ids))
        wants_dead = flt.state in (None, "dead") and (not flt.ids or bool(dead_ids))
        in_dead = after is not None and after.startswith(DEAD_PREFIX)
        position = _id_of(after)
        # Ascending: messages, then dead letters; newest first: dead letters, then messages.
        segments = ["dead", "messages"] if newest_first else ["messages", "dead"]
        if after is not None:
            current = "dead" if in_dead else "messages"
            segments = segments[segments.index(current):]
        jobs: list[Job] = []
        for n, segment in enumerate(segments):
            if (segment == "messages" and not wants_messages) or (segment == "dead" and not wants_dead):
                continue
            start = position if n == 0 else None
            want = limit - len(jobs)
            params: dict[str, Any] = {**base, "after": start, "limit": want}
            if segment == "messages":
                params |= {"classes": [flt.state] if flt.state else None, "ids": message_ids or None}
                rows = _run(conn, REFERENCE_JOBS_SQL["messages_desc" if newest_first else "messages_asc"], parts, params)
                jobs += [_message(queue, row) for row in rows]
            else:
                params |= {"ids": dead_ids or None}
                rows = _run(conn, REFERENCE_JOBS_SQL["dead_desc" if newest_first else "dead_asc"], parts, params)
                jobs += [_dead_letter(queue, row) for row in rows]
            if len(rows) == want:
                return Page(jobs, jobs[-1].id)
            if segment == "messages":
                text = REFERENCE_JOBS_SQL["messages_scanned_desc" if newest_first else "messages_scanned_asc"]
            else:
                text = REFERENCE_JOBS_SQL["dead_scanned_desc" if newest_first else "dead_scanned_asc"]
            [window] = _run(conn, text, parts, params)
            if window["scanned"] >= SCAN_ROWS:  # the window ended before the page filled: go on from there
                what = "messages" if segment == "messages" else "dead letters"
                last = str(window["last_id"]) if segment == "messages" else f"{DEAD_PREFIX}{window['last_id']}"
                note = (f"searched {window['scanned']:,} {what} up to id {last}: the queue's table has only its primary key, "
                        f"a list reads at most {SCAN_ROWS:,} {what} a page")
                return Page(jobs, last, note=note)
        return Page(jobs, None)

    def job(self, conn: Any, queue: str, job_id: str) -> Job | None:
        parts = self._parts(self._table(conn, queue))
        if job_id.startswith(DEAD_PREFIX):
            rows = _run(conn, REFERENCE_JOBS_SQL["dead_letter"], parts, {"id": _id_of(job_id), "queue": queue})
            return _dead_letter(queue, rows[0], whole=True) if rows else None
        rows = _run(conn, REFERENCE_JOBS_SQL["message"], parts, {"id": _id_of(job_id)})
        return _message(queue, rows[0], whole=True) if rows else None

    # -- writes -------------------------------------------------------------------------------

    def act(self, conn: Any, queue: str, action: str, ids: list[str], expect: str | None) -> list[str]:
        self.refuse(action)
        states = self.states_for(action)
        if expect is not None:
            if expect not in states:
                raise ActionRefused(f"the engine's {action} is for {', '.join(states)} messages, not {expect} ones")
            states = (expect,)
        parts = self._parts(self._table(conn, queue))
        dead = [_id_of(i) for i in ids if i.startswith(DEAD_PREFIX)]
        messages = [_id_of(i) for i in ids if not i.startswith(DEAD_PREFIX)]
        changed: list[str] = []
        if "dead" in states and dead:
            text = REFERENCE_JOBS_SQL["retry"] if action == "retry" else REFERENCE_JOBS_SQL["delete_dead"]
            rows = _run(conn, text, parts, {"queue": queue, "ids": dead})
            changed += [f"{DEAD_PREFIX}{r['id']}" for r in rows]
        classes = [s for s in states if s in MESSAGE_STATES]
        if classes and messages:
            if action == "run-now":
                rows = _run(conn, REFERENCE_JOBS_SQL["run_now"], parts, {"queue": queue, "ids": messages, "channel": CHANNEL})
            else:
                rows = _run(conn, REFERENCE_JOBS_SQL["delete_messages"], parts, {"ids": messages, "classes": classes})
            changed += [str(r["id"]) for r in rows]
        return changed

    def pause(self, conn: Any, queue: str, paused: bool) -> None:
        self.refuse_pause()


def _run(conn: Any, text: str, parts: dict[str, sql.Composable], params: dict[str, Any]) -> list[Any]:
    return conn.execute(sql.SQL(text).format(**parts), params).fetchall()


def _is_id(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) < 19


def _id_of(job_id: str | None) -> int | None:
    if job_id is None:
        return None
    digits = job_id.removeprefix(DEAD_PREFIX)
    if not _is_id(digits):
        raise UsageError(f"{job_id!r} is not a job id of the engine (a message's number, or dead:<number>)")
    return int(digits)


def _message(queue: str, row: Any, *, whole: bool = False) -> Job:
    claimed = row["claim_token"] is not None and row["state"] == "in_flight"
    if row["state"] == "in_flight":
        status = "claimed" if claimed else "held"
    else:
        status = "backing off" if row["state"] == "delayed" else "ready"
    holder = None
    if whole:
        holder = f"claim token {row['claim_token']}" if claimed else row["holder"]
    return Job(id=str(row["id"]), queue=queue, state=row["state"], status=status, kind=None, attempts=row["attempts"],
               max_attempts=None, created_at=row["enqueued_at"], scheduled_at=row["visible_at"], age_s=row["age_s"],
               last_error=row["last_error"], args=row["body"],
               errors=[row["last_error"]] if whole and row["last_error"] else [], held_by=holder,
               extra={"claim_token": row["claim_token"], "visible_at": row["visible_at"]} if whole else {})


def _dead_letter(queue: str, row: Any, *, whole: bool = False) -> Job:
    return Job(id=f"{DEAD_PREFIX}{row['id']}", queue=queue, state="dead", status="dead letter", kind=None,
               attempts=row["attempts"], max_attempts=None, created_at=row["enqueued_at"], scheduled_at=None,
               age_s=row["age_s"], last_error=row["last_error"], args=row["body"],
               errors=[row["last_error"]] if whole and row["last_error"] else [],
               extra={"message_id": row["message_id"], "died_at": row["died_at"]})


LIBRARY = ReferenceJobs
