"""The scheduled sampler, the snapshot command and the config file."""

from __future__ import annotations

import json
import threading

import pytest

from dbcore.errors import UsageError
from probes.config import load_config, parse_config
from probes.postgres import PROBE_NAMES, PostgresProbes
from probes.sampler import Sampler
from queues.table_queue import TableQueue

from .conftest import PASSWORD, PASSWORD_ROLE, wait_until

V1_KEYS = {"version", "taken_at", "server", "probes", "queues", "rings", "leases", "blocked", "blockers", "connections", "compaction",
           "replication"}


class Collect:
    def __init__(self):
        self.snapshots = []
        self.lock = threading.Lock()

    def __call__(self, snapshot):
        with self.lock:
            self.snapshots.append(snapshot)

    def latest(self):
        with self.lock:
            return self.snapshots[-1] if self.snapshots else None


def test_sampler_hands_complete_snapshots_with_rates(db):
    with db.connect() as conn:
        queue = TableQueue.create(conn, "sampled")
    sink = Collect()
    sampler = Sampler(db.target, sink, interval_s=0.2)
    sampler.start()
    try:
        first = wait_until(sink.latest, timeout=15, what="a snapshot")
        assert set(first.probes) == set(PROBE_NAMES) >= {"queues", "rings", "leases", "locks", "connections", "compaction", "replication"}
        assert first.extra["connected"] is True
        with db.connect() as conn:
            queue.enqueue_batch(conn, ["{}"] * 30)

        def rated():
            snap = sink.latest()
            [q] = [q for q in snap.queues if q.name == "sampled"]
            return q if q.depth == 30 and q.enqueued_per_s else None

        q = wait_until(rated, timeout=15, what="the enqueue rate")
        assert q.enqueued_per_s > 0
    finally:
        sampler.stop()
    assert not sampler._scheduler.running and sampler._pool.closed


class SlowRings(PostgresProbes):
    """Real probes, with the rings probe made slower than the interval, recording overlap."""

    def __init__(self):
        super().__init__()
        self.active = 0
        self.max_active = 0
        self.runs = 0
        self.lock = threading.Lock()

    def rings(self, conn):
        with self.lock:
            self.active += 1
            self.runs += 1
            self.max_active = max(self.max_active, self.active)
        try:
            conn.execute("SELECT pg_sleep(0.5)")
            return super().rings(conn)
        finally:
            with self.lock:
                self.active -= 1


def test_a_slow_probe_never_overlaps_itself(db):
    sink = Collect()
    sampler = Sampler(db.target, sink, interval_s=0.1)
    sampler.probes = SlowRings()
    sampler.start()
    try:
        wait_until(lambda: sampler.probes.runs >= 4, timeout=20, what="several slow runs")
    finally:
        sampler.stop()
    assert sampler.probes.max_active == 1
    # Coalesced: about one run per 0.5 s, not a backlog of one per 0.1 s tick.
    assert sink.latest() is not None


def test_sampler_reports_an_unreachable_database_and_keeps_going(db, pg_server):
    from dbcore.database import resolve_target

    target = resolve_target(f"postgresql://postgres@/{db.name}?host=/nonexistent-socket-dir")
    sink = Collect()
    sampler = Sampler(target, sink, interval_s=0.2)
    sampler.start()
    try:
        snap = wait_until(sink.latest, timeout=20, what="a snapshot saying the database is unreachable")
    finally:
        sampler.stop()
    assert snap.extra["connected"] is False
    assert "cannot reach the database" in snap.probes["queues"].error
    assert snap.queues == ()


@pytest.mark.parametrize("case", ["wrong password", "no such role", "connection limit", "refused"])
def test_a_disconnect_says_why_not_only_that_the_pool_timed_out(db, pg_server, case):
    """The pool's own error is 'couldn't get a connection after 0.50 sec'; the operator needs
    what the server (or the network) said to the last attempt."""
    from psycopg import sql

    from dbcore.database import resolve_target

    role = f"qt_limited_{db.name}"[:60]
    if case == "wrong password":
        dsn = f"postgresql://{PASSWORD_ROLE}:not-{PASSWORD}@/{db.name}?host={pg_server.socket_dir}"
        expected = f'password authentication failed for user "{PASSWORD_ROLE}"'
    elif case == "no such role":
        dsn, expected = f"postgresql://qt_nobody@/{db.name}?host={pg_server.socket_dir}", 'role "qt_nobody" does not exist'
    elif case == "connection limit":
        with db.connect() as conn:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN CONNECTION LIMIT 0").format(sql.Identifier(role)))
        dsn, expected = f"postgresql://{role}@/{db.name}?host={pg_server.socket_dir}", f'too many connections for role "{role}"'
    else:
        dsn, expected = f"postgresql://postgres@127.0.0.1:1/{db.name}", "Connection refused at 127.0.0.1:1"
    sink = Collect()
    sampler = Sampler(resolve_target(dsn), sink, interval_s=0.2)
    sampler.start()
    try:
        snap = wait_until(lambda: (s := sink.latest()) and expected in str(s.extra["connection_error"]) and s,
                          timeout=20, what=f"the disconnect reason {expected!r}")
    finally:
        sampler.stop()
        if case == "connection limit":
            with db.connect() as conn:
                conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
    assert snap.extra["connected"] is False
    assert "couldn't get a connection" not in snap.extra["connection_error"]
    assert snap.probes["queues"].error == f"cannot reach the database: {snap.extra['connection_error']}"


