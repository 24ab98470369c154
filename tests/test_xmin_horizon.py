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
them. A logical slot needs wal_level = logical, which neither the embedded server nor a stock one
has (replica): its catalog_xmin is made here by a physical slot's feedback instead, which is the
same field of the same slot.
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


@pytest.mark.parametrize("through_slot", [True, False], ids=["through a slot", "without a slot"])
def test_a_standbys_feedback_holds_it(db, admin, through_slot):
    """A standby's hot_standby_feedback: through its replication slot, the slot's xmin holds every
    database's horizon (and stays when the standby goes); without a slot, the walsender's own
    xmin does (a session of no database)."""
    with standby(db, admin, slot=through_slot) as (walsender, slot):
        held = oldest_running(admin)
        walsender.feedback(held)
        if slot:
            wait_until(lambda: admin.execute("SELECT xmin::text::bigint FROM pg_replication_slots WHERE slot_name = %s",
                                             (slot,)).fetchone()[0] == held & XID_MASK, what="the slot's xmin")
        else:
            wait_until(lambda: activity(admin, walsender.pid)["xmin"] == held & XID_MASK, what="the walsender's xmin")
        for _ in range(3):
            next_xid(admin)
        with reader(db) as (_r, later):  # a younger snapshot of this database
            assert later > held
            assert removable_cutoff(admin) == held & XID_MASK
            c, before, after = probe(db, admin)
        assert_age(c, held, before, after)
        if slot:
            assert (c.xmin_holder_kind, c.xmin_holder_name, c.xmin_holder_pid) == ("slot", slot, None)
            walsender.close()  # the standby goes; its slot keeps holding
            wait_until(lambda: admin.execute("SELECT active_pid IS NULL FROM pg_replication_slots WHERE slot_name = %s",
                                             (slot,)).fetchone()[0], what="the slot released")
            assert removable_cutoff(admin) == held & XID_MASK
            c, _before, _after = probe(db, admin)
            assert (c.xmin_holder_kind, c.xmin_holder_name) == ("slot", slot)
        else:
            assert activity(admin, walsender.pid)["backend_type"] == "walsender"
            assert (c.xmin_holder_kind, c.xmin_holder_pid, c.xmin_holder_name, c.xmin_holder_application) == \
                ("session", walsender.pid, None, "qt-standby")


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
            for _ in range(500):
                await pilot.pause(0.02)
                if f"xmin prepared '{gid}'" in str(summary.render()):
                    break
            assert f"xmin prepared '{gid}'" in str(summary.render())


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
    assert "xmin held by: replication slot 'standby\\x1b[2J', 5,321 xids old" in render(slot)  # the name inert
