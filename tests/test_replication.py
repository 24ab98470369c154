"""Replication and connections near the limit (issue 44, points 5 and 6), on real servers.

- The replication probe against the server's own views, read right before and after it: an
  inactive physical slot retaining WAL, an active one a replication connection streams from (its
  standby's feedback: the slot's xmin), a logical slot retaining the WAL written after it, a real
  hot standby (pg_basebackup) with its name, address and lag; what a role without pg_monitor sees
  (the standbys listed, their state and lag unknown, never 0). The WAL figures are checked against
  what was written: a slot keeps at least the WAL written since it was made.
- `snapshot --json`'s `replication` keys, a recording's round trip, the metrics the exporter
  serves, the Replication panel (shown only when there is something to show; at 80 columns a
  column left out and said so).
- Connections near the limit: a private server with a small max_connections, filled with real
  sessions: the usable limit (max_connections less superuser_reserved_connections and
  reserved_connections) is where an ordinary role is refused; at 90 % of it the Connections panel
  warns, the metric says it and a queue with ready work and no consumer names the cause; below,
  nothing.

The matrix (`pytest --server MAJOR -m matrix`) runs the slot and standby columns on every major.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace

import psycopg
import pytest
from psycopg import sql
from textual.widgets import Static

from dbcore.database import resolve_target
from probes.model import ProbeStatus, Replication, Snapshot
from probes.postgres import PostgresProbes, open_probe_connection
from probes.prometheus import families
from probes.sampler import run_cycle
from queues.table_queue import TableQueue
from tui import format as fmt
from tui.dashboard import QueuetopApp
from tui.report import render
from tui.sample import SampleSource
from tui.widgets.keyed_table import KeyedTable
from tui.widgets.panels import ConnectionsPanel, ReplicationPanel

from .conftest import Database, PrivateServer, wait_until
from .test_standby_feedback import _can_connect, real_standby
from .test_xmin_horizon import XID_MASK, Standby, limited_role, next_xid

STANDBY_KEYS = {"application", "client", "state", "sync_state", "write_lag_s", "flush_lag_s", "replay_lag_s", "replay_lag_bytes"}
SLOT_KEYS = {"name", "type", "active", "retained_wal_bytes", "xmin_age", "catalog_xmin_age"}


# -- the server's own figures -------------------------------------------------------------------


def lsn(text: str) -> int:
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)


def slot_truth(admin: psycopg.Connection, name: str) -> dict:
    row = admin.execute(
        "SELECT slot_type, active, database::text, plugin::text, pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint,"
        " age(xmin), age(catalog_xmin) FROM pg_replication_slots WHERE slot_name = %s", (name,)).fetchone()
    assert row is not None, name
    return dict(zip(("type", "active", "database", "plugin", "retained", "xmin_age", "catalog_xmin_age"), row, strict=True))


def standby_truth(admin: psycopg.Connection, pid: int) -> dict:
    row = admin.execute(
        "SELECT application_name, client_port, state, sync_state, extract(epoch FROM replay_lag)::float8,"
        " pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)::bigint FROM pg_stat_replication WHERE pid = %s", (pid,)).fetchone()
    assert row is not None, pid
    return dict(zip(("application", "client_port", "state", "sync_state", "replay_lag_s", "replay_lag_bytes"), row, strict=True))


def probe_between(db: Database, admin: psycopg.Connection, truth, probes: PostgresProbes | None = None):
    """The replication probe, and the server's figures read right before and after it (`truth`:
    admin -> value): polled until before and after agree (nothing moved meanwhile), so the probe
    must have read that very value."""
    probes = probes or PostgresProbes()
    with open_probe_connection(db.target) as conn:
        probes.server(conn)

        def steady():
            before = truth(admin)
            replication = probes.replication(conn)
            after = truth(admin)
            return (replication, after) if before == after else None

        found = wait_until(steady, timeout=30, what="the server's figures steady around the probe")
    assert isinstance(found, tuple)
    return found


@pytest.fixture
def admin(db) -> Iterator[psycopg.Connection]:
    with db.connect(application_name="qt-replication-admin") as conn:
        yield conn


@contextmanager
def physical_slot(admin: psycopg.Connection, name: str) -> Iterator[str]:
    """An inactive physical slot that reserves WAL from now on."""
    admin.execute("SELECT pg_create_physical_replication_slot(%s, true)", (name,))
    try:
        yield name
    finally:
        wait_until(lambda: admin.execute("SELECT active_pid IS NULL FROM pg_replication_slots WHERE slot_name = %s",
                                         (name,)).fetchone()[0], what="the slot released")
        admin.execute("SELECT pg_drop_replication_slot(%s)", (name,))


class ReportingStandby(Standby):
    """A replication connection that also reports how far it wrote, flushed and replayed (a
    Standby Status Update), as a standby's walreceiver does."""

    def report(self, position: int) -> None:
        message = b"r" + struct.pack("!QQQqB", position, position, position, 0, 0)
        assert self.conn.put_copy_data(message) == 1
        assert self.conn.flush() == 0


