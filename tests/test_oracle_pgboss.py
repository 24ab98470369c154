"""The truth oracle for pg-boss 10 and 9 (issue 26): workloads made through pg-boss's own API
(tests/oracle/pgboss.py, tests/peers/pgboss_oracle.mjs) in every state, at a small size in the
default schema and a custom one (two installs in one database), and at 250k+ rows with correlated
states in a custom schema; the ground truth (written from pg-boss's own fetch query) is counted just
before and just after one probe cycle with no config, and every (queue, figure) is held to the
accuracy contract (tests/oracle/contract.py).

The small runs are in the server matrix; the large ones are marked `oracle` only (`-m oracle`)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from psycopg import sql

from dbcore.sqlfiles import Queries

from .conftest import Database
from .oracle.contract import breaches, error_table, shown_rows, verdicts
from .oracle.harness import built_in_a_database, observed
from .oracle.pgboss import (
    CUSTOM_SCHEMA,
    DEFAULT_SCHEMA,
    LARGE_SCHEMA,
    SOURCE,
    V9,
    V10,
    VERSIONS,
    Workload,
    build_large,
    build_small,
    prepare,
    truth,
)

PGBOSS_SQL = Queries("probes", "sources/pgboss.sql")
SMALL_SCHEMAS = (DEFAULT_SCHEMA, CUSTOM_SCHEMA)


def _built(pg_server, node_peers, version: str, build) -> Iterator[tuple[Database, Workload]]:
    with built_in_a_database(pg_server, "boss", lambda dsn: build(node_peers, dsn, version), prepare=prepare) as (
            database, (workload,)):
        yield database, workload


@pytest.fixture(scope="module", params=VERSIONS, ids=[f"pg-boss-{v}" for v in VERSIONS])
def small(request, pg_server, node_peers) -> Iterator[tuple[Database, Workload]]:
    """The small workload of one version, in `pgboss` and in `boss2` of one database."""
    yield from _built(pg_server, node_peers, request.param, build_small)


# The large workload: pg-boss 10 in a custom schema, pg-boss 9 in its default one.
LARGE_SCHEMAS = {V10: LARGE_SCHEMA, V9: DEFAULT_SCHEMA}


@pytest.fixture(scope="module", params=VERSIONS, ids=[f"pg-boss-{v}" for v in VERSIONS])
def large(request, pg_server, node_peers) -> Iterator[tuple[Database, Workload]]:
    """One version at 250k+ rows, built once for the module."""
    version = request.param
    yield from _built(pg_server, node_peers, version,
                      lambda modules, dsn, v: build_large(modules, dsn, v, LARGE_SCHEMAS[version]))


def _oracle(database: Database, workload: Workload, schema: str, in_turns: bool = False):
    return observed(database, lambda conn: truth(conn, schema, workload.version), in_turns)


# -- small: every state, two installs in one database ----------------------------------------------


@pytest.mark.matrix
@pytest.mark.parametrize("schema", SMALL_SCHEMAS)
def test_the_small_workload_is_what_it_says(small, schema):
    """The builder and the truth agree with each other (a wrong truth would pass nothing else)."""
    database, workload = small
    with database.connect() as conn:
        assert truth(conn, schema, workload.version) == workload.expected(schema), workload.report
        if workload.version == V9:
            # A consumer passing enforceSingletonQueueActiveLimit sees the queued singleton job blocked.
            assert truth(conn, schema, V9, enforce_singleton_active_limit=True) == workload.expected(
                schema, enforce_singleton_active_limit=True)


@pytest.mark.matrix
@pytest.mark.parametrize("schema", SMALL_SCHEMAS)
def test_every_small_figure_keeps_the_contract(small, schema):
    database, workload = small
    snap, before, after = _oracle(database, workload, schema)
    assert snap.probes["queues"].error is None
    problems = breaches(shown_rows(snap, SOURCE, schema), before, after)
    assert not problems, f"pg-boss {workload.version} in {schema}:\n" + "\n".join(problems)


@pytest.mark.matrix
def test_the_blocked_fragments_count_what_the_truth_counts(small):
    """probes' blocked_v10 / blocked_v9 fragments and blocked_head_v10, run on their own against
    the small workload of both installs."""
    database, workload = small
    v10 = workload.version == V10
    with database.connect() as conn:
        for schema in SMALL_SCHEMAS:
            job = sql.Identifier(schema, "job")
            fragment = sql.SQL(PGBOSS_SQL["blocked_v10" if v10 else "blocked_v9"]).format(
                job=job, queue=sql.Identifier(schema, "queue"))
            due = sql.SQL("j.start_after < now()" if v10 else "j.startafter < now()")
            counted = dict(conn.execute(
                sql.SQL("SELECT j.name, count(*) FROM {job} j WHERE {due} AND ({fragment}) GROUP BY j.name").format(
                    job=job, due=due, fragment=fragment)).fetchall())
            want = truth(conn, schema, workload.version, enforce_singleton_active_limit=True)
            assert counted == {q: c["blocked"] for q, c in want.items() if c["blocked"]}, schema
            assert len(counted) >= (2 if v10 else 1)  # blocked jobs in two queues (v10: singleton, stately), one (v9)
            if not v10:
                continue
            head = sql.SQL(PGBOSS_SQL["blocked_head_v10"]).format(job=job, queue=sql.Identifier(schema, "queue"))
            for queue, counts in want.items():
                rows = conn.execute(head, {"queue": queue, "limit": 100}).fetchall()
                assert len(rows) == counts["blocked"], (schema, queue)
                created = [row[6] for row in rows]
                assert created == sorted(created)  # oldest first
                for _id, name, _key, policy, blocked_by, blocked_by_state, *_ in rows:
                    assert (name, policy in ("singleton", "stately"), blocked_by_state) == (queue, True, "active")
                    assert conn.execute(sql.SQL("SELECT state::text FROM {job} WHERE id = %s").format(job=job),
                                        (blocked_by,)).fetchone() == ("active",)


# -- large: 250k+ rows, correlated states ----------------------------------------------------------


@pytest.mark.oracle
def test_the_large_workload_is_what_it_says(large):
    database, workload = large
    print(f"\npg-boss {workload.version} large build: {workload.rows:,} rows in {workload.report['build_s']:.1f} s "
          f"(phases: {', '.join(f'{k} {v:.1f} s' for k, v in workload.report['phases_s'].items())})")
    assert workload.rows >= 250_000
    schema = LARGE_SCHEMAS[workload.version]
    with database.connect() as conn:
        assert truth(conn, schema, workload.version) == workload.expected(schema)
        # The blocked fragment at this size: the same figures (and cheap: printed).
        job = sql.Identifier(schema, "job")
        fragment = sql.SQL(PGBOSS_SQL["blocked_v10" if workload.version == V10 else "blocked_v9"]).format(
            job=job, queue=sql.Identifier(schema, "queue"))
        due = sql.SQL("j.start_after < now()" if workload.version == V10 else "j.startafter < now()")
        started = time.monotonic()
        counted = dict(conn.execute(
            sql.SQL("SELECT j.name, count(*) FROM {job} j WHERE {due} AND ({fragment}) GROUP BY j.name").format(
                job=job, due=due, fragment=fragment)).fetchall())
        print(f"blocked fragment over every due job: {time.monotonic() - started:.2f} s")
        want = truth(conn, schema, workload.version, enforce_singleton_active_limit=True)
        assert counted == {q: c["blocked"] for q, c in want.items() if c["blocked"]}


@pytest.mark.oracle
@pytest.mark.parametrize("in_turns", [False, True], ids=["at-once", "in-turns"])
def test_every_large_figure_keeps_the_contract(large, in_turns):
    database, workload = large
    schema = LARGE_SCHEMAS[workload.version]
    snap, before, after = _oracle(database, workload, schema, in_turns=in_turns)
    shown = shown_rows(snap, SOURCE, schema)
    print(f"\npg-boss {workload.version} in {schema}, {workload.rows:,} rows: (queue, figure, truth, shown, error)")
    for name, figure, value, got, error in error_table(shown, after):
        print(f"  {name:10} {figure:9} {value:>9,} {got if got is None else f'{got:,}':>9} "
              f"{'-' if error is None else f'{error:+.2%}'}")
    print(f"  verdicts: {verdicts(shown, after)}; queues probe {snap.probes['queues'].elapsed_ms:,.0f} ms "
          f"({'the last cycle of the pass' if in_turns else 'the first cycle'})")
    assert snap.probes["queues"].error is None
    problems = breaches(shown, before, after)
    assert not problems, f"pg-boss {workload.version} at {workload.rows:,} rows:\n" + "\n".join(problems)
