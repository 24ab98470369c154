"""The diagnose scenario (issue 29): each reason a queue backs up, made for real on a fresh engine
queue, so that the dashboard's verdict on it (probes/diagnosis.py) can be watched and timed.

- `blocked`: ready messages and engine workers at work on them; then a session locks the queue's
  table (EXCLUSIVE: readers pass, writers wait) and stays idle in its transaction. Each worker's
  next claim or ack waits for it. Expected: the blocker, then the waiting workers.
- `no-consumers`: messages enqueued; nobody works the table.
- `failing`: engine workers whose handler fails nine times in ten, two attempts at most (about
  81 % of the messages go dead), under a steady producer.
- `bloat`: a session opens a REPEATABLE READ transaction, takes a lease in it (a transaction id
  and a snapshot: it holds the xmin horizon) and stays idle; then a producer and engine workers
  churn the queue's table, each message leaving dead tuples (the claim's update, the ack's
  delete) that no vacuum may remove while the horizon is held. Expected: the holder.
- `saturated`: a producer faster than the workers (60 messages/s against two workers taking
  0.1 s a message, about 20/s): the backlog grows steadily. Expected: the workers.
- `healthy`: a producer well under the workers' capacity (20 messages/s against about 100/s):
  a busy queue that keeps up; the control, never to be flagged.

`start()` returns once the condition is established (`established_at`, time.monotonic()),
`expected_pids()` says which sessions a right verdict names, `stop()` ends every session and
thread the scenario started and, unless `keep`, drops the queue and its dead letters.

The engine does not import the probes: the caller passes `sessions`, a reader of the database's
sessions (pid, application, pg_blocking_pids), from which the scenario learns its workers' pids
and sees the blocked condition established (the command line passes the sessions probe's).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dbcore.database import Target, connect
from dbcore.dialect import dialect_of
from dbcore.errors import OperationFailed, UsageError, first_line
from dbcore.lockwait import server_pid
from dbcore.names import check_name

from .. import lease as leases
from .. import schema
from ..handlers import parse_handler
from ..table_queue import TableQueue, default_bodies
from ..worker import WorkerPool, WorkOptions

log = logging.getLogger("queuetop.scenario.diagnose")
APPLICATION = "queuetop-scenario:diagnose"
CAUSES = ("blocked", "no-consumers", "failing", "bloat", "saturated", "healthy")
ESTABLISH_TIMEOUT_S = 30.0  # how long the condition may take to be established before the run fails
APPLICATION_NAME_BYTES = 63  # the server keeps this much of an application_name (NAMEDATALEN - 1)


@dataclass(frozen=True, slots=True)
class SeenSession:
    """One session of the scenario's database, as the server shows it now."""

    pid: int
    application: str | None
    blocked_by: tuple[int, ...] = ()  # pg_blocking_pids, for a session waiting on a lock


# Every session of the scenario's database now (the caller reads them: see the module's doc).
SessionReader = Callable[[], Sequence[SeenSession]]


@dataclass(frozen=True, slots=True)
class Plan:
    """What makes one cause."""

    messages: int = 0  # enqueued before anything else
    workers: int = 0  # engine workers (threads of one WorkerPool, claim mode)
    handler: str = "noop"
    max_attempts: int = 5
    rate: float = 0.0  # the producer's messages per second (0: no producer)
    blocker: bool = False  # a session locks the table, idle in transaction
    holder: bool = False  # a session holds the xmin horizon, idle in transaction


PLANS: dict[str, Plan] = {
    "blocked": Plan(messages=500, workers=2, handler="sleep:0.05", blocker=True),
    "no-consumers": Plan(messages=100),
    "failing": Plan(workers=2, handler="fail:0.9", max_attempts=2, rate=20.0),
    "bloat": Plan(workers=2, handler="noop", rate=50.0, holder=True),
    "saturated": Plan(workers=2, handler="sleep:0.1", rate=60.0),
    "healthy": Plan(workers=2, handler="sleep:0.02", rate=20.0),
}


