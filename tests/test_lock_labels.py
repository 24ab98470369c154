"""What the lock tree says about each wait (issue 31), on real sessions: what the waiter wants
from its own point of view, every holder of a shared row, the parallel workers behind a leader,
a wait cycle as an object of its own, and other databases' relations by name. Each test polls
until the server shows the case, then checks the probe's answer against what the server itself
says (pg_locks, pg_blocking_pids, pg_get_multixact_members, pg_stat_activity), read right after."""

from __future__ import annotations

import json
import threading

import psycopg
import pytest
from psycopg import sql

from dbcore.database import resolve_target
from probes.postgres import PostgresProbes, open_probe_connection
from tui.report import render

from .conftest import PASSWORD, PASSWORD_ROLE, drop_database, wait_until
from .test_probes import blocked_of, sessions, snapshot, start_waiting, wait_blocked

pytestmark = pytest.mark.matrix  # the server matrix runs these on every supported major


def _holders_of_relation(truth, relation: str, modes: tuple[str, ...]) -> set[int]:
    """The sessions holding a lock on `relation` in one of `modes`, as pg_locks says."""
    rows = truth.execute("SELECT DISTINCT pid FROM pg_locks WHERE locktype = 'relation' AND relation = %s::regclass "
                         "AND granted AND mode = ANY(%s)", (relation, list(modes))).fetchall()
    return {r[0] for r in rows}


def test_two_identical_updates_of_a_row_read_the_same(db):
    """Point 1: the first waiter waits on the holder's transaction id, the second on the row's
    tuple lock; both want to update the same row, held by the same session."""
    with db.connect() as setup:
        setup.execute("CREATE TABLE p6 (id int PRIMARY KEY, n int)")
        setup.execute("INSERT INTO p6 VALUES (1, 0), (2, 0)")
        ctid = setup.execute("SELECT ctid::text FROM p6 WHERE id = 1").fetchone()[0]
    with sessions(db, "qt-l-holder", "qt-l-first", "qt-l-second", "qt-l-share") as (holder, first, second, share), \
            db.connect() as truth:
        holder.run("BEGIN")
        holder.run("UPDATE p6 SET n = 1 WHERE id = 1")
        start_waiting(db, first, "UPDATE p6 SET n = 2 WHERE id = 1")
        start_waiting(db, second, "UPDATE p6 SET n = 3 WHERE id = 1", first)
        share.start("SELECT * FROM p6 WHERE id = 1 FOR SHARE")
        snap = wait_blocked(db, {first.pid, second.pid, share.pid}, 3)
        # The row's locker, as the server says: the owner of the transaction id in its xmax.
        xmax = truth.execute("SELECT xmax::text FROM p6 WHERE id = 1").fetchone()[0]
        owner = truth.execute("SELECT pid FROM pg_locks WHERE locktype = 'transactionid' AND transactionid::text = %s "
                              "AND mode = 'ExclusiveLock' AND granted", (xmax,)).fetchone()[0]
        kinds = dict(truth.execute("SELECT pid, locktype FROM pg_locks WHERE NOT granted AND pid = ANY(%s)",
                                   ([first.pid, second.pid],)).fetchall())
    assert owner == holder.pid
    got = blocked_of(snap, {first.pid, second.pid, share.pid})
    # Two internal locks, as the server says (kept as detail) ...
    assert (got[first.pid].lock_type, got[second.pid].lock_type) == (kinds[first.pid], kinds[second.pid]) == ("transactionid", "tuple")
    # ... one thing wanted, held by one session.
    assert got[first.pid].wants == got[second.pid].wants == f"to update a row of p6 {ctid}"
    assert got[first.pid].holders == got[second.pid].holders == (owner,)
    assert got[share.pid].wants == f"to lock a row of p6 {ctid} FOR SHARE" and got[share.pid].holders == (owner,)
    text = render(snap)
    assert text.count(f"wants to update a row of p6 {ctid}") == 2
    assert f"held by {owner}" in text


