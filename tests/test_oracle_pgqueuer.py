"""The truth oracle for PgQueuer (issue 45): its schema installed by its own `Queries.install`,
jobs enqueued, claimed, finished, failed and retried through its own API and real QueueManager
workers (tests/oracle/pgqueuer.py), in every state, at a small size in the default schema and a
custom one (two installs in one database), and at 250k+ jobs with correlated states in a custom
schema; the ground truth (written from PgQueuer's own dequeue) is counted just before and just
after one probe cycle with no config, and every (entrypoint, figure) is held to the accuracy
contract (tests/oracle/contract.py).

The small runs are in the server matrix; the large ones are marked `oracle` only (`-m oracle`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from psycopg import sql

from .conftest import Database, Server
from .oracle.contract import Truth, breaches, error_table, shown_rows, verdicts
from .oracle.harness import built_in_a_database, observed
from .oracle.pgqueuer import (
    CUSTOM_SCHEMA,
    DEFAULT_SCHEMA,
    LARGE_ROWS,
    LARGE_SCHEMA,
    SOURCE,
    Workload,
    build_large,
    build_small,
    fetch_would_claim,
    parts,
    truth,
)

pytest.importorskip("pgqueuer", reason="PgQueuer is a test dependency (pip install -e '.[test]')")

SMALL_SCHEMAS = (DEFAULT_SCHEMA, CUSTOM_SCHEMA)


@pytest.fixture(scope="module")
def small(pg_server: Server) -> Iterator[tuple[Database, dict[str, Workload]]]:
    """The small workload in `public` and in `pgq_custom` of one database."""
    builders = [lambda dsn, schema=schema: build_small(dsn, schema) for schema in SMALL_SCHEMAS]
    with built_in_a_database(pg_server, "pqo", *builders) as (database, built):
        yield database, dict(zip(SMALL_SCHEMAS, built, strict=True))


@pytest.fixture(scope="module")
def large(pg_server: Server) -> Iterator[tuple[Database, Workload]]:
    """LARGE_ROWS jobs in `pgq_large`, built once for the module."""
    with built_in_a_database(pg_server, "pqo", lambda dsn: build_large(dsn, LARGE_SCHEMA)) as (database, (workload,)):
        yield database, workload


def _oracle(database: Database, schema: str, in_turns: bool = False) -> tuple[Any, Truth, Truth]:
    return observed(database, lambda conn: truth(conn, schema), in_turns)


# -- small: every state, two installs in one database ----------------------------------------------


@pytest.mark.matrix
@pytest.mark.parametrize("schema", SMALL_SCHEMAS)
def test_the_small_workload_is_what_it_says(small, schema):
    """The builder, the truth and PgQueuer's own dequeue agree (a wrong truth would pass nothing
    else): ready is exactly what its dequeue claims, rolled back."""
    database, built = small
    workload = built[schema]
    with database.connect() as conn:
        assert truth(conn, schema) == workload.expected, workload.report
        claimed = fetch_would_claim(conn, schema)
        assert {q: n for q, n in claimed.items() if n} == {q: c["ready"] for q, c in workload.expected.items() if c["ready"]}


@pytest.mark.matrix
@pytest.mark.parametrize("schema", SMALL_SCHEMAS)
def test_every_small_figure_keeps_the_contract(small, schema):
    database, _ = small
    snap, before, after = _oracle(database, schema)
    assert snap.probes["queues"].error is None, snap.probes["queues"].error
    shown = shown_rows(snap, SOURCE, schema)
    assert set(shown) == set(after)  # every entrypoint with a job or a failure, and no other
    problems = breaches(shown, before, after)
    assert not problems, f"PgQueuer in {schema}:\n" + "\n".join(problems)


# -- large: 250k+ rows, correlated states ----------------------------------------------------------


@pytest.mark.oracle
def test_the_large_workload_is_what_it_says(large):
    database, workload = large
    phases = ", ".join(f"{k} {v:.1f} s" for k, v in workload.report["phases_s"].items())
    print(f"\nPgQueuer large build: {LARGE_ROWS:,} jobs in {workload.build_s:.1f} s ({phases})")
    with database.connect() as conn:
        assert truth(conn, LARGE_SCHEMA) == workload.expected
        p = parts(LARGE_SCHEMA)
        jobs = conn.execute(sql.SQL("SELECT count(*) FROM {jobs}").format(**p)).fetchone()
        logged = conn.execute(sql.SQL("SELECT count(*) FROM {log}").format(**p)).fetchone()
    assert jobs is not None and jobs[0] == LARGE_ROWS >= 250_000
    assert logged is not None and logged[0] > LARGE_ROWS  # every job's history: its log is the larger table
    print(f"PgQueuer large: {logged[0]:,} log rows")


@pytest.mark.oracle
@pytest.mark.parametrize("in_turns", [False, True], ids=["at-once", "in-turns"])
def test_every_large_figure_keeps_the_contract(large, in_turns):
    database, _ = large
    snap, before, after = _oracle(database, LARGE_SCHEMA, in_turns=in_turns)
    shown = shown_rows(snap, SOURCE, LARGE_SCHEMA)
    print(f"\nPgQueuer, {LARGE_ROWS:,} jobs: (queue, figure, truth, shown, error)")
    for name, figure, value, got, error in error_table(shown, after):
        print(f"  {name:10} {figure:9} {value:>9,} {'-' if got is None else f'{got:,}':>9} "
              f"{'-' if error is None else f'{error:+.2%}'}")
    print(f"  verdicts: {verdicts(shown, after)}; queues probe {snap.probes['queues'].elapsed_ms:,.0f} ms "
          f"({'the last cycle of the pass' if in_turns else 'the first cycle'})")
    assert snap.probes["queues"].error is None, snap.probes["queues"].error
    problems = breaches(shown, before, after)
    assert not problems, f"PgQueuer at {LARGE_ROWS:,} jobs:\n" + "\n".join(problems)
