"""The claim loop's four statements, sent through libpq's blocking prepared-statement call.

psycopg's `cursor.execute()` drives libpq's non-blocking protocol from Python generators and a
poll loop: about 45 µs of client CPU per statement, measured, against 10-15 µs for
`PQexecPrepared`. On the 2-core machines where queues usually live, the client shares the cores
with the server, and those 60-90 µs per message were the whole gap to pgbench running the same
SQL. So the hot path (claim one, claim a batch, ack one, ack a batch) prepares the engine's
statements once per connection and runs them with `PGconn.exec_prepared`, which releases the GIL
while it waits; rows are decoded by psycopg's own loaders (`Transformer`), errors raised as
psycopg's exception classes. Everything else (retries, dead letters, inspection) keeps using
ordinary cursors: it is not hot.

The statement text is the engine's, with `%(name)s` placeholders numbered `$1..$n` in order of
first appearance, which is also what `pgbench -M prepared` does with the bench's scripts.

Three things go further than pgbench's one-statement-at-a-time loop can (issue 30):

- `ack_and_claim` sends the ack of the messages just processed and the claim of the next ones
  together, in libpq's pipeline mode, each behind its own Sync: two transactions, committed one
  after the other exactly as before, in one round trip instead of two.
- `queues/producer.py` prepares the enqueue statements the same way.
- Claimed rows come in binary, and a batch acked whole sends its ids back as the server sent
  them (a binary bigint[]): the client does no work per message for the ack.

Through a connection pooler that does not pin a server session to the connection (PgBouncer in
transaction mode, dbcore/pooler.py), a statement prepared on one server session is unknown on the
next, or already there under the name when another client prepared it: the same statements go
unnamed instead (`PQexecParams`, `PQsendQueryParams`: Parse, Bind and Execute behind one Sync, the
extended protocol pgbench's `-M extended` speaks), each parsed on whichever session runs it. The
choice is made once per connection, as the statements are bound: the direct path is as before.
"""

from __future__ import annotations

import select
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import repeat

import psycopg
from psycopg import pq
from psycopg.adapt import Transformer

from dbcore.pooler import link_of
from dbcore.postgres import check_result
from dbcore.sqlfiles import QueryName, number_placeholders

from .table_queue import Message, TableQueue, new_claim_token

_HOT: tuple[QueryName, ...] = ("claim_one", "claim_batch", "ack_one", "ack_batch")
# Claimed rows come in binary: the server sends and psycopg reads each value without text
# formatting and parsing (a batch of 100: 0.7 -> 0.5 µs a message to read on the client, the
# timestamps most of it; the server's array_out and timestamptz_out are spared too). pgbench, which
# only keeps what it reads, asks for text.
BINARY = 1
_new_message = partial(tuple.__new__, Message)


