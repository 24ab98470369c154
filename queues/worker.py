"""A pool of consumer threads for one table queue, with a maximum degree of parallelism.

Each worker thread owns a connection. Idle workers do not poll: one listener connection waits
for `NOTIFY queuetop_enqueue` and wakes them all when their queue gets messages; between
notifications it wakes a single worker every `poll_interval_s` to pick up what no notification
announces (claims whose visibility expired, retries whose back-off ended). So an idle queue
costs about one query per poll interval, however many workers wait.

Through a connection pooler that does not pin a server session to a connection (PgBouncer in
transaction mode, or one detected: dbcore/pooler.py) there is no LISTEN: a notification would go
to whichever client holds the server session next, or nowhere. The listener then only ticks: one
worker looks every `poll_interval_s` (0.2 s with --until-empty), which the pool says once in its
log, and a claim that finds a full batch still wakes the others at once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
import time
from typing import Any

import psycopg

from dbcore.database import Executor, Target, connect
from dbcore.dialect import dialect_named, open_session
from dbcore.errors import ConnectionFailed, OperationFailed, QueuetopError, first_line
from dbcore.names import check_name
from dbcore.pooler import link_of

from .handlers import Handler
from .hotpath import HotPath
from .link import ConnectionState
from .poolparts import (
    MODES,
    RECONNECT_CAP_S,
    RECONNECT_FIRST_S,
    UNTIL_EMPTY_POLL_S,
    Waker,
    WorkOptions,
    WorkSummary,
    on_stop_signals,
    reconnect_delay,
)
from .schema import ENGINE_SQL
from .table_queue import Message, TableQueue

log = logging.getLogger("queuetop.worker")
# The pool's parts, importable from here as before.
__all__ = ["MODES", "RECONNECT_CAP_S", "RECONNECT_FIRST_S", "UNTIL_EMPTY_POLL_S", "PlainPath", "Waker", "WorkOptions", "WorkSummary",
           "WorkerPool", "reconnect_delay"]

PIPELINE_MAX_SINGLE_WORKERS = 4  # see _claim_loop


def say_polling(conn: Any, queue_name: str, interval_s: float) -> None:
    """The one log line of a pool whose sessions a pooler does not pin: no LISTEN, a poll instead."""
    log.warning("queue %s: %s: idle workers poll every %g s (--poll-interval) instead of waiting for NOTIFY, "
                "and the claim loop's statements are not prepared", queue_name, link_of(conn).says, interval_s)


class PlainPath:
    """The claim loop's claim and ack through the queue's ordinary statements: for a dialect
    without a prepared hot path (SQL Server), with HotPath's interface."""

    def __init__(self, conn: Any, queue: TableQueue) -> None:
        self._conn, self._queue = conn, queue

    def claim(self, *, visibility_s: float, batch: int = 1) -> list[Message]:
        return self._queue.claim(self._conn, visibility_s=visibility_s, batch=batch)

    def ack(self, messages: list[Message]) -> int:
        return self._queue.ack_batch(self._conn, messages)


