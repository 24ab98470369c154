"""Engine controls: what the dashboard (or a script) can start, stop and do on the reference
engine of one database. Every control runs in background threads with its own sessions, so the
caller never waits on the database for longer than one short statement.

Each running thing is an `Activity` with a stable key (`producer:orders`, `consumers:orders`,
`blocker:orders`, `scenario:contention`), so the UI can list and stop them; `stop_all()` ends everything this object
started (the dashboard calls it on quit).
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import multiprocessing.forkserver
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import psycopg

from dbcore.database import Target
from dbcore.dialect import Session, open_session
from dbcore.errors import QueuetopError, UsageError, first_line
from dbcore.names import check_name

from . import compactor, lifeline, outbox
from . import lease as leases
from . import ring as rings
from .handlers import parse_handler
from .scenarios.contention import ContentionOptions, ContentionScenario, LockSampler
from .schema import ENGINE_SQL
from .table_queue import TableQueue, default_bodies
from .worker import WorkerPool, WorkOptions

log = logging.getLogger("queuetop.control")
MAX_RATE = 10_000.0
SCENARIO_KEY = "scenario:contention"
RELAYS_KEY = "relays"
RELAY_QUEUE = "relay.orders"  # the relays' demo topology: a queue for sends, a topic with two subscribers
RELAY_TOPIC = "orders.created"
RELAY_SUBSCRIBERS = ("relay.billing", "relay.shipping")


@dataclass(slots=True)
class Activity:
    key: str
    description: str
    stop_event: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    pool: WorkerPool | None = None
    error: str | None = None
    result: dict | None = None  # what a finite activity (a scenario) reported
    processes: dict = field(default_factory=dict)  # name -> multiprocessing.Process (the relays)

    def stop(self) -> None:
        self.stop_event.set()
        if self.pool is not None:
            self.pool.stop()

    def join(self, timeout: float = 10.0) -> None:
        if self.pool is not None:
            self.pool.join(timeout)
        if self.thread is not None:
            self.thread.join(timeout)

    @property
    def alive(self) -> bool:
        if self.pool is not None:
            return self.pool.running
        return self.thread is not None and self.thread.is_alive()


class EngineControls:
    def __init__(self, target: Target) -> None:
        self.target = target
        self._activities: dict[str, Activity] = {}
        self._lock = threading.Lock()
        # The relays are processes. Their fork server (and its resource tracker) must start now,
        # while stderr is still a real file: inside the dashboard, Textual has replaced it.
        multiprocessing.get_context("forkserver")
        multiprocessing.forkserver.ensure_running()

    # -- bookkeeping ----------------------------------------------------------------------

    def activities(self) -> list[Activity]:
        with self._lock:
            for key in [k for k, a in self._activities.items() if not a.alive]:
                del self._activities[key]
            return list(self._activities.values())

    def _register(self, activity: Activity) -> Activity:
        with self._lock:
            old = self._activities.get(activity.key)
            if old is not None and old.alive:
                raise UsageError(f"{activity.key} is already running (stop it first)")
            self._activities[activity.key] = activity
        return activity

    def stop(self, key: str) -> bool:
        with self._lock:
            activity = self._activities.pop(key, None)
        if activity is None:
            return False
        activity.stop()
        activity.join()
        return True

    def stop_all(self) -> None:
        with self._lock:
            running = list(self._activities.values())
            self._activities.clear()
        for activity in running:
            activity.stop()
        for activity in running:
            activity.join()

    def _thread(self, activity: Activity, target: Callable[..., None], *args: object) -> Activity:
        def run() -> None:
            try:
                target(activity, *args)
            except Exception as exc:  # reported in the activity, never raised into the UI
                activity.error = first_line(exc)
                log.warning("%s stopped: %s", activity.key, activity.error)

        activity.thread = threading.Thread(target=run, name=activity.key, daemon=True)
        self._register(activity)
        activity.thread.start()
        return activity

    def _connect(self, role: str) -> Session:
        """A session in the target's dialect (PostgreSQL's or SQL Server's, dbcore/dialect.py)."""
        return open_session(self.target, application_name=f"queuetop-{role}")

    # -- queues ---------------------------------------------------------------------------

    def ensure_queue(self, name: str, *, remember: bool = False) -> TableQueue:
        """The queue, created if missing; `remember`: record it as the dashboard's (demo reset removes it)."""
        with self._connect("control") as conn:
            queue = TableQueue.create(conn, check_name("queue", name))
            if remember:
                conn.execute(ENGINE_SQL["remember_made"], {"kind": "queue", "name": name})
            return queue

    def retry_dead_letters(self, queue: str) -> int:
        """The queue's dead letters back in the queue as new messages; how many."""
        with self._connect("control") as conn:
            return TableQueue.open(conn, queue).retry_dead_letters(conn)

    def purge_dead_letters(self, queue: str) -> int:
        """Forget the queue's dead letters; how many."""
        with self._connect("control") as conn:
            return TableQueue.open(conn, queue).purge_dead_letters(conn)

    def queue_exists(self, name: str) -> bool:
        with self._connect("control") as conn:
            return conn.execute(ENGINE_SQL["lookup_queue"], {"name": check_name("queue", name)}).fetchone() is not None

    def start_producer(self, queue: str, rate_per_s: float) -> Activity:
        if not 0 < rate_per_s <= MAX_RATE:
            raise UsageError(f"producer rate must be between 0 and {MAX_RATE:g} messages/s")
        table_queue = self.ensure_queue(queue)
        activity = Activity(f"producer:{queue}", f"producer {queue} {rate_per_s:g}/s")
        return self._thread(activity, self._produce, table_queue, rate_per_s)

    def _produce(self, activity: Activity, queue: TableQueue, rate: float) -> None:
        started, sent = time.monotonic(), 0
        while not activity.stop_event.is_set():
            try:
                with self._connect(f"produce:{queue.name}") as conn:
                    while not activity.stop_event.is_set():
                        due = int((time.monotonic() - started) * rate) - sent
                        if due > 0:
                            batch = min(due, 1000)
                            queue.enqueue_batch(conn, list(default_bodies(batch, sent + 1)))
                            sent += batch
                        activity.stop_event.wait(max(0.02, 1.0 / rate if rate < 50 else 0.02))
            except (psycopg.OperationalError, QueuetopError) as exc:
                # The database went away (a restart): keep trying, catch up at the same rate.
                activity.error = first_line(exc)
                activity.stop_event.wait(1.0)
                started, sent = time.monotonic(), 0

    def start_consumers(self, queue: str, *, workers: int = 1, handler: str = "noop", mode: str = "claim",
                        max_attempts: int = 5, visibility_s: float = 30.0) -> Activity:
        self.ensure_queue(queue)
        pool = WorkerPool(
            self.target, queue, parse_handler(handler),
            WorkOptions(workers=workers, mode=mode, max_attempts=max_attempts, visibility_s=visibility_s),
        )
        activity = Activity(f"consumers:{queue}", f"{workers} consumer(s) {queue} {handler} {mode}", pool=pool)
        self._register(activity)
        pool.start()
        return activity

    def burst(self, queue: str, count: int, body: str | None = None) -> int:
        if not 1 <= count <= 1_000_000:
            raise UsageError("burst count must be between 1 and 1000000")
        table_queue = self.ensure_queue(queue)
        with self._connect(f"burst:{queue}") as conn, conn.transaction():
            for start in range(0, count, 1000):
                n = min(1000, count - start)
                bodies = [body] * n if body is not None else list(default_bodies(n, start + 1))
                table_queue.enqueue_batch(conn, bodies)
        return count

    # -- rings and leases -----------------------------------------------------------------

    def ring_create(self, name: str, capacity: int) -> None:
        with self._connect("control") as conn:
            rings.create(conn, name, capacity)

    def ring_put(self, name: str, count: int = 1) -> int:
        with self._connect("ring") as conn:
            rings.put(conn, name, [json.dumps({"n": i}) for i in range(1, count + 1)])
        return count

    def ring_take(self, name: str, count: int = 1) -> int:
        with self._connect("ring") as conn:
            return len(rings.take(conn, name, count))

    def lease_take(self, name: str, holder: str, ttl_s: float, *, remember: bool = False) -> int:
        """Take a lease; `remember`: if this creates it, record it as the dashboard's (demo reset removes it)."""
        with self._connect("lease") as conn:
            new = remember and leases.describe(conn, name) is None
            token = leases.acquire(conn, name, holder, ttl_s)
            if new:
                conn.execute(ENGINE_SQL["remember_made"], {"kind": "lease", "name": name})
            return token

    def lease_release(self, name: str, holder: str) -> int:
        with self._connect("lease") as conn:
            return leases.release(conn, name, holder)

    # -- blockers -------------------------------------------------------------------------

    def inject_blocker(self, queue: str, seconds: float, *, row: bool = False) -> Activity:
        """A session that locks the queue's table (EXCLUSIVE: readers pass, writers wait) or its
        head row (FOR UPDATE) for `seconds`, idle in transaction meanwhile: the classic culprit."""
        if not 0 < seconds <= 3600:
            raise UsageError("blocker duration must be between 0 and 3600 seconds")
        # A blocker blocks what exists: a typo must not create an empty queue and block nothing.
        with self._connect("control") as conn:
            table_queue = TableQueue.open(conn, check_name("queue", queue))
        kind = "row" if row else "table"
        activity = Activity(f"blocker:{queue}", f"blocker on {queue} ({kind}) for {seconds:g}s")
        ready = threading.Event()
        self._thread(activity, self._block, table_queue, seconds, row, ready)
        ready.wait(10)
        return activity

    def _block(self, activity: Activity, queue: TableQueue, seconds: float, row: bool, ready: threading.Event) -> None:
        # The lock is held by an open transaction that then does nothing: idle in transaction on
        # PostgreSQL, "sleeping, open transaction" on SQL Server. Its statement writes nothing, so
        # ending it by commit is ending it.
        with self._connect(f"blocker:{queue.name}") as conn, conn.transaction():
            try:
                conn.execute(queue.statement_for(conn, "block_head_row" if row else "block_table"))
            finally:
                ready.set()
            activity.stop_event.wait(seconds)

    # -- compaction -----------------------------------------------------------------------

    def compact(self, group: int | None = None) -> compactor.CompactionResult:
        with self._connect("compact") as conn:
            return compactor.compact(conn, group)

    def survey(self, title: str, *, reach: int = 0, answers: int = 0) -> tuple[int, int]:
        """The task `title` reaches `reach` new users and up to `answers` of its pending users
        answer (the demo's trickle of deltas); returns (reached, answered)."""
        with self._connect("survey") as conn:
            task = compactor.ensure_task(conn, title)
            reached = compactor.reach_new_users(conn, task, reach) if reach else 0
            answered = compactor.answer_some(conn, task, answers) if answers else 0
        return reached, answered

    def start_scenario(self, options: ContentionOptions, lock_sampler: LockSampler,
                       on_done: Callable[[dict], None] | None = None) -> Activity:
        """The contention scenario in the background until its duration ends or it is stopped;
        `on_done` receives its summary (from the scenario's thread)."""
        options.validate()
        activity = Activity(SCENARIO_KEY, f"contention scenario ({options.mode}, {options.submitters} submitters)")
        scenario = ContentionScenario(self.target, options, lock_sampler, stop_event=activity.stop_event)
        return self._thread(activity, self._scenario, scenario, on_done)

    def _scenario(self, activity: Activity, scenario: ContentionScenario, on_done: Callable[[dict], None] | None) -> None:
        activity.result = scenario.run()
        if on_done is not None:
            on_done(activity.result)

    # -- outbox relays ----------------------------------------------------------------------

    def start_relays(self, count: int = 3, rate_per_s: float = 20.0, ttl_s: float = 5.0) -> Activity:
        """`count` relay processes sharing the lease `outbox-relay`, a service writing outbox
        messages at `rate_per_s` (sends to relay.orders, publishes to orders.created), and a
        consumer on each destination queue. A relay that dies is started again a second later,
        as a standby."""
        if not 1 <= count <= 16:
            raise UsageError("relays must be between 1 and 16")
        if not 0 < rate_per_s <= MAX_RATE:
            raise UsageError(f"outbox rate must be between 0 and {MAX_RATE:g} messages/s")
        with self._connect("control") as conn:
            TableQueue.create(conn, RELAY_QUEUE)
            for queue in RELAY_SUBSCRIBERS:
                outbox.subscribe(conn, RELAY_TOPIC, queue)
        activity = Activity(RELAYS_KEY, f"{count} outbox relays, {rate_per_s:g} messages/s")
        self._thread(activity, self._relays, count, rate_per_s, ttl_s)
        for queue in (RELAY_QUEUE, *RELAY_SUBSCRIBERS):
            if not any(a.key == f"consumers:{queue}" for a in self.activities()):
                self.start_consumers(queue)
        return activity

    def stop_relays(self) -> bool:
        stopped = self.stop(RELAYS_KEY)
        for queue in (RELAY_QUEUE, *RELAY_SUBSCRIBERS):
            self.stop(f"consumers:{queue}")
        return stopped

    def kill_relay_leader(self) -> tuple[str, int]:
        """SIGKILL the relay process holding the lease; returns (holder, its token)."""
        activity = next((a for a in self.activities() if a.key == RELAYS_KEY), None)
        if activity is None:
            raise UsageError("no outbox relays are running (start them first)")
        with self._connect("lease") as conn:
            state = leases.describe(conn, outbox.DEFAULT_LEASE)
        process = activity.processes.get(state.holder) if state is not None and state.holder else None
        if state is None or state.holder is None or process is None or not process.is_alive():
            raise UsageError("no running relay holds the lease right now")
        process.kill()
        return state.holder, state.token

    def _relays(self, activity: Activity, count: int, rate: float, ttl_s: float) -> None:
        context = multiprocessing.get_context("forkserver")
        died: dict[str, float] = {}
        slots: dict[str, int] = {}

        def spawn(slot: int) -> None:
            # A new holder name per process: a restarted relay must not inherit its dead
            # predecessor's lease (and token) as "already ours".
            holder = f"relay-{slot}.{uuid.uuid4().hex[:4]}"
            process = context.Process(target=outbox.run_relay_process,
                                      args=(self.target, holder, outbox.DEFAULT_LEASE, ttl_s, 100, lifeline.token()),
                                      name=holder, daemon=True)
            process.start()
            activity.processes[holder] = process
            slots[holder] = slot

        for n in range(count):
            spawn(n + 1)
        started, written = time.monotonic(), 0
        try:
            with self._connect("service:outbox") as conn:
                while not activity.stop_event.is_set():
                    due = min(int((time.monotonic() - started) * rate) - written, 1000)
                    if due > 0:
                        outbox.write_orders(conn, written, written + due, RELAY_QUEUE, RELAY_TOPIC)
                        written += due
                    for holder, process in list(activity.processes.items()):
                        if process.is_alive():
                            continue
                        since = died.setdefault(holder, time.monotonic())
                        if time.monotonic() - since >= 1.0:  # an orchestrator restarting it
                            process.join()
                            del died[holder], activity.processes[holder]
                            spawn(slots.pop(holder))
                    activity.stop_event.wait(0.1)
        finally:
            for process in activity.processes.values():
                if process.is_alive():
                    process.kill()
            for process in activity.processes.values():
                process.join(10)
