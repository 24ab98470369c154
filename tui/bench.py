"""`queuetop bench tui`: what the dashboard costs, without a database.

Synthetic snapshots (500 sessions, most of them blocked in deep chains, and 50 queues) are fed to
the real app running headless. Reported: the p50/p95 time to apply one snapshot to the widgets,
the same until the screen has been refreshed, and the process's CPU share while the app idles
with one snapshot per second (everything it does between samples: timers, countdowns, repaint).
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import threading
import time

from .dashboard import QueuetopApp
from .sample import SampleSource, sample_snapshot

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
                  size: tuple[int, int] = (100, 30)) -> dict[str, object]:
    frames = [sample_snapshot(queues=queues, sessions=sessions, tree_depth=8, step=n) for n in range(snapshots)]
    return asyncio.run(_bench(frames, idle_seconds, warm_up_s, size, sessions, queues))


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
