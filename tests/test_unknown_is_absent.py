"""Unknown is absent (issue 25, point 5): a probe that failed publishes no figure. Each probe is
made to fail for real on the server (a lock timeout: another session holds ACCESS EXCLUSIVE on the
table it reads; a privilege the probe's role lacks), while there is something to see (a ring in
use, a lease held, deltas pending, a session blocked), and each output is checked to say it does
not know, and why, never a 0, an empty list or "(none)" that would read as calm:

- the snapshot JSON (`queuetop snapshot --json`): the list null (not []), the connections'
  every key null, a queue's figures null; the probe's error beside it;
- the text snapshot (`queuetop snapshot`): "unknown: <why>" in the section;
- the dashboard: "unknown: <why>" in the panel.

/metrics is tests/test_prometheus.py's.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

import psycopg
import pytest
from psycopg import sql
from textual.widgets import Static, Tree

from probes.sampler import Sampler
from queues.compactor import create_task, submit
from queues.lease import acquire
from queues.ring import create as ring_create
from queues.ring import put as ring_put
from queues.table_queue import TableQueue
from tui.backend import DatabaseBackend
from tui.dashboard import QueuetopApp
from tui.widgets.keyed_table import KeyedTable
from tui.widgets.panels import CompactionPanel, ConnectionsPanel, LeasesPanel, LocksPanel, QueuesPanel, RingsPanel

from .conftest import Database, wait_until

LOCK_TIMEOUT = r"lock timeout"
NO_PRIVILEGE = r"no privilege: permission denied"
_roles = itertools.count()


@dataclass(frozen=True)
class Failure:
    """How a probe is made to fail: `arrange(db)` enters a context that sets the scene and makes the
    failure, yielding the DSN the probes run with; `reason`: what its error says."""

    probe: str
    arrange: Callable[[Database], AbstractContextManager[str]]
    reason: str


def _role(db: Database, admin: psycopg.Connection, *, queuetop: bool) -> str:
    """A login role of no privilege but CONNECT (and, with `queuetop`, reading the engine's tables,
    so that only the failure made for the case fails)."""
    role = f"qt_unknown_{os.getpid()}_{next(_roles)}"
    admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    admin.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(sql.Identifier(db.name), sql.Identifier(role)))
    if queuetop:
        admin.execute(sql.SQL("GRANT USAGE ON SCHEMA queuetop TO {}").format(sql.Identifier(role)))
        admin.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA queuetop TO {}").format(sql.Identifier(role)))
    return role


@contextmanager
def _as_role(db: Database, *, queuetop: bool, revoke: tuple[str, ...] = ()) -> Iterator[str]:
    """The DSN of a fresh role; `revoke`: what PUBLIC may no longer use in this database (each
    database has its own catalogs: pg_locks, pg_stat_activity and pg_blocking_pids are granted to
    PUBLIC in each)."""
    with db.connect() as admin:
        role = _role(db, admin, queuetop=queuetop)
        for statement in revoke:
            admin.execute(statement)
        try:
            yield db.server.uri(db.name, user=role)
        finally:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))
            admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


@contextmanager
def _locked(db: Database, table: str) -> Iterator[None]:
    """Another session holds ACCESS EXCLUSIVE on `table` until the end: every probe statement that
    reads it waits its lock timeout (100 ms) and gives up."""
    with db.connect(application_name="qt-locker") as locker:
        locker.execute("BEGIN")
        locker.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(sql.Identifier(*table.split("."))))
        try:
            yield
        finally:
            locker.execute("ROLLBACK")


@contextmanager
def queues_without_privilege(db: Database) -> Iterator[str]:
    with db.connect() as conn:
        TableQueue.create(conn, "orders").enqueue_batch(conn, ["{}"] * 7)
    with _as_role(db, queuetop=False) as dsn:
        yield dsn


@contextmanager
def a_queue_table_locked(db: Database) -> Iterator[str]:
    with db.connect() as conn:
        queue = TableQueue.create(conn, "orders")
        queue.enqueue_batch(conn, ["{}"] * 7)
    with _locked(db, f"queuetop.{queue.table_name}"):
        yield db.dsn


@contextmanager
def rings_locked(db: Database) -> Iterator[str]:
    with db.connect() as conn:
        ring_create(conn, "audit", 4)
        ring_put(conn, "audit", ["{}", "{}"])
    with _locked(db, "queuetop.rings"):
        yield db.dsn


@contextmanager
def leases_locked(db: Database) -> Iterator[str]:
    with db.connect() as conn:
        acquire(conn, "relay", "alice", 600)
    with _locked(db, "queuetop.leases"):
        yield db.dsn


@contextmanager
def deltas_locked(db: Database) -> Iterator[str]:
    with db.connect() as conn:
        submit(conn, create_task(conn, "survey"), [1, 2, 3])
    with _locked(db, "queuetop.task_status_deltas"):
        yield db.dsn


@contextmanager
def locks_without_privilege(db: Database) -> Iterator[str]:
    """The locks probe's role may not read pg_locks nor call pg_blocking_pids, while a session
    is really blocked: "none blocked" would be a lie."""
    with db.connect() as conn:
        conn.execute("CREATE TABLE accounts (id int PRIMARY KEY)")
        conn.execute("INSERT INTO accounts VALUES (1)")
    revoke = ("REVOKE SELECT ON pg_catalog.pg_locks FROM PUBLIC",
              "REVOKE EXECUTE ON FUNCTION pg_catalog.pg_blocking_pids(integer) FROM PUBLIC")
    with db.connect(application_name="qt-blocker") as blocker, db.connect(application_name="qt-waiter") as waiter, \
            db.connect() as admin:
        blocker.execute("BEGIN")
        blocker.execute("UPDATE accounts SET id = id WHERE id = 1")
        waiter_pid = waiter.info.backend_pid

        def wait() -> None:
            try:
                waiter.execute("UPDATE accounts SET id = id WHERE id = 1")
            except psycopg.Error:  # ended by the test
                pass

        thread = threading.Thread(target=wait, daemon=True)
        thread.start()
        try:
            wait_until(lambda: admin.execute("SELECT cardinality(pg_blocking_pids(%s)) > 0", (waiter_pid,)).fetchone()[0],
                       what="the waiter blocked")
            with _as_role(db, queuetop=True, revoke=revoke) as dsn:
                yield dsn
        finally:
            blocker.execute("ROLLBACK")
            thread.join(10)


@contextmanager
def connections_without_privilege(db: Database) -> Iterator[str]:
    with _as_role(db, queuetop=True, revoke=("REVOKE SELECT ON pg_catalog.pg_stat_activity FROM PUBLIC",)) as dsn:
        yield dsn


FAILURES = {
    "queues: no privilege": Failure("queues", queues_without_privilege, NO_PRIVILEGE),
    "queues: a queue's table locked": Failure("queues", a_queue_table_locked, LOCK_TIMEOUT),
    "rings: lock timeout": Failure("rings", rings_locked, LOCK_TIMEOUT),
    "leases: lock timeout": Failure("leases", leases_locked, LOCK_TIMEOUT),
    "compaction: lock timeout": Failure("compaction", deltas_locked, LOCK_TIMEOUT),
    "locks: no privilege": Failure("locks", locks_without_privilege, NO_PRIVILEGE),
    "connections: no privilege": Failure("connections", connections_without_privilege, NO_PRIVILEGE),
}
CASES = pytest.mark.parametrize("case", list(FAILURES))


# -- the snapshot JSON ---------------------------------------------------------------------------


@CASES
def test_the_json_publishes_null_with_the_reason(db, cli, case):
    failure = FAILURES[case]
    with failure.arrange(db) as dsn:
        result = cli("snapshot", "--json", "--dsn", dsn)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    error = document["probes"][failure.probe]["error"]
    assert error and re.search(failure.reason, error), error
    if case == "queues: a queue's table locked":
        [queue] = [q for q in document["queues"] if q["name"] == "orders"]
        assert re.search(LOCK_TIMEOUT, queue["error"])
        figures = ("depth", "ready", "in_flight", "delayed", "dead", "oldest_ready_age_s")
        assert {key: queue[key] for key in figures} == dict.fromkeys(figures)
        assert "orders: " in error
        return
    # Nothing read: the queue sources (each failed), or the whole probe.
    assert document["probes"][failure.probe]["unread"] == (["reference", "outbox", "inbox"] if failure.probe == "queues" else ["all"])
    if failure.probe == "connections":
        assert set(document["connections"].values()) == {None}  # no total, no {} of states that reads as "no sessions"
        return
    keys = {"locks": ("blocked", "blockers", "prepared_xacts", "app_locks")}.get(failure.probe, (failure.probe,))
    assert {key: document[key] for key in keys} == dict.fromkeys(keys)


# -- the text snapshot ---------------------------------------------------------------------------


SECTIONS = {"queues": ("Queues",), "rings": ("Rings",), "leases": ("Leases",), "compaction": ("Compaction",),
            "locks": ("Blocked", "Root blockers"), "connections": ("Connections",)}


def section(report: str, title: str) -> str:
    [part] = [p for p in report.split("\n\n") if p.startswith(title)]
    return part


@CASES
def test_the_text_snapshot_says_unknown_and_why(db, cli, case):
    failure = FAILURES[case]
    with failure.arrange(db) as dsn:
        result = cli("snapshot", "--dsn", dsn)
    assert result.returncode == 0, result.stderr
    for title in SECTIONS[failure.probe]:
        part = section(result.stdout, title)
        assert "(none)" not in part, part
        if case == "queues: a queue's table locked":
            [row] = [line for line in part.splitlines() if line.strip().startswith("orders ")]
            assert re.match(r"\s*orders\s+reference\s+unknown\s", row), row  # no depth, no 0
            assert re.search(rf"\n  orders: unknown: skipped: {LOCK_TIMEOUT}", part), part
            continue
        lines = part.splitlines()
        assert len(lines) == 2 and re.match(rf"  unknown: .*{failure.reason}", lines[1]), part
        assert not re.search(r"\b0\b", part), part


# -- the dashboard -------------------------------------------------------------------------------


def rows(app, panel) -> dict[str, tuple[str, ...]]:
    table = app.query_one(panel).query_one(KeyedTable)
    return {key: tuple(str(cell) for cell in cells) for key, cells in table.full_rows().items()}


def panel_says(app, case: str) -> str | None:
    """What the case's panel says, once it says the probe failed (None before)."""
    failure = FAILURES[case]
    if case == "queues: a queue's table locked":
        row = rows(app, QueuesPanel).get("reference:orders")
        subtitle = str(app.query_one(QueuesPanel).border_subtitle)
        return f"{row} {subtitle}" if row is not None and row[1] == "unknown" else None
    if failure.probe == "locks":
        label = str(app.query_one(LocksPanel).query_one(Tree).root.label)
        return label if "unknown" in label else None
    if failure.probe == "connections":
        summary = str(app.query_one(ConnectionsPanel).query_one("#connections-summary", Static).render())
        return summary if "unknown" in summary else None
    panel = {"queues": QueuesPanel, "rings": RingsPanel, "leases": LeasesPanel, "compaction": CompactionPanel}[failure.probe]
    unknown = rows(app, panel).get("unknown")
    return " ".join(unknown) if unknown is not None else None


