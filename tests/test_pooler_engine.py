"""The engine through a stock PgBouncer (issue 44, point 1): every engine command works, again and
again, in session and in transaction mode with no option; workers stay exactly-once; nothing is
prepared by name, listened for or set for the session where the pooler does not pin the server
session (found out, or declared with --pooler / a config target's `pooler`); and on a direct
connection the hot path still prepares its statements.

A real PgBouncer (Debian's 1.18, tests/pgbouncer.py) in front of the test server; the commands are
the real `queuetop` entry point; what they did is counted from the database afterwards."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace

import psycopg
import pytest

from dbcore.database import connect, resolve_target
from dbcore.dialect import open_session
from dbcore.pooler import link_of
from probes.config import parse_config
from queues import lease, outbox
from queues.hotpath import HotPath
from queues.outbox import Relay
from queues.table_queue import TableQueue
from tui.commands.context import Context

from .conftest import run_cli
from .recorder import read_records

POLLS = "instead of waiting for NOTIFY"  # the pool's one log line where it cannot LISTEN
HOLDER = "qt-forgotten-psql"


def ok(*args: str, **kwargs) -> object:
    result = run_cli(*args, **kwargs)
    assert result.returncode == 0, (args, result.stderr)
    return result


def quiet(dsn: str, *args: str) -> object:
    """A command that succeeds through the pooler and says nothing on stderr."""
    result = ok(*args, "--dsn", dsn)
    assert result.stderr == "", (args, result.stderr)
    return result


def queue_ids(db, name: str) -> list[int]:
    with db.connect() as conn:
        return [row[0] for row in conn.execute(f'SELECT id FROM queuetop."q_{name}" ORDER BY id')]


def test_every_engine_command_works_through_the_pooler_again_and_again(db, pgbouncer):
    dsn = pgbouncer.uri(db.name)
    for _ in range(2):
        assert json.loads(quiet(dsn, "engine", "init").stdout)["schema_version"] == "1"
    for _ in range(3):  # the second run is the one issue 44 saw fail ("prepared statement ... already exists")
        assert quiet(dsn, "engine", "enqueue", "jobs", "--count", "40").stdout.strip() == '{"queue": "jobs", "enqueued": 40}'
        assert quiet(dsn, "engine", "enqueue", "jobs", "--count", "3", "--batch", "1").stdout.strip() == \
            '{"queue": "jobs", "enqueued": 3}'
    assert len(queue_ids(db, "jobs")) == 129
    for expected in (129, 0):
        work = ok("engine", "work", "jobs", "--until-empty", "--workers", "2", "--dsn", dsn)
        assert json.loads(work.stdout) == {"processed": expected, "retried": 0, "dead": 0, "stale_acks": 0}
        assert work.stderr.count(POLLS) == 1 and "detected, taken as transaction mode" in work.stderr, work.stderr
    assert queue_ids(db, "jobs") == []

    quiet(dsn, "engine", "ring", "create", "r", "--capacity", "8")
    bodies = [json.dumps({"n": n}) for n in range(5)]
    for body in bodies:
        quiet(dsn, "engine", "ring", "put", "r", "--body", body)
    assert quiet(dsn, "engine", "ring", "take", "r", "--count", "3").stdout.splitlines() == bodies[:3]
    assert quiet(dsn, "engine", "ring", "take", "r", "--count", "8").stdout.splitlines() == bodies[3:]

    token = int(quiet(dsn, "engine", "lease", "acquire", "L", "--holder", "a", "--ttl", "30").stdout)
    for _ in range(2):
        assert int(quiet(dsn, "engine", "lease", "renew", "L", "--holder", "a", "--ttl", "30").stdout) == token
    assert json.loads(quiet(dsn, "engine", "lease", "release", "L", "--holder", "a").stdout)["released"] is True
    assert int(quiet(dsn, "engine", "lease", "acquire", "L", "--holder", "b", "--ttl", "30").stdout) > token
    with db.connect() as conn:
        assert lease.describe(conn, "L").holder == "b"
        conn.execute("INSERT INTO queuetop.task_status_deltas (task_id, status, count) VALUES (1, 'PENDING', 1), (1, 'DONE', 2)")
    assert json.loads(quiet(dsn, "engine", "compact").stdout)["groups"] == 1
    assert json.loads(quiet(dsn, "engine", "compact").stdout)["groups"] == 0
    with db.connect() as conn:
        assert conn.execute("SELECT status, sum(count)::int FROM queuetop.task_status_deltas GROUP BY status ORDER BY status"
                            ).fetchall() == [("DONE", 2), ("PENDING", 1)]


def test_the_relay_scenario_runs_through_the_pooler(db, pgbouncer):
    result = ok("engine", "scenario", "relay", "--dsn", pgbouncer.uri(db.name), "--relays", "2", "--messages", "300",
                "--rate", "1000", "--ttl", "2", "--json", timeout=180)
    [line] = result.json_lines()
    assert line["messages"] == 300
    assert line["published_unique"] == line["published_total"] == line["expected_deliveries"] >= 300


@pytest.mark.parametrize(("pool", "batch"), [("threads", "1"), ("processes", "10")])
def test_ten_thousand_messages_four_workers_exactly_once_through_the_pooler(db, pgbouncer, tmp_path, pool, batch):
    """Single claims (each acked with the next claim, pipelined) in threads; batches of 10 (acked
    by their ids as the server sent them) in two processes: every message handled once."""
    dsn = pgbouncer.uri(db.name)
    assert json.loads(ok("engine", "enqueue", "jobs", "--count", "10000", "--dsn", dsn).stdout)["enqueued"] == 10_000
    ids = queue_ids(db, "jobs")
    assert len(ids) == 10_000
    records = tmp_path / "records"
    records.mkdir()
    spread = ["--processes", "2"] if pool == "processes" else []
    work = ok("engine", "work", "jobs", "--until-empty", "--workers", "4", *spread, "--batch", batch, "--handler", "tests.recorder:record",
              "--dsn", dsn, env={"QT_RECORD_DIR": str(records)}, timeout=600)
    assert json.loads(work.stdout) == {"processed": 10_000, "retried": 0, "dead": 0, "stale_acks": 0}
    assert work.stderr.count(POLLS) == 1, work.stderr  # said once, by the pool (not once per process)
    handled = Counter(record[0] for record in read_records(records))
    assert sorted(handled) == ids  # none lost
    assert [n for n in handled.values() if n != 1] == []  # none twice
    assert len(list(records.iterdir())) == (2 if pool == "processes" else 1)  # each process took its share
    assert queue_ids(db, "jobs") == []
    with db.connect() as conn:
        assert conn.execute("SELECT count(*) FROM queuetop.dead_letters").fetchone() == (0,)


def queuetop_statements(conn: psycopg.Connection) -> list[str]:
    """The statements prepared on this session (pg_prepared_statements: the session's own)."""
    return sorted(row[0] for row in conn.execute("SELECT name FROM pg_prepared_statements", prepare=False))


@pytest.mark.parametrize("pooler", ["auto", "none", "session", "transaction"])
def test_the_hot_path_prepares_on_a_pinned_session_and_only_there(db, pooler):
    """On a direct connection (found out, or declared none or session) the claim loop's and the
    producer's statements are prepared, by name, once: the direct speed path. Declared transaction
    mode prepares nothing, not even psycopg's automatic statements, and still does the same work."""
    target = replace(db.target, pooler=pooler)
    with connect(target, application_name="queuetop-tests") as conn:
        queue = TableQueue.create(conn, "jobs")
        for n in range(3):
            queue.enqueue(conn, json.dumps({"n": n}))
        queue.enqueue_batch(conn, [json.dumps({"n": n}) for n in range(3, 8)])
        hot = HotPath(conn, queue)
        one = hot.claim(visibility_s=30)
        acked, batch = hot.ack_and_claim(one, visibility_s=30, batch=4)  # one round trip, pipelined
        assert acked == 1 and len(batch) == 4
        assert hot.ack(batch) == 4
        rest = hot.claim(visibility_s=30, batch=10)
        assert hot.ack(rest) == 3
        assert [json.loads(m.body)["n"] for m in [*one, *batch, *rest]] == list(range(8))
        for _ in range(6):  # psycopg prepares a statement run this often (prepare_threshold) where it may
            queue.counts(conn)
        prepared = queuetop_statements(conn)
        threshold = conn.prepare_threshold
    if pooler == "transaction":
        assert not hot.prepared and prepared == [] and threshold is None
    else:
        suffix = next(name for name in prepared if name.startswith("queuetop_enq_enqueue_batch_")).rsplit("_", 1)[1]
        assert hot.prepared and threshold is not None
        assert [name for name in prepared if name.startswith("queuetop_")] == [
            f"queuetop_enq_enqueue_{suffix}", f"queuetop_enq_enqueue_batch_{suffix}",
            "queuetop_hot_ack_batch", "queuetop_hot_ack_one", "queuetop_hot_claim_batch", "queuetop_hot_claim_one"]
        assert any(name.startswith("_pg3_") for name in prepared)  # psycopg's own, for the statements run often


def test_declared_transaction_mode_on_a_direct_connection(db):
    """--pooler transaction is honoured on a server reached directly: the commands work again and
    again, and the pool polls instead of listening, saying so once; without it, it listens."""
    for _ in range(3):
        assert json.loads(ok("engine", "enqueue", "jobs", "--count", "30", "--pooler", "transaction", "--dsn", db.dsn
                             ).stdout)["enqueued"] == 30
    work = ok("engine", "work", "jobs", "--until-empty", "--workers", "2", "--processes", "2", "--pooler", "transaction",
              "--dsn", db.dsn)
    assert json.loads(work.stdout)["processed"] == 90
    assert work.stderr.count(POLLS) == 1 and "through a pooler (transaction mode)" in work.stderr, work.stderr
    ok("engine", "enqueue", "jobs", "--count", "5", "--dsn", db.dsn)
    direct = ok("engine", "work", "jobs", "--until-empty", "--dsn", db.dsn)
    assert json.loads(direct.stdout)["processed"] == 5 and direct.stderr == ""


@contextmanager
def holding(db, statement: str) -> Iterator[int]:
    """A direct session that runs `statement` in a transaction and then does nothing until the
    block ends (then it rolls back); yields its pid."""
    with db.connect(autocommit=False, application_name=HOLDER) as conn:
        conn.execute(statement)
        try:
            yield conn.info.backend_pid
        finally:
            conn.rollback()


def server_settings(bouncer, database: str, *names: str) -> list[tuple[str, ...]]:
    """`names`' values on every server session the pooler keeps for `database`: as many clients
    as it has server sessions, each in an open transaction, so that each holds another one."""
    servers = [s for s in bouncer.show("SERVERS") if s["database"] == database]
    assert servers, "the pooler keeps no server session for the database"
    seen = []
    with ExitStack() as stack:
        for _ in servers:
            conn = stack.enter_context(psycopg.connect(bouncer.uri(database), autocommit=False, prepare_threshold=None))
            seen.append(tuple(conn.execute(f"SHOW {name}").fetchone()[0] for name in names))
    return seen


@pytest.mark.parametrize(("command", "lock", "what"), [
    (("engine", "lease", "renew", "relay", "--holder", "a", "--ttl", "60"),
     "SELECT * FROM queuetop.leases WHERE name = 'relay' FOR UPDATE", "a row of queuetop.leases"),
    (("engine", "enqueue", "jobs", "--count", "3"),
     "LOCK TABLE queuetop.q_jobs IN ACCESS EXCLUSIVE MODE", "a RowExclusiveLock on queuetop.q_jobs"),
], ids=["lease-renew", "enqueue"])
def test_a_lock_timeout_through_the_transaction_pooler_names_the_holder_and_leaves_nothing_behind(
        db, pgbouncer_transaction, command, lock, what):
    """Each transaction sets its lock timeout (SET LOCAL) and says its server session, which the
    watch follows: the holder is named as on a direct connection, and no server session the
    pooler hands to other clients keeps the timeout."""
    with db.connect() as conn:
        lease.acquire(conn, "relay", "a", 60)
        TableQueue.create(conn, "jobs")
    dsn = pgbouncer_transaction.uri(db.name)
    quiet(dsn, "engine", "lease", "renew", "relay", "--holder", "a", "--ttl", "60")  # the pooler has a server session
    with holding(db, lock) as pid:
        result = run_cli(*command, "--dsn", dsn, env={"QUEUETOP_LOCK_TIMEOUT": "1"}, timeout=60)
    assert result.returncode == 1, result
    [line] = result.stderr.splitlines()
    assert line.startswith(f"queuetop: error: lock timeout: waited 1s (QUEUETOP_LOCK_TIMEOUT) for {what}, held by pid {pid} "
                           f"(application_name '{HOLDER}', idle in transaction"), line
    assert set(server_settings(pgbouncer_transaction, db.name, "lock_timeout")) == {("0",)}
    quiet(dsn, *command)  # and once the lock is gone, it goes through
    assert set(server_settings(pgbouncer_transaction, db.name, "lock_timeout")) == {("0",)}


def test_the_relay_sets_its_idle_in_transaction_timeout_in_each_batch(db, pgbouncer_transaction):
    """A relay's batch may not stay idle in its transaction: through a pooler in transaction mode
    the timeout is the batch transaction's (SET LOCAL), not left on the server session."""
    target = resolve_target(pgbouncer_transaction.uri(db.name))
    assert target is not None
    seen: list[str] = []
    with open_session(target, application_name="queuetop-relay:test") as conn:
        assert not link_of(conn).pinned
        relay = Relay(target, "test", ttl_s=2.0, hook=lambda step: step == "batch" and seen.append(
            conn.execute("SHOW idle_in_transaction_session_timeout").fetchone()[0]))
        outbox.send(conn, "ob-dest", json.dumps({"n": 1}))
        relay.token = lease.acquire(conn, relay.lease, relay.holder, relay.ttl_s)
        assert relay.relay_batch(conn) == 1
        assert conn.execute("SHOW idle_in_transaction_session_timeout").fetchone()[0] == "0"
    assert seen == ["4s"]
    assert set(server_settings(pgbouncer_transaction, db.name, "idle_in_transaction_session_timeout")) == {("0",)}


def test_a_config_target_declares_its_pooler_and_pooler_overrides_it(monkeypatch):
    monkeypatch.delenv("QUEUETOP_DSN", raising=False)
    config = parse_config({"targets": [{"name": "a", "dsn": "host=/nonexistent dbname=a", "pooler": "transaction"},
                                       {"name": "b", "dsn": "host=/nonexistent dbname=b"}]})
    assert [t.pooler for t in config.targets] == ["transaction", "auto"]
    found = Context(argparse.Namespace()).targets(config)
    assert [(name, target.pooler) for name, target in found] == [("a", "transaction"), ("b", "auto")]
    forced = Context(argparse.Namespace(pooler="session")).targets(config)
    assert [target.pooler for _name, target in forced] == ["session", "session"]
    given = Context(argparse.Namespace(dsn_after=["host=/nonexistent dbname=c"], pooler="none"))
    assert given.target.pooler == "none"


def test_a_bad_pooler_is_one_line_exit_2(tmp_path, db):
    path = tmp_path / "config.toml"
    path.write_text('[[targets]]\nname = "a"\ndsn = "host=/nonexistent dbname=a"\npooler = "bogus"\n')
    result = run_cli("snapshot", "--config", str(path), env={"QUEUETOP_DSN": ""})
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        f"queuetop: error: config {str(path)!r}: target 'a': pooler must be one of auto, none, session, transaction"]
    result = run_cli("engine", "enqueue", "jobs", "--pooler", "bogus", "--dsn", db.dsn)
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1
    assert "argument --pooler: invalid choice: 'bogus'" in result.stderr
    assert queue_ids_or_none(db) is None  # nothing written


