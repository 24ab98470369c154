"""Engine controls and the demo workload against a real PostgreSQL: what they start is visible
to the probes, and stopping leaves no session behind."""

from __future__ import annotations

import pytest

from dbcore.errors import UsageError
from probes.sampler import run_cycle
from queues.control import EngineControls
from queues.demo import Demo
from queues.table_queue import TableQueue

from .conftest import wait_until


def engine_sessions(db) -> list[str]:
    with db.connect() as conn:
        return [row[0] for row in conn.execute(
            "SELECT application_name FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name LIKE 'queuetop-%' AND application_name NOT LIKE 'queuetop-probe%'"
            " AND pid <> pg_backend_pid()"
        )]


def queue_of(snapshot, name):
    return next((q for q in snapshot.queues if q.name == name), None)


def test_producer_consumers_and_blocker_show_in_the_probes(db):
    controls = EngineControls(db.target)
    try:
        controls.start_producer("ctl", 200)
        wait_until(lambda: (q := queue_of(run_cycle(db.target), "ctl")) is not None and q.depth >= 50,
                   timeout=15, what="the producer's messages")
        with pytest.raises(UsageError, match="unknown queue"):
            controls.inject_blocker("ctl-typo", 5)  # a typo blocks nothing and creates nothing
        with db.connect() as conn:
            assert conn.execute("SELECT count(*) FROM queuetop.queues WHERE name = 'ctl-typo'").fetchone()[0] == 0
        controls.inject_blocker("ctl", 30)
        # The producer's INSERT now waits behind the blocker: a tree with an idle-in-transaction root.
        def blocked():
            snapshot = run_cycle(db.target)
            return snapshot if snapshot.blockers else None

        snap = wait_until(blocked, timeout=15, what="a blocked producer")
        [root] = [b for b in snap.blockers if b.application == "queuetop-blocker:ctl"]
        assert root.state == "idle in transaction" and root.blocked_count >= 1
        assert controls.stop("blocker:ctl")
        controls.stop("producer:ctl")
        controls.start_consumers("ctl", workers=2)
        wait_until(lambda: queue_of(run_cycle(db.target), "ctl").depth == 0, timeout=30, what="the queue drained")
        with pytest.raises(UsageError):
            controls.start_consumers("ctl")  # already running
    finally:
        controls.stop_all()
    wait_until(lambda: engine_sessions(db) == [], timeout=15, what="no engine sessions left")


def test_burst_ring_and_lease_controls(db):
    controls = EngineControls(db.target)
    assert controls.burst("ctl-burst", 2500) == 2500
    with db.connect() as conn:
        assert TableQueue.open(conn, "ctl-burst").counts(conn).depth == 2500
    controls.ring_create("ctl-ring", 10)
    controls.ring_put("ctl-ring", 4)
    assert controls.ring_take("ctl-ring", 3) == 3
    assert controls.lease_take("ctl-lease", "op", 30) == 1
    snap = run_cycle(db.target)
    [ring] = [r for r in snap.rings if r.name == "ctl-ring"]
    assert ring.used == 1
    [lease] = [lease for lease in snap.leases if lease.name == "ctl-lease"]
    assert lease.state == "held" and lease.holder == "op"
    controls.lease_release("ctl-lease", "op")
    assert next(lease for lease in run_cycle(db.target).leases if lease.name == "ctl-lease").state == "free"
    with pytest.raises(UsageError):
        controls.start_producer("ctl-burst", 0)
    with pytest.raises(UsageError):
        controls.burst('x"; drop table y; --', 1)


def test_demo_brings_every_panel_alive_and_stops_cleanly(db):
    demo = Demo(EngineControls(db.target))
    demo.start()
    try:
        def alive():
            snap = run_cycle(db.target)
            orders, emails = queue_of(snap, "demo.orders"), queue_of(snap, "demo.emails")
            rings = {r.name: r for r in snap.rings}
            leases = {lease.name: lease for lease in snap.leases}
            survey = [g for c in snap.compaction for g in c.by_group if g.title == "demo.survey"]
            ok = (orders and orders.inserted_total and emails and emails.dead is not None
                  and rings.get("demo.audit") and rings["demo.audit"].used > 0
                  and leases.get("demo.relay") and leases["demo.relay"].state == "held"
                  and survey and survey[0].pending_deltas > 1)  # the survey's answers, not yet folded
            return snap if ok else None

        snap = wait_until(alive, timeout=20, interval=0.3, what="the demo's queues, ring, lease and survey")
        apps = snap.connections.by_application
        assert any(a.startswith("queuetop-work:claim:demo.orders") for a in apps)
    finally:
        demo.stop()
    wait_until(lambda: engine_sessions(db) == [], timeout=20, what="every demo session gone")
