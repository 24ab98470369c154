"""Lock truth (issue 14): real sessions hold and wait for real locks; each test polls until the
server shows the wait, then asserts the exact answer against what the server itself says."""

from __future__ import annotations

import json
from contextlib import contextmanager

import pytest
from psycopg import sql

from tui.report import render

from .conftest import wait_until
from .test_probes import blocked_of, sessions, snapshot, start_waiting, wait_blocked

pytestmark = pytest.mark.matrix  # the server matrix runs these on every supported major


def test_a_row_wait_names_the_table_and_the_row(db):
    with db.connect() as setup:
        setup.execute("CREATE TABLE accounts (id int PRIMARY KEY, balance int)")
        setup.execute("INSERT INTO accounts SELECT g, 100 FROM generate_series(1, 50) g")
        ctid = setup.execute("SELECT ctid::text FROM accounts WHERE id = 37").fetchone()[0]
    with sessions(db, "qt-row-holder", "qt-row-first", "qt-row-second") as (holder, first, second):
        holder.run("BEGIN")
        holder.run("UPDATE accounts SET balance = 0 WHERE id = 37")
        start_waiting(db, first, "UPDATE accounts SET balance = 1 WHERE id = 37")
        second.start("UPDATE accounts SET balance = 2 WHERE id = 37")
        snap = wait_blocked(db, {first.pid, second.pid}, 2)
        got = blocked_of(snap, {first.pid, second.pid})
        # The first waiter waits for the holder's transaction id: no relation in pg_locks. Its
        # own tuple lock names the table and the row.
        assert got[first.pid].lock_type == "transactionid"  # still what the server says
        assert got[first.pid].relation == "accounts" and got[first.pid].row == ctid
        assert got[first.pid].database == db.name
        # The second queues on that tuple lock: table and row from the lock itself.
        assert got[second.pid].lock_type == "tuple"
        assert got[second.pid].relation == "accounts" and got[second.pid].row == ctid
        assert f"row of accounts {ctid}" in render(snap)


def test_an_insert_waiting_on_a_unique_key_names_the_table(db):
    with db.connect() as setup:
        setup.execute("CREATE TABLE users (email text PRIMARY KEY)")
    with sessions(db, "qt-insert-a", "qt-insert-b") as (a, b):
        a.run("BEGIN")
        a.run("INSERT INTO users VALUES ('ops@example.com')")
        b.start("INSERT INTO users VALUES ('ops@example.com')")  # waits to see whether a commits
        snap = wait_blocked(db, {b.pid}, 1)
        waiter = blocked_of(snap, {b.pid})[b.pid]
        assert waiter.lock_type == "transactionid" and waiter.blocked_by == (a.pid,)
        assert waiter.relation == "users" and waiter.row is None  # no tuple lock: the table it writes


def test_negative_advisory_keys_read_as_the_application_passed_them(db):
    with sessions(db, "qt-adv-h1", "qt-adv-w1", "qt-adv-h2", "qt-adv-w2", "qt-adv-h3", "qt-adv-w3") as (h1, w1, h2, w2, h3, w3):
        h1.run("SELECT pg_advisory_lock(-5)")
        w1.start("SELECT pg_advisory_lock(-5)")
        h2.run("SELECT pg_advisory_lock(-1, 7)")
        w2.start("SELECT pg_advisory_lock(-1, 7)")
        h3.run("SELECT pg_advisory_lock(-9223372036854775808)")  # the smallest bigint
        w3.start("SELECT pg_advisory_lock(-9223372036854775808)")
        snap = wait_blocked(db, {w1.pid, w2.pid, w3.pid}, 3)
        got = blocked_of(snap, {w1.pid, w2.pid, w3.pid})
        assert got[w1.pid].relation == "advisory -5"
        assert got[w2.pid].relation == "advisory (-1, 7)"
        assert got[w3.pid].relation == "advisory -9223372036854775808"
        assert got[w1.pid].root_blocker == h1.pid and got[w2.pid].root_blocker == h2.pid