def test_a_table_lock_is_wanted_for_its_command_and_queued_sessions_say_behind_whom(db):
    """Point 1: "wants ACCESS EXCLUSIVE on t10 to TRUNCATE", held by the reader; a SELECT queued
    behind the TRUNCATE holds nothing up and is held by no one: it queues."""
    with db.connect() as setup:
        setup.execute("CREATE TABLE t10 (id int)")
    with sessions(db, "qt-t-reader", "qt-t-truncate", "qt-t-select") as (reader, truncate, select), db.connect() as truth:
        reader.run("BEGIN")
        reader.run("SELECT count(*) FROM t10")
        start_waiting(db, truncate, "TRUNCATE t10")
        select.start("/* report */ SELECT count(*) FROM t10")
        snap = wait_blocked(db, {truncate.pid, select.pid}, 2)
        holding = _holders_of_relation(truth, "t10", ("AccessShareLock",))
        queued = truth.execute("SELECT pg_blocking_pids(%s)", (select.pid,)).fetchone()[0]
    got = blocked_of(snap, {truncate.pid, select.pid})
    assert got[truncate.pid].wants == "ACCESS EXCLUSIVE on t10 to TRUNCATE"
    assert set(got[truncate.pid].holders) == holding == {reader.pid}
    assert got[select.pid].wants == "ACCESS SHARE on t10 to SELECT"
    assert queued == [truncate.pid] and got[select.pid].blocked_by == (truncate.pid,)
    assert got[select.pid].holders == ()  # the reader's ACCESS SHARE does not conflict: it only queues
    assert got[select.pid].lock_type == "relation" and got[select.pid].mode == "AccessShareLock"
    text = render(snap)
    assert "wants ACCESS EXCLUSIVE on t10 to TRUNCATE" in text and f"queued behind {truncate.pid}" in text


def test_every_locker_of_a_shared_row_is_named_and_each_is_a_root(db):
    """Point 2: an UPDATE waits on a row three sessions hold FOR SHARE (a multixact). The server
    waits for one locker at a time and pg_blocking_pids names one; the probe names all three,
    from the row's multixact, and each is a root. When one commits, the other two remain."""
    with db.connect() as setup:
        setup.execute("CREATE TABLE shared_row (id int PRIMARY KEY, n int)")
        setup.execute("INSERT INTO shared_row VALUES (1, 0)")
    with sessions(db, "qt-m-1", "qt-m-2", "qt-m-3", "qt-m-update") as (s1, s2, s3, update), db.connect() as truth:
        for s in (s1, s2, s3):
            s.run("BEGIN")
            s.run("SELECT * FROM shared_row WHERE id = 1 FOR SHARE")
        update.start("UPDATE shared_row SET n = 1 WHERE id = 1")
        snap = wait_blocked(db, {update.pid}, 1)

        def lockers() -> tuple[set[int], list[int]]:
            members = truth.execute(
                "SELECT l.pid FROM shared_row r, pg_get_multixact_members(r.xmax) m "
                "JOIN pg_locks l ON l.locktype = 'transactionid' AND l.transactionid = m.xid AND l.granted "
                "AND l.mode = 'ExclusiveLock' WHERE r.id = 1").fetchall()
            return {m[0] for m in members}, truth.execute("SELECT pg_blocking_pids(%s)", (update.pid,)).fetchone()[0]

        members, server_says = lockers()
        assert members == {s1.pid, s2.pid, s3.pid} and len(server_says) == 1  # the server names one at a time
        got = blocked_of(snap, {update.pid})[update.pid]
        assert set(got.holders) == set(got.blocked_by) == set(got.root_blockers) == members
        assert got.wants == "to update a row of shared_row (0,1)" and got.holders_note is None
        roots = {b.pid: b for b in snap.blockers}
        assert {pid: roots[pid].blocked_count for pid in members} == dict.fromkeys(members, 1)
        assert all(roots[pid].state == "idle in transaction" for pid in members)

        first = server_says[0]
        next(s for s in (s1, s2, s3) if s.pid == first).run("COMMIT")
        after = wait_until(lambda: (lambda s: s if set(blocked_of(s, {update.pid})[update.pid].holders) == members - {first}
                                    else None)(snapshot(db)), timeout=15, what="the two lockers left")
        members_after, _ = lockers()
        assert members_after == members - {first}
        assert set(blocked_of(after, {update.pid})[update.pid].root_blockers) == members_after


def test_a_lockers_read_that_cannot_be_made_says_why(db):
    """Point 2's limit: a monitoring role without SELECT on the table cannot read the row's
    multixact. The waiter keeps the locker the server names, and the note says why not all."""
    with db.connect() as setup:
        setup.execute("CREATE TABLE secret_row (id int PRIMARY KEY, n int)")
        setup.execute("INSERT INTO secret_row VALUES (1, 0)")
        setup.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(sql.Identifier(db.name), sql.Identifier(PASSWORD_ROLE)))
    target = resolve_target(db.dsn.replace("postgres@", f"{PASSWORD_ROLE}:{PASSWORD}@"))
    with sessions(db, "qt-n-1", "qt-n-2", "qt-n-update") as (s1, s2, update):
        for s in (s1, s2):
            s.run("BEGIN")
            s.run("SELECT * FROM secret_row WHERE id = 1 FOR SHARE")
        update.start("UPDATE secret_row SET n = 1 WHERE id = 1")
        wait_blocked(db, {update.pid}, 1)
        probes = PostgresProbes()
        with open_probe_connection(target) as conn:
            probes.server(conn)
            picture = probes.locks(conn)
    got = {b.pid: b for b in picture.blocked}[update.pid]
    assert len(got.holders) == 1 and got.holders[0] in (s1.pid, s2.pid)
    assert got.holders_note is not None and "no privilege" in got.holders_note
    assert "no privilege" in probes.notes["locks"]


