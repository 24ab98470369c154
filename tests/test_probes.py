"""Probes against real contention: sessions in threads that really hold and wait for locks,
queues in every state, a role without privileges. Each test polls until the probe sees the
situation, then asserts its exact answer."""

from __future__ import annotations

import json
import threading
import time
from contextlib import ExitStack, contextmanager

import psycopg
import pytest
from psycopg import sql

from dbcore.errors import RingFull
from probes.config import Config, DeclaredQueue
from probes.postgres import PostgresProbes, open_probe_connection
from probes.sampler import run_cycle
from queues.lease import acquire
from queues.ring import create as ring_create
from queues.ring import put as ring_put
from queues.table_queue import TableQueue

from .conftest import PASSWORD, PASSWORD_ROLE, wait_until

pytestmark = pytest.mark.matrix  # the server matrix runs these on every supported major


class Session:
    """A real client session; `start()` runs a statement that may block in a thread."""

    def __init__(self, db, name: str):
        self.conn = db.connect(application_name=name, autocommit=True)
        self.pid = self.conn.info.backend_pid
        self.threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []

    def run(self, statement, params=None):
        return self.conn.execute(statement, params)

    def start(self, statement, params=None):
        def target():
            try:
                self.conn.execute(statement, params)
            except psycopg.Error as exc:  # cancelled when the test ends
                self.errors.append(exc)

        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        self.threads.append(thread)

    def close(self, admin):
        admin.execute("SELECT pg_terminate_backend(%s)", (self.pid,))
        for thread in self.threads:
            thread.join(10)
        self.conn.close()


@contextmanager
def sessions(db, *names):
    with db.connect() as admin, ExitStack() as stack:
        made = [Session(db, name) for name in names]
        for s in made:
            stack.callback(s.close, admin)
        yield made


def snapshot(db, config=None, probes=None):
    return run_cycle(db.target, config, probes=probes)


def blocked_of(snap, pids):
    return {b.pid: b for b in snap.blocked if b.pid in pids}


def start_waiting(db, session, statement, *ahead):
    """Start `statement` on `session`, then wait until the server shows it blocked, with the
    sessions `ahead` of it still blocked: the order in which a lock's waiters queue up."""
    session.start(statement)
    pids = {session.pid, *(s.pid for s in ahead)}
    wait_until(lambda: len(blocked_of(snapshot(db), pids)) == len(pids), timeout=15, what=f"{len(pids)} blocked, {session.pid} last")


def wait_blocked(db, pids, count):
    def seen():
        snap = snapshot(db)
        return snap if len(blocked_of(snap, pids)) == count else None

    return wait_until(seen, timeout=15, what=f"{count} blocked sessions")


# -- locks --------------------------------------------------------------------------------


def test_three_level_chain_with_idle_in_transaction_root(db):
    with db.connect() as setup:
        setup.execute("CREATE TABLE accounts (id int PRIMARY KEY, balance int)")
        setup.execute("INSERT INTO accounts VALUES (1, 100)")
    with sessions(db, "qt-a", "qt-b", "qt-c") as (a, b, c):
        a.run("BEGIN")
        a.run("UPDATE accounts SET balance = balance + 1 WHERE id = 1")  # then idle in transaction
        start_waiting(db, b, "UPDATE accounts SET balance = balance + 2 WHERE id = 1")
        c.start("UPDATE accounts SET balance = balance + 3 WHERE id = 1")
        snap = wait_blocked(db, {b.pid, c.pid}, 2)

        got = blocked_of(snap, {b.pid, c.pid})
        assert got[b.pid].blocked_by == (a.pid,)
        assert got[b.pid].root_blocker == a.pid
        assert got[b.pid].lock_type == "transactionid" and got[b.pid].mode == "ShareLock"
        assert got[c.pid].blocked_by == (b.pid,)  # queued behind b's tuple lock
        assert got[c.pid].root_blocker == a.pid
        assert got[c.pid].lock_type == "tuple" and got[c.pid].relation == "accounts"
        assert "balance + 3" in got[c.pid].query and got[c.pid].application == "qt-c"
        assert got[c.pid].wait_s is not None and got[c.pid].wait_s >= 0
        assert not got[c.pid].in_cycle

        [root] = [r for r in snap.blockers if r.pid == a.pid]
        assert root.blocked_count == 2
        assert root.state == "idle in transaction"
        assert root.xact_age_s is not None and root.xact_age_s > 0
        assert root.application == "qt-a" and "balance + 1" in root.query
        # b and c are blocked, not roots.
        assert {r.pid for r in snap.blockers} & {b.pid, c.pid} == set()


