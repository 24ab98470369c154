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
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import psycopg
from psycopg import errors, pq
from psycopg.adapt import Transformer

from dbcore.sqlfiles import PLACEHOLDER, QueryName

from .table_queue import Message, TableQueue, new_claim_token

_HOT: tuple[QueryName, ...] = ("claim_one", "claim_batch", "ack_one", "ack_batch")


def number_placeholders(statement: str) -> tuple[str, tuple[str, ...]]:
    """`%(name)s` → `$n`, the same name always getting the same number."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    return PLACEHOLDER.sub(number, statement), tuple(names)


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
        self._names: dict[str, bytes] = {}
        for query_name in _HOT:
            text, params = number_placeholders(queue.statement(query_name))
            name = f"queuetop_hot_{query_name}".encode()
            self._check(self._pg.prepare(name, text.encode(self._encoding)), pq.ExecStatus.COMMAND_OK)
            self._names[query_name] = name
            self._params[query_name] = params

    def _check(self, result: pq.abc.PGresult, expected: pq.ExecStatus) -> pq.abc.PGresult:
        if result.status == expected:
            return result
        # A lost connection: the status says so, or (an immediate server shutdown, measured) libpq
        # still says OK and the result is an error the server never sent, with no SQLSTATE. Both
        # are psycopg's OperationalError, which the worker pool reconnects on.
        if self._pg.status != pq.ConnStatus.OK or result.error_field(pq.DiagnosticField.SQLSTATE) is None:
            message = result.error_message.decode(self._encoding, "replace").strip() or self._pg.get_error_message(self._encoding)
            raise psycopg.OperationalError(message.strip())
        raise errors.error_from_result(result, encoding=self._encoding)

    def _exec(self, query_name: str, values: dict[str, bytes], expected: pq.ExecStatus) -> pq.abc.PGresult:
        params = [values[name] for name in self._params[query_name]]
        return self._check(self._pg.exec_prepared(self._names[query_name], params), expected)

    def claim(self, *, visibility_s: float, batch: int = 1) -> list[Message]:
        token = new_claim_token()
        values = {"token": b"%d" % token, "visibility_s": b"%r" % float(visibility_s), "batch": b"%d" % batch}
        if batch == 1:
            result = self._exec("claim_one", values, pq.ExecStatus.TUPLES_OK)
            if result.ntuples == 0:
                return []
            self._tx.set_pgresult(result)
            row = self._tx.load_row(0, tuple)
            return [Message(row[0], row[1], row[2], row[3], token)]
        result = self._exec("claim_batch", values, pq.ExecStatus.TUPLES_OK)
        self._tx.set_pgresult(result)
        ids, attempts, enqueued_ats, bodies = self._tx.load_row(0, tuple)
        if not ids:
            return []
        return [Message(i, a, e, b, token) for i, a, e, b in zip(ids, attempts, enqueued_ats, bodies, strict=True)]

    def ack(self, messages: Sequence[Message]) -> int:
        """Delete processed messages claimed together (one token); returns how many were still
        ours (the others' claims were lost: stale acks, rejected)."""
        if not messages:
            return 0
        claim_token = messages[0].claim_token
        if claim_token is None:
            raise ValueError("ack() takes claimed messages (claim mode)")
        token = b"%d" % claim_token
        if len(messages) == 1:
            result = self._exec("ack_one", {"id": b"%d" % messages[0].id, "token": token}, pq.ExecStatus.COMMAND_OK)
        else:
            ids = b"{%s}" % b",".join([b"%d" % m.id for m in messages])
            result = self._exec("ack_batch", {"ids": ids, "token": token}, pq.ExecStatus.COMMAND_OK)
        return result.command_tuples or 0
