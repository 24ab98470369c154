"""The claim loop's libpq fast path: same results as the cursor path, psycopg's errors, and a
listener that stops at once."""

from __future__ import annotations

import json
import time

import psycopg
import pytest

from queues.handlers import parse_handler
from queues.hotpath import HotPath, number_placeholders
from queues.table_queue import TableQueue
from queues.worker import WorkerPool, WorkOptions

from .conftest import wait_until
from .test_worker import count_sessions


def test_placeholders_are_numbered_by_first_appearance():
    text, names = number_placeholders("SELECT %(b)s, %(a)s, %(b)s::int, '%(x)s'")
    assert names == ("b", "a", "x")
    assert text == "SELECT $1, $2, $1::int, '$3'"


def test_claim_and_ack_match_the_cursor_path(db):
    with db.connect() as conn:
        queue = TableQueue.create(conn, "hot")
        queue.enqueue_batch(conn, [json.dumps({"n": n}) for n in range(1, 8)])
        hot = HotPath(conn, queue)
        [one] = hot.claim(visibility_s=30)
        assert json.loads(one.body) == {"n": 1} and one.attempts == 1 and one.claim_token
        assert one.enqueued_at.tzinfo is not None  # decoded by psycopg's loaders, not strings
        batch = hot.claim(visibility_s=30, batch=4)
        assert [json.loads(m.body)["n"] for m in batch] == [2, 3, 4, 5]
        assert len({m.claim_token for m in batch}) == 1
        assert queue.counts(conn).in_flight == 5
        assert hot.ack([one]) == 1
        assert hot.ack(batch) == 4
        assert queue.counts(conn).depth == 2
        assert hot.ack([]) == 0


def test_stale_ack_through_the_hot_path_is_rejected(db):
    with db.connect() as conn:
        queue = TableQueue.create(conn, "hot-stale")
        queue.enqueue(conn, "{}")
        hot = HotPath(conn, queue)
        [mine] = hot.claim(visibility_s=0.01)
        # Our visibility passed and someone else claimed the message.
        deadline = time.monotonic() + 10
        theirs = []
        while not theirs and time.monotonic() < deadline:
            theirs = queue.claim(conn, visibility_s=30)
        assert theirs and theirs[0].id == mine.id
        assert hot.ack([mine]) == 0
        assert queue.counts(conn).depth == 1


def test_server_errors_are_psycopg_exceptions(db):
    with db.connect() as conn:
        queue = TableQueue.create(conn, "hot-gone")
        hot = HotPath(conn, queue)
        conn.execute(psycopg.sql.SQL("DROP TABLE {}").format(psycopg.sql.Identifier("queuetop", queue.table_name)))
        with pytest.raises(psycopg.errors.UndefinedTable):
            hot.claim(visibility_s=30)
        # The connection is still usable afterwards.
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_a_lost_connection_is_an_operational_error(db):
    with db.connect() as admin, db.connect() as conn:
        queue = TableQueue.create(conn, "hot-lost")
        hot = HotPath(conn, queue)
        admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
        with pytest.raises(psycopg.OperationalError):
            hot.claim(visibility_s=30)


def test_hot_path_needs_autocommit(db):
    with db.connect() as conn:
        queue = TableQueue.create(conn, "hot-tx")
        conn.autocommit = False
        with pytest.raises(ValueError):
            HotPath(conn, queue)
        conn.rollback()


def test_stop_does_not_wait_for_the_poll_interval(db):
    with db.connect() as conn:
        TableQueue.create(conn, "hot-stop")
    pool = WorkerPool(db.target, "hot-stop", parse_handler("noop"), WorkOptions(workers=2, poll_interval_s=60))
    pool.start()
    with db.connect() as conn:  # the listener is waiting in select() on its socket
        wait_until(lambda: count_sessions(conn, "queuetop-listen:%:hot-stop", "idle") == 1, what="listener idle")
    started = time.monotonic()
    pool.stop()
    pool.join(30)
    assert not any(t.is_alive() for t in pool._threads)
    assert time.monotonic() - started < 5, "the listener should leave select() on stop, not after 60 s"
