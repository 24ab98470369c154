"""The sessions probe (issue 28, point 1): every backend the role can see, as pg_activity lists
them, checked against the server's own ground truth.

Real sessions are opened (idle, idle in a transaction that wrote, running pg_sleep, waiting on a
row lock another holds, one whose last query is long, one whose query carries terminal escapes),
and every row the probe returns for them is compared with pg_stat_activity and pg_blocking_pids as
the test's own connection reads them just before and just after the probe: states, waits and
texts equal, durations between the two readings, blockers the server's. The xmin horizon's flag is
checked against the transaction ids themselves; the cap against a count of pg_stat_activity; the
cost by the statements the probe's connection sends at 20 and at 150 idle sessions, and by its
plan, which reads no user table at all.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from dbcore.text import inert, inert_line
from probes import postgres
from probes.details import session_details
from probes.model import ServerInfo, SessionSample, Snapshot
from probes.postgres import SESSION_QUERY_CHARS, PostgresProbes, flag_xmin_holder, open_probe_connection, sessions_statement
from probes.sampler import run_cycle
from tui.widgets.panels.sessions import sort_sessions

from .conftest import wait_until

TABLE = "sessions_t"
EPSILON = 1e-6  # extract(epoch ...) of microseconds, as float8

# What pg_stat_activity says of a session, read by the test's own connection.
TRUTH = """
SELECT pid, backend_start, datname, usename, application_name, client_port, host(client_addr) AS client_addr, client_hostname,
       backend_type, state, wait_event_type, wait_event, query,
       extract(epoch FROM now() - xact_start)::float8 AS xact_age_s,
       extract(epoch FROM now() - query_start)::float8 AS query_run_s,
       extract(epoch FROM now() - state_change)::float8 AS state_s,
       backend_xid::text::bigint AS xid, backend_xmin::text::bigint AS xmin,
       CASE WHEN wait_event_type = 'Lock' THEN pg_blocking_pids(pid) END AS blockers
FROM pg_stat_activity WHERE pid = ANY(%s)
"""


def truth(admin: psycopg.Connection, pids: list[int]) -> dict[int, dict]:
    return {row["pid"]: row for row in admin.execute(TRUTH, (pids,)).fetchall()}


@dataclass
class Probed:
    sessions: tuple[SessionSample, ...]
    total: int
    own_pid: int
    notes: str | None
    statements: int

    def of(self, pid: int) -> SessionSample:
        found = [s for s in self.sessions if s.pid == pid]
        assert len(found) == 1, (pid, [s.pid for s in self.sessions])
        return found[0]


def probe(db) -> Probed:
    """The sessions probe's answer, on a probe connection whose statements are counted, the xmin
    horizon's holder flagged as the connections probe names it (connections_and_sessions)."""
    probes = PostgresProbes()
    with open_probe_connection(db.target) as conn:
        probes.server(conn)
        holder = probes.connections(conn).xmin_holder_pid  # the connections' own statements, not counted
        sent = []
        execute = conn.execute

        def counting(query, params=None, **kwargs):
            sent.append(query)
            return execute(query, params, **kwargs)

        conn.execute = counting  # observes the real connection's statements; the server answers
        sessions, total = probes.sessions(conn)
        return Probed(flag_xmin_holder(sessions, holder), total, conn.info.backend_pid, probes.notes.get("sessions"), len(sent))


def probe_between(db, admin: psycopg.Connection, pids: list[int]) -> tuple[dict[int, dict], Probed, dict[int, dict]]:
    before = truth(admin, pids)
    probed = probe(db)
    after = truth(admin, pids)
    return before, probed, after


def within(value: float | None, before: float | None, after: float | None) -> bool:
    if before is None or after is None:
        return value is None and before is None and after is None
    return value is not None and before - EPSILON <= value <= after + EPSILON


@pytest.fixture
def admin(db) -> Iterator[psycopg.Connection]:
    with db.connect(row_factory=dict_row) as conn:
        conn.execute(f"CREATE TABLE {TABLE} (id int PRIMARY KEY, v int)")
        conn.execute(f"INSERT INTO {TABLE} VALUES (1, 0), (2, 0)")
        yield conn


