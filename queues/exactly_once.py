"""Pattern 4: exactly-once processing over at-least-once signals, with inbox/outbox and claims
(design note 002, "Service Bus").

An endpoint has four stores:
- signals: a table queue `eo.<endpoint>` (at least once: a crashed receiver's claim expires and
  the signal comes back; a sender may signal twice);
- a payload store (claim-check): a body above `PAYLOAD_INLINE_MAX` travels as a reference;
- an inbox store: one record per *attempt* to send it a message, keyed by a fresh attempt id,
  touched only by single-statement compare-and-swap operations, never inside a business
  transaction (as if it were a remote blob store);
- an outbox: one record per incoming message (or business operation), written in the same
  transaction as the business change, holding the outgoing messages and their attempt ids.

Receiving a signal (message id, attempt id), the `claims` variant:
1. outbox: find or create the message's outbox record; a new record gets a fresh claim id.
2. claim: compare-and-swap the inbox record's claim id from none to the record's. If the inbox
   record is gone or claimed by another record, the signal is a duplicate: drop it, and the
   record made in step 1 with it.
3. process: in ONE transaction, the business change and the outbox record's move from `claimed`
   to `processed` (conditional on its claim id and state), with the outgoing messages.
4. dispatch: for each outgoing message, a fresh attempt id and an inbox record at its
   destination; the attempt ids are persisted in the outbox record (compare-and-swap: only one
   dispatcher wins) BEFORE any signal is sent; then the signals (with payload references).
5. delete the inbox record, then the outbox record.

Races closed (each has its own test):
- two copies at once: both find the same outbox record; the conditional UPDATE in step 3 lets
  one business transaction commit; the other's rolls back.
- a copy arriving after the first finished but before cleanup: the outbox record says
  `processed`, so it only completes steps 4-5 (idempotent); arriving after cleanup, its inbox
  record is gone and the claim fails.
- a late create from a lost attempt: a retried dispatch uses new attempt ids, and only the
  persisted ones are ever signalled, so the late record validates nothing.
- a crash between any two steps: the signal comes back, and every step is resumable.

The `naive` variant ("check the inbox, then process") is kept to show its races: two copies
both see the inbox record and both process; a crash after processing and before the inbox
delete processes again.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from dbcore.dialect import Session
from dbcore.names import check_name

from .schema import ENGINE_SQL
from .table_queue import Message, TableQueue

PAYLOAD_INLINE_MAX = 512  # bytes of body that travel inside the signal
VARIANTS = ("claims", "naive")
RECEIVE_STEPS = ("outbox", "claim", "process", "dispatch", "send", "inbox.delete", "outbox.delete")
Hook = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Outgoing:
    destination: str
    body: str
    message_id: str = field(default_factory=lambda: str(uuid.uuid4()))

    def as_dict(self) -> dict[str, str]:
        return {"message_id": self.message_id, "destination": self.destination, "body": self.body}


@dataclass(frozen=True, slots=True)
class Signal:
    message_id: str
    attempt_id: str
    body: str | None = None  # inline, or
    payload: str | None = None  # a reference into the payload store

    def to_json(self) -> str:
        data: dict[str, str | None] = {"message_id": self.message_id, "attempt_id": self.attempt_id}
        data.update({"payload": self.payload} if self.payload else {"body": self.body})
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> Signal:
        data = json.loads(text)
        return cls(data["message_id"], data["attempt_id"], data.get("body"), data.get("payload"))


def _check_outgoing(outgoing: Sequence[Outgoing]) -> None:
    ids = [o.message_id for o in outgoing]
    if len(set(ids)) != len(ids):
        raise ValueError("outgoing messages of one record need distinct message ids")


class Duplicate(Exception):
    """The signal was a duplicate and was dropped (not an error)."""


def signal_queue(conn: Session, endpoint: str) -> TableQueue:
    return TableQueue.create(conn, f"eo.{endpoint}")


def _noop(_step: str) -> None:
    return None


# Business logic: runs inside the processing transaction; returns the outgoing messages.
Handler = Callable[[Session, str, str], Sequence[Outgoing]]


def record_effect(endpoint: str) -> Handler:
    """The scenario's business logic: one (deliberately not idempotent) effect row per message."""

    def handler(conn: Session, message_id: str, _body: str) -> Sequence[Outgoing]:
        conn.execute(ENGINE_SQL["eo_effect"], {"endpoint": endpoint, "message_id": message_id})
        return ()

    return handler


