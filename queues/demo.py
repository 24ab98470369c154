"""The demo workload that `queuetop` starts on the embedded server, so that a newcomer sees every
panel alive within seconds:

Everything is named `demo.*`, so that it never touches the user's own queues, rings or leases.

- queue `demo.orders`: a producer at 20/s and two consumers;
- queue `demo.emails`: a producer at 4/s and one consumer failing 30 % of attempts (retries, then
  dead letters with their errors);
- ring `demo.audit` (capacity 40): three puts a second, and every 12 s a reader drains it — it fills,
  refuses, drains;
- lease `demo.relay`: renewed every 2 s with a 5 s TTL by `demo-relay`, which every 30 s "stalls"
  for 8 s, so the lease expires and is then taken again with the next fencing token;
- every 25 s a blocker holds `demo.orders` for 4 s, so the Locks panel shows a tree;
- task `demo.survey` (pattern 5): every 15 s it reaches 40 more users, every second two of them
  answer (insert-only status deltas), and every 10 s the compactor folds the pending deltas.

The schedule is APScheduler's; all of it stops with `stop()`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from apscheduler.schedulers.background import BackgroundScheduler

from dbcore.dialect import Session
from dbcore.errors import QueuetopError, UsageError

from . import outbox
from .control import RELAY_QUEUE, RELAY_SUBSCRIBERS, RELAY_TOPIC, EngineControls
from .schema import ENGINE_SQL, lock_init
from .table_queue import TableQueue

log = logging.getLogger("queuetop.demo")
RELAY_HOLDER = "demo-relay"
SURVEY = "demo.survey"


class Demo:
    def __init__(self, controls: EngineControls) -> None:
        self.controls = controls
        self._scheduler = self._new_scheduler()
        self._stall_until = 0.0

    @staticmethod
    def _new_scheduler() -> BackgroundScheduler:
        return BackgroundScheduler(job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None}, timezone=UTC)

    def start(self) -> None:
        """Start the workload (again, after stop(): a reset demo starts afresh)."""
        if self._scheduler.running:
            return
        self._scheduler = self._new_scheduler()
        c = self.controls
        for queue in ("demo.orders", "demo.emails"):
            c.ensure_queue(queue)
        c.ring_create("demo.audit", 40)
        c.start_producer("demo.orders", 20)
        c.start_consumers("demo.orders", workers=2, handler="sleep:0.05")
        c.start_producer("demo.emails", 4)
        c.start_consumers("demo.emails", workers=1, handler="fail:0.3", max_attempts=3)
        now = datetime.now(UTC)
        self._scheduler.add_job(self._ring_put, "interval", seconds=1, next_run_time=now)
        self._scheduler.add_job(self._ring_drain, "interval", seconds=12, next_run_time=now + timedelta(seconds=12))
        self._scheduler.add_job(self._relay, "interval", seconds=2, next_run_time=now)
        self._scheduler.add_job(self._stall_relay, "interval", seconds=30, next_run_time=now + timedelta(seconds=20))
        self._scheduler.add_job(self._blocker, "interval", seconds=25, next_run_time=now + timedelta(seconds=6))
        self._scheduler.add_job(self._survey_reach, "interval", seconds=15, next_run_time=now)
        self._scheduler.add_job(self._survey_answer, "interval", seconds=1, next_run_time=now + timedelta(seconds=1))
        self._scheduler.add_job(self._compact, "interval", seconds=10, next_run_time=now + timedelta(seconds=10))
        self._scheduler.start()

    def stop(self) -> None:
        if self._scheduler.running:
            self._scheduler.shutdown(wait=True)
        self.controls.stop_all()

    def _quietly(self, action: Callable[..., object], *args: object, **kwargs: object) -> None:
        try:
            action(*args, **kwargs)
        except QueuetopError as exc:  # a full ring or a taken lease is part of the show
            log.debug("demo: %s", exc)
        except Exception as exc:  # the demo must never take the dashboard down
            log.warning("demo: %s", exc)

    def _ring_put(self) -> None:
        self._quietly(self.controls.ring_put, "demo.audit", 3)  # refused when full: part of the show

    def _ring_drain(self) -> None:
        self._quietly(self.controls.ring_take, "demo.audit", 40)

    def _relay(self) -> None:
        if time.monotonic() < self._stall_until:
            return
        self._quietly(self.controls.lease_take, "demo.relay", RELAY_HOLDER, 5)

    def _stall_relay(self) -> None:
        self._stall_until = time.monotonic() + 8

    def _blocker(self) -> None:
        if not any(a.key == "blocker:demo.orders" for a in self.controls.activities()):
            self._quietly(self.controls.inject_blocker, "demo.orders", 4)

    def _survey_reach(self) -> None:
        self._quietly(self.controls.survey, SURVEY, reach=40)

    def _survey_answer(self) -> None:
        self._quietly(self.controls.survey, SURVEY, answers=2)

    def _compact(self) -> None:
        self._quietly(self.controls.compact)


@dataclass(frozen=True, slots=True)
class ResetReport:
    queues: tuple[str, ...]
    rings: tuple[str, ...]
    leases: tuple[str, ...]
    tasks: tuple[str, ...]
    dead_letters: int

    def to_json(self) -> dict[str, object]:
        return {"queues": list(self.queues), "rings": list(self.rings), "leases": list(self.leases),
                "tasks": list(self.tasks), "dead_letters": self.dead_letters}


def reset(conn: Session, *, force: bool = False, wait_s: float = 0.0) -> ResetReport:
    """Remove what the demo and the dashboard's prompts made, in one transaction: every queue,
    ring, lease and task named `demo.*` (queues with their dead letters), the outbox relays'
    queues, lease, subscriptions and outbox rows, and the queues and leases the prompts created
    (recorded in queuetop.meta when they did). Nothing else of the user's is touched.

    Refused (UsageError) while the engine's sessions (the demo, producers, workers, relays) are
    connected, unless `force`: they would write to the tables being dropped. `wait_s`: how long
    to wait for them to go (the dashboard resets right after stopping its own)."""
    deadline = time.monotonic() + wait_s
    busy = conn.execute(ENGINE_SQL["engine_sessions"]).fetchall()
    while busy and not force and time.monotonic() < deadline:
        time.sleep(0.1)  # a closed client's backend takes a moment to leave pg_stat_activity
        busy = conn.execute(ENGINE_SQL["engine_sessions"]).fetchall()
    if busy and not force:
        names = ", ".join(f"{row[0]} ({row[1]})" for row in busy[:4]) + (", ..." if len(busy) > 4 else "")
        raise UsageError(f"the engine is running against this database ({names}): quit the dashboard "
                         "or use its 'Reset the demo' command (Ctrl-P), then reset")
    with conn.transaction():
        lock_init(conn)  # no queue is created meanwhile
        objects = conn.execute(ENGINE_SQL["demo_objects"], {
            "queues": [RELAY_QUEUE, *RELAY_SUBSCRIBERS], "leases": [outbox.DEFAULT_LEASE],
        }).fetchall()
        by_kind: dict[str, list[tuple[str, str | None]]] = {}
        for kind, name, detail in objects:
            by_kind.setdefault(kind, []).append((name, detail))
        dead = 0
        for name, table in by_kind.get("queue", []):
            queue = TableQueue(name, table)
            dead += queue.purge_dead_letters(conn)
            queue.drop(conn)
        for name, _ in by_kind.get("ring", []):
            conn.execute(ENGINE_SQL["ring_drop"], {"name": name})
        for name, _ in by_kind.get("lease", []):
            conn.execute(ENGINE_SQL["lease_forget"], {"name": name})
        tasks = by_kind.get("task", [])
        if tasks:
            conn.execute(ENGINE_SQL["scenario_drop_tasks"], {"tasks": [int(task_id) for task_id, _ in tasks]})
        conn.execute(ENGINE_SQL["demo_forget_rest"], {"destinations": [RELAY_QUEUE, RELAY_TOPIC, *RELAY_SUBSCRIBERS]})
    return ResetReport(
        queues=tuple(name for name, _ in by_kind.get("queue", [])), rings=tuple(name for name, _ in by_kind.get("ring", [])),
        leases=tuple(name for name, _ in by_kind.get("lease", [])), tasks=tuple(title or "" for _, title in tasks),
        dead_letters=dead,
    )
