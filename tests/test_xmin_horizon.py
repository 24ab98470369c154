"""The xmin horizon's holder (issue 25, point 4), against the server's own ground truth.

What holds back the horizon below which VACUUM may remove a queue table's dead rows: a session's
transaction id (an idle-in-transaction writer: backend_xid set, backend_xmin NULL) or snapshot
(a REPEATABLE READ reader), a prepared transaction, a replication slot's xmin (a standby's
hot_standby_feedback). Each case is built for real and checked against what the server itself
says, computed apart from the probe:

- VACUUM VERBOSE's removable cutoff for a table of this database (PostgreSQL 15+: "removable
  cutoff: X"; before: "oldest xmin: X"): the horizon the server really applies to it;
- txid_current_snapshot()'s xmin (the oldest transaction still running, cluster-wide),
  pg_stat_activity's backend_xid and backend_xmin, pg_prepared_xacts' transaction,
  pg_replication_slots' xmin;
- the holder's age in transaction ids, bracketed by txid_current() taken before and after the
  probe (age() counts from the next transaction id).

Sessions of other databases hold back only the shared catalogs' horizon (procarray.c,
ComputeXidHorizons): the test shows it on pg_database's cutoff, and that the probe does not name
them. A logical slot needs wal_level = logical, which a stock server does not have (replica; the
matrix runs these on stock servers): its catalog_xmin is made here by a physical slot's feedback
instead, which is the same field of the same slot (tests/test_replication.py makes a real logical
slot on the embedded server).
"""

from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import psycopg
import pytest
from psycopg import pq, sql
from textual.widgets import Static

from probes.model import Connections, Snapshot
from probes.postgres import PostgresProbes, open_probe_connection
from probes.sampler import Sampler
from tui.backend import DatabaseBackend
from tui.dashboard import QueuetopApp
from tui.report import render
from tui.sample import sample_snapshot
from tui.widgets.panels import ConnectionsPanel

from .conftest import wait_until

pytestmark = pytest.mark.matrix  # the server matrix runs these on every supported major

TABLE = "horizon_t"
XID_MASK = 0xFFFFFFFF


# -- ground truth ------------------------------------------------------------------------------


def next_xid(admin: psycopg.Connection) -> int:
    """A new transaction id (64-bit), committed at once: the next one is above it."""
    return admin.execute("SELECT txid_current()").fetchone()[0]


def oldest_running(admin: psycopg.Connection) -> int:
    """The oldest transaction still running on the whole server (a new snapshot's xmin)."""
    return admin.execute("SELECT txid_snapshot_xmin(txid_current_snapshot())").fetchone()[0]


def removable_cutoff(conn: psycopg.Connection, table: str = TABLE) -> int:
    """The horizon the server applies to `table` now: VACUUM VERBOSE says it (a 32-bit xid)."""
    said: list[str] = []

    def hear(diagnostic: psycopg.errors.Diagnostic) -> None:
        said.append(f"{diagnostic.message_primary or ''}\n{diagnostic.message_detail or ''}")

    conn.add_notice_handler(hear)
    try:
        conn.execute(sql.SQL("VACUUM (VERBOSE) {}").format(sql.Identifier(*table.split("."))))
    finally:
        conn.remove_notice_handler(hear)
    found = re.search(r"(?:removable cutoff|oldest xmin): (\d+)", "\n".join(said))
    assert found, said
    return int(found.group(1))


