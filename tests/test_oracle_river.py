"""The truth oracle for River (issue 26): River's schema as its migrations leave it, jobs inserted
by River's own client and every other write made with the statement River's Go code runs for it
(tests/oracle/river.py), in every state, at a small size in the default schema and a custom one
(two installs in one database), and at 250k+ rows with correlated states in a custom schema; the
ground truth (written from River's own fetch) is counted just before and just after one probe
cycle with no config, and every (queue, figure) is held to the accuracy contract
(tests/oracle/contract.py).

The small runs are in the server matrix; the large ones are marked `oracle` only (`-m oracle`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from psycopg import sql

from dbcore.sqlfiles import Queries

from .conftest import Database, Server
from .oracle.contract import Truth, breaches, error_table, shown_rows, verdicts
from .oracle.harness import built_in_a_database, observed
from .oracle.river import (
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

pytest.importorskip("riverqueue", reason="River's Python client is a test dependency (pip install -e '.[test]')")
pytest.importorskip("sqlalchemy")

RIVER_SQL = Queries("probes", "sources/river.sql")
SMALL_SCHEMAS = (DEFAULT_SCHEMA, CUSTOM_SCHEMA)


@pytest.fixture(scope="module")
def small(pg_server: Server) -> Iterator[tuple[Database, dict[str, Workload]]]:
    """The small workload in `public` and in `river_custom` of one database."""
    builders = [lambda dsn, schema=schema: build_small(dsn, schema) for schema in SMALL_SCHEMAS]
    with built_in_a_database(pg_server, "rvo", *builders) as (database, built):
        yield database, dict(zip(SMALL_SCHEMAS, built, strict=True))


@pytest.fixture(scope="module")
def large(pg_server: Server) -> Iterator[tuple[Database, Workload]]:
    """LARGE_ROWS jobs in `river_large`, built once for the module."""
    with built_in_a_database(pg_server, "rvo", lambda dsn: build_large(dsn, LARGE_SCHEMA)) as (database, (workload,)):
        yield database, workload


def _oracle(database: Database, schema: str, in_turns: bool = False) -> tuple[Any, Truth, Truth]:
    return observed(database, lambda conn: truth(conn, schema), in_turns)


# -- small: every state, two installs in one database ----------------------------------------------


@pytest.mark.matrix
@pytest.mark.parametrize("schema", SMALL_SCHEMAS)
def test_the_small_workload_is_what_it_says(small, schema):
    """The builder, the truth and River's own fetch agree (a wrong truth would pass nothing else):
    ready is exactly what JobGetAvailable claims in the queues whose producers fetch, rolled back."""
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
    problems = breaches(shown_rows(snap, SOURCE, schema), before, after)
    assert not problems, f"River in {schema}:\n" + "\n".join(problems)


@pytest.mark.matrix
def test_the_blocked_fragments_count_what_the_truth_counts(small):
    """probes' `blocked` fragment and `blocked_head`, run on their own against both installs."""
    database, _ = small
    with database.connect() as conn:
        for schema in SMALL_SCHEMAS:
            p = parts(schema)
            fragment = sql.SQL(RIVER_SQL["blocked"]).format(**p)
            counted = dict(conn.execute(sql.SQL(
                "SELECT j.queue, count(*) FROM {jobs} j WHERE j.scheduled_at <= now() AND {fragment} GROUP BY j.queue"
            ).format(fragment=fragment, **p)).fetchall())
            want = truth(conn, schema)
            assert counted == {queue: c["blocked"] for queue, c in want.items() if c["blocked"]}, schema
            assert len(counted) >= 2
            head = sql.SQL(RIVER_SQL["blocked_head"]).format(**p)
            for queue, counts in want.items():
                rows = conn.execute(head, {"queue": queue, "limit": 100}).fetchall()
                assert len(rows) == counts["blocked"], (schema, queue)
                assert [r[5] for r in rows] == sorted(r[5] for r in rows)  # oldest first
                paused = conn.execute(sql.SQL("SELECT paused_at FROM {queues} WHERE name = %s").format(**p), (queue,)).fetchone()
                for _id, _kind, in_queue, blocked_by, since, _scheduled_at in rows:
                    assert (in_queue, blocked_by, since) == (queue, "paused", paused[0] if paused else None)
                if counts["blocked"]:  # a limit below the count: the oldest ones
                    assert conn.execute(head, {"queue": queue, "limit": 1}).fetchall() == rows[:1]


# -- large: 250k+ rows, correlated states ----------------------------------------------------------


@pytest.mark.oracle
def test_the_large_workload_is_what_it_says(large):
    database, workload = large
    phases = ", ".join(f"{k} {v:.1f} s" for k, v in workload.report["phases_s"].items())
    print(f"\nRiver large build: {LARGE_ROWS:,} jobs in {workload.build_s:.1f} s ({phases})")
    with database.connect() as conn:
        assert truth(conn, LARGE_SCHEMA) == workload.expected
        rows = conn.execute(sql.SQL("SELECT count(*) FROM {jobs}").format(**parts(LARGE_SCHEMA))).fetchone()
    assert rows is not None and rows[0] == LARGE_ROWS >= 250_000


@pytest.mark.oracle
@pytest.mark.parametrize("in_turns", [False, True], ids=["at-once", "in-turns"])
def test_every_large_figure_keeps_the_contract(large, in_turns):
    database, _ = large
    snap, before, after = _oracle(database, LARGE_SCHEMA, in_turns=in_turns)
    shown = shown_rows(snap, SOURCE, LARGE_SCHEMA)
    print(f"\nRiver, {LARGE_ROWS:,} jobs: (queue, figure, truth, shown, error)")
    for name, figure, value, got, error in error_table(shown, after):
        print(f"  {name:10} {figure:9} {value:>9,} {'-' if got is None else f'{got:,}':>9} "
              f"{'-' if error is None else f'{error:+.2%}'}")
    print(f"  verdicts: {verdicts(shown, after)}; queues probe {snap.probes['queues'].elapsed_ms:,.0f} ms "
          f"({'the last cycle of the pass' if in_turns else 'the first cycle'})")
    assert snap.probes["queues"].error is None, snap.probes["queues"].error
    problems = breaches(shown, before, after)
    assert not problems, f"River at {LARGE_ROWS:,} jobs:\n" + "\n".join(problems)