@CASES
async def test_the_dashboard_says_unknown_and_why(db, case):
    failure = FAILURES[case]
    with failure.arrange(db) as dsn:
        target = Database(db.name, dsn, db.server).target
        app = QueuetopApp(lambda sink: Sampler(target, sink, interval_s=0.3), backend=DatabaseBackend(target))
        async with app.run_test(size=(220, 60)) as pilot:
            said = None
            for _ in range(500):
                await pilot.pause(0.02)
                said = panel_says(app, case)
                if said:
                    break
            assert said and re.search(failure.reason, said), said
            status = str(app.query_one("#status").render())  # the status line names the probe among its notes
            assert "notes: " in status and failure.probe in status.split("notes: ", 1)[1], status
            if case == "queues: a queue's table locked":
                assert "1 unknown: orders: skipped: lock timeout" in said
                return
            if failure.probe == "locks":
                assert said.startswith("blocked sessions unknown: ") and "no blocked" not in said
                return
            if failure.probe == "connections":
                panel = app.query_one(ConnectionsPanel)
                assert said.startswith("sessions unknown: ")
                assert str(panel.border_title) == "Connections" and rows(app, ConnectionsPanel) == {}  # no count, no rows
                return
            panel = {"queues": QueuesPanel, "rings": RingsPanel, "leases": LeasesPanel, "compaction": CompactionPanel}[failure.probe]
            shown = rows(app, panel)
            assert list(shown) == ["unknown"], shown  # nothing but the reason: no row, no 0
            assert said.strip().startswith("unknown: ")