class HotPath:
    """The claim loop's statements prepared on one connection (autocommit, owned by one thread)."""

    def __init__(self, conn: psycopg.Connection, queue: TableQueue) -> None:
        if not conn.autocommit:
            raise ValueError("the hot path needs an autocommit connection")
        self._conn = conn
        self._pg = conn.pgconn
        self._encoding = conn.info.encoding
        self._tx = Transformer(conn)
        self._params: dict[str, tuple[str, ...]] = {}
        self._claim_params: dict[tuple[float, int], tuple[str, list[bytes], int]] = {}
        # What each statement is sent as: its prepared name, or (a session a pooler does not pin)
        # its text, run unnamed; `_exec` and `_send_one` are libpq's call for either.
        self._names: dict[str, bytes] = {}
        self._exec: Callable[..., pq.abc.PGresult]
        self._send_one: Callable[..., None]
        self.prepared = link_of(conn).pinned
        if self.prepared:
            self._exec, self._send_one = self._pg.exec_prepared, self._pg.send_query_prepared
        else:
            self._exec, self._send_one = self._pg.exec_params, self._pg.send_query_params
        for query_name in _HOT:
            text, params = number_placeholders(queue.statement(query_name))
            if self.prepared:
                name = f"queuetop_hot_{query_name}".encode()
                self._check(self._pg.prepare(name, text.encode(self._encoding)), pq.ExecStatus.COMMAND_OK)
                self._names[query_name] = name
            else:
                self._names[query_name] = text.encode(self._encoding)
            self._params[query_name] = params
        # The last batch claimed, and its ids as the server sent them (a binary bigint[]): acked
        # whole, as a batch usually is, it sends them back as they came, with no work per message.
        # Two: with --prefetch, the next batch is claimed before this one is acked.
        self._last_batches: deque[tuple[list[Message], bytes]] = deque(maxlen=2)

    def _check(self, result: pq.abc.PGresult, expected: pq.ExecStatus) -> pq.abc.PGresult:
        return check_result(self._pg, result, expected, self._encoding)

    def claim(self, *, visibility_s: float, batch: int = 1) -> list[Message]:
        query_name, params, token = self._claim_args(visibility_s, batch)
        result = self._check(self._exec(self._names[query_name], params, result_format=BINARY),
                             pq.ExecStatus.TUPLES_OK)
        return self._claimed(result, batch, token)

    def _claim_args(self, visibility_s: float, batch: int) -> tuple[str, list[bytes], int]:
        # A worker claims with the same visibility and batch every time: its parameters but the
        # token are made once (3.3 -> 0.9 µs a claim, measured).
        made = self._claim_params.get((visibility_s, batch))
        if made is None:
            query_name = "claim_one" if batch == 1 else "claim_batch"
            values = {"token": b"", "visibility_s": b"%r" % float(visibility_s), "batch": b"%d" % batch}
            names = self._params[query_name]
            made = self._claim_params[(visibility_s, batch)] = (query_name, [values[name] for name in names], names.index("token"))
        query_name, template, token_at = made
        token = new_claim_token()
        params = template.copy()
        params[token_at] = b"%d" % token
        return query_name, params, token

    def _claimed(self, result: pq.abc.PGresult, batch: int, token: int) -> list[Message]:
        if batch == 1:
            if result.ntuples == 0:
                return []
            self._tx.set_pgresult(result)
            row = self._tx.load_row(0, tuple)
            return [Message(row[0], row[1], row[2], row[3], token)]
        self._tx.set_pgresult(result)
        ids, attempts, enqueued_ats, bodies = self._tx.load_row(0, tuple)
        if not ids:
            return []
        if not len(ids) == len(attempts) == len(enqueued_ats) == len(bodies):
            raise psycopg.DataError("claim_batch's arrays differ in length")
        # Each Message made by tuple.__new__ over zip (no Python call per message: 0.23 against
        # 0.52 µs a message for Message(...) in a comprehension, measured).
        messages = list(map(_new_message, zip(ids, attempts, enqueued_ats, bodies, repeat(token))))
        self._last_batches.append((messages, result.get_value(0, 0) or b""))
        return messages

    def _ack_args(self, messages: Sequence[Message]) -> tuple[str, list[bytes], list[int] | None]:
        """(statement, parameters, their formats: None for all text)."""
        claim_token = messages[0].claim_token
        if claim_token is None:
            raise ValueError("ack() takes claimed messages (claim mode)")
        token = b"%d" % claim_token
        if len(messages) == 1:
            values = {"id": b"%d" % messages[0].id, "token": token}
            return "ack_one", [values[name] for name in self._params["ack_one"]], None
        names = self._params["ack_batch"]
        ids = next((ids for claimed, ids in self._last_batches if claimed is messages), None)
        if ids is not None:  # the whole batch: its ids as they came
            values = {"ids": ids, "token": token}
            return "ack_batch", [values[name] for name in names], [BINARY if name == "ids" else 0 for name in names]
        values = {"ids": b"{%s}" % b",".join([b"%d" % m.id for m in messages]), "token": token}
        return "ack_batch", [values[name] for name in names], None

    def ack(self, messages: Sequence[Message]) -> int:
        """Delete processed messages claimed together (one token); returns how many were still
        ours (the others' claims were lost: stale acks, rejected)."""
        if not messages:
            return 0
        query_name, params, formats = self._ack_args(messages)
        result = self._exec(self._names[query_name], params, param_formats=formats)
        return self._check(result, pq.ExecStatus.COMMAND_OK).command_tuples or 0

    def ack_and_claim(self, messages: Sequence[Message], *, visibility_s: float, batch: int = 1) -> tuple[int, list[Message]]:
        """`ack(messages)`, then `claim(...)`, in one round trip: both statements are sent at
        once in pipeline mode, each followed by a Sync, so each is its own transaction, in that
        order, as when they are sent one by one. Returns (how many acks held, the new claim)."""
        if not messages:
            return 0, self.claim(visibility_s=visibility_s, batch=batch)
        return self.receive(self.send(messages, visibility_s=visibility_s, batch=batch))

    def send(self, messages: Sequence[Message], *, visibility_s: float, batch: int = 1) -> Sent:
        """Send the ack of `messages` (when there are any) and the next claim, and return without
        waiting for them: the server works on them while the caller handles what it holds.
        Nothing else may run on the connection until `receive(sent)`."""
        statements = [self._ack_args(messages)] if messages else []
        claim_name, claim_params, token = self._claim_args(visibility_s, batch)
        statements.append((claim_name, claim_params, None))
        self._send(statements)
        return Sent(token, batch, bool(messages))

    def receive(self, sent: Sent) -> tuple[int, list[Message]]:
        """What `send` sent: (how many acks held, the new claim)."""
        results = self._receive(2 if sent.acks else 1)
        acked = (self._check(results[0], pq.ExecStatus.COMMAND_OK).command_tuples or 0) if sent.acks else 0
        return acked, self._claimed(self._check(results[-1], pq.ExecStatus.TUPLES_OK), sent.batch, sent.token)

    def _send(self, statements: Sequence[tuple[str, list[bytes], list[int] | None]]) -> None:
        """Send the `statements` in pipeline mode, each behind a Sync (through a pooler in
        transaction mode too: PgBouncer keeps the server session linked while Syncs it has
        forwarded still await their ReadyForQuery)."""
        pg = self._pg
        pg.enter_pipeline_mode()
        try:
            for query_name, params, formats in statements:
                self._send_one(self._names[query_name], params, param_formats=formats, result_format=BINARY)
                pg.pipeline_sync()
            fd = pg.socket
            while pg.flush():  # the connection is non-blocking: 1 while something is left to send
                select.select([], [fd], [])
        except BaseException as exc:
            self._leave_pipeline()
            if isinstance(exc, psycopg.Error) or not isinstance(exc, Exception):
                raise
            raise self._lost(exc) from exc

    def _receive(self, statements: int) -> list[pq.abc.PGresult]:
        """Wait (in select(), which lets other threads run) for the results of the `statements`
        sent; one result per statement."""
        pg = self._pg
        try:
            fd = pg.socket
            results: list[pq.abc.PGresult] = []
            syncs = 0
            while syncs < statements:
                if pg.is_busy():
                    select.select([fd], [], [])
                    pg.consume_input()
                    continue
                result = pg.get_result()
                if result is None:  # the end of one statement's results
                    continue
                if result.status == pq.ExecStatus.PIPELINE_SYNC:
                    syncs += 1
                else:
                    results.append(result)
        except psycopg.Error:
            raise
        except Exception as exc:
            raise self._lost(exc) from exc
        finally:
            self._leave_pipeline()
        return results

    def _lost(self, exc: Exception) -> psycopg.OperationalError:
        """libpq lost the connection in between: as exec_prepared would say it."""
        return psycopg.OperationalError(str(exc) or self._pg.get_error_message(self._encoding))

    def _leave_pipeline(self) -> None:
        if self._pg.pipeline_status != pq.PipelineStatus.OFF:
            try:
                self._pg.exit_pipeline_mode()  # fails only where results are left: the connection is lost
            except psycopg.Error:
                pass


@dataclass(frozen=True, slots=True)
class Sent:
    """A claim (and maybe an ack) on its way: what `HotPath.receive` needs to read it."""

    token: int
    batch: int
    acks: bool