class Endpoint:
    def __init__(self, name: str, handler: Handler | None = None, *, variant: str = "claims",
                 hook: Hook | None = None) -> None:
        check_name("endpoint", name)
        if variant not in VARIANTS:
            raise ValueError(f"unknown variant {variant!r}")
        self.name = name
        self.handler = handler or record_effect(name)
        self.variant = variant
        self.hook = hook or _noop
        self._queues: dict[str, TableQueue] = {}

    # -- sending (a business operation with outgoing messages) ------------------------------

    def send(self, conn: Session, outgoing: Sequence[Outgoing],
             business: Callable[[Session], None] | None = None, *, dispatch: bool = True) -> str:
        """Store the business change and the outgoing messages in one transaction, then dispatch.
        A crash in between leaves a processed record: `recover()` (at start-up) dispatches it."""
        _check_outgoing(outgoing)
        operation = str(uuid.uuid4())
        with conn.transaction():
            if business is not None:
                business(conn)
            conn.execute(ENGINE_SQL["eo_outbox_new"], {
                "endpoint": self.name, "message_id": operation, "claim_id": str(uuid.uuid4()),
                "outgoing": json.dumps([o.as_dict() for o in outgoing]),
            })
        if dispatch:
            self.dispatch(conn, operation)
            self.delete_outbox_record(conn, operation)
        return operation

    def recover(self, conn: Session, limit: int = 1000) -> int:
        """Dispatch and clean up the records of this endpoint's own business operations (`send`)
        that a crash left undispatched. Records of incoming messages are not touched: their
        redelivered signal finishes them, inbox record first."""
        rows = conn.execute(ENGINE_SQL["eo_outbox_pending"], {"endpoint": self.name, "limit": limit}).fetchall()
        for (message_id,) in rows:
            self.dispatch(conn, str(message_id))
            self.delete_outbox_record(conn, str(message_id))
        return len(rows)

    def dispatch(self, conn: Session, message_id: str) -> int:
        """Step 4 for one outbox record: returns the signals sent (0 if the record is gone)."""
        record = self.outbox_record(conn, message_id)
        if record is None or record["state"] != "processed":
            return 0
        outgoing = record["outgoing"]
        attempts = record["attempts"]
        if attempts is None:
            self.hook("dispatch")
            fresh = {o["message_id"]: str(uuid.uuid4()) for o in outgoing}
            for o in outgoing:
                # At the destination's inbox store, keyed by the fresh attempt id. If this
                # dispatch dies here, the next one uses new ids: these records validate nothing.
                self.create_inbox_record(conn, o["destination"], fresh[o["message_id"]], o["message_id"])
            won = conn.execute(ENGINE_SQL["eo_outbox_set_attempts"], {
                "endpoint": self.name, "message_id": message_id, "attempts": json.dumps(fresh),
            }).fetchone()
            if won:
                attempts = fresh
            else:  # another dispatcher persisted its ids first: send those, never ours
                record = self.outbox_record(conn, message_id)
                if record is None or record["state"] != "processed" or record["attempts"] is None:
                    return 0  # it finished and cleaned up meanwhile (the record may be a new copy's)
                attempts = record["attempts"]
        self.hook("send")
        for o in outgoing:
            self.send_signal(conn, o["destination"], Signal(o["message_id"], attempts[o["message_id"]], o["body"]))
        return len(outgoing)

    @staticmethod
    def create_inbox_record(conn: Session, destination: str, attempt_id: str, message_id: str) -> None:
        conn.execute(ENGINE_SQL["eo_inbox_create"], {"endpoint": destination, "attempt_id": attempt_id, "message_id": message_id})

    def send_signal(self, conn: Session, destination: str, signal: Signal) -> None:
        """Claim-check: a large body goes to the payload store, the signal carries its id."""
        if signal.body is not None and len(signal.body.encode()) > PAYLOAD_INLINE_MAX:
            # Stable across re-dispatches of the same message (it is put again, not twice), and
            # one per destination: each receiver deletes its own when done.
            payload = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{destination}/{signal.message_id}"))
            conn.execute(ENGINE_SQL["eo_payload_put"], {"id": payload, "body": signal.body})
            signal = Signal(signal.message_id, signal.attempt_id, None, payload)
        queue = self._queues.get(destination)
        if queue is None:
            queue = self._queues[destination] = signal_queue(conn, destination)
        queue.enqueue(conn, signal.to_json())

    # -- receiving --------------------------------------------------------------------------

    def handle(self, conn: Session, signal: Signal) -> str:
        """Process one delivered signal; returns `processed`, `resumed` (already processed,
        finished the clean-up) or `duplicate`."""
        if self.variant == "naive":
            return self._handle_naive(conn, signal)
        key = {"endpoint": self.name, "message_id": signal.message_id}
        self.hook("outbox")
        record = self.outbox_record(conn, signal.message_id)
        if record is None:
            conn.execute(ENGINE_SQL["eo_outbox_create"], {**key, "claim_id": str(uuid.uuid4())})
            record = self.outbox_record(conn, signal.message_id)
            if record is None:  # created and cleaned up by another copy in between
                raise Duplicate(signal.message_id)
        claim_id = str(record["claim_id"])
        outcome = "resumed"
        if record["state"] == "claimed":
            self.hook("claim")
            claimed = conn.execute(ENGINE_SQL["eo_inbox_claim"], {
                **key, "attempt_id": signal.attempt_id, "claim_id": claim_id,
            }).fetchone()
            if not claimed:
                conn.execute(ENGINE_SQL["eo_outbox_discard"], {**key, "claim_id": claim_id})
                raise Duplicate(signal.message_id)
            self.hook("process")
            with conn.transaction():
                # The row lock taken here serialises copies that share this record.
                won = conn.execute(ENGINE_SQL["eo_outbox_processed"], {**key, "claim_id": claim_id}).fetchone()
                if won:
                    outgoing = list(self.handler(conn, signal.message_id, self._body(conn, signal)))
                    _check_outgoing(outgoing)
                    if outgoing:
                        conn.execute(ENGINE_SQL["eo_outbox_outgoing"], {**key, "outgoing": json.dumps([o.as_dict() for o in outgoing])})
                    outcome = "processed"
            # Not won: another copy processed it under the same record; finish the clean-up.
        self.dispatch(conn, signal.message_id)
        self.hook("inbox.delete")
        conn.execute(ENGINE_SQL["eo_inbox_delete"], {"endpoint": self.name, "attempt_id": signal.attempt_id, "claim_id": claim_id})
        self.hook("outbox.delete")
        self.delete_outbox_record(conn, signal.message_id)
        if signal.payload is not None:  # nobody needs it any more: a copy now finds no record
            conn.execute(ENGINE_SQL["eo_payload_delete"], {"id": signal.payload})
        return outcome

    def _handle_naive(self, conn: Session, signal: Signal) -> str:
        self.hook("claim")
        exists = conn.execute(ENGINE_SQL["eo_inbox_exists"], {"endpoint": self.name, "attempt_id": signal.attempt_id}).fetchone()
        if not exists:
            raise Duplicate(signal.message_id)
        self.hook("process")
        body = self._body(conn, signal)
        with conn.transaction():
            self.handler(conn, signal.message_id, body)
        self.hook("inbox.delete")
        conn.execute(ENGINE_SQL["eo_inbox_delete"], {"endpoint": self.name, "attempt_id": signal.attempt_id, "claim_id": None})
        if signal.payload is not None:
            conn.execute(ENGINE_SQL["eo_payload_delete"], {"id": signal.payload})
        return "processed"

    def receive(self, conn: Session, queue: TableQueue, message: Message) -> str:
        """Handle a claimed signal message and acknowledge it (also when it was a duplicate)."""
        try:
            outcome = self.handle(conn, Signal.from_json(message.body))
        except Duplicate:
            outcome = "duplicate"
        queue.ack(conn, message)
        return outcome

    # -- helpers ----------------------------------------------------------------------------

    def outbox_record(self, conn: Session, message_id: str) -> dict | None:
        row = conn.execute(ENGINE_SQL["eo_outbox_get"], {"endpoint": self.name, "message_id": message_id}).fetchone()
        if row is None:
            return None
        # jsonb on PostgreSQL (decoded by psycopg), JSON text on SQL Server
        return {"message_id": row[0], "claim_id": row[1], "state": row[2], "outgoing": _json(row[3]), "attempts": _json(row[4])}

    def delete_outbox_record(self, conn: Session, message_id: str) -> None:
        conn.execute(ENGINE_SQL["eo_outbox_delete"], {"endpoint": self.name, "message_id": message_id})

    @staticmethod
    def _body(conn: Session, signal: Signal) -> str:
        if signal.payload is None:
            return signal.body or ""
        row = conn.execute(ENGINE_SQL["eo_payload_get"], {"id": signal.payload}).fetchone()
        if row is None:
            raise LookupError(f"payload {signal.payload} is missing")
        return row[0]


def _json(value: object) -> object:
    return json.loads(value) if isinstance(value, str) else value
