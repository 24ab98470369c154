"""The exactly-once scenario: N messages from a sender endpoint to a receiving endpoint through
at-least-once signals, with duplicate deliveries and crashes of real receiving processes.

- The sender's business operation stores each outgoing message in its outbox and dispatches it
  (inbox record with a fresh attempt id at the receiver, attempt id persisted, signal sent).
- Duplicates (`duplicate_rate`): half of them are the same signal sent twice at once (two
  receivers may take the copies concurrently), half are sent again late, after the receivers
  have drained the queue once.
- Crashes (`crash_rate`): per delivery, with that probability, the receiving process kills itself
  (SIGKILL) at a random step of its handling. Its claim on the signal expires after
  `visibility_s` and another receiver (or its replacement, started at once) gets it again.

The receivers are `receivers` real processes (multiprocessing, forkserver). The business effect
is one row in eo_effects per processing, deliberately not idempotent, so that `side_effects`
counts every time the business logic really committed.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import random
import signal
import time
import uuid
from collections.abc import Callable, MutableSequence
from multiprocessing.process import BaseProcess

from dbcore.database import Target, one
from dbcore.dialect import Session, open_session
from dbcore.errors import UsageError

from .. import lifeline, schema
from ..exactly_once import RECEIVE_STEPS, Endpoint, Outgoing, Signal, signal_queue
from ..table_queue import TableQueue

log = logging.getLogger("queuetop.scenario.exactly_once")
APPLICATION = "queuetop-scenario:exactly-once"
NAIVE_STEPS = ("claim", "process", "inbox.delete")


def _receiver(target: Target, endpoint: str, variant: str, crash_rate: float, seed: int, slot: int,
              deliveries: MutableSequence[int], visibility_s: float, parent: lifeline.Token | None = None) -> None:
    """One receiving process: claim a signal, handle it, acknowledge it; now and then die; and
    die at once if the scenario's process is gone."""
    lifeline.die_with(parent)
    rng = random.Random(seed)
    steps = RECEIVE_STEPS if variant == "claims" else NAIVE_STEPS
    doomed: list[str | None] = [None]

    def hook(step: str) -> None:
        if step == doomed[0]:
            os.kill(os.getpid(), signal.SIGKILL)

    receiver = Endpoint(endpoint, variant=variant, hook=hook)
    with open_session(target, application_name=f"{APPLICATION}:receive") as conn:
        queue = signal_queue(conn, endpoint)
        while True:
            messages = queue.claim(conn, visibility_s=visibility_s)
            if not messages:
                time.sleep(0.01)
                continue
            deliveries[slot] += 1
            doomed[0] = rng.choice(steps) if rng.random() < crash_rate else None
            receiver.receive(conn, queue, messages[0])


