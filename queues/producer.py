"""Enqueues through prepared statements (issue 30): the queue's `enqueue` and `enqueue_batch`
prepared once per psycopg connection and run through libpq's prepared-statement call, like the
claim loop's (queues/hotpath.py). `TableQueue.enqueue` and `enqueue_batch` take this path where
`producer_for` allows it; this module knows a queue only by its table's name and statements, so
that table_queue.py can use it without the two importing one another.

On a connection whose server session a pooler does not pin (PgBouncer in transaction mode,
dbcore/pooler.py) nothing is prepared: a named statement would be another server session's next
time (`prepared statement "queuetop_enq_..." already exists`). The same statements go unnamed
there (`PQexecParams`), parsed on whichever session runs them, with the same binary parameter."""

from __future__ import annotations

import contextlib
import hashlib
import struct
import threading
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
from psycopg import errors, pq

from dbcore.lockwait import watch_of
from dbcore.pooler import link_of
from dbcore.postgres import check_result
from dbcore.sqlfiles import QueryName, number_placeholders

_PRODUCED: tuple[QueryName, ...] = ("enqueue", "enqueue_batch")


class Producer:
    """The queue's enqueue statements prepared on one psycopg connection, run through libpq's
    prepared-statement call like the claim loop's (about 45 µs of client CPU per statement
    through a cursor, measured, against 10-15 µs). A batch's bodies go as one text[] parameter
    in binary: a length and the bytes for each, where the text form needs every body quoted and
    escaped. `producer_for` keeps one per connection and queue."""

    def __init__(self, conn: psycopg.Connection[Any], queue: Any) -> None:
        self._conn = conn
        self._pg = conn.pgconn
        self._encoding = conn.info.encoding
        suffix = hashlib.blake2s(queue.table_name.encode(), digest_size=6).hexdigest()  # one queue's, not another's
        self._names: dict[str, bytes] = {}
        self._texts: dict[str, bytes] = {}
        self.prepared = link_of(conn).pinned  # else each statement goes unnamed (see above)
        for query_name in _PRODUCED:
            text, params = number_placeholders(queue.statement(query_name))
            if len(params) != 1:
                raise AssertionError(f"{query_name} takes one parameter")  # the SQL file changed: this code must too
            self._names[query_name] = f"queuetop_enq_{query_name}_{suffix}".encode()
            self._texts[query_name] = text.encode(self._encoding)
            if self.prepared:
                self._prepare(query_name)

    @contextlib.contextmanager
    def _watched(self) -> Iterator[None]:
        """A command-line session's lock watch (dbcore/lockwait.py) follows what runs here as it
        follows a cursor's statements, so a lock timeout names the holder here too."""
        watch = watch_of(self._conn)
        if watch is None:
            yield
            return
        with watch.watching(self._conn):  # through a pooler in transaction mode, in a transaction that sets it
            yield

    def _prepare(self, query_name: str) -> None:
        # Preparing an INSERT locks its table (RowExclusiveLock), so it may wait as a statement does.
        with self._watched():
            with self._conn.lock:
                result = self._pg.prepare(self._names[query_name], self._texts[query_name])
            if result.status != pq.ExecStatus.COMMAND_OK:
                raise errors.error_from_result(result, encoding=self._encoding)

    def _run(self, query_name: str, param: bytes, param_format: int, expected: pq.ExecStatus) -> pq.abc.PGresult:
        result = self._exec(query_name, param, param_format, expected)
        if result.status != expected and result.error_field(pq.DiagnosticField.SQLSTATE) == b"26000" and \
                self._pg.transaction_status == pq.TransactionStatus.IDLE:
            # DISCARD ALL or DEALLOCATE (a pooler's reset) forgot the statement: prepare it again.
            self._prepare(query_name)
            result = self._exec(query_name, param, param_format, expected)
        if result.status != expected:
            raise errors.error_from_result(result, encoding=self._encoding)
        return result

    def _exec(self, query_name: str, param: bytes, param_format: int, expected: pq.ExecStatus) -> pq.abc.PGresult:
        """The statement's result; a failure raised here, in the same watched span as the wait,
        except a forgotten statement (26000), which `_run` prepares again."""
        with self._watched():
            with self._conn.lock:  # the connection may be shared by threads: one statement at a time
                if self.prepared:
                    result = self._pg.exec_prepared(self._names[query_name], [param], param_formats=[param_format])
                else:
                    result = self._pg.exec_params(self._texts[query_name], [param], param_formats=[param_format])
            if result.status != expected and result.error_field(pq.DiagnosticField.SQLSTATE) == b"26000":
                return result
            return check_result(self._pg, result, expected, self._encoding)

    def enqueue(self, body: str) -> int:
        result = self._run("enqueue", body.encode(), 0, pq.ExecStatus.TUPLES_OK)
        value = result.get_value(0, 0)
        assert value is not None  # RETURNING id of the row just inserted
        return int(value)

    def enqueue_batch(self, bodies: Sequence[str]) -> int:
        # array_recv's format: dimensions 1, no NULLs, element type text (25), then the length
        # and lower bound (1) of the dimension, then each element's length and bytes.
        parts = [_TEXT_ARRAY_HEADER.pack(1, 0, 25, len(bodies), 1)]
        for body in bodies:
            data = body.encode()
            parts.append(_LENGTH.pack(len(data)))
            parts.append(data)
        result = self._run("enqueue_batch", b"".join(parts), 1, pq.ExecStatus.COMMAND_OK)
        return result.command_tuples or 0


_TEXT_ARRAY_HEADER = struct.Struct("!iiIii")
_LENGTH = struct.Struct("!i")
_PRODUCERS: weakref.WeakKeyDictionary[psycopg.Connection[Any], dict[str, Producer]] = weakref.WeakKeyDictionary()
_PRODUCERS_LOCK = threading.Lock()


def producer_for(conn: object, queue: Any) -> Producer | None:
    """The prepared producer for `queue` on `conn`, made on first use; None where the plain path
    must serve: another dialect, a cursor, a connection in pipeline mode, or one that psycopg
    would first have to open a transaction on (not autocommit and idle), or that is in a failed
    transaction."""
    if not isinstance(conn, psycopg.Connection):
        return None
    pg = conn.pgconn
    if pg.pipeline_status != pq.PipelineStatus.OFF:
        return None
    status = pg.transaction_status
    if not (status == pq.TransactionStatus.INTRANS or (status == pq.TransactionStatus.IDLE and conn.autocommit)):
        return None
    with _PRODUCERS_LOCK:
        mine = _PRODUCERS.setdefault(conn, {})
        producer = mine.get(queue.table_name)
        if producer is None:
            producer = mine[queue.table_name] = Producer(conn, queue)
    return producer
