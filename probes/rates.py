"""Each queue's rates, and the counters they add up to, from one probe cycle to the next: from the
library's own records of its jobs (a QueueFigures' `flow`, probes/sources/flows.py) or from its
table's cumulative counters (pg_stat_user_tables, SQL Server's operational stats) where the table is
the queue's alone."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from dbcore.database import DictRow

    from .sources import QueueFigures, QueueSource


@dataclass(frozen=True, slots=True)
class _Counters:
    at: float
    inserted: int
    deleted: int
    depth: int | None  # exact depths only
    # Messages enqueued and dequeued since the queue was first seen (QueueSample's counters).
    enqueued_total: int = 0
    dequeued_total: int | None = 0
    # Departures inferred as arrivals - the depth's growth that came out negative (the rows
    # counted before the statistics that insert them were sent): owed by the next interval rather
    # than clamped to 0, which would count them as departures once the statistics come.
    owed: int = 0
    failed_total: int | None = None  # jobs failed for good (where the library's records tell)


# (enqueued, dequeued, failed) per second, then the counters: enqueued, dequeued, failed since first seen.
Rates: TypeAlias = "tuple[float | None, float | None, float | None, int | None, int | None, int | None]"


class QueueRates:
    """The counters of every queue seen, by key, kept between cycles."""

    def __init__(self) -> None:
        self._previous: dict[str, _Counters] = {}

    def of_flow(self, source: QueueSource, f: QueueFigures, now: float) -> Rates:
        """The rates of a queue whose library's own records told its traffic (flows.py), and the
        counters they add up to (restarted from 0 after a cycle where a count was not known,
        which Prometheus's rate() reads as a reset: never an undercount)."""
        assert f.flow is not None
        flow = f.flow
        key = f"{source.name}:{source.schema}:{f.name}"
        previous = self._previous.get(key)
        totals = [previous.enqueued_total, previous.dequeued_total, previous.failed_total] if previous else [0, 0, 0]
        counts = (flow.enqueued, flow.dequeued, flow.failed)
        totals = [(t or 0) + n if n is not None else None for t, n in zip(totals, counts, strict=True)]
        self._previous[key] = _Counters(now, 0, 0, None, totals[0] or 0, totals[1], failed_total=totals[2])
        per_s = [n / flow.span_s if n is not None else None for n in counts]
        return per_s[0], per_s[1], per_s[2], totals[0], totals[1], totals[2]

    def of_statistics(self, source: QueueSource, f: QueueFigures, st: DictRow | None, now: float) -> Rates:
        """The rates of a queue from its table's cumulative counters (pg_stat_user_tables), where
        the table is the queue's alone (QueueFigures.rates_from)."""
        enq = deq = None
        enqueued_total = dequeued_total = None
        # No counters this cycle (SQL Server's operational stats need VIEW DATABASE STATE and
        # restart when a table's metadata leaves the cache): no rate, rather than a wrong one.
        if st is not None and f.rates_from is not None and st["n_tup_ins"] is not None and st["n_tup_del"] is not None:
            key = f"{source.name}:{f.name}"
            inserted, deleted = st["n_tup_ins"], st["n_tup_del"]
            depth = f.depth if not f.depth_is_estimate else None
            previous = self._previous.get(key)
            enqueued_total, dequeued_total = (previous.enqueued_total, previous.dequeued_total) if previous else (0, 0)
            owed = 0
            if previous is None and depth is not None and st.get("n_live_tup") is not None:
                # First seen: rows the depth counts that the statistics do not hold yet (their inserts
                # not sent: live tuples fewer than the waiting rows) would read, once sent, as
                # arrivals that left at once (pg-boss's 5 fresh jobs as 5 departures, CI on 12).
                owed = max(0, depth - st["n_live_tup"])
            if previous is not None and now > previous.at:
                span = now - previous.at
                arrived = max(0, inserted - previous.inserted)  # 0 across a statistics reset
                left: int | None = None
                if f.rates_from == "deletes":
                    left = max(0, deleted - previous.deleted)
                elif depth is not None and previous.depth is not None:
                    # Finished rows may stay: what arrived and is no longer waiting has left.
                    inferred = arrived - (depth - previous.depth) - (previous.owed if inserted >= previous.inserted else 0)
                    left, owed = max(0, inferred), max(0, -inferred)
                enq = arrived / span
                deq = left / span if left is not None else None
                enqueued_total += arrived
                # Unknown this cycle (an estimated depth): absent, and counted again from 0 after
                # (a counter's reset, which rate() understands), never an undercount.
                dequeued_total = (dequeued_total or 0) + left if left is not None else None
            self._previous[key] = _Counters(now, inserted, deleted, depth, enqueued_total, dequeued_total, owed)
        return enq, deq, None, enqueued_total, dequeued_total, None
