"""`queuetop bench probes`: what a full probe cycle costs at a small and a large queue depth,
and what the locks probe costs under a pile-up.

The probes promise a cost independent of queue depth. This measures it: the same cycle (every
probe, one session, as the dashboard runs it) timed many times with a 1k-message queue and
with a queue of a million or more, while ~50 idle client sessions are open (a realistic
pg_stat_activity). Some messages are claimed (in flight) and some dead-lettered, so every
branch of the queue probe runs.

The pile-up: one session holds a row in an open transaction and `--pileup` pgbench clients
update that row, so they all wait (one for the holder's transaction id, the others queued on
the row's tuple lock); the locks probe is then timed `--cycles` times, each time beside
pg_activity's own query for its blocking view (the text from the installed pg_activity package,
formatted and run as pg_activity runs it: prepared, on a session of its own with default
settings, rows fetched). Only the fetch is timed on pg_activity's side, the whole probe on ours
(statement, rows, the tree built in Python): the ratio favours pg_activity. pg_activity misses or
invents blockers in some pile-ups; it is the cost to beat, not the answer to copy.
"""

from __future__ import annotations

import itertools
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import psycopg
from psycopg import pq, sql

from dbcore.database import Target, connect, for_child_process, one
from dbcore.errors import OperationFailed, UsageError
from dbcore.sqlfiles import Queries
from probes.locks import LockTrees
from probes.postgres import PostgresProbes, open_probe_connection
from probes.sampler import run_cycle
from queues import schema
from queues.table_queue import TableQueue

from .engine import find_pgbench

BENCH_QUEUE = "bench.probes"
PILEUP_SQL = Queries("bench", "pileup.sql")


def run_probe_bench(
    target: Target,
    *,
    small_depth: int = 1_000,
    large_depth: int = 1_000_000,
    idle_connections: int = 50,
    cycles: int = 50,
    pileup: int = 16,
    progress: Callable[[str], None] | None = None,
) -> dict[str, object]:
    if small_depth < 10 or large_depth < small_depth or cycles < 1 or idle_connections < 0:
        raise UsageError("need 10 <= --small-depth <= --large-depth, --cycles >= 1, --idle-connections >= 0")
    say = progress or (lambda _line: None)
    admin = connect(target, application_name="queuetop-bench")
    idle = []
    try:
        schema.install(admin)
        queue = TableQueue.create(admin, BENCH_QUEUE)
        for _ in range(idle_connections):
            idle.append(connect(target, application_name="queuetop-bench-idle"))
        results: dict[str, _Cycles] = {}
        for label, depth in (("small", small_depth), ("large", large_depth)):
            _prepare(admin, queue, depth)
            say(f"{label}: {depth:,} messages, {idle_connections} idle sessions")
            results[label] = _time_cycles(target, cycles)
            say(f"{label}: p50 {results[label].p50:.2f} ms")
        admin.execute(queue.statement("truncate_queue"))
    finally:
        for conn in idle:
            conn.close()
        admin.close()
    small, large = results["small"], results["large"]
    pile = _locks_pileup(target, pileup, cycles, say) if pileup else None
    return {
        "benchmark": "probes",
        "cycles": cycles,
        "idle_connections": idle_connections,
        "small_depth": small_depth,
        "large_depth": large_depth,
        "cycle_ms_p50_small": round(small.p50, 3),
        "cycle_ms_p50_large": round(large.p50, 3),
        "cycle_ms_p95_small": round(small.p95, 3),
        "cycle_ms_p95_large": round(large.p95, 3),
        "ratio": round(large.p50 / small.p50, 3) if small.p50 else None,
        "probe_ms_p50_small": small.probes,
        "probe_ms_p50_large": large.probes,
        "large_depth_reported": large.depth,
        "large_depth_is_estimate": large.estimate,
        "pileup_sessions": pileup,
        "pileup_blocked_seen": pile["blocked"] if pile else None,
        "locks_probe_ms_p50_pileup": pile["p50"] if pile else None,
        "locks_probe_ms_p95_pileup": pile["p95"] if pile else None,
        "locks_probe_round_trips": pile["round_trips"] if pile else None,
        # Past PILE_UP_WAITERS the probe lists each waiter's holders, not every session queued ahead.
        "locks_probe_holders_only": pile["holders_only"] if pile else None,
        "pg_activity_version": pile["pg_activity_version"] if pile else None,
        "pg_activity_blocking_ms_p50_pileup": pile["pg_activity_p50"] if pile else None,
        "pg_activity_blocking_rows": pile["pg_activity_rows"] if pile else None,
        # The locks probe's p50 over pg_activity's, the rounds interleaved (issue 30: at most 0.8).
        "locks_probe_vs_pg_activity": pile["ratio"] if pile else None,
        # The same, when the probe cannot reuse anything of the last cycles (a new LockTrees each
        # cycle: the tree and its wait graph worked out anew): timed in rounds of their own,
        # beside pg_activity again.
        "locks_probe_ms_p50_pileup_reshaped": pile["reshaped_p50"] if pile else None,
        "pg_activity_blocking_ms_p50_reshaped_rounds": pile["pg_activity_reshaped_rounds_p50"] if pile else None,
        "locks_probe_vs_pg_activity_reshaped": pile["reshaped_ratio"] if pile else None,
        # What each costs the monitored server: the CPU time of the backend that served it, per
        # cycle (/proc/PID/stat, so only where the server runs on this machine, as the embedded
        # one does; null elsewhere). The same rounds as the times above.
        "locks_probe_server_cpu_ms_pileup": pile["server_cpu_ms"] if pile else None,
        "pg_activity_server_cpu_ms_pileup": pile["pg_activity_server_cpu_ms"] if pile else None,
        "locks_probe_vs_pg_activity_server_cpu": pile["server_cpu_ratio"] if pile else None,
    }


