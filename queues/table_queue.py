"""The table queue (pattern 1): a sequence-ordered table per queue, destructive select with
`FOR UPDATE SKIP LOCKED`, in two processing modes.

- claim: a one-statement transaction marks the oldest visible message with a random claim token
  and a visibility deadline; the handler runs outside any transaction; ack deletes by id AND
  token, so a consumer whose deadline passed cannot delete a message someone else now holds.
- hold-transaction: the message is deleted inside a transaction kept open while it is processed
  (the simple design, whose cost, an open transaction per in-flight message, the dashboard shows).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any, NamedTuple

from psycopg import sql

from dbcore.database import Executor, one
from dbcore.dialect import Session, dialect_of
from dbcore.errors import UsageError
from dbcore.names import check_name
from dbcore.pgversions import versioned
from dbcore.sqlfiles import PLACEHOLDER, QueryName

from . import schema
from .producer import producer_for  # enqueues through prepared statements on a psycopg connection

SCHEMA = "queuetop"


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON (PostgreSQL refuses it)")


def parse_json_body(text: str) -> str:
    """Validate a JSON body as PostgreSQL's json type will and return it unchanged (bodies are
    stored exactly as given). Python's json module accepts NaN and Infinity, which are not JSON;
    a body from the command line may hold bytes that are not UTF-8 (kept as surrogates); and
    PostgreSQL text cannot hold a NUL character."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError("malformed JSON body: not valid UTF-8") from None
    if "\x00" in text:
        raise UsageError("malformed JSON body: a NUL character (PostgreSQL text cannot hold one)")
    try:
        json.loads(text, parse_constant=_no_constant)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"malformed JSON body: {exc}") from None
    return text


def new_claim_token() -> int:
    """A random positive bigint: the claim that ack and retry must present. It tells one claim
    from another, it guards nothing (whoever can read the table reads the tokens), so it comes
    from `random`, reseeded in a forked child, not from the system's generator: a system call
    per claim (1.26 -> 0.21 µs, measured)."""
    return random.getrandbits(63) or 1


class Message(NamedTuple):
    """A message handed to a handler. A named tuple, not a dataclass: batches of thousands are
    built per second on the hot path, and tuples are several times cheaper to make."""

    id: int
    attempts: int  # including the current one
    enqueued_at: datetime
    body: str
    claim_token: int | None = None  # None in hold-transaction mode


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueCounts:
    depth: int
    ready: int
    in_flight: int
    dead: int


