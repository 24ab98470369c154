"""Patterns 3 and 4: the transactional outbox, its relay, and scale-out by a lease.

A service calls `send()` / `publish()` inside the transaction that makes its business change,
so the outgoing message exists if and only if the change committed. Relays move outbox rows to
the destination queues: a send to its queue, a publish to every queue subscribed to the topic
(the recipient list, `queuetop.subscriptions`), so one publish becomes one send per subscriber.

Any number of relays may run; only the holder of the lease relays (design note 003: a lease
in a table, taken by compare-and-swap on the database clock). A relay's batch is one
transaction:
1. DELETE the oldest rows nobody else holds (FOR UPDATE SKIP LOCKED), RETURNING them: exactly
   those are published, so a row another relay moved is never published twice, and rows held by
   a stalled ex-leader's open batch are stepped over, not waited for;
2. enqueue them (envelope: outbox id, the relay's fencing token, the body) to their queues;
3. the fence: the lease is still held by this relay under its token, by `clock_timestamp()`,
   read FOR SHARE so that a takeover waits for this COMMIT. If not, everything rolls back.

Races closed (each has a test): a leader killed mid-batch (its transaction rolls back; its
lease expires and a standby takes over and finishes the job); a relay paused past its lease that
resumes with a stale token (the fence refuses its batch; nothing it did is kept); two relays
started at once (one lease, one token).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable

from dbcore.database import SESSION_ERRORS, Target, one
from dbcore.dialect import Session, connection_lost, open_session
from dbcore.errors import LeaseHeld, QueuetopError, first_line
from dbcore.lockwait import set_local
from dbcore.names import check_name
from dbcore.pooler import link_of

from . import lease as leases
from . import lifeline
from .link import ConnectionState
from .schema import ENGINE_SQL
from .table_queue import TableQueue

log = logging.getLogger("queuetop.outbox")
DEFAULT_LEASE = "outbox-relay"


class StaleLease(QueuetopError):
    """The relay's lease is no longer held under its token: its batch was rolled back."""

    exit_code = 4


# -- the service's side: in the caller's transaction -----------------------------------------


def send(conn: Session, queue: str, body: str) -> int:
    check_name("queue", queue)
    return one(conn.execute(ENGINE_SQL["outbox_write"], {"kind": "send", "destination": queue, "body": body}))[0]


def publish(conn: Session, topic: str, body: str) -> int:
    check_name("topic", topic)
    return one(conn.execute(ENGINE_SQL["outbox_write"], {"kind": "publish", "destination": topic, "body": body}))[0]


def write_orders(conn: Session, first: int, last: int, queue: str, topic: str) -> None:
    """The demo service of the relay scenario and the dashboard: orders `first` to `last - 1`,
    in one transaction, alternately sent to `queue` and published to `topic`."""
    with conn.transaction():
        for n in range(first, last):
            body = json.dumps({"order": n})
            if n % 2:
                publish(conn, topic, body)
            else:
                send(conn, queue, body)


def subscribe(conn: Session, topic: str, queue: str) -> None:
    check_name("topic", topic)
    TableQueue.create(conn, queue)
    conn.execute(ENGINE_SQL["subscribe"], {"topic": topic, "queue": queue})


# -- the relay --------------------------------------------------------------------------------


