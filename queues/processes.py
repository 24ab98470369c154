"""A worker pool spread over processes: `queuetop engine work --workers K --processes P`.

A thread pool's workers share one interpreter lock. A single-message claim costs a worker about
60-90 µs of Python and libpq a message; with 8 threads they queue for the lock, and the ack can no
longer go with the next claim (a pipeline's send and receive hold the lock: worker.py), so 8
threads did 0.84 of pgbench's rate on a 16-core machine where every other cell reached 0.92-1.0.
Processes do not share the lock. This pool runs P processes (multiprocessing's spawn: a fresh
interpreter, whatever threads the parent runs), each a `WorkerPool` of its share of the K
workers, and supervises them:

- The pool's guarantees are each process's: claim tokens, visibility, retries, dead letters. A
  process that dies (a handler's crash, the OOM killer) leaves its claimed messages to come back
  when their visibility ends, like a killed thread pool does; the parent says so in one line and
  starts another in its place, after a back-off when it died young (a crash loop does not spin).
- SIGINT and SIGTERM reach the parent, which asks every process to stop (each finishes the
  message in hand and acks what it processed); a child's own SIGINT (Ctrl-C reaches the whole
  process group) does the same. Signals stay blocked in a child until it can handle them: a Ctrl-C
  during its start-up is not a traceback.
- A child keeps a pipe to the parent: its log lines and its summary come back through it (the
  parent's logging masks DSNs), and the pipe's end, when the parent is gone however it died,
  stops the child as SIGTERM would.
- Idle, every process listens for NOTIFY, and each polls every P × `poll_interval_s`, their ticks
  staggered by one interval: P processes poll an idle queue as often as one does. Through a pooler
  that does not pin their sessions they only poll (worker.py), which the parent says once.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from multiprocessing import resource_tracker
from multiprocessing.connection import Connection
from typing import Any

from dbcore.database import Target
from dbcore.dialect import dialect_of, open_session
from dbcore.errors import OperationFailed, first_line
from dbcore.names import check_name
from dbcore.pooler import link_of

from .handlers import parse_handler
from .poolparts import (
    RECONNECT_CAP_S,
    STOP_SIGNALS,
    UNTIL_EMPTY_POLL_S,
    WorkOptions,
    WorkSummary,
    on_stop_signals,
    reconnect_delay,
)
from .table_queue import TableQueue
from .worker import WorkerPool, say_polling

log = logging.getLogger("queuetop.worker")

YOUNG_S = 5.0  # a process that dies younger than this is started again after a back-off
SPAWN = multiprocessing.get_context("spawn")  # a fresh interpreter: safe whatever threads the parent runs


@dataclass(frozen=True, slots=True)
class _Plan:
    """What one child needs, picklable: the handler goes as its spec and is parsed there."""

    target: Target
    queue_name: str
    handler: str
    options: WorkOptions  # its share of the workers, processes=1
    first_tick_s: float
    log_level: int  # the parent's: records it would drop are not sent


_FIELDS = ("processed", "retried", "dead", "stale_acks")


class _SharedSummary(WorkSummary):
    """A child's summary, also written to its slot of memory the parent reads: what a process
    acked before it was killed is counted all the same (it never sends its summary)."""

    __slots__ = ("_base", "_counters")

    def __init__(self, counters: Any, index: int) -> None:
        super().__init__()
        self._counters, self._base = counters, index * len(_FIELDS)

    def add(self, *, processed: int = 0, retried: int = 0, dead: int = 0, stale_acks: int = 0) -> None:
        super().add(processed=processed, retried=retried, dead=dead, stale_acks=stale_acks)
        with self._lock:  # the threads of this process; no other process writes this slot
            for offset, delta in enumerate((processed, retried, dead, stale_acks)):
                if delta:
                    self._counters[self._base + offset] += delta


class _PipeLog(logging.Handler):
    """A child's log records, sent to the parent as (level, logger name, message)."""

    def __init__(self, send: Callable[[object], None]) -> None:
        super().__init__()
        self._send = send

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):  # a record that cannot be pickled: not worth dying for
            self._send(("log", record.levelno, record.name, record.getMessage()))