def test_advisory_lock_wait_is_in_the_tree(db):
    with sessions(db, "qt-adv-holder", "qt-adv-waiter") as (holder, waiter):
        holder.run("SELECT pg_advisory_lock(4242424242)")
        waiter.start("SELECT pg_advisory_lock(4242424242)")
        snap = wait_blocked(db, {waiter.pid}, 1)
        blocked = blocked_of(snap, {waiter.pid})[waiter.pid]
        assert blocked.lock_type == "advisory"
        assert blocked.relation == "advisory 4242424242"
        assert blocked.mode == "ExclusiveLock"
        assert blocked.root_blocker == holder.pid
        [root] = [r for r in snap.blockers if r.pid == holder.pid]
        assert root.blocked_count == 1 and root.state == "idle"


def test_relation_lock_queued_behind_alter_table(db):
    with db.connect() as setup:
        setup.execute("CREATE TABLE jobs (id int)")
    with sessions(db, "qt-reader", "qt-alter", "qt-late-reader") as (reader, alter, late):
        reader.run("BEGIN")
        reader.run("SELECT count(*) FROM jobs")  # AccessShareLock kept: idle in transaction
        start_waiting(db, alter, "ALTER TABLE jobs ADD COLUMN note text")
        late.start("SELECT count(*) FROM jobs")
        snap = wait_blocked(db, {alter.pid, late.pid}, 2)
        got = blocked_of(snap, {alter.pid, late.pid})
        assert got[alter.pid].lock_type == "relation" and got[alter.pid].mode == "AccessExclusiveLock"
        assert got[alter.pid].relation == "jobs" and got[alter.pid].blocked_by == (reader.pid,)
        assert got[late.pid].mode == "AccessShareLock" and got[late.pid].relation == "jobs"
        assert got[late.pid].blocked_by == (alter.pid,)  # the queued ALTER, not the reader
        assert got[late.pid].root_blocker == reader.pid
        [root] = [r for r in snap.blockers if r.pid == reader.pid]
        assert root.blocked_count == 2 and root.state == "idle in transaction"


def test_lock_tree_survives_a_cycle():
    # A wait cycle exists for up to deadlock_timeout before the server breaks it; the tree
    # builder must terminate and mark it instead of looping.
    from probes.locks import build_lock_tree

    rows = [
        {"pid": 1, "leader_pid": None, "blocked_by": [2], "wait_s": 1.0, "lock_type": "transactionid",
         "mode": "ShareLock", "relation": None, "query": "q1", "application_name": "a", "state": "active"},
        {"pid": 2, "leader_pid": None, "blocked_by": [1], "wait_s": 1.0, "lock_type": "transactionid",
         "mode": "ShareLock", "relation": None, "query": "q2", "application_name": "a", "state": "active"},
        {"pid": 3, "leader_pid": None, "blocked_by": [2], "wait_s": 1.0, "lock_type": "tuple",
         "mode": "ExclusiveLock", "relation": "t", "query": "q3", "application_name": "a", "state": "active"},
        # A parallel worker of 3, waiting too: folded into its leader, not listed twice.
        {"pid": 30, "leader_pid": 3, "blocked_by": [2, 2], "wait_s": 1.0, "lock_type": "tuple",
         "mode": "ExclusiveLock", "relation": "t", "query": "q3", "application_name": "a", "state": "active"},
    ]
    blocked, blockers, _prepared, _app_locks, cycles = build_lock_tree(rows, {})
    assert [b.pid for b in blocked] == [1, 2, 3]
    # The cycle's members are each other's roots, and the roots of everything behind them.
    assert [b.root_blockers for b in blocked] == [(2,), (1,), (1, 2)]
    assert [b.in_cycle for b in blocked] == [True, True, False]
    assert [b.root_cycles for b in blocked] == [(1,), (1,), (1,)]
    assert [(c.id, c.members, c.waiting) for c in cycles] == [(1, (1, 2), (3,))]
    assert blocked[2].worker_pids == (30,)
    assert {(b.pid, b.blocked_count, b.blocked_processes, b.cycle) for b in blockers} == {(1, 2, 3, 1), (2, 2, 3, 1)}


