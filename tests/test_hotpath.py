"""The engine's prepared paths (issue 30): enqueue through prepared statements with a batch's
bodies as one binary text[] parameter, and the claim loop's ack sent with the next claim in one
round trip. Each keeps the engine's guarantees: bodies stored exactly, a transaction's enqueues
undone with it, an ack and a claim that are two transactions, stale acks refused."""

from __future__ import annotations

import json

import psycopg
import pytest

from bench.probes import RoundTrips
from queues.hotpath import HotPath
from queues.producer import Producer, producer_for
from queues.table_queue import TableQueue

pytestmark = pytest.mark.matrix  # the server matrix runs these on every supported major

HOSTILE_BODIES = [
    '{"quote": "say \\"hi\\""}',
    '{"backslash": "C:\\\\temp\\\\x"}',
    '{"braces": "{a,b}", "comma": "1,2", "null": "NULL"}',
    '{"unicode": "ünïcödé 東京 🚀"}',
    '"a string"',
    "[1, 2.5, null, true]",
    '{"spaces":   1 ,  "kept" : "as given"}',
    '{"newline": "a\\nb", "tab": "\\t"}',
    "{}",
]


def stored_bodies(conn, queue):
    table = queue.qualified_name
    return [r[0] for r in conn.execute(f"SELECT body::text FROM {table} ORDER BY id")]


def test_a_batch_of_hostile_bodies_is_stored_exactly_in_order_in_one_round_trip(db):
    with db.connect(autocommit=True) as conn:
        queue = TableQueue.create(conn, "hot")
        assert isinstance(producer_for(conn, queue), Producer)  # the prepared path serves this connection
        with RoundTrips(conn) as trips:
            assert queue.enqueue_batch(conn, HOSTILE_BODIES) == len(HOSTILE_BODIES)
        assert trips.count == 1
        assert stored_bodies(conn, queue) == HOSTILE_BODIES
        single = queue.enqueue(conn, HOSTILE_BODIES[0])
        assert single == conn.execute(f"SELECT max(id) FROM {queue.qualified_name}").fetchone()[0]
        assert queue.enqueue_batch(conn, []) == 0


def test_a_malformed_body_fails_the_statement_and_writes_nothing(db):
    with db.connect(autocommit=True) as conn:
        queue = TableQueue.create(conn, "hot")
        with pytest.raises(psycopg.errors.InvalidTextRepresentation):
            queue.enqueue_batch(conn, ['{"ok": 1}', "{not json"])
        assert stored_bodies(conn, queue) == []
        queue.enqueue(conn, '{"after": "the error"}')  # the connection goes on
        assert stored_bodies(conn, queue) == ['{"after": "the error"}']


def test_enqueues_in_a_transaction_are_undone_with_it(db):
    with db.connect(autocommit=True) as conn:
        queue = TableQueue.create(conn, "hot")
        with pytest.raises(RuntimeError), conn.transaction():
            queue.enqueue_batch(conn, ['{"n": 1}', '{"n": 2}'])
            queue.enqueue(conn, '{"n": 3}')
            assert len(stored_bodies(conn, queue)) == 3  # seen inside the transaction: the same one
            raise RuntimeError("the business change failed")
        assert stored_bodies(conn, queue) == []
        with conn.transaction():
            queue.enqueue(conn, '{"n": 4}')
        assert stored_bodies(conn, queue) == ['{"n": 4}']


def test_a_connection_psycopg_must_open_a_transaction_on_takes_the_plain_path(db):
    with db.connect(autocommit=False) as conn:
        queue = TableQueue.create(conn, "hot")
        conn.commit()
        assert producer_for(conn, queue) is None  # idle, not autocommit: psycopg's BEGIN comes first
        queue.enqueue(conn, '{"n": 1}')
        conn.rollback()
        assert stored_bodies(conn, queue) == []


def test_a_statement_forgotten_by_discard_all_is_prepared_again(db):
    with db.connect(autocommit=True) as conn:
        queue = TableQueue.create(conn, "hot")
        queue.enqueue(conn, '{"n": 1}')
        conn.execute("DISCARD ALL")  # what a pooler's reset does
        queue.enqueue(conn, '{"n": 2}')
        queue.enqueue_batch(conn, ['{"n": 3}', '{"n": 4}'])
        assert [json.loads(b)["n"] for b in stored_bodies(conn, queue)] == [1, 2, 3, 4]


def test_ack_and_claim_is_one_round_trip_and_two_transactions(db):
    with db.connect(autocommit=True) as conn:
        queue = TableQueue.create(conn, "hot")
        queue.enqueue_batch(conn, [json.dumps({"n": n}) for n in range(1, 6)])
        hot = HotPath(conn, queue)
        first = hot.claim(visibility_s=30, batch=2)
        assert [json.loads(m.body)["n"] for m in first] == [1, 2]
        with RoundTrips(conn) as trips:
            acked, following = hot.ack_and_claim(first, visibility_s=30, batch=2)
        assert trips.count == 1
        assert acked == 2 and [json.loads(m.body)["n"] for m in following] == [3, 4]
        rows = dict(conn.execute(f"SELECT id, claim_token FROM {queue.qualified_name}").fetchall())
        assert set(rows) == {m.id for m in following} | {5}
        assert {rows[m.id] for m in following} == {following[0].claim_token} and rows[max(rows)] is None
        # Two transactions: a claim that fails (a visibility of 1e300 s overflows the interval on
        # every major; 17 takes an infinite one) does not undo the ack sent before it.
        with pytest.raises(psycopg.errors.DatetimeFieldOverflow):
            hot.ack_and_claim(following, visibility_s=1e300, batch=2)
        assert [json.loads(b)["n"] for b in stored_bodies(conn, queue)] == [5]
        # A stale ack (another claim took the message over) is refused, and counted as such.
        (last,) = hot.claim(visibility_s=30)
        conn.execute(f"UPDATE {queue.qualified_name} SET claim_token = 7 WHERE id = %s", (last.id,))
        acked, nothing = hot.ack_and_claim([last], visibility_s=30)
        assert acked == 0 and nothing == [] and [json.loads(b)["n"] for b in stored_bodies(conn, queue)] == [5]