def _child(plan: _Plan, pipe: Connection, barrier: Any, counters: Any, index: int) -> None:
    """A worker process: a WorkerPool until it ends, then ("done", summary) or ("error", reason)."""
    lock = threading.Lock()

    def send(item: object) -> None:
        with lock, contextlib.suppress(OSError):  # the parent gone (killed): nobody to tell
            pipe.send(item)

    root = logging.getLogger()
    root.handlers[:] = [_PipeLog(send)]
    root.setLevel(plan.log_level)
    try:
        pool = WorkerPool(plan.target, plan.queue_name, parse_handler(plan.handler), plan.options,
                          start_barrier=barrier, first_tick_s=plan.first_tick_s, announce=False)
    except Exception as exc:  # a handler that cannot be loaded here: the parent says why
        send(("error", first_line(exc)))
        return
    pool.summary = _SharedSummary(counters, index)
    on_stop_signals(pool.stop)  # before the signals blocked since the start are let through
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)

    def lifeline() -> None:  # "stop" from the parent, or the parent gone: stop as SIGTERM would
        with contextlib.suppress(EOFError, OSError):
            pipe.recv()
        pool.stop()

    threading.Thread(target=lifeline, name="lifeline", daemon=True).start()
    try:
        summary = pool.run()
    except Exception as exc:
        send(("error", first_line(exc)))
        return
    send(("done", summary.as_dict()))  # the counts are in shared memory already: this says it ended


@dataclass(slots=True)
class _Child:
    index: int
    process: Any  # multiprocessing's SpawnProcess
    pipe: Connection
    started: float
    finished: bool = False  # sent its summary or its error