def test_parallel_workers_waiting_behind_their_leader_are_counted(db):
    """Point 3: a parallel query whose leader and workers all wait for a table another session
    holds (each process locks the table when a PARALLEL SAFE function first reads it). From 13
    the workers fold into their leader, counted; on 12 pg_stat_activity has no leader_pid, and
    each worker is a waiting process of its own."""
    with db.connect() as setup:
        setup.execute("CREATE TABLE big (id int)")
        setup.execute("INSERT INTO big SELECT generate_series(1, 20000)")
        setup.execute("ALTER TABLE big SET (parallel_workers = 3)")
        setup.execute("CREATE TABLE guarded (id int)")
        setup.execute("CREATE FUNCTION peek(int) RETURNS boolean LANGUAGE plpgsql PARALLEL SAFE "
                      "AS $$ BEGIN RETURN NOT EXISTS (SELECT 1 FROM guarded WHERE id = $1); END $$")
        version = setup.info.server_version
    with sessions(db, "qt-p-holder", "qt-p-leader") as (holder, leader), db.connect() as truth:
        holder.run("BEGIN")
        holder.run("LOCK TABLE guarded IN ACCESS EXCLUSIVE MODE")
        for setting in ("parallel_setup_cost = 0", "parallel_tuple_cost = 0", "min_parallel_table_scan_size = 0",
                        "max_parallel_workers_per_gather = 3"):
            leader.run(f"SET {setting}")
        leader.start("SELECT count(*) FROM big WHERE peek(id)")

        def waiting_processes() -> set[int] | None:
            pids = {r[0] for r in truth.execute("SELECT pid FROM pg_locks WHERE NOT granted AND relation = 'guarded'::regclass")}
            workers = {r[0] for r in truth.execute("SELECT pid FROM pg_stat_activity WHERE backend_type = 'parallel worker' "
                                                    "AND query = 'SELECT count(*) FROM big WHERE peek(id)'")}
            return pids if leader.pid in pids and workers and workers <= pids else None

        def read_between_two_equal_truths():
            # Workers start one by one: one may still be launching when the first read sees the
            # others waiting. A probe read only counts when the truth is the same on both sides.
            before = waiting_processes()
            if before is None:
                return None
            snap = snapshot(db)
            return (before, snap) if waiting_processes() == before else None

        before, snap = wait_until(read_between_two_equal_truths, timeout=20,
                                  what="the leader and its workers waiting, unchanged across a probe read")
    workers = before - {leader.pid}
    roots = {b.pid: b for b in snap.blockers}
    if version >= 130000:
        got = blocked_of(snap, before)
        assert set(got) == {leader.pid}  # one session
        assert set(got[leader.pid].worker_pids) == workers
        assert roots[holder.pid].blocked_count == 1 and roots[holder.pid].blocked_processes == len(before)
        document = json.loads(json.dumps(snap.to_json()))
        [row] = [b for b in document["blocked"] if b["pid"] == leader.pid]
        assert sorted(row["worker_pids"]) == sorted(workers)
        assert f"1 ({len(before)} processes)" in render(snap)
    else:  # no leader_pid on 12: every waiting process is listed, and counted
        assert set(blocked_of(snap, before)) == before
        assert roots[holder.pid].blocked_count == roots[holder.pid].blocked_processes == len(before)


