"""The contention scenario: pattern 5's story (design note 001, "The short transaction trap").

Tasks reach many users; each answer moves the task's status counts (PENDING -1, DONE +1), in a
SERIALIZABLE transaction as in the note. Meanwhile a (re)submission runs every few seconds: a
long transaction that selects eligible users batch by batch (simulated with pg_sleep: the note's
took minutes) and inserts their user_tasks.

- naive: one aggregate row per (task, status). Every answer updates the task's two hot rows, and
  the submission updates the PENDING row on its first batch and holds that lock to COMMIT. The
  answers queue up behind it and behind each other, and when the holder commits a SERIALIZABLE
  waiter fails ("could not serialize access") and must retry.
- compacted: writers only INSERT delta rows (queues.compactor); the compacting agent folds them on
  a schedule. Nobody waits on anybody.

While it runs, a lock sampler samples the blocked sessions of the scenario every `sample_every_s`.
The engine does not import the probes: the caller passes the sampler in (the command line and
the dashboard pass `probes.postgres.blocked_applications`, the same code as the Locks panel). At the end the final
per-status sums are compared with what the committed operations imply and with the user_tasks
rows themselves (`consistent`), and the scenario's rows are removed (unless `keep`).
"""

from __future__ import annotations

import logging
import statistics
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass

from dbcore.database import SESSION_ERRORS, Target, one
from dbcore.dialect import Session, dialect_of, open_session
from dbcore.errors import UsageError

from .. import compactor, schema
from ..compactor import CompactorAgent

log = logging.getLogger("queuetop.scenario.contention")
MODES = ("naive", "compacted")
APPLICATION = "queuetop-scenario:contention"
STATUSES = ("PENDING", "DONE")
_SETUP_CHUNK = 10_000
_RETRYABLE = {"40001", "40P01"}  # serialization failure, deadlock: in either dialect (SQL Server's 1205 is 40001)

# One sample: the application_name of every session blocked right now.
BlockedApplications = Callable[[], Iterable[str | None]]
# Opens a (read-only probe) session on the target for the scenario's whole run.
LockSampler = Callable[[Target], AbstractContextManager[BlockedApplications]]


@dataclass(frozen=True, slots=True)
class ContentionOptions:
    mode: str
    submitters: int = 16  # concurrent answering sessions
    duration_s: float | None = 20.0  # None: until stop()
    compactor: bool = True  # compacted mode: run the compacting agent
    tasks: int = 4
    users: int = 100_000  # users the tasks reach before the clock starts
    resubmit_every_s: float = 2.0
    submission_s: float = 1.0  # how long one (re)submission transaction stays open
    submission_users: int = 2_000
    submission_batches: int = 10
    compact_every_s: float = 0.5
    sample_every_s: float = 0.1
    keep: bool = False  # leave the scenario's rows in place

    def validate(self) -> ContentionOptions:
        if self.mode not in MODES:
            raise UsageError(f"unknown mode {self.mode!r}: expected naive or compacted")
        checks = (
            (1 <= self.submitters <= 256, "--submitters must be between 1 and 256"),
            (self.duration_s is None or 0 < self.duration_s <= 86_400, "--duration must be between 0 and 86400 seconds"),
            (1 <= self.tasks <= 1000, "--tasks must be between 1 and 1000"),
            (self.tasks <= self.users <= 10_000_000, "--users must be between --tasks and 10000000"),
            (0.05 <= self.resubmit_every_s <= 3600, "--resubmit-every must be between 0.05 and 3600 seconds"),
            (0 <= self.submission_s <= 600, "--submission-seconds must be between 0 and 600"),
            (1 <= self.submission_users <= 1_000_000, "--submission-users must be between 1 and 1000000"),
            (1 <= self.submission_batches <= 1000, "--submission-batches must be between 1 and 1000"),
            (0.05 <= self.compact_every_s <= 3600, "--compact-every must be between 0.05 and 3600 seconds"),
            (0.01 <= self.sample_every_s <= 60, "--sample-every must be between 0.01 and 60 seconds"),
        )
        for ok, message in checks:
            if not ok:
                raise UsageError(message)
        return self


