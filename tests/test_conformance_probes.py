"""The probes' conformance tests: what `queuetop snapshot` must see in every dialect, with the
blockers made through the engine's own statements (each dialect's text of `block_table` and
`init_lock`). They run on PostgreSQL, and on SQL Server when QUEUETOP_MSSQL_DSN is set.

- a head blocker that holds a lock in an open transaction and does nothing (PostgreSQL's
  `idle in transaction`, SQL Server's sleeping session with an open transaction) is the root of
  the tree, with its state, and the session it holds up is blocked under it;
- a wait on an application lock (pg_advisory_xact_lock, sp_getapplock) shows as one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from probes.sampler import run_cycle
from queues import schema
from queues.table_queue import TableQueue

from .conftest import wait_until

pytestmark = pytest.mark.matrix  # the server matrix runs these on every supported major

# What the blocker's state reads as in each dialect: an open transaction, doing nothing.
IDLE_WITH_OPEN_TRANSACTION = {"postgresql": "idle in transaction", "mssql": "sleeping, open transaction"}
APPLICATION_LOCK = {"postgresql": "advisory", "mssql": "APPLICATION"}


class Waiter(threading.Thread):
    """`action(session)` in a thread of its own, on a session of its own: it will wait on a lock."""

    def __init__(self, engine_db, action: Callable[[object], object]) -> None:
        super().__init__(daemon=True)
        self.engine_db, self.action = engine_db, action
        self.errors: list[BaseException] = []
        self.start()

    def run(self) -> None:
        try:
            with self.engine_db.connect() as session:
                self.action(session)
        except BaseException as exc:  # reported by finish()
            self.errors.append(exc)

    def finish(self) -> None:
        """Once the lock is released: the action went through."""
        self.join(30)
        assert not self.is_alive() and not self.errors, self.errors


def _blocked(engine_db):
    return run_cycle(engine_db.target).blocked


def test_an_idle_head_blocker_with_an_open_transaction_is_the_root_of_the_tree(engine_db):
    with engine_db.connect() as conn:
        queue = TableQueue.create(conn, "locked")
    blocker = engine_db.connect()
    try:
        with blocker.transaction():
            blocker.execute(queue.statement_for(blocker, "block_table"))  # then does nothing: idle, transaction open
            waiter = Waiter(engine_db, lambda s: queue.enqueue(s, '{"waits": true}'))
            wait_until(lambda: _blocked(engine_db), timeout=20, what="the enqueue blocked")
            snapshot = run_cycle(engine_db.target)
            roots = {b.pid: b for b in snapshot.blockers}
            (blocked,) = [s for s in snapshot.blocked if s.root_blocker in roots]
            root = roots[blocked.root_blocker]
            assert root.state == IDLE_WITH_OPEN_TRANSACTION[engine_db.dialect]
            assert root.blocked_count >= 1 and root.xact_age_s is not None and root.xact_age_s >= 0
            assert blocked.wait_s is not None and blocked.wait_s >= 0
            assert "locked" in (blocked.relation or "")  # the queue's table: queuetop.q_locked
        waiter.finish()  # the blocker's transaction ended: the enqueue went through
        wait_until(lambda: not _blocked(engine_db), timeout=20, what="the tree to empty once the blocker is gone")
    finally:
        blocker.close()
    with engine_db.connect() as conn:
        assert queue.counts(conn).depth == 1


def test_a_wait_on_an_application_lock_shows_as_one(engine_db):
    holder = engine_db.connect()

    def wait_for_it(session) -> None:
        with session.transaction():
            schema.lock_init(session)

    try:
        with holder.transaction():
            schema.lock_init(holder)  # the engine's init lock, held until the transaction ends
            waiter = Waiter(engine_db, wait_for_it)
            blocked = wait_until(lambda: _blocked(engine_db), timeout=20, what="the second init_lock to wait")
            assert any(s.lock_type == APPLICATION_LOCK[engine_db.dialect] for s in blocked), blocked
        waiter.finish()
    finally:
        holder.close()


def test_application_locks_are_listed_held_before_anyone_waits_and_then_waiting(engine_db):
    holder = engine_db.connect()

    def wait_for_it(session) -> None:
        with session.transaction():
            schema.lock_init(session)

    def ours() -> list:
        """This database's locks taken by the test's sessions (the lock views are the whole server's)."""
        snapshot = run_cycle(engine_db.target)
        return [a for a in snapshot.app_locks if a.application == "queuetop-tests" and a.database == snapshot.server.database]

    try:
        with holder.transaction():
            schema.lock_init(holder)
            held = ours()
            assert [(a.granted, a.wait_s) for a in held] == [(True, None)] and held[0].resource and held[0].mode
            waiter = Waiter(engine_db, wait_for_it)

            def both():
                locks = ours()
                return len(locks) == 2 and locks

            waiting, granted = wait_until(both, timeout=20, what="the second init_lock listed as waiting")
            assert (waiting.granted, granted.granted) == (False, True)  # the waits first
            assert waiting.resource == granted.resource and waiting.wait_s is not None and waiting.wait_s >= 0
            assert waiting.pid != granted.pid == held[0].pid
        waiter.finish()
    finally:
        holder.close()
    assert not ours()


# -- one probe failing, the others reporting ---------------------------------------------------------
# SQL Server's session used to be lost with its first failed statement: after a query timeout (or a
# lost link) SQLAlchemy's next statement raised PendingRollbackError, and `snapshot` died of it.
# tests/test_mssql_driver.py makes statements fail through the real driver against a local
# listener; these make them fail on a real server, in both dialects.

# A statement that outlasts the probes' 2 s statement timeout (pyodbc's query timeout on SQL Server).
SLOW_STATEMENT = {"postgresql": "SELECT pg_sleep(3)", "mssql": "WAITFOR DELAY '00:00:03'"}
# A lock that stops every reader of queuetop.rings: ACCESS EXCLUSIVE; on SQL Server a schema
# modification lock (DDL, rolled back), which readers wait for whether or not they read row versions.
BLOCK_RINGS = {"postgresql": "LOCK TABLE queuetop.rings IN ACCESS EXCLUSIVE MODE",
               "mssql": "ALTER TABLE queuetop.rings ADD qt_blocker int NULL"}


def test_a_probe_session_goes_on_after_its_statement_times_out(engine_db):
    from probes.failures import describe_error
    from probes.postgres import open_probe_connection

    with open_probe_connection(engine_db.target) as conn:
        try:
            conn.execute(SLOW_STATEMENT[engine_db.dialect])
        except Exception as exc:  # each dialect's own: psycopg's QueryCanceled, SQL Server's DatabaseRefused
            timed_out = exc
        else:
            raise AssertionError("the statement outlasted the probes' statement timeout without an error")
        assert getattr(timed_out, "sqlstate", None) == "57014", timed_out
        assert describe_error(timed_out) == "skipped: statement timeout (2000 ms) reached"
        assert conn.execute("SELECT 1 AS one").fetchone() == {"one": 1}  # the same session goes on


def test_one_probe_failing_leaves_the_others_reporting(engine_db):
    blocker = engine_db.connect()
    try:
        with blocker.transaction(force_rollback=True):
            blocker.execute(BLOCK_RINGS[engine_db.dialect])
            snapshot = run_cycle(engine_db.target)
    finally:
        blocker.close()
    assert "lock timeout" in (snapshot.probes["rings"].error or ""), snapshot.probes["rings"]
    # The probes after it, on the same session, report (the locks and connections probes need
    # VIEW SERVER STATE on SQL Server, which the live suite's login may lack: not asserted).
    assert snapshot.probes["leases"].error is None and snapshot.probes["compaction"].error is None, snapshot.probes
    assert snapshot.probes["queues"].unread != ("all",), snapshot.probes["queues"]
