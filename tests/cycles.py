"""Probe cycles run in a thread of their own while a workload runs (the rates and accuracy tests),
and the counters of a source's queues held to the truth."""

from __future__ import annotations

import threading

from probes.sampler import probes_for, run_cycle

from .conftest import wait_until


def totals(snapshot, source: str) -> dict[str, tuple[int | None, int | None, int | None]]:
    return {q.name: (q.enqueued_total, q.dequeued_total, q.failed_total) for q in snapshot.queues if q.source == source}


def settle_totals(cycles: Cycles, source: str, expected: dict, timeout: float = 30.0) -> None:
    """Poll until the counters of the source's queues in the cycles' last snapshot equal
    `expected`; on timeout, fail with both."""
    try:
        wait_until(lambda: totals(cycles.last, source) == expected, timeout=timeout, interval=0.1,
                   what=f"{source}'s counters to reach the truth")
    except AssertionError:
        got = totals(cycles.last, source)
        raise AssertionError(f"{source}'s counters after {timeout:.0f} s: {got}, the truth: {expected}") from None


class Cycles:
    """Probe cycles on one probes object (the readers keep their place between cycles), run in a
    thread of their own for as long as a workload runs, and the last snapshot."""

    def __init__(self, db, probes=None) -> None:
        self.db = db
        self.probes = probes or probes_for(db.target)
        self.last = run_cycle(db.target, probes=self.probes)  # the first: where each reader starts
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.cycles = 1

    def __enter__(self) -> Cycles:
        def loop() -> None:
            while not self._stop.is_set():
                self.last = run_cycle(self.db.target, probes=self.probes)
                self.cycles += 1
                self._stop.wait(0.2)

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(60)

    def once(self):
        self.last = run_cycle(self.db.target, probes=self.probes)
        self.cycles += 1
        return self.last