def activity(admin: psycopg.Connection, pid: int) -> dict:
    row = admin.execute("SELECT state, backend_xid::text::bigint AS xid, backend_xmin::text::bigint AS xmin, backend_type"
                        " FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
    assert row is not None, pid
    return dict(zip(("state", "xid", "xmin", "backend_type"), row, strict=True))


def probe(db, admin: psycopg.Connection) -> tuple[Connections, int, int]:
    """The connections probe's answer, with the transaction ids taken just before and after it."""
    probes = PostgresProbes()
    with open_probe_connection(db.target) as conn:
        probes.server(conn)
        before = next_xid(admin)
        connections = probes.connections(conn)
        after = next_xid(admin)
    return connections, before, after


def assert_age(c: Connections, holder_xid: int, before: int, after: int) -> None:
    """age() counts from the next transaction id at the probe's statement: between the ids taken
    around it."""
    assert c.xmin_holder_age_xids is not None
    assert before + 1 - holder_xid <= c.xmin_holder_age_xids <= after - holder_xid, (c.xmin_holder_age_xids, before, after, holder_xid)


@pytest.fixture
def admin(db) -> Iterator[psycopg.Connection]:
    with db.connect() as conn:
        conn.execute(sql.SQL("CREATE TABLE {} (id int)").format(sql.Identifier(TABLE)))
        yield conn


@contextmanager
def writer(db, name: str = "qt-writer") -> Iterator[tuple[psycopg.Connection, int]]:
    """A READ COMMITTED session that wrote and sits idle in its transaction: a transaction id,
    no snapshot."""
    with db.connect(application_name=name) as conn:
        conn.execute("BEGIN")
        conn.execute(sql.SQL("INSERT INTO {} VALUES (1)").format(sql.Identifier(TABLE)))
        xid = conn.execute("SELECT txid_current()").fetchone()[0]
        yield conn, xid
        conn.execute("ROLLBACK")


@contextmanager
def reader(db, name: str = "qt-reader") -> Iterator[tuple[psycopg.Connection, int]]:
    """A REPEATABLE READ transaction that keeps its snapshot: its xmin, no transaction id."""
    with db.connect(application_name=name) as conn:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        xmin = conn.execute("SELECT txid_snapshot_xmin(txid_current_snapshot())").fetchone()[0]
        yield conn, xmin
        conn.execute("ROLLBACK")


@contextmanager
def prepared(dsn: str, gid: str, table: str | None = TABLE) -> Iterator[int]:
    """A prepared transaction (a write, or none), rolled back at the end whatever happens."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("BEGIN")
        if table is not None:
            conn.execute(sql.SQL("INSERT INTO {} VALUES (2)").format(sql.Identifier(table)))
        xid = conn.execute("SELECT txid_current()").fetchone()[0]
        conn.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(gid)))
        try:
            yield xid
        finally:
            if conn.execute("SELECT 1 FROM pg_prepared_xacts WHERE gid = %s", (gid,)).fetchone():
                conn.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))


class Standby:
    """A standby as the primary sees it: a physical replication connection (a walsender) that
    sends hot_standby_feedback messages, as a standby with hot_standby_feedback = on does. Through
    a slot, the feedback sets the slot's xmin and catalog_xmin; without one, the walsender's own
    xmin (backend_xmin)."""

    def __init__(self, db, slot: str | None, application: str = "qt-standby") -> None:
        self.conn = pq.PGconn.connect(f"host={db.server.socket_dir} user=postgres replication=true "
                                      f"application_name={application}".encode())
        assert self.conn.status == pq.ConnStatus.OK, self.conn.error_message
        self.pid = self.conn.backend_pid
        system = self.conn.exec_(b"IDENTIFY_SYSTEM")
        assert system.status == pq.ExecStatus.TUPLES_OK, self.conn.error_message
        position = system.get_value(0, 2)
        assert position is not None
        slot_clause = f"SLOT {slot} ".encode() if slot else b""
        self.conn.send_query(b"START_REPLICATION " + slot_clause + b"PHYSICAL " + position)
        started = self.conn.get_result()
        assert started is not None and started.status == pq.ExecStatus.COPY_BOTH, self.conn.error_message

    def feedback(self, xmin: int, catalog_xmin: int = 0) -> None:
        """A Hot Standby Feedback message: 'h', the send time, xmin and its epoch, catalog_xmin and its epoch."""
        message = b"h" + struct.pack("!qIIII", 0, xmin & XID_MASK, xmin >> 32, catalog_xmin & XID_MASK, catalog_xmin >> 32)
        assert self.conn.put_copy_data(message) == 1
        assert self.conn.flush() == 0

    def close(self) -> None:
        self.conn.finish()


@contextmanager
def standby(db, admin: psycopg.Connection, *, slot: bool) -> Iterator[tuple[Standby, str | None]]:
    name = f"qt_horizon_{os.getpid()}" if slot else None
    if name:
        admin.execute("SELECT pg_create_physical_replication_slot(%s, true)", (name,))
    walsender = None
    try:
        walsender = Standby(db, name)
        yield walsender, name
    finally:
        if walsender is not None:
            walsender.close()
            admin.execute("SELECT pg_terminate_backend(%s)", (walsender.pid,))
        if name:
            wait_until(lambda: admin.execute("SELECT active_pid IS NULL FROM pg_replication_slots WHERE slot_name = %s",
                                             (name,)).fetchone()[0], what="the slot released")
            admin.execute("SELECT pg_drop_replication_slot(%s)", (name,))


# -- each holder -------------------------------------------------------------------------------


def test_an_idle_in_transaction_writer_without_a_snapshot_holds_the_horizon(db, admin):
    with writer(db) as (conn, xid), reader(db) as (_late, late_xmin):
        pid = conn.info.backend_pid
        seen = wait_until(lambda: (a := activity(admin, pid))["state"] == "idle in transaction" and a, what="idle in transaction")
        assert isinstance(seen, dict)
        assert seen["xid"] == xid & XID_MASK and seen["xmin"] is None  # the case the probe used to miss
        # The server's own answers: the oldest running transaction, and the horizon of this table.
        assert oldest_running(admin) == xid
        assert removable_cutoff(admin) == xid & XID_MASK
        # A later snapshot saw the writer running: its xmin is the writer's xid, the same age. The
        # writer is named: it is the cause.
        assert late_xmin == xid
        c, before, after = probe(db, admin)
        assert (c.xmin_holder_kind, c.xmin_holder_pid, c.xmin_holder_name, c.xmin_holder_application) == \
            ("session", pid, None, "qt-writer")
        assert_age(c, xid, before, after)


def test_a_repeatable_read_reader_with_an_older_snapshot_holds_it(db, admin):
    with reader(db) as (conn, xmin):
        for _ in range(3):
            next_xid(admin)  # the reader's snapshot grows older
        with writer(db) as (_w, xid):
            assert xid > xmin
            pid = conn.info.backend_pid
            assert activity(admin, pid)["xmin"] == xmin & XID_MASK and activity(admin, pid)["xid"] is None
            assert removable_cutoff(admin) == xmin & XID_MASK
            c, before, after = probe(db, admin)
            assert (c.xmin_holder_kind, c.xmin_holder_pid, c.xmin_holder_application) == ("session", pid, "qt-reader")
            assert_age(c, xmin, before, after)


def test_a_prepared_transaction_holds_it_named_by_its_gid(db, admin):
    gid = f"qt-horizon-{db.name}"
    with prepared(db.dsn, gid) as xid:
        listed = admin.execute("SELECT transaction::text::bigint FROM pg_prepared_xacts WHERE gid = %s", (gid,)).fetchone()
        assert listed == (xid & XID_MASK,)
        # Younger: a writer, and a reader whose snapshot saw the prepared transaction running (the
        # same xmin: the prepared transaction, whose id it is, is named).
        with writer(db) as (_w, later), reader(db) as (_r, late_xmin):
            assert later > xid and late_xmin == xid
            assert oldest_running(admin) == xid
            assert removable_cutoff(admin) == xid & XID_MASK
            c, before, after = probe(db, admin)
            assert (c.xmin_holder_kind, c.xmin_holder_name, c.xmin_holder_pid, c.xmin_holder_application) == \
                ("prepared", gid, None, None)
            assert_age(c, xid, before, after)


def feed_back(admin, walsender, slot: str | None, held: int) -> None:
    """The standby's hot_standby_feedback at `held`, seen where it lands: its slot's xmin, or
    (without a slot) its walsender's."""
    walsender.feedback(held)
    if slot:
        wait_until(lambda: admin.execute("SELECT xmin::text::bigint FROM pg_replication_slots WHERE slot_name = %s",
                                         (slot,)).fetchone()[0] == held & XID_MASK, what="the slot's xmin")
    else:
        wait_until(lambda: activity(admin, walsender.pid)["xmin"] == held & XID_MASK, what="the walsender's xmin")


@pytest.mark.parametrize("through_slot", [True, False], ids=["through a slot", "without a slot"])
def test_a_standbys_feedback_holds_it(db, admin, through_slot):
    """A standby's hot_standby_feedback: through its replication slot, the slot's xmin holds every
    database's horizon (and stays when the standby goes); without a slot, the walsender's own
    xmin does (a session of no database)."""
    with standby(db, admin, slot=through_slot) as (walsender, slot):
        held = oldest_running(admin)
        feed_back(admin, walsender, slot, held)
        for _ in range(3):
            next_xid(admin)
        with reader(db) as (_r, later):  # a younger snapshot of this database
            assert later > held
            assert removable_cutoff(admin) == held & XID_MASK
            c, before, after = probe(db, admin)
        assert_age(c, held, before, after)
        if slot:
            assert (c.xmin_holder_kind, c.xmin_holder_name, c.xmin_holder_pid) == ("slot", slot, None)
            # The standby streaming from it, by its name and where it connects from (a Unix socket here).
            assert (c.xmin_holder_application, c.xmin_holder_client) == ("qt-standby", "local")
            walsender.close()  # the standby goes; its slot keeps holding
            wait_until(lambda: admin.execute("SELECT active_pid IS NULL FROM pg_replication_slots WHERE slot_name = %s",
                                             (slot,)).fetchone()[0], what="the slot released")
            assert removable_cutoff(admin) == held & XID_MASK
            c, _before, _after = probe(db, admin)
            assert (c.xmin_holder_kind, c.xmin_holder_name, c.xmin_holder_application) == ("slot", slot, None)
        else:
            # A standby's feedback, named as pg_stat_replication names the standby (its
            # application_name), with its address; not a session with no transaction age.
            assert activity(admin, walsender.pid)["backend_type"] == "walsender"
            standby_name = admin.execute("SELECT application_name FROM pg_stat_replication WHERE pid = %s",
                                         (walsender.pid,)).fetchone()
            assert standby_name == ("qt-standby",)
            assert (c.xmin_holder_kind, c.xmin_holder_pid, c.xmin_holder_name, c.xmin_holder_application,
                    c.xmin_holder_client) == ("standby", walsender.pid, "qt-standby", "qt-standby", "local")
            assert c.xmin_holder_age_s is None  # one probe cycle: no history of transaction ids to date it by


@pytest.mark.parametrize("through_slot", [True, False], ids=["through a slot", "without a slot"])
def test_a_standbys_horizon_is_dated_by_the_probes_clock_of_transaction_ids(db, admin, through_slot):
    """A standby's feedback (or its slot) holds the horizon at a transaction id with no start
    time: the probes, which persist across cycles, read the next transaction id each cycle and
    say when it was the horizon's. Held from the first cycle on: its age is the time since that
    cycle's reading; held from before the first cycle: at least as long as the history."""
    import time

    probes = PostgresProbes()
    with open_probe_connection(db.target) as conn, standby(db, admin, slot=through_slot) as (walsender, slot):
        probes.server(conn)
        before_first = time.monotonic()
        probes.connections(conn)
        after_first = time.monotonic()
        first = probes.xid_clock.last()
        assert first is not None
        held = first[1]  # the next transaction id the first cycle read: the standby holds it from now on
        feed_back(admin, walsender, slot, held)
        for _ in range(3):  # cycles while transactions go on
            next_xid(admin)
            probes.connections(conn)
        next_xid(admin)
        before_last = time.monotonic()
        c = probes.connections(conn)
        after_last = time.monotonic()
        assert c.xmin_holder_kind == ("slot" if slot else "standby") and c.xmin_holder_age_xids is not None
        assert c.xmin_holder_age_xids >= 4
        assert c.xmin_holder_age_s is not None and not c.xmin_holder_age_at_least
        # From the first cycle's reading to the last's.
        assert before_last - after_first - 0.001 <= c.xmin_holder_age_s <= after_last - before_first + 0.001, \
            (c.xmin_holder_age_s, before_last - after_first, after_last - before_first)

        # A dashboard started after the standby began to hold: the horizon is older than its history.
        later = PostgresProbes()
        later.server(conn)
        next_xid(admin)
        started = time.monotonic()
        later.connections(conn)
        after_start = time.monotonic()
        next_xid(admin)
        before_end = time.monotonic()
        c = later.connections(conn)
        ended = time.monotonic()
        assert c.xmin_holder_age_at_least and c.xmin_holder_age_s is not None
        assert before_end - after_start - 0.001 <= c.xmin_holder_age_s <= ended - started + 0.001
        assert "at least" in render(replace(sample_snapshot(), connections=c))


def test_queuetops_own_sessions_are_never_the_oldest_transaction_nor_the_xmin_holder(db, admin):
    """A session of queuetop's own (another dashboard's probe: application_name queuetop-probe...)
    that holds the oldest transaction is left out of both; the workload's next oldest is named."""
    with writer(db, name="queuetop-probe:another-dashboard") as (own, own_xid):
        for _ in range(2):
            next_xid(admin)
        assert removable_cutoff(admin) == own_xid & XID_MASK  # the server's horizon is the monitor's own
        c, _before, _after = probe(db, admin)
        assert (c.xmin_holder_kind, c.xmin_holder_pid, c.oldest_xact_pid) == (None, None, None)
        assert c.by_application.get("queuetop-probe:another-dashboard") == 1  # it takes a connection: counted
        with writer(db, name="qt-workload") as (conn, xid):
            assert xid > own_xid
            c, before, after = probe(db, admin)
            assert (c.xmin_holder_kind, c.xmin_holder_pid, c.xmin_holder_application) == ("session", conn.info.backend_pid,
                                                                                          "qt-workload")
            assert c.oldest_xact_pid == conn.info.backend_pid
            assert_age(c, xid, before, after)
            # The sessions list has it, flagged as queuetop's own (the dashboard hides it until A).
            probes = PostgresProbes()
            with open_probe_connection(db.target) as probe_conn:
                probes.server(probe_conn)
                sessions, _total = probes.sessions(probe_conn)
            mine = next(s for s in sessions if s.pid == own.info.backend_pid)
            assert mine.own and not mine.background
            assert not next(s for s in sessions if s.pid == conn.info.backend_pid).own


@contextmanager
def limited_role(db, admin: psycopg.Connection) -> Iterator[psycopg.Connection]:
    """A session of a role with CONNECT alone: no pg_read_all_stats (nor pg_monitor)."""
    role = f"qt_horizon_role_{os.getpid()}"
    admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    admin.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(sql.Identifier(db.name), sql.Identifier(role)))
    try:
        with psycopg.connect(db.server.uri(db.name, user=role), autocommit=True, application_name="qt-limited") as conn:
            yield conn
    finally:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))
        wait_until(lambda: admin.execute("SELECT count(*) FROM pg_stat_activity WHERE usename = %s", (role,)).fetchone()[0] == 0,
                   what="the role's sessions gone")
        admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_without_pg_read_all_stats_the_oldest_transaction_and_a_hidden_holder_are_unknown(db, admin):
    """A role that cannot see other roles' sessions (no pg_read_all_stats) does not name its own
    oldest transaction as the oldest, nor take the server's holder for none: both are unknown,
    with a note. A holder every role can see (a prepared transaction) is still named."""
    gid = f"qt-hidden-{db.name}"
    with prepared(db.dsn, gid) as prepared_xid, writer(db, name="qt-hidden-writer") as (hidden, hidden_xid), \
            limited_role(db, admin) as limited:
        limited.execute("BEGIN")
        limited.execute("SELECT txid_current()")  # the role's own transaction: the youngest, and visible to it
        own = limited.execute("SELECT xact_start FROM pg_stat_activity WHERE pid = pg_backend_pid()").fetchone()
        assert own is not None and own[0] is not None
        seen = limited.execute("SELECT state, backend_xid FROM pg_stat_activity WHERE pid = %s",
                               (hidden.info.backend_pid,)).fetchone()
        assert seen is not None and seen[0] is None and seen[1] is not None  # its state hidden, its xid not
        probes = PostgresProbes()
        with psycopg.connect(db.server.uri(db.name, user=limited.info.user), autocommit=True,
                             row_factory=psycopg.rows.dict_row, application_name="queuetop-probe") as conn:
            probes.server(conn)
            c = probes.connections(conn)
            assert (c.oldest_xact_age_s, c.oldest_xact_pid, c.oldest_xact_state) == (None, None, None)
            assert c.oldest_xact_unknown is not None and "pg_read_all_stats" in c.oldest_xact_unknown
            # The prepared transaction is the oldest holder, and every role sees it.
            assert prepared_xid < hidden_xid
            assert (c.xmin_holder_kind, c.xmin_holder_name, c.xmin_holder_unknown) == ("prepared", gid, None)
            assert "pg_read_all_stats" in probes.notes["connections"]
            with psycopg.connect(db.dsn, autocommit=True) as owner:
                owner.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))
            # The role's transaction saw the prepared one running (its snapshot's xmin): a new one,
            # which sees the writer running, and is younger than it.
            limited.execute("ROLLBACK")
            limited.execute("BEGIN")
            limited.execute("SELECT txid_current()")
            # Now the oldest holder is the other role's writer, which the role cannot tell apart
            # from a VACUUM: unknown, not a calm "none", nor its own transaction.
            c = probes.connections(conn)
            assert (c.xmin_holder_kind, c.xmin_holder_pid, c.xmin_holder_age_xids) == (None, None, None)
            assert c.xmin_holder_unknown is not None and "pg_read_all_stats" in c.xmin_holder_unknown
            assert c.oldest_xact_unknown is not None
            text = render(replace(sample_snapshot(), connections=c))
            assert "oldest transaction: unknown" in text and "xmin held by: unknown" in text
        limited.execute("ROLLBACK")
        # As the superuser (every session seen): both named.
        c, _before, _after = probe(db, admin)
        assert c.xmin_holder_pid == hidden.info.backend_pid and c.oldest_xact_pid == hidden.info.backend_pid


