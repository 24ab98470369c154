"""The truth oracle for PGMQ (issue 26): workloads made through PGMQ's own SQL functions and a
real consumer (tests/oracle/pgmq.py), in every state, at a small size and at 250k+ rows with
correlated states, in schema `pgmq` (the only one PGMQ's SQL knows: see the last test); the ground
truth (written from `pgmq.read` and its FIFO reads) is counted just before and just after one
probe cycle with no config, and every (queue, figure) is held to the accuracy contract
(tests/oracle/contract.py).

The small runs are in the server matrix; the large ones are marked `oracle` only (`-m oracle`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import Database, Server
from .oracle.contract import Truth, breaches, error_table, shown_rows, verdicts
from .oracle.harness import built_in_a_database, observed
from .oracle.pgmq import LARGE_ROWS, SCHEMA, SOURCE, Workload, build_large, build_small, grouped_visible, install, reads_would_claim, truth

pytest.importorskip("pgmq", reason="the pgmq client (which ships PGMQ's SQL) is a test dependency (pip install -e '.[test]')")


@pytest.fixture(scope="module")
def small(pg_server: Server) -> Iterator[tuple[Database, Workload]]:
    with built_in_a_database(pg_server, "mqo", build_small) as (database, (workload,)):
        yield database, workload


@pytest.fixture(scope="module")
def large(pg_server: Server) -> Iterator[tuple[Database, Workload]]:
    """LARGE_ROWS messages, built once for the module."""
    with built_in_a_database(pg_server, "mqo", build_large) as (database, (workload,)):
        yield database, workload


def _oracle(database: Database, in_turns: bool = False) -> tuple[Any, Truth, Truth]:
    return observed(database, truth, in_turns)  # no config at all


# -- small: every state ----------------------------------------------------------------------------


@pytest.mark.matrix
def test_the_small_workload_is_what_it_says(small):
    """The builder, the truth and PGMQ's own reads agree (a wrong truth would pass nothing else):
    `pgmq.read` takes exactly the ready and the blocked messages; `read_grouped_rr` takes no
    blocked one, and every grouped message the truth calls ready."""
    database, workload = small
    with database.connect() as conn:
        assert truth(conn) == workload.expected
        for queue, counts in workload.expected.items():
            plain, grouped, blocked = reads_would_claim(conn, queue)
            assert len(plain) == counts["ready"] + counts["blocked"] and blocked <= plain, queue
            assert len(blocked) == counts["blocked"] and not grouped & blocked, queue
            assert grouped_visible(conn, queue) - blocked <= grouped, queue
    assert all(all(c[f] for f in ("ready", "in_flight", "delayed", "dead", "blocked")) for c in workload.expected.values())


@pytest.mark.matrix
def test_every_small_figure_keeps_the_contract(small):
    database, _ = small
    snap, before, after = _oracle(database)
    assert snap.probes["queues"].error is None, snap.probes["queues"].error
    problems = breaches(shown_rows(snap, SOURCE, SCHEMA), before, after)
    assert not problems, "PGMQ:\n" + "\n".join(problems)


@pytest.mark.matrix
def test_pgmq_has_no_schema_but_pgmq(db):
    """Why the oracle runs in `pgmq` only: PGMQ's SQL names its schema in every statement, so a
    session whose search path is elsewhere still creates, sends to and reads `pgmq.q_<name>`."""
    with db.connect() as conn:
        conn.execute("CREATE SCHEMA elsewhere")
    install(db.dsn)
    with db.connect(options="-c search_path=elsewhere") as conn:
        conn.execute("SELECT pgmq.create('moved')")
        conn.execute("SELECT pgmq.send('moved', '{}'::jsonb)")
        found = conn.execute("SELECT table_schema FROM information_schema.tables WHERE table_name IN ('q_moved', 'a_moved')"
                             " ORDER BY 1").fetchall()
    assert found == [("pgmq",), ("pgmq",)]


# -- large: 250k+ rows, correlated states ----------------------------------------------------------


@pytest.mark.oracle
def test_the_large_workload_is_what_it_says(large):
    database, workload = large
    phases = ", ".join(f"{k} {v:.1f} s" for k, v in workload.report["phases_s"].items())
    print(f"\nPGMQ large build: {workload.rows:,} messages in {workload.build_s:.1f} s ({phases})")
    with database.connect() as conn:
        assert truth(conn) == workload.expected
    assert workload.rows == LARGE_ROWS >= 250_000


@pytest.mark.oracle
@pytest.mark.parametrize("in_turns", [False, True], ids=["at-once", "in-turns"])
def test_every_large_figure_keeps_the_contract(large, in_turns):
    database, _ = large
    snap, before, after = _oracle(database, in_turns=in_turns)
    shown = shown_rows(snap, SOURCE, SCHEMA)
    print(f"\nPGMQ, {LARGE_ROWS:,} messages: (queue, figure, truth, shown, error)")
    for name, figure, value, got, error in error_table(shown, after):
        print(f"  {name:10} {figure:9} {value:>9,} {'-' if got is None else f'{got:,}':>9} "
              f"{'-' if error is None else f'{error:+.2%}'}")
    print(f"  verdicts: {verdicts(shown, after)}; queues probe {snap.probes['queues'].elapsed_ms:,.0f} ms "
          f"({'the last cycle of the pass' if in_turns else 'the first cycle'})")
    assert snap.probes["queues"].error is None, snap.probes["queues"].error
    problems = breaches(shown, before, after)
    assert not problems, f"PGMQ at {LARGE_ROWS:,} messages:\n" + "\n".join(problems)


@pytest.mark.matrix
def test_enter_lists_each_blocked_message_with_the_head_of_its_group(small):
    from probes.details import queue_details
    from probes.postgres import open_probe_connection

    database, workload = small
    for queue, counts in workload.expected.items():
        with open_probe_connection(database.target) as conn:
            details = queue_details(conn, SOURCE, queue)
        assert len(details.blocked) == counts["blocked"] > 0, (queue, details.blocked)
        for row in details.blocked:
            assert row["blocked_by"] < row["msg_id"] and row["group"]