async def test_the_host_bar_and_the_hosts_screen_never_say_ok_for_locks_not_seen(db, pg_server):
    """Two hosts (two databases of one server); the second's locks probe fails while a session is
    blocked: its host bar entry says "locks unknown", never " ok", and the Hosts screen (H) says
    unknown, not 0."""
    from tui.dashboard import HostBar, HostSpec

    from .conftest import drop_database, make_database

    other = make_database(pg_server, prefix="hostbar")
    try:
        with locks_without_privilege(other) as dsn:
            hosts = []
            for name, database in (("calm", db), ("unseen", Database(other.name, dsn, other.server))):
                target = database.target
                hosts.append(HostSpec(name=name, source_factory=lambda sink, t=target, n=name: Sampler(t, sink, interval_s=0.3, host=n),
                                      backend=DatabaseBackend(target)))
            app = QueuetopApp(hosts=hosts)
            async with app.run_test(size=(100, 30)) as pilot:
                for _ in range(500):
                    await pilot.pause(0.02)
                    if all(h.snapshot is not None and h.snapshot.probes.get("locks") for h in app.hosts):
                        break
                bar = str(app.query_one(HostBar).render())
                # The same server's lock views, read by a role that may: the blocked session is there.
                assert "1 calm 1 blocked" in bar, bar
                assert "2 unseen locks unknown" in bar and "2 unseen ok" not in bar, bar
                line = QueuetopApp._host_line(1, app.hosts[1])
                assert line[5:7] == ("unknown", "unknown") and "locks: " in line[-1], line
    finally:
        with psycopg.connect(pg_server.admin_uri, autocommit=True) as admin:
            drop_database(admin, other.name)