@contextmanager
def streaming(db: Database, admin: psycopg.Connection, slot: str | None, application: str) -> Iterator[ReportingStandby]:
    walsender = ReportingStandby(db, slot, application=application)
    try:
        yield walsender
    finally:
        walsender.close()
        admin.execute("SELECT pg_terminate_backend(%s)", (walsender.pid,))
        wait_until(lambda: not admin.execute("SELECT 1 FROM pg_stat_replication WHERE pid = %s", (walsender.pid,)).fetchone(),
                   what="the walsender gone")


def write_wal(admin: psycopg.Connection, rows: int = 2000) -> None:
    admin.execute("CREATE TABLE IF NOT EXISTS replication_t (id int, body text)")
    admin.execute("INSERT INTO replication_t SELECT g, repeat('x', 400) FROM generate_series(1, %s) AS g", (rows,))


# -- slots and standbys on every major ----------------------------------------------------------


@pytest.mark.matrix
def test_slots_and_a_standby_as_the_server_shows_them(db, admin):
    """An inactive physical slot keeps the WAL written since it was made; an active one, which a
    replication connection streams from, carries its standby's feedback (xmin) and its name and
    progress in pg_stat_replication: each figure the server's own, read around the probe."""
    pid = os.getpid()
    idle_name, busy_name, application = f"qt_idle_{pid}", f"qt_busy_{pid}", f"qt-stream-{pid}"
    with physical_slot(admin, idle_name), physical_slot(admin, busy_name), \
            streaming(db, admin, busy_name, application) as walsender:
        made, busy_made = (lsn(admin.execute("SELECT restart_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
                                             (slot,)).fetchone()[0]) for slot in (idle_name, busy_name))
        write_wal(admin)
        written = lsn(admin.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])
        # The standby's feedback (its oldest snapshot) lands on its slot; its progress on its walsender.
        held = next_xid(admin)
        walsender.feedback(held)
        walsender.report(busy_made)  # it has everything up to where its slot began
        wait_until(lambda: admin.execute("SELECT xmin::text::bigint FROM pg_replication_slots WHERE slot_name = %s",
                                         (busy_name,)).fetchone()[0] == held & XID_MASK, what="the slot's xmin")
        wait_until(lambda: admin.execute("SELECT replay_lsn IS NOT NULL FROM pg_stat_replication WHERE pid = %s",
                                         (walsender.pid,)).fetchone()[0], what="the standby's progress")

        def truth(a):
            return slot_truth(a, idle_name), slot_truth(a, busy_name), standby_truth(a, walsender.pid)

        replication, (idle, busy, standby) = probe_between(db, admin, truth)
        assert replication.standbys_unknown is None
        slots = {s.name: s for s in replication.slots}
        probed = slots[idle_name]
        assert (probed.type, probed.active, probed.active_pid, probed.database, probed.plugin) == ("physical", False, None, None, None)
        assert probed.retained_wal_bytes == idle["retained"] and probed.retained_wal_bytes >= written - made  # what was written since
        assert (probed.xmin_age, probed.catalog_xmin_age) == (None, None)
        assert probed.wal_status == ("reserved" if admin.info.server_version >= 130000 else None)
        probed = slots[busy_name]
        assert (probed.type, probed.active, probed.active_pid) == ("physical", True, walsender.pid)
        assert probed.xmin_age == busy["xmin_age"] and probed.xmin_age >= 1 and probed.catalog_xmin_age is None
        assert probed.retained_wal_bytes == busy["retained"]
        (seen,) = [s for s in replication.standbys if s.pid == walsender.pid]
        assert standby["state"] in ("streaming", "catchup") and standby["client_port"] == -1
        assert (seen.application, seen.client, seen.state, seen.sync_state) == (
            application, "local", standby["state"], standby["sync_state"])
        assert seen.replay_lag_bytes == standby["replay_lag_bytes"] and seen.replay_lag_bytes >= written - busy_made
        # Behind, and the server measured no lag yet: unknown, not 0; a lag it measured, as it is.
        assert seen.replay_lag_s == standby["replay_lag_s"]


