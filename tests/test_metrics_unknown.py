"""Unknown is absent in /metrics: a probe that fails for real on the server (a privilege revoked, a
lock held past the probe's lock timeout) publishes none of its figures, never a 0 that reads as
calm, while the other probes' figures are served as usual and `queuetop_probe_error` says 1. A
target that cannot be reached publishes no probe duration (its probes did not run).

Each test first sees the probe's figures served (so that their absence afterwards is the failure's
doing, not an empty database), then makes the probe fail against the real database and scrapes
the exporter's own collector, formatted by the client library as /metrics serves it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from psycopg import sql

from dbcore.database import Target, resolve_target
from probes.model import Snapshot
from probes.postgres import PROBE_NAMES, open_probe_connection
from probes.prometheus import METRICS, SnapshotCollector
from probes.sampler import compose, probes_for, run_cycle, run_probe, unreachable_snapshot, unreachable_status
from queues import lease as leases
from queues import ring as rings
from queues.table_queue import TableQueue

from .conftest import PASSWORD, PASSWORD_ROLE, wait_until
from .test_prometheus import Exporter

HOST = "db1"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
# One figure of each probe that a populated database always has: what "still served" means.
ANCHORS = {
    "queues": ("queuetop_queue_depth", (("host", HOST), ("queue", "mq_jobs"), ("source", "reference"))),
    "rings": ("queuetop_ring_used", (("host", HOST), ("ring", "mq_ring"))),
    "leases": ("queuetop_lease_token", (("host", HOST), ("lease", "mq_lease"))),
    "locks": ("queuetop_blocked_sessions", (("host", HOST),)),
    "connections": ("queuetop_sessions", (("host", HOST),)),
    "compaction": ("queuetop_compaction_pending_deltas", (("host", HOST), ("name", "task_status"))),
    "replication": ("queuetop_standbys", (("host", HOST),)),  # a count: 0 where nobody streams
    "server_stats": ("queuetop_server_deadlocks_total", (("host", HOST),)),  # a counter: 0 where none happened
}


def scrape(snapshot: Snapshot) -> Samples:
    """/metrics for one snapshot, as the exporter formats it, parsed back."""
    collector = SnapshotCollector()
    collector.update(snapshot)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    samples: Samples = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def of_probe(samples: Samples, probe: str) -> list[str]:
    """The samples of `probe`'s own metrics (METRICS[...].probe)."""
    return sorted(f"{name}{dict(labels)}" for name, labels in samples
                  if METRICS[name.removesuffix("_total") if name not in METRICS else name].probe == probe)


def cycle(target: Target) -> Snapshot:
    """One probe cycle on `target`, as host HOST."""
    return run_cycle(target, host=HOST)


def assert_unknown_but_the_rest_served(snapshot: Snapshot, probe: str, *, still_served: tuple[str, ...]) -> Samples:
    status = snapshot.probes[probe]
    assert status.error and status.unread == ("all",), status  # it failed on the server, not partly
    samples = scrape(snapshot)
    assert not of_probe(samples, probe), of_probe(samples, probe)  # no figure, and so no 0
    labels = (("host", HOST), ("probe", probe))
    assert samples[("queuetop_probe_error", labels)] == 1
    assert ("queuetop_probe_duration_seconds", labels) in samples  # it ran, and what it cost is known
    assert samples[("queuetop_up", (("host", HOST),))] == 1
    for other in still_served:
        assert ANCHORS[other] in samples, (other, snapshot.probes[other])
    return samples


@pytest.fixture
def populated(db):
    """A queue of 5 messages, a ring with 2 of 4 cells full, a held lease: every probe has a figure."""
    with db.connect() as conn:
        TableQueue.create(conn, "mq_jobs").enqueue_batch(conn, ["{}"] * 5)
        rings.create(conn, "mq_ring", 4)
        rings.put(conn, "mq_ring", ['{"n": 1}', '{"n": 2}'])
        leases.acquire(conn, "mq_lease", "mq-holder", 300)
    before = scrape(cycle(db.target))
    assert all(anchor in before for anchor in ANCHORS.values()), sorted(ANCHORS.items())
    assert before[ANCHORS["rings"]] == 2 and before[ANCHORS["queues"]] == 5
    return db


