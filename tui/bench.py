"""`queuetop bench tui`: what the dashboard costs, without a database.

Synthetic snapshots (500 sessions, most of them blocked in deep chains, and 50 queues) are fed to
the real app running headless. Reported: the p50/p95 time to apply one snapshot to the widgets,
the same until the screen has been refreshed, and the process's CPU share while the app idles
with one snapshot per second (everything it does between samples: timers, countdowns, repaint).

The pile-up case (issue 43): 2,000 sessions waiting on one row as PostgreSQL reports them (each
blocked by every one queued ahead of it: two million waits) beside a chain 50 deep, their waits
growing every snapshot; the same p50/p95, and the time a key takes to be answered meanwhile.

The flight recorder (probes/flight.py): what keeping a snapshot costs the sampler's thread (its
JSON, then gzip: `flight_ms_per_snapshot_p50`, of which `flight_gzip_ms_p50` compressing), the
bytes it keeps per snapshot, and the memory 15 minutes at a 2 s interval take at the bench's size
(counted, and measured with tracemalloc), with the minutes the default 50 MB holds.
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import threading
import time
import tracemalloc

from textual.widgets import Tree

from probes.flight import DEFAULT_MB, DEFAULT_MINUTES, MB, FlightRecorder
from probes.recorder import COMPRESS_LEVEL

from .dashboard import QueuetopApp
from .dashboard.app import GC_YOUNG
from .sample import SampleSource, pileup_snapshot, sample_snapshot

WARM_UP_S = 15.0


class _TimedSource(SampleSource):
    """A SampleSource that emits on its own at `interval_s`, like the sampler does."""

    def __init__(self, sink, snapshots, interval_s: float) -> None:
        super().__init__(sink, snapshots, interval_s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> None:
        super().start()
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            if not self.paused:
                self._emit()

    def stop(self) -> None:
        super().stop()
        self._stop.set()


def run_tui_bench(*, warm_up_s: float = WARM_UP_S, sessions: int = 500, queues: int = 50, snapshots: int = 60, idle_seconds: float = 10.0,
                  size: tuple[int, int] = (100, 30), pileup: int = 2000, chain: int = 50) -> dict[str, object]:
    frames = [sample_snapshot(queues=queues, sessions=sessions, tree_depth=8, step=n) for n in range(snapshots)]
    result = asyncio.run(_bench(frames, idle_seconds, warm_up_s, size, sessions, queues))
    result.update(_flight(frames))
    if pileup:
        result.update(asyncio.run(_pileup(pileup, chain, snapshots, size)))
    return result


async def _pileup(waiters: int, chain: int, snapshots: int, size: tuple[int, int]) -> dict[str, object]:
    """A pile-up's snapshots applied and drawn (wall time, and the process's CPU time, which the
    wait for the screen's next frame does not count), each followed by a key (the Locks tree's
    cursor moved down) whose answer is timed: what an operator's key waits for meanwhile."""
    frames = [pileup_snapshot(waiters=waiters, chain=chain, step=n) for n in range(snapshots)]
    app = QueuetopApp(lambda sink: SampleSource(sink, frames[:1]))
    apply_ms, settled_ms, settled_cpu_ms, key_ms = [], [], [], []
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        app.query_one("#locks-tree").focus()
        for frame in frames:
            started, cpu = time.perf_counter(), time.process_time()
            app.apply_snapshot(frame)
            apply_ms.append((time.perf_counter() - started) * 1000)
            await pilot.pause()
            settled_ms.append((time.perf_counter() - started) * 1000)
            settled_cpu_ms.append((time.process_time() - cpu) * 1000)
            started = time.perf_counter()
            await pilot.press("down")
            key_ms.append((time.perf_counter() - started) * 1000)
        tree_lines = app.query_one("#locks-tree", Tree).last_line + 1
    return {
        "pileup_waiters": waiters,
        "pileup_chain": chain,
        "pileup_waits": sum(len(b.blocked_by) for b in frames[0].blocked),
        "pileup_tree_lines": tree_lines,
        "pileup_apply_ms_p50": round(statistics.median(apply_ms), 3),
        "pileup_apply_ms_p95": _p95(apply_ms),
        "pileup_apply_and_draw_ms_p50": round(statistics.median(settled_ms), 3),
        "pileup_apply_and_draw_ms_p95": _p95(settled_ms),
        "pileup_apply_and_draw_cpu_ms_p95": _p95(settled_cpu_ms),
        "pileup_key_ms_p95": _p95(key_ms),
    }


FLIGHT_INTERVAL_S = 2.0  # the dashboard's default interval