class ExactlyOnceScenario:
    def __init__(self, target: Target, *, messages: int, duplicate_rate: float, crash_rate: float,
                 variant: str = "claims", receivers: int = 4, visibility_s: float = 1.0, seed: int | None = None,
                 keep: bool = False, progress: Callable[[str], None] | None = None) -> None:
        checks = (
            (1 <= messages <= 10_000_000, "--messages must be between 1 and 10000000"),
            (0 <= duplicate_rate <= 1, "--duplicate-rate must be between 0 and 1"),
            (0 <= crash_rate < 1, "--crash-rate must be at least 0 and below 1"),
            (variant in ("claims", "naive"), f"unknown variant {variant!r}: expected claims or naive"),
            (1 <= receivers <= 64, "--receivers must be between 1 and 64"),
            (0.1 <= visibility_s <= 600, "--visibility must be between 0.1 and 600 seconds"),
        )
        for ok, message in checks:
            if not ok:
                raise UsageError(message)
        self.target = target
        self.messages, self.duplicate_rate, self.crash_rate = messages, duplicate_rate, crash_rate
        self.variant, self.receivers, self.visibility_s = variant, receivers, visibility_s
        self.seed = random.randrange(1 << 30) if seed is None else seed
        self.keep = keep
        self.progress = progress
        run = uuid.uuid4().hex[:8]
        self.sender_name, self.receiver_name = f"eo-sender-{run}", f"eo-receiver-{run}"

    def run(self) -> dict[str, object]:
        rng = random.Random(self.seed)
        context = multiprocessing.get_context("forkserver")
        deliveries = context.Array("q", self.receivers, lock=False)
        processes: list[BaseProcess | None] = [None] * self.receivers
        crashes = spawned = 0
        started = time.monotonic()
        with open_session(self.target, application_name=f"{APPLICATION}:send") as conn:
            schema.require(conn, where=self.target.masked)
            queue = signal_queue(conn, self.receiver_name)

            def spawn(slot: int) -> None:
                nonlocal spawned
                spawned += 1  # every process its own random stream, replayable from the seed
                proc = context.Process(
                    target=_receiver, daemon=True,
                    args=(self.target, self.receiver_name, self.variant, self.crash_rate,
                          self.seed * 1000 + spawned, slot, deliveries, self.visibility_s, lifeline.token()),
                )
                proc.start()
                processes[slot] = proc

            def reap() -> None:
                nonlocal crashes
                for slot, proc in enumerate(processes):
                    if proc is not None and not proc.is_alive():
                        proc.join()
                        if proc.exitcode == -signal.SIGKILL:
                            crashes += 1
                        else:
                            log.warning("receiver exited with %s", proc.exitcode)
                        spawn(slot)

            def drain() -> None:
                deadline = time.monotonic() + max(60.0, self.messages * 0.05)
                while True:
                    reap()
                    if not queue.has_messages(conn) and queue.counts(conn).in_flight == 0:
                        return
                    if time.monotonic() > deadline:
                        raise RuntimeError("the receivers did not drain the signal queue in time")
                    time.sleep(0.05)

            for slot in range(self.receivers):
                spawn(slot)
            sender = Endpoint(self.sender_name)
            concurrent: list[Signal] = []
            late: list[Signal] = []
            try:
                for n in range(self.messages):
                    body = json.dumps({"n": n})
                    if rng.random() < self.duplicate_rate:
                        # Dispatch by hand to get the signal, then send it once more.
                        operation = sender.send(conn, [Outgoing(self.receiver_name, body)], dispatch=False)
                        sender.dispatch(conn, operation)
                        record = sender.outbox_record(conn, operation)
                        assert record is not None, "dispatched, not yet deleted"
                        [(message_id, attempt_id)] = record["attempts"].items()
                        copy = Signal(message_id, attempt_id, body)
                        sender.delete_outbox_record(conn, operation)
                        if rng.random() < 0.5:
                            sender.send_signal(conn, self.receiver_name, copy)  # right behind the first
                            concurrent.append(copy)
                        else:
                            late.append(copy)
                    else:
                        sender.send(conn, [Outgoing(self.receiver_name, body)])
                    if self.progress and n and n % 1000 == 0:
                        self.progress(f"sent {n:,}, crashes {crashes}")
                    if n % 100 == 0:
                        reap()
                drain()
                for copy in late:  # the same signals, again, after they were processed
                    sender.send_signal(conn, self.receiver_name, copy)
                drain()
            finally:
                for proc in processes:
                    if proc is not None and proc.is_alive():
                        proc.kill()
                for proc in processes:
                    if proc is not None:
                        proc.join(10)
            elapsed = time.monotonic() - started
            result = self._summary(conn, elapsed, sum(deliveries), len(concurrent) + len(late), crashes)
            if not self.keep:
                self._cleanup(conn, queue)
        return result

    def _summary(self, conn: Session, elapsed: float, deliveries: int, duplicates: int, crashes: int) -> dict:
        row = one(conn.execute(schema.ENGINE_SQL["scenario_effects"], {"receiver": self.receiver_name}))
        side_effects, distinct = int(row[0]), int(row[1])
        inbox, outbox = one(conn.execute(
            schema.ENGINE_SQL["scenario_leftovers"], {"receiver": self.receiver_name, "sender": self.sender_name}
        ))
        return {
            "scenario": "exactly-once",
            "variant": self.variant,
            "messages": self.messages,
            "deliveries": deliveries,
            "duplicates_delivered": duplicates,
            "crashes": crashes,
            "side_effects": side_effects,
            "duplicate_effects": side_effects - distinct,
            "lost": self.messages - distinct,
            "inbox_left": int(inbox),
            "outbox_left": int(outbox),
            "receivers": self.receivers,
            "duration_s": round(elapsed, 2),
            "seed": self.seed,
        }

    def _cleanup(self, conn: Session, queue: TableQueue) -> None:
        names = [self.sender_name, self.receiver_name]
        conn.execute(schema.ENGINE_SQL["scenario_drop_endpoints"], {"endpoints": names})
        queue.drop(conn)
