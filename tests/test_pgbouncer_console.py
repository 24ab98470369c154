"""PgBouncer as a target (issue 44): the pooler probe reads a real PgBouncer's admin console (Debian's
1.18, started here in transaction mode with a pool of 2 server connections), and a pool with no
connection left reads as it is: 2 server connections held by long `pg_sleep`s through the pooler,
4 more clients waiting for one, a queue with ready messages and nobody on the server to take them.
`snapshot --json` has the pool (its cl_waiting as SHOW POOLS says it, read just before and after)
and the queue's verdict `starved: 4 clients waiting in pool <db>/postgres for N s`; the dashboard's
Pooler panel shows the pool; the exporter serves its gauges. A console that cannot be read is the
pooler probe's error, and everything else is read as before."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import psycopg
import pytest

from dbcore.deadline import WATCHDOG, NoAnswer
from probes.config import parse_config
from probes.pooler_console import POOLER, console_target, run_pooler
from probes.sampler import run_cycle

from .conftest import Database, Server, _ensure_role, drop_database, make_database, run_cli, wait_until
from .pgbouncer import STATS_USER, PgBouncer, running_pgbouncer

POOL_SIZE = 2
WAITERS = 4
QUEUE = "pooled_jobs"
READY = 7


@dataclass
class Exhausted:
    """A PgBouncer whose pool for `db` has every server connection held and WAITERS clients waiting."""

    bouncer: PgBouncer
    db: Database
    holders: list[int]  # the server pids running pg_sleep

    @property
    def pool(self) -> str:
        return f"{self.db.name}/postgres"

    def truth(self) -> dict[str, object]:
        """The pool's row of SHOW POOLS, now."""
        rows = [r for r in self.bouncer.show("POOLS") if r["database"] == self.db.name and r["user"] == "postgres"]
        assert len(rows) == 1, rows
        return rows[0]


def _client(uri: str, query: str, errors: list[BaseException]) -> None:
    """A client of the pooler running `query` until it ends (or the test ends it)."""
    try:
        with psycopg.connect(uri, autocommit=True, prepare_threshold=None) as conn:
            conn.execute(query)
    except psycopg.Error as exc:  # ended at the test's end: expected
        errors.append(exc)


@pytest.fixture(scope="module")
def exhausted(pg_server: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Exhausted]:
    _ensure_role(pg_server, STATS_USER)
    db = make_database(pg_server, prefix="pgb")
    threads: list[threading.Thread] = []
    errors: list[BaseException] = []
    try:
        with running_pgbouncer(pg_server.socket_dir, tmp_path_factory.mktemp("pgb-exhausted"), mode="transaction",
                               pool_size=POOL_SIZE) as bouncer:
            uri = bouncer.uri(db.name)
            for n in range(POOL_SIZE + WAITERS):
                query = "SELECT pg_sleep(600)" if n < POOL_SIZE else "SELECT 1"
                thread = threading.Thread(target=_client, args=(uri, query, errors), daemon=True)
                threads.append(thread)
                thread.start()
                if n == POOL_SIZE - 1:  # both server connections taken by the sleepers, then the waiters
                    with db.connect() as direct:
                        wait_until(lambda: direct.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND query "
                                                          "LIKE 'SELECT pg_sleep(600)%%' AND state = 'active'",
                                                          (db.name,)).fetchone()[0] == POOL_SIZE,
                                   timeout=30, what="both server connections running pg_sleep")
            state = Exhausted(bouncer, db, [])
            wait_until(lambda: state.truth()["cl_waiting"] == WAITERS, timeout=30, what=f"{WAITERS} clients waiting")
            with db.connect() as direct:
                state.holders = [row[0] for row in direct.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = %s AND query LIKE 'SELECT pg_sleep(600)%%'", (db.name,))]
            assert run_cli("engine", "enqueue", QUEUE, "--count", str(READY), "--dsn", db.dsn).returncode == 0
            yield state
            # The end: the sleepers' server sessions ended, the waiters served, every client gone.
            with db.connect() as direct:
                direct.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s "
                               "AND query LIKE 'SELECT pg_sleep(600)%%'", (db.name,))
            for thread in threads[POOL_SIZE:]:
                thread.join(30)
            assert not any(t.is_alive() for t in threads[POOL_SIZE:]), "a waiting client was never served"
    finally:
        for thread in threads:  # the pooler is stopped: every client has its answer or its error
            thread.join(30)
        with psycopg.connect(pg_server.admin_uri, autocommit=True) as admin:
            drop_database(admin, db.name)