# -- queues -------------------------------------------------------------------------------


def test_reference_queue_counts_and_oldest_claimable_age(db):
    with db.connect() as conn:
        queue = TableQueue.create(conn, "orders")
        queue.enqueue_batch(conn, [json.dumps({"n": n}) for n in range(1, 7)])
        table = sql.Identifier("queuetop", queue.table_name)
        # Ages set on the database clock so that the expected oldest age is exact.
        conn.execute(
            sql.SQL("UPDATE {} SET enqueued_at = now() - make_interval(secs => 1000 - id * 100)").format(table)
        )
        [_hidden] = queue.claim(conn, visibility_s=300)  # id 1, the oldest: in flight, hidden
        [retry] = queue.claim(conn, visibility_s=300)  # id 2: released with a back-off
        assert queue.release_for_retry(conn, retry, "boom", delay_s=600)
        [dead] = queue.claim(conn, visibility_s=300)  # id 3: dead-lettered
        assert queue.dead_letter_claimed(conn, dead, "bad")
        # ids 4, 5, 6 ready; the oldest claimable is id 4, enqueued 600 s ago.
    snap = snapshot(db)
    assert snap.probes["queues"].error is None
    [q] = [q for q in snap.queues if q.name == "orders"]
    assert (q.kind, q.depth, q.ready, q.in_flight, q.delayed, q.dead) == ("reference", 5, 3, 1, 1, 1)
    assert not q.depth_is_estimate
    assert 599 <= q.oldest_ready_age_s <= 610
    assert q.table == '"queuetop"."q_orders"'
    assert q.inserted_total is not None and q.dead_tuples is not None


def test_hold_transaction_messages_count_as_in_flight(db):
    with db.connect() as conn:
        queue = TableQueue.create(conn, "held")
        queue.enqueue_batch(conn, ["{}"] * 4)
    with db.connect(autocommit=False) as worker:
        taken = queue.take_held(worker, batch=3)  # deleted inside an open transaction
        assert len(taken) == 3
        snap = snapshot(db)
        [q] = [q for q in snap.queues if q.name == "held"]
        assert (q.depth, q.in_flight, q.ready) == (4, 3, 1)
        worker.rollback()
    [q] = [q for q in snapshot(db).queues if q.name == "held"]
    assert (q.depth, q.in_flight, q.ready) == (4, 0, 4)


def test_depth_above_the_window_is_an_estimate_that_reads_exactly(db):
    with db.connect() as conn:
        queue = TableQueue.create(conn, "deep")
        queue.enqueue_batch(conn, ["{}"] * 4321)
    snap = snapshot(db, Config(window=100))
    [q] = [q for q in snap.queues if q.name == "deep"]
    assert q.depth_is_estimate
    assert q.depth == 4321 and q.ready == 4321  # no holes: the id span is exact


def test_rates_come_from_successive_samples(db):
    with db.connect() as conn:
        queue = TableQueue.create(conn, "rated")
    probes = PostgresProbes()
    first = snapshot(db, probes=probes)
    [q] = [q for q in first.queues if q.name == "rated"]
    assert q.enqueued_per_s is None and q.dequeued_per_s is None
    with db.connect() as conn:
        queue.enqueue_batch(conn, ["{}"] * 50)
        for message in queue.claim(conn, visibility_s=30, batch=20):
            queue.ack(conn, message)

    def counted():
        snap = snapshot(db, probes=probes)
        [q] = [q for q in snap.queues if q.name == "rated"]
        return q if q.inserted_total and q.inserted_total >= 50 and q.deleted_total >= 20 else None

    # The server's statistics reach pg_stat_user_tables within about a second.
    q = wait_until(counted, timeout=15, interval=0.2, what="counters")
    assert q.enqueued_per_s is not None and q.dequeued_per_s is not None
    assert q.enqueued_per_s >= 0 and q.dequeued_per_s >= 0
    def quiet():
        [q2] = [q for q in snapshot(db, probes=probes).queues if q.name == "rated"]
        return q2 if q2.enqueued_per_s == 0 and q2.dequeued_per_s == 0 else None

    # Nothing more happens: once the counters have settled, the rates are zero.
    q2 = wait_until(quiet, timeout=15, interval=0.2, what="zero rates on a quiet queue")
    assert q2.inserted_total == 50 and q2.deleted_total == 20
    # The counters (/metrics' queuetop_queue_enqueued_total): the rates added up since the first
    # sample, equal to the table's own statistics' growth since then.
    [q0] = [q for q in first.queues if q.name == "rated"]
    assert (q0.enqueued_total, q0.dequeued_total) == (0, 0)
    assert q2.enqueued_total == 50 - (q0.inserted_total or 0) and q2.dequeued_total == 20 - (q0.deleted_total or 0)


