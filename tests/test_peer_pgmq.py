"""PGMQ, the real library: its SQL as the PyPI client ships it, messages sent, read, archived,
deleted and popped through its own Python client; queuetop finds it with no config and every
figure matches ground truth taken in SQL by the test."""

from __future__ import annotations

from importlib import resources

import pytest
from psycopg_pool import ConnectionPool

from probes.config import Config, parse_config
from probes.details import queue_details
from probes.postgres import open_probe_connection
from probes.sampler import run_cycle

pytestmark = pytest.mark.matrix  # the server matrix runs these on every supported major

pgmq = pytest.importorskip("pgmq", reason="the pgmq client is a test dependency (pip install -e '.[test]')")


@pytest.fixture
def mq(db):
    """PGMQ installed in the test database from the client's own SQL, and its client."""
    script = resources.files("pgmq").joinpath("sql", "pgmq.sql").read_text(encoding="utf-8")
    with db.connect() as conn:
        conn.execute(script)
    # Its own pool on our DSN (the client's DSN parser does not know libpq's socket form).
    pool = ConnectionPool(db.dsn, min_size=1, max_size=2, kwargs={"autocommit": True}, open=True)
    client = pgmq.SyncPGMQueue(pool=pool, init_extension=False)
    yield client
    client.close()
    pool.close()


def ground_truth(db, queue: str) -> dict[str, int]:
    """What PGMQ's own definitions say, counted in SQL over the whole table."""
    with db.connect() as conn:
        row = conn.execute(
            f"""SELECT count(*) FILTER (WHERE vt <= now()),
                       count(*) FILTER (WHERE vt > now() AND read_ct > 0),
                       count(*) FILTER (WHERE vt > now() AND read_ct = 0),
                       (SELECT count(*) FROM pgmq.a_{queue})
                FROM pgmq.q_{queue}"""
        ).fetchone()
    ready, in_flight, delayed, dead = row
    return {"ready": ready, "in_flight": in_flight, "delayed": delayed, "dead": dead, "depth": ready + in_flight + delayed}


def rows_of(snap) -> dict[str, object]:
    return {q.name: q for q in snap.queues if q.source == "pgmq"}


def test_pgmq_queues_are_found_with_no_config_and_every_figure_is_right(db, mq):
    mq.create_queue("emails")
    mq.create_queue("orders")
    ids = [mq.send("emails", {"to": f"user{n}@example.com"}) for n in range(6)]
    mq.send("emails", {"to": "later@example.com"}, delay=300)  # delayed send
    mq.send("emails", {"to": "later2@example.com"}, delay=300)
    read = mq.read("emails", vt=120, qty=3)  # a consumer holds three: in flight
    assert len(read) == 3
    mq.archive("emails", ids[3])  # dead (archived)
    mq.archive("emails", ids[4])
    mq.delete("emails", ids[5])  # finished: gone
    for n in range(4):
        mq.send("orders", {"order": n})
    mq.pop("orders")  # taken and deleted at once

    snap = run_cycle(db.target)  # no config at all
    rows = rows_of(snap)
    assert set(rows) == {"emails", "orders"}
    for name in ("emails", "orders"):
        q, g = rows[name], ground_truth(db, name)
        assert (q.ready, q.in_flight, q.delayed, q.dead, q.depth) == (g["ready"], g["in_flight"], g["delayed"], g["dead"], g["depth"])
        assert q.kind == "table" and q.depth_is_estimate is False and q.error is None
        assert q.table == f'"pgmq"."q_{name}"'
    assert (rows["emails"].ready, rows["emails"].in_flight, rows["emails"].delayed, rows["emails"].dead) == (0, 3, 2, 2)
    assert (rows["orders"].ready, rows["orders"].depth) == (3, 3)
    assert rows["orders"].oldest_ready_age_s is not None and rows["emails"].oldest_ready_age_s is None
    # PGMQ's own monitoring call agrees where its definitions overlap ours.
    metrics = {m.queue_name: m for m in mq.metrics_all()}
    assert metrics["orders"].queue_visible_length == rows["orders"].ready
    assert metrics["emails"].queue_length == rows["emails"].depth


def test_pgmq_details_show_messages_and_the_archive(db, mq):
    mq.create_queue("jobs")
    first = mq.send("jobs", {"task": "resize", "image": 1})
    mq.send("jobs", {"task": "resize", "image": 2})
    mq.archive("jobs", first)
    with open_probe_connection(db.target) as conn:
        details = queue_details(conn, "pgmq", "jobs")
    assert [row["message"] for row in details.head] == ['{"task": "resize", "image": 2}']
    assert [row["msg_id"] for row in details.dead] == [str(first)]
    assert "archived_at" in details.dead[0]


def test_pgmq_can_be_disabled_or_looked_for_elsewhere(db, mq):
    mq.create_queue("quiet")
    assert "quiet" in rows_of(run_cycle(db.target))
    disabled = parse_config({"sources": {"disable": ["pgmq"]}})
    assert rows_of(run_cycle(db.target, disabled)) == {}
    elsewhere = parse_config({"sources": {"pgmq": {"schema": "not_here"}}})
    assert rows_of(run_cycle(db.target, elsewhere)) == {}
    assert run_cycle(db.target, Config()).probes["queues"].error is None


def test_pgmq_rates_come_from_its_queue_tables(db, mq):
    """The rates come from PGMQ's own records (its msg_id sequence, and exact counts), in the
    cycle after the messages moved: not when the table's statistics come, which a pooled session
    sends late (when idle long enough, or when it ends)."""
    from probes.postgres import PostgresProbes

    mq.create_queue("rated")
    probes = PostgresProbes()
    run_cycle(db.target, probes=probes)
    for n in range(20):
        mq.send("rated", {"n": n})
    for _ in range(5):
        mq.pop("rated")
    [q] = [q for q in run_cycle(db.target, probes=probes).queues if q.source == "pgmq" and q.name == "rated"]
    assert (q.rates_from, q.enqueued_total, q.dequeued_total) == ("records", 20, 5)
    assert q.enqueued_per_s > 0 and q.dequeued_per_s == pytest.approx(q.enqueued_per_s * 5 / 20, rel=1e-6)


def test_a_pgmq_queue_whose_messages_all_finished_is_listed(db, mq):
    # PGMQ lists its queues in pgmq.meta: one whose messages were all deleted (read and deleted,
    # or popped) is at 0; one whose messages were all archived has them as its dead, nothing waiting.
    mq.create_queue("drained")
    mq.create_queue("archived")
    for n in range(3):
        mq.send("drained", {"n": n})
        mq.send("archived", {"n": n})
    first = mq.read("drained", vt=30)  # one message
    mq.delete("drained", first.msg_id)
    mq.pop("drained")
    mq.pop("drained")
    for message in mq.read("archived", vt=30, qty=3):
        mq.archive("archived", message.msg_id)
    assert ground_truth(db, "drained") == {"ready": 0, "in_flight": 0, "delayed": 0, "dead": 0, "depth": 0}
    rows = rows_of(run_cycle(db.target))
    drained, archived = rows["drained"], rows["archived"]
    assert (drained.ready, drained.in_flight, drained.delayed, drained.dead, drained.depth, drained.error) == (0, 0, 0, 0, 0, None)
    assert (archived.depth, archived.dead, archived.error) == (0, 3, None) and ground_truth(db, "archived")["dead"] == 3