def test_a_slots_catalog_xmin_holds_the_catalogs_not_the_queue_tables(db, admin):
    """Logical decoding's catalog_xmin (here set by a standby's feedback for its own logical
    slots) holds back the system catalogs only: a queue table's horizon is not held, and the
    probe names nothing."""
    with standby(db, admin, slot=True) as (walsender, slot):
        held = oldest_running(admin)
        walsender.feedback(0, catalog_xmin=held)
        wait_until(lambda: admin.execute("SELECT catalog_xmin::text::bigint, xmin FROM pg_replication_slots WHERE slot_name = %s",
                                         (slot,)).fetchone() == (held & XID_MASK, None), what="the slot's catalog_xmin")
        for _ in range(3):
            next_xid(admin)
        if admin.info.server_version >= 140000:  # before 14, only where wal_level is logical (RelationIsAccessibleInLogicalDecoding)
            assert removable_cutoff(admin, "pg_catalog.pg_class") == held & XID_MASK
        assert removable_cutoff(admin) > held & XID_MASK
        c, _before, _after = probe(db, admin)
        assert (c.xmin_holder_kind, c.xmin_holder_pid, c.xmin_holder_name, c.xmin_holder_age_xids) == (None, None, None, None)


def test_sessions_of_other_databases_hold_only_the_shared_catalogs(db, admin, pg_server):
    """The server keeps another database's transactions out of this database's horizon (they
    hold back only the shared catalogs'): neither its writer nor its prepared transaction is named,
    though both are older than this database's writer."""
    elsewhere = pg_server.uri("postgres")
    with psycopg.connect(elsewhere, autocommit=True, application_name="qt-elsewhere") as other:
        other.execute("CREATE TABLE IF NOT EXISTS horizon_elsewhere (id int)")
        other.execute("BEGIN")
        other.execute("INSERT INTO horizon_elsewhere VALUES (1)")
        theirs = other.execute("SELECT txid_current()").fetchone()[0]
        try:
            with prepared(elsewhere, f"qt-elsewhere-{db.name}", "horizon_elsewhere"):
                for _ in range(3):
                    next_xid(admin)
                assert oldest_running(admin) == theirs  # the oldest running anywhere
                assert removable_cutoff(admin, "pg_catalog.pg_database") == theirs & XID_MASK  # a shared catalog: held
                assert removable_cutoff(admin) > theirs & XID_MASK  # this database's table: not held
                c, _before, _after = probe(db, admin)
                assert (c.xmin_holder_kind, c.xmin_holder_pid, c.xmin_holder_name) == (None, None, None)
                with writer(db) as (conn, ours):
                    assert ours > theirs and removable_cutoff(admin) == ours & XID_MASK
                    c, before, after = probe(db, admin)
                    assert (c.xmin_holder_kind, c.xmin_holder_pid) == ("session", conn.info.backend_pid)
                    assert_age(c, ours, before, after)
        finally:
            other.execute("ROLLBACK")