SEED_004 = """
CREATE TABLE public.messages (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    inserted timestamptz NOT NULL DEFAULT now(),
    "messageType" text NOT NULL,
    "messageBody" text,
    status text NOT NULL DEFAULT 'new',
    invisible_until timestamptz
)"""


def test_user_declared_table(db):
    with db.connect() as conn:
        conn.execute(SEED_004)
        conn.execute(
            """INSERT INTO public.messages (inserted, "messageType", status, invisible_until)
               SELECT now() - make_interval(secs => 500 - g), 'mail',
                      CASE WHEN g = 2 THEN 'failed' ELSE 'new' END,
                      CASE WHEN g = 1 THEN now() + interval '5 minutes' END
               FROM generate_series(1, 5) g"""
        )
    declared = DeclaredQueue(
        name="mail",
        table="public.messages",
        order_by="id",
        age_column="inserted",
        visible_at_column="invisible_until",
        state_column="status",
        dead_states=("failed",),
    )
    snap = snapshot(db, Config(queues=(declared,)))
    [q] = [q for q in snap.queues if q.name == "mail"]
    assert q.error is None, q.error
    # depth = ready + in flight + delayed (PRODUCT.md): the dead row is counted apart.
    assert (q.kind, q.source, q.depth, q.ready, q.in_flight, q.dead) == ("table", "table", 4, 3, 1, 1)
    assert 496 <= q.oldest_ready_age_s <= 505  # row 3: rows 1 (hidden) and 2 (dead) do not count
    assert q.table == '"public"."messages"'


def test_a_declared_queue_whose_order_leads_no_index_is_noted(db):
    with db.connect() as conn:
        conn.execute("CREATE TABLE public.jobs_unindexed (id bigint, created timestamptz DEFAULT now())")
        conn.execute("INSERT INTO public.jobs_unindexed (id) SELECT g FROM generate_series(1, 5) g")
        conn.execute(SEED_004)
    unindexed = DeclaredQueue(name="slow", table="public.jobs_unindexed", order_by="created")
    indexed = DeclaredQueue(name="mail", table="public.messages", order_by="id")
    snap = snapshot(db, Config(queues=(unindexed, indexed)))
    [q] = [q for q in snap.queues if q.name == "slow"]
    assert q.error is None and q.depth == 5  # still sampled, and said why it costs more
    note = snap.probes["queues"].notes
    assert snap.probes["queues"].error is None  # said, not failed
    assert "slow: no index leads with order_by column 'created'" in note
    assert "mail" not in note  # id leads the primary key


