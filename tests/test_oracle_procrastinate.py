"""The truth oracle for Procrastinate (issue 26): workloads made through Procrastinate's own API
and real workers (tests/oracle/procrastinate.py), in every state, at a small size in the default
schema and a custom one (two installs in one database), and at 250k+ rows with correlated states
in a custom schema; the ground truth (written from `procrastinate_fetch_job_v2`) is counted just
before and just after one probe cycle with no config, and every (queue, figure) is held to the
accuracy contract (tests/oracle/contract.py).

The small runs are in the server matrix; the large ones are marked `oracle` only (`-m oracle`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from psycopg import sql

from dbcore.sqlfiles import Queries
from probes.sampler import run_cycle

from .conftest import Database, Server
from .oracle.contract import Truth, breaches, error_table, shown_rows, verdicts
from .oracle.harness import built_in_a_database, observed
from .oracle.procrastinate import (
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

pytest.importorskip("procrastinate", reason="procrastinate is a test dependency (pip install -e '.[test]')")

PROCRASTINATE_SQL = Queries("probes", "sources/procrastinate.sql")
SMALL_SCHEMAS = (DEFAULT_SCHEMA, CUSTOM_SCHEMA)


@pytest.fixture(scope="module")
def small(pg_server: Server) -> Iterator[tuple[Database, dict[str, Workload]]]:
    """The small workload in `public` and in `jobs` of one database (counts shifted in `jobs`,
    so that the two installs cannot be mistaken for each other)."""
    builders = [lambda dsn, schema=schema, variant=variant: build_small(dsn, schema, variant)
                for variant, schema in enumerate(SMALL_SCHEMAS)]
    with built_in_a_database(pg_server, "pco", *builders) as (database, built):
        yield database, dict(zip(SMALL_SCHEMAS, built, strict=True))


@pytest.fixture(scope="module")
def large(pg_server: Server) -> Iterator[tuple[Database, Workload]]:
    """LARGE_ROWS jobs in `jobs_big`, built once for the module."""
    with built_in_a_database(pg_server, "pco", lambda dsn: build_large(dsn, LARGE_SCHEMA)) as (database, (workload,)):
        yield database, workload


def _oracle(database: Database, schema: str, in_turns: bool = False) -> tuple[Any, Truth, Truth]:
    return observed(database, lambda conn: truth(conn, schema), in_turns)


# -- small: every state, two installs in one database ----------------------------------------------


@pytest.mark.matrix
@pytest.mark.parametrize("schema", SMALL_SCHEMAS)
def test_the_small_workload_is_what_it_says(small, schema):
    """The builder, the truth and Procrastinate's own fetch agree (a wrong truth would pass
    nothing else): ready is exactly what procrastinate_fetch_job_v2 claims, called until it finds
    nothing, rolled back."""
    database, built = small
    workload = built[schema]
    with database.connect() as conn:
        assert truth(conn, schema) == workload.expected
        for queue, counts in workload.expected.items():
            assert fetch_would_claim(conn, schema, queue) == counts["ready"], queue
    # Every state in both queues (finished ones too: kept in the table, in no figure).
    assert all(all(c[f] for f in ("ready", "in_flight", "delayed", "dead", "blocked")) for c in workload.expected.values())
    with database.connect() as conn:
        statuses = dict(conn.execute(sql.SQL("SELECT queue_name || ':' || status, count(*) FROM {jobs} GROUP BY 1")
                                     .format(**parts(schema))).fetchall())
    for queue in ("mail", "reports"):
        assert statuses.get(f"{queue}:succeeded") and statuses.get(f"{queue}:cancelled"), statuses


@pytest.mark.matrix
@pytest.mark.parametrize("schema", SMALL_SCHEMAS)
def test_every_small_figure_keeps_the_contract(small, schema):
    database, _ = small
    snap, before, after = _oracle(database, schema)
    assert snap.probes["queues"].error is None, snap.probes["queues"].error
    problems = breaches(shown_rows(snap, SOURCE, schema), before, after)
    assert not problems, f"Procrastinate in {schema}:\n" + "\n".join(problems)


@pytest.mark.matrix
def test_the_blocked_fragments_count_what_the_truth_counts(small):
    """probes' `blocked` fragment and `blocked_head`, run on their own against both installs:
    the fragment counts each queue's blocked jobs as the truth does, and the head names, for each,
    the job it waits for (the doing one holding its lock, else the todo one first in line)."""
    database, _ = small
    kinds: set[str] = set()
    with database.connect() as conn:
        for schema in SMALL_SCHEMAS:
            p = parts(schema)
            fragment = sql.SQL(PROCRASTINATE_SQL["blocked"]).format(**p)
            counted = dict(conn.execute(sql.SQL(
                "SELECT j.queue_name, count(*) FROM {jobs} j WHERE (j.scheduled_at IS NULL OR j.scheduled_at <= now())"
                " AND {fragment} GROUP BY j.queue_name").format(fragment=fragment, **p)).fetchall())
            want = truth(conn, schema)
            assert counted == {queue: c["blocked"] for queue, c in want.items() if c["blocked"]}, schema
            assert len(counted) >= 2
            # Who waits for whom, from the table: per lock, the doing job, else the todo ones in the fetch's order.
            line: dict[str, list[tuple[int, str]]] = {}
            for job_id, lock, status in conn.execute(sql.SQL(
                    "SELECT id, lock, status::text FROM {jobs} WHERE lock IS NOT NULL AND status IN ('todo', 'doing')"
                    " ORDER BY lock, status = 'doing' DESC, priority DESC, id").format(**p)).fetchall():
                line.setdefault(lock, []).append((job_id, status))
            head = sql.SQL(PROCRASTINATE_SQL["blocked_head"]).format(**p)
            for queue, counts in want.items():
                rows = conn.execute(head, {"queue": queue, "limit": 100}).fetchall()
                assert len(rows) == counts["blocked"], (schema, queue)
                assert [r[0] for r in rows] == sorted(r[0] for r in rows)  # oldest first
                for job_id, _task, lock, blocked_by, blocked_by_status in rows:
                    first_id, first_status = line[lock][0]
                    assert job_id != first_id
                    assert (blocked_by, blocked_by_status) == (first_id, first_status), (schema, queue, job_id, lock)
                    kinds.add(blocked_by_status)
                if counts["blocked"]:  # a limit below the count: the oldest ones
                    assert conn.execute(head, {"queue": queue, "limit": 1}).fetchall() == rows[:1]
    assert kinds == {"doing", "todo"}  # held by a running job, and waiting behind a todo one


# -- large: 250k+ rows, correlated states ----------------------------------------------------------


@pytest.mark.oracle
def test_the_large_workload_is_what_it_says(large):
    database, workload = large
    phases = ", ".join(f"{k} {v:.1f} s" for k, v in workload.report["phases_s"].items())
    print(f"\nProcrastinate large build: {workload.rows:,} jobs in {workload.build_s:.1f} s ({phases})")
    with database.connect() as conn:
        assert truth(conn, LARGE_SCHEMA) == workload.expected
    assert workload.rows == LARGE_ROWS >= 250_000


@pytest.mark.oracle
@pytest.mark.parametrize("in_turns", [False, True], ids=["at-once", "in-turns"])
def test_every_large_figure_keeps_the_contract(large, in_turns):
    database, _ = large
    snap, before, after = _oracle(database, LARGE_SCHEMA, in_turns=in_turns)
    shown = shown_rows(snap, SOURCE, LARGE_SCHEMA)
    print(f"\nProcrastinate, {LARGE_ROWS:,} jobs: (queue, figure, truth, shown, error)")
    for name, figure, value, got, error in error_table(shown, after):
        print(f"  {name:10} {figure:9} {value:>9,} {'-' if got is None else f'{got:,}':>9} "
              f"{'-' if error is None else f'{error:+.2%}'}")
    print(f"  verdicts: {verdicts(shown, after)}; queues probe {snap.probes['queues'].elapsed_ms:,.0f} ms "
          f"({'the last cycle of the pass' if in_turns else 'the first cycle'})")
    assert snap.probes["queues"].error is None, snap.probes["queues"].error
    problems = breaches(shown, before, after)
    assert not problems, f"Procrastinate at {LARGE_ROWS:,} jobs:\n" + "\n".join(problems)


@pytest.mark.matrix
@pytest.mark.parametrize("schema", SMALL_SCHEMAS)
def test_enter_lists_each_blocked_job_with_the_job_it_waits_for(small, schema):
    from probes.details import queue_details
    from probes.postgres import open_probe_connection

    database, built = small
    run_cycle(database.target)
    for queue, counts in built[schema].expected.items():
        with open_probe_connection(database.target) as conn:
            details = queue_details(conn, SOURCE, queue if schema == "public" else f"{schema}.{queue}", schema=schema)
        assert len(details.blocked) == counts["blocked"] > 0, (queue, details.blocked)
        for row in details.blocked:
            assert row["blocked_by"] is not None and row["blocked_by"] != row["id"]
            assert row["blocked_by_status"] in ("doing", "todo")
