"""The probes through a stock PgBouncer (Debian's 1.18: no `options` at start-up, no prepared
statements kept across transactions) in session and transaction mode: `snapshot --json` reads
what a direct snapshot reads, again and again; each probe's settings hold inside its own
transaction and are checked; the dashboard and the exporter show figures through either mode."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest
from psycopg.pq import TransactionStatus

from dbcore.database import resolve_target
from probes.postgres import PROBE_SETTINGS, PostgresProbes, open_probe_connection
from probes.sampler import Sampler, run_probe
from probes.session import ProbeSettingsRefused, probe_transaction
from queues import lease as leases
from queues import ring as rings
from queues.table_queue import TableQueue
from tui.backend import DatabaseBackend
from tui.dashboard import QueuetopApp

from .conftest import wait_until
from .pgbouncer import running_pgbouncer
from .test_prometheus import Exporter
from .test_tui import queue_rows, settle

WITNESS_APP = "qt-pooler-witness"


def _fill(db) -> None:
    """A queue with messages, a ring with cells used, a lease held: what both snapshots must read alike."""
    with db.connect() as conn:
        queue = TableQueue.create(conn, "pooled_jobs")
        queue.enqueue_batch(conn, ['{"n": 1}'] * 7)
        rings.create(conn, "pooled_ring", 8)
        rings.put(conn, "pooled_ring", ['{"a": 1}', '{"a": 2}', '{"a": 3}'])
        leases.acquire(conn, "pooled_lease", "pooler-test", 600)


def _figures(snapshot: dict) -> dict[str, Any]:
    """What a snapshot says that does not move between two reads a moment apart."""
    witnesses = snapshot["connections"]["by_application"].get(WITNESS_APP)
    return {
        "database": snapshot["server"]["database"],
        "queues": sorted((q["source"], q["name"], q["depth"], q["ready"], q["in_flight"], q["dead"]) for q in snapshot["queues"]),
        "rings": sorted((r["name"], r["capacity"], r["used"]) for r in snapshot["rings"]),
        "leases": sorted((lease["name"], lease["holder"], lease["token"], lease["state"]) for lease in snapshot["leases"]),
        "max_connections": snapshot["connections"]["max"],
        "witnesses": witnesses,
    }


def test_snapshot_through_the_pooler_reads_what_a_direct_one_reads_run_after_run(db, pgbouncer, cli):
    _fill(db)
    witnesses = [db.connect(application_name=WITNESS_APP) for _ in range(3)]
    try:
        direct = cli("snapshot", "--dsn", db.dsn, "--json")
        assert direct.returncode == 0, direct.stderr
        [expected] = direct.json_lines()
        assert _figures(expected)["witnesses"] == 3 and _figures(expected)["queues"]
        # Transaction mode broke on the second run (a statement prepared on a server session that
        # the next transaction did not get): several runs, each against the direct one.
        for run in range(4):
            pooled = cli("snapshot", "--dsn", pgbouncer.uri(db.name), "--json")
            assert pooled.returncode == 0, (run, pooled.stderr)
            [snapshot] = pooled.json_lines()
            failed = {name: status["error"] for name, status in snapshot["probes"].items() if status["error"]}
            assert failed == {}, (run, failed)
            assert _figures(snapshot) == _figures(expected), run
    finally:
        for conn in witnesses:
            conn.close()


def test_probe_settings_hold_inside_each_probe_transaction_through_the_pooler(db, pgbouncer):
    target = resolve_target(pgbouncer.uri(db.name))
    assert target is not None
    with open_probe_connection(target) as conn:
        for _ in range(3):  # each transaction on whichever server session the pooler gives
            with probe_transaction(conn):
                row = conn.execute("SELECT current_setting('statement_timeout') AS statement_timeout, "
                                   "current_setting('lock_timeout') AS lock_timeout, "
                                   "current_setting('transaction_read_only') AS read_only, "
                                   "current_setting('transaction_isolation') AS isolation, "
                                   "current_setting('jit') AS jit, current_setting('enable_seqscan') AS seqscan").fetchone()
                assert row == {"statement_timeout": "2s", "lock_timeout": "100ms", "read_only": "on",
                               "isolation": "read committed", "jit": "off", "seqscan": "off"}
                with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
                    conn.execute("CREATE TABLE public.written_by_a_probe (id int)")
            assert conn.info.transaction_status == TransactionStatus.IDLE
        # The settings were the transaction's own: none is left on the session (through a pooler
        # in transaction mode it would be another client's next transaction).
        after = conn.execute("SELECT current_setting('statement_timeout') AS statement_timeout").fetchone()
        assert after == {"statement_timeout": "0"}


def test_a_probe_whose_settings_are_refused_does_not_run_and_says_why(db, pgbouncer_transaction, monkeypatch):
    target = resolve_target(pgbouncer_transaction.uri(db.name))
    assert target is not None
    with open_probe_connection(target) as conn:
        ran: list[str] = []
        with pytest.raises(ProbeSettingsRefused, match='lock_timeout'):
            with probe_transaction(conn, settings={**PROBE_SETTINGS, "lock_timeout": "forever"}):
                ran.append("a statement")
        assert ran == [] and conn.info.transaction_status == TransactionStatus.IDLE
        # Taken by the server, but not as asked (2000.4 ms is rounded to 2 s): not run either.
        with pytest.raises(ProbeSettingsRefused, match=r"did not hold.*statement_timeout is '2s', not '2000.4'"):
            with probe_transaction(conn, settings={**PROBE_SETTINGS, "statement_timeout": "2000.4"}):
                ran.append("a statement")
        assert ran == []
        # As the sampler runs a probe: its status says why, its figures are unknown, it did not run.
        probes = PostgresProbes()
        probes.rings = lambda conn: ran.append("rings") or ()  # type: ignore[method-assign]
        monkeypatch.setitem(PROBE_SETTINGS, "lock_timeout", "forever")
        status, result = run_probe(probes, "rings", conn)
        assert ran == [] and result is None
        assert status.error is not None and "settings were refused" in status.error and "lock_timeout" in status.error
        monkeypatch.undo()
        status, result = run_probe(probes, "rings", conn)  # the same connection, settings as they should be
        assert ran == ["rings"] and status.error is None


async def test_the_dashboard_shows_the_queues_through_the_pooler(db, pgbouncer):
    _fill(db)
    target = resolve_target(pgbouncer.uri(db.name))
    assert target is not None
    app = QueuetopApp(lambda sink: Sampler(target, sink, interval_s=0.3), backend=DatabaseBackend(target))
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, app, lambda: queue_rows(app).get("reference:pooled_jobs", ("", ""))[1] == "7", "the queue's depth", 500)
        # Past psycopg's five runs of a statement, after which it would prepare it (by a name that
        # another server session does not know, through transaction pooling).
        seen = app.hosts[0].arrivals
        await settle(pilot, app, lambda: app.hosts[0].arrivals >= seen + 8, "more samples", 1500)
        snapshot = app.snapshot
        assert snapshot is not None and snapshot.connected
        assert {name: status.error for name, status in snapshot.probes.items() if status.error} == {}
        assert any(r.name == "pooled_ring" and r.used == 3 for r in snapshot.rings)


def test_the_exporter_serves_figures_through_the_pooler(db, pgbouncer):
    _fill(db)
    exporter = Exporter("--dsn", pgbouncer.uri(db.name), "--interval", "0.3")
    try:
        def depth() -> float | None:
            metrics = exporter.metrics()
            up = [value for (name, _labels), value in metrics.items() if name == "queuetop_up"]
            found = [value for (name, labels), value in metrics.items()
                     if name == "queuetop_queue_depth" and ("queue", "pooled_jobs") in labels]
            return found[0] if up == [1.0] and found else None

        assert wait_until(depth, timeout=30, what="the queue's depth served") == 7.0
        errors = [labels for (name, labels), value in exporter.metrics().items() if name == "queuetop_probe_error" and value != 0]
        assert errors == []
    finally:
        assert exporter.stop() == 0


def test_a_probe_transaction_through_the_pooler_leaves_other_clients_alone(db, pg_server, tmp_path_factory):
    """In transaction mode the server session a probe transaction ran on is another client's next
    (a pool of one: every transaction on the same one): it gets none of the probe's settings
    (SET LOCAL ends with the transaction)."""
    # (a directory of the factory's: PgBouncer runs as the server's user, who must reach it)
    with running_pgbouncer(pg_server.socket_dir, tmp_path_factory.mktemp("pgb-one"), mode="transaction", pool_size=1) as bouncer:
        _one_server_session_shared(db, bouncer)


def _one_server_session_shared(db, bouncer) -> None:
    target = resolve_target(bouncer.uri(db.name))
    assert target is not None
    stop = threading.Event()
    seen: list[str] = []
    failed: list[BaseException] = []

    def other_client() -> None:
        try:  # (no prepared statements: the other client is a well-behaved one through transaction pooling)
            with psycopg.connect(bouncer.uri(db.name), autocommit=True, prepare_threshold=None) as other:
                while not stop.is_set():
                    row = other.execute("SELECT current_setting('statement_timeout'), current_setting('jit')").fetchone()
                    assert row is not None
                    seen.append(f"{row[0]}/{row[1]}")
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=other_client)
    thread.start()
    try:
        with open_probe_connection(target) as conn:
            wait_until(lambda: seen, what="the other client's first answer")
            for _ in range(200):
                with probe_transaction(conn):
                    conn.execute("SELECT 1").fetchone()
            wait_until(lambda: len(seen) >= 20, what="the other client's answers")
    finally:
        stop.set()
        thread.join(10)
    assert failed == []
    assert len(seen) >= 20 and not [value for value in seen if value.startswith("2s/")], set(seen)


def test_a_probe_between_the_statements_of_its_transaction_is_not_counted_idle_in_transaction(db):
    """The dashboard's other probe session, caught between two statements of its read-only probe
    transaction, is `idle in transaction` to the server: the Connections panel's states count it
    idle (it holds no xid and no snapshot), while another application's idle transaction stays
    what it is."""
    probes = PostgresProbes()
    with open_probe_connection(db.target) as other, open_probe_connection(db.target) as conn, \
            db.connect(application_name="someone-else") as someone:
        someone.execute("BEGIN")
        someone.execute("SELECT 1")
        with probe_transaction(other):
            other.execute("SELECT 1")
            with probe_transaction(conn):
                probes.server(conn)
                truth = dict(conn.execute("SELECT application_name, state FROM pg_stat_activity WHERE pid = %s",
                                          (other.execute("SELECT pg_backend_pid() AS pid").fetchone()["pid"],)).fetchone())
                connections = probes.connections(conn)
        someone.execute("ROLLBACK")
    assert truth["state"] == "idle in transaction" and truth["application_name"].startswith("queuetop-probe")
    assert connections.by_state.get("idle in transaction") == 1  # someone-else's, not the probe's