class Background:
    """A statement run in a thread on a session of its own (it blocks: pg_sleep, a lock wait)."""

    def __init__(self, db, application: str, statement: str) -> None:
        self.conn = db.connect(application_name=application)
        self.pid = self.conn.info.backend_pid
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(statement,), daemon=True)
        self.thread.start()

    def _run(self, statement: str) -> None:
        try:
            self.conn.execute(statement)
        except psycopg.errors.QueryCanceled:
            pass
        except BaseException as exc:  # reported by close()
            self.error = exc

    def close(self, admin: psycopg.Connection) -> None:
        if self.thread.is_alive():
            admin.execute("SELECT pg_cancel_backend(%s)", (self.pid,))
        self.thread.join(30)
        self.conn.close()
        assert not self.thread.is_alive() and self.error is None, self.error


@contextmanager
def background(db, admin: psycopg.Connection, application: str, statement: str) -> Iterator[Background]:
    worker = Background(db, application, statement)
    try:
        yield worker
    finally:
        worker.close(admin)


def wait_for(admin: psycopg.Connection, pid: int, condition: str, what: str) -> None:
    wait_until(lambda: admin.execute(f"SELECT 1 FROM pg_stat_activity WHERE pid = %s AND {condition}", (pid,)).fetchone(),
               timeout=15, what=what)


def client_of(row: dict) -> str | None:
    if row["client_port"] == -1:
        return "local"
    return row["client_hostname"] or row["client_addr"]


# -- every kind of session, against pg_stat_activity -------------------------------------------


@pytest.mark.matrix
def test_every_session_is_listed_as_the_server_says(db, admin):
    with ExitStack() as stack:
        idle = stack.enter_context(db.connect(application_name="qt-idle"))
        idle.execute("SELECT 42")
        writer = stack.enter_context(db.connect(application_name="qt-idle-xact"))
        writer.execute("BEGIN")
        writer.execute(f"UPDATE {TABLE} SET v = v + 1 WHERE id = 1")
        writer_xid = writer.execute("SELECT txid_current()").fetchone()[0]
        sleeper = stack.enter_context(background(db, admin, "qt-sleeper", "SELECT pg_sleep(60)"))
        waiter = stack.enter_context(background(db, admin, "qt-waiter", f"UPDATE {TABLE} SET v = v + 10 WHERE id = 1"))
        stack.callback(writer.execute, "ROLLBACK")  # before the waiter's close: it lets the waiter finish
        wait_for(admin, sleeper.pid, "state = 'active' AND query LIKE '%%pg_sleep%%'", "the sleeper to run")
        wait_for(admin, waiter.pid, "cardinality(pg_blocking_pids(pid)) > 0", "the waiter to wait on the writer's row")
        writer_pid, idle_pid = writer.info.backend_pid, idle.info.backend_pid
        pids = [idle_pid, writer_pid, sleeper.pid, waiter.pid]

        before, probed, after = probe_between(db, admin, pids)

        assert probed.statements == 1
        assert probed.own_pid not in {s.pid for s in probed.sessions}  # the probe leaves itself out
        for pid in pids:
            row, b, a = probed.of(pid), before[pid], after[pid]
            for field, column in (("database", "datname"), ("user", "usename"), ("application", "application_name"),
                                  ("backend_type", "backend_type"), ("state", "state"), ("wait_event_type", "wait_event_type"),
                                  ("wait_event", "wait_event"), ("query", "query")):
                assert getattr(row, field) == b[column] == a[column], (pid, field, getattr(row, field), b[column], a[column])
            assert row.client == client_of(b) == "local"  # the tests connect through the socket
            assert within(row.xact_age_s, b["xact_age_s"], a["xact_age_s"]), (pid, row.xact_age_s, b, a)
            idle_now = b["state"].startswith("idle")
            assert within(row.query_age_s, b["state_s" if idle_now else "query_run_s"], a["state_s" if idle_now else "query_run_s"])
            assert row.blocked_by == tuple(b["blockers"] or ()) == tuple(a["blockers"] or ()), (pid, row.blocked_by, b, a)
            assert row.query_is_cut is False and row.leader_pid is None
            # Its identity: the pid and when its backend started, as the server says it.
            assert row.backend_start == b["backend_start"] == a["backend_start"] is not None
            assert row.identity == (pid, b["backend_start"]) and not row.own and not row.background

        assert probed.of(idle_pid).state == "idle" and probed.of(idle_pid).xact_age_s is None
        assert probed.of(writer_pid).state == "idle in transaction" and probed.of(writer_pid).xact_age_s is not None
        assert probed.of(sleeper.pid).wait_event_type != "Lock" and probed.of(sleeper.pid).blocked_by == ()
        assert probed.of(waiter.pid).wait_event_type == "Lock" and probed.of(waiter.pid).blocked_by == (writer_pid,)

        # The xmin horizon's holder: the writer's transaction id is the oldest of this database's
        # ids and snapshots (the others' snapshots saw it running), and the one flagged.
        this_db = admin.execute("SELECT backend_xid::text::bigint AS xid, backend_xmin::text::bigint AS xmin FROM pg_stat_activity"
                                " WHERE datname = current_database() AND pid <> pg_backend_pid()").fetchall()
        oldest = min(v for r in this_db for v in (r["xid"], r["xmin"]) if v is not None)
        assert before[writer_pid]["xid"] == oldest == writer_xid & 0xFFFFFFFF
        assert [s.pid for s in probed.sessions if s.xmin_holder] == [writer_pid]

        # The server's own processes are listed too: no client, most without a database.
        checkpointer = [s for s in probed.sessions if s.backend_type == "checkpointer"]
        assert len(checkpointer) == 1 and checkpointer[0].client is None and checkpointer[0].database is None
        assert checkpointer[0].background and not checkpointer[0].own  # behind the Sessions panel's A

        # The oldest transaction first; sessions without one after.
        ages = [s.xact_age_s for s in probed.sessions]
        with_xact = [age for age in ages if age is not None]
        assert ages[: len(with_xact)] == with_xact and with_xact == sorted(with_xact, reverse=True)
        # Exactly the Sessions panel's default order (then the longest query or idle time, then the
        # pid), which the panel then does not sort again.
        assert postgres.PostgresProbes.SESSIONS_IN_ORDER
        ordered = list(probed.sessions)
        sort_sessions(ordered, "xact")
        assert [s.pid for s in ordered] == [s.pid for s in probed.sessions]
        assert probed.total == len(probed.sessions) and probed.notes is None


