"""A pooler whose pool has no server connection to give: Debian's PgBouncer with a pool of two,
both held by `SELECT pg_sleep(...)` sessions through it. PgBouncer holds every other client's
query in its wait queue (two minutes by default), where no statement timeout runs: queuetop's own
deadline on the first answer ends the wait. `snapshot` exits 2 within its bound, saying what it
waited for in one line; the dashboard draws, says it waits for a server connection (counting the
seconds), answers keys, quits at once, and shows the figures again once the pool has a connection
to give; the exporter serves `queuetop_up 0` meanwhile, and the figures after."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest

from dbcore.database import resolve_target
from probes.pooler_console import console_target
from probes.sampler import MAX_PROBE_SESSIONS, Sampler
from probes.session import FIRST_ANSWER_S
from queues.table_queue import TableQueue
from tui.dashboard import QueuetopApp
from tui.screens.dialogs import HelpScreen

from .conftest import wait_until
from .pgbouncer import running_pgbouncer
from .test_prometheus import Exporter
from .test_tui import panel_rows, queue_rows, settle

HOLD = "SELECT pg_sleep(600) AS held"
HOLDING = "datname = current_database() AND state = 'active' AND query = %s"  # a holder's server session
WAITING = re.compile(r"waiting for a server connection \((\d+) s\): pool exhausted\?")


@pytest.fixture(scope="module", params=["transaction", "session"])
def small_pool(request, pg_server, tmp_path_factory):
    """PgBouncer in front of the test server with a pool of two server connections per database."""
    with running_pgbouncer(pg_server.socket_dir, tmp_path_factory.mktemp(f"pgb-small-{request.param}"),
                           mode=request.param, pool_size=2) as bouncer:
        yield bouncer


@contextmanager
def pool_held(db, bouncer) -> Iterator[callable]:
    """Both server connections of the database's pool taken by a long query each, through the
    pooler (real sessions on threads); yields `release`, which cancels them (also done at the end)."""
    failures: list[BaseException] = []

    def hold() -> None:
        try:
            with psycopg.connect(bouncer.uri(db.name), autocommit=True, prepare_threshold=None) as conn:
                conn.execute(HOLD)
        except psycopg.errors.QueryCanceled:
            pass  # released
        except BaseException as exc:
            failures.append(exc)

    def holders() -> int:
        with db.connect() as conn:
            row = conn.execute(f"SELECT count(*) FROM pg_stat_activity WHERE {HOLDING}", (HOLD,)).fetchone()
            return int(row[0]) if row else 0

    def release() -> None:
        with db.connect() as conn:
            conn.execute(f"SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE {HOLDING}", (HOLD,))
        wait_until(lambda: holders() == 0, timeout=15, what="the holders to end")

    threads = [threading.Thread(target=hold, name=f"holder-{n}", daemon=True) for n in range(2)]
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: holders() == 2, timeout=15, what="both server connections held")
        yield release
    finally:
        release()
        for thread in threads:
            thread.join(10)
        assert failures == []


def _queue(db, name: str, n: int) -> None:
    with db.connect() as conn:
        TableQueue.create(conn, name).enqueue_batch(conn, ['{"n": 1}'] * n)


@pytest.mark.parametrize("declared", [(), ("--pooler", "MODE")], ids=["found-out", "declared"])
def test_snapshot_exits_2_within_its_bound_saying_what_it_waited_for(db, small_pool, cli, declared):
    # Found out (the connection's first statement waits: the connect deadline, 10 s) or declared
    # (--pooler transaction: nothing asked at connect, the first probe transaction waits: 5 s).
    _queue(db, "held_jobs", 3)
    uri = small_pool.uri(db.name)
    pooler = [small_pool.mode if arg == "MODE" else arg for arg in declared]
    with pool_held(db, small_pool):
        started = time.monotonic()
        result = cli("snapshot", "--dsn", uri, *pooler, "--json", timeout=60)
        took = time.monotonic() - started
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"queuetop: error: no answer from postgresql://postgres@/{db.name}?"), lines
    # (declared session mode: the session settings a pinned session gets at connect wait there)
    bound = 5 if declared and small_pool.mode == "transaction" else 10
    assert lines[0].endswith(f" in {bound} s: waiting for a server connection (pool exhausted?)"), lines
    assert bound <= took < bound + 8, took  # the deadline, not PgBouncer's two-minute query_wait_timeout
    # Once the pool has a connection again, the same command works.
    again = cli("snapshot", "--dsn", uri, *pooler, "--json", timeout=60)
    assert again.returncode == 0, again.stderr
    [snapshot] = again.json_lines()
    assert [(q["name"], q["depth"]) for q in snapshot["queues"] if q["name"] == "held_jobs"] == [("held_jobs", 3)]


async def test_the_dashboard_draws_says_it_waits_answers_keys_and_recovers(db, small_pool):
    _queue(db, "held_jobs", 4)
    target = resolve_target(small_pool.uri(db.name))
    assert target is not None
    with pool_held(db, small_pool) as release:
        app = QueuetopApp(lambda sink: Sampler(target, sink, interval_s=0.3))
        async with app.run_test(size=(120, 30)) as pilot:
            status = app.query_one("#status")
            await settle(pilot, app, lambda: WAITING.search(str(status.render())), "the wait said", 1000)
            first = int(WAITING.search(str(status.render()))[1])
            assert first >= 4  # seconds without an answer (the first answer's deadline is 5 s)
            assert "DISCONNECTED" in str(status.render())
            await pilot.press("question_mark")  # keys are answered meanwhile
            await settle(pilot, app, lambda: isinstance(app.screen, HelpScreen), "the help, at once", 100)
            await pilot.press("escape")
            await settle(pilot, app, lambda: not isinstance(app.screen, HelpScreen), "the help closed", 100)
            # The seconds count on while nothing answers.
            await settle(pilot, app, lambda: (m := WAITING.search(str(status.render()))) and int(m[1]) > first, "the count", 1000)
            # No figures: nothing was read, and nothing is shown as calm (the queues are unknown, and why).
            assert list(queue_rows(app)) == ["unknown"] and "waiting for a server connection" in queue_rows(app)["unknown"][0]
            release()
            await settle(pilot, app, lambda: queue_rows(app).get("reference:held_jobs", ("", ""))[1] == "4", "the figures", 1500)
            await settle(pilot, app, lambda: "LIVE" in str(status.render()), "live again", 500)
            assert not WAITING.search(str(status.render()))


async def test_the_dashboard_quits_at_once_while_nothing_answers(db, small_pool):
    target = resolve_target(small_pool.uri(db.name))
    assert target is not None
    with pool_held(db, small_pool):
        app = QueuetopApp(lambda sink: Sampler(target, sink, interval_s=0.3))
        async with app.run_test(size=(100, 30)) as pilot:
            status = app.query_one("#status")
            # A probe is waiting for its first answer right now (the next one after the wait said).
            await settle(pilot, app, lambda: WAITING.search(str(status.render())), "the wait said", 1000)
            await pilot.pause(0.5)
            pressed = time.monotonic()
            await pilot.press("q")
        took = time.monotonic() - pressed
        assert took < 3, took  # not the 5 s of a probe's deadline, nor PgBouncer's two minutes


def test_the_exporter_serves_up_0_while_nothing_answers_and_the_figures_after(db, small_pool):
    _queue(db, "held_jobs", 5)
    with pool_held(db, small_pool) as release:
        exporter = Exporter("--dsn", small_pool.uri(db.name), "--interval", "0.3")
        try:
            def up() -> float | None:
                values = [value for (name, _labels), value in exporter.metrics().items() if name == "queuetop_up"]
                return values[0] if values else None

            assert wait_until(lambda: up() is not None, timeout=20, what="a first sample served") and up() == 0.0
            depths = [name for (name, _labels) in exporter.metrics() if name == "queuetop_queue_depth"]
            assert depths == []  # unknown is absent, never a 0
            release()

            def depth() -> float | None:
                found = [value for (name, labels), value in exporter.metrics().items()
                         if name == "queuetop_queue_depth" and ("queue", "held_jobs") in labels]
                return found[0] if found and up() == 1.0 else None

            assert wait_until(depth, timeout=30, what="the figures served again") == 5.0
        finally:
            stopping = time.monotonic()
            assert exporter.stop() == 0
            assert time.monotonic() - stopping < 10


def test_the_dashboard_opens_within_the_deadline_with_its_engine_controls_off_for_now(db, small_pool):
    """What runs before the first frame (the engine controls' check, on someone else's database
    and with --engine) waits for an answer no longer than the deadline, and the dashboard opens."""
    from probes.config import Config
    from tui.app import single_host

    target = resolve_target(small_pool.uri(db.name))
    assert target is not None
    with pool_held(db, small_pool):
        for engine in (False, True):
            started = time.monotonic()
            spec = single_host("held", target, Config(), 1.0, engine=engine)
            took = time.monotonic() - started
            assert took < 8, (engine, took)
            assert spec.controls is None and spec.controls_off is not None
            assert "waiting for a server connection (pool exhausted?)" in spec.controls_off, spec.controls_off
            assert (spec.prepare is not None) == engine  # with --engine, an engine key checks again


def _waiting_in_pool(bouncer, database: str) -> int:
    return sum(int(p["cl_waiting"]) for p in bouncer.show("POOLS") if p["database"] == database)


async def test_its_own_clients_in_the_pools_wait_queue_stay_few_and_the_pooler_panel_shows_that_pool(db, small_pool):
    """Through the very pool that has nothing to give, with its console given: the Pooler panel
    shows that pool (the alias the DSN names: the server's database is unknown, nothing answers)
    with its waiting clients, and however many first-answer deadlines pass, queuetop keeps at most
    one client per probe session in the pool's wait queue (PgBouncer does not see a client that
    left its wait queue gone until a server connection frees up: ending each wait at its deadline
    piled one more "waiting client" up per deadline)."""
    from dataclasses import replace

    from tui.widgets.panels import PoolerPanel

    pooled = resolve_target(small_pool.uri(db.name))
    assert pooled is not None
    target = replace(pooled, pgbouncer=console_target(small_pool.admin_uri))
    with pool_held(db, small_pool) as release:
        app = QueuetopApp(lambda sink: Sampler(target, sink, interval_s=0.3))
        async with app.run_test(size=(100, 30)) as pilot:
            pool = f"{db.name}/postgres"
            await settle(pilot, app, lambda: app.snapshot is not None and not app.snapshot.connected
                         and pool in panel_rows(app, PoolerPanel), "the pool shown while nothing answers", 1500)
            assert app.snapshot.server.database is None
            assert int(panel_rows(app, PoolerPanel)[pool][1]) >= 1
            most, started = 0, time.monotonic()
            while time.monotonic() - started < 3 * FIRST_ANSWER_S + 1:  # three deadlines and more
                most = max(most, _waiting_in_pool(small_pool, db.name))
                await pilot.pause(0.5)
            assert 1 <= most <= MAX_PROBE_SESSIONS, most
            assert WAITING.search(str(app.snapshot.extra.get("connection_error")))
            release()
            await settle(pilot, app, lambda: app.snapshot is not None and app.snapshot.connected,
                         "the figures back once the pool gives a connection", 3000)