def queue_ids_or_none(db) -> list[int] | None:
    with db.connect() as conn:
        if conn.execute("SELECT to_regclass('queuetop.q_jobs')").fetchone()[0] is None:
            return None
    return queue_ids(db, "jobs")


def test_the_job_console_works_through_the_pooler(db, pgbouncer):
    """Issue 46: listing, showing and a bulk retry through a stock PgBouncer (session and transaction
    mode): each batch's settings are its own transaction's, nothing relies on the session."""
    from queues.table_queue import TableQueue

    with db.connect() as conn:
        queue = TableQueue.create(conn, "pooled-dead")
        queue.enqueue_batch(conn, [json.dumps({"n": n}) for n in range(30)])
        for message in queue.claim(conn, visibility_s=30, batch=30):
            assert queue.dead_letter_claimed(conn, message, "boom")
    dsn = pgbouncer.uri(db.name)
    listed = json.loads(ok("jobs", "list", "pooled-dead", "--state", "dead", "--limit", "10", "--json", "--dsn", dsn).stdout)
    assert len(listed["jobs"]) == 10 and listed["after"] is not None
    shown = json.loads(ok("jobs", "show", "pooled-dead", listed["jobs"][0]["id"], "--json", "--dsn", dsn).stdout)
    assert shown["job"]["last_error"] == "boom"
    done = json.loads(ok("jobs", "retry", "pooled-dead", "--state", "dead", "--all", "--yes", "--json", "--dsn", dsn).stdout)
    assert (done["matched"], done["changed"], done["skipped"]) == (30, 30, 0)
    with db.connect() as conn:
        counts = queue.counts(conn)
        assert (counts.dead, counts.ready) == (0, 30)