@pytest.mark.matrix
def test_a_long_query_is_cut_and_whole_in_the_session_details(db, admin):
    long_query = "SELECT 1 AS one /* " + "padding " * 80 + "*/"
    assert len(long_query) > SESSION_QUERY_CHARS
    with db.connect(application_name="qt-long") as conn:
        conn.execute(long_query)
        pid = conn.info.backend_pid
        before, probed, after = probe_between(db, admin, [pid])
        row = probed.of(pid)
        assert before[pid]["query"] == long_query == after[pid]["query"]
        assert row.query == long_query[:SESSION_QUERY_CHARS] and row.query_is_cut is True
        with open_probe_connection(db.target) as probe_conn:
            assert session_details(probe_conn, pid)["session"]["query"] == long_query


@pytest.mark.matrix
def test_the_list_is_capped_and_says_how_many_there_were(db, admin, monkeypatch):
    monkeypatch.setattr(postgres, "SESSIONS_CAP", 3)
    with ExitStack() as stack:
        holders = []
        for n in range(4):  # four open transactions, begun one after the other
            conn = stack.enter_context(db.connect(application_name=f"qt-xact-{n}"))
            conn.execute("BEGIN")
            conn.execute("SELECT 1")
            stack.callback(conn.execute, "ROLLBACK")
            holders.append(conn.info.backend_pid)
        others = "SELECT pid FROM pg_stat_activity WHERE pid <> pg_backend_pid()"

        def counted() -> Probed | None:
            """The probe, with the server's sessions read before and after it: its total is every
            session but its own, the test's among them. Background workers (autovacuum) come and
            go: read again until the sessions were the same before and after and the count holds."""
            before = {row["pid"] for row in admin.execute(others)}
            probed = probe(db)
            after = {row["pid"] for row in admin.execute(others)} - {probed.own_pid}  # it may still be exiting
            return probed if before == after and probed.total == len(before) + 1 else None

        probed = wait_until(counted, timeout=15, what="the probe's total to match pg_stat_activity's count")
        assert isinstance(probed, Probed)
        assert len(probed.sessions) == 3 and probed.statements == 1
        assert [s.pid for s in probed.sessions] == holders[:3]  # the oldest transactions
        assert probed.notes is not None and f"3 of {probed.total:,} sessions listed" in probed.notes


