"""Engine controls and the demo workload against a real PostgreSQL: what they start is visible
to the probes, and stopping leaves no session behind."""

from __future__ import annotations

import pytest

from dbcore.errors import UsageError
from probes.sampler import run_cycle
from queues.control import EngineControls
from queues.demo import Demo
from queues.table_queue import TableQueue

from .conftest import report_fault, wait_until


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


def test_demo_reset_removes_what_the_demo_and_prompts_made_and_nothing_else(db, cli):
    import json

    from queues.control import RELAY_QUEUE, RELAY_TOPIC
    from queues.outbox import DEFAULT_LEASE, subscribe

    controls = EngineControls(db.target)
    with db.connect() as conn:  # the user's own objects
        mine = TableQueue.create(conn, "mine")
        mine.enqueue_batch(conn, ["{}"] * 3)
        [claimed] = mine.claim(conn, visibility_s=30)
        mine.dead_letter_claimed(conn, claimed, "the user's own failure")
    controls.ring_create("mine-ring", 4)
    controls.lease_take("mine-lease", "me", 60)
    # The demo's objects, with dead letters.
    controls.burst("demo.emails", 5)
    with db.connect() as conn:
        emails = TableQueue.open(conn, "demo.emails")
        for _ in range(2):
            [claimed] = emails.claim(conn, visibility_s=30)
            emails.dead_letter_claimed(conn, claimed, "demo failure")
    controls.ring_create("demo.audit", 40)
    controls.lease_take("demo.relay", "demo-relay", 5)
    controls.survey("demo.survey", reach=10, answers=2)
    # The relays' topology, and what prompts created.
    controls.ensure_queue(RELAY_QUEUE)
    controls.lease_take(DEFAULT_LEASE, "relay-1.abcd", 5)
    with db.connect() as conn:
        subscribe(conn, RELAY_TOPIC, "relay.billing")
    controls.ensure_queue("orders", remember=True)  # the typo of issue 13, confirmed
    controls.lease_take("operator-lease", "operator", 30, remember=True)
    controls.lease_take("mine-lease", "me", 60, remember=True)  # existed already: not the dashboard's

    # While the engine runs against the database, a reset is refused: it would drop their tables.
    controls.start_producer("mine", 1)
    try:
        wait_until(lambda: any(a.startswith("queuetop-produce:") for a in engine_sessions(db)), timeout=10, what="the producer")
        refused = cli("demo", "reset", "--dsn", db.dsn)
        assert refused.returncode == 2 and "engine is running" in refused.stderr and "Traceback" not in refused.stderr
    finally:
        controls.stop_all()
    wait_until(lambda: engine_sessions(db) == [], timeout=20, what="the engine's sessions gone")

    result = cli("demo", "reset", "--dsn", db.dsn)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert sorted(report["queues"]) == ["demo.emails", "orders", "relay.billing", RELAY_QUEUE]  # subscribe made relay.billing
    assert report["rings"] == ["demo.audit"]
    assert sorted(report["leases"]) == sorted(["demo.relay", DEFAULT_LEASE, "operator-lease"])
    assert report["tasks"] == ["demo.survey"] and report["dead_letters"] == 2
    with db.connect() as conn:
        queues = {row[0] for row in conn.execute("SELECT name FROM queuetop.queues")}
        assert queues == {"mine"}
        tables = {row[0] for row in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'queuetop'"
                                                 " AND tablename LIKE 'q\\_%'")}
        assert tables == {mine.table_name}
        assert [row[0] for row in conn.execute("SELECT queue FROM queuetop.dead_letters")] == ["mine"]
        assert {row[0] for row in conn.execute("SELECT name FROM queuetop.rings")} == {"mine-ring"}
        assert {row[0] for row in conn.execute("SELECT name FROM queuetop.leases")} == {"mine-lease"}
        assert conn.execute("SELECT count(*) FROM queuetop.tasks WHERE title LIKE 'demo.%'").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM queuetop.subscriptions").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM queuetop.meta WHERE key LIKE 'made-by-dashboard:%'").fetchone()[0] == 0
    again = cli("demo", "reset", "--dsn", db.dsn)  # nothing left to remove: still fine
    assert again.returncode == 0 and json.loads(again.stdout)["queues"] == []


def _gone(pid: int) -> bool:
    from pathlib import Path

    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")  # exited; only waiting to be reaped


@pytest.mark.faults
def test_kill_9_of_the_dashboard_leaves_no_relay_behind(db):
    """The relays are children of multiprocessing's fork server, not of the dashboard: each
    watches the process that started it and exits when it is gone; the lease then expires."""
    import json
    import os
    import signal
    import subprocess
    import sys

    from queues.outbox import DEFAULT_LEASE

    from .conftest import REPO

    script = (
        "import json, time\n"
        "from dbcore.database import resolve_target\n"
        "from queues.control import EngineControls\n"
        f"controls = EngineControls(resolve_target({db.dsn!r}))\n"
        "activity = controls.start_relays(2, 20.0, ttl_s=2.0)\n"
        "while len(activity.processes) < 2:\n"
        "    time.sleep(0.05)\n"
        "from multiprocessing import forkserver, resource_tracker\n"
        "helpers = [forkserver._forkserver._forkserver_pid, resource_tracker._resource_tracker._pid]\n"
        "print(json.dumps([p.pid for p in activity.processes.values()] + [h for h in helpers if h]), flush=True)\n"
        "time.sleep(600)\n"
    )
    dashboard = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        relays = json.loads(dashboard.stdout.readline())  # the two relays, the fork server, its resource tracker
        assert len(relays) >= 3 and not any(_gone(pid) for pid in relays)

        def lease():
            with db.connect() as conn:
                return conn.execute("SELECT holder, expires_at > now() FROM queuetop.leases WHERE name = %s",
                                    (DEFAULT_LEASE,)).fetchone()

        wait_until(lambda: (row := lease()) is not None and row[1], timeout=20, what="a relay holding the lease")
        os.kill(dashboard.pid, signal.SIGKILL)
        dashboard.wait(10)
        wait_until(lambda: all(_gone(pid) for pid in relays), timeout=10, what="every relay and helper process gone")
        wait_until(lambda: not lease()[1], timeout=10, what="the lease expired, renewed by no one")
        wait_until(lambda: engine_sessions(db) == [], timeout=10, what="no relay session left")
        report_fault("kill -9 of the dashboard with 2 relays running", injected=1, survived=1, orphans=0)
    finally:
        if dashboard.poll() is None:
            dashboard.kill()
        dashboard.stdout.close()