@pytest.mark.matrix
def test_without_pg_monitor_the_standbys_are_listed_with_their_state_and_lag_unknown(db, admin):
    """pg_stat_replication shows a role without pg_read_all_stats each standby's name and nothing
    else: the probe lists it with its state, address and lag unknown (None, a note why), never a
    calm 0; the slots every role may read are whole. With pg_monitor, everything."""
    name, application = f"qt_hidden_{os.getpid()}", f"qt-hidden-{os.getpid()}"
    with physical_slot(admin, name), streaming(db, admin, name, application) as walsender, \
            limited_role(db, admin) as limited:
        walsender.report(lsn(admin.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]))
        role = limited.info.user
        target = resolve_target(db.server.uri(db.name, user=role))
        assert target is not None
        probes = PostgresProbes()
        with open_probe_connection(target) as conn:
            probes.server(conn)
            replication = probes.replication(conn)
            (seen,) = [s for s in replication.standbys if s.pid == walsender.pid]
            assert seen.application == application
            assert (seen.client, seen.state, seen.sync_state, seen.write_lag_s, seen.flush_lag_s, seen.replay_lag_s,
                    seen.replay_lag_bytes) == (None,) * 7
            assert replication.standbys_unknown is not None and "pg_read_all_stats" in replication.standbys_unknown
            assert "pg_read_all_stats" in probes.notes["replication"]
            (slot,) = [s for s in replication.slots if s.name == name]
            assert slot.active and slot.retained_wal_bytes is not None and slot.retained_wal_bytes >= 0
            # The whole cycle as that role: counted, its lag absent from the metrics (not 0), the
            # note served; on the dashboard its state `hidden`, its figures `?`, the border says why.
            snapshot = run_cycle(target)
            assert snapshot.probes["replication"].error is None and snapshot.probes["replication"].notes
            metrics = _samples(snapshot)
            assert metrics[("queuetop_standbys", ("",))] >= 1 and metrics[("queuetop_probe_note", ("", "replication"))] == 1
            assert not [labels for n, labels in metrics if n.startswith("queuetop_standby_replay") and labels[1] == application]
            assert _hidden_standby_line(snapshot, application) == ("hidden", "?", "?")
            admin.execute(sql.SQL("GRANT pg_monitor TO {}").format(sql.Identifier(role)))
            probes.notes.clear()
            replication = probes.replication(conn)
            (seen,) = [s for s in replication.standbys if s.pid == walsender.pid]
            assert (seen.client, seen.state) == ("local", admin.execute(
                "SELECT state FROM pg_stat_replication WHERE pid = %s", (walsender.pid,)).fetchone()[0])
            assert seen.replay_lag_bytes is not None and replication.standbys_unknown is None and "replication" not in probes.notes


def _hidden_standby_line(snapshot: Snapshot, application: str) -> tuple[str, str, str]:
    """The Replication panel's state, lag and WAL of the standby `application`, once the border
    says its details are hidden."""
    import asyncio

    async def run() -> tuple[str, str, str]:
        app = QueuetopApp(lambda sink: SampleSource(sink, [snapshot]))
        async with app.run_test(size=(160, 45)) as pilot:
            panel = app.query_one(ReplicationPanel)
            for _ in range(200):
                await pilot.pause(0.02)
                if "pg_monitor" in str(panel.border_subtitle):
                    break
            assert "pg_monitor" in str(panel.border_subtitle)
            (line,) = [tuple(map(str, cells)) for key, cells in panel.query_one(KeyedTable).full_rows().items()
                       if key.startswith("standby:") and str(cells[0]) == application]
            return line[2], line[3], line[4]

    return asyncio.run(run())


# -- a logical slot ------------------------------------------------------------------------------


