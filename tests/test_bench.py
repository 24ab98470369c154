"""The engine benchmark runs end to end at a tiny size (its figures are not asserted: a test
is no place to measure speed, but it must prove the harness works and pgbench agrees)."""

from __future__ import annotations

import json
import os

import pytest

from bench.engine import to_pgbench

from .conftest import wait_until


def test_pgbench_gets_the_same_statement_with_pgbench_variables():
    text = "SELECT 1 FROM t WHERE id = %(id)s::bigint AND token = %(token)s::bigint;"
    assert to_pgbench(text) == "SELECT 1 FROM t WHERE id = :id::bigint AND token = :token::bigint;\n"
    assert to_pgbench(text, gset=True).endswith(":token::bigint \\gset\n")


def test_bench_engine_tiny_run_prints_all_figures(db, cli):
    result = cli(
        "bench", "engine", "--dsn", db.dsn, "--json", "--messages", "400", "--single-messages", "40",
        "--batch", "20", "--rounds", "1", "--idle-seconds", "1",
    )
    assert result.returncode == 0, result.stderr
    (report,) = result.json_lines()
    # Both concurrencies by default, every cell of each.
    assert report["concurrency"] == [2, 8] and set(report["by_concurrency"]) == {"2", "8"}
    assert report["pool"] == "threads" and report["prefetch"] is False
    ratios = []
    for cells in report["by_concurrency"].values():
        for name in ("dequeue_single", "dequeue_batch", "enqueue_single", "enqueue_batch"):
            figures = cells[name]
            assert figures["queuetop_msgs_per_s"] > 0 and figures["pgbench_msgs_per_s"] > 0
            assert abs(figures["ratio"] - figures["queuetop_msgs_per_s"] / figures["pgbench_msgs_per_s"]) < 0.01
            ratios.append(figures["ratio"])
    assert report["min_ratio"] == min(ratios)
    assert report["idle_queries_per_s"] >= 0
    # The bench cleans up after itself: its queue is left empty.
    with db.connect() as conn:
        assert conn.execute('SELECT count(*) FROM queuetop."q_bench.engine"').fetchone()[0] == 0


def test_bench_engine_with_a_process_per_worker_claiming_ahead(db, cli):
    """--pool processes --prefetch: queuetop's dequeue side is `engine work --processes --prefetch`
    with a process per worker; every message of each run is processed (the bench checks it) and
    the JSON says how the pool ran."""
    result = cli(
        "bench", "engine", "--dsn", db.dsn, "--json", "--messages", "300", "--single-messages", "30",
        "--batch", "20", "--rounds", "1", "--idle-seconds", "0.5", "--concurrency", "3", "--pool", "processes", "--prefetch",
    )
    assert result.returncode == 0, result.stderr
    (report,) = result.json_lines()
    assert report["pool"] == "processes" and report["prefetch"] is True and report["concurrency"] == [3]
    for name in ("dequeue_single", "dequeue_batch"):
        assert report["by_concurrency"]["3"][name]["queuetop_msgs_per_s"] > 0