@contextmanager
def locked(db, table: str) -> Iterator[None]:
    """`table` held ACCESS EXCLUSIVE by another session: a probe reading it hits its lock timeout."""
    with db.connect(autocommit=False, application_name="mq-locker") as holder:
        holder.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(sql.Identifier(*table.split("."))))
        try:
            yield
        finally:
            holder.rollback()


def limited_dsn(db) -> str:
    return db.dsn.replace("postgres@", f"{PASSWORD_ROLE}:{PASSWORD}@")


def limited_role(db, *statements: str) -> Target:
    """A target as a role without superuser, that may read the engine's tables, after `statements`
    (run as superuser in this test's database: revoking what one probe needs)."""
    role = sql.Identifier(PASSWORD_ROLE)
    with db.connect() as conn:
        conn.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(sql.Identifier(db.name), role))
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA queuetop TO {}").format(role))
        conn.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA queuetop TO {}").format(role))
        for statement in statements:
            conn.execute(statement)  # type: ignore[arg-type]
    target = resolve_target(limited_dsn(db))
    assert target is not None
    return target


@contextmanager
def blocked_sessions(db, count: int) -> Iterator[None]:
    """`count` sessions waiting for a row another session, idle in its transaction, holds."""
    with db.connect() as conn:
        conn.execute("CREATE TABLE mq_accounts (id int PRIMARY KEY)")
        conn.execute("INSERT INTO mq_accounts VALUES (1)")
    blocker = db.connect(autocommit=False, application_name="mq-blocker")
    blocker.execute("UPDATE mq_accounts SET id = id WHERE id = 1")
    waiters = [threading.Thread(target=lambda: db.connect(application_name="mq-waiter").execute(
        "UPDATE mq_accounts SET id = id WHERE id = 1"), daemon=True) for _ in range(count)]
    for waiter in waiters:
        waiter.start()
    try:
        with db.connect() as admin:
            def waiting() -> bool:  # ground truth: the server's own view of who waits for whom
                row = admin.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                                    " AND cardinality(pg_blocking_pids(pid)) > 0").fetchone()
                return row is not None and row[0] == count

            wait_until(waiting, timeout=30, what=f"{count} blocked sessions")
        yield
    finally:
        blocker.close()
        for waiter in waiters:
            waiter.join(10)


# -- one probe failing at a time -----------------------------------------------------------------


def test_rings_locked_past_the_lock_timeout_serve_no_ring_figure(populated):
    with locked(populated, "queuetop.rings"):
        snapshot = cycle(populated.target)
    assert "lock timeout" in (snapshot.probes["rings"].error or "")
    assert_unknown_but_the_rest_served(snapshot, "rings", still_served=("queues", "leases", "locks", "connections", "compaction"))


def test_leases_locked_past_the_lock_timeout_serve_no_lease_figure(populated):
    with locked(populated, "queuetop.leases"):
        snapshot = cycle(populated.target)
    assert "lock timeout" in (snapshot.probes["leases"].error or "")
    assert_unknown_but_the_rest_served(snapshot, "leases", still_served=("queues", "rings", "locks", "connections", "compaction"))


def test_the_compactor_locked_past_the_lock_timeout_serves_no_compaction_figure(populated):
    """The compactor's figures are 0 (no delta pending) when the probe runs: a 0 that must not
    outlive the probe's failure."""
    with locked(populated, "queuetop.task_status_deltas"):
        snapshot = cycle(populated.target)
    assert "lock timeout" in (snapshot.probes["compaction"].error or "")
    assert_unknown_but_the_rest_served(snapshot, "compaction", still_served=("queues", "rings", "leases", "locks", "connections"))


