"""Several databases at once: `--dsn` repeated or the config's [[targets]]. Two real PostgreSQL
servers (the suite's shared one and a private one this module may stop) in the dashboard at once,
each with its own sampler and pool: one stopped mid-test, the other keeps updating. `snapshot`
prints one JSON object per host."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from probes.model import Snapshot
from probes.sampler import Sampler
from queues.table_queue import TableQueue
from tui.backend import DatabaseBackend
from tui.dashboard import HostBar, HostSpec, QueuetopApp, StatusBar
from tui.messages import SnapshotArrived
from tui.sample import sample_snapshot

from .conftest import Database, PrivateServer
from .test_tui import queue_rows, settle

INTERVAL_S = 0.3


@pytest.fixture(scope="module")
def second_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateServer]:
    server = PrivateServer(tmp_path_factory.mktemp("hosts") / "data", prefix="hosts")
    yield server
    server.cleanup()


@pytest.fixture
def second_db(second_server: PrivateServer) -> Database:
    return second_server.database()


def _host(name: str, db: Database) -> HostSpec:
    return HostSpec(name=name, source_factory=lambda sink: Sampler(db.target, sink, interval_s=INTERVAL_S, host=name),
                    backend=DatabaseBackend(db.target))


def _fill(db: Database, queue: str, count: int) -> TableQueue:
    with db.connect() as conn:
        table_queue = TableQueue.create(conn, queue)
        table_queue.enqueue_batch(conn, [json.dumps({"n": n}) for n in range(count)])
    return table_queue


def test_a_snapshot_replaces_only_a_queued_snapshot_of_the_same_host():
    a0, a1, b0 = SnapshotArrived(sample_snapshot(step=0), 0), SnapshotArrived(sample_snapshot(step=1), 0), \
        SnapshotArrived(sample_snapshot(step=1), 1)
    assert a1.can_replace(a0)
    assert not b0.can_replace(a0) and not a0.can_replace(b0)  # it used to: one host's snapshot dropped the other's


async def test_two_servers_in_tabs_and_one_stopped_does_not_stop_the_other(db, second_server, second_db):
    _fill(db, "billing_jobs", 7)
    second_queue = _fill(second_db, "orders_jobs", 3)
    app = QueuetopApp(hosts=[_host("billing", db), _host("orders", second_db)])
    async with app.run_test(size=(100, 30)) as pilot:
        billing, orders = app.hosts
        await settle(pilot, app, lambda: billing.snapshot is not None and orders.snapshot is not None, "both hosts sampled", 500)
        await settle(pilot, app, lambda: queue_rows(app).get("reference:billing_jobs", ("", ""))[1] == "7", "billing's queue", 500)
        assert "reference:orders_jobs" not in queue_rows(app)  # one host at a time
        bar = str(app.query_one(HostBar).render())
        assert "1 billing" in bar and "2 orders" in bar

        await pilot.press("2")  # the second host's tab
        await settle(pilot, app, lambda: queue_rows(app).get("reference:orders_jobs", ("", ""))[1] == "3", "orders' queue", 500)
        assert "reference:billing_jobs" not in queue_rows(app)
        assert "orders" in str(app.query_one(StatusBar).render())

        second_server.stop()  # mid-test: the orders server goes down
        try:
            await settle(pilot, app, lambda: orders.snapshot is not None and not orders.snapshot.extra["connected"],
                         "orders seen down", 500)
            # A server that is not running is said plainly (issue 28): not "DISCONNECTED No such file or directory".
            await settle(pilot, app, lambda: "2 orders STOPPED" in str(app.query_one(HostBar).render()),
                         "STOPPED in the host bar", 500)
            assert "SERVER STOPPED" in str(app.query_one(StatusBar).render())
            assert "No such file" not in str(app.query_one(StatusBar).render())
            assert QueuetopApp._host_line(1, orders)[2] == "STOPPED"  # the Hosts screen (H)
            assert queue_rows(app).get("reference:orders_jobs", ("", ""))[1] == "3"  # its last figures stay, marked stale

            # The other host keeps updating at its own pace while this one is down.
            seen, started = billing.arrivals, time.monotonic()
            with db.connect() as conn:
                TableQueue.open(conn, "billing_jobs").enqueue(conn, '{"late": true}')
            await settle(pilot, app, lambda: billing.arrivals >= seen + 5, "billing's samples", 500)
            per_sample = (time.monotonic() - started) / (billing.arrivals - seen)
            assert per_sample < INTERVAL_S * 3, f"billing slowed to one sample per {per_sample:.2f}s"
            await pilot.press("1")
            await settle(pilot, app, lambda: queue_rows(app).get("reference:billing_jobs", ("", ""))[1] == "8",
                         "billing's new depth", 500)
        finally:
            second_server.start()
        await settle(pilot, app, lambda: orders.snapshot.extra["connected"], "orders back", 1000)
        with second_db.connect() as conn:
            assert second_queue.counts(conn).depth == 3


async def test_one_host_has_no_host_bar_and_no_host_keys():
    from .test_tui import sample_app

    app = sample_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, app, lambda: app.snapshot is not None, "a sample")
        assert not app.query(HostBar)
        assert app.check_action("host", (1,)) is False
        await pilot.press("2")  # nothing to switch to
        assert app.current == 0


def _json_lines(result) -> list[dict]:
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def test_snapshot_prints_one_object_per_host_and_a_host_that_is_down_is_one_of_them(cli, db, second_db):
    closed = "postgresql://ops:s3cret@127.0.0.1:1/app"
    result = cli("snapshot", "--json", "--dsn", db.dsn, "--dsn", second_db.dsn, "--dsn", closed, timeout=60)
    lines = _json_lines(result)
    assert [line["server"]["database"] for line in lines] == [db.name, second_db.name, None]
    assert [line["connected"] for line in lines] == [True, True, False]
    hosts = [line["host"] for line in lines]
    assert len(set(hosts)) == 3 and hosts[2] == "127.0.0.1:1/app"
    assert lines[2]["probes"]["queues"]["error"].startswith("cannot reach the database")
    # The unreachable host is the command's failure: exit 2, one line for it, no password anywhere.
    assert result.returncode == 2
    (error,) = result.stderr.splitlines()
    assert error.startswith("queuetop: error: 127.0.0.1:1/app: ") and "s3cret" not in result.stdout + result.stderr


def test_config_targets_from_the_environment_and_a_service_file(cli, db, second_db, tmp_path):
    services = tmp_path / "pg_service.conf"
    server = second_db.server
    services.write_text(f"[orders]\nhost={server.socket_dir}\ndbname={second_db.name}\nuser=postgres\n")
    config = tmp_path / "config.toml"
    config.write_text('[[targets]]\nname = "billing"\ndsn_env = "BILLING_DSN"\n\n'
                      '[[targets]]\nname = "orders"\nservice = "orders"\n')
    env = {"BILLING_DSN": db.dsn, "PGSERVICEFILE": str(services)}
    result = cli("snapshot", "--json", "--config", str(config), env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = _json_lines(result)
    assert [(line["host"], line["server"]["database"]) for line in lines] == [("billing", db.name), ("orders", second_db.name)]
    assert result.stderr == ""
    # --dsn wins over the config's targets.
    result = cli("snapshot", "--json", "--config", str(config), "--dsn", db.dsn, env=env, timeout=60)
    assert [line["server"]["database"] for line in _json_lines(result)] == [db.name]


def test_config_targets_refused_or_warned_in_one_line(cli, db, tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('[[targets]]\nname = "billing"\ndsn_env = "NOT_SET_ANYWHERE"\n')
    result = cli("snapshot", "--json", "--config", str(config), timeout=60)
    assert result.returncode == 2 and result.stderr.strip() == "queuetop: error: target 'billing': $NOT_SET_ANYWHERE is not set"
    for body in ('[[targets]]\nname = "a"\n', '[[targets]]\nname = "a"\ndsn = "x"\nservice = "y"\n',
                 '[[targets]]\nname = "a b"\nservice = "y"\n', '[[targets]]\nname = "a"\nservice = "y"\nport = 5\n',
                 '[[targets]]\nname = "a"\nservice = "y"\n[[targets]]\nname = "a"\nservice = "z"\n'):
        config.write_text(body)
        result = cli("snapshot", "--json", "--config", str(config), timeout=60)
        assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, (body, result.stderr)
        assert result.stderr.startswith("queuetop: error: config "), result.stderr
    # A password written in the file works, and is warned about (never printed).
    with_password = db.dsn.replace("postgresql://postgres@", "postgresql://postgres:pa55word@")
    assert with_password != db.dsn
    config.write_text(f'[[targets]]\nname = "billing"\ndsn = "{with_password}"\n')
    result = cli("snapshot", "--json", "--config", str(config), timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith("queuetop: warning: config: target 'billing' holds a password")
    assert "pa55word" not in result.stdout + result.stderr


def test_an_engine_command_with_two_databases_is_a_usage_error(cli, db, second_db):
    result = cli("engine", "enqueue", "jobs", "--dsn", db.dsn, "--dsn", second_db.dsn)
    assert result.returncode == 2 and result.stderr.strip() == "queuetop: error: this command acts on one database: give --dsn once"
    with db.connect() as conn:
        assert conn.execute("SELECT count(*) FROM queuetop.queues WHERE name = 'jobs'").fetchone()[0] == 0


def test_the_snapshot_says_which_host_it_is_of(db):
    from probes.sampler import run_cycle

    snapshot = run_cycle(db.target, host="billing")
    assert snapshot.to_json()["host"] == "billing"
    assert Snapshot.from_json(json.loads(json.dumps(snapshot.to_json()))).extra["host"] == "billing"


async def test_each_hosts_engine_controls_act_on_its_own_database(db, second_db):
    """The engine's keys act on the host shown: its controls are checked in a thread of their own
    once the dashboard runs, then a burst on the second tab lands in the second database."""
    from probes.config import Config
    from tui.app import _host as dashboard_host
    from tui.screens.dialogs import ConfirmScreen, HostsScreen

    from .test_tui import answer_prompt

    with second_db.connect() as conn:
        queue = TableQueue.create(conn, "multi_q")
    app = QueuetopApp(hosts=[dashboard_host("billing", db.target, Config(), INTERVAL_S, False, engine=True),
                             dashboard_host("orders", second_db.target, Config(), INTERVAL_S, False, engine=True)])
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, app, lambda: all(h.controls is not None for h in app.hosts), "both hosts' controls", 500)
        await pilot.press("2")
        await answer_prompt(pilot, app, "b", "multi_q 25")
        with second_db.connect() as conn:
            await settle(pilot, app, lambda: queue.counts(conn).depth == 25, "the burst in the second database", 500)
        await pilot.press("1")
        await answer_prompt(pilot, app, "b", "multi_q 5")  # not a queue of the first database: it offers to create it
        await settle(pilot, app, lambda: isinstance(app.screen, ConfirmScreen), "the offer to create it", 500)
        assert "'multi_q' does not exist" in app.screen.question
        await pilot.press("n")
        with db.connect() as conn:
            assert conn.execute("SELECT count(*) FROM queuetop.queues WHERE name = 'multi_q'").fetchone()[0] == 0

        await settle(pilot, app, lambda: all(h.snapshot is not None for h in app.hosts), "both sampled", 500)
        await pilot.press("H")  # a line per host
        assert isinstance(app.screen, HostsScreen)
        lines = [row[:3] for row in app.screen._rows]
        assert lines == [("1", "billing", "LIVE"), ("2", "orders", "LIVE")]
        await pilot.press("escape")


def test_dsns_before_and_after_the_command_add_up(cli, db, second_db):
    result = cli("--dsn", db.dsn, "snapshot", "--json", "--dsn", second_db.dsn, timeout=60)
    assert result.returncode == 0, result.stderr
    assert [line["server"]["database"] for line in _json_lines(result)] == [db.name, second_db.name]