class Relay:
    """One relay instance. `run()` loops until `stop` is set: standby until it takes the lease,
    then relays batches and renews the lease every `ttl_s / 3`."""

    def __init__(self, target: Target, holder: str, *, lease: str = DEFAULT_LEASE, ttl_s: float = 5.0,
                 batch: int = 100, idle_s: float = 0.05, hook: Callable[[str], None] | None = None) -> None:
        if not 0.2 <= ttl_s <= 3600:
            raise ValueError("relay lease TTL must be between 0.2 and 3600 seconds")
        self.target, self.holder, self.lease, self.ttl_s = target, holder, lease, ttl_s
        self.batch, self.idle_s = batch, idle_s
        self.hook = hook or (lambda step: None)
        self.token: int | None = None
        self.relayed = 0
        self.terms = 0  # how many times this relay took the lease
        self._queues: dict[str, TableQueue] = {}

    def run(self, stop: threading.Event) -> None:
        # Said once per change, not once per attempt (queues/link.py): a lost database in two
        # lines, lost and back; any other failure once, until the relay has moved rows again.
        link = ConnectionState(self.holder, log, retrying="reconnecting")
        said: tuple[str, int] | None = None
        while not stop.is_set():
            opened_at: float | None = None
            try:
                # A relay session is never idle inside a transaction unless its process stalled:
                # then the server ends the session, and the locks of its batch with it.
                # (SQL Server has no such timeout: a stalled relay's batch keeps its row locks until
                # its session ends, and the new leader's outbox_take passes them with READPAST.)
                # Through a pooler that does not pin the session, each batch sets it for itself.
                with open_session(self.target, application_name=f"queuetop-relay:{self.holder}",
                                  options=self._settings()) as conn:
                    opened_at = time.monotonic()
                    link.back("relay")
                    self._serve(conn, stop)
            except SESSION_ERRORS as exc:  # the database went away, a queue vanished...
                if connection_lost(exc):
                    link.lost("relay", exc, opened_at=opened_at)
                elif said != (first_line(exc), self.relayed):
                    said = (first_line(exc), self.relayed)
                    log.warning("%s: %s; reconnecting", self.holder, first_line(exc))
                stop.wait(min(1.0, self.ttl_s / 4))

    def _settings(self) -> dict[str, str]:
        return {"idle_in_transaction_session_timeout": str(int(self.ttl_s * 2000))}

    def _serve(self, conn: Session, stop: threading.Event) -> None:
        while not stop.is_set():
            if self.token is None and not self._take(conn):
                stop.wait(min(1.0, self.ttl_s / 4))  # standby
                continue
            renew_at = time.monotonic() + self.ttl_s / 3
            while not stop.is_set():
                if time.monotonic() >= renew_at:
                    if not self._renew(conn):
                        break
                    renew_at = time.monotonic() + self.ttl_s / 3
                try:
                    moved = self.relay_batch(conn)
                except StaleLease:
                    log.warning("%s: lease lost under token %s", self.holder, self.token)
                    self.token = None
                    break
                if moved == 0:
                    stop.wait(self.idle_s)

    def _take(self, conn: Session) -> bool:
        try:
            self.token = leases.acquire(conn, self.lease, self.holder, self.ttl_s)
        except LeaseHeld:
            return False
        self.terms += 1
        log.info("%s: took lease %s, token %s", self.holder, self.lease, self.token)
        return True

    def _renew(self, conn: Session) -> bool:
        try:
            leases.renew(conn, self.lease, self.holder, self.ttl_s, self.token)
            return True
        except LeaseHeld:
            self.token = None
            return False

    def relay_batch(self, conn: Session) -> int:
        """One fenced transaction; returns how many outbox rows it moved (StaleLease: none)."""
        if self.token is None:
            raise StaleLease(f"{self.holder} holds no lease")
        for _ in range(3):
            try:
                return self._relay_batch(conn)
            except _MissingQueues as missing:
                # Queues are created outside the batch: creating one inside it would hold the
                # queue-creation lock for the whole batch (and for as long as a stalled relay).
                for name in missing.names:
                    self._queues[name] = TableQueue.create(conn, name)
        return 0

    def _relay_batch(self, conn: Session) -> int:
        with conn.transaction():
            if not link_of(conn).pinned:  # a pooler in transaction mode: the session's settings are each transaction's
                set_local(conn, self._settings())  # type: ignore[arg-type]  # a psycopg connection: pinned otherwise
            # Select and lock in the DELETE: rows held by another relay's open batch (a stalled
            # ex-leader) are skipped, and the next ones taken, so the new leader never waits.
            rows = sorted(conn.execute(ENGINE_SQL["outbox_take"], {"limit": self.batch}).fetchall())  # in id order
            if not rows:
                return 0
            topics = sorted({dest for _id, kind, dest, _body in rows if kind == "publish"})
            recipients: dict[str, list[str]] = defaultdict(list)
            if topics:
                for topic, queue in conn.execute(ENGINE_SQL["subscribers"], {"topics": topics}):
                    recipients[topic].append(queue)
            outgoing: dict[str, list[str]] = defaultdict(list)
            for outbox_id, kind, destination, body in rows:
                envelope = json.dumps({"outbox_id": outbox_id, "token": self.token, "body": json.loads(body)})
                for queue in ([destination] if kind == "send" else recipients.get(destination, [])):
                    outgoing[queue].append(envelope)
            missing = [name for name in outgoing if name not in self._queues]
            if missing:
                raise _MissingQueues(missing)  # rolls the batch back
            self.hook("batch")
            for name, bodies in outgoing.items():
                self._queues[name].enqueue_batch(conn, bodies)
            self.hook("fence")
            fenced = conn.execute(ENGINE_SQL["lease_fence"], {"name": self.lease, "holder": self.holder, "token": self.token}).fetchone()
            if fenced is None:
                raise StaleLease(f"{self.holder}: lease {self.lease} is no longer held under token {self.token}")
        self.relayed += len(rows)
        return len(rows)


class _MissingQueues(Exception):
    def __init__(self, names: list[str]) -> None:
        super().__init__(", ".join(names))
        self.names = names


def run_relay_process(target: Target, holder: str, lease: str = DEFAULT_LEASE, ttl_s: float = 5.0, batch: int = 100,
                      parent: lifeline.Token | None = None) -> None:
    """A relay in a process of its own (multiprocessing target), until it is killed, or until
    `parent` (the dashboard or scenario that started it) is gone."""
    lifeline.die_with(parent)
    Relay(target, holder, lease=lease, ttl_s=ttl_s, batch=batch).run(threading.Event())