def _pool_of(document: dict, name: str) -> dict:
    pools = [p for p in document["pooler"]["pools"] if f"{p['database']}/{p['user']}" == name]
    assert len(pools) == 1, document["pooler"]
    return pools[0]


def _maxwait(row: dict[str, object]) -> float:
    return int(row["maxwait"]) + int(row.get("maxwait_us") or 0) / 1e6  # type: ignore[call-overload]


def test_snapshot_json_has_the_pool_and_the_queue_is_starved(exhausted: Exhausted):
    before = exhausted.truth()
    run = run_cli("snapshot", "--json", "--dsn", exhausted.db.dsn, "--pgbouncer", exhausted.bouncer.admin_uri)
    after = exhausted.truth()
    assert run.returncode == 0, run.stderr
    (document,) = run.json_lines()
    assert document["probes"][POOLER]["error"] is None
    pool = _pool_of(document, exhausted.pool)
    assert before["cl_waiting"] == after["cl_waiting"] == WAITERS
    assert pool["cl_waiting"] == before["cl_waiting"]
    assert pool["sv_active"] == before["sv_active"] == POOL_SIZE and pool["sv_idle"] == 0
    assert pool["cl_active"] == before["cl_active"] and pool["pool_mode"] == "transaction"
    assert pool["server_database"] == exhausted.db.name and pool["pool_size"] == POOL_SIZE
    assert _maxwait(before) <= pool["maxwait_s"] <= _maxwait(after) + 1
    assert not any(p["database"] == "pgbouncer" for p in document["pooler"]["pools"])  # the console's own pool is not one
    (queue,) = [q for q in document["queues"] if q["name"] == QUEUE]
    assert queue["ready"] == READY
    verdict = queue["diagnosis"]
    assert verdict["code"] == "starved", verdict
    said = re.fullmatch(rf"starved: {WAITERS} clients waiting in pool {re.escape(exhausted.pool)} for (\d+) s", verdict["reason"])
    assert said is not None, verdict["reason"]
    assert int(_maxwait(before)) - 1 <= int(said[1]) <= _maxwait(after) + 1
    assert f"pool:{exhausted.pool}" in verdict["objects"]


def test_without_a_pgbouncer_the_same_queue_has_nobody_on_it(exhausted: Exhausted):
    """The clients waiting in the pool are what makes it `starved`: without the console, the same
    sample reads `no-consumers`, and `pooler` is null with no pooler probe."""
    run = run_cli("snapshot", "--json", "--dsn", exhausted.db.dsn)
    assert run.returncode == 0, run.stderr
    (document,) = run.json_lines()
    assert document["pooler"] is None and POOLER not in document["probes"]
    (queue,) = [q for q in document["queues"] if q["name"] == QUEUE]
    assert queue["diagnosis"]["code"] == "no-consumers", queue["diagnosis"]