class ContentionScenario:
    """One run. `run()` blocks until the duration is over or `stop()` is called, then returns the
    summary; `live()` may be read from another thread meanwhile."""

    def __init__(self, target: Target, options: ContentionOptions, lock_sampler: LockSampler,
                 progress: Callable[[str], None] | None = None, stop_event: threading.Event | None = None) -> None:
        self.target = target
        self.options = options.validate()
        self.lock_sampler = lock_sampler
        self.progress = progress
        self._stop = stop_event or threading.Event()
        self._queues: list[deque[tuple[int, int]]] = [deque() for _ in range(options.submitters)]
        self._lock = threading.Lock()
        self._answered: Counter[int] = Counter()
        self._submitted: Counter[int] = Counter()
        self._retries = 0
        self._starved = 0
        self._skipped = 0
        self._latencies: list[float] = []
        self._resubmissions = 0
        self._submission_errors = 0
        self._blocked_samples: list[int] = []
        self._sample_errors = 0
        self._next_user = 1
        self._errors: list[str] = []

    def stop(self) -> None:
        self._stop.set()

    def live(self) -> dict[str, object]:
        with self._lock:
            return {
                "mode": self.options.mode,
                "answers": sum(self._answered.values()),
                "max_blocked_sessions": max(self._blocked_samples, default=0),
                "blocked_now": self._blocked_samples[-1] if self._blocked_samples else 0,
            }

    # -- the run --------------------------------------------------------------------------

    def run(self) -> dict[str, object]:
        o = self.options
        with open_session(self.target, application_name=f"{APPLICATION}:setup") as conn:
            schema.require(conn, where=self.target.masked)
            tasks = self._setup(conn)
        agent = None
        try:
            if o.mode == "compacted" and o.compactor:
                agent = CompactorAgent(self.target, o.compact_every_s, application_name=f"{APPLICATION}:compactor")
                agent.start()
            threads = [threading.Thread(target=self._guard, args=(self._answerer, i), name=f"answerer-{i}", daemon=True)
                       for i in range(o.submitters)]
            threads.append(threading.Thread(target=self._guard, args=(self._submitter, tasks), name="submitter", daemon=True))
            sampler = threading.Thread(target=self._guard, args=(self._sampler,), name="lock-sampler", daemon=True)
            started = time.monotonic()
            for thread in [*threads, sampler]:
                thread.start()
            deadline = None if o.duration_s is None else started + o.duration_s
            next_report = started + 5
            while not self._stop.is_set():
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    break
                if self.progress and now >= next_report:
                    live = self.live()
                    self.progress(f"{now - started:5.1f}s  answers {live['answers']:,}  "
                                  f"blocked {live['blocked_now']} (max {live['max_blocked_sessions']})")
                    next_report += 5
                self._stop.wait(0.05 if deadline is None else min(0.05, max(0.0, deadline - now)))
            self._stop.set()
            for thread in threads:
                thread.join()
            elapsed = time.monotonic() - started
            sampler.join()
        finally:
            self._stop.set()
            if agent is not None:
                agent.stop()
        try:
            with open_session(self.target, application_name=f"{APPLICATION}:check") as conn:
                return self._summary(conn, tasks, elapsed, agent)
        finally:
            if not o.keep:
                with open_session(self.target, application_name=f"{APPLICATION}:cleanup") as conn:
                    self._cleanup(conn, tasks)

    def _guard(self, target: Callable[..., None], *args: object) -> None:
        try:
            target(*args)
        except Exception as exc:  # reported in the summary; the other threads stop too
            log.warning("%s failed: %s", threading.current_thread().name, exc)
            with self._lock:
                self._errors.append(f"{threading.current_thread().name}: {type(exc).__name__}: {exc}".splitlines()[0])
            self._stop.set()

    # -- setup ----------------------------------------------------------------------------

    def _setup(self, conn: Session) -> list[int]:
        o = self.options
        tasks = []
        for index in range(o.tasks):
            task = compactor.create_task(conn, f"contention {o.mode} #{index + 1}")
            if o.mode == "naive":
                conn.execute(schema.ENGINE_SQL["naive_task_init"], {"task_id": task})
            tasks.append(task)
        # The users every task reaches before the clock starts: user u gets task u mod T, and is
        # answered by session u mod N. Not timed, and written through the mode's own path.
        users = list(range(1, o.users + 1))
        self._next_user = o.users + 1
        for index, task in enumerate(tasks):
            mine = users[index :: o.tasks]
            with conn.transaction():
                for start in range(0, len(mine), _SETUP_CHUNK):
                    self._submit(conn, task, mine[start : start + _SETUP_CHUNK])
        self._hand_out([(tasks[(u - 1) % o.tasks], u) for u in users])
        return tasks

    def _submit(self, conn: Session, task: int, users: list[int]) -> int:
        if self.options.mode == "naive":
            row = conn.execute(schema.ENGINE_SQL["naive_submit"], {"task_id": task, "users": users}).fetchone()
            added = int(row[0]) if row else 0
        else:
            added = compactor.submit(conn, task, users)
        self._submitted[task] += added  # counted by the caller's commit: see _submitter
        return added

    def _hand_out(self, pairs: list[tuple[int, int]]) -> None:
        n = len(self._queues)
        for task, user in pairs:
            self._queues[user % n].append((task, user))

    # -- the sessions ---------------------------------------------------------------------

    def _answerer(self, index: int) -> None:
        o = self.options
        statement = schema.ENGINE_SQL["naive_answer" if o.mode == "naive" else "task_answer"]
        mine = self._queues[index]
        answered: Counter[int] = Counter()
        latencies: list[float] = []
        retries = starved = skipped = 0
        with open_session(self.target, application_name=f"{APPLICATION}:answer") as conn:
            dialect_of(conn).set_isolation(conn, "SERIALIZABLE")  # as in the note
            try:
                while not self._stop.is_set():
                    try:
                        task, user = mine.popleft()
                    except IndexError:
                        starved += 1
                        self._stop.wait(0.01)
                        continue
                    began = time.perf_counter()
                    while not self._stop.is_set():
                        try:
                            with conn.transaction():
                                done = len(conn.execute(statement, {"task_id": task, "user_id": user}).fetchall()) == 2
                        except SESSION_ERRORS as exc:
                            if getattr(exc, "sqlstate", None) not in _RETRYABLE:
                                raise
                            retries += 1
                            continue
                        latencies.append(time.perf_counter() - began)
                        if done:
                            answered[task] += 1
                        else:
                            skipped += 1
                        break
                    # Stopped while retrying: that answer was rolled back and is not counted.
                    if len(latencies) >= 64:
                        self._merge(answered, latencies, retries, starved, skipped)
                        answered, latencies, retries, starved, skipped = Counter(), [], 0, 0, 0
            finally:
                self._merge(answered, latencies, retries, starved, skipped)

    def _merge(self, answered: Counter[int], latencies: list[float], retries: int, starved: int, skipped: int) -> None:
        with self._lock:
            self._answered.update(answered)
            self._latencies.extend(latencies)
            self._retries += retries
            self._starved += starved
            self._skipped += skipped

    def _submitter(self, tasks: list[int]) -> None:
        """Every `resubmit_every_s`, one task reaches `submission_users` new users in one long
        transaction, `submission_batches` batches, each after a (simulated) eligibility query."""
        o = self.options
        pause = o.submission_s / o.submission_batches
        round_ = 0
        next_at = time.monotonic() + o.resubmit_every_s  # a fixed cadence of starts
        with open_session(self.target, application_name=f"{APPLICATION}:submit") as conn:
            while not self._stop.wait(max(0.0, next_at - time.monotonic())):
                next_at = max(next_at + o.resubmit_every_s, time.monotonic())
                task = tasks[round_ % len(tasks)]
                round_ += 1
                users = list(range(self._next_user, self._next_user + o.submission_users))
                self._next_user += o.submission_users
                size = -(-len(users) // o.submission_batches)
                before = self._submitted[task]
                try:
                    with conn.transaction():
                        for start in range(0, len(users), size):
                            conn.execute(schema.ENGINE_SQL["scenario_pause"], {"seconds": pause})  # selecting eligible users
                            self._submit(conn, task, users[start : start + size])
                except SESSION_ERRORS as exc:
                    self._submitted[task] = before  # rolled back: none of them reached the task
                    self._submission_errors += 1
                    log.warning("submission rolled back: %s", exc)
                    continue
                self._resubmissions += 1
                self._hand_out([(task, u) for u in users])

    def _sampler(self) -> None:
        with self.lock_sampler(self.target) as blocked_applications:
            while not self._stop.wait(self.options.sample_every_s):
                try:
                    blocked = list(blocked_applications())
                except SESSION_ERRORS as exc:  # a probe timing out is noted, not fatal
                    self._sample_errors += 1
                    log.debug("lock sample failed: %s", exc)
                    continue
                mine = sum(1 for application in blocked if (application or "").startswith(APPLICATION))
                with self._lock:
                    self._blocked_samples.append(mine)

    # -- the end --------------------------------------------------------------------------

    def _summary(self, conn: Session, tasks: list[int], elapsed: float, agent: CompactorAgent | None) -> dict:
        o = self.options
        expected = {t: {"PENDING": self._submitted[t] - self._answered[t], "DONE": self._answered[t]} for t in tasks}
        truth = {t: _by_status(conn.execute(schema.ENGINE_SQL["user_task_counts"], {"task_id": t}).fetchall()) for t in tasks}
        pending_deltas = None
        if o.mode == "naive":
            final = {t: _by_status(conn.execute(schema.ENGINE_SQL["naive_status_counts"], {"task_id": t}).fetchall()) for t in tasks}
            consistent = final == expected == truth
        else:
            final = {t: _by_status(compactor.status_counts(conn, t).items()) for t in tasks}
            pending_deltas = one(conn.execute(schema.ENGINE_SQL["scenario_pending_deltas"], {"tasks": tasks}))[0]
            # Folding what is left must not change a sum either (tried, then rolled back: the
            # deltas stay as the run left them, for --keep).
            with conn.transaction(force_rollback=True):
                for t in tasks:
                    compactor.compact(conn, t, record=False)
                folded = {t: _by_status(compactor.status_counts(conn, t).items()) for t in tasks}
            consistent = final == expected == truth == folded
        answers = sum(self._answered.values())
        latencies = sorted(self._latencies)
        samples = self._blocked_samples
        errors = list(self._errors)
        if self._submission_errors:
            errors.append(f"{self._submission_errors} submission(s) rolled back")
        if self._skipped:
            errors.append(f"{self._skipped} answer(s) found no pending user task")
        result: dict[str, object] = {
            "scenario": "contention",
            "mode": o.mode,
            "submitters": o.submitters,
            "duration_s": round(elapsed, 3),
            "answers": answers,
            "answers_per_s": round(answers / elapsed, 1) if elapsed > 0 else 0.0,
            "max_blocked_sessions": max(samples, default=0),
            "mean_blocked_sessions": round(statistics.fmean(samples), 2) if samples else 0.0,
            "lock_samples": len(samples),
            "consistent": consistent,
            "retries": self._retries,
            "answer_p50_ms": _ms(latencies, 0.50),
            "answer_p99_ms": _ms(latencies, 0.99),
            "resubmissions": self._resubmissions,
            "users_reached": sum(self._submitted.values()),
            "final": _total(final),
            "expected": _total(expected),
            "compactor": bool(agent),
            "compactions": agent.runs if agent else 0,
            "rows_folded": agent.rows_folded if agent else 0,
            "pending_deltas_at_end": pending_deltas,
            "starved": self._starved,
            "lock_sample_errors": self._sample_errors,
            "errors": errors,
        }
        return result

    def _cleanup(self, conn: Session, tasks: list[int]) -> None:
        conn.execute(schema.ENGINE_SQL["scenario_drop_tasks"], {"tasks": tasks})


def _by_status(rows: Iterable[tuple[str, int]]) -> dict[str, int]:
    counts = {status: 0 for status in STATUSES}
    for status, count in rows:
        counts[status] = int(count)
    return counts


def _total(per_task: dict[int, dict[str, int]]) -> dict[str, int]:
    return {status: sum(c.get(status, 0) for c in per_task.values()) for status in STATUSES}


def _ms(sorted_values: list[float], quantile: float) -> float | None:
    if not sorted_values:
        return None
    index = min(len(sorted_values) - 1, int(quantile * len(sorted_values)))
    return round(sorted_values[index] * 1000, 2)