def _locks_pileup(target: Target, clients: int, cycles: int, say: Callable[[str], None]) -> dict[str, object]:
    """The locks probe's cost while `clients` pgbench sessions wait on one row."""
    pgbench = find_pgbench()
    admin = connect(target, application_name="queuetop-bench")
    holder = connect(target, application_name="queuetop-bench-holder", autocommit=False)
    workdir = Path(tempfile.mkdtemp(prefix="queuetop-pileup-"))
    process = None
    try:
        most, free = one(admin.execute(PILEUP_SQL["room"]))
        if free < clients + 4:
            raise UsageError(f"--pileup {clients} needs {clients + 4} free connections; the server has {free} "
                             f"(max_connections {most}): raise it, or ask for fewer")
        admin.execute(PILEUP_SQL["create"])
        holder.execute(PILEUP_SQL["hold"])  # the transaction stays open: the row is held
        script = workdir / "update.sql"
        script.write_text(PILEUP_SQL["pgbench_update"] + "\n")
        conninfo, env = for_child_process(target)
        process = subprocess.Popen(
            # pgbench opens its clients' connections one thread at a time: a thread per 100 of them.
            [pgbench, "-n", "-f", str(script), "-c", str(clients), "-j", str(max(1, min(16, clients // 100))), "-T", "3600", conninfo],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**env, "PGAPPNAME": "queuetop-bench-pileup"},
        )
        deadline = time.monotonic() + 60 + clients * 0.1  # a 2,000-session pile-up takes a while to connect
        while one(admin.execute(PILEUP_SQL["waiting"]))[0] < clients:
            if time.monotonic() > deadline or process.poll() is not None:
                raise OperationFailed(f"the {clients} pgbench clients did not all wait on the held row"
                                      + (f" (pgbench exited {process.returncode})" if process.poll() is not None else ""))
            time.sleep(0.1)
        say(f"pile-up: {clients} pgbench clients waiting on one row")
        probes = PostgresProbes()
        reshaping = PostgresProbes()  # made to work its tree out again every cycle
        reference = pg_activity_blocking_query()
        with open_probe_connection(target) as conn, connect(target, application_name="pg_activity") as other:
            probes.server(conn)
            reshaping.server(conn)
            for _ in range(6):  # warm, and past psycopg's prepare threshold: the steady state, as the dashboard runs it
                probes.locks(conn)
                reshaping.locks(conn)
            theirs: Callable[[], int] | None = None
            if reference is not None:
                def theirs() -> int:
                    return len(other.execute(reference[0], reference[1], prepare=True).fetchall())

                for _ in range(6):  # warm, and past psycopg's prepare threshold, as pg_activity runs it
                    theirs()
            with RoundTrips(conn) as trips:
                holders_only = any(b.ahead_unread for b in probes.locks(conn).blocked)
            round_trips = trips.count
            backends = (conn.info.backend_pid, other.info.backend_pid)
            cpu_before = [backend_cpu_s(pid) for pid in backends]
            timings, their_timings, blocked, their_rows = _alternate(lambda: len(probes.locks(conn).blocked), theirs, cycles)
            cpu = [None if before is None or (after := backend_cpu_s(pid)) is None else (after - before) * 1000 / cycles
                   for pid, before in zip(backends, cpu_before, strict=True)]

            def reshaped_probe() -> int:
                reshaping.lock_trees = LockTrees()
                return len(reshaping.locks(conn).blocked)

            # A picture that changes every cycle, in rounds of its own beside pg_activity again: the
            # two series interleaved in one round would each warm the caches of the other's.
            reshaped, their_reshaped, _, _ = _alternate(reshaped_probe, theirs, cycles)
        ours_p50, reshaped_p50 = statistics.median(timings), statistics.median(reshaped)
        their_p50 = statistics.median(their_timings) if their_timings else None
        their_reshaped_p50 = statistics.median(their_reshaped) if their_reshaped else None
        say(f"pile-up: locks probe p50 {ours_p50:.2f} ms, {blocked} blocked seen"
            + (f"; pg_activity's blocking query p50 {their_p50:.2f} ms" if their_p50 is not None else
               "; pg_activity not installed (pip install pg_activity): no comparison"))
        return {
            "p50": round(ours_p50, 3),
            "p95": round(statistics.quantiles(timings, n=20)[-1], 3) if len(timings) >= 2 else round(timings[0], 3),
            "blocked": blocked,
            "round_trips": round_trips,
            "holders_only": holders_only,
            "pg_activity_version": reference[2] if reference is not None else None,
            "pg_activity_p50": round(their_p50, 3) if their_p50 is not None else None,
            "pg_activity_rows": their_rows if reference is not None else None,
            "ratio": round(ours_p50 / their_p50, 3) if their_p50 else None,
            "reshaped_p50": round(reshaped_p50, 3),
            "reshaped_ratio": round(reshaped_p50 / their_reshaped_p50, 3) if their_reshaped_p50 else None,
            "pg_activity_reshaped_rounds_p50": round(their_reshaped_p50, 3) if their_reshaped_p50 is not None else None,
            "server_cpu_ms": None if cpu[0] is None else round(cpu[0], 3),
            "pg_activity_server_cpu_ms": None if cpu[1] is None or reference is None else round(cpu[1], 3),
            "server_cpu_ratio": round(cpu[0] / cpu[1], 3) if reference is not None and cpu[0] is not None and cpu[1] else None,
        }
    finally:
        holder.rollback()
        holder.close()
        if process is not None:
            process.kill()
            process.wait(10)
        admin.execute(PILEUP_SQL["drop"])
        admin.close()
        shutil.rmtree(workdir, ignore_errors=True)


def _alternate(ours: Callable[[], int], theirs: Callable[[], int] | None, cycles: int) -> tuple[list[float], list[float], int, int]:
    """`cycles` rounds of `ours()` then `theirs()`, each timed in ms: (our times, their times, what
    the last of each returned)."""
    mine: list[float] = []
    other: list[float] = []
    ours_said = theirs_said = 0
    for _ in range(cycles):
        started = time.perf_counter()
        ours_said = ours()
        mine.append((time.perf_counter() - started) * 1000)
        if theirs is not None:
            started = time.perf_counter()
            theirs_said = theirs()
            other.append((time.perf_counter() - started) * 1000)
    return mine, other, ours_said, theirs_said


def backend_cpu_s(pid: int) -> float | None:
    """CPU seconds (user and system) a server process has used, from /proc/PID/stat; None when
    it cannot be read (a server on another machine, or another user's process hidden)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime: fields 14 and 15


def pg_activity_blocking_query() -> tuple[sql.Composed, dict[str, object], str] | None:
    """pg_activity's query for its blocking view, as pg_activity formats it for PostgreSQL 9.6 and
    later with its defaults (durations from query_start, no minimum, no database filter), with its
    parameters and the package's version; None when pg_activity is not installed."""
    try:
        from importlib.metadata import version

        from pgactivity import queries
    except ImportError:
        return None
    text = sql.SQL(queries.get("get_blocking_post_090600")).format(
        dbname_filter=sql.NULL, duration_column=sql.Identifier("query_start"), min_duration=sql.Literal(0.0))
    return text, {"min_duration": 0.0, "dbname_filter": None}, version("pg_activity")


class RoundTrips:
    """Counts the round trips a connection makes, from libpq's own trace of the protocol
    (PQtrace): each time the client, having sent, turns to what the server sends back (a run of
    frontend messages followed by backend ones; a pipeline's statements are one run). `with
    RoundTrips(conn) as trips:`, then `trips.count`."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn
        self._file: IO[bytes] | None = None
        self.count = 0

    def __enter__(self) -> RoundTrips:
        self._file = tempfile.TemporaryFile()
        self._conn.pgconn.trace(self._file.fileno())
        self._conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._file is not None
        self._conn.pgconn.untrace()  # flushes the trace
        self._file.seek(0)
        sender = [line[:1] for line in self._file if line[:2] in (b"F\t", b"B\t")]
        self.count = sum(1 for before, after in itertools.pairwise(sender) if (before, after) == (b"F", b"B"))
        self._file.close()


def _prepare(conn: psycopg.Connection, queue: TableQueue, depth: int) -> None:
    conn.execute(queue.statement("truncate_queue"))
    queue.purge_dead_letters(conn)
    conn.execute(queue.statement("fill_queue"), {"count": depth})
    conn.execute(queue.statement("vacuum_queue"))
    claimed = queue.claim(conn, visibility_s=3600, batch=8)  # in flight while we measure
    queue.dead_letter_claimed(conn, claimed[0], "bench")


@dataclass(frozen=True, slots=True)
class _Cycles:
    p50: float
    p95: float
    probes: dict[str, float]  # each probe's p50
    depth: int | None  # the bench queue's depth as the probe reported it
    estimate: bool


def _time_cycles(target: Target, cycles: int) -> _Cycles:
    probes = PostgresProbes()
    totals: list[float] = []
    per_probe: dict[str, list[float]] = {}
    snapshot = None
    with open_probe_connection(target) as conn:
        run_cycle(target, probes=probes, conn=conn)  # warm: SQL parsed, catalog cached
        for _ in range(cycles):
            started = time.perf_counter()
            snapshot = run_cycle(target, probes=probes, conn=conn)
            totals.append((time.perf_counter() - started) * 1000)
            for name, status in snapshot.probes.items():
                if status.error:
                    raise RuntimeError(f"probe {name} failed: {status.error}")
                per_probe.setdefault(name, []).append(status.elapsed_ms)
    assert snapshot is not None  # cycles >= 1
    [queue] = [q for q in snapshot.queues if q.name == BENCH_QUEUE]
    return _Cycles(
        p50=statistics.median(totals),
        p95=statistics.quantiles(totals, n=20)[-1] if len(totals) >= 2 else totals[0],
        probes={name: round(statistics.median(v), 3) for name, v in per_probe.items()},
        depth=queue.depth,
        estimate=queue.depth_is_estimate,
    )