@contextmanager
def prepared(db, gid: str, *statements: str):
    """A transaction prepared for two-phase commit, rolled back at the end whatever happens (it
    would outlive its session and block the test database's removal)."""
    with db.connect(autocommit=True) as conn:
        conn.execute("BEGIN")
        for statement in statements:
            conn.execute(statement)
        conn.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(gid)))
    try:
        yield
    finally:
        with db.connect(autocommit=True) as conn:
            if conn.execute("SELECT 1 FROM pg_prepared_xacts WHERE gid = %s", (gid,)).fetchone():
                conn.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))


def test_prepared_transactions_are_blockers_of_their_own(db):
    gid1, gid2, idle = f"qt-pay-{db.name}", f"qt-audit-{db.name}", f"qt-idle-{db.name}"
    with db.connect() as setup:
        setup.execute("CREATE TABLE payments (id int PRIMARY KEY, amount int)")
        setup.execute("INSERT INTO payments VALUES (1, 10)")
        setup.execute("CREATE TABLE audit (id int)")
    with prepared(db, gid1, "UPDATE payments SET amount = 11 WHERE id = 1"), \
            prepared(db, gid2, "LOCK TABLE audit IN SHARE MODE"), \
            prepared(db, idle, "SELECT 1"), \
            sessions(db, "qt-prep-row", "qt-prep-table", "qt-prep-behind") as (row_waiter, table_waiter, behind):
        row_waiter.start("UPDATE payments SET amount = 12 WHERE id = 1")
        table_waiter.start("INSERT INTO audit VALUES (1)")  # RowExclusive conflicts with the prepared Share lock
        wait_until(lambda: len(blocked_of(snapshot(db), {row_waiter.pid, table_waiter.pid})) == 2, timeout=15,
                   what="both waiting on prepared transactions")
        behind.start("UPDATE payments SET amount = 13 WHERE id = 1")  # queued behind row_waiter
        snap = wait_blocked(db, {row_waiter.pid, table_waiter.pid, behind.pid}, 3)
        got = blocked_of(snap, {row_waiter.pid, table_waiter.pid, behind.pid})

        # Each prepared transaction is its own blocker; no session is pid 0.
        assert got[row_waiter.pid].blocked_by == () and got[row_waiter.pid].blocked_by_prepared == (gid1,)
        assert got[row_waiter.pid].root_prepared == (gid1,) and got[row_waiter.pid].root_blocker is None
        assert got[table_waiter.pid].blocked_by_prepared == (gid2,) and got[table_waiter.pid].root_prepared == (gid2,)
        assert got[behind.pid].blocked_by == (row_waiter.pid,) and got[behind.pid].root_prepared == (gid1,)
        assert all(0 not in b.blocked_by for b in snap.blocked)
        assert {b.pid for b in snap.blockers}.isdisjoint({0})

        xacts = {p.gid: p for p in snap.prepared_xacts}
        assert xacts[gid1].blocked_count == 2 and xacts[gid2].blocked_count == 1 and xacts[idle].blocked_count == 0
        assert xacts[gid1].owner == "postgres" and xacts[gid1].database == db.name
        assert xacts[gid1].age_s is not None and xacts[gid1].age_s >= 0

        document = json.loads(json.dumps(snap.to_json()))
        assert {p["gid"] for p in document["prepared_xacts"]} >= {gid1, gid2, idle}
        assert all(0 not in b["blocked_by"] for b in document["blocked"])
        text = render(snap)
        assert f"prepared {gid1!r}" in text and "COMMIT PREPARED or ROLLBACK PREPARED" in text