class ProcessPool:
    """K workers over P processes; `run()` as `WorkerPool.run()`, and the same summary."""

    def __init__(self, target: Target, queue_name: str, handler: str, options: WorkOptions,
                 *, start_barrier: Any = None) -> None:
        self.options = options.validate()
        self.target, self.queue_name, self.handler = target, check_name("queue", queue_name), handler
        parse_handler(handler)  # a bad spec fails here, before any process starts
        # start_barrier: a multiprocessing Barrier for every worker of every process, plus the caller.
        self._barrier = start_barrier
        self.summary = WorkSummary()
        self._stop = threading.Event()
        self._stop_requested = False  # by a signal: the loop stops the children (pipes are not re-entrant)
        self._children: dict[int, _Child] = {}
        self._due: dict[int, float] = {}  # processes to start again, and when
        self._young_deaths: dict[int, int] = {}  # in a row, per process
        self._errors: list[str] = []
        self.restarts = 0
        # When the last process reported that its pool ended (time.perf_counter): the work's end,
        # before the interpreters' own exits (a benchmark's clock stops there).
        self.last_done: float | None = None
        # Each process's counts (processed, retried, dead, stale acks), kept across its restarts.
        self._counters = SPAWN.RawArray("q", self.options.processes * len(_FIELDS))

    def pids(self) -> list[int]:
        """The worker processes running now."""
        return [c.process.pid for c in list(self._children.values()) if c.process.pid is not None]

    def shares(self) -> list[int]:
        """How many workers each process runs: K spread as evenly as P allows."""
        k, p = self.options.workers, self.options.processes
        return [k // p + (1 if i < k % p else 0) for i in range(p)]

    def _plan(self, index: int) -> _Plan:
        opts, p = self.options, self.options.processes
        share = replace(opts, workers=self.shares()[index], processes=1, poll_interval_s=opts.poll_interval_s * p)
        return _Plan(self.target, self.queue_name, self.handler, share, first_tick_s=opts.poll_interval_s * (index + 1),
                     log_level=logging.getLogger("queuetop.worker").getEffectiveLevel())

    def _start(self, index: int) -> None:
        mine, theirs = SPAWN.Pipe()
        process = SPAWN.Process(target=_child, args=(self._plan(index), theirs, self._barrier, self._counters, index),
                                   name=f"work:{self.queue_name}:p{index}", daemon=True)
        # The child inherits the blocked signals through exec, until it has its handlers.
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        theirs.close()
        self._children[index] = _Child(index, process, mine, time.monotonic())

    def _request_stop(self) -> None:
        self._stop_requested = True

    def stop(self) -> None:
        """Ask every process to finish the messages in hand and exit."""
        self._stop.set()
        for child in list(self._children.values()):
            with contextlib.suppress(OSError, ValueError):
                child.pipe.send("stop")

    def run(self) -> WorkSummary:
        # A queue that is not there fails here, as WorkerPool.start's does, before any process starts.
        with open_session(self.target, application_name=f"queuetop-work:{self.options.mode}:{self.queue_name}") as conn:
            TableQueue.open(conn, self.queue_name)
            if dialect_of(conn).capabilities.notify and not link_of(conn).pinned:  # said once here, not by each process
                say_polling(conn, self.queue_name, UNTIL_EMPTY_POLL_S if self.options.until_empty else self.options.poll_interval_s)
        restore = on_stop_signals(self._request_stop)
        deadline = None if self.options.duration_s is None else time.monotonic() + self.options.duration_s
        # multiprocessing starts its resource tracker with the first process, and unblocks SIGINT
        # and SIGTERM after it: started first, it cannot undo the block that _start puts around a child.
        resource_tracker.ensure_running()
        try:
            for index in range(self.options.processes):
                self._start(index)
            while self._children or (self._due and not self._stop.is_set()):
                now = time.monotonic()
                if not self._stop.is_set() and (self._stop_requested or (deadline is not None and now >= deadline)):
                    self.stop()
                for index, due in list(self._due.items()):
                    if self._stop.is_set():
                        self._due.clear()
                    elif now >= due:
                        del self._due[index]
                        self._start(index)
                self._supervise(0.25)
        finally:
            self.stop()
            for child in self._children.values():
                child.process.join(30)
                if child.process.is_alive():
                    child.process.kill()
            restore()
        counts = list(self._counters)
        for index in range(self.options.processes):
            self.summary.add(**dict(zip(_FIELDS, counts[index * len(_FIELDS):(index + 1) * len(_FIELDS)], strict=True)))
        if self._errors:
            raise OperationFailed(self._errors[0])
        return self.summary

    def _supervise(self, timeout: float) -> None:
        children = list(self._children.values())
        waitables: list[Any] = [c.pipe for c in children] + [c.process.sentinel for c in children]
        ready = multiprocessing.connection.wait(waitables, timeout)
        for child in children:
            if child.pipe in ready:
                self._read(child)
        for child in children:
            if child.process.sentinel in ready:
                while self._read(child):  # what it sent before it ended
                    pass
                child.process.join()
                del self._children[child.index]
                child.pipe.close()
                if not child.finished:
                    self._died(child)

    def _read(self, child: _Child) -> bool:
        """One message from the child, if there is one; False when there is none (or no pipe)."""
        try:
            if not child.pipe.poll():
                return False
            item = child.pipe.recv()
        except (EOFError, OSError):
            return False
        kind = item[0]
        if kind == "log":
            _, level, name, message = item
            logging.getLogger(name).log(level, "%s", message)
        elif kind == "done":
            child.finished = True
            self.last_done = time.perf_counter()
        elif kind == "error":
            child.finished = True
            self._errors.append(item[1])
            self.stop()  # a worker that cannot go on stops the pool with the reason, as in one process
        return True

    def _died(self, child: _Child) -> None:
        code = child.process.exitcode
        how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        if self._stop.is_set():
            if code not in (0, -signal.SIGTERM):
                log.warning("worker process %d of queue %s ended (%s) while stopping: what it had claimed "
                            "comes back when its visibility ends", child.index, self.queue_name, how)
            return
        young = time.monotonic() - child.started < YOUNG_S
        deaths = self._young_deaths[child.index] = self._young_deaths.get(child.index, 0) + 1 if young else 0
        delay = min(RECONNECT_CAP_S, reconnect_delay(deaths)) if deaths else 0.0
        self.restarts += 1
        log.warning("worker process %d of queue %s died (%s): what it had claimed comes back when its visibility "
                    "ends; starting another%s", child.index, self.queue_name, how,
                    f" in {delay:.1f} s" if delay else "")
        self._due[child.index] = time.monotonic() + delay


def run_pool(target: Target, queue_name: str, handler: str, options: WorkOptions) -> WorkSummary:
    """Work with `options.workers` workers in `options.processes` processes (one: threads only)."""
    if options.processes > 1:
        return ProcessPool(target, queue_name, handler, options).run()
    return WorkerPool(target, queue_name, parse_handler(handler), options).run()