def test_details_of_a_declared_queue_show_its_head_rows_in_order(db):
    from probes.details import queue_details

    with db.connect() as conn:
        conn.execute(SEED_004)
        conn.execute("""INSERT INTO public.messages ("messageType", "messageBody")
                        SELECT 'mail', CASE WHEN g = 1 THEN repeat('x', 5000) ELSE 'body ' || g END
                        FROM generate_series(1, 30) g""")
    good = Config(queues=(DeclaredQueue(name="mail", table="public.messages", order_by="id"),))
    hostile = Config(queues=(DeclaredQueue(name="mail", table="public.messages", order_by='id"; drop table messages; --'),))
    with open_probe_connection(db.target) as conn:
        details = queue_details(conn, "table", "mail", good)
        with pytest.raises(LookupError, match="order_by column"):
            queue_details(conn, "table", "mail", hostile)
    head = details.head
    assert [row["id"] for row in head] == [str(n) for n in range(1, 21)]  # the first 20, in order
    assert list(head[0]) == ["id", "inserted", "messageType", "messageBody", "status", "invisible_until"]
    assert head[0]["messageBody"] == "x" * 200  # a wide value is cut on the server
    assert head[1]["messageBody"] == "body 2" and head[0]["invisible_until"] is None


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"table": 'x"; drop table y; --'}, "not found"),
        ({"table": "public.nosuch"}, "not found"),
        ({"order_by": 'id"; drop table messages; --'}, "order_by column"),
        ({"age_column": "nope"}, "age_column column"),
    ],
)
def test_hostile_or_wrong_declarations_are_reported_not_run(db, overrides, message):
    with db.connect() as conn:
        conn.execute(SEED_004)
    fields = {"name": "mail", "table": "public.messages", "order_by": "id", **overrides}
    snap = snapshot(db, Config(queues=(DeclaredQueue(**fields),)))
    [q] = [q for q in snap.queues if q.name == "mail"]
    assert message in q.error
    assert q.depth is None
    assert message in snap.probes["queues"].error
    with db.connect() as conn:  # nothing was dropped
        assert conn.execute("SELECT to_regclass('public.messages') IS NOT NULL").fetchone()[0]


# -- rings, leases, connections -----------------------------------------------------------


def test_rings_and_leases(db):
    with db.connect() as conn:
        ring_create(conn, "r", 3)
        ring_put(conn, "r", ["{}", "{}"])
        with pytest.raises(RingFull):  # refused: only one cell free
            ring_put(conn, "r", ["{}", "{}"])
        acquire(conn, "held-lease", "alice", 60)
        acquire(conn, "expired-lease", "bob", 0.05)
        acquire(conn, "free-lease", "carol", 60)
        conn.execute("UPDATE queuetop.leases SET holder = NULL, expires_at = NULL WHERE name = 'free-lease'")

    def expired():
        snap = snapshot(db)
        leases = {lease.name: lease for lease in snap.leases}
        return snap if leases["expired-lease"].state == "expired" else None

    snap = wait_until(expired, timeout=10, what="lease expiry")
    [ring] = snap.rings
    assert (ring.name, ring.capacity, ring.used, ring.refused_total) == ("r", 3, 2, 2)
    leases = {lease.name: lease for lease in snap.leases}
    assert leases["held-lease"].state == "held" and leases["held-lease"].holder == "alice"
    assert leases["held-lease"].token == 1 and 50 < leases["held-lease"].expires_in_s <= 60
    assert leases["expired-lease"].expires_in_s < 0 and leases["expired-lease"].holder == "bob"
    assert leases["free-lease"].state == "free" and leases["free-lease"].expires_in_s is None


def test_connections(db):
    with sessions(db, "qt-conn-x", "qt-conn-x", "qt-conn-x") as (_idle, in_tx, snapshot_holder):
        in_tx.run("BEGIN")
        in_tx.run("SELECT 1")
        snapshot_holder.run("BEGIN ISOLATION LEVEL REPEATABLE READ")
        snapshot_holder.run("SELECT count(*) FROM pg_class")  # keeps its snapshot: holds xmin
        snap = snapshot(db)
        c = snap.connections
        assert c.by_application["qt-conn-x"] == 3
        assert c.by_state["idle in transaction"] >= 2
        with db.connect() as conn:  # 200 on the embedded server, the stock 100 on the matrix's
            assert c.max == int(conn.execute("SHOW max_connections").fetchone()[0])
        # Our three, the probe's own; sessions of earlier tests may still be closing.
        assert c.total >= 4 and c.total == sum(c.by_state.values()) + 1
        assert c.oldest_xact_pid == in_tx.pid
        assert c.xmin_holder_pid == snapshot_holder.pid
        assert c.xmin_holder_application == "qt-conn-x"


# -- cost and safety ----------------------------------------------------------------------