async def test_the_pooler_panel_shows_the_pool_with_its_waiting_clients(exhausted: Exhausted):
    from probes.sampler import Sampler
    from tests.test_tui import panel_rows, settle
    from tui.backend import DatabaseBackend
    from tui.dashboard import QueuetopApp
    from tui.widgets.keyed_table import KeyedTable
    from tui.widgets.panels import PoolerPanel

    target = replace(exhausted.db.target, pgbouncer=console_target(exhausted.bouncer.admin_uri))
    app = QueuetopApp(lambda sink: Sampler(target, sink, interval_s=0.3), backend=DatabaseBackend(target))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, lambda: exhausted.pool in panel_rows(app, PoolerPanel), "the pool in the Pooler panel", 1500)
        panel = app.query_one(PoolerPanel)
        assert panel.display
        row = panel_rows(app, PoolerPanel)[exhausted.pool]
        truth = exhausted.truth()
        assert row[0] == exhausted.pool and row[1] == str(truth["cl_waiting"]) == str(WAITERS)
        assert row[4] == f"{POOL_SIZE}/{POOL_SIZE}" and row[5] == "0" and row[6] == "transaction"
        await pilot.pause()
        table = panel.query_one(KeyedTable)
        shown = table.shown_columns()
        assert shown[:2] == ["pool", "waiting"], shown  # at 80 columns: the pool and its waiting clients
        assert str(table.get_cell(exhausted.pool, "waiting")) == str(WAITERS)
        name = str(table.get_cell(exhausted.pool, "pool"))  # a name: whole, or cut with an ellipsis beside its figures
        assert name == exhausted.pool or (name.endswith("…") and exhausted.pool.startswith(name[:-1]) and len(name) >= 8), name
        from tests.test_tui import queue_rows

        verdicts = {key: cells[-1] for key, cells in queue_rows(app).items() if QUEUE in key}
        assert list(verdicts.values()) == ["starved"], verdicts


async def test_the_pooler_panel_takes_no_room_without_a_pgbouncer(db: Database):
    from probes.sampler import Sampler
    from tests.test_tui import settle
    from tui.backend import DatabaseBackend
    from tui.dashboard import QueuetopApp
    from tui.widgets.panels import PoolerPanel

    app = QueuetopApp(lambda sink: Sampler(db.target, sink, interval_s=0.3), backend=DatabaseBackend(db.target))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, lambda: app.snapshot is not None, "a snapshot", 500)
        await pilot.pause()
        panel = app.query_one(PoolerPanel)
        assert not panel.display and panel.size.width == 0


def test_the_exporter_serves_the_pools_gauges(exhausted: Exhausted):
    from .test_prometheus import Exporter

    exporter = Exporter("--dsn", exhausted.db.dsn, "--pgbouncer", exhausted.bouncer.admin_uri, "--interval", "0.3")
    try:
        def gauges() -> dict | None:
            m = exporter.metrics()
            labels = tuple(sorted({"host": f"local/{exhausted.db.name}", "database": exhausted.db.name, "user": "postgres"}.items()))
            return m if ("queuetop_pool_clients_waiting", labels) in m else None

        metrics = wait_until(gauges, timeout=30, what="the pool's gauges")
        truth = exhausted.truth()
        host = ("host", f"local/{exhausted.db.name}")
        labels = tuple(sorted([host, ("database", exhausted.db.name), ("user", "postgres")]))
        assert metrics[("queuetop_pool_clients_waiting", labels)] == truth["cl_waiting"] == WAITERS
        assert metrics[("queuetop_pool_servers_active", labels)] == POOL_SIZE
        assert metrics[("queuetop_pool_servers_idle", labels)] == 0
        assert metrics[("queuetop_pool_clients_active", labels)] == truth["cl_active"]
        assert metrics[("queuetop_pool_maxwait_seconds", labels)] > 0
        assert metrics[("queuetop_probe_error", tuple(sorted([host, ("probe", POOLER)])))] == 0
        starved = tuple(sorted([host, ("source", "reference"), ("queue", QUEUE), ("code", "starved")]))
        assert metrics[("queuetop_queue_diagnosis", starved)] == 1
    finally:
        exporter.stop()


# -- a console that cannot be read: the pooler probe's error, the rest goes on ----------------------


SECRET = "Sb0unc3r-pw"