def _flight(frames) -> dict[str, object]:
    """The flight recorder's cost per snapshot (in the sampler's thread: JSON, then gzip), its
    bytes per snapshot, and the memory of 15 minutes at 2 s: counted from the members, and
    measured (tracemalloc) with as many members kept, each a copy of one of the frames'."""
    import gzip
    import json

    json_ms, gzip_ms, members = [], [], []
    threshold = gc.get_threshold()
    gc.set_threshold(max(GC_YOUNG, threshold[0]), *threshold[1:])  # as while the dashboard runs (app.py)
    try:
        for frame in frames:
            started = time.perf_counter()
            line = (json.dumps(frame.to_json(), separators=(",", ":")) + "\n").encode()
            encoded = time.perf_counter()
            members.append(gzip.compress(line, compresslevel=COMPRESS_LEVEL, mtime=0))
            json_ms.append((encoded - started) * 1000)
            gzip_ms.append((time.perf_counter() - encoded) * 1000)
    finally:
        gc.set_threshold(*threshold)
    per_snapshot = statistics.fmean(len(m) for m in members)
    count = int(DEFAULT_MINUTES * 60 / FLIGHT_INTERVAL_S)
    now = [0.0]
    flight = FlightRecorder(minutes=DEFAULT_MINUTES, mb=1_000_000, clock=lambda: now[0])  # no memory bound: all 15 min
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(count):
            flight.keep(bytes(bytearray(members[n % len(members)])))  # a copy of its own, as a new snapshot's is
            now[0] += FLIGHT_INTERVAL_S
        measured = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    kept = flight.kept()
    return {
        "flight_snapshot_json_bytes": round(statistics.fmean(len(json.dumps(f.to_json(), separators=(",", ":"))) for f in frames[:3])),
        "flight_bytes_per_snapshot": round(per_snapshot),
        "flight_ms_per_snapshot_p50": round(statistics.median(j + g for j, g in zip(json_ms, gzip_ms, strict=True)), 3),
        "flight_json_ms_p50": round(statistics.median(json_ms), 3),
        "flight_gzip_ms_p50": round(statistics.median(gzip_ms), 3),
        "flight_compress_level": COMPRESS_LEVEL,
        "flight_snapshots_15_min_at_2s": kept.snapshots,
        "flight_mb_15_min_at_2s": round(kept.bytes / MB, 2),
        "flight_measured_mb_15_min_at_2s": round(measured / MB, 2),
        "flight_minutes_in_default_mb": round(min(DEFAULT_MINUTES, DEFAULT_MB * MB / per_snapshot * FLIGHT_INTERVAL_S / 60), 1),
    }


def _p95(values: list[float]) -> float:
    return round(statistics.quantiles(values, n=20)[-1] if len(values) > 1 else values[0], 3)


async def _bench(frames, idle_seconds, warm_up_s, size, sessions, queues) -> dict[str, object]:
    app = QueuetopApp(lambda sink: SampleSource(sink, frames[:1]))
    apply_ms, settled_ms = [], []
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        for frame in frames:
            started = time.perf_counter()
            app.apply_snapshot(frame)
            apply_ms.append((time.perf_counter() - started) * 1000)
            await pilot.pause()  # let the screen refresh
            settled_ms.append((time.perf_counter() - started) * 1000)
    busy = await _idle_cpu(frames, idle_seconds, warm_up_s, size)  # every figure changes every second
    quiet = await _idle_cpu(frames[:1], idle_seconds, warm_up_s, size)  # the same picture every second
    return {
        "benchmark": "tui",
        "sessions": sessions,
        "sessions_listed": len(frames[0].sessions),  # the Sessions panel's rows
        "blocked_sessions": len(frames[0].blocked),
        "queues": queues,
        "snapshots": len(frames),
        "terminal_size": list(size),
        "apply_ms_p50": round(statistics.median(apply_ms), 3),
        "apply_ms_p95": round(statistics.quantiles(apply_ms, n=20)[-1], 3) if len(apply_ms) > 1 else None,
        "apply_and_refresh_ms_p50": round(statistics.median(settled_ms), 3),
        "idle_interval_s": 1.0,
        "idle_seconds": idle_seconds,
        "idle_warm_up_s": warm_up_s,
        "idle_cpu_percent_of_one_core": busy,
        "idle_cpu_percent_quiet_database": quiet,
    }


async def _idle_cpu(frames, seconds, warm_up_s, size) -> float:
    """CPU share of the process while the app, untouched, receives one snapshot per second."""
    app = QueuetopApp(lambda sink: _TimedSource(sink, frames, 1.0))
    async with app.run_test(size=size) as pilot:
        await pilot.pause(warm_up_s)  # steady state: sparkline histories full
        gc.collect()  # not the previous run's garbage
        cpu0, wall0 = time.process_time(), time.perf_counter()
        await pilot.pause(seconds)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    return round(100 * cpu / wall, 2)