def test_snapshot_json_has_every_v1_key(db, cli):
    with db.connect() as conn:
        TableQueue.create(conn, "cli-q").enqueue_batch(conn, ["{}"] * 3)
    result = cli("snapshot", "--dsn", db.dsn, "--json")
    assert result.returncode == 0, result.stderr
    [snap] = result.json_lines()
    assert V1_KEYS <= set(snap)
    assert snap["version"] == 1 and snap["taken_at"].endswith("Z")
    assert snap["server"]["dialect"] == "postgresql" and snap["server"]["database"] == db.name
    assert set(snap["probes"]) == set(PROBE_NAMES)
    assert all(p["error"] is None and p["elapsed_ms"] >= 0 for p in snap["probes"].values())
    [q] = [q for q in snap["queues"] if q["name"] == "cli-q"]
    required = {"name", "kind", "source", "depth", "ready", "in_flight", "delayed", "dead", "oldest_ready_age_s",
                "enqueued_per_s", "dequeued_per_s", "depth_is_estimate"}
    assert required <= set(q)
    assert (q["kind"], q["source"]) == ("reference", "reference")
    assert q["depth"] == 3 and q["enqueued_per_s"] is None  # one sample: no rates
    assert {"total", "max", "by_state", "by_application", "oldest_xact_age_s", "xmin_holder_pid"} <= set(snap["connections"])


def test_snapshot_with_rates_and_readable_output(db, cli):
    with db.connect() as conn:
        TableQueue.create(conn, "cli-r")
    result = cli("snapshot", "--dsn", db.dsn, "--json", "--rates", "0.3")
    [snap] = result.json_lines()
    [q] = [q for q in snap["queues"] if q["name"] == "cli-r"]
    assert q["enqueued_per_s"] == 0 and q["dequeued_per_s"] == 0
    text = cli("snapshot", "--dsn", db.dsn)
    assert text.returncode == 0
    for title in ("Queues", "Rings", "Leases", "Blocked", "Root blockers", "Connections"):
        assert f"\n{title}" in text.stdout
    assert "cli-r" in text.stdout


def test_snapshot_with_a_config_file(db, cli, tmp_path):
    with db.connect() as conn:
        conn.execute("CREATE TABLE outbox (id bigserial PRIMARY KEY, created timestamptz DEFAULT now())")
        conn.execute("INSERT INTO outbox DEFAULT VALUES")
    config = tmp_path / "queuetop.toml"
    config.write_text('[[queues]]\nname = "outbox"\ntable = "outbox"\norder_by = "id"\nage_column = "created"\n')
    result = cli("snapshot", "--dsn", db.dsn, "--json", "--config", str(config))
    [snap] = result.json_lines()
    [q] = [q for q in snap["queues"] if q["name"] == "outbox" and q["kind"] == "table"]  # not the engine's outbox row
    assert (q["kind"], q["depth"], q["ready"]) == ("table", 1, 1)


@pytest.mark.parametrize(
    "text, message",
    [
        ("[[queues]]\nname = 'x'\n", "table is required"),
        ("[[queues]]\nname = 'bad name!'\ntable = 't'\norder_by = 'id'\n", "invalid name"),
        ("[probes]\ninterval = -1\n", "probes.interval"),
        ("[[queues]]\nname = 'x'\ntable = 't'\norder_by = 'id'\ncolour = 'red'\n", "unknown key"),
        ("[[queues]]\nname = 'x'\ntable = 't'\norder_by = 'id'\ndead_states = ['f']\n", "state_column"),
        ("not toml at all [", "malformed config"),
    ],
)
def test_bad_config_is_a_usage_error(tmp_path, cli, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(UsageError, match=message):
        load_config(path)
    result = cli("snapshot", "--config", str(path), "--dsn", "postgresql://nobody@/none?host=/nonexistent")
    assert result.returncode == 2
    assert result.stderr.startswith("queuetop: error: ") and message in result.stderr
    assert "Traceback" not in result.stderr


def test_config_round_trip():
    config = parse_config(
        {"probes": {"interval": 1.5, "window": 500},
         "queues": [{"name": "m", "table": "public.messages", "order_by": "id", "state_column": "s", "dead_states": ["failed"]}]}
    )
    assert config.interval_s == 1.5 and config.window == 500
    assert config.queues[0].dead_states == ("failed",)
    assert json.dumps(config.queues[0].table) == '"public.messages"'
