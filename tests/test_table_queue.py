"""Table queue semantics: claim/ack, FIFO, stale acks, retries and dead letters,
hold-transaction mode, batch claims. The tests that take `engine_db` are the conformance suite's:
they run on PostgreSQL, and on SQL Server when QUEUETOP_MSSQL_DSN is set; the rest check
PostgreSQL's own catalog and run there only."""

from __future__ import annotations

import json

import psycopg
import pytest

from queues.table_queue import TableQueue

from .conftest import wait_until

pytestmark = pytest.mark.matrix  # the server matrix runs these on every supported major


def make_queue(conn, name="jobs", count=0):
    queue = TableQueue.create(conn, name)
    if count:
        queue.enqueue_batch(conn, [json.dumps({"n": n}) for n in range(1, count + 1)])
    return queue


def queued_ids(conn, queue, count):
    """The ids of `count` new messages, in order. SQL Server's queue tables share one id sequence,
    so ids are only known to grow, not to start at 1."""
    return [queue.enqueue(conn, json.dumps({"n": n})) for n in range(1, count + 1)]


# The rows the tests read to check what the engine wrote, in each dialect's SQL.
DEAD_LETTER_ROW = {
    "postgresql": "SELECT queue, message_id, attempts, last_error, body::text FROM queuetop.dead_letters",
    "mssql": "SELECT [queue], message_id, attempts, last_error, body FROM queuetop.dead_letters",
}
HEAD_ROW = {
    "postgresql": "SELECT id, attempts, last_error FROM queuetop.q_jobs ORDER BY id LIMIT 1",
    "mssql": "SELECT TOP (1) id, attempts, last_error FROM queuetop.q_jobs ORDER BY id",
}


def test_enqueue_claim_ack_roundtrip_keeps_body_exact(engine_db):
    with engine_db.connect() as conn:
        queue = make_queue(conn)
        body = '{"b":  2, "a": [1, 2]}'
        message_id = queue.enqueue(conn, body)
        (message,) = queue.claim(conn, visibility_s=30)
        assert (message.id, message.body, message.attempts) == (message_id, body, 1)
        assert queue.counts(conn).in_flight == 1
        assert queue.ack(conn, message) is True
        assert queue.counts(conn).depth == 0


def test_single_consumer_sees_fifo_order(engine_db):
    with engine_db.connect() as conn:
        queue = make_queue(conn, count=50)
        seen = []
        while batch := queue.claim(conn, visibility_s=30, batch=7):
            seen.extend(json.loads(m.body)["n"] for m in batch)
            assert queue.ack_batch(conn, batch) == len(batch)
        assert seen == list(range(1, 51))


def test_claimed_message_is_invisible_until_its_deadline(engine_db):
    with engine_db.connect() as a, engine_db.connect() as b:
        queue = make_queue(a, count=1)
        (first,) = queue.claim(a, visibility_s=0.5)
        assert queue.claim(b, visibility_s=30) == []  # hidden while claimed
        again = wait_until(lambda: queue.claim(b, visibility_s=30), timeout=5, what="visibility expiry")
        assert again[0].id == first.id and again[0].attempts == 2


def test_stale_ack_is_rejected_and_message_survives(engine_db):
    with engine_db.connect() as a, engine_db.connect() as b:
        queue = make_queue(a, count=1)
        (stale,) = queue.claim(a, visibility_s=0.3)
        (fresh,) = wait_until(lambda: queue.claim(b, visibility_s=30), timeout=5, what="reclaim")
        assert fresh.claim_token != stale.claim_token
        assert queue.ack(a, stale) is False  # the first consumer lost its claim
        assert queue.release_for_retry(a, stale, "late") is False
        assert queue.dead_letter_claimed(a, stale, "late") is False
        assert queue.counts(a).depth == 1  # still there for its new owner
        assert queue.ack(b, fresh) is True
        assert queue.counts(a).depth == 0


def test_batch_claim_takes_exactly_batch_rows(engine_db):
    with engine_db.connect() as conn:
        queue = make_queue(conn)
        ids = queued_ids(conn, queue, 100)
        claimed = queue.claim(conn, visibility_s=30, batch=10)
        assert [m.id for m in claimed] == ids[:10]
        assert len({m.claim_token for m in claimed}) == 1
        counts = queue.counts(conn)
        assert (counts.in_flight, counts.ready) == (10, 90)


def test_skip_locked_lets_concurrent_claimers_pass_each_other(engine_db):
    with engine_db.connect() as a, engine_db.connect() as b:
        queue = make_queue(a)
        ids = queued_ids(a, queue, 2)
        with a.transaction():
            held = queue.take_held(a)  # the first row locked by an open transaction
            (other,) = queue.claim(b, visibility_s=30)  # does not wait, takes the second
            assert (held[0].id, other.id) == (ids[0], ids[1])