@pytest.mark.parametrize("which", ["nothing-listens", "not-allowed", "not-a-console"])
def test_a_console_that_cannot_be_read_is_the_pooler_probes_error_and_the_rest_goes_on(exhausted: Exhausted, which: str):
    bouncer = exhausted.bouncer
    dsn, said = {
        "nothing-listens": (f"postgresql://{STATS_USER}:{SECRET}@/pgbouncer?host={bouncer.socket_dir}&port=1", "cannot connect"),
        # a user PgBouncer knows but lets not read its console (not in stats_users or admin_users)
        "not-allowed": (f"postgresql://qt_pw_user:{SECRET}@/pgbouncer?host={bouncer.socket_dir}&port={bouncer.port}",
                        "stats_users"),
        # the database itself, not PgBouncer's console
        "not-a-console": (exhausted.db.dsn, "not a PgBouncer admin console"),
    }[which]
    run = run_cli("snapshot", "--json", "--dsn", exhausted.db.dsn, "--pgbouncer", dsn)
    assert run.returncode == 0, run.stderr
    assert SECRET not in run.stdout + run.stderr
    (document,) = run.json_lines()
    assert document["pooler"] is None  # unknown: null, never an empty list that reads as calm
    error = document["probes"][POOLER]["error"]
    assert error is not None and said in error and error.startswith("PgBouncer console "), error
    assert all(status["error"] is None for name, status in document["probes"].items() if name != POOLER), document["probes"]
    (queue,) = [q for q in document["queues"] if q["name"] == QUEUE]
    assert queue["ready"] == READY and queue["diagnosis"]["code"] == "no-consumers"  # no pool known to wait in


def test_a_console_that_does_not_answer_never_holds_the_cycle_up(pg_server: Server, tmp_path_factory: pytest.TempPathFactory,
                                                                  db: Database):
    """A PgBouncer stopped dead (SIGSTOP): the connection to its console times out (libpq's
    connect_timeout), and the cycle ends with the pooler unknown and the figures read."""
    _ensure_role(pg_server, STATS_USER)
    directory = tmp_path_factory.mktemp("pgb-stopped")  # (PgBouncer runs as the server's user: a directory it may enter)
    with running_pgbouncer(pg_server.socket_dir, directory, mode="session") as bouncer:
        pid = int((directory / "pgbouncer.pid").read_text())
        os.kill(pid, signal.SIGSTOP)
        try:
            target = replace(db.target, pgbouncer=console_target(bouncer.admin_uri))
            started = time.monotonic()
            snapshot = run_cycle(target)
            took = time.monotonic() - started
        finally:
            os.kill(pid, signal.SIGCONT)
    assert took < 15, took
    status = snapshot.probes[POOLER]
    assert snapshot.pooler is None and status.error is not None and "cannot connect" in status.error, status
    assert snapshot.to_json()["pooler"] is None
    assert all(s.error is None for name, s in snapshot.probes.items() if name != POOLER)


def test_the_deadline_cuts_a_wait_on_a_real_connection(db: Database):
    """What bounds the console's SHOW once connected (dbcore/deadline.py, as the probes' first
    answer): the socket shut under a wait that would last 30 s (a real server's pg_sleep), the wait
    ended at the deadline, the connection broken, and a quick answer never cut."""
    with db.connect() as conn:
        with WATCHDOG.watch(conn, 5.0):
            assert conn.execute("SELECT 1").fetchone() == (1,)
        started = time.monotonic()
        with pytest.raises(NoAnswer) as raised, WATCHDOG.watch(conn, 0.5, what="the test server"):
            conn.execute("SELECT pg_sleep(30)")
        assert time.monotonic() - started < 10 and "no answer from the test server" in str(raised.value)
        assert conn.closed or conn.broken


def test_a_quick_console_read_is_not_cut(exhausted: Exhausted):
    status, sample = run_pooler(console_target(exhausted.bouncer.admin_uri))  # type: ignore[arg-type]
    assert status.error is None and sample is not None
    assert [p.cl_waiting for p in sample.pools if p.database == exhausted.db.name] == [WAITERS]


# -- the command line and the config -------------------------------------------------------------


def test_pgbouncer_is_given_once_per_dsn():
    run = run_cli("snapshot", "--dsn", "host=/nonexistent dbname=a", "--dsn", "host=/nonexistent dbname=b",
                  "--pgbouncer", "host=/nonexistent dbname=pgbouncer")
    assert run.returncode == 2 and "--pgbouncer: give it once per --dsn" in run.stderr, run.stderr