def test_bench_probes_tiny_run(db, cli):
    result = cli(
        "bench", "probes", "--dsn", db.dsn, "--json", "--small-depth", "20", "--large-depth", "3000",
        "--idle-connections", "3", "--cycles", "3", "--pileup", "3",
    )
    assert result.returncode == 0, result.stderr
    (report,) = result.json_lines()
    assert report["cycle_ms_p50_small"] > 0 and report["cycle_ms_p50_large"] > 0
    # Three pgbench clients on one held row: all three seen blocked by the locks probe.
    assert report["pileup_sessions"] == 3 and report["pileup_blocked_seen"] == 3
    assert 0 < report["locks_probe_ms_p50_pileup"] <= report["locks_probe_ms_p95_pileup"]
    # One round trip (libpq's trace), timed beside pg_activity's blocking query on the same pile-up:
    # the holder blocks one pgbench client by its transaction id, which pg_activity reports.
    assert report["locks_probe_round_trips"] == 1
    assert report["pg_activity_version"] == "3.6.2" and report["pg_activity_blocking_rows"] >= 1
    assert report["pg_activity_blocking_ms_p50_pileup"] > 0
    assert abs(report["locks_probe_vs_pg_activity"]
               - report["locks_probe_ms_p50_pileup"] / report["pg_activity_blocking_ms_p50_pileup"]) < 0.01
    # And when the probe cannot reuse the last cycle's tree, in rounds of their own beside pg_activity.
    assert report["locks_probe_ms_p50_pileup_reshaped"] > 0 and report["pg_activity_blocking_ms_p50_reshaped_rounds"] > 0
    assert abs(report["locks_probe_vs_pg_activity_reshaped"]
               - report["locks_probe_ms_p50_pileup_reshaped"] / report["pg_activity_blocking_ms_p50_reshaped_rounds"]) < 0.01
    assert abs(report["ratio"] - report["cycle_ms_p50_large"] / report["cycle_ms_p50_small"]) < 0.01
    assert report["large_depth"] == 3000
    # 3000 filled, one dead-lettered; above the default window the depth is an estimate.
    assert report["large_depth_reported"] == 2999 and report["large_depth_is_estimate"] is True
    assert set(report["probe_ms_p50_large"]) == {"queues", "rings", "leases", "locks", "connections", "compaction", "replication",
                                                     "server_stats"}
    with db.connect() as conn:
        assert conn.execute('SELECT count(*) FROM queuetop."q_bench.probes"').fetchone()[0] == 0
        assert conn.execute("SELECT to_regclass('public.queuetop_bench_pileup')").fetchone()[0] is None  # cleaned up
        wait_until(lambda: conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'queuetop-bench-pileup'"
                                        ).fetchone()[0] == 0, timeout=10, what="the pgbench sessions gone")


def test_bench_tui_tiny_run(cli):
    result = cli("bench", "tui", "--json", "--sessions", "40", "--queues", "5", "--snapshots", "3",
                 "--idle-seconds", "0.5", "--warm-up", "0.5")
    assert result.returncode == 0, result.stderr
    (report,) = result.json_lines()
    assert report["apply_ms_p50"] > 0 and report["apply_and_refresh_ms_p50"] >= report["apply_ms_p50"]
    assert report["blocked_sessions"] == 38 and report["queues"] == 5
    assert 0 <= report["idle_cpu_percent_of_one_core"] <= 100
    assert 0 <= report["idle_cpu_percent_quiet_database"] <= 100


