"""`queuetop bench probes`: what a full probe cycle costs at a small and a large queue depth,
and what the locks probe costs under a pile-up.

The probes promise a cost independent of queue depth. This measures it: the same cycle (every
probe, one session, as the dashboard runs it) timed many times with a 1k-message queue and
with a queue of a million or more, while ~50 idle client sessions are open (a realistic
pg_stat_activity). Some messages are claimed (in flight) and some dead-lettered, so every
branch of the queue probe runs.

The pile-up: one session holds a row in an open transaction and `--pileup` pgbench clients
update that row, so they all wait (one for the holder's transaction id, the others queued on
the row's tuple lock); the locks probe is then timed `--cycles` times.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg

from dbcore.database import Target, connect, for_child_process, one
from dbcore.errors import UsageError
from dbcore.sqlfiles import Queries
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
    }


def _locks_pileup(target: Target, clients: int, cycles: int, say: Callable[[str], None]) -> dict[str, object]:
    """The locks probe's cost while `clients` pgbench sessions wait on one row."""
    pgbench = find_pgbench()
    admin = connect(target, application_name="queuetop-bench")
    holder = connect(target, application_name="queuetop-bench-holder", autocommit=False)
    workdir = Path(tempfile.mkdtemp(prefix="queuetop-pileup-"))
    process = None
    try:
        admin.execute(PILEUP_SQL["create"])
        holder.execute(PILEUP_SQL["hold"])  # the transaction stays open: the row is held
        script = workdir / "update.sql"
        script.write_text(PILEUP_SQL["pgbench_update"] + "\n")
        conninfo, env = for_child_process(target)
        process = subprocess.Popen(
            [pgbench, "-n", "-f", str(script), "-c", str(clients), "-j", "2", "-T", "600", conninfo],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**env, "PGAPPNAME": "queuetop-bench-pileup"},
        )
        deadline = time.monotonic() + 60
        while one(admin.execute(PILEUP_SQL["waiting"]))[0] < clients:
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError("the pgbench clients did not all wait on the held row")
            time.sleep(0.1)
        say(f"pile-up: {clients} pgbench clients waiting on one row")
        probes = PostgresProbes()
        timings: list[float] = []
        blocked = 0
        with open_probe_connection(target) as conn:
            probes.server(conn)
            probes.locks(conn)  # warm
            for _ in range(cycles):
                started = time.perf_counter()
                result = probes.locks(conn)
                timings.append((time.perf_counter() - started) * 1000)
                blocked = len(result[0])
        say(f"pile-up: locks probe p50 {statistics.median(timings):.2f} ms, {blocked} blocked seen")
        return {
            "p50": round(statistics.median(timings), 3),
            "p95": round(statistics.quantiles(timings, n=20)[-1], 3) if len(timings) >= 2 else round(timings[0], 3),
            "blocked": blocked,
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
