"""The servers queuetop supports: PostgreSQL 12 through 18 (the matrix runs this file's `matrix`
tests on each, tests/servers.py), what a stock server's settings must not make a probe pay for,
and one clear line for a server older than 12 (a real PostgreSQL 11)."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from probes.postgres import open_probe_connection
from probes.sampler import run_cycle

from .conftest import run_cli

# A read no index serves, planned with the probe session's disabled scans: costed around 1e10.
UNINDEXED_READ = "SELECT count(*) FROM (SELECT 1 FROM queuetop.dead_letters WHERE last_error = 'x' LIMIT 10) AS t"


def jit_in_plan(conn: psycopg.Connection, statement: str) -> bool:
    """Whether running `statement` compiled anything (EXPLAIN ANALYZE's JIT section)."""
    row = conn.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {statement}").fetchone()
    [plan] = row.values() if isinstance(row, dict) else row  # a probe session's rows are dictionaries
    document = plan if not isinstance(plan, str) else json.loads(plan)
    return "JIT" in document[0]


@pytest.mark.matrix
def test_the_snapshot_names_the_server_the_matrix_started(db, pytestconfig):
    major = pytestconfig.getoption("--server")
    with db.connect() as conn:
        truth = conn.execute("SHOW server_version").fetchone()[0]
    snap = run_cycle(db.target)
    assert snap.server.version == truth
    if major is not None:
        assert re.match(rf"{major}\.\d+", truth), (major, truth)
    assert all(status.error is None for status in snap.probes.values()), snap.probes


@pytest.mark.matrix
def test_probe_sessions_pay_for_no_jit_and_take_no_serializable_snapshot(db):
    """The server compiles every statement it may (jit_above_cost 0 for this database) and
    defaults to SERIALIZABLE: a probe session does neither, and a cycle reads every figure."""
    with db.connect() as conn:
        for setting, value in (("jit_above_cost", "0"), ("jit_inline_above_cost", "0"), ("jit_optimize_above_cost", "0"),
                               ("default_transaction_isolation", "serializable")):
            conn.execute(sql.SQL("ALTER DATABASE {} SET {} = {}").format(sql.Identifier(db.name), sql.Identifier(setting),
                                                                          sql.Literal(value)))
    with db.connect() as plain:
        jit_available = plain.execute("SELECT pg_jit_available() AND current_setting('jit')::bool").fetchone()[0]
        # The test could fail: where the server has JIT, an ordinary session compiles this read.
        assert jit_in_plan(plain, UNINDEXED_READ) is jit_available
        assert plain.execute("SHOW transaction_isolation").fetchone()[0] == "serializable"
    with open_probe_connection(db.target) as probe:
        assert probe.execute("SELECT current_setting('jit') AS jit").fetchone()["jit"] == "off"
        assert probe.execute("SHOW transaction_isolation").fetchone()["transaction_isolation"] == "read committed"
        probe.execute("SET enable_seqscan = off")  # as every probe session has it
        assert not jit_in_plan(probe, UNINDEXED_READ)
    snap = run_cycle(db.target)
    assert all(status.error is None for status in snap.probes.values()), snap.probes


@pytest.fixture(scope="module")
def postgres_11(tmp_path_factory: pytest.TempPathFactory):
    from .servers import MatrixServer

    server = MatrixServer("11", tmp_path_factory.mktemp("pg11"))
    try:
        yield server
    finally:
        server.cleanup()


@pytest.mark.parametrize("args", [
    ["snapshot"], ["snapshot", "--json"], ["engine", "init"], ["engine", "enqueue", "jobs", "--count", "3"],
    ["engine", "ring", "create", "r", "--capacity", "4"], ["engine", "lease", "acquire", "l", "--holder", "h", "--ttl", "5"],
    ["--read-only"], [],
], ids=lambda args: " ".join(args) or "dashboard")
def test_a_server_older_than_12_is_refused_in_one_line_and_nothing_is_written(postgres_11, args):
    dsn = postgres_11.admin_uri
    result = run_cli(*args, "--dsn", dsn, timeout=60)
    assert result.returncode == 2, result
    assert result.stderr == "queuetop: error: PostgreSQL 11 is not supported: queuetop needs 12 or later\n"
    assert result.stdout == ""
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'queuetop'").fetchone()[0] == 0


def test_the_supported_range_is_stated_where_users_read_it():
    from dbcore.pgversions import MINIMUM_MAJOR, NEWEST_MAJOR

    from .servers import SUPPORTED

    assert SUPPORTED == tuple(str(major) for major in range(MINIMUM_MAJOR, NEWEST_MAJOR + 1))
    repo = Path(__file__).resolve().parent.parent
    assert f"PostgreSQL {MINIMUM_MAJOR} through {NEWEST_MAJOR}" in (repo / "README.md").read_text()
    # No trove classifier names a database's version: the keywords do.
    keywords = tomllib.loads((repo / "pyproject.toml").read_text())["project"]["keywords"]
    assert {f"postgresql-{major}" for major in SUPPORTED} <= set(keywords)
    makefile = (repo / "Makefile").read_text()
    assert f"MATRIX_MAJORS := {' '.join(SUPPORTED)}" in makefile