def test_every_root_of_a_session_blocked_behind_two(db):
    with db.connect() as setup:
        setup.execute("CREATE TABLE ledger (id int)")
    with sessions(db, "qt-reader-1", "qt-reader-2", "qt-alter") as (r1, r2, alter):
        for reader in (r1, r2):
            reader.run("BEGIN")
            reader.run("SELECT count(*) FROM ledger")  # AccessShareLock kept: two independent roots
        alter.start("ALTER TABLE ledger ADD COLUMN note text")
        snap = wait_blocked(db, {alter.pid}, 1)
        got = blocked_of(snap, {alter.pid})[alter.pid]
        assert set(got.blocked_by) == {r1.pid, r2.pid}
        assert got.root_blockers == tuple(sorted((r1.pid, r2.pid)))
        assert got.root_blocker == min(r1.pid, r2.pid)  # version 1's single root: the lowest
        assert {b.pid: b.blocked_count for b in snap.blockers if b.pid in (r1.pid, r2.pid)} == {r1.pid: 1, r2.pid: 1}


def test_the_whole_picture_comes_in_one_round_trip(db):
    """Issue 30: the locks probe is one statement. Every part of its picture is here at once: an
    idle root blocker with a chain behind it, a waiter on a prepared transaction, a held and a
    waited-for advisory lock. libpq's own protocol trace counts the round trips; the picture is
    checked against pg_blocking_pids, read by another session right after."""
    from bench.probes import RoundTrips
    from probes.postgres import PostgresProbes, open_probe_connection

    gid = f"qt-trip-{db.name}"
    with db.connect() as setup:
        setup.execute("CREATE TABLE trips (id int PRIMARY KEY, n int)")
        setup.execute("INSERT INTO trips VALUES (1, 0), (2, 0)")
    with prepared(db, gid, "UPDATE trips SET n = 9 WHERE id = 2"), \
            sessions(db, "qt-trip-root", "qt-trip-w1", "qt-trip-w2", "qt-trip-prep", "qt-trip-adv", "qt-trip-advw") as (
                root, w1, w2, on_prepared, adv, adv_waiter):
        root.run("BEGIN")
        root.run("UPDATE trips SET n = 1 WHERE id = 1")
        w1.start("UPDATE trips SET n = 2 WHERE id = 1")
        w2.start("UPDATE trips SET n = 3 WHERE id = 1")
        on_prepared.start("UPDATE trips SET n = 4 WHERE id = 2")
        adv.run("SELECT pg_advisory_lock(4242)")
        adv_waiter.start("SELECT pg_advisory_lock(4242)")
        waiters = {w1.pid, w2.pid, on_prepared.pid, adv_waiter.pid}
        wait_blocked(db, waiters, 4)
        probes = PostgresProbes()
        with open_probe_connection(db.target) as conn, db.connect(autocommit=True) as truth:
            probes.server(conn)
            for _ in range(6):  # past psycopg's prepare threshold: the steady state
                probes.locks(conn)
            with RoundTrips(conn) as trips:
                blocked, blockers, prepared_xacts, app_locks, _cycles = probes.locks(conn)
            servers = dict(truth.execute(
                "SELECT pid, pg_blocking_pids(pid) FROM pg_stat_activity WHERE pid = ANY(%s)", (sorted(waiters),)).fetchall())
        assert trips.count == 1
        got = {b.pid: b for b in blocked if b.pid in waiters}
        assert set(got) == waiters
        for pid in (w1.pid, w2.pid, adv_waiter.pid):
            assert set(got[pid].blocked_by) == set(servers[pid]) - {0}
        assert servers[on_prepared.pid] == [0] and got[on_prepared.pid].blocked_by_prepared == (gid,)
        assert got[w2.pid].root_blockers == (root.pid,) and got[adv_waiter.pid].root_blockers == (adv.pid,)
        roots = {b.pid: b for b in blockers}
        assert roots[root.pid].state == "idle in transaction" and roots[root.pid].blocked_count == 2
        assert roots[root.pid].query == "UPDATE trips SET n = 1 WHERE id = 1"
        assert [p.blocked_count for p in prepared_xacts if p.gid == gid] == [1]
        mine = {(a.pid, a.granted) for a in app_locks if a.resource == "4242"}
        assert mine == {(adv.pid, True), (adv_waiter.pid, False)}