def test_a_logical_slot_retains_the_wal_written_after_it(db, admin):
    """A logical slot (test_decoding where the server has it; the embedded server's build has
    only pgoutput, the built-in plugin) nobody consumes keeps the WAL written after it and holds
    the catalogs' horizon (catalog_xmin), not the tables' (xmin); advanced, it keeps less."""
    name = f"qt_logical_{os.getpid()}"
    admin.execute("SET statement_timeout = '60s'")  # making it waits for running transactions: fail, never hang
    try:
        admin.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (name,))
        plugin = "test_decoding"
    except psycopg.errors.UndefinedFile:
        admin.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (name,))
        plugin = "pgoutput"
    try:
        made = lsn(admin.execute("SELECT restart_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (name,)).fetchone()[0])
        write_wal(admin, 4000)  # about 2 MB
        written = lsn(admin.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])
        replication, truth = probe_between(db, admin, lambda a: slot_truth(a, name))
        (slot,) = [s for s in replication.slots if s.name == name]
        assert (slot.type, slot.active, slot.database, slot.plugin) == ("logical", False, db.name, plugin) == (
            truth["type"], truth["active"], truth["database"], truth["plugin"])
        assert slot.retained_wal_bytes == truth["retained"] and slot.retained_wal_bytes >= written - made >= 1_000_000
        assert slot.xmin_age is None and slot.catalog_xmin_age == truth["catalog_xmin_age"] and slot.catalog_xmin_age >= 1
        assert slot.wal_status == "reserved"
        # Consumed up to now (advanced past a checkpoint's snapshot of running transactions, from
        # which decoding may restart): it keeps less, as the server says.

        def advanced() -> bool:
            admin.execute("CHECKPOINT")
            admin.execute("SELECT pg_replication_slot_advance(%s, pg_current_wal_lsn())", (name,))
            return slot_truth(admin, name)["retained"] < slot.retained_wal_bytes

        wait_until(advanced, timeout=30, what="the slot's restart point moved")
        replication, truth = probe_between(db, admin, lambda a: slot_truth(a, name))
        (advanced,) = [s for s in replication.slots if s.name == name]
        assert advanced.retained_wal_bytes == truth["retained"] < slot.retained_wal_bytes
    finally:
        admin.execute("SELECT pg_drop_replication_slot(%s)", (name,))


# -- a real standby: the snapshot, its JSON, the metrics and the panel ----------------------------


def test_a_real_standby_in_the_snapshot_its_json_the_metrics_and_the_panel(db, admin, pg_server, tmp_path):
    """A hot standby made with pg_basebackup streams from the test server: the snapshot names it
    as pg_stat_replication does, with where it connects from and how far behind it is; the JSON
    has the spec's keys and a recording reads it back equal; the exporter serves its lag and the
    slots'; the Replication panel shows one line for it and one per slot. On the standby itself
    the probe works too (no pg_current_wal_lsn() there)."""
    name = f"qt-real-{os.getpid()}"
    slot_name = f"qt_real_idle_{os.getpid()}"
    with real_standby(pg_server, tmp_path, name) as socket_dir, physical_slot(admin, slot_name):
        pid = wait_until(lambda: (admin.execute("SELECT pid FROM pg_stat_replication WHERE application_name = %s AND state = "
                                                "'streaming'", (name,)).fetchone() or [None])[0],
                         timeout=60, what="the standby streaming")
        write_wal(admin, 500)

        def caught_up(a):
            truth = standby_truth(a, pid)
            return truth if truth["replay_lag_bytes"] == 0 else None

        def probed_caught_up():
            found = probe_between(db, admin, lambda a: caught_up(a))
            return found if found[1] is not None else None

        replication, truth = wait_until(probed_caught_up, timeout=60, what="the standby caught up around the probe")
        (seen,) = [s for s in replication.standbys if s.pid == pid]
        assert (seen.application, seen.client, seen.state, seen.sync_state) == (name, "local", "streaming", "async")
        assert seen.replay_lag_bytes == truth["replay_lag_bytes"] == 0
        # Caught up: the server's last measured lag, or, once it shows none, 0 (everything replayed).
        assert seen.replay_lag_s == (truth["replay_lag_s"] if truth["replay_lag_s"] is not None else 0.0)
        assert seen.replay_lag_s is not None and 0 <= seen.replay_lag_s < 60

        # On the standby itself (in recovery: pg_current_wal_lsn() fails there) the probe works, a
        # slot's WAL counted from what the standby received or replayed.
        on_standby = f"postgresql://postgres@/{db.name}?host={socket_dir}"
        wait_until(lambda: _can_connect(on_standby), timeout=60, what="the test database on the standby")
        with psycopg.connect(on_standby, autocommit=True) as standby_admin:
            standby_admin.execute("SELECT pg_create_physical_replication_slot(%s, true)", (slot_name,))
            standby_target = resolve_target(on_standby)
            assert standby_target is not None
            probes = PostgresProbes()
            with open_probe_connection(standby_target) as conn:
                probes.server(conn)

                def standby_slot():
                    truth = standby_admin.execute(
                        "SELECT pg_wal_lsn_diff(greatest(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn()), restart_lsn)::bigint"
                        " FROM pg_replication_slots WHERE slot_name = %s", (slot_name,)).fetchone()[0]
                    found = probes.replication(conn)
                    return found if [(s.name, s.retained_wal_bytes) for s in found.slots] == [(slot_name, truth)] else None

                on_replica = wait_until(standby_slot, timeout=30, what="the standby's slot as the standby says it")
            assert isinstance(on_replica, Replication) and on_replica.standbys == ()
            assert standby_admin.execute("SELECT pg_is_in_recovery()").fetchone()[0]

        snapshot = wait_until(lambda: _with_standby(run_cycle(db.target), pid), timeout=30, what="a snapshot with the standby")
        assert isinstance(snapshot, Snapshot) and snapshot.replication is not None
        document = json.loads(json.dumps(snapshot.to_json()))
        assert set(document["replication"]) == {"standbys", "slots", "standbys_unknown"}
        (entry,) = [s for s in document["replication"]["standbys"] if s["pid"] == pid]
        assert set(entry) == STANDBY_KEYS | {"pid"} and entry["application"] == name and entry["client"] == "local"
        (slot,) = [s for s in document["replication"]["slots"] if s["name"] == slot_name]
        assert set(slot) == SLOT_KEYS | {"database", "plugin", "wal_status", "active_pid"}
        assert (slot["type"], slot["active"]) == ("physical", False) and slot["retained_wal_bytes"] >= 0
        assert Snapshot.from_json(document) == snapshot  # a recording replays what was seen
        assert "Replication" in render(snapshot) and name in render(snapshot)

        metrics = _samples(snapshot)
        (standby,) = [s for s in snapshot.replication.standbys if s.pid == pid]
        assert metrics[("queuetop_standby_replay_lag_bytes", ("", name, "local"))] == standby.replay_lag_bytes
        # Its lag in time as the server measured it; none yet (WAL written since it caught up, not
        # measured: other tests write on this server meanwhile) is no series, never a calm 0.
        assert metrics.get(("queuetop_standby_replay_lag_seconds", ("", name, "local"))) == standby.replay_lag_s
        assert metrics[("queuetop_standbys", ("",))] == len(snapshot.replication.standbys) >= 1
        (probed_slot,) = [s for s in snapshot.replication.slots if s.name == slot_name]
        assert metrics[("queuetop_replication_slot_retained_wal_bytes", ("", slot_name, "physical"))] == probed_slot.retained_wal_bytes
        assert metrics[("queuetop_replication_slot_active", ("", slot_name, "physical"))] == 0
        assert ("queuetop_replication_slot_xmin_age_xids", ("", slot_name, "physical")) not in metrics  # it holds none: absent

    _panel_shows(snapshot, name, slot_name)


def _with_standby(snapshot: Snapshot, pid: int) -> Snapshot | None:
    replication = snapshot.replication
    return snapshot if replication is not None and any(s.pid == pid and s.state for s in replication.standbys) else None


def _samples(snapshot: Snapshot) -> dict[tuple[str, tuple[str, ...]], float]:
    return {(sample.name, tuple(sample.labels.values())): sample.value for family in families([snapshot]) for sample in family.samples}


def _panel_shows(snapshot: Snapshot, standby: str, slot: str) -> None:
    import asyncio

    async def run() -> None:
        for size in ((160, 40), (80, 24)):
            app = QueuetopApp(lambda sink: SampleSource(sink, [snapshot]))
            async with app.run_test(size=size) as pilot:
                panel = app.query_one(ReplicationPanel)
                for _ in range(200):
                    await pilot.pause(0.02)
                    if panel.display and panel.query_one(KeyedTable).full_rows():
                        break
                assert panel.display
                rows = {key: tuple(str(c) for c in cells) for key, cells in panel.query_one(KeyedTable).full_rows().items()}
                (line,) = [cells for key, cells in rows.items() if key.startswith("standby:") and cells[0] == standby]
                (shown,) = [s for s in snapshot.replication.standbys if s.application == standby]
                assert line[1:3] == ("standby", "streaming") and line[4] == fmt.byte_size(shown.replay_lag_bytes)
                assert rows[f"slot:{slot}"][:3] == (slot, "physical slot", "inactive")
                assert len(rows) == len(snapshot.replication.standbys) + len(snapshot.replication.slots)
                if size == (80, 24):  # narrow: columns left out, and the border says so
                    table = panel.query_one(KeyedTable)
                    assert table.hidden and any(said in str(panel.border_subtitle) for said in ("hidden", "(z)"))

    asyncio.run(run())


def test_a_server_that_replicates_to_nobody_shows_no_replication_panel(db):
    """Empty lists in the JSON (known: nobody), and the panel gives up no line of the screen."""
    with db.connect() as conn:  # the server's own: nobody streams, no slot
        assert conn.execute("SELECT (SELECT count(*) FROM pg_stat_replication) + (SELECT count(*) FROM pg_replication_slots)"
                            ).fetchone()[0] == 0
    snapshot = run_cycle(db.target)
    assert snapshot.replication == Replication()
    assert snapshot.to_json()["replication"] == {"standbys": [], "slots": [], "standbys_unknown": None}
    import asyncio

    async def run() -> None:
        app = QueuetopApp(lambda sink: SampleSource(sink, [snapshot]))
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.pause(0.2)
            for _ in range(100):
                await pilot.pause(0.02)
                if app.snapshot is not None:
                    break
            assert app.snapshot is not None and not app.query_one(ReplicationPanel).display

    asyncio.run(run())


# -- connections near the limit ---------------------------------------------------------------------

MAX_CONNECTIONS, SUPERUSER_RESERVED, RESERVED = 24, 3, 2  # PostgreSQL 16's reserved_connections too: 19 usable


@pytest.fixture(scope="module")
def small_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateServer]:
    server = PrivateServer(tmp_path_factory.mktemp("limit") / "data", max_connections=MAX_CONNECTIONS,
                           reserved=SUPERUSER_RESERVED, prefix="limit")
    with psycopg.connect(server.admin_uri, autocommit=True) as conn:
        conn.execute(f"ALTER SYSTEM SET reserved_connections = {RESERVED}")
        conn.execute("CREATE ROLE qt_plain LOGIN")
    server.restart("fast")
    yield server
    server.cleanup()