# -- shown everywhere --------------------------------------------------------------------------


async def test_the_holder_is_named_in_the_json_the_text_and_the_dashboard(db, admin, cli):
    gid = f"qt-shown-{db.name}"
    with prepared(db.dsn, gid):
        for _ in range(2):
            next_xid(admin)
        result = cli("snapshot", "--json", "--dsn", db.dsn)
        assert result.returncode == 0, result.stderr
        c = json.loads(result.stdout)["connections"]
        assert (c["xmin_holder_kind"], c["xmin_holder_name"], c["xmin_holder_pid"]) == ("prepared", gid, None)
        assert c["xmin_holder_age_xids"] >= 2
        result = cli("snapshot", "--dsn", db.dsn)
        assert result.returncode == 0, result.stderr
        assert re.search(rf"xmin held by: prepared transaction '{re.escape(gid)}', \d+ xids old", result.stdout), result.stdout
        app = QueuetopApp(lambda sink: Sampler(db.target, sink, interval_s=0.3), backend=DatabaseBackend(db.target))
        async with app.run_test(size=(220, 50)) as pilot:
            summary = app.query_one(ConnectionsPanel).query_one("#connections-summary", Static)
            # The horizon's age in time before the gid (a figure whole, the name cut last).
            shown = re.compile(rf"xmin \d+\.\ds prepared '{re.escape(gid)}'")
            for _ in range(500):
                await pilot.pause(0.02)
                if shown.search(str(summary.render())):
                    break
            assert shown.search(str(summary.render())), str(summary.render())