def test_a_config_target_takes_a_pgbouncer_dsn():
    config = parse_config({"targets": [{"name": "billing", "dsn": "host=db1 dbname=billing",
                                        "pgbouncer": "host=db1 port=6432 dbname=pgbouncer user=stats"}]})
    assert config.targets[0].pgbouncer == "host=db1 port=6432 dbname=pgbouncer user=stats"
    from dbcore.errors import UsageError

    with pytest.raises(UsageError, match="pgbouncer must be the DSN"):
        parse_config({"targets": [{"name": "billing", "dsn": "host=db1", "pgbouncer": 6432}]})


def test_a_config_targets_pgbouncer_is_read(exhausted: Exhausted, tmp_path: Path):
    config = tmp_path / "config.toml"
    config.write_text(f'[[targets]]\nname = "billing"\ndsn = "{exhausted.db.dsn}"\npgbouncer = "{exhausted.bouncer.admin_uri}"\n')
    run = run_cli("snapshot", "--json", "--config", str(config))
    assert run.returncode == 0, run.stderr
    (document,) = run.json_lines()
    assert _pool_of(document, exhausted.pool)["cl_waiting"] == WAITERS


def test_the_pgbouncer_dsn_is_masked_in_the_process_title(monkeypatch):
    from tui import cli

    shown: list[list[str]] = []
    monkeypatch.setattr(cli, "set_title", lambda args: shown.append(list(args)))
    cli._mask_process_title(["snapshot", "--pgbouncer", f"postgresql://stats:{SECRET}@h:6432/pgbouncer",
                             f"--pgbouncer=postgresql://stats:{SECRET}@h:6432/pgbouncer"])
    assert shown and SECRET not in " ".join(shown[-1]) and "h:6432" in shown[-1][2] and shown[-1][3].startswith("--pgbouncer=")


# -- the verdict, from one sample --------------------------------------------------------------------


def _pool(database: str = "app", waiting: int = 4, maxwait: float = 40.2, server_database: str | None = "app", user: str = "postgres"):
    from probes.model import PoolSample

    return PoolSample(database=database, user=user, cl_active=2, cl_waiting=waiting, sv_active=2, sv_idle=0, maxwait_s=maxwait,
                      pool_mode="transaction", server_database=server_database, pool_size=2)


def _verdict(pools, sessions=()):
    from dataclasses import replace as with_

    from probes.diagnosis import Diagnoser
    from probes.model import PoolerSample, ProbeStatus

    from .test_diagnosis import queue, snapshot

    frame = with_(snapshot(0, [queue(depth=12, ready=12, oldest_ready_age_s=50.0)], sessions=sessions),
                  pooler=PoolerSample(pools=tuple(pools)), probes={POOLER: ProbeStatus(elapsed_ms=1.0)})
    return Diagnoser().diagnose(frame).queues[0].diagnosis


def test_starved_names_the_pool_with_the_most_clients_waiting():
    verdict = _verdict([_pool(database="app_ro", waiting=1, maxwait=3.0), _pool(waiting=4, maxwait=40.2)])
    assert verdict.code == "starved" and verdict.reason == "starved: 4 clients waiting in pool app/postgres for 40 s"
    assert verdict.since_s == 40.2 and "pool:app/postgres" in verdict.objects
    assert _verdict([_pool(waiting=1, maxwait=0.4)]).reason == "starved: 1 client waiting in pool app/postgres for 0 s"


def test_not_starved_without_clients_waiting_in_a_pool_of_its_database_or_with_a_consumer_on_the_server():
    from .test_diagnosis import session

    assert _verdict([_pool(waiting=0, maxwait=0.0)]).code == "no-consumers"
    assert _verdict([_pool(database="other", server_database="other")]).code == "no-consumers"  # another database's pool
    assert _verdict([_pool(server_database=None)]).code == "no-consumers"  # an alias SHOW DATABASES did not list
    assert _verdict([_pool()], sessions=[session(7)]).code != "starved"  # a consumer on the server: not held in the pooler
    assert _verdict([]).code == "no-consumers"


