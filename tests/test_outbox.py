"""The transactional outbox and its relays: the recipient list, one relay at a time under a
lease, a relay paused past its lease refused by the fence, a killed leader's job finished by a
standby (real processes). The tests that take `engine_db` are the conformance suite's
(PostgreSQL, and SQL Server when QUEUETOP_MSSQL_DSN is set)."""

from __future__ import annotations

import json
import threading

import pytest

from queues import lease as leases
from queues import outbox
from queues.outbox import Relay, StaleLease
from queues.table_queue import TableQueue

from .conftest import wait_until


def envelopes(db, queue: str) -> list[dict]:
    with db.connect() as conn:
        q = TableQueue.open(conn, queue)
        return [json.loads(m.body) for m in q.claim(conn, visibility_s=60, batch=10_000)]


def backlog(db) -> int:
    with db.connect() as conn:
        return conn.execute("SELECT count(*) FROM queuetop.outbox").fetchone()[0]


def test_messages_exist_only_if_the_business_change_committed(db):
    with db.connect() as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY)")
        with conn.transaction():
            conn.execute("INSERT INTO orders VALUES (1)")
            outbox.send(conn, "ob-direct", '{"order": 1}')
        with pytest.raises(RuntimeError), conn.transaction():
            conn.execute("INSERT INTO orders VALUES (2)")
            outbox.send(conn, "ob-direct", '{"order": 2}')
            raise RuntimeError("the business change failed")
    assert backlog(db) == 1


def test_publish_goes_to_every_subscriber_and_send_to_one_queue(engine_db):
    with engine_db.connect() as conn:
        outbox.subscribe(conn, "orders.created", "ob-billing")
        outbox.subscribe(conn, "orders.created", "ob-shipping")
        outbox.publish(conn, "orders.created", '{"order": 1}')
        outbox.send(conn, "ob-direct", '{"order": 2}')
        outbox.publish(conn, "nobody.listens", '{"order": 3}')
        relay = Relay(engine_db.target, "r1", lease="ob-relay", ttl_s=30)
        relay.token = leases.acquire(conn, "ob-relay", "r1", 30)
        assert relay.relay_batch(conn) == 3
    assert backlog(engine_db) == 0
    billing, shipping, direct = (envelopes(engine_db, q) for q in ("ob-billing", "ob-shipping", "ob-direct"))
    assert [e["body"] for e in billing] == [e["body"] for e in shipping] == [{"order": 1}]
    assert [e["body"] for e in direct] == [{"order": 2}]
    assert {e["token"] for e in billing + shipping + direct} == {relay.token}


def test_two_relays_at_once_one_relays(engine_db):
    with engine_db.connect() as conn:
        for n in range(500):
            outbox.send(conn, "ob-once", json.dumps({"n": n}))
    stop = threading.Event()
    relays = [Relay(engine_db.target, f"r{i}", lease="ob-relay", ttl_s=5, batch=50) for i in range(2)]
    threads = [threading.Thread(target=r.run, args=(stop,)) for r in relays]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: backlog(engine_db) == 0, timeout=30, what="the outbox relayed")
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert sorted(r.terms for r in relays) == [0, 1]  # one leader, one standby
    assert sorted(e["body"]["n"] for e in envelopes(engine_db, "ob-once")) == list(range(500))


