"""The server's figures (issue 47, point 1): transactions, rows, temp and WAL bytes per second,
the cache hit ratio, the size and the deadlocks, each new deadlock a notice; the header line at 80
and 100 columns; `server_stats` in the JSON, with --rates; the metrics.

The figures are checked against pg_stat_database itself, read by another session around each of
the probe's two reads (outside: before the first, after the second; inside: after the first,
before the second): counters only grow, so the probe's difference lies between the inner and the
outer ones, and the inner one holds the workload made between the reads. A real deadlock is made
by two sessions locking two rows in opposite orders; the server breaks it.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime

import psycopg
import pytest
from rich.cells import cell_len

from probes.model import ProbeStatus, ServerStats, Snapshot
from probes.mssql import MssqlProbes
from probes.postgres import PostgresProbes, open_probe_connection
from probes.prometheus import METRICS, families
from probes.sampler import Sampler, run_cycle, run_probe
from probes.serverstats import deadlock_notices
from tui.dashboard import QueuetopApp
from tui.dashboard.bars import NoticeBar, ServerBar
from tui.sample import sample_snapshot
from tui.serverline import server_line, server_parts

from .conftest import Database, flush_stats, wait_until

# pg_stat_database's counters the figures come from, summed over every database.
SUMMED = ("xact_commit", "xact_rollback", "tup_inserted", "tup_updated", "tup_deleted", "temp_bytes", "blks_hit", "blks_read",
          "deadlocks")
RATE_OF = {"xact_commit": "xact_commit_per_s", "xact_rollback": "xact_rollback_per_s", "tup_inserted": "tup_inserted_per_s",
           "tup_updated": "tup_updated_per_s", "tup_deleted": "tup_deleted_per_s", "temp_bytes": "temp_bytes_per_s"}


def summed(conn: psycopg.Connection) -> dict[str, int]:
    """pg_stat_database summed over every database, and the WAL position (bytes), as the test's
    session sees them now (a fresh statistics snapshot: autocommit, one statement)."""
    row = conn.execute(
        "SELECT " + ", ".join(f"sum({c})::bigint AS {c}" for c in SUMMED) +
        ", pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint AS wal FROM pg_stat_database").fetchone()
    assert row is not None
    return dict(zip((*SUMMED, "wal"), (int(v) for v in row), strict=True))


def probe_read(probes: PostgresProbes, conn) -> tuple[ProbeStatus, ServerStats]:
    status, stats = run_probe(probes, "server_stats", conn)
    assert status.error is None, status.error
    assert isinstance(stats, ServerStats)
    return status, stats


def workload(conn: psycopg.Connection, *, inserted: int, updated: int, deleted: int, rollbacks: int) -> None:
    conn.execute("CREATE TABLE IF NOT EXISTS public.figures (id int PRIMARY KEY, v int)")
    with conn.transaction():
        conn.execute("INSERT INTO public.figures SELECT g, 0 FROM generate_series(1, %s) AS g", (inserted,))
    with conn.transaction():
        conn.execute("UPDATE public.figures SET v = 1 WHERE id <= %s", (updated,))
    with conn.transaction():
        conn.execute("DELETE FROM public.figures WHERE id > %s", (inserted - deleted,))
    for n in range(rollbacks):
        conn.execute("BEGIN")
        conn.execute("INSERT INTO public.figures VALUES (%s, 0)", (-1 - n,))
        conn.execute("ROLLBACK")
    # A sort that spills to a temporary file: 64 kB of work_mem for ~4 MB of rows.
    conn.execute("SET work_mem = '64kB'")
    conn.execute("SELECT count(*) FROM (SELECT g FROM generate_series(1, 200000) AS g ORDER BY g DESC OFFSET 0) AS s")
    conn.execute("RESET work_mem")


@pytest.mark.matrix
def test_the_figures_lie_between_pg_stat_database_read_before_and_after(db: Database):
    probes = PostgresProbes()
    inserted, updated, deleted, rollbacks = 500, 200, 100, 5
    with db.connect() as reader, db.connect() as worker, open_probe_connection(db.target) as conn:
        before = summed(reader)
        _status, first = probe_read(probes, conn)
        after_first = summed(reader)
        workload(worker, inserted=inserted, updated=updated, deleted=deleted, rollbacks=rollbacks)

        def shown() -> dict[str, int] | None:  # the workload's counters flushed to the statistics (PG 15+: on demand)
            flush_stats(worker)
            now = summed(reader)
            grown = {c: now[c] - after_first[c] for c in SUMMED}
            return now if (grown["tup_inserted"] >= inserted and grown["tup_updated"] >= updated
                           and grown["tup_deleted"] >= deleted and grown["xact_rollback"] >= rollbacks
                           and grown["temp_bytes"] > 0) else None

        before_second = wait_until(shown, timeout=15, what="the workload in pg_stat_database")
        assert isinstance(before_second, dict)
        _status, second = probe_read(probes, conn)
        after = summed(reader)

    # The first read: no rates yet, the deadlocks counted.
    assert first.interval_s is None and first.xact_commit_per_s is None and first.wal_bytes_per_s is None
    assert first.cache_hit_ratio is None and first.deadlocks_new == {}
    assert first.deadlocks_total is not None and before["deadlocks"] <= first.deadlocks_total <= after_first["deadlocks"]
    assert first.database_size_bytes is not None and first.database_size_bytes > 1_000_000
    # The second: each rate times the interval (the server's clock) between the inner and outer differences.
    assert second.interval_s is not None and second.interval_s > 0
    for counter, rate in RATE_OF.items():
        value = getattr(second, rate)
        assert value is not None, rate
        grown = round(value * second.interval_s)
        inner, outer = before_second[counter] - after_first[counter], after[counter] - before[counter]
        assert inner <= grown <= outer, (counter, inner, grown, outer)
    assert before_second["tup_inserted"] - after_first["tup_inserted"] >= inserted
    assert second.xact_rollback_per_s is not None and second.xact_rollback_per_s * second.interval_s >= rollbacks - 0.5
    assert second.temp_bytes_per_s is not None and second.temp_bytes_per_s > 0
    assert second.wal_bytes_per_s is not None
    wal = round(second.wal_bytes_per_s * second.interval_s)
    assert before_second["wal"] - after_first["wal"] <= wal <= after["wal"] - before["wal"]
    # The hit ratio of the interval: between what the inner and outer differences allow.
    hit_in, hit_out = before_second["blks_hit"] - after_first["blks_hit"], after["blks_hit"] - before["blks_hit"]
    read_in, read_out = before_second["blks_read"] - after_first["blks_read"], after["blks_read"] - before["blks_read"]
    assert second.cache_hit_ratio is not None
    assert hit_in / (hit_in + read_out) - 1e-9 <= second.cache_hit_ratio <= hit_out / (hit_out + read_in) + 1e-9
    assert second.deadlocks_total is not None and before["deadlocks"] <= second.deadlocks_total <= after["deadlocks"]
    # The counters behind them (Prometheus's) are pg_stat_database's sums.
    assert second.tup_inserted_total is not None
    assert before_second["tup_inserted"] <= second.tup_inserted_total <= after["tup_inserted"]


@pytest.mark.matrix
def test_a_statistics_reset_makes_the_interval_unknown_not_negative(db: Database):
    probes = PostgresProbes()
    with db.connect() as worker, open_probe_connection(db.target) as conn:
        workload(worker, inserted=300, updated=10, deleted=10, rollbacks=1)

        def counted() -> bool:  # this database's counters known (PostgreSQL 12-14: its entry made by the collector)
            flush_stats(worker)
            row = worker.execute("SELECT tup_inserted FROM pg_stat_database WHERE datname = current_database()").fetchone()
            return row is not None and row[0] >= 300

        wait_until(counted, what="the workload counted")
        _status, first = probe_read(probes, conn)
        reset_at = worker.execute("SELECT stats_reset FROM pg_stat_database WHERE datname = current_database()").fetchone()
        worker.execute("SELECT pg_stat_reset()")  # this database's counters to 0 (PG < 15: through the collector)
        wait_until(lambda: worker.execute("SELECT pg_stat_clear_snapshot()") and worker.execute(
            "SELECT stats_reset FROM pg_stat_database WHERE datname = current_database()").fetchone() != reset_at,
            what="the reset seen")
        _status, second = probe_read(probes, conn)
        _status, third = probe_read(probes, conn)
    assert first.tup_inserted_total is not None and first.tup_inserted_total >= 300
    for rate in (*RATE_OF.values(), "cache_hit_ratio"):
        assert getattr(second, rate) is None, rate  # across the reset: unknown
        if rate != "cache_hit_ratio":
            assert getattr(third, rate) is not None and getattr(third, rate) >= 0, rate  # and known again after
    assert second.wal_bytes_per_s is not None  # the WAL position is no statistic: it was not reset
    assert second.deadlocks_new == {}


@pytest.mark.matrix
def test_a_real_deadlock_counts_once_and_its_notice_names_the_database(db: Database):
    probes = PostgresProbes()
    with db.connect() as setup:
        setup.execute("CREATE TABLE public.pair (id int PRIMARY KEY, v int)")
        setup.execute("INSERT INTO public.pair VALUES (1, 0), (2, 0)")
    with open_probe_connection(db.target) as conn, db.connect() as reader:
        _status, first = probe_read(probes, conn)
        errors = deadlock(db)
        assert len(errors) == 1 and isinstance(errors[0], psycopg.errors.DeadlockDetected), errors
        total = first.deadlocks_total
        assert total is not None

        def counted() -> bool:
            flush_stats(reader)
            return summed(reader)["deadlocks"] > total

        wait_until(counted, what="the deadlock counted")
        _status, second = probe_read(probes, conn)
    assert second.deadlocks_total == total + 1
    assert second.deadlocks_new == {db.name: 1}
    assert second.deadlocks_by_database[db.name] == 1
    said = deadlock_notices(second)
    assert len(said) == 1 and f"a deadlock in database {db.name} between " in said[0] and "the server broke it" in said[0]
    since, until = [datetime.strptime(t, "%H:%M:%S").time() for t in said[0].split(" between ")[1].split(" UTC")[0].split(" and ")]
    assert since == first.read_at.astimezone(UTC).time().replace(microsecond=0)
    assert until == second.read_at.astimezone(UTC).time().replace(microsecond=0)
    assert deadlock_notices(second, "db2")[0].startswith("db2: a deadlock in database ")
    assert deadlock_notices(first) == []


def deadlock(db: Database) -> list[BaseException]:
    """Two sessions update rows 1 and 2 in opposite orders; the server breaks the cycle (after a
    deadlock_timeout of 50 ms, set for these sessions: the embedded server's role may). Returns
    what each session was told (one DeadlockDetected)."""
    errors: list[BaseException] = []
    both_hold_one = threading.Barrier(2, timeout=10)

    def session(first: int, second: int) -> None:
        with db.connect(autocommit=False) as conn:
            conn.execute("SET deadlock_timeout = '50ms'")
            try:
                conn.execute("UPDATE public.pair SET v = v + 1 WHERE id = %s", (first,))
                both_hold_one.wait()
                conn.execute("UPDATE public.pair SET v = v + 1 WHERE id = %s", (second,))
                conn.commit()
            except psycopg.Error as exc:
                errors.append(exc)
                conn.rollback()

    threads = [threading.Thread(target=session, args=order) for order in ((1, 2), (2, 1))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return errors


@pytest.mark.matrix
async def test_the_dashboard_shows_a_deadlock_notice_and_the_header_line(db: Database):
    with db.connect() as setup:
        setup.execute("CREATE TABLE public.pair (id int PRIMARY KEY, v int)")
        setup.execute("INSERT INTO public.pair VALUES (1, 0), (2, 0)")
    app = QueuetopApp(lambda sink: Sampler(db.target, sink, interval_s=0.3))
    async with app.run_test(size=(80, 24)) as pilot:
        async def until(predicate, what: str) -> None:
            deadline = time.monotonic() + 20
            while not predicate():
                assert time.monotonic() < deadline, f"timed out waiting for {what}"
                await pilot.pause(0.05)

        def header() -> str:
            return str(app.query_one(ServerBar).render())

        # The rates are known from the second read on: the header line shows them.
        await until(lambda: header().startswith("tps ") and not header().startswith("tps -"), "the header line's rates")
        line = header()
        assert "deadlocks " in line and " hit " in line and cell_len(line) <= 78 and "…" not in line, line
        errors = await asyncio.to_thread(deadlock, db)  # (the app's loop goes on meanwhile)
        assert len(errors) == 1
        await until(lambda: any(f"deadlock in database {db.name}" in text for _at, _severity, text in app.notices), "the notice")
        notice = app.query_one(NoticeBar)
        assert notice.display and f"deadlock in database {db.name}" in str(notice.render())
        assert [severity for _at, severity, text in app.notices if "deadlock in database" in text] == ["warning"]


# -- the header line ---------------------------------------------------------------------------


FULL = ServerStats(read_at=datetime(2026, 11, 21, 12, 0, 2, tzinfo=UTC), interval_s=2.0, xact_commit_per_s=1201.5,
                   xact_rollback_per_s=3.0, tup_inserted_per_s=812.0, tup_updated_per_s=40.0, tup_deleted_per_s=790.0,
                   temp_bytes_per_s=0.0, wal_bytes_per_s=1.25 * 1024**2, cache_hit_ratio=0.99876,
                   database_size_bytes=3_300_000_000, deadlocks_total=2, deadlocks_by_database={"app": 2})


def _with(stats: ServerStats | None, status: ProbeStatus | None = None) -> Snapshot:
    base = sample_snapshot()
    probes = {**base.probes, "server_stats": status or ProbeStatus(elapsed_ms=1.0)}
    return replace(base, server_stats=stats, probes=probes)


@pytest.mark.parametrize("width", [78, 98, 200])  # 80 and 100 columns less the bar's padding
def test_the_header_line_fits_by_dropping_whole_figures(width: int):
    parts = server_parts(_with(FULL))
    line = server_line(_with(FULL), width).plain
    assert cell_len(line) <= width and "…" not in line
    # What is shown is some of the parts, each whole, in their order.
    rest = line
    kept = []
    for text, _style, _priority in parts:
        if rest.startswith(text):
            kept.append(text)
            rest = rest[len(text):]
    assert rest == "", (line, kept)
    assert kept[0] == "tps 1,204" and " deadlocks 2" in kept  # the most important stay
    if width == 200:
        assert line == "tps 1,204 (rb 3.0) ins 812/s upd 40.0/s del 790/s temp 0 B/s WAL 1.2 MB/s hit 99.8% size 3.07 GB deadlocks 2"
    else:
        assert " hit 99.8%" in kept and " WAL 1.2 MB/s" in kept and " ins 812/s upd 40.0/s del 790/s" in kept
        assert len(kept) < len(parts)  # something had to go


def test_unknown_figures_are_shown_unknown_never_0():
    first = replace(FULL, interval_s=None, xact_commit_per_s=None, xact_rollback_per_s=None, tup_inserted_per_s=None,
                    tup_updated_per_s=None, tup_deleted_per_s=None, temp_bytes_per_s=None, wal_bytes_per_s=None,
                    cache_hit_ratio=None, database_size_bytes=None, deadlocks_total=None)
    line = server_line(_with(first), 200).plain
    assert line == "tps - (rb -) ins -/s upd -/s del -/s temp - WAL - hit - size - deadlocks -"
    failed = server_line(_with(None, ProbeStatus(elapsed_ms=0.0, error="statement timeout", unread=("all",))), 78).plain
    assert failed == "server figures unknown: statement timeout"
    mssql = server_line(_with(None, ProbeStatus(elapsed_ms=0.0, notes="not read on SQL Server (...)")), 78).plain
    assert mssql.startswith("server figures not read: not read on SQL Server")
    old = replace(sample_snapshot(), server_stats=None, probes={k: v for k, v in sample_snapshot().probes.items() if k != "server_stats"})
    assert "server_stats" not in old.probes and server_line(old, 78).plain == "server figures: not in this snapshot"
    assert server_line(None, 78).plain == "server: waiting for the first sample…"
    assert server_line(_with(replace(FULL, cache_hit_ratio=0.99996)), 200).plain.count("hit 99.9%") == 1  # never a rounded-up 100 %


# -- JSON, metrics, SQL Server ----------------------------------------------------------------


def test_the_json_round_trips_and_old_recordings_load():
    """As a recording stores it (JSON text): exactly the same snapshot back, floats unrounded; a
    line recorded before the server's figures loads with none; a failed probe's are null."""

    def round_trip(snapshot: Snapshot) -> Snapshot:
        return Snapshot.from_json(json.loads(json.dumps(snapshot.to_json())))

    snapshot = _with(replace(FULL, deadlocks_new={"app": 1}, xact_commit_total=10, wal_bytes_total=123_456_789))
    document = json.loads(json.dumps(snapshot.to_json()))
    server_stats = document["server_stats"]
    assert isinstance(server_stats, dict)
    assert {"xact_commit_per_s", "xact_rollback_per_s", "tup_inserted_per_s", "tup_updated_per_s", "tup_deleted_per_s",
            "temp_bytes_per_s", "wal_bytes_per_s", "cache_hit_ratio", "database_size_bytes", "deadlocks_total"} <= set(server_stats)
    assert round_trip(snapshot) == snapshot and round_trip(snapshot).server_stats == snapshot.server_stats
    del document["server_stats"]
    assert Snapshot.from_json(document).server_stats is None
    failed = _with(None, ProbeStatus(elapsed_ms=0.0, error="statement timeout", unread=("all",)))
    assert failed.to_json()["server_stats"] is None and round_trip(failed) == failed
    not_read = _with(None, ProbeStatus(elapsed_ms=0.0, notes="not read on SQL Server"))
    assert not_read.to_json()["server_stats"] is None and round_trip(not_read) == not_read


def _metrics(snapshot: Snapshot) -> dict[str, float]:
    return {sample.name: sample.value for family in families([snapshot]) for sample in family.samples
            if sample.name.startswith("queuetop_server_") and not sample.name.startswith(("queuetop_server_info",
                                                                                        "queuetop_server_in_recovery",
                                                                                        "queuetop_server_replay",
                                                                                        "queuetop_server_last_replay"))}


def test_the_metrics_are_the_counters_and_absent_when_unknown():
    full = _with(replace(FULL, xact_commit_total=10, xact_rollback_total=1, tup_inserted_total=5, tup_updated_total=4,
                         tup_deleted_total=3, temp_bytes_total=0, wal_bytes_total=1000, blks_hit_total=90, blks_read_total=10))
    metrics = _metrics(full)
    assert metrics == {
        "queuetop_server_transactions_committed_total": 10, "queuetop_server_transactions_rolled_back_total": 1,
        "queuetop_server_rows_inserted_total": 5, "queuetop_server_rows_updated_total": 4, "queuetop_server_rows_deleted_total": 3,
        "queuetop_server_temp_bytes_total": 0, "queuetop_server_wal_bytes_total": 1000, "queuetop_server_blocks_hit_total": 90,
        "queuetop_server_blocks_read_total": 10, "queuetop_server_deadlocks_total": 2,
        "queuetop_server_cache_hit_ratio": 0.99876, "queuetop_server_database_size_bytes": 3_300_000_000,
    }
    assert {name for name in METRICS if name.startswith("queuetop_server_") and METRICS[name].probe == "server_stats"} == \
        {name.removesuffix("_total") for name in metrics}
    # The first read (no rates: the counters are known) and a standby (no rows written there).
    assert "queuetop_server_cache_hit_ratio" not in _metrics(_with(replace(FULL, cache_hit_ratio=None)))
    assert "queuetop_server_rows_inserted_total" not in _metrics(_with(FULL))
    # The probe failed, or never ran: no sample at all, never a 0.
    assert _metrics(_with(None, ProbeStatus(elapsed_ms=0.0, error="statement timeout", unread=("all",)))) == {}
    assert _metrics(replace(sample_snapshot(), server_stats=None)) == {}
    assert _metrics(sample_snapshot()) != {}  # (the sample's figures are served)


def test_sql_server_reads_no_server_figures_and_says_so():
    probes = MssqlProbes()
    assert probes.server_stats(None) is None  # type: ignore[arg-type]  # (no statement: nothing touches the connection)
    assert "not read on SQL Server" in probes.notes["server_stats"]


# -- the probe's cost and the CLI --------------------------------------------------------------


@pytest.mark.matrix
def test_the_probe_reads_a_row_per_database_and_stays_cheap(db: Database):
    probes = PostgresProbes()
    with open_probe_connection(db.target) as conn, db.connect() as reader:
        databases = reader.execute("SELECT count(*) FROM pg_stat_database").fetchone()
        first, _ = probe_read(probes, conn)  # with the databases' size
        timings = [probe_read(probes, conn)[0].elapsed_ms for _ in range(5)]  # without it (read every 30 s)
    assert databases is not None and databases[0] < 50
    assert first.elapsed_ms < 250, first.elapsed_ms
    assert sorted(timings)[2] < 20, timings  # the median: one statement over a row per database


@pytest.mark.matrix
def test_snapshot_json_has_server_stats_and_rates_with_rates(db: Database, cli):
    once = cli("snapshot", "--json", "--dsn", db.dsn, timeout=60)
    assert once.returncode == 0, once.stderr
    stats = once.json_lines()[0]["server_stats"]
    assert stats["xact_commit_per_s"] is None and stats["wal_bytes_per_s"] is None and isinstance(stats["deadlocks_total"], int)
    assert once.json_lines()[0]["probes"]["server_stats"]["error"] is None
    twice = cli("snapshot", "--json", "--rates", "0.5", "--dsn", db.dsn, timeout=60)
    assert twice.returncode == 0, twice.stderr
    stats = twice.json_lines()[0]["server_stats"]
    assert stats["interval_s"] is not None and 0.3 < stats["interval_s"] < 5
    assert all(isinstance(stats[key], float) for key in ("xact_commit_per_s", "tup_inserted_per_s", "wal_bytes_per_s"))
    text = cli("snapshot", "--dsn", db.dsn, timeout=60)  # the readable report: the header line, unfitted
    assert text.returncode == 0, text.stderr
    line = next(line for line in text.stdout.splitlines() if line.startswith("server: "))
    assert line.startswith("server: tps - (rb -) ins -/s upd -/s del -/s temp - WAL - hit - size ") and "deadlocks " in line, line


@pytest.mark.matrix
def test_a_server_stats_probe_that_may_not_read_pg_stat_database_serves_no_server_figure(db: Database):
    """pg_stat_database revoked from the probe's role: the probe fails, its figures are null in the
    JSON, absent from /metrics and unknown on the header line, with the reason; the others report."""
    from .test_metrics_unknown import HOST, assert_unknown_but_the_rest_served, limited_role

    target = limited_role(db, "REVOKE SELECT ON pg_catalog.pg_stat_database FROM PUBLIC")
    snapshot = run_cycle(target, host=HOST)
    error = snapshot.probes["server_stats"].error or ""
    assert "pg_stat_database" in error, snapshot.probes["server_stats"]
    assert snapshot.server_stats is None and snapshot.to_json()["server_stats"] is None
    assert_unknown_but_the_rest_served(snapshot, "server_stats", still_served=("locks", "connections"))
    assert server_line(snapshot, 200).plain.startswith("server figures unknown: ")


def test_on_a_real_standby_wal_is_what_it_replayed_and_rows_written_are_unknown(db: Database, pg_server, tmp_path):
    """A hot standby (in recovery): pg_current_wal_lsn() fails there, so the WAL rate is its replay's
    (pg_last_wal_replay_lsn()), and the rows inserted, updated, deleted are null (its statistics
    count none of the primary's writes it replays: 0/s would read as calm). The header says so."""
    from .test_standby_feedback import _can_connect, real_standby

    with db.connect() as primary, real_standby(pg_server, tmp_path, "qt-standby-47") as socket_dir:
        standby_dsn = f"postgresql://postgres@/{db.name}?host={socket_dir}"
        wait_until(lambda: _can_connect(standby_dsn), timeout=60, what="the test database on the standby")
        standby = replace(db, dsn=standby_dsn)
        probes = PostgresProbes()
        with open_probe_connection(standby.target) as conn:
            _status, first = probe_read(probes, conn)
            workload(primary, inserted=2000, updated=100, deleted=100, rollbacks=0)
            written = primary.execute("SELECT pg_current_wal_lsn()").fetchone()
            assert written is not None

            def replayed() -> bool:
                with psycopg.connect(standby_dsn, autocommit=True) as reader:
                    row = reader.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (str(written[0]),)).fetchone()
                    return bool(row and row[0])

            wait_until(replayed, timeout=30, what="the workload replayed")
            _status, second = probe_read(probes, conn)
    assert first.wal_position == second.wal_position == "replay"
    assert second.wal_bytes_per_s is not None and second.interval_s is not None
    assert second.wal_bytes_per_s * second.interval_s > 100_000  # 2,000 rows and more replayed
    assert second.tup_inserted_per_s is None and second.tup_updated_per_s is None and second.tup_deleted_per_s is None
    assert second.tup_inserted_total is None
    assert second.xact_commit_per_s is not None  # the standby's own (read-only) transactions: its own work, known
    snapshot = replace(sample_snapshot(), server_stats=second)
    line = server_line(snapshot, 200).plain
    assert " ins -/s upd -/s del -/s " in line and " WAL " in line and " replayed" in line, line


def test_each_databases_counters_are_followed_on_their_own():
    """The rules of stats_between, on reads made up of pg_stat_database's rows: a database created
    since counts from 0, one dropped no longer counts, a counter that went down (or a stats_reset
    that moved) makes the interval's rate unknown, and a database the statistics had no entry for
    (PostgreSQL 12-14: counters 0, never reset) gets one without that reading as a reset."""
    from probes.serverstats import COUNTERS, _Database, _Read, stats_between

    at = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
    reset = datetime(2026, 11, 1, tzinfo=UTC)

    def read(seconds: float, **databases: tuple[int, datetime | None]) -> _Read:
        return _Read(at=at.fromtimestamp(at.timestamp() + seconds, UTC), standby=False, wal_bytes=1000 + int(seconds) * 10,
                     databases={"abc".index(name) + 1: _Database(name, dict.fromkeys(COUNTERS, n), stats) for name, (n, stats) in
                                databases.items()})

    grown = stats_between(read(0, a=(100, reset), b=(50, None)), read(2, a=(110, reset), c=(4, None)), None, None)
    assert grown.xact_commit_per_s == (10 + 4) / 2 and grown.wal_bytes_per_s == 10  # b dropped, c new
    assert grown.deadlocks_new == {"a": 10, "c": 4} and grown.deadlocks_total == 114
    went_down = stats_between(read(0, a=(100, reset)), read(2, a=(90, reset)), None, None)
    assert went_down.xact_commit_per_s is None and went_down.deadlocks_new == {} and went_down.wal_bytes_per_s == 10
    moved = stats_between(read(0, a=(100, None)), read(2, a=(150, reset)), None, None)
    assert moved.xact_commit_per_s is None and moved.cache_hit_ratio is None
    entry_made = stats_between(read(0, a=(0, None)), read(2, a=(6, reset)), None, None)
    assert entry_made.xact_commit_per_s == 3 and entry_made.cache_hit_ratio == 0.5
    assert stats_between(None, read(2, a=(6, reset)), None, None).xact_commit_per_s is None


@pytest.mark.matrix
def test_a_plain_role_reads_the_figures_and_the_size_only_where_it_may_read_every_database(db: Database, pg_server):
    """No privilege but LOGIN and CONNECT: pg_stat_database is readable by all, so every figure is
    read; pg_database_size needs CONNECT (or pg_read_all_stats) on each database, so one that
    revokes it from PUBLIC makes the size unknown, with a note naming the privilege, never the sum
    of the others (a superuser reads it)."""
    from psycopg import sql

    from .conftest import PASSWORD_ROLE, drop_database
    from .test_metrics_unknown import limited_role

    target = limited_role(db)

    def closed_to_role() -> int:
        with db.connect() as admin:
            row = admin.execute("SELECT count(*) FROM pg_database WHERE NOT has_database_privilege(%s, oid, 'CONNECT')",
                                (PASSWORD_ROLE,)).fetchone()
        assert row is not None
        return int(row[0])

    with open_probe_connection(target) as conn:
        status, stats = probe_read(PostgresProbes(), conn)
    assert stats.deadlocks_total is not None and stats.xact_commit_total is not None and stats.wal_bytes_total is not None
    assert (stats.database_size_bytes is None) == (closed_to_role() > 0)  # (none closed, unless another test left one)
    closed = f"{db.name}_closed"
    with psycopg.connect(pg_server.admin_uri, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(closed)))
        try:
            admin.execute(sql.SQL("REVOKE CONNECT ON DATABASE {} FROM PUBLIC").format(sql.Identifier(closed)))
            probes = PostgresProbes()
            with open_probe_connection(target) as conn:
                status, stats = probe_read(probes, conn)
                again, _ = probe_read(probes, conn)  # (the size not read again yet: still unknown, and said)
            assert stats.database_size_bytes is None and stats.database_size_read_at is None
            assert status.notes is not None and "database size unknown" in status.notes and "pg_read_all_stats" in status.notes
            assert again.notes == status.notes
            assert stats.deadlocks_total is not None  # the other figures stand
            with open_probe_connection(db.target) as conn:  # a superuser may read every database
                status, stats = probe_read(PostgresProbes(), conn)
            assert stats.database_size_bytes is not None and status.notes is None
        finally:
            drop_database(admin, closed)