def test_a_wait_cycle_is_an_object_with_its_members_and_those_waiting_on_it(db):
    """Point 4: two sessions wait for each other's row (a deadlock the server has not broken yet:
    deadlock_timeout is raised for them); a third waits behind one of them, a fourth behind the
    third. The JSON has the cycle, its members as roots of everyone behind it, and blockers."""
    with db.connect() as setup:
        setup.execute("CREATE TABLE ring_rows (id int PRIMARY KEY, n int)")
        setup.execute("INSERT INTO ring_rows VALUES (1, 0), (2, 0), (3, 0)")
    with sessions(db, "qt-c-a", "qt-c-b", "qt-c-c", "qt-c-d") as (a, b, c, d), db.connect() as truth:
        for s in (a, b):
            s.run("SET deadlock_timeout = '120s'")  # the check that would break the cycle comes later
            s.run("BEGIN")
        a.run("UPDATE ring_rows SET n = 1 WHERE id = 1")
        b.run("UPDATE ring_rows SET n = 2 WHERE id = 2")
        c.run("BEGIN")
        c.run("UPDATE ring_rows SET n = 3 WHERE id = 3")
        start_waiting(db, a, "UPDATE ring_rows SET n = 1 WHERE id = 2")  # a waits for b
        start_waiting(db, b, "UPDATE ring_rows SET n = 2 WHERE id = 1", a)  # the cycle
        start_waiting(db, c, "UPDATE ring_rows SET n = 3 WHERE id = 1", a, b)  # behind b, on the row a holds
        d.start("UPDATE ring_rows SET n = 4 WHERE id = 3")  # behind c
        snap = wait_blocked(db, {a.pid, b.pid, c.pid, d.pid}, 4)
        server = dict(truth.execute("SELECT pid, pg_blocking_pids(pid) FROM pg_stat_activity WHERE pid = ANY(%s)",
                                    ([a.pid, b.pid, c.pid, d.pid],)).fetchall())
    assert server[a.pid] == [b.pid] and server[b.pid] == [a.pid]  # the cycle, as the server says it
    assert server[d.pid] == [c.pid]
    document = json.loads(json.dumps(snap.to_json()))
    [cycle] = document["cycles"]
    assert cycle["members"] == sorted([a.pid, b.pid]) and cycle["waiting"] == sorted([c.pid, d.pid])
    assert cycle["wait_s"] is not None and cycle["wait_s"] > 0
    rows = {r["pid"]: r for r in document["blocked"]}
    for pid in (c.pid, d.pid):
        assert rows[pid]["root_blockers"] == sorted([a.pid, b.pid]) and rows[pid]["root_cycles"] == [cycle["id"]]
        assert rows[pid]["in_cycle"] is False and rows[pid]["root_blocker"] == min(a.pid, b.pid)
    assert rows[a.pid]["root_blockers"] == [b.pid] and rows[b.pid]["root_blockers"] == [a.pid]
    assert rows[a.pid]["in_cycle"] and rows[b.pid]["in_cycle"] and rows[a.pid]["root_cycles"] == [cycle["id"]]
    blockers = {r["pid"]: r for r in document["blockers"]}
    assert set(blockers) >= {a.pid, b.pid}
    assert blockers[a.pid]["blocked_count"] == blockers[b.pid]["blocked_count"] == 3  # the other member, c and d
    assert blockers[a.pid]["cycle"] == blockers[b.pid]["cycle"] == cycle["id"]
    assert c.pid not in blockers  # c waits itself: a link of the chain, not its root


def test_a_table_of_another_database_is_named_there_once(db, pg_server):
    """Point 5: a lock in another database names its table as that database does, looked up
    there once and cached; a database that takes no connections keeps the OID, and says why."""
    other = f"{db.name}_elsewhere"
    with psycopg.connect(pg_server.admin_uri, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(other)))
    try:
        uri = pg_server.uri(other)
        with psycopg.connect(uri, autocommit=True) as setup:
            setup.execute("CREATE SCHEMA billing")
            setup.execute("CREATE TABLE billing.audit_log (id int)")
            oid, truth_name = setup.execute("SELECT 'billing.audit_log'::regclass::oid, 'billing.audit_log'::regclass::text").fetchone()
        with psycopg.connect(uri, autocommit=True, application_name="qt-else-holder") as holder, \
                psycopg.connect(uri, autocommit=True, application_name="qt-else-waiter") as waiter:
            holder.execute("BEGIN")
            holder.execute("LOCK TABLE billing.audit_log IN ACCESS EXCLUSIVE MODE")
            thread = threading.Thread(target=lambda: _quietly(waiter, "SELECT count(*) FROM billing.audit_log"), daemon=True)
            thread.start()
            wait_blocked(db, {waiter.info.backend_pid}, 1)
            probes = PostgresProbes()
            with open_probe_connection(db.target) as conn:
                probes.server(conn)
                pictures = [probes.locks(conn) for _ in range(3)]
            got = [{b.pid: b for b in p.blocked}[waiter.info.backend_pid] for p in pictures]
            assert [g.relation for g in got] == [truth_name] * 3 and truth_name == "billing.audit_log"
            assert got[0].database == other and got[0].wants == "ACCESS SHARE on billing.audit_log to SELECT"
            assert probes.elsewhere.lookups == 1  # cached
            assert "(db " + other + ")" in render(snapshot(db))

            with psycopg.connect(pg_server.admin_uri, autocommit=True) as admin:
                admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(sql.Identifier(other)))
            refused = PostgresProbes()
            with open_probe_connection(db.target) as conn:
                refused.server(conn)
                picture = refused.locks(conn)
            assert {b.pid: b for b in picture.blocked}[waiter.info.backend_pid].relation == f"{other}:oid {oid}"
            assert f"relations of database {other} not named" in refused.notes["locks"]
            holder.execute("ROLLBACK")
            thread.join(10)
    finally:
        with psycopg.connect(pg_server.admin_uri, autocommit=True) as admin:
            admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(sql.Identifier(other)))
            drop_database(admin, other)


def _quietly(conn, statement: str) -> None:
    try:
        conn.execute(statement)
    except psycopg.Error:
        pass