class WorkerPool:
    """Consumers for one queue. `run()` blocks until done; `start()`/`stop()` for embedding."""

    def __init__(self, target: Target, queue_name: str, handler: Handler, options: WorkOptions,
                 *, start_barrier: Any = None, first_tick_s: float | None = None, announce: bool = True) -> None:
        # start_barrier (benchmarks): each claim-mode worker, connected and its statements
        # prepared, waits there before its first claim, so that a measurement can start once
        # every session is up, as pgbench's "without initial connection time" does.
        self._start_barrier = start_barrier  # a threading or a multiprocessing Barrier
        # When the first poll tick comes (a ProcessPool staggers its processes' ticks); else one interval in.
        self._first_tick_s = first_tick_s
        self._started: set[int] = set()  # the workers past it
        self.target = target
        self.queue_name = check_name("queue", queue_name)  # it goes into application_name
        self.handler = handler
        self.options = options.validate()
        if self.options.processes != 1:
            raise ValueError("a WorkerPool is one process: queues.processes.ProcessPool spreads workers over several")
        self.summary = WorkSummary()
        self._waker = Waker()
        self._stop = threading.Event()
        # Wakes the listener out of select() on stop(); closed by join() once every thread ended.
        self._stop_pipe: tuple[int, int] | None = os.pipe()
        os.set_blocking(self._stop_pipe[1], False)
        self._pipe_lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._errors: list[str] = []
        self._queue: TableQueue | None = None
        # Claim/take statements sent, one slot per worker thread (each writes only its own).
        self._poll_counts = [0] * self.options.workers
        # One line when the pool loses the database and one when it is back, not one per worker
        # nor per attempt (queues/link.py).
        self._link = ConnectionState(f"queue {queue_name}", log,
                                     retrying=f"retrying with back-off up to {RECONNECT_CAP_S:.0f} s")
        self._capabilities = dialect_named(target.dialect).capabilities  # LISTEN or poll; the hot path or not
        self._listens = self._capabilities.notify  # and the server session is pinned (start() finds out)
        self._announce = announce  # say in the log that it polls through a pooler (a ProcessPool says it once itself)

    @property
    def polls(self) -> int:
        """How many claim (or take) statements the workers have sent so far."""
        return sum(self._poll_counts)

    # -- control --------------------------------------------------------------------------

    def start(self) -> None:
        # Resolve the queue up front so a bad name fails before any thread starts.
        with open_session(self.target, application_name=self._app_name("work")) as conn:
            self._queue = TableQueue.open(conn, self.queue_name)
            if self._listens and not link_of(conn).pinned:
                self._listens = False
                if self._announce:
                    say_polling(conn, self.queue_name, self._interval())
        listener = threading.Thread(target=self._listen, name=f"listen:{self.queue_name}", daemon=True)
        self._threads.append(listener)
        for index in range(self.options.workers):
            thread = threading.Thread(
                target=self._work, args=(index,), name=f"work:{self.queue_name}:{index}", daemon=True
            )
            self._threads.append(thread)
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Ask every worker to finish the message in hand and exit."""
        self._stop.set()
        self._waker.stop()
        self._link.wake()
        with self._pipe_lock:
            if self._stop_pipe is not None:
                with contextlib.suppress(OSError):  # full: a wake-up is pending anyway
                    os.write(self._stop_pipe[1], b"x")

    def join(self, timeout: float | None = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in self._threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        if not any(t.is_alive() for t in self._threads):
            with self._pipe_lock:
                if self._stop_pipe is not None:
                    for fd in self._stop_pipe:
                        os.close(fd)
                    self._stop_pipe = None

    @property
    def running(self) -> bool:
        return any(t.is_alive() for t in self._threads[1:])

    def run(self) -> WorkSummary:
        """Work until --until-empty finds the queue empty, --duration passes, or SIGINT/SIGTERM."""
        self.start()
        restore = on_stop_signals(self.stop)
        try:
            deadline = None if self.options.duration_s is None else time.monotonic() + self.options.duration_s
            while self.running and not self._stop.is_set():
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    break
                self._stop.wait(0.5 if remaining is None else min(0.5, remaining))
        finally:
            self.stop()
            self.join()
            restore()
        if self._errors:
            raise OperationFailed(self._errors[0])
        return self.summary

    def _app_name(self, role: str) -> str:
        # The dashboard ties sessions to queues through this name.
        return f"queuetop-{role}:{self.options.mode}:{self.queue_name}"

    # -- threads --------------------------------------------------------------------------

    def _interval(self) -> float:
        return UNTIL_EMPTY_POLL_S if self.options.until_empty else self.options.poll_interval_s

    def _listen(self) -> None:
        interval = self._interval()
        if not self._listens:  # SQL Server, or a pooler that does not pin the session LISTEN would run on
            self._poll(interval)
            return
        conn: psycopg.Connection | None = None
        assert self._stop_pipe is not None  # closed only once every thread has ended
        stop_fd = self._stop_pipe[0]
        first = interval if self._first_tick_s is None or self.options.until_empty else self._first_tick_s
        next_tick = time.monotonic() + first
        listener_failures = 0
        opened_at = 0.0
        while not self._stop.is_set():
            try:
                if conn is None or conn.closed:
                    conn = None
                    conn = connect(self.target, application_name=self._app_name("listen"))
                    opened_at = time.monotonic()
                    conn.execute(ENGINE_SQL["listen_enqueue"])
                # Wait on the socket and on the stop pipe together, so that stop() ends the wait
                # at once rather than at the next tick; then drain what arrived.
                timeout = max(0.0, next_tick - time.monotonic())
                readable, _, _ = select.select([conn.fileno(), stop_fd], [], [], timeout)
                if self._stop.is_set():
                    break
                if conn.fileno() in readable:
                    if any(n.payload == self.queue_name for n in conn.notifies(timeout=0)):
                        self._waker.wake_all()
                        next_tick = time.monotonic() + interval
                # Other queues' notifications do not count: one claim per interval, no more.
                if time.monotonic() >= next_tick:
                    self._waker.wake_one()
                    next_tick = time.monotonic() + interval
            except Exception as exc:  # the listener is an optimisation: fall back to polling
                listener_failures += 1
                self._link.lost("listener", exc, opened_at=opened_at if conn is not None else None)
                if conn is not None:
                    conn.close()
                conn = None
                self._waker.wake_one()
                self._link.pause(max(interval, reconnect_delay(listener_failures)), self._stop)
                continue
            if listener_failures:
                listener_failures = 0
                self._link.back("listener")
        if conn is not None:
            conn.close()

    def _poll(self, interval: float) -> None:
        """A dialect with no notification (SQL Server), or a session a pooler does not pin: one
        worker looks every `interval` seconds, so an idle queue costs one claim statement per
        interval, however many wait."""
        wait = interval if self._first_tick_s is None or self.options.until_empty else self._first_tick_s
        while not self._stop.wait(wait):
            self._waker.wake_one()
            wait = interval

    def _work(self, index: int) -> None:
        try:
            self._work_with_reconnect(index)
        except Exception as exc:  # a worker that cannot go on stops the pool with the reason
            self._errors.append(f"worker for queue {self.queue_name!r} failed: {first_line(exc)}")
            self.stop()

    def _work_with_reconnect(self, index: int) -> None:
        """Work, and when the database is lost (a restart, an outage, max_connections reached)
        keep trying with capped back-off for as long as the pool runs: the workers that could
        connect go on meanwhile."""
        who, failures = f"worker {index}", 0
        while not self._stop.is_set():
            try:
                conn = open_session(self.target, application_name=self._app_name("work"))
            except (psycopg.OperationalError, QueuetopError) as exc:
                failures += 1
                self._link.lost(who, exc)
                self._link.pause(reconnect_delay(failures), self._stop)
                continue
            opened_at = time.monotonic()
            failures = 0
            self._link.back(who)
            try:
                with conn:
                    if self.options.mode == "claim":
                        self._claim_loop(conn, index)
                    else:
                        self._hold_loop(conn, index)
                return
            except (psycopg.OperationalError, ConnectionFailed) as exc:  # the connection was lost, in any dialect
                self._link.lost(who, exc, opened_at=opened_at)
                self._link.pause(reconnect_delay(1), self._stop)

    def _idle(self, conn: Executor, seen_generation: int) -> bool:
        """Nothing to claim: wait for work, or report that --until-empty is satisfied."""
        assert self._queue is not None
        if self.options.until_empty and not self._queue.has_messages(conn):
            self.stop()
            return False
        self._waker.wait(seen_generation)
        return True

    def _retry_delay(self, attempts: int) -> float:
        base = self.options.retry_delay_s
        return 0.0 if base <= 0 else min(base * 2 ** max(0, attempts - 1), 3600.0)

    def _claim_loop(self, conn: Any, index: int) -> None:
        queue, opts = self._queue, self.options
        assert queue is not None
        # Claims and acks go through prepared libpq calls where the dialect has them (see
        # hotpath.py), through the queue's statements otherwise; the rest through one cursor for
        # the connection's life (a SQL Server session is its own).
        hot: HotPath | PlainPath = HotPath(conn, queue) if self._capabilities.prepared_hot_path else PlainPath(conn, queue)
        cur = conn.cursor()
        # The ack of what was processed goes with the next claim, in one round trip (hotpath.py),
        # except with single-message claims in more than 4 threads: a pipeline's send and receive
        # hold the GIL, where PQexecPrepared's do not, and 8 such threads were 15 % slower than
        # two plain round trips each (2 cores, measured), 4 and fewer 10-20 % faster, batches faster at 8.
        pipeline = None if isinstance(hot, PlainPath) or (
            opts.batch == 1 and opts.workers > PIPELINE_MAX_SINGLE_WORKERS) else hot.ack_and_claim
        if self._start_barrier is not None and index not in self._started:
            self._started.add(index)  # once: not again after a reconnection
            with contextlib.suppress(threading.BrokenBarrierError):
                self._start_barrier.wait(timeout=60)
        if opts.prefetch and isinstance(hot, HotPath) and pipeline is not None:
            self._prefetch_loop(hot, cur, index)
            return
        succeeded: list[Message] = []
        while True:
            if self._stop.is_set():
                self._count_acks(succeeded, hot.ack(succeeded))
                return
            seen = self._waker.generation()
            self._poll_counts[index] += 1
            if pipeline is not None:
                acked, messages = pipeline(succeeded, visibility_s=opts.visibility_s, batch=opts.batch)
            else:
                acked = hot.ack(succeeded)
                messages = hot.claim(visibility_s=opts.visibility_s, batch=opts.batch)
            self._count_acks(succeeded, acked)
            succeeded = []
            if not messages:
                if not self._idle(cur, seen):
                    return
                continue
            if len(messages) == opts.batch:
                self._waker.wake_all()  # probably more where these came from
            succeeded = self._handle(cur, messages)

    def _prefetch_loop(self, hot: HotPath, cur: Any, index: int) -> None:
        """The claim loop with one claim ahead: the ack of the messages handled last and the claim
        of the next go out (one round trip, hotpath.py) before the handler runs on those in hand,
        and are read back after it. The server claims while the worker handles: a worker's own
        time per message leaves the critical path. Every guarantee is the plain loop's (tokens,
        visibility, retries, dead letters: settled once the connection is free again); the cost
        is a batch held hidden while the one before it is handled, and a stop that finishes the
        batch claimed ahead too."""
        opts = self.options
        current: list[Message] = []  # claimed, to be handled
        done: list[Message] = []  # handled and succeeded, not yet acked (one claim's)
        while True:
            if not current:
                if self._stop.is_set():
                    self._count_acks(done, hot.ack(done))
                    return
                seen = self._waker.generation()
                self._poll_counts[index] += 1
                acked, current = hot.ack_and_claim(done, visibility_s=opts.visibility_s, batch=opts.batch)
                self._count_acks(done, acked)
                done = []
                if not current:
                    if not self._idle(cur, seen):
                        return
                    continue
            if len(current) == opts.batch:
                self._waker.wake_all()  # probably more where these came from
            if self._stop.is_set():  # finish what is in hand, claim nothing more
                finished = self._handle(cur, current)
                for messages in (done, finished):
                    self._count_acks(messages, hot.ack(messages))
                return
            seen = self._waker.generation()
            self._poll_counts[index] += 1
            sent = hot.send(done, visibility_s=opts.visibility_s, batch=opts.batch)
            failures = self._run_handler(current)
            acked, claimed = hot.receive(sent)
            self._count_acks(done, acked)
            done, current = self._settle(cur, current, failures), claimed
            if not current:  # the queue looked empty: ack what was handled, then wait as the plain loop does
                self._count_acks(done, hot.ack(done))
                done = []
                if not self._idle(cur, seen):
                    return

    def _count_acks(self, messages: list[Message], acked: int) -> None:
        """An ack of `messages` held for `acked` of them: the others' claims had been lost."""
        self.summary.add(processed=acked, stale_acks=len(messages) - acked)

    def _handle(self, cur: Executor, messages: list[Message]) -> list[Message]:
        """Run the handler on each claimed message; returns those to ack: all of them unless some
        failed or were given up on (a batch of 100 then costs no list built message by message:
        the worker's own time per message is what separates it from pgbench on the same SQL)."""
        return self._settle(cur, messages, self._run_handler(messages))

    def _run_handler(self, messages: list[Message]) -> list[tuple[Message, str, bool]]:
        """Run the handler on each message, touching no connection (with --prefetch the next
        claim is on its way meanwhile); returns the failures: (message, error, given up on)."""
        max_attempts, handler = self.options.max_attempts, self.handler
        failures: list[tuple[Message, str, bool]] = []
        for message in messages:
            if message.attempts > max_attempts:
                # Claimed more often than allowed: earlier attempts never reported back
                # (the worker crashed or overran its visibility). Stop the crash loop.
                failures.append((message, f"gave up after {message.attempts - 1} attempts that never completed "
                                          "(worker crashed or visibility expired)", True))
                continue
            try:
                handler(message)
            except Exception as exc:
                failures.append((message, f"{type(exc).__name__}: {exc}", False))
        return failures

    def _settle(self, cur: Executor, messages: list[Message], failures: list[tuple[Message, str, bool]]) -> list[Message]:
        """Retry or dead-letter the failures; returns the messages to ack."""
        if not failures:
            return messages
        queue, max_attempts = self._queue, self.options.max_attempts
        assert queue is not None
        for message, error, given_up in failures:
            if given_up or message.attempts >= max_attempts:
                self._dead_or_stale(cur, message, error)
            elif queue.release_for_retry(cur, message, error, delay_s=self._retry_delay(message.attempts)):
                self.summary.add(retried=1)
            else:
                self.summary.add(stale_acks=1)
        settled = {message.id for message, _, _ in failures}
        return [m for m in messages if m.id not in settled]

    def _dead_or_stale(self, conn: Executor, message: Message, error: str) -> None:
        assert self._queue is not None
        if self._queue.dead_letter_claimed(conn, message, error):
            self.summary.add(dead=1)
        else:
            self.summary.add(stale_acks=1)

    def _hold_loop(self, conn: Any, index: int) -> None:
        queue, opts = self._queue, self.options
        assert queue is not None
        cur = conn.cursor()
        while not self._stop.is_set():
            seen = self._waker.generation()
            processed = retried = dead = 0
            with conn.transaction():
                self._poll_counts[index] += 1
                messages = queue.take_held(cur, batch=opts.batch)
                for message in messages:
                    try:
                        self.handler(message)
                        processed += 1
                    except Exception as exc:
                        error = f"{type(exc).__name__}: {exc}"
                        if message.attempts >= opts.max_attempts:
                            queue.dead_letter_held(cur, message, error)
                            dead += 1
                        else:
                            queue.requeue_held(cur, message, error, delay_s=self._retry_delay(message.attempts))
                            retried += 1
            # Counted only once the transaction committed.
            self.summary.add(processed=processed, retried=retried, dead=dead)
            if not messages:
                if not self._idle(cur, seen):
                    return
            elif len(messages) == opts.batch:
                self._waker.wake_all()