def test_a_locks_probe_without_pg_locks_serves_no_lock_figure_while_sessions_are_blocked(populated):
    """The issue's PostgreSQL 12 case: the locks probe fails (here: pg_locks revoked from the probe's
    role) while 2 sessions are blocked; /metrics served `queuetop_blocked_sessions 0`."""
    target = limited_role(populated, "REVOKE SELECT ON pg_catalog.pg_locks FROM PUBLIC")
    with blocked_sessions(populated, 2):
        snapshot = cycle(target)
    assert "pg_locks" in (snapshot.probes["locks"].error or ""), snapshot.probes["locks"]
    samples = assert_unknown_but_the_rest_served(snapshot, "locks",
                                                 still_served=("queues", "rings", "leases", "connections", "compaction"))
    assert ("queuetop_blocked_sessions", (("host", HOST),)) not in samples


def test_a_connections_probe_that_may_not_read_the_xmin_serves_no_session_figure(populated):
    """pg_stat_activity readable column by column, all but backend_xmin (which only the connections
    probe reads): the connections probe fails, the locks probe (same view) reports."""
    with populated.connect() as conn:
        columns = [r[0] for r in conn.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = 'pg_catalog.pg_stat_activity'::regclass AND attnum > 0"
            " AND NOT attisdropped AND attname <> 'backend_xmin' ORDER BY attnum")]
    grant = sql.SQL("GRANT SELECT ({}) ON pg_catalog.pg_stat_activity TO {}").format(
        sql.SQL(", ").join(map(sql.Identifier, columns)), sql.Identifier(PASSWORD_ROLE))
    with populated.connect() as conn:
        grant_text = grant.as_string(conn)
    target = limited_role(populated, "REVOKE SELECT ON pg_catalog.pg_stat_activity FROM PUBLIC", grant_text)
    snapshot = cycle(target)
    assert "pg_stat_activity" in (snapshot.probes["connections"].error or ""), snapshot.probes["connections"]
    assert_unknown_but_the_rest_served(snapshot, "connections", still_served=("queues", "rings", "leases", "locks", "compaction"))


def test_a_queues_probe_without_table_statistics_serves_no_queue_figure(populated):
    """Every source read, then the table statistics refused: the whole probe fails."""
    target = limited_role(populated, "REVOKE SELECT ON pg_catalog.pg_stat_user_tables FROM PUBLIC")
    snapshot = cycle(target)
    assert "pg_stat_user_tables" in (snapshot.probes["queues"].error or ""), snapshot.probes["queues"]
    assert_unknown_but_the_rest_served(snapshot, "queues", still_served=("rings", "leases", "locks", "connections", "compaction"))


def test_a_queue_source_that_fails_serves_none_of_its_queues_and_the_other_sources_queues(populated):
    """The engine's queue registry locked: the reference source fails (its queues unknown), the
    outbox source reports (its queue served), and the probe as a whole did not fail."""
    with locked(populated, "queuetop.queues"):
        snapshot = cycle(populated.target)
    status = snapshot.probes["queues"]
    assert status.unread == ("reference",) and "lock timeout" in (status.error or ""), status
    samples = scrape(snapshot)
    served = {dict(labels)["source"] for name, labels in samples if name.startswith("queuetop_queue_")}
    assert served == {"outbox"}, served
    assert samples[("queuetop_queue_depth", (("host", HOST), ("queue", "outbox"), ("source", "outbox")))] == 0
    assert samples[("queuetop_probe_error", (("host", HOST), ("probe", "queues")))] == 1
    for other in ("rings", "leases", "locks", "connections", "compaction"):
        assert ANCHORS[other] in samples, other


# -- probes that did not run ----------------------------------------------------------------------


def test_an_unreachable_target_serves_up_0_its_probe_errors_and_nothing_else():
    """No connection: no probe ran, so none has a duration (not 0 s each), and no figure at all."""
    target = resolve_target("postgresql://ops@127.0.0.1:1/app")
    assert target is not None
    samples = scrape(unreachable_snapshot(target, "connection refused", host=HOST))
    by_name = {name for name, _labels in samples}
    assert by_name == {"queuetop_build_info", "queuetop_up", "queuetop_snapshot_timestamp_seconds", "queuetop_probe_error"}
    assert samples[("queuetop_up", (("host", HOST),))] == 0
    assert {dict(labels)["probe"] for name, labels in samples if name == "queuetop_probe_error"} == set(ANCHORS)
    assert all(value == 1 for (name, _labels), value in samples.items() if name == "queuetop_probe_error")