def test_the_pooler_round_trips_through_the_json_and_a_failed_console_is_null():
    from dataclasses import replace as with_

    from probes.model import PoolerSample, ProbeStatus, Snapshot

    from .test_diagnosis import queue, snapshot

    frame = with_(snapshot(0, [queue()]), pooler=PoolerSample(pools=(_pool(), _pool(database="b", waiting=0, maxwait=0.0))),
                  probes={POOLER: ProbeStatus(elapsed_ms=1.5)})
    document = frame.to_json()
    assert document["pooler"]["pools"][0]["cl_waiting"] == 4 and document["pooler"]["pools"][0]["maxwait_s"] == 40.2
    assert Snapshot.from_json(document) == frame
    failed = with_(frame, pooler=None, probes={POOLER: ProbeStatus(elapsed_ms=3000.0, error="PgBouncer console x: no answer",
                                                                   unread=("all",))})
    assert failed.to_json()["pooler"] is None and failed.unknown_list("pooler") == "PgBouncer console x: no answer"
    assert Snapshot.from_json(failed.to_json()) == failed
    none_given = with_(frame, pooler=None, probes={})
    assert none_given.to_json()["pooler"] is None and none_given.unknown_list("pooler") is None
    assert Snapshot.from_json(none_given.to_json()) == none_given


def test_the_readable_snapshot_has_the_pool(exhausted: Exhausted):
    run = run_cli("snapshot", "--dsn", exhausted.db.dsn, "--pgbouncer", exhausted.bouncer.admin_uri)
    assert run.returncode == 0, run.stderr
    section = run.stdout.split("\nPooler ", 1)[1].split("\n\n", 1)[0]
    line = next(line for line in section.splitlines() if exhausted.pool in line)
    assert line.split()[1] == str(WAITERS) and f"{POOL_SIZE}/{POOL_SIZE}" in line and "transaction" in line, section


def test_the_pools_are_read_and_served_while_the_database_does_not_answer(exhausted: Exhausted):
    """The console is read on a connection of its own: a database that cannot be reached (here a
    socket nothing listens on) stops no pooler reading, and the exporter serves the pools beside
    `queuetop_up 0`."""
    from dbcore.database import resolve_target
    from probes.prometheus import families
    from probes.sampler import Sampler

    down = resolve_target(f"host={exhausted.bouncer.socket_dir} port=1 dbname={exhausted.db.name}")
    assert down is not None
    seen: list = []
    sampler = Sampler(replace(down, pgbouncer=console_target(exhausted.bouncer.admin_uri)), seen.append, interval_s=0.2, host="h")
    sampler.start()
    try:
        snapshot = wait_until(lambda: next((s for s in seen if s.pooler is not None), None), timeout=30, what="a snapshot")
    finally:
        sampler.stop()
    assert not snapshot.connected and snapshot.probes["queues"].error is not None
    samples = {(sample.name, tuple(sorted(sample.labels.items()))): sample.value for family in families([snapshot])
               for sample in family.samples}
    assert samples[("queuetop_up", (("host", "h"),))] == 0
    labels = (("database", exhausted.db.name), ("host", "h"), ("user", "postgres"))
    assert samples[("queuetop_pool_clients_waiting", labels)] == WAITERS


def test_a_recording_keeps_the_pools(exhausted: Exhausted, tmp_path: Path):
    file = tmp_path / "rec.jsonl.gz"
    run = run_cli("record", str(file), "--dsn", exhausted.db.dsn, "--pgbouncer", exhausted.bouncer.admin_uri,
                  "--interval", "0.3", "--duration", "2")
    assert run.returncode == 0, run.stderr
    assert run.json_lines()[-1]["snapshots"] >= 1
    replayed = run_cli("snapshot", "--from", str(file), "--json")
    assert replayed.returncode == 0, replayed.stderr
    (document,) = replayed.json_lines()
    assert _pool_of(document, exhausted.pool)["cl_waiting"] == WAITERS
    (queue,) = [q for q in document["queues"] if q["name"] == QUEUE]
    assert queue["diagnosis"]["code"] == "starved"