def test_a_note_beside_a_complete_empty_list_is_not_unknown():
    """The locks probe read everything but other roles' queries, and nobody waits: `blocked` is
    [] (calm, rightly), not null; the same empty list from a probe that failed is null."""
    from dataclasses import replace

    from probes.model import ProbeStatus
    from tui.sample import sample_snapshot

    base = replace(sample_snapshot(step=0), blocked=(), blockers=(), prepared_xacts=(), app_locks=())
    noted = replace(base, probes={**base.probes, "locks": ProbeStatus(elapsed_ms=1.0, error="queries of other roles hidden")})
    failed = replace(base, probes={**base.probes, "locks": ProbeStatus(elapsed_ms=1.0, error="no privilege", unread=("all",))})
    assert noted.to_json()["blocked"] == [] and noted.unknown_list("blocked") is None
    assert failed.to_json()["blocked"] is None and failed.unknown_list("blocked") == "no privilege"


async def test_the_locks_panel_says_none_blocked_beside_a_note_and_unknown_for_a_failure():
    """A note (other roles' queries hidden) beside a tree the probe read whole, nobody waiting:
    "no blocked sessions"; the same empty tree from a probe that failed: "unknown: <why>"."""
    from dataclasses import replace

    from probes.model import ProbeStatus
    from tui.sample import SampleSource, sample_snapshot

    base = replace(sample_snapshot(step=0), blocked=(), blockers=(), prepared_xacts=())
    for status, said in ((ProbeStatus(elapsed_ms=1.0, notes="queries of other roles hidden"), "no blocked sessions"),
                         (ProbeStatus(elapsed_ms=1.0, error="no privilege: pg_locks", unread=("all",)),
                          "blocked sessions unknown: no privilege: pg_locks")):
        snapshot = replace(base, probes={**base.probes, "locks": status})
        app = QueuetopApp(lambda sink, s=snapshot: SampleSource(sink, [s]))
        async with app.run_test(size=(100, 30)) as pilot:
            label = ""
            for _ in range(200):
                await pilot.pause(0.02)
                label = str(app.query_one(LocksPanel).query_one(Tree).root.label)
                if label.startswith(said):
                    break
            assert label.startswith(said), label