@pytest.mark.matrix
def test_hostile_text_is_kept_exact_and_shown_inert(db, admin):
    # application_name is cleaned by the server itself (non-printable ASCII becomes '?', or an
    # escape from 16 on); a query's text is kept as sent, escapes and all.
    hostile_app = "qt-\x1b]2;pwned\x07\x1b[2J\u202e"
    hostile_query = "SELECT '\x1b]2;pwned\x07' AS title, '\x1b[2J\r\x08\u202eevil' AS screen, '[/]' AS markup"
    with db.connect(application_name=hostile_app) as conn:
        conn.execute(hostile_query)
        pid = conn.info.backend_pid
        before, probed, after = probe_between(db, admin, [pid])
        row = probed.of(pid)
        assert row.application == before[pid]["application_name"] == after[pid]["application_name"]
        assert row.query == hostile_query == before[pid]["query"]
        snapshot = Snapshot(taken_at=datetime.now(UTC), server=ServerInfo(dialect="postgresql", version=None, database=db.name),
                            probes={}, sessions=probed.sessions, sessions_total=probed.total)
        text = json.dumps(snapshot.to_json())
        assert "\x1b" not in text and "\x07" not in text and "\r" not in text  # JSON escapes them
        assert Snapshot.from_json(json.loads(text)).sessions == probed.sessions  # and keeps them exact
        for shown in (inert(row.application), inert_line(row.query), inert_line(row.query, 40)):
            assert not any(ord(c) < 0x20 or ord(c) == 0x7F or c == "\u202e" for c in shown), shown


# -- the whole cycle, and the cost -------------------------------------------------------------


@pytest.mark.matrix
def test_a_cycle_and_its_json_carry_the_sessions(db, admin):
    with db.connect(application_name="qt-cycle") as conn:
        conn.execute("SELECT 1")
        snapshot = run_cycle(db.target)
        assert snapshot.probes["connections"].error is None  # the connections probe reads the sessions
        assert conn.info.backend_pid in {s.pid for s in snapshot.sessions}
        assert snapshot.sessions_total == len(snapshot.sessions)
        document = json.loads(json.dumps(snapshot.to_json()))
        assert document["sessions_total"] == len(document["sessions"])
        assert {"pid", "database", "user", "application", "client", "backend_type", "state", "xact_age_s", "query_age_s",
                "wait_event_type", "wait_event", "blocked_by", "xmin_holder", "leader_pid", "query",
                "query_is_cut", "backend_start"} == set(document["sessions"][0])
        assert Snapshot.from_json(document) == snapshot  # backend_start too: an aware time, back as it was
        mine = next(s for s in document["sessions"] if s["pid"] == conn.info.backend_pid)
        started = conn.execute("SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()").fetchone()[0]
        assert datetime.fromisoformat(mine["backend_start"].replace("Z", "+00:00")) == started
    # A recording made before backend_start was read: its sessions load without it.
    older = {**document, "sessions": [{k: v for k, v in s.items() if k != "backend_start"} for s in document["sessions"]]}
    assert all(s.backend_start is None for s in Snapshot.from_json(older).sessions)
    # A recording made before the sessions probe existed has neither key: it still loads.
    old = {key: value for key, value in document.items() if key not in ("sessions", "sessions_total")}
    loaded = Snapshot.from_json(old)
    assert loaded.sessions == () and loaded.sessions_total is None and loaded.unknown_list("sessions") is None


def test_the_cost_is_one_statement_whatever_the_number_of_sessions(db, admin):
    """At 20 and at 150 idle sessions: one statement, every session listed, and a plan that reads
    the activity array and the catalogs only (no user table: the queues' depth is no factor)."""
    opened: list[psycopg.Connection] = []
    with ExitStack() as stack:
        for size in (20, 150):
            while len(opened) < size:
                opened.append(stack.enter_context(db.connect(application_name="qt-idle-many")))
            probed = probe(db)
            assert probed.statements == 1
            assert sum(1 for s in probed.sessions if s.application == "qt-idle-many") == size
    with open_probe_connection(db.target) as conn:
        plan = conn.execute(sql.SQL("EXPLAIN (FORMAT JSON) ") + sessions_statement(conn.info.server_version),
                            {"cap": postgres.SESSIONS_CAP, "query_chars": SESSION_QUERY_CHARS,
                             "pile_up": postgres.PILE_UP_WAITERS}).fetchone()
    relations = set()

    def walk(node: dict) -> None:
        if "Relation Name" in node:
            relations.add(node["Relation Name"])
        for child in node.get("Plans", ()):
            walk(child)

    walk(next(iter(plan.values()))[0]["Plan"])
    assert relations <= {"pg_database", "pg_authid"}, relations
