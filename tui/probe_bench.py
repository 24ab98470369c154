"""`queuetop bench probes`: what a full probe cycle costs at a small and a large queue depth.

The probes promise a cost independent of queue depth. This measures it: the same cycle (every
probe, one session, as the dashboard runs it) timed many times with a 1k-message queue and
with a queue of a million or more, while ~50 idle client sessions are open (a realistic
pg_stat_activity). Some messages are claimed (in flight) and some dead-lettered, so every
branch of the queue probe runs.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from dbcore.database import Target, connect
from dbcore.errors import UsageError
from probes.postgres import PostgresProbes, open_probe_connection
from probes.sampler import run_cycle
from queues import schema
from queues.table_queue import TableQueue

BENCH_QUEUE = "bench.probes"


def run_probe_bench(
    target: Target,
    *,
    small_depth: int = 1_000,
    large_depth: int = 1_000_000,
    idle_connections: int = 50,
    cycles: int = 50,
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
    }


def _prepare(conn, queue: TableQueue, depth: int) -> None:
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