def _ordinary_connect(db: Database) -> psycopg.Connection:
    return psycopg.connect(db.server.uri(db.name, user="qt_plain"), autocommit=True, application_name="qt-plain")


async def _connections_summary(snapshot: Snapshot) -> str:
    app = QueuetopApp(lambda sink: SampleSource(sink, [snapshot]))
    async with app.run_test(size=(200, 40)) as pilot:  # room for the warning's longest form
        panel = app.query_one(ConnectionsPanel)
        summary = panel.query_one("#connections-summary", Static)
        for _ in range(200):
            await pilot.pause(0.02)
            if "oldest" in str(summary.render()):
                break
        return str(summary.render())


def test_connections_near_the_limit_warn_count_and_name_the_cause(small_server):
    """Filled with real sessions: the usable limit is where an ordinary role is refused (the
    server's own check), at 90 % of it the panel warns, the metric says so and a queue with ready
    work and nobody taking it names the cause; below 90 %, none of it."""
    import asyncio

    db = small_server.database()
    with psycopg.connect(db.dsn, autocommit=True) as owner:
        owner.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO qt_plain").format(sql.Identifier(db.name)))
        TableQueue.create(owner, "limited").enqueue_batch(owner, ["{}"] * 5)
        settings = dict(owner.execute("SELECT name, setting::int FROM pg_settings WHERE name IN "
                                      "('max_connections', 'superuser_reserved_connections', 'reserved_connections')").fetchall())
    usable = settings["max_connections"] - settings["superuser_reserved_connections"] - settings.get("reserved_connections", 0)
    assert usable == MAX_CONNECTIONS - SUPERUSER_RESERVED - RESERVED

    def client_backends(conn: psycopg.Connection) -> int:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'").fetchone()[0]

    with ExitStack() as held, psycopg.connect(db.dsn, autocommit=True) as watch:
        # Below 90 %: nothing said.
        snapshot = run_cycle(db.target)
        c = snapshot.connections
        assert c is not None and c.usable == usable and not c.near_limit
        (queue,) = [q for q in snapshot.queues if q.name == "limited"]
        assert queue.diagnosis is not None and queue.diagnosis.code == "no-consumers"
        assert "connections at" not in queue.diagnosis.reason
        summary = asyncio.run(_connections_summary(snapshot))
        assert "usable" not in summary
        assert _samples(snapshot)[("queuetop_sessions_usable", ("",))] == usable
        # Filled by an ordinary role until it is refused: the server's own limit is the usable one.
        plain = []
        while True:
            try:
                plain.append(held.enter_context(_ordinary_connect(db)))
            except psycopg.OperationalError as exc:
                assert "reserved" in str(exc), exc
                break
            assert len(plain) <= MAX_CONNECTIONS
        in_use = client_backends(watch)
        assert in_use == usable  # refused with every usable connection taken
        # One less (the probe's own session takes it): 18 of 19, 95 %.
        plain.pop().close()
        wait_until(lambda: client_backends(watch) == usable - 1, what="the session gone")
        snapshot = run_cycle(db.target)
        c = snapshot.connections
        assert c is not None and (c.total, c.usable) == (usable, usable) and c.near_limit  # the probe took the last one
        (queue,) = [q for q in snapshot.queues if q.name == "limited"]
        assert queue.diagnosis is not None and queue.diagnosis.code == "no-consumers"
        assert queue.diagnosis.reason.endswith(f"; connections at {usable} of {usable}: consumers cannot connect")
        metrics = _samples(snapshot)
        assert (metrics[("queuetop_sessions", ("",))], metrics[("queuetop_sessions_usable", ("",))]) == (usable, usable)
        summary = asyncio.run(_connections_summary(snapshot))
        assert f"{usable} of {usable} usable connections in use (100 %)" in summary
        # Two fewer: 17 of 19 in use with the probe's, 89 %: below the warning.
        for _ in range(2):
            plain.pop().close()
        wait_until(lambda: client_backends(watch) == usable - 3, what="the sessions gone")
        snapshot = run_cycle(db.target)
        c = snapshot.connections
        assert c is not None and c.total == usable - 2 and c.total / usable < 0.9 and not c.near_limit
        summary = asyncio.run(_connections_summary(snapshot))
        assert "usable" not in summary and "NEAR THE LIMIT" not in render(snapshot)
        # 18 of 19 (95 %): warned, and the verdict's cause says consumers may be unable to connect.
        plain.append(held.enter_context(_ordinary_connect(db)))
        snapshot = run_cycle(db.target)
        c = snapshot.connections
        assert c is not None and c.total == usable - 1 and c.near_limit
        (queue,) = [q for q in snapshot.queues if q.name == "limited"]
        assert queue.diagnosis is not None and queue.diagnosis.reason.endswith(
            f"; connections at {usable - 1} of {usable}: consumers may be unable to connect")
        summary = asyncio.run(_connections_summary(snapshot))
        assert f"{usable - 1} of {usable} usable connections in use ({100 * (usable - 1) / usable:.0f} %)" in summary
        assert summary.index("usable") < summary.index("oldest")  # the warning first
        assert (f"NEAR THE LIMIT: {usable - 1} of {usable} usable connections in use ({100 * (usable - 1) / usable:.0f} %)"
                in render(snapshot))