class DiagnoseScenario:
    """One cause on one fresh queue (`diagnose-<cause>` unless `queue` is given)."""

    def __init__(self, target: Target, cause: str, *, sessions: SessionReader, queue: str | None = None, keep: bool = False,
                 progress: Callable[[str], None] | None = None, establish_timeout_s: float = ESTABLISH_TIMEOUT_S) -> None:
        if cause not in CAUSES:
            raise UsageError(f"unknown cause {cause!r}: expected one of {', '.join(CAUSES)}")
        self.target, self.cause, self.sessions, self.keep, self.progress = target, cause, sessions, keep, progress
        self.queue_name = check_name("queue", queue if queue is not None else f"diagnose-{cause}")
        self.plan = PLANS[cause]
        self.establish_timeout_s = establish_timeout_s
        self.established_at: float | None = None  # time.monotonic() when the condition was established
        self.horizon_since: float | None = None  # bloat: time.monotonic() when the holder's transaction began
        self.blocker_pid: int | None = None
        self.holder_pid: int | None = None
        self.worker_pids: tuple[int, ...] = ()
        self.listener_pid: int | None = None  # the workers' LISTEN session
        self.producer_pid: int | None = None
        self.produced = 0
        self._expected: tuple[int, ...] = ()
        self._queue: TableQueue | None = None
        self._created = False
        self._pool: WorkerPool | None = None
        self._producer: threading.Thread | None = None
        self._blocker: Any = None  # psycopg connections, idle in their transaction
        self._holder: Any = None
        self._stop = threading.Event()
        self._stopped = False
        self._errors: list[str] = []
        self._lock = threading.Lock()

    # -- before anything is written --------------------------------------------------------

    def validate(self) -> None:
        """Reads only: the database carries the engine's schema and the queue does not exist yet
        (a fresh queue; one left by `--keep` is not reused)."""
        with connect(self.target, application_name=f"{APPLICATION}:check") as conn:
            schema.require(conn, where=self.target.masked)
            if conn.execute(schema.ENGINE_SQL["lookup_queue"], {"name": self.queue_name}).fetchone() is not None:
                raise UsageError(f"queue {self.queue_name!r} already exists (left by a run with --keep?): "
                                 f"the scenario needs a fresh queue; give another --queue")

    # -- the condition ------------------------------------------------------------------------

    def start(self) -> None:
        """Make the condition; returns once it is established (see each cause's `_establish_*`)."""
        plan = self.plan
        with connect(self.target, application_name=f"{APPLICATION}:setup") as conn:
            schema.require(conn, where=self.target.masked)
            self.validate()
            self._queue = TableQueue.create(conn, self.queue_name)
            self._created = True
            if plan.messages:
                self._queue.enqueue_batch(conn, list(default_bodies(plan.messages)))
        self._say(f"queue {self.queue_name!r} created" + (f", {plan.messages} messages enqueued" if plan.messages else ""))
        if plan.holder:
            self._hold_horizon()
        if plan.workers:
            self._start_workers()
        if plan.rate:
            self._producer = threading.Thread(target=self._produce, name=f"producer:{self.queue_name}", daemon=True)
            self._producer.start()
        establish = {
            "blocked": self._establish_blocked,
            "no-consumers": self._establish_no_consumers,
            "failing": self._establish_failing,
            "bloat": self._establish_churn,
            "saturated": self._establish_churn,
            "healthy": self._establish_churn,
        }[self.cause]
        establish()
        self.established_at = time.monotonic()

    def expected_pids(self) -> tuple[int, ...]:
        """The sessions a right verdict names: blocked, the blocker first, then the waiting workers;
        bloat, the xmin horizon's holder; saturated, the workers; none for the others (their
        verdicts name no session)."""
        return self._expected

    def own_pids(self) -> set[int]:
        """Every session the scenario started that a verdict may name: the workers and their
        listener, the producer, the blocker or the holder."""
        pids = {*self.worker_pids, self.listener_pid, self.producer_pid, self.blocker_pid, self.holder_pid}
        return {pid for pid in pids if pid is not None}

    def errors(self) -> list[str]:
        """What went wrong in the scenario's own threads so far (a failed producer, stopped workers)."""
        with self._lock:
            errors = list(self._errors)
        pool = self._pool
        if pool is not None and not self._stopped and not pool.running:
            errors.append(f"the workers stopped: {'; '.join(getattr(pool, '_errors', [])) or 'no reason given'}")
        return errors

    def work_summary(self) -> dict[str, int]:
        """What the workers did so far: processed, retried, dead, stale_acks."""
        return self._pool.summary.as_dict() if self._pool is not None else {"processed": 0, "retried": 0, "dead": 0, "stale_acks": 0}

    def stop(self) -> None:
        """End the condition: the producer, the blocker or holder (rolled back), the workers; then,
        unless `keep`, drop the queue and its dead letters. Safe to call twice, and after a start()
        that failed half way."""
        if self._stopped:
            return
        self._stop.set()
        if self._producer is not None:
            self._producer.join(10)
        for conn in (self._blocker, self._holder):  # first: the workers may be waiting for the blocker
            if conn is not None:
                try:
                    conn.rollback()
                    conn.close()
                except Exception as exc:  # a session already gone: nothing to end
                    log.debug("ending a scenario session: %s", exc)
        workers_left = False
        if self._pool is not None:
            self._pool.stop()
            self._pool.join(15)
            workers_left = self._pool.running
        self._stopped = True
        if self.keep or not self._created:
            return
        if workers_left:
            self._error(f"queue {self.queue_name!r} left in place: its workers did not stop within 15 s")
            return
        assert self._queue is not None
        with connect(self.target, application_name=f"{APPLICATION}:cleanup") as conn:
            self._queue.drop(conn)
            self._queue.purge_dead_letters(conn)

    # -- the parts ----------------------------------------------------------------------------

    def _start_workers(self) -> None:
        plan = self.plan
        options = WorkOptions(workers=plan.workers, max_attempts=plan.max_attempts, visibility_s=30.0)
        self._pool = WorkerPool(self.target, self.queue_name, parse_handler(plan.handler), options)
        self._pool.start()
        self._say(f"{plan.workers} workers started (handler {plan.handler}, max attempts {plan.max_attempts})")

    def _pool_application(self, role: str) -> str:
        assert self._pool is not None
        # The pool names its sessions; the server keeps the first 63 bytes of a name (ASCII here).
        return self._pool._app_name(role)[:APPLICATION_NAME_BYTES]

    def _produce(self) -> None:
        assert self._queue is not None
        try:
            with connect(self.target, application_name=f"{APPLICATION}:producer") as conn:
                self.producer_pid = server_pid(conn)  # through a pooler in transaction mode: one of its server sessions
                started = time.monotonic()
                while not self._stop.is_set():
                    due = int((time.monotonic() - started) * self.plan.rate) + 1
                    if due > self.produced:
                        self._queue.enqueue_batch(conn, list(default_bodies(due - self.produced, self.produced + 1)))
                        self.produced = due
                    self._stop.wait(0.02)
        except Exception as exc:
            if not self._stop.is_set():
                self._error(f"producer: {first_line(exc)}")

    def _hold_horizon(self) -> None:
        """A REPEATABLE READ transaction that takes a lease (never committed: rolled back at the end),
        then does nothing: its transaction id and its snapshot hold the xmin horizon."""
        conn = connect(self.target, application_name=f"{APPLICATION}:holder", autocommit=False)
        self._holder = conn
        dialect_of(conn).set_isolation(conn, "REPEATABLE READ")
        leases.acquire(conn, f"diagnose-horizon-{uuid.uuid4().hex[:8]}", "diagnose scenario", 3600.0)
        self.horizon_since = time.monotonic()
        self.holder_pid = server_pid(conn)  # in its open transaction: the server session a pooler pins to it
        self._expected = (self.holder_pid,)
        self._say(f"session {self.holder_pid} holds the xmin horizon, idle in transaction")

    def _establish_blocked(self) -> None:
        """Established once the blocker holds the table and every worker waits for it
        (pg_blocking_pids, as the server says it)."""
        assert self._queue is not None and self._pool is not None
        self._wait(lambda: self._pool is not None and self._pool.summary.as_dict()["processed"] > 0, "the workers to process a message")
        conn = connect(self.target, application_name=f"{APPLICATION}:blocker", autocommit=False)
        self._blocker = conn
        conn.execute(self._queue.statement_for(conn, "block_table"))  # then nothing: idle in transaction
        self.blocker_pid = blocker = server_pid(conn)
        application = self._pool_application("work")

        def all_waiting() -> tuple[int, ...] | None:
            workers = [s for s in self.sessions() if s.application == application]
            if len(workers) < self.plan.workers or not all(blocker in s.blocked_by for s in workers):
                return None
            return tuple(sorted(s.pid for s in workers))

        self.worker_pids = self._wait(all_waiting, "every worker to wait for the blocker")
        self._learn_listener()
        self._expected = (blocker, *self.worker_pids)
        self._say(f"session {blocker} locks the table, idle in transaction; workers {_pids(self.worker_pids)} wait for it")

    def _establish_no_consumers(self) -> None:
        """Established once the messages are committed (start() did): nobody works the table."""
        self._say(f"{self.plan.messages} ready messages, no consumer")

    def _establish_failing(self) -> None:
        """Established once the first message went dead (the queue's own counts)."""
        assert self._queue is not None
        queue = self._queue
        with connect(self.target, application_name=f"{APPLICATION}:check") as conn:
            self._wait(lambda: queue.counts(conn).dead > 0, "the first dead letter")
        self._learn_workers()
        self._say(f"messages go dead (handler {self.plan.handler}, {self.plan.max_attempts} attempts) "
                  f"under a producer at {self.plan.rate:g}/s")

    def _establish_churn(self) -> None:
        """Established once the producer runs and the workers have processed a message."""
        self._wait(lambda: self._pool is not None and self._pool.summary.as_dict()["processed"] > 0, "the workers to process a message")
        self._learn_workers()
        if self.cause == "saturated":
            self._expected = self.worker_pids
        self._say(f"producer at {self.plan.rate:g}/s, workers {_pids(self.worker_pids)} (handler {self.plan.handler}) at work")

    def _learn_workers(self) -> None:
        application = self._pool_application("work")

        def every_worker() -> tuple[int, ...] | None:
            pids = tuple(sorted(s.pid for s in self.sessions() if s.application == application))
            return pids if len(pids) >= self.plan.workers else None

        self.worker_pids = self._wait(every_worker, "every worker's session")
        self._learn_listener()

    def _learn_listener(self) -> None:
        application = self._pool_application("listen")
        self.listener_pid = next((s.pid for s in self.sessions() if s.application == application), None)

    def _wait(self, predicate: Callable[[], Any], what: str) -> Any:
        deadline = time.monotonic() + self.establish_timeout_s
        while True:
            problems = self.errors()
            if problems:
                raise OperationFailed(f"diagnose scenario ({self.cause}): {problems[0]}")
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise OperationFailed(f"diagnose scenario ({self.cause}): timed out after {self.establish_timeout_s:g} s "
                                      f"waiting for {what}")
            self._stop.wait(0.05)

    def _error(self, message: str) -> None:
        log.warning("%s", message)
        with self._lock:
            self._errors.append(message)

    def _say(self, line: str) -> None:
        if self.progress:
            self.progress(line)


def _pids(pids: Sequence[int]) -> str:
    return ", ".join(str(p) for p in pids)