def test_relay_paused_past_its_lease_is_fenced_off(engine_db):
    with engine_db.connect() as conn:
        for n in range(20):
            outbox.send(conn, "ob-fenced", json.dumps({"n": n}))
    paused, resume = threading.Event(), threading.Event()

    def stall(step):
        if step == "fence":  # its batch is written, not committed: then a long GC pause
            paused.set()
            assert resume.wait(20)

    stale = Relay(engine_db.target, "stale", lease="ob-relay", ttl_s=0.5, batch=5, hook=stall)
    outcome = []

    def stale_batch():
        with engine_db.connect() as conn:
            stale.token = leases.acquire(conn, "ob-relay", "stale", 0.5)
            try:
                stale.relay_batch(conn)
                outcome.append("committed")
            except StaleLease:
                outcome.append("fenced")

    thread = threading.Thread(target=stale_batch)
    thread.start()
    assert paused.wait(10)
    # The lease expires; a new relay takes it (its token is higher) and relays what it can see.
    fresh = Relay(engine_db.target, "fresh", lease="ob-relay", ttl_s=30, batch=5)
    with engine_db.connect() as conn:
        fresh.token = wait_until(lambda: _try_acquire(conn, "fresh"), timeout=10, what="the takeover")
        assert fresh.token == stale.token + 1
        # The 5 oldest rows are locked by the stale relay's open batch: stepped over, not waited for.
        assert [fresh.relay_batch(conn) for _ in range(4)] == [5, 5, 5, 0]
    resume.set()
    thread.join(10)
    assert outcome == ["fenced"]  # its batch rolled back: nothing it wrote is kept
    with engine_db.connect() as conn:
        assert fresh.relay_batch(conn) == 5  # the rows the stale relay had taken come back
    published = envelopes(engine_db, "ob-fenced")
    assert sorted(e["body"]["n"] for e in published) == list(range(20))
    assert {e["token"] for e in published} == {fresh.token}


def _try_acquire(conn, holder):
    try:
        return leases.acquire(conn, "ob-relay", holder, 30)
    except Exception:
        return None


@pytest.mark.matrix
def test_relay_scenario_kill_leader_small(engine_db, cli):
    """A conformance test: the scenario's sessions and the relays' open through the seam."""
    db = engine_db
    result = cli("engine", "scenario", "relay", "--dsn", db.dsn, "--relays", "3", "--messages", "600",
                 "--kill-leader", "--ttl", "1", "--rate", "400", "--json")
    assert result.returncode == 0, result.stderr
    [line] = result.json_lines()
    assert line["relays"] == 3 and line["messages"] == 600
    assert line["published_unique"] == line["published_total"] == line["expected_deliveries"] == 900
    assert line["lease_handovers"] >= 1 and line["killed_leader"] and line["final_holder"] != line["killed_leader"]
    with db.connect() as conn:  # cleaned up: no scenario queue or lease left
        assert conn.execute("SELECT count(*) FROM queuetop.queues WHERE name LIKE 'relay-%'").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM queuetop.leases WHERE name LIKE 'relay-scenario-%'").fetchone()[0] == 0


def test_relay_scenario_bad_options(db, cli):
    result = cli("engine", "scenario", "relay", "--dsn", db.dsn, "--relays", "1", "--kill-leader", "--json")
    assert result.returncode == 2 and "needs at least 2 relays" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_probe_shows_the_outbox_backlog_and_inboxes_as_queues(db):
    from probes.sampler import run_cycle

    with db.connect() as conn:
        for n in range(7):
            outbox.send(conn, "ob-probe", json.dumps({"n": n}))
        for n in range(3):
            conn.execute("INSERT INTO queuetop.eo_inbox (endpoint, attempt_id, message_id, claim_id) VALUES"
                         " ('billing', gen_random_uuid(), gen_random_uuid(), CASE WHEN %s = 0 THEN gen_random_uuid() END)", (n,))
    snap = run_cycle(db.target)
    assert snap.probes["queues"].error is None
    rows = {(q.kind, q.name): q for q in snap.queues}
    backlog_row = rows[("outbox", "outbox")]
    assert (backlog_row.depth, backlog_row.ready, backlog_row.in_flight) == (7, 7, 0)
    assert backlog_row.oldest_ready_age_s is not None and backlog_row.oldest_ready_age_s >= 0
    inbox = rows[("inbox", "billing")]
    assert (inbox.depth, inbox.in_flight, inbox.ready) == (3, 1, 2)
    with db.connect() as conn:  # relayed: the backlog empties
        relay = Relay(db.target, "r1", lease="ob-relay", ttl_s=30)
        relay.token = leases.acquire(conn, "ob-relay", "r1", 30)
        relay.relay_batch(conn)
    assert {(q.kind, q.name): q for q in run_cycle(db.target).queues}[("outbox", "outbox")].depth == 0