class TableQueue:
    """One queue: its name, its table, and the engine's SQL bound to that table."""

    def __init__(self, name: str, table_name: str | None = None) -> None:
        self.name = check_name("queue", name)
        self.table_name = table_name or f"q_{name}"

    # -- lifecycle -----------------------------------------------------------------------

    @classmethod
    def create(cls, conn: Session, name: str) -> TableQueue:
        """Create the queue's table and register it (idempotent, safe concurrently)."""
        queue = cls(name)
        existing = conn.execute(schema.ENGINE_SQL["lookup_queue"], {"name": name}).fetchone()
        if existing:
            return cls(name, existing[0])
        with conn.transaction():
            schema.lock_init(conn)
            conn.execute(queue.statement_for(conn, "create_queue_table"))
            if dialect_of(conn).capabilities.notify:  # the trigger only feeds LISTEN/NOTIFY
                conn.execute(queue.trigger_statement(conn))
            conn.execute(schema.ENGINE_SQL["register_queue"], {"name": name, "table_name": queue.table_name})
        return queue

    def drop(self, conn: Session) -> None:
        """Remove the queue: its table and its registration (scenarios clean up with this)."""
        with conn.transaction():
            conn.execute(self.statement_for(conn, "drop_queue_table"))
            conn.execute(schema.ENGINE_SQL["unregister_queue"], {"name": self.name})

    def purge_dead_letters(self, conn: Executor) -> int:
        """Forget the queue's dead letters (benchmarks start clean with this); returns how many."""
        return conn.execute(schema.ENGINE_SQL["purge_dead_letters"], {"queue": self.name}).rowcount

    def retry_dead_letters(self, conn: Executor) -> int:
        """Put the queue's dead letters back as new messages (their attempts start again);
        returns how many. One statement: each moves once or not at all."""
        return conn.execute(self.statement_for(conn, "retry_dead_letters"), {"queue": self.name}).rowcount

    @classmethod
    def open(cls, conn: Session, name: str) -> TableQueue:
        """An existing queue; unknown names are a usage error (exit 2)."""
        check_name("queue", name)
        row = conn.execute(schema.ENGINE_SQL["lookup_queue"], {"name": name}).fetchone()
        if row is None:
            raise UsageError(f"unknown queue {name!r} (enqueue to it once to create it)")
        return cls(name, row[0])

    @staticmethod
    def list_names(conn: Session) -> list[str]:
        return [row[0] for row in conn.execute(schema.ENGINE_SQL["list_queues"])]

    # -- SQL bound to this queue's table -------------------------------------------------

    @cached_property
    def _identifiers(self) -> dict[str, sql.Composable]:
        return {
            "table": sql.Identifier(SCHEMA, self.table_name),
            "channel_payload": sql.Literal(self.name),
        }

    @cached_property
    def qualified_name(self) -> str:
        """The table as SQL text, quoted: for to_regclass() lookups, passed as a value."""
        return sql.Identifier(SCHEMA, self.table_name).as_string(None)

    def _sql(self, query_name: QueryName) -> sql.Composed:
        return sql.SQL(schema.ENGINE_SQL[query_name]).format(**self._identifiers)

    def trigger_statement(self, conn: Any) -> sql.Composed:
        """The LISTEN/NOTIFY trigger's DDL as this server's major writes it (dbcore/pgversions.py);
        only a dialect with notify (PostgreSQL: a psycopg connection) has the trigger."""
        text = versioned(schema.ENGINE_SQL["create_queue_trigger"], conn.info.server_version)
        return sql.SQL(text).format(**self._identifiers)

    def statement(self, query_name: QueryName) -> str:
        """The exact text sent for `query_name` (cached: the hot path formats nothing)."""
        cache = self.__dict__.setdefault("_statements", {})
        text = cache.get(query_name)
        if text is None:
            text = cache[query_name] = self._sql(query_name).as_string(None)
        return text

    def statement_for(self, conn: Any, query_name: QueryName) -> Any:
        """`query_name` bound to this queue's table, in the dialect `conn` speaks: psycopg's text
        with binary parameters (`_bound`, as the benchmarks measured it), or another dialect's
        own text of the query with the table's name quoted its way (cached as well)."""
        dialect = dialect_of(conn)
        if dialect.capabilities.binary_params:
            return self._bound(query_name)
        cache = self.__dict__.setdefault("_dialect_statements", {})
        key = (dialect.name, query_name)
        text = cache.get(key)
        if text is None:
            text = cache[key] = dialect.format(schema.ENGINE_SQL[query_name], table=(SCHEMA, self.table_name))
        return text

    def _bound(self, query_name: QueryName) -> str:
        """`statement()` with parameters sent in binary (`%(x)b`). The server receives the same
        statement text; only the wire format of the values changes, which spares psycopg's
        per-element text quoting of arrays on the hot path."""
        cache = self.__dict__.setdefault("_bound_statements", {})
        text = cache.get(query_name)
        if text is None:
            text = cache[query_name] = PLACEHOLDER.sub(r"%(\1)b", self.statement(query_name))
        return text

    # -- producing ------------------------------------------------------------------------

    def enqueue(self, conn: Executor, body: str) -> int:
        producer = producer_for(conn, self)
        if producer is not None:
            return producer.enqueue(body)
        return one(conn.execute(self.statement_for(conn, "enqueue"), {"body": body}))[0]

    def enqueue_batch(self, conn: Executor, bodies: Sequence[str]) -> int:
        producer = producer_for(conn, self)
        if producer is not None:
            return producer.enqueue_batch(bodies)
        cur = conn.execute(self.statement_for(conn, "enqueue_batch"), {"bodies": list(bodies)})
        return cur.rowcount

    # -- claim mode -----------------------------------------------------------------------

    def claim(self, conn: Executor, *, visibility_s: float, batch: int = 1) -> list[Message]:
        token = new_claim_token()
        params = {"token": token, "visibility_s": float(visibility_s), "batch": batch}
        if batch == 1:
            row = conn.execute(self.statement_for(conn, "claim_one"), params).fetchone()
            if row is None:
                return []
            return [Message(id=row[0], attempts=row[1], enqueued_at=row[2], body=row[3], claim_token=token)]
        ids, attempts, enqueued_ats, bodies = one(conn.execute(self.statement_for(conn, "claim_batch"), params))
        if not ids:
            return []
        if not dialect_of(conn).capabilities.arrays:  # one row of JSON arrays, in the same order
            ids, attempts, bodies = json.loads(ids), json.loads(attempts), json.loads(bodies)
            enqueued_ats = [datetime.fromisoformat(at) for at in json.loads(enqueued_ats)]
        return [Message(i, a, e, b, token) for i, a, e, b in zip(ids, attempts, enqueued_ats, bodies, strict=True)]

    def ack(self, conn: Executor, message: Message) -> bool:
        """Delete a processed message; False when our claim was lost (stale ack, rejected)."""
        cur = conn.execute(self.statement_for(conn, "ack_one"), {"id": message.id, "token": message.claim_token})
        return cur.rowcount == 1

    def ack_batch(self, conn: Executor, messages: Sequence[Message]) -> int:
        """Ack messages claimed together (one token); returns how many were still ours."""
        if not messages:
            return 0
        if len(messages) == 1:
            return int(self.ack(conn, messages[0]))
        token = messages[0].claim_token
        cur = conn.execute(self.statement_for(conn, "ack_batch"), {"ids": [m.id for m in messages], "token": token})
        return cur.rowcount

    def release_for_retry(self, conn: Executor, message: Message, error: str, *, delay_s: float = 0.0) -> bool:
        cur = conn.execute(
            self.statement_for(conn, "release_for_retry"),
            {"id": message.id, "token": message.claim_token, "error": error[:2000], "delay_s": float(delay_s)},
        )
        return cur.rowcount == 1

    def dead_letter_claimed(self, conn: Executor, message: Message, error: str) -> bool:
        cur = conn.execute(
            self.statement_for(conn, "dead_letter_claimed"),
            {"id": message.id, "token": message.claim_token, "queue": self.name, "error": error[:2000]},
        )
        return cur.rowcount == 1

    # -- hold-transaction mode (call inside conn.transaction()) ----------------------------

    def take_held(self, conn: Executor, *, batch: int = 1) -> list[Message]:
        rows = conn.execute(self.statement_for(conn, "take_held"), {"batch": batch}).fetchall()
        return [Message(id=r[0], attempts=r[1], enqueued_at=r[2], body=r[3]) for r in sorted(rows)]

    def requeue_held(self, conn: Executor, message: Message, error: str, *, delay_s: float = 0.0) -> None:
        conn.execute(
            self.statement_for(conn, "requeue_held"),
            {
                "id": message.id,
                "enqueued_at": message.enqueued_at,
                "attempts": message.attempts,
                "delay_s": float(delay_s),
                "error": error[:2000],
                "body": message.body,
            },
        )

    def dead_letter_held(self, conn: Executor, message: Message, error: str) -> None:
        conn.execute(
            self.statement_for(conn, "dead_letter_held"),
            {
                "queue": self.name,
                "id": message.id,
                "enqueued_at": message.enqueued_at,
                "attempts": message.attempts,
                "body": message.body,
                "error": error[:2000],
            },
        )

    # -- inspection -----------------------------------------------------------------------

    def has_messages(self, conn: Executor) -> bool:
        return bool(one(conn.execute(self.statement_for(conn, "queue_has_messages")))[0])

    def counts(self, conn: Executor) -> QueueCounts:
        row = one(conn.execute(self.statement_for(conn, "queue_counts"), {"queue": self.name}))
        return QueueCounts(depth=row[0], ready=row[1], in_flight=row[2], dead=row[3])


def default_bodies(count: int, start: int = 1) -> Iterable[str]:
    return (json.dumps({"n": n}) for n in range(start, start + count))