def test_a_recording_from_before_the_kinds_still_loads_and_shows_its_session():
    snapshot = sample_snapshot(step=0)
    assert snapshot.connections is not None
    document = json.loads(json.dumps(snapshot.to_json()))
    for key in ("xmin_holder_kind", "xmin_holder_name"):
        del document["connections"][key]
    loaded = Snapshot.from_json(document)
    assert loaded == snapshot and loaded.connections is not None and loaded.connections.xmin_holder_kind is None
    assert "xmin held by: pid 1000 (billing), 5,321 xids old" in render(loaded)
    slot = replace(snapshot, connections=replace(snapshot.connections, xmin_holder_pid=None, xmin_holder_application=None,
                                                 xmin_holder_kind="slot", xmin_holder_name="standby\x1b[2J"))
    assert "xmin held by: slot 'standby\\x1b[2J', 5,321 xids old" in render(slot)  # the name inert


@pytest.mark.parametrize("size", [(80, 24), (100, 30)], ids=["80x24", "100x30"])
async def test_a_standbys_feedback_and_what_is_unknown_are_said_in_the_connections_panel(size):
    """The issue's case: a standby's hot_standby_feedback holds the horizon. Said with the standby's
    name, where it connects from and the horizon's age in time (at least, where it is older than
    the probe's history), beside its age in xids in the text; what privileges hide, as unknown."""
    from tui.sample import SampleSource
    from tui.widgets.panels.base import Panel

    base = sample_snapshot()
    assert base.connections is not None
    standby_c = replace(base.connections, xmin_holder_kind="standby", xmin_holder_pid=314, xmin_holder_name="replica-1",
                        xmin_holder_application="replica-1", xmin_holder_client="10.0.0.7", xmin_holder_age_xids=6603,
                        xmin_holder_age_s=252.0)
    text = render(replace(base, connections=standby_c))
    assert "xmin held by: standby feedback from 'replica-1' at 10.0.0.7 (walsender pid 314), 6,603 xids old, 4m12s old" in text
    at_least = replace(standby_c, xmin_holder_age_at_least=True)
    assert "6,603 xids old, at least 4m12s old" in render(replace(base, connections=at_least))
    unknown = replace(base.connections, oldest_xact_age_s=None, oldest_xact_pid=None, xmin_holder_pid=None,
                      xmin_holder_application=None, xmin_holder_age_xids=None, xmin_holder_kind=None,
                      oldest_xact_unknown="2 other roles' session(s) hidden", xmin_holder_unknown="2 other roles' session(s) hidden")
    # Beside the lock tree the panel is narrow: the age whole, the name as much as fits (the kind's
    # word gives way to it; at 80 columns the age too); zoomed, all of it.
    for connections, said in ((standby_c, re.compile(r"xmin (4m12s )?(standby feedback from )?'repl")),
                              (at_least, re.compile(r"xmin (≥4m12s )?(standby feedback from )?'repl")),
                              (unknown, re.compile(r"oldest (xact )?unknown.*xmin unknown", re.S))):
        app = QueuetopApp(lambda sink, c=connections: SampleSource(sink, [replace(base, connections=c)]))
        async with app.run_test(size=size) as pilot:
            summary = app.query_one(ConnectionsPanel).query_one("#connections-summary", Static)
            for _ in range(200):
                await pilot.pause(0.02)
                if said.search(str(summary.render())):
                    break
            shown = str(summary.render())
            assert said.search(shown), shown
            if connections is standby_c:
                app.query_one(ConnectionsPanel).query_one("#connections-table").focus()
                await pilot.press("z")  # zoomed: room for the standby's address too
                for _ in range(200):
                    await pilot.pause(0.02)
                    if "10.0.0.7" in str(summary.render()):
                        break
                assert "xmin 4m12s standby feedback from 'replica-1' 10.0.0.7" in str(summary.render())
                assert isinstance(app.query_one(ConnectionsPanel), Panel)