@pytest.mark.matrix  # its database is made and dropped on every major (DROP DATABASE ... WITH (FORCE) is 13's)
def test_bench_sources_tiny_run_reads_every_library_right(db, cli, node_peers):
    """The six libraries installed their own way, filled, and read: each queue's figures are
    the fill's exact mix (the jobs are few, so nothing is estimated)."""
    result = cli("bench", "sources", "--dsn", db.dsn, "--json", "--small", "1000", "--large", "2000", "--cycles", "1")
    assert result.returncode == 0, result.stderr
    (report,) = result.json_lines()
    assert report["skipped"] == {} and sorted(report["libraries"]) == sorted(
        ["pgmq", "procrastinate", "pg-boss", "graphile-worker", "river", "pgqueuer"])
    for size, n in (("small", 1000), ("large", 2000)):
        figures = report["sizes"][size]
        assert figures["queuetop_ms_p50"] > 0 and set(figures["queuetop_ms_p50_by_source"]) == set(report["libraries"])
        assert set(figures["libraries_ms_p50"]) == {"pgmq metrics_all()", "pg-boss getQueueSize x4", "procrastinate list_queues()",
                                                    "pgqueuer queue_size()"}
        rows = {(q["source"], q["name"]): q for q in figures["queues"]}
        # PGMQ, one queue: 98 % ready, 1 % delayed sends, 1 % read; a tenth archived.
        assert (rows[("pgmq", "bench")]["ready"], rows[("pgmq", "bench")]["dead"]) == (n * 98 // 100, n // 10)
        for source in ("procrastinate", "pg-boss", "river"):
            # Over four queues: 8 % ready, 1 % scheduled, 0.5 % running, 0.5 % failed, 90 % finished.
            queues = [q for (s, _), q in rows.items() if s == source]
            assert len(queues) == 4 and not any(q["depth_is_estimate"] for q in queues)
            assert sum(q["ready"] for q in queues) == n * 8 // 100
            assert sum(q["delayed"] for q in queues) == n // 100
            assert sum(q["depth"] for q in queues) == n * 95 // 1000
        tasks = [q for (s, _), q in rows.items() if s == "graphile-worker"]
        assert sum(q["depth"] for q in tasks) == n - n * 5 // 1000  # 0.5 % exhausted are dead
        # PgQueuer, four entrypoints: 98 % due, 1 % scheduled, 0.5 % picked (stale once the heartbeat
        # is 30 s old: ready then), 0.5 % failed (deleted, logged `exception`: dead).
        entrypoints = [q for (s, _), q in rows.items() if s == "pgqueuer"]
        assert len(entrypoints) == 4 and not any(q["depth_is_estimate"] for q in entrypoints)
        assert sum(q["ready"] + q["in_flight"] for q in entrypoints) == n * 985 // 1000
        assert sum(q["delayed"] for q in entrypoints) == n // 100
        assert sum(q["dead"] for q in entrypoints) == n * 5 // 1000
    # It leaves nothing behind: its database is gone.
    with db.connect() as conn:
        assert conn.execute("SELECT count(*) FROM pg_database WHERE datname = 'queuetop_bench_sources'").fetchone()[0] == 0


def test_bench_peers_tiny_run_drains_every_peer(db, cli):
    # Both default concurrencies, 2 and 8, in the same rounds.
    result = cli("bench", "peers", "--dsn", db.dsn, "--json", "--messages", "400", "--rounds", "1", "--batch", "20")
    assert result.returncode == 0, result.stderr
    (report,) = result.json_lines()
    assert report["concurrency"] == [2, 8] and set(report["by_concurrency"]) == {"2", "8"}
    for figures in report["by_concurrency"].values():
        assert set(figures["msgs_per_s_p50"]) == {
            "queuetop claim+ack, single", "queuetop claim+ack, batch", "pgmq read+delete, single", "pgmq read+delete, batch",
            "pgmq pop, batch", "procrastinate fetch+finish, single"}
        assert all(rate > 0 for rate in figures["msgs_per_s_p50"].values())  # each drained all 400 (else it fails)
        assert all(ratio > 0 for ratio in figures["ratios"].values())


@pytest.mark.parametrize("form", ["uri", "key=value with a port", "sqlalchemy url with a port", "socket from PGHOST"])
def test_the_node_peers_reach_the_database_from_every_dsn_form(db, node_peers, form):
    """`bench sources` hands Node.js (pg-boss, Graphile Worker) a URI made from what libpq settled
    on: Node's own pg connects with it to the same database, whatever form the DSN took (a socket
    directory with a port was `postgresql://postgres@:5432/db`, which Node refused as a URL)."""
    import subprocess

    from bench.sources import _libpq_uri
    from dbcore.database import for_child_process, resolve_target

    sock = db.server.socket_dir
    dsn, env = {
        "uri": (db.dsn, {}),
        "key=value with a port": (f"host={sock} port=5432 dbname={db.name} user=postgres", {}),
        "sqlalchemy url with a port": (f"postgresql+psycopg://postgres@/{db.name}?host={sock}&port=5432", {}),
        "socket from PGHOST": (f"dbname={db.name} user=postgres", {"PGHOST": sock, "PGPORT": "5432"}),
    }[form]
    old = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        target = resolve_target(dsn)
        assert target is not None
        uri = _libpq_uri(target)
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    script = ("const { Client } = require('pg'); const c = new Client({ connectionString: process.argv[1] });"
              "c.connect().then(() => c.query('SELECT current_database() AS db, current_user AS who'))"
              ".then(r => { console.log(JSON.stringify(r.rows[0])); return c.end(); })"
              ".catch(e => { console.error(e.message); process.exit(1); });")
    child_env = {k: v for k, v in for_child_process(target)[1].items() if not k.startswith("PG")}
    done = subprocess.run(["node", "-e", script, uri], cwd=node_peers, env=child_env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (uri, done.stderr)
    assert json.loads(done.stdout) == {"db": db.name, "who": "postgres"}, uri