def test_probe_never_waits_on_a_locked_table(db):
    with db.connect() as conn:
        locked = TableQueue.create(conn, "locked")
        TableQueue.create(conn, "free")
    with sessions(db, "qt-locker") as (locker,):
        locker.run("BEGIN")
        locker.run(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(sql.Identifier("queuetop", locked.table_name)))
        locker.run("LOCK TABLE queuetop.rings IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        snap = snapshot(db)
        elapsed = time.monotonic() - started
        assert elapsed < 2.0, f"a probe waited {elapsed:.1f}s on a lock"
        queues = {q.name: q for q in snap.queues}
        assert "locked by another session" in queues["locked"].error
        assert queues["free"].error is None and queues["free"].depth == 0
        assert "lock timeout" in snap.probes["rings"].error
        assert snap.probes["leases"].error is None and snap.probes["connections"].error is None


def test_probe_sessions_are_read_only_and_named(db):
    with open_probe_connection(db.target) as conn:
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            conn.execute("CREATE TABLE should_not_exist (id int)")
        settings = conn.execute(
            "SELECT current_setting('application_name') AS app, current_setting('statement_timeout') AS st,"
            " current_setting('lock_timeout') AS lt, current_setting('plan_cache_mode') AS plans"
        ).fetchone()
        # Custom plans always: a generic one cannot use the libraries' per-state partial indexes.
        assert settings == {"app": "queuetop-probe", "st": "2s", "lt": "100ms", "plans": "force_custom_plan"}
        assert conn.autocommit


def test_a_role_without_privileges_sees_what_it_may(db):
    with db.connect() as conn:
        TableQueue.create(conn, "secret")
        conn.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(sql.Identifier(db.name), sql.Identifier(PASSWORD_ROLE)))
        conn.execute("CREATE TABLE accounts (id int PRIMARY KEY)")
        conn.execute("INSERT INTO accounts VALUES (1)")
    limited = db.dsn.replace("postgres@", f"{PASSWORD_ROLE}:{PASSWORD}@")
    from dbcore.database import resolve_target

    target = resolve_target(limited)
    with sessions(db, "qt-priv-a", "qt-priv-b") as (a, b):
        a.run("BEGIN")
        a.run("UPDATE accounts SET id = id WHERE id = 1")
        b.start("UPDATE accounts SET id = id WHERE id = 1")
        wait_blocked(db, {b.pid}, 1)
        snap = run_cycle(target)
        # Locks: the tree is whole (pg_locks is public), queries are hidden and it says so.
        got = blocked_of(snap, {b.pid})
        assert got[b.pid].root_blocker == a.pid and got[b.pid].query is None
        assert "pg_read_all_stats" in snap.probes["locks"].notes and snap.probes["locks"].error is None
        # Queues: the engine's tables are not granted: reported, nothing shown.
        assert "privilege" in snap.probes["queues"].error
        assert snap.queues == ()
        assert "privilege" in snap.probes["rings"].error and "privilege" in snap.probes["leases"].error
        # Connections: counted, states of other roles' sessions unknown and it says so.
        assert snap.connections.total >= 3
        assert "pg_read_all_stats" in snap.probes["connections"].notes


def test_a_queue_exactly_as_deep_as_the_window_is_exact(db):
    with db.connect() as conn:
        queue = TableQueue.create(conn, "edge")
        queue.enqueue_batch(conn, ["{}"] * 100)
    [q] = [q for q in snapshot(db, Config(window=100)).queues if q.name == "edge"]
    assert (q.depth, q.depth_is_estimate) == (100, False)
    with db.connect() as conn:
        queue.enqueue(conn, "{}")
    [q] = [q for q in snapshot(db, Config(window=100)).queues if q.name == "edge"]
    assert (q.depth, q.depth_is_estimate) == (101, True)


def test_advisory_keys_are_listed_as_the_application_passed_them(db):
    """pg_locks stores both forms of advisory key unsigned and split in two: the probe puts them
    back together, signed, as probes.locklabels.advisory_key names them in the lock tree."""
    with db.connect(application_name="qt-advisory") as holder:
        holder.execute("SELECT pg_advisory_lock(-5), pg_advisory_lock(1099511627779), pg_advisory_lock(1, -2),"
                       " pg_advisory_lock(-2147483648, 2147483647)")
        snapshot = run_cycle(db.target)
        mine = [a for a in snapshot.app_locks if a.application == "qt-advisory"]
        assert sorted(a.resource for a in mine) == sorted(["-5", "1099511627779", "(1, -2)", "(-2147483648, 2147483647)"])
        assert all(a.granted and a.mode == "ExclusiveLock" and a.database == db.name and a.wait_s is None for a in mine)
        assert snapshot.to_json()["app_locks"][0].keys() >= {"pid", "resource", "mode", "granted", "wait_s", "application"}
