"""The dashboard's engine controls (queues/control.py) and its one write to another session
(queues/admin.py) in every dialect: they open their sessions through the seam, so on SQL Server
the dashboard drives the same engine. They run on PostgreSQL, and on SQL Server when
QUEUETOP_MSSQL_DSN is set.
"""

from __future__ import annotations

import pytest

from dbcore.dialect import dialect_named
from dbcore.errors import UsageError
from probes.sampler import run_cycle
from queues.admin import signal_backend
from queues.control import EngineControls
from queues.table_queue import TableQueue

from .conftest import wait_until
from .test_conformance_probes import IDLE_WITH_OPEN_TRANSACTION, Waiter

pytestmark = pytest.mark.matrix  # the server matrix runs these on every supported major


@pytest.fixture
def controls(engine_db):
    controls = EngineControls(engine_db.target)
    yield controls
    controls.stop_all()


def test_a_burst_is_worked_off_by_the_controls_consumers(engine_db, controls):
    assert controls.burst("ctl_jobs", 120) == 120
    with engine_db.connect() as conn:
        queue = TableQueue.open(conn, "ctl_jobs")
        assert queue.counts(conn).depth == 120
    controls.start_consumers("ctl_jobs", workers=3)
    with engine_db.connect() as conn:
        wait_until(lambda: not queue.has_messages(conn), timeout=60, what="the consumers to empty the queue")
    (activity,) = [a for a in controls.activities() if a.key == "consumers:ctl_jobs"]
    assert activity.pool is not None
    # The last ack commits before its worker counts it: the queue can be empty a moment before.
    pool = activity.pool
    wait_until(lambda: pool.summary.processed >= 120, timeout=10, what="the workers to count the last ack")
    assert pool.summary.processed == 120


def test_rings_and_leases_from_the_controls(controls):
    controls.ring_create("ctl_ring", 4)
    assert controls.ring_put("ctl_ring", 3) == 3
    assert controls.ring_take("ctl_ring", 5) == 3  # only what was put
    token = controls.lease_take("ctl_lease", "dashboard", 30)
    assert isinstance(token, int) and controls.lease_take("ctl_lease", "dashboard", 30) >= token
    assert controls.lease_release("ctl_lease", "dashboard") == 1


def test_an_injected_blocker_is_the_root_and_terminating_it_frees_the_waiter(engine_db, controls):
    controls.burst("ctl_blocked", 1)
    controls.inject_blocker("ctl_blocked", 120)
    with engine_db.connect() as conn:
        queue = TableQueue.open(conn, "ctl_blocked")
    waiter = Waiter(engine_db, lambda s: queue.enqueue(s, '{"waits": true}'))
    snapshot = wait_until(lambda: (s := run_cycle(engine_db.target)).blocked and s, timeout=20, what="the enqueue blocked")
    (root,) = snapshot.blockers
    assert root.state == IDLE_WITH_OPEN_TRANSACTION[engine_db.dialect]
    assert root.application == "queuetop-blocker:ctl_blocked"
    if dialect_named(engine_db.target.dialect).capabilities.cancel_query:
        assert signal_backend(engine_db.target, root.pid, terminate=False)  # cancelling an idle session ends nothing
    else:
        with pytest.raises(UsageError, match="cannot cancel"):
            signal_backend(engine_db.target, root.pid, terminate=False)
    assert signal_backend(engine_db.target, root.pid, terminate=True)
    waiter.finish()  # the blocker's transaction was rolled back: the enqueue went through
    with engine_db.connect() as conn:
        assert queue.counts(conn).depth == 2
    assert not signal_backend(engine_db.target, root.pid, terminate=True)  # gone: nothing to signal
