"""The relay scenario: K relay processes share one lease; a service writes N outbox messages
(half sends to a queue, half publishes to a topic with two subscribers); with `kill_leader`, the
lease holder is killed (SIGKILL) once about a third of the messages are relayed, its lease
expires after `ttl_s`, and a standby takes over and finishes the job.

`published_unique` counts distinct (queue, outbox id) pairs in the destination queues, against
`expected_deliveries` (a send: one; a publish: one per subscriber); `published_total` counts
them all, so a duplicate would show. `lease_handovers` is how many times the lease's fencing
token moved on during the run (renewals keep it).
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import signal
import time
import uuid
from collections.abc import Callable
from multiprocessing.process import BaseProcess

from dbcore.database import Target, one
from dbcore.dialect import Session, open_session
from dbcore.errors import UsageError

from .. import lease as leases
from .. import lifeline, outbox, schema
from ..table_queue import TableQueue

log = logging.getLogger("queuetop.scenario.relay")
APPLICATION = "queuetop-scenario:relay"


class RelayScenario:
    def __init__(self, target: Target, *, relays: int, messages: int, kill_leader: bool = False,
                 ttl_s: float = 2.0, batch: int = 100, rate: float = 2000.0, keep: bool = False,
                 progress: Callable[[str], None] | None = None) -> None:
        checks = (
            (1 <= relays <= 32, "--relays must be between 1 and 32"),
            (1 <= messages <= 10_000_000, "--messages must be between 1 and 10000000"),
            (0.2 <= ttl_s <= 600, "--ttl must be between 0.2 and 600 seconds"),
            (1 <= batch <= 10_000, "--batch must be between 1 and 10000"),
            (1 <= rate <= 1_000_000, "--rate must be between 1 and 1000000 messages/s"),
            (not kill_leader or relays >= 2, "--kill-leader needs at least 2 relays (someone must take over)"),
        )
        for ok, message in checks:
            if not ok:
                raise UsageError(message)
        self.target, self.relays, self.messages, self.kill_leader = target, relays, messages, kill_leader
        self.ttl_s, self.batch, self.rate, self.keep, self.progress = ttl_s, batch, rate, keep, progress
        run = uuid.uuid4().hex[:8]
        self.lease = f"relay-scenario-{run}"
        self.topic = f"relay-topic-{run}"
        self.direct = f"relay-direct-{run}"
        self.subscribers = [f"relay-sub-a-{run}", f"relay-sub-b-{run}"]

    def run(self) -> dict[str, object]:
        context = multiprocessing.get_context("forkserver")
        processes: dict[str, BaseProcess] = {}
        killed: str | None = None
        with open_session(self.target, application_name=f"{APPLICATION}:service") as conn:
            schema.require(conn, where=self.target.masked)
            TableQueue.create(conn, self.direct)
            for queue in self.subscribers:
                outbox.subscribe(conn, self.topic, queue)
            started = time.monotonic()
            for n in range(self.relays):
                holder = f"relay-{n + 1}"
                proc = context.Process(target=outbox.run_relay_process, daemon=True,
                                       args=(self.target, holder, self.lease, self.ttl_s, self.batch, lifeline.token()))
                proc.start()
                processes[holder] = proc
            first_token = None
            try:
                written = 0
                patience_s = 60 + self.ttl_s * 3  # for the relays to finish, or to take the lease
                deadline = None  # set once everything is written
                while True:
                    # With --kill-leader, half the messages wait until the leader is dead: someone
                    # must then take the lease over to relay them. (A stalled loop that wrote them
                    # all at once let the leader relay everything before it was killed.)
                    limit = self.messages // 2 if self.kill_leader and killed is None else self.messages
                    if written < limit:
                        due = min(limit, int((time.monotonic() - started) * self.rate) + 1)
                        outbox.write_orders(conn, written, due, self.direct, self.topic)
                        written = due
                    elif deadline is None and written == self.messages:
                        deadline = time.monotonic() + patience_s
                    if first_token is None:
                        first_token = self._token(conn)
                    if self.kill_leader and killed is None and self._relayed(conn) >= self.messages // 3:
                        killed = self._kill_leader(conn, processes)
                    if self.kill_leader and killed is None and time.monotonic() > started + patience_s:
                        raise RuntimeError("no relay held the lease to be killed, or the first third was never relayed")
                    if deadline is not None:
                        backlog = one(conn.execute(schema.ENGINE_SQL["outbox_rows"]))[0]
                        if backlog == 0 and (killed or not self.kill_leader):
                            break
                        if time.monotonic() > deadline:
                            raise RuntimeError(f"the relays left {backlog} outbox rows after the deadline")
                    time.sleep(0.01)
                elapsed = time.monotonic() - started
            finally:
                for process in processes.values():
                    if process.is_alive():
                        process.kill()
                for process in processes.values():
                    process.join(10)
            result = self._summary(conn, elapsed, first_token, killed)
            if not self.keep:
                self._cleanup(conn)
        return result

    def _token(self, conn: Session) -> int | None:
        state = leases.describe(conn, self.lease)
        return None if state is None or state.holder is None else state.token

    def _relayed(self, conn: Session) -> int:
        """Messages delivered to the destination queues so far."""
        return sum(one(conn.execute(TableQueue(name).statement_for(conn, "queue_row_count")))[0]
                   for name in [self.direct, *self.subscribers])

    def _kill_leader(self, conn: Session, processes: dict[str, BaseProcess]) -> str | None:
        state = leases.describe(conn, self.lease)
        if state is None or state.holder not in processes:
            return None
        processes[state.holder].kill()  # SIGKILL: no release, no goodbye
        processes[state.holder].join(10)
        assert processes[state.holder].exitcode == -signal.SIGKILL
        if self.progress:
            self.progress(f"killed the leader {state.holder} (token {state.token})")
        return state.holder

    def _summary(self, conn: Session, elapsed: float, first_token: int | None, killed: str | None) -> dict:
        pairs: list[tuple[str, int, int]] = []
        for name in [self.direct, *self.subscribers]:
            for (body,) in conn.execute(TableQueue(name).statement_for(conn, "queue_bodies")):
                envelope = json.loads(body) if isinstance(body, str) else body
                pairs.append((name, envelope["outbox_id"], envelope["token"]))
        final = leases.describe(conn, self.lease)
        final_token = final.token if final else None
        sends = (self.messages + 1) // 2
        publishes = self.messages // 2
        return {
            "scenario": "relay",
            "relays": self.relays,
            "messages": self.messages,
            "expected_deliveries": sends + publishes * len(self.subscribers),
            "published_total": len(pairs),
            "published_unique": len({(q, i) for q, i, _t in pairs}),
            "lease_handovers": (final_token - first_token) if final_token and first_token else 0,
            "killed_leader": killed,
            "final_holder": final.holder if final else None,
            "tokens_seen": sorted({t for _q, _i, t in pairs}),
            "duration_s": round(elapsed, 2),
        }

    def _cleanup(self, conn: Session) -> None:
        for name in [self.direct, *self.subscribers]:
            TableQueue.open(conn, name).drop(conn)
        for queue in self.subscribers:
            conn.execute(schema.ENGINE_SQL["unsubscribe"], {"topic": self.topic, "queue": queue})
        conn.execute(schema.ENGINE_SQL["lease_forget"], {"name": self.lease})
