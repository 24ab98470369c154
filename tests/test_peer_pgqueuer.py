"""PgQueuer, the real library (pgqueuer 1.6, through its psycopg driver): its schema installed by
its own `Queries.install`, jobs enqueued through its API, real QueueManager workers whose handlers
succeed, fail (the job deleted and logged `exception` with its traceback, or kept `failed` on an
entrypoint registered on_failure='hold'), ask for a retry, or run on; a worker process killed
with its job picked. queuetop finds it with no config in the default schema and in a custom one,
and every figure matches ground truth counted from its tables with its dequeue's rules
(tests/oracle/pgqueuer.py quotes them)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from probes.configmodel import Config
from probes.details import queue_details
from probes.postgres import open_probe_connection
from probes.sampler import run_cycle

from .conftest import REPO, Database, Server, drop_database, make_database, wait_until
from .oracle.pgqueuer import CUSTOM_SCHEMA, DEFAULT_SCHEMA, SOURCE, STALE_BY, PgQueuer, Workload, build_small, truth

pytestmark = pytest.mark.matrix  # the server matrix runs these on every supported major

pytest.importorskip("pgqueuer", reason="PgQueuer is a test dependency (pip install -e '.[test]')")

SCHEMAS = (DEFAULT_SCHEMA, CUSTOM_SCHEMA)


@pytest.fixture(scope="module")
def installs(pg_server: Server) -> Iterator[tuple[Database, dict[str, Workload]]]:
    """PgQueuer in `public` and in `pgq_custom` of one database, each with the oracle's small
    workload (every state, made by real workers; worker H keeps running two jobs)."""
    database = make_database(pg_server, prefix="pqp")
    built: dict[str, Workload] = {}
    try:
        for schema in SCHEMAS:
            built[schema] = build_small(database.dsn, schema)
        yield database, built
    finally:
        for workload in built.values():
            workload.close()
        with psycopg.connect(pg_server.admin_uri, autocommit=True) as admin:
            drop_database(admin, database.name)


def rows_of(snap: Any, schema: str = DEFAULT_SCHEMA) -> dict[str, Any]:
    return {q.name: q for q in snap.queues if q.source == SOURCE and q.schema == schema}


@pytest.mark.parametrize("schema", SCHEMAS)
def test_found_with_no_config_in_any_schema_and_every_figure_is_right(installs, schema):
    database, _ = installs
    with database.connect() as conn:
        before = truth(conn, schema)
        snap = run_cycle(database.target)
        after = truth(conn, schema)
    assert before == after  # nothing moved while we looked: the figures must equal it
    rows = rows_of(snap, schema)
    prefix = "" if schema == DEFAULT_SCHEMA else f"{schema}."  # outside its home schema, a queue is <schema>.<name>
    assert set(rows) == {prefix + name for name in after} == {prefix + n for n in ("mail", "reports", "held", "running", "orphaned")}
    for name, g in after.items():
        q = rows[prefix + name]
        assert (q.ready, q.in_flight, q.delayed, q.dead, q.blocked, q.depth) == (
            g["ready"], g["in_flight"], g["delayed"], g["dead"], 0, g["ready"] + g["in_flight"] + g["delayed"]), name
        assert q.error is None and q.depth_is_estimate is False and q.kind == "table"
    # PgQueuer's meaning: a retry's back-off is delayed; an exception (deleted, logged) and a
    # held failure are dead; a cancelled and the successful jobs are in nothing; the jobs of a
    # worker that died are ready again (its dequeue takes them), the running ones in flight.
    mail, held, running, orphaned = (rows[prefix + n] for n in ("mail", "held", "running", "orphaned"))
    assert (mail.ready, mail.delayed, mail.in_flight, mail.dead) == (3, 3, 0, 1)
    assert (held.ready, held.dead) == (1, 2)
    assert (running.in_flight, running.delayed, running.ready) == (2, 1, 0)
    assert (orphaned.ready, orphaned.in_flight) == (3, 0)
    # Ready since: seconds for a job just enqueued; for a stale one, since its heartbeat was
    # older than the timeout (its worker died 10 minutes ago, the timeout is 30 s).
    assert mail.oldest_ready_age_s is not None and 0 <= mail.oldest_ready_age_s < 120
    assert orphaned.oldest_ready_age_s is not None
    assert STALE_BY.total_seconds() - 30 <= orphaned.oldest_ready_age_s < STALE_BY.total_seconds() + 120
    notes = snap.probes["queues"].notes or ""
    assert f"{prefix}orphaned: 2 picked job(s) stale, counted ready: no heartbeat for over 30 s" in notes
    assert f"{prefix}running: " not in notes  # its worker beats: not stale
    assert snap.probes["queues"].error is None


def test_details_show_the_head_in_its_dequeues_order_and_the_failures_with_their_traceback(installs):
    database, _ = installs
    with open_probe_connection(database.target) as conn:
        mail = queue_details(conn, SOURCE, "mail")
        held = queue_details(conn, SOURCE, "held")
        reports = queue_details(conn, SOURCE, "reports")
        running = queue_details(conn, SOURCE, "running")
        orphaned = queue_details(conn, SOURCE, "orphaned")
        custom = queue_details(conn, SOURCE, f"{CUSTOM_SCHEMA}.mail")
    # The failing handler's job: deleted by PgQueuer, its `exception` log row with the traceback.
    [failure] = mail.dead
    assert (failure["status"], failure["error"]) == ("exception", "ValueError: mail: mailbox full")
    assert 'raise ValueError(f"{job.entrypoint}: mailbox full")' in failure["traceback"]
    assert failure["traceback"].endswith("ValueError: mail: mailbox full\n") and failure["failed_at"] is not None
    assert [row["error"] for row in custom.dead] == ["ValueError: mail: mailbox full"]  # the other install's own
    # on_failure='hold': the rows stay `failed`, with the traceback PgQueuer logged beside them.
    assert [(row["status"], row["error"], row["attempts"]) for row in held.dead] == [("failed", "ValueError: held: mailbox full", 0)] * 2
    assert all(row["traceback"].endswith("ValueError: held: mailbox full\n") for row in held.dead)
    # The head: what runs, then what its dequeue claims next (priority DESC, id), then what is due later.
    assert [(row["status"], row["priority"]) for row in reports.head] == [("queued", 5), ("queued", 0), ("queued", 0), ("queued", 0)]
    due_later = [row["execute_after"] for row in reports.head[2:]]  # the retry (in 10 min), the scheduled one (2 h)
    assert reports.head[1]["execute_after"] < due_later[0] < due_later[1]
    assert [row["status"] for row in mail.head] == ["queued"] * 6
    assert [(row["status"], row["stale"]) for row in running.head[:2]] == [("picked", False)] * 2
    assert all(row["heartbeat_age_s"] < 30 for row in running.head[:2])
    assert [(row["status"], row["stale"]) for row in orphaned.head] == [("picked", True), ("picked", True), ("queued", None)]
    assert orphaned.head[0]["heartbeat_age_s"] >= STALE_BY.total_seconds()
    assert mail.blocked == [] and orphaned.blocked == []


def test_the_dead_survive_pgqueuers_log_aggregation(installs):
    """Its aggregation into pgqueuer_statistics only marks the log rows `aggregated`: the failed
    jobs stay counted."""
    database, built = installs
    pgq = built[DEFAULT_SCHEMA].pgq
    before = {name: q.dead for name, q in rows_of(run_cycle(database.target)).items()}
    pgq.aggregate_logs()
    with database.connect() as conn:
        left = conn.execute("SELECT count(*) FILTER (WHERE NOT aggregated), count(*) FROM pgqueuer_log").fetchone()
    assert left is not None and left[0] == 0 and left[1] > 0
    assert {name: q.dead for name, q in rows_of(run_cycle(database.target)).items()} == before
    assert before["mail"] == 1 and before["reports"] == 2


# -- a worker killed, its job picked ---------------------------------------------------------------


@pytest.fixture
def pgq(db) -> Iterator[PgQueuer]:
    driven = PgQueuer(db.dsn, DEFAULT_SCHEMA)
    try:
        driven.install()
        yield driven
    finally:
        driven.close()


def test_a_killed_workers_job_is_in_flight_then_stale_and_its_dequeue_takes_it_again(db, pgq):
    timeout = 8  # the worker's heartbeat_timeout (it beats every 4 s), and the source's
    config = Config(source_options={SOURCE: {"heartbeat_timeout_s": str(timeout)}})
    [job_id] = pgq.enqueue("render")
    worker = subprocess.Popen([sys.executable, "-m", "tests.oracle.pgqueuer", "worker", db.dsn, DEFAULT_SCHEMA, "render",
                               str(timeout)], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # Picked, and running longer than the timeout: its heartbeat keeps it in flight.
        pgq.wait_for(f"SELECT status::text, now() - updated > interval '{timeout + 1} seconds' FROM {{jobs}}",
                     ("picked", True), "the worker running its job past the timeout", timeout=60)
        with db.connect() as conn:
            assert truth(conn, timeout=timedelta(seconds=timeout))["render"]["in_flight"] == 1
        alive = rows_of(run_cycle(db.target, config))["render"]
        assert (alive.in_flight, alive.ready) == (1, 0)
    finally:
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(30)
    # Killed: the job stays picked, its heartbeat no longer renewed: in flight until the timeout ...
    just_killed = rows_of(run_cycle(db.target, config))["render"]
    assert (just_killed.in_flight, just_killed.ready) == (1, 0)

    def stale() -> Any:
        snap = run_cycle(db.target, config)
        return snap if rows_of(snap)["render"].ready == 1 else None

    # ... then stale: ready (PgQueuer's dequeue takes it again), with a note.
    snap: Any = wait_until(stale, timeout=timeout * 4, interval=0.5, what="the killed worker's job stale")
    row = rows_of(snap)["render"]
    assert (row.ready, row.in_flight, row.depth) == (1, 0, 1) and row.oldest_ready_age_s is not None
    assert "render: 1 picked job(s) stale, counted ready: no heartbeat for over 8 s" in (snap.probes["queues"].notes or "")
    # With PgQueuer's default heartbeat_timeout (30 s, no config) it is not stale yet.
    default = rows_of(run_cycle(db.target))["render"]
    assert (default.in_flight, default.ready) == (1, 0)
    with open_probe_connection(db.target) as conn:
        [head] = queue_details(conn, SOURCE, "render", config).head
    assert (head["id"], head["status"], head["stale"]) == (job_id, "picked", True) and head["heartbeat_age_s"] > timeout
    # PgQueuer's own dequeue, as a worker with that timeout runs it, takes it again.
    assert [job.id for job in pgq.dequeue("render", 10, heartbeat_timeout=timedelta(seconds=timeout))] == [job_id]
    again = rows_of(run_cycle(db.target, config))["render"]
    assert (again.in_flight, again.ready) == (1, 0)


def test_a_concurrency_limited_entrypoint_is_said_and_its_blocked_jobs_unknown(db, pgq):
    """concurrency_limit=1: its dequeue claims no second job while one runs; the limit is in the
    worker's code, so queuetop says so rather than count them blocked or not."""
    pgq.enqueue("serial", 3, payload="wait")
    pgq.enqueue("free", 2)
    pgq.worker({"serial": {"concurrency_limit": 1}})
    pgq.wait_for("SELECT count(*) FILTER (WHERE status = 'picked'), count(*) FROM {jobs} WHERE entrypoint = 'serial'",
                 (1, 3), "the serial job running")
    # PgQueuer's own dequeue, as another worker with that registration runs it, claims nothing.
    assert pgq.dequeue("serial", 10, concurrency_limit=1) == []
    snap = run_cycle(db.target)
    rows = rows_of(snap)
    serial, free = rows["serial"], rows["free"]
    assert (serial.ready, serial.in_flight, serial.blocked) == (2, 1, None)
    assert (free.ready, free.blocked) == (2, 0)  # no slot held there
    notes = snap.probes["queues"].notes or ""
    assert "serial: concurrency-limited: 1 running job(s) hold its slots" in notes and "free: concurrency" not in notes
    with db.connect() as conn:
        slot = conn.execute("SELECT slot FROM pgqueuer WHERE status = 'picked'").fetchone()
    assert slot == (0,)
