"""Pattern 5: the aggregation compactor (design note 001, "The short transaction trap").

Writers never update an aggregate row: a task reaching users inserts one +n PENDING delta, an
answer inserts -1 PENDING and +1 DONE. Readers always read SUM(count) GROUP BY status, so a
delta counts the moment it commits. The compacting agent keeps the table small: per group (task)
it takes the group's row ids, then in one transaction deletes exactly those ids and inserts the
sums of the rows it really deleted.

Races closed:
- a writer inserting during a compaction: its row has an id the compactor did not take, so it
  stays as a delta for the next run, counted once by readers all along;
- two compactors at once: a transaction-level advisory lock per group makes the second skip the
  group; and even without it, the fold aggregates only the rows its own DELETE returned, so a
  row deleted by the other compactor cannot be summed twice;
- a compactor killed mid-way: its transaction rolls back; deltas and aggregates are as before.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from apscheduler.schedulers.background import BackgroundScheduler

from dbcore.database import SESSION_ERRORS, Target, one
from dbcore.dialect import Session, connection_lost, open_session
from dbcore.errors import UsageError, first_line

from . import schema
from .link import ConnectionState

log = logging.getLogger("queuetop.compactor")
NAME = "task_status"
LOCK_CLASS = 0x71636D70  # advisory lock space of the compactor ("qcmp"); the key is the group


@dataclass(frozen=True, slots=True)
class CompactionResult:
    groups: int
    groups_skipped: int  # another compactor held them
    rows_deleted: int
    aggregates_inserted: int
    duration_ms: float

    def as_dict(self) -> dict[str, object]:
        return {
            "name": NAME,
            "groups": self.groups,
            "groups_skipped": self.groups_skipped,
            "rows_folded": self.rows_deleted,
            "aggregates_inserted": self.aggregates_inserted,
            "duration_ms": round(self.duration_ms, 3),
        }


# -- writers and readers --------------------------------------------------------------------


def create_task(conn: Session, title: str) -> int:
    return one(conn.execute(schema.ENGINE_SQL["task_create"], {"title": title}))[0]


def submit(conn: Session, task_id: int, users: list[int]) -> int:
    """The task reaches `users`; returns how many were new to it."""
    row = conn.execute(schema.ENGINE_SQL["task_submit"], {"task_id": task_id, "users": users}).fetchone()
    return int(row[0]) if row else 0


def answer(conn: Session, task_id: int, user_id: int) -> bool:
    """The user answers; False if the task never reached them or they already answered."""
    rows = conn.execute(schema.ENGINE_SQL["task_answer"], {"task_id": task_id, "user_id": user_id}).fetchall()
    return bool(rows)


def ensure_task(conn: Session, title: str) -> int:
    """The oldest task of that title, created if there is none."""
    row = conn.execute(schema.ENGINE_SQL["task_by_title"], {"title": title}).fetchone()
    return row[0] if row else create_task(conn, title)


def reach_new_users(conn: Session, task_id: int, count: int) -> int:
    """A resubmission: the task reaches `count` users it has not reached yet."""
    users = [row[0] for row in conn.execute(schema.ENGINE_SQL["task_next_users"], {"task_id": task_id, "count": count})]
    return submit(conn, task_id, users)


def answer_some(conn: Session, task_id: int, count: int) -> int:
    """Up to `count` of the task's pending users answer; returns how many did."""
    users = [row[0] for row in conn.execute(schema.ENGINE_SQL["task_pending_users"], {"task_id": task_id, "limit": count})]
    return sum(answer(conn, task_id, user) for user in users)


def status_counts(conn: Session, task_id: int) -> dict[str, int]:
    rows = conn.execute(schema.ENGINE_SQL["task_status_counts"], {"task_id": task_id}).fetchall()
    return {status: int(count) for status, count in rows if count}


# -- the compacting agent -------------------------------------------------------------------


def compact(conn: Session, group: int | None = None, *, record: bool = True) -> CompactionResult:
    """Fold every group with pending deltas (or just `group`), each in its own transaction."""
    started = time.perf_counter()
    if group is not None:
        groups = [group]
    else:
        groups = [row[0] for row in conn.execute(schema.ENGINE_SQL["compaction_groups"])]
    done = skipped = deleted = inserted = 0
    for task_id in groups:
        with conn.transaction():
            locked = one(conn.execute(
                schema.ENGINE_SQL["compaction_try_lock"], {"class": LOCK_CLASS, "key": _lock_key(task_id)}
            ))[0]
            if not locked:
                skipped += 1
                continue
            ids = [row[0] for row in conn.execute(schema.ENGINE_SQL["compaction_take_ids"], {"task_id": task_id})]
            if not ids:
                continue  # the group is gone
            row = one(conn.execute(schema.ENGINE_SQL["compaction_fold"], {"task_id": task_id, "ids": ids}))
            deleted += row[0]
            inserted += row[1]
            done += 1
    result = CompactionResult(done, skipped, deleted, inserted, (time.perf_counter() - started) * 1000)
    if record:
        conn.execute(
            schema.ENGINE_SQL["compaction_record"],
            {"name": NAME, "duration_ms": result.duration_ms, "rows": deleted, "groups": done},
        )
    return result


def _lock_key(task_id: int) -> int:
    # Advisory locks take two int4 keys: the class and the group folded into 32 bits.
    return ((task_id ^ (task_id >> 32)) & 0xFFFFFFFF) - (1 << 31)


class CompactorAgent:
    """The compactor on a schedule (APScheduler: never overlapping itself, missed runs coalesced)."""

    def __init__(self, target: Target, interval_s: float = 2.0, *, application_name: str = f"queuetop-compactor:{NAME}") -> None:
        if not 0.05 <= interval_s <= 3600:
            raise UsageError("compactor interval must be between 0.05 and 3600 seconds")
        self.target = target
        self.interval_s = interval_s
        self.application_name = application_name
        self.last: CompactionResult | None = None
        self.runs = 0
        self.rows_folded = 0
        self.errors = 0
        self._conn: Session | None = None  # kept between runs; reopened after a failure
        self._opened_at: float | None = None  # when _conn was opened (time.monotonic())
        self._link = ConnectionState(f"compactor {NAME}", log)
        self._said: str | None = None  # the failure last said, other than a lost database
        self._scheduler = BackgroundScheduler(
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None}, timezone=UTC
        )

    def start(self) -> None:
        self._scheduler.add_job(self.run_once, "interval", seconds=self.interval_s, next_run_time=datetime.now(UTC))
        self._scheduler.start()

    def stop(self) -> None:
        if self._scheduler.running:
            self._scheduler.shutdown(wait=True)
        self._close()

    def run_once(self) -> CompactionResult | None:
        try:
            if self._conn is None or self._conn.closed:
                self._opened_at = None
                self._conn = open_session(self.target, application_name=self.application_name)
                self._opened_at = time.monotonic()
            self.last = compact(self._conn)
        except SESSION_ERRORS as exc:
            self.errors += 1
            # Once per change, not once per run (queues/link.py): a lost database in two lines,
            # lost and back; another failure once, until a run succeeds.
            if connection_lost(exc):
                self._link.lost("compactor", exc, opened_at=self._opened_at)
            elif first_line(exc) != self._said:
                self._said = first_line(exc)
                log.warning("compaction failed: %s", first_line(exc))
            self._close()
            return None
        self._link.back("compactor")
        self._said = None
        self.runs += 1
        self.rows_folded += self.last.rows_deleted
        return self.last

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