def test_retry_then_dead_letter_records_last_error_and_attempts(engine_db):
    with engine_db.connect() as conn:
        queue = make_queue(conn, count=1)
        for attempt in (1, 2):
            (m,) = queue.claim(conn, visibility_s=30)
            assert m.attempts == attempt
            assert queue.release_for_retry(conn, m, f"boom {attempt}")
        (m,) = queue.claim(conn, visibility_s=30)
        assert queue.dead_letter_claimed(conn, m, "boom 3")
        row = conn.execute(DEAD_LETTER_ROW[engine_db.dialect]).fetchone()
        assert tuple(row) == ("jobs", m.id, 3, "boom 3", '{"n": 1}')
        assert queue.counts(conn).depth == 0 and queue.counts(conn).dead == 1


def test_dead_letters_are_retried_as_new_messages_or_purged_once_each(engine_db):
    """Retry (the dashboard's details, confirmed) puts each dead letter back once, body whole,
    attempts from 0; another queue's dead letters stay; purge forgets them."""
    with engine_db.connect() as conn:
        queue, other = make_queue(conn, count=3), make_queue(conn, "others", count=1)
        for q in (queue, queue, queue, other):
            (m,) = q.claim(conn, visibility_s=30)
            assert q.dead_letter_claimed(conn, m, "boom")
        assert queue.counts(conn).dead == 3 and queue.counts(conn).depth == 0
        assert queue.retry_dead_letters(conn) == 3
        counts = queue.counts(conn)
        assert (counts.dead, counts.ready) == (0, 3)
        bodies = sorted(json.loads(m.body)["n"] for m in queue.claim(conn, visibility_s=30, batch=10))
        assert bodies == [1, 2, 3]
        assert queue.retry_dead_letters(conn) == 0  # each moved once
        assert other.counts(conn).dead == 1
        assert other.purge_dead_letters(conn) == 1 and other.counts(conn).dead == 0 and other.counts(conn).depth == 0


def test_retry_delay_hides_message_until_backoff_ends(engine_db):
    with engine_db.connect() as conn:
        queue = make_queue(conn, count=1)
        (m,) = queue.claim(conn, visibility_s=30)
        queue.release_for_retry(conn, m, "later", delay_s=0.5)
        counts = queue.counts(conn)
        assert (counts.depth, counts.ready, counts.in_flight) == (1, 0, 0)
        assert queue.claim(conn, visibility_s=30) == []
        wait_until(lambda: queue.claim(conn, visibility_s=30), timeout=5, what="back-off end")


def test_hold_transaction_failure_requeues_under_same_id(engine_db):
    with engine_db.connect() as conn:
        queue = make_queue(conn)
        ids = queued_ids(conn, queue, 3)
        with conn.transaction():
            (m,) = queue.take_held(conn)
            queue.requeue_held(conn, m, "nope")
        row = conn.execute(HEAD_ROW[engine_db.dialect]).fetchone()
        assert tuple(row) == (ids[0], 1, "nope")
        # Rolled back: the message is simply back, untouched.
        with pytest.raises(ZeroDivisionError):
            with conn.transaction():
                queue.take_held(conn)
                raise ZeroDivisionError("the handler failed")
        assert queue.counts(conn).depth == 3


def test_unknown_queue_is_a_usage_error(engine_db):
    from dbcore.errors import UsageError

    with engine_db.connect() as conn, pytest.raises(UsageError, match="unknown queue"):
        TableQueue.open(conn, "missing")


@pytest.mark.parametrize("name", ['x"; drop table y; --', "", "a" * 49, "robert'); DROP TABLE students;--", "ünï", "a b"])
def test_hostile_or_invalid_names_are_rejected_before_sql(db, name):
    from dbcore.errors import UsageError

    with db.connect() as conn:
        conn.execute("CREATE TABLE y (id int)")
        with pytest.raises(UsageError, match="invalid queue name"):
            TableQueue.create(conn, name)
        assert conn.execute("SELECT to_regclass('y') IS NOT NULL").fetchone()[0]
        assert conn.execute("SELECT count(*) FROM queuetop.queues").fetchone()[0] == 0


def test_queue_names_with_punctuation_are_quoted_not_interpolated(db):
    with db.connect() as conn:
        queue = TableQueue.create(conn, "orders.v2:eu-west")
        queue.enqueue(conn, "1")
        assert TableQueue.list_names(conn) == ["orders.v2:eu-west"]
        assert conn.execute('SELECT count(*) FROM queuetop."q_orders.v2:eu-west"').fetchone()[0] == 1


def test_create_is_idempotent_and_concurrent_safe(db):
    import threading

    errors = []

    def create():
        try:
            with db.connect() as conn:
                TableQueue.create(conn, "same")
        except psycopg.Error as exc:  # pragma: no cover - the assertion below reports it
            errors.append(exc)

    threads = [threading.Thread(target=create) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with db.connect() as conn:
        assert TableQueue.list_names(conn) == ["same"]