def test_a_probe_the_sampler_could_not_run_on_a_host_that_answers_serves_no_figure(populated):
    """The sampler keeps each probe's latest result: a probe whose turn found no connection (the
    database was restarting) is `cannot reach the database` in a snapshot whose other probes ran
    since. Its figures are unknown, and it has no duration."""
    probes = probes_for(populated.target)
    with blocked_sessions(populated, 1), open_probe_connection(populated.target) as conn:
        server = probes.server(conn, label=populated.target.masked)
        results = {name: run_probe(probes, name, conn) for name in PROBE_NAMES}
    assert len(results["locks"][1][0]) == 1  # type: ignore[index]  # the session blocked, seen when the probe ran
    results["locks"] = (unreachable_status("connection refused"), None)  # as Sampler._run records a turn without a connection
    snapshot = compose(server, results, {"connected": True}, HOST)
    samples = scrape(snapshot)
    assert not of_probe(samples, "locks"), of_probe(samples, "locks")
    labels = (("host", HOST), ("probe", "locks"))
    assert samples[("queuetop_probe_error", labels)] == 1 and ("queuetop_probe_duration_seconds", labels) not in samples
    for other in ("queues", "rings", "leases", "connections", "compaction"):
        assert ANCHORS[other] in samples, other


def test_the_exporter_serves_no_lock_figure_while_its_locks_probe_fails(populated):
    """The same through `queuetop export prometheus` (its sampler, its collector, HTTP): while the
    locks probe fails and 2 sessions are blocked, /metrics has no lock figure and says the probe
    fails; the host is up and its other figures are served."""
    limited_role(populated, "REVOKE SELECT ON pg_catalog.pg_locks FROM PUBLIC")
    with blocked_sessions(populated, 2):
        exporter = Exporter("--dsn", limited_dsn(populated), "--interval", "0.5")
        try:
            host = f"local/{populated.name}"
            error = (("host", host), ("probe", "locks"))
            metrics = wait_until(lambda: (m := exporter.metrics()).get(("queuetop_probe_error", error)) == 1
                                 and ("queuetop_sessions", (("host", host),)) in m and m, timeout=30, what="a sample")
            assert isinstance(metrics, dict)
            assert not of_probe(metrics, "locks"), of_probe(metrics, "locks")
            assert metrics[("queuetop_up", (("host", host),))] == 1
            assert ("queuetop_probe_duration_seconds", error) in metrics
            assert exporter.stop() == 0
        finally:
            if exporter.proc.poll() is None:
                exporter.proc.kill()
                exporter.proc.wait(10)


def test_a_probe_that_read_everything_it_may_says_a_note_not_an_error(populated):
    """Without pg_read_all_stats other roles' queries are hidden while a session is blocked: the
    lock tree is whole and served, the probe's note is `queuetop_probe_note 1`, and nothing
    failed (`queuetop_probe_error 0`); the JSON has it in `probes.locks.notes`, not `error`."""
    target = limited_role(populated)
    with blocked_sessions(populated, 2):
        snapshot = cycle(target)
    locks = snapshot.probes["locks"]
    assert locks.error is None and "pg_read_all_stats" in (locks.notes or ""), locks
    assert snapshot.to_json()["probes"]["locks"]["notes"] == locks.notes
    samples = scrape(snapshot)
    assert samples[("queuetop_probe_note", (("host", HOST), ("probe", "locks")))] == 1
    assert samples[("queuetop_probe_error", (("host", HOST), ("probe", "locks")))] == 0
    assert samples[("queuetop_blocked_sessions", (("host", HOST),))] == 2