# -- the screen ---------------------------------------------------------------------------------------


def issue_snapshot() -> Snapshot:
    """The issue's server, on the sample's dashboard: a logical slot nobody consumes keeping 4.4 MB
    of WAL, a standby whose feedback holds the xmin horizon, an inactive physical slot, and 2,002
    of the 2,100 connections in use (2,097 usable)."""
    from probes.model import ReplicationSlot, Standby
    from tui.sample import sample_snapshot

    base = sample_snapshot()
    assert base.connections is not None
    connections = replace(base.connections, total=2002, max=2100, usable=2097, xmin_holder_pid=314, xmin_holder_kind="standby",
                          xmin_holder_name="replica-1", xmin_holder_application="replica-1", xmin_holder_client="10.0.0.7",
                          xmin_holder_age_xids=6603, xmin_holder_age_s=252.0)
    replication = Replication(
        standbys=(Standby(application="replica-1", client="10.0.0.7", state="streaming", sync_state="async", write_lag_s=0.2,
                          flush_lag_s=0.3, replay_lag_s=0.4, replay_lag_bytes=12_288, pid=314),),
        slots=(ReplicationSlot(name="orders_sub", type="logical", active=False, retained_wal_bytes=4_613_734, xmin_age=None,
                               catalog_xmin_age=5_120, database="app", plugin="pgoutput", wal_status="reserved"),
               ReplicationSlot(name="replica_2", type="physical", active=False, retained_wal_bytes=1_610_612_736, xmin_age=None,
                               catalog_xmin_age=None, wal_status="extended")))
    return replace(base, connections=connections, replication=replication,
                   probes={**base.probes, "replication": base.probes["connections"]})


