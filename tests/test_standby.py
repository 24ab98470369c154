"""A hot standby is said, and written to by nothing (issue 44, point 4): a real standby of the test
server (tests/test_standby_feedback.py's `real_standby`: pg_basebackup -R, streaming), with the
test database replayed. Its snapshot says `standby` with the replay's lag (time and WAL bytes) and
whether replay is paused; its queues' verdicts are `not-judged` ("consumers run on the primary");
with replay paused its figures stay the old ones (as of the last replayed transaction) while the
primary moves on, and catch up once replay resumes. Every engine command that writes exits 2 with
one line, `<target> is a standby: read-only`; the dashboard says STANDBY with the lag in its
header and its engine keys are off there, saying why; the exporter serves the role and the lag.
The primary says `primary`.

One standby for the module (a base backup and a server start cost seconds).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from dbcore.database import Target, resolve_target
from dbcore.dialect import translate_error
from dbcore.errors import OperationFailed, StandbyReadOnly
from dbcore.pgversions import versioned
from probes.config import Config
from probes.diagnosis import ON_STANDBY, Diagnoser
from probes.model import Locker, ServerInfo, Snapshot
from probes.postgres import SERVER_SQL
from probes.prometheus import families
from probes.sampler import run_cycle
from tui.app import single_host
from tui.cli import main
from tui.dashboard import QueuetopApp, StatusBar
from tui.dashboard.bars import StatusFacts, status_parts
from tui.format import fit_by_priority
from tui.sample import sample_snapshot

from .conftest import Database, drop_database, make_database, run_cli, wait_until
from .test_diagnosis import TABLE, queue
from .test_prometheus import exporter_factory  # noqa: F401 (a fixture)
from .test_standby_feedback import _can_connect, real_standby
from .test_tui import settle

STANDBY_NAME = "qt-standby-44"
QUEUE = "jobs"


@dataclass(frozen=True)
class Pair:
    primary: Database
    standby_dsn: str

    @property
    def standby(self) -> Target:
        target = resolve_target(self.standby_dsn)
        assert target is not None
        return target


@pytest.fixture(scope="module")
def pair(pg_server, tmp_path_factory) -> Iterator[Pair]:
    """The test database on the primary and replayed on a real hot standby, with a queue of 7 ready
    messages enqueued after the standby started (so that it has replayed a transaction: its
    figures are as of one)."""
    database = make_database(pg_server, prefix="sb")
    try:
        with real_standby(pg_server, tmp_path_factory.mktemp("standby"), STANDBY_NAME) as socket_dir:
            standby_dsn = f"postgresql://postgres@/{database.name}?host={socket_dir}"
            wait_until(lambda: _can_connect(standby_dsn), timeout=60, what="the test database on the standby")
            pair = Pair(database, standby_dsn)
            assert run_cli("engine", "enqueue", QUEUE, "--count", "7", "--dsn", database.dsn).returncode == 0
            wait_until(lambda: ready(pair.standby) == 7, timeout=30, interval=0.1, what="the 7 messages replayed")
            yield pair
    finally:
        with psycopg.connect(pg_server.admin_uri, autocommit=True) as admin:
            drop_database(admin, database.name)


def jobs(snapshot: Snapshot):
    return next(q for q in snapshot.queues if q.name == QUEUE and q.source == "reference")


def ready(target: Target) -> int | None:
    snapshot = run_cycle(target)
    found = [q for q in snapshot.queues if q.name == QUEUE and q.source == "reference"]
    return found[0].ready if found else None


def snapshot_json(dsn: str) -> dict:
    result = run_cli("snapshot", "--json", "--dsn", dsn)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


# -- the snapshot --------------------------------------------------------------------------------


def test_the_primary_says_primary_and_has_no_replay(pair):
    document = snapshot_json(pair.primary.dsn)
    server = document["server"]
    assert server["role"] == "primary"
    assert server["replay_lag_s"] is None and server["replay_lag_bytes"] is None and server["replay_paused"] is None
    assert server["replayed_at"] is None
    # The primary's verdicts are judged as ever: 7 ready and no consumer.
    assert next(q for q in document["queues"] if q["name"] == QUEUE)["diagnosis"]["code"] == "no-consumers"


def test_the_standby_says_standby_with_its_lag_and_its_queues_are_not_judged(pair):
    document = snapshot_json(pair.standby_dsn)
    server = document["server"]
    assert server["role"] == "standby" and server["replay_paused"] is False
    assert server["replay_lag_s"] is not None and 0 <= server["replay_lag_s"] < 60
    assert server["replay_lag_bytes"] is not None and 0 <= server["replay_lag_bytes"] < 16 * 2**20
    assert server["replayed_at"] is not None  # the 7 messages' transaction at least
    # Every probe runs on a standby (none writes, none takes a transaction id).
    assert {name: status["error"] for name, status in document["probes"].items() if status["error"]} == {}
    q = next(q for q in document["queues"] if q["name"] == QUEUE)
    assert q["ready"] == 7  # the primary's figure, replayed
    assert q["diagnosis"]["code"] == "not-judged" and q["diagnosis"]["reason"] == ON_STANDBY
    assert "consumers run on the primary" in q["diagnosis"]["reason"]
    # Its table statistics are its own, not the primary's: no rate, rather than a calm 0/s.
    assert q["enqueued_per_s"] is None and q["dequeued_per_s"] is None


def test_paused_replay_keeps_the_old_figures_and_says_so_then_catches_up(pair):
    with psycopg.connect(pair.standby_dsn, autocommit=True) as standby:
        standby.execute("SELECT pg_wal_replay_pause()")
        try:
            assert run_cli("engine", "enqueue", QUEUE, "--count", "5", "--dsn", pair.primary.dsn).returncode == 0

            def behind() -> Snapshot | None:
                snapshot = run_cycle(pair.standby)
                server = snapshot.server
                return snapshot if (server.replay_paused and server.replay_lag_bytes and server.replay_lag_s) else None

            paused = wait_until(behind, timeout=30, interval=0.1, what="the standby paused and behind")
            assert isinstance(paused, Snapshot)
            assert paused.server.replayed_at is not None and paused.server.replayed_at <= datetime.now(UTC)
            assert jobs(paused).ready == 7  # as of the last replayed transaction
            assert jobs(run_cycle(pair.primary.target)).ready == 12  # the primary moved on
            # PostgreSQL 12 and 13 ask pg_is_wal_replay_paused() (the matrix has no standby): their
            # text of the statement, on this standby, says the same.
            for version_num in (120000, 140000):
                row = standby.execute(versioned(SERVER_SQL["recovery"], version_num)).fetchone()
                assert row is not None and row[0] == "standby" and row[3] is True and row[2] > 0, version_num
            said = snapshot_json(pair.standby_dsn)["server"]
            assert said["replay_paused"] is True and said["replay_lag_bytes"] > 0 and said["replay_lag_s"] > 0
            report = run_cli("snapshot", "--dsn", pair.standby_dsn)
            assert report.returncode == 0 and "STANDBY (read-only): replay lag " in report.stdout
            assert "replay PAUSED; figures as of " in report.stdout, report.stdout
            # A recording keeps it all (JSON and back), and one recorded before it reads as not known.
            document = json.loads(json.dumps(paused.to_json()))
            assert Snapshot.from_json(document).server == paused.server
            for key in ("role", "replay_lag_s", "replay_lag_bytes", "replay_paused", "replayed_at"):
                del document["server"][key]
            assert Snapshot.from_json(document).server.role is None
            # The exporter says it too.
            metrics = {m.name: m.samples[0].value for m in families([replace(paused, extra={"host": "s"})]) if m.samples}
            assert metrics["queuetop_server_in_recovery"] == 1 and metrics["queuetop_server_replay_paused"] == 1
            assert metrics["queuetop_server_replay_lag_bytes"] == paused.server.replay_lag_bytes > 0
            assert metrics["queuetop_server_replay_lag_seconds"] > 0
        finally:
            standby.execute("SELECT pg_wal_replay_resume()")

    def caught_up() -> Snapshot | None:
        snapshot = run_cycle(pair.standby)
        server = snapshot.server
        return snapshot if server.replay_paused is False and server.replay_lag_bytes == 0 and jobs(snapshot).ready == 12 else None

    resumed = wait_until(caught_up, timeout=30, interval=0.1, what="the standby caught up")
    assert isinstance(resumed, Snapshot) and resumed.server.replay_lag_s == 0.0
    assert (jobs(resumed).ready, jobs(resumed).depth) == (12, jobs(run_cycle(pair.primary.target)).depth)


def test_the_exporter_serves_each_hosts_role_and_the_standbys_lag(pair, exporter_factory):  # noqa: F811
    exporter = exporter_factory("--dsn", pair.standby_dsn, "--dsn", pair.primary.dsn, "--interval", "0.5")

    def by_host(metrics: dict, name: str) -> dict[str, float]:
        return {dict(labels)["host"]: value for (metric, labels), value in metrics.items() if metric == name}

    def both() -> dict | None:  # each sampled, twice at least (a rate needs two samples)
        metrics = exporter.metrics()
        return metrics if len(by_host(metrics, "queuetop_server_in_recovery")) == 2 and \
            len(by_host(metrics, "queuetop_queue_enqueued_per_second")) >= 1 else None

    metrics = wait_until(both, timeout=30, interval=0.2, what="both hosts sampled")
    assert isinstance(metrics, dict)
    roles = by_host(metrics, "queuetop_server_in_recovery")
    (standby,) = [host for host, value in roles.items() if value == 1]
    (primary,) = [host for host, value in roles.items() if value == 0]
    for name in ("queuetop_server_replay_lag_seconds", "queuetop_server_replay_lag_bytes", "queuetop_server_replay_paused"):
        assert set(by_host(metrics, name)) == {standby}, name  # absent on the primary
    assert by_host(metrics, "queuetop_server_replay_paused")[standby] == 0
    verdicts = {(dict(labels)["host"], dict(labels)["code"]): value for (metric, labels), value in metrics.items()
                if metric == "queuetop_queue_diagnosis" and dict(labels)["queue"] == QUEUE}
    assert verdicts[(standby, "not-judged")] == 1 and verdicts[(primary, "no-consumers")] == 1
    # Its rates are absent (the standby's statistics are its own), the primary's are served.
    assert set(by_host(metrics, "queuetop_queue_enqueued_per_second")) == {primary}


# -- no writes ----------------------------------------------------------------------------------

WRITES = [
    ["engine", "init"],
    ["engine", "enqueue", QUEUE, "--count", "3"],
    ["engine", "work", QUEUE, "--until-empty"],
    ["engine", "compact"],
    ["engine", "ring", "create", "r1", "--capacity", "4"],
    ["engine", "ring", "put", "r1"],
    ["engine", "ring", "take", "r1"],
    ["engine", "lease", "acquire", "l1", "--holder", "h", "--ttl", "30"],
    ["engine", "lease", "renew", "l1", "--holder", "h", "--ttl", "30"],
    ["engine", "lease", "release", "l1", "--holder", "h"],
    ["engine", "scenario", "exactly-once", "--messages", "10"],
    ["engine", "scenario", "relay", "--messages", "10"],
    ["engine", "scenario", "contention", "--mode", "naive", "--duration", "1"],
    ["engine", "scenario", "diagnose", "--cause", "no-consumers"],
    ["demo", "reset"],
]


def test_every_engine_command_that_writes_refuses_a_standby_with_one_line(pair, capsys):
    before = ready(pair.standby)
    line = f"queuetop: error: {pair.standby.masked} is a standby: read-only\n"
    for argv in WRITES:
        code = main([*argv, "--dsn", pair.standby_dsn])
        out, err = capsys.readouterr()
        assert (code, out, err) == (2, "", line), argv
    # `engine work` refused up front: it never started, so it never "lost the database".
    assert ready(pair.standby) == before == ready(pair.primary.target)
    # And as a command line of its own (the real entry point, another process).
    result = run_cli("engine", "enqueue", QUEUE, "--dsn", pair.standby_dsn)
    assert (result.returncode, result.stdout, result.stderr) == (2, "", line)


def test_a_read_only_refusal_on_a_standby_is_said_as_a_standby_and_elsewhere_as_it_is(pair):
    """A write that got past the check up front (the server became a standby since) fails with
    25006; on a server in recovery it reads as the standby it is (exit 2)."""
    with psycopg.connect(pair.standby_dsn, autocommit=True) as standby, pytest.raises(psycopg.errors.ReadOnlySqlTransaction) as refused:
        standby.execute("CREATE TABLE nope (id int)")
    error = translate_error(refused.value, pair.standby)
    assert isinstance(error, StandbyReadOnly) and error.exit_code == 2
    assert str(error) == f"{pair.standby.masked} is a standby: read-only"
    # A read-only transaction on the primary is not a standby.
    with pair.primary.connect() as primary, pytest.raises(psycopg.errors.ReadOnlySqlTransaction) as read_only:
        primary.execute("BEGIN READ ONLY")
        primary.execute("CREATE TABLE nope (id int)")
    error = translate_error(read_only.value, pair.primary.target)
    assert isinstance(error, OperationFailed) and not isinstance(error, StandbyReadOnly)


# -- the dashboard --------------------------------------------------------------------------------


async def test_the_dashboard_says_standby_with_the_lag_and_its_engine_keys_say_why_they_are_off(pair):
    # queuetop --engine --dsn <standby>: the engine keys are off all the same, and say why.
    host = single_host("", pair.standby, Config(), 0.3, engine=True)
    assert host.controls is None and host.controls_off == f"engine controls are off: {pair.standby.masked} is a standby: read-only"
    # Without --engine they say the same (--engine would change nothing there).
    assert single_host("", pair.standby, Config(), 0.3).controls_off == host.controls_off
    app = QueuetopApp(hosts=[host])
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, lambda: app.snapshot is not None and app.snapshot.server.role == "standby", "a sample", 1000)
        line = str(app.query_one(StatusBar).render())
        assert "STANDBY" in line and " lag " in line, line
        assert len(line.rstrip()) <= 78  # fits at 80 columns (its padding aside)
        await pilot.press(app.key_for("engine.burst"))
        await settle(pilot, app, lambda: any("is a standby: read-only" in text for _at, _s, text in app.notices),
                     "the standby notice", 500)


def test_the_header_says_standby_paused_the_lag_and_as_of_when_each_figure_whole_or_absent():
    at = datetime(2026, 3, 1, 21, 3, 5, tzinfo=UTC)
    server = replace(sample_snapshot().server, role="standby", replay_lag_s=502.0, replay_lag_bytes=3 * 2**20,
                     replay_paused=True, replayed_at=at)
    facts = StatusFacts(snapshot=replace(sample_snapshot(), server=server), last_good_at=None, host_name=None, replay=None,
                        paused=False, recording=False, read_only=False, interval_s=2.0)
    wide = fit_by_priority(status_parts(facts), 200).plain
    assert "LIVE │ STANDBY replay paused lag 8m22s 3.0 MB │ as of 21:03:05 (replay)" in wide
    at_80 = fit_by_priority(status_parts(facts), 78).plain
    assert "STANDBY replay paused lag 8m22s 3.0 MB │ as of 21:03:05 (replay)" in at_80
    for width in range(20, 78):
        text = fit_by_priority(status_parts(facts), width).plain
        assert len(text) <= width
        for figure in (" lag 8m22s", " 3.0 MB", " │ as of 21:03:05 (replay)"):
            assert figure in text or figure.strip() not in text, (width, text)  # whole or absent
    # Caught up: no "as of" (the figures are as of now), the lag 0.
    calm = replace(server, replay_lag_s=0.0, replay_lag_bytes=0, replay_paused=False)
    text = fit_by_priority(status_parts(replace(facts, snapshot=replace(sample_snapshot(), server=calm))), 200).plain
    assert "STANDBY lag 0.0s 0 B" in text and "as of" not in text and "paused" not in text
    # A primary says nothing of it.
    assert "STANDBY" not in fit_by_priority(status_parts(replace(facts, snapshot=sample_snapshot())), 200).plain


# -- the verdicts -----------------------------------------------------------------------------------


def test_on_a_standby_only_blocked_is_judged():
    standby = ServerInfo(dialect="postgresql", version="16", database="app", role="standby", replay_lag_s=0.0,
                         replay_lag_bytes=0, replay_paused=False)
    t0 = datetime(2026, 3, 1, 12, tzinfo=UTC)
    starved = queue(depth=40, ready=40, oldest_ready_age_s=600.0)

    def frame(at_s: float, q, server: ServerInfo = standby) -> Snapshot:
        return Snapshot(taken_at=t0 + timedelta(seconds=at_s), server=server, probes={}, queues=(q,))

    diagnoser = Diagnoser()
    for at_s in (0, 30, 60):
        verdict = diagnoser.diagnose(frame(at_s, starved)).queues[0].diagnosis
        assert verdict is not None and (verdict.code, verdict.reason) == ("not-judged", ON_STANDBY)
    # The same queue on a primary: no consumers.
    primary = replace(standby, role="primary", replay_lag_s=None, replay_lag_bytes=None, replay_paused=None)
    assert Diagnoser().diagnose(frame(0, starved, primary)).queues[0].diagnosis.code == "no-consumers"
    # A lock on the table that stops consumers, held on the standby: said.
    lock = Locker(pid=7, mode="AccessExclusiveLock", relation="q_jobs", state="idle in transaction", application="report",
                  xact_age_s=30.0)
    locked = Diagnoser().diagnose(frame(0, replace(starved, lockers=(lock,), table=TABLE))).queues[0].diagnosis
    assert locked.code == "blocked" and locked.pids[:1] == (7,)


def test_the_job_console_lists_on_a_standby_and_refuses_to_act_there(pair):
    """Issue 46: a standby's jobs can be listed (a read); an action on them is refused in one line
    (exit 2), nothing changed, on the standby as on the primary."""
    # (The module's other tests enqueue too, and pause and resume the replay: caught up first.)
    wait_until(lambda: ready(pair.standby) == ready(pair.primary.target), timeout=30, interval=0.1, what="the standby caught up")
    before = ready(pair.primary.target)
    listed = run_cli("jobs", "list", QUEUE, "--state", "ready", "--limit", "1000", "--json", "--dsn", pair.standby_dsn)
    assert listed.returncode == 0, listed.stderr
    ids = [job["id"] for job in json.loads(listed.stdout)["jobs"]]
    assert ids and len(ids) == ready(pair.standby) == before
    result = run_cli("jobs", "delete", QUEUE, ids[0], "--yes", "--dsn", pair.standby_dsn)
    assert (result.returncode, result.stderr) == (2, f"queuetop: error: {pair.standby.masked} is a standby: read-only\n")
    assert ready(pair.primary.target) == before