@pytest.mark.parametrize("size", [(80, 24), (160, 45)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_main_screen_with_replication_and_connections_near_the_limit(snap_compare, size):
    snapshot = issue_snapshot()
    assert snap_compare(QueuetopApp(lambda sink: SampleSource(sink, [snapshot])), terminal_size=size)


def test_a_replication_probe_that_fails_is_unknown_everywhere_never_none(db, admin):
    """A role refused pg_stat_replication (revoked in this database): the probe fails, and its
    figures are unknown, with why: null in the JSON (not empty lists, which read as "nobody
    replicates"), no replication metric but the probe's error, `unknown: <why>` in the panel and
    the text snapshot; the other probes go on."""
    import asyncio

    admin.execute("REVOKE SELECT ON pg_catalog.pg_stat_replication FROM PUBLIC")
    with limited_role(db, admin) as limited:
        target = resolve_target(db.server.uri(db.name, user=limited.info.user))
        assert target is not None
        snapshot = run_cycle(target)
    status = snapshot.probes["replication"]
    assert status.error is not None and "permission denied" in status.error and status.unread == ("all",)
    assert snapshot.replication is None and snapshot.unknown_list("replication") == status.error
    assert snapshot.probes["connections"].error is None and snapshot.connections is not None
    document = json.loads(json.dumps(snapshot.to_json()))
    assert document["replication"] is None and document["probes"]["replication"]["error"] == status.error
    assert Snapshot.from_json(document) == snapshot
    metrics = _samples(snapshot)
    assert metrics[("queuetop_probe_error", ("", "replication"))] == 1
    assert not [name for name, _labels in metrics if name.startswith(("queuetop_standby", "queuetop_replication_slot"))]
    assert ("queuetop_standbys", ("",)) not in metrics and ("queuetop_sessions", ("",)) in metrics
    assert f"Replication\n  unknown: {status.error}" in render(snapshot)

    async def run() -> None:
        app = QueuetopApp(lambda sink: SampleSource(sink, [snapshot]))
        async with app.run_test(size=(160, 45)) as pilot:
            panel = app.query_one(ReplicationPanel)
            for _ in range(200):
                await pilot.pause(0.02)
                if panel.display:
                    break
            rows = panel.query_one(KeyedTable).full_rows()
            assert list(rows) == ["unknown"] and str(rows["unknown"][0]) == f"unknown: {status.error}"

    asyncio.run(run())


def test_sql_server_reads_no_replication_and_says_so():
    """SQL Server's availability group replicas are not read: the probe runs no statement (it is
    given no connection here), its figures are null with a note why, never empty lists."""
    from probes.mssql import MssqlProbes
    from probes.sampler import compose
    from tui.sample import sample_snapshot

    probes = MssqlProbes()
    assert probes.replication(None) is None  # type: ignore[arg-type]
    note = probes.notes["replication"]
    assert "SQL Server" in note
    base = sample_snapshot()
    snapshot = compose(replace(base.server, dialect="mssql"), {"replication": (ProbeStatus(elapsed_ms=0.0, notes=note), None)})
    assert snapshot.replication is None and snapshot.unknown_list("replication") is None
    assert snapshot.to_json()["replication"] is None and not [n for n, _l in _samples(snapshot) if "replication_slot" in n]
    assert Snapshot.from_json(json.loads(json.dumps(snapshot.to_json()))) == snapshot
    # A recording from before the probe (no `replication` key) reads as not read: null.
    older = {k: v for k, v in json.loads(json.dumps(base.to_json())).items() if k != "replication"}
    assert Snapshot.from_json(older).replication is None
