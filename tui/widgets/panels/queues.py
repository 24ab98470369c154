"""The Queues panel: every queue's depth, states, age, rates, trend and table health."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from datetime import datetime
from typing import Any, ClassVar

from rich.text import Text

from probes.model import QueueSample, Snapshot

from ... import format as fmt
from ..keyed_table import Column, KeyedTable, RowsShown
from .base import UNKNOWN_KEY, Panel, new_sample, unknown_row

HISTORY = 30
# The window the In/Out columns count over: what arrived and left in the last minute, so a burst
# between two refreshes stays in sight for a minute (the snapshot's rates are per second between
# two probe cycles: a burst shows in one frame, or in none if the interval is long).
RATE_WINDOW_S = 60.0
# What a queue's name is followed by, by source: the engine's own queues need no suffix.
SOURCE_SUFFIX = {"reference": "", "outbox": ""}


def _estimated(q: QueueSample, field: str) -> bool:
    """Whether a figure of a queue is an estimate (a snapshot recorded before per-figure flags
    has the depth's flag only: its ready figure followed it)."""
    if q.estimated:
        return field in q.estimated
    return q.depth_is_estimate and field == "ready"


class RateWindow:
    """One queue's messages in and out over the last RATE_WINDOW_S seconds, from its samples'
    per-second rates, each over the span since the host's sample before it: a count per minute
    (scaled up while less than a minute has been seen; the first sample's rate alone at first).
    Running sums: constant work a sample."""

    __slots__ = ("_first", "_spans", "_sums")

    def __init__(self) -> None:
        # (start, end, in, out, in known, out known): the messages of one span between samples.
        self._spans: deque[tuple[float, float, float, float, bool, bool]] = deque()
        self._sums = [0.0, 0.0, 0.0, 0.0]  # in, out, seconds with a known in, seconds with a known out
        self._first: tuple[float | None, float | None] = (None, None)  # a first sample's rates

    def add(self, start: float | None, end: float, per_s_in: float | None, per_s_out: float | None) -> None:
        if start is None or end <= start:
            self._first = (per_s_in, per_s_out)
            return
        span = end - start
        entry = (start, end, (per_s_in or 0.0) * span, (per_s_out or 0.0) * span, per_s_in is not None, per_s_out is not None)
        spans, sums = self._spans, self._sums
        spans.append(entry)
        if entry[4]:
            sums[0] += entry[2]
            sums[2] += span
        if entry[5]:
            sums[1] += entry[3]
            sums[3] += span
        while spans[0][1] <= end - RATE_WINDOW_S:
            old_start, old_end, moved_in, moved_out, known_in, known_out = spans.popleft()
            if known_in:
                sums[0] -= moved_in
                sums[2] -= old_end - old_start
            if known_out:
                sums[1] -= moved_out
                sums[3] -= old_end - old_start

    def per_minute(self) -> tuple[float | None, float | None]:
        """Messages in and out in the last minute (None: not known)."""
        if not self._spans:
            first_in, first_out = self._first
            return (None if first_in is None else first_in * 60, None if first_out is None else first_out * 60)
        moved_in, moved_out, seconds_in, seconds_out = self._sums
        # The oldest span may begin before the window: only its share inside it counts.
        start, end, span_in, span_out, known_in, known_out = self._spans[0]
        window_start = self._spans[-1][1] - RATE_WINDOW_S
        if start < window_start:
            outside = (window_start - start) / (end - start)
            if known_in:
                moved_in -= span_in * outside
                seconds_in -= window_start - start
            if known_out:
                moved_out -= span_out * outside
                seconds_out -= window_start - start

        def scaled(moved: float, seconds: float) -> float | None:
            return None if seconds <= 1e-9 else max(0.0, moved) * 60 / seconds

        return scaled(moved_in, seconds_in), scaled(moved_out, seconds_out)


def _display_name(q: QueueSample) -> str:
    """A queue's name as the Queues panel shows it (inert): with its source, but for the engine's own."""
    return fmt.inert(q.name + SOURCE_SUFFIX.get(q.source, f" ({q.source})"))


def _verdict_cell(q: QueueSample) -> str | Text:
    """The Verdict column: the verdict's word (probes/diagnosis.py; `unknown` where it was not
    judged), or nothing where there is no verdict at all (a recording from before verdicts):
    absent, not "ok"."""
    if q.diagnosis is None:
        return ""
    return Text(fmt.verdict_word(q.diagnosis.code), style=fmt.VERDICT_STYLES.get(q.diagnosis.code, ""))


class QueuesPanel(Panel):
    # Priority: what goes last when the width runs out (0 never goes).
    COLUMNS: ClassVar[list[Column]] = [
        Column("name", "Queue", 0, text=True, min_width=12), Column("depth", "Depth", 1), Column("ready", "Ready", 3),
        # The rates before Delayed (scheduled for later, most often 0): at 80 columns, arrivals and
        # departures in the last minute stay on screen.
        Column("in_flight", "Taken", 5), Column("delayed", "Delayed", 8), Column("dead", "Dead", 4),
        Column("age", "Oldest", 2), Column("in", "In/min", 6), Column("out", "Out/min", 7),
        Column("trend", "Trend (peak)", 11),
        Column("bloat", "Dead tup", 9), Column("vacuum", "Vacuumed", 10),
        # Why it is as it is (probes/diagnosis.py); Enter says why in words. Last on the line, kept
        # before the rates at 80 columns.
        Column("verdict", "Verdict", 2),
    ]

    # The snapshot's own order (by source), then the figures an operator looks for first, largest
    # first, then by name.
    SORTS: ClassVar[tuple[tuple[str, str], ...]] = (
        ("source", "source"), ("depth", "depth ↓"), ("oldest", "oldest ready ↓"), ("dead", "dead ↓"), ("name", "name"),
    )

    # The table-health columns in each database's words: PostgreSQL's dead tuples and last
    # (auto)vacuum; SQL Server's ghost records (read on a slow schedule) and the last update of
    # the table's statistics (it has no vacuum).
    WORDS: ClassVar[dict[str, dict[str, str]]] = {
        "postgresql": {"bloat": "Dead tup", "vacuum": "Vacuumed"},
        "mssql": {"bloat": "Ghosts", "vacuum": "Stats upd"},  # STATS_DATE of the clustered index
    }

    # A queue by its name, table, source (its library), kind and verdict (`verdict:blocked`).
    FILTER_FIELDS: ClassVar[dict[str, Callable[[Any], object]]] = {
        "name": lambda q: q.name, "table": lambda q: q.table, "source": lambda q: q.source, "kind": lambda q: q.kind,
        "verdict": lambda q: (q.diagnosis.code, fmt.verdict_word(q.diagnosis.code)) if q.diagnosis is not None else None}
    FILTER_WORDS = ("name", "table")

    def __init__(self) -> None:
        super().__init__("Queues", id="queues")
        self._dialect = "postgresql"
        # Per host (a snapshot's `host`: the dashboard may watch several): each queue's depth over
        # the samples seen, and the last sample of each queue and when it was read.
        self._histories: dict[str, dict[str, deque[float]]] = {}
        self._rate_windows: dict[str, dict[str, RateWindow]] = {}  # per host: each queue's last minute in and out
        self.rates: dict[str, RateWindow] = {}  # the shown host's
        self._recorded: dict[str, datetime] = {}  # host -> the sample last added to its histories
        self._rendered: dict[str, tuple[object, tuple]] = {}  # the shown host's: key -> (facts, cells)
        self._rendered_by_host: dict[str, dict[str, tuple[object, tuple]]] = {}
        self._last_reads: dict[str, dict[str, tuple[QueueSample, datetime]]] = {}
        self.history: dict[str, deque[float]] = {}  # the shown host's
        self._last_read: dict[str, tuple[QueueSample, datetime]] = {}
        self._shown_snapshot: Snapshot | None = None
        self._redraw_only = False

    def _ordered(self, queues: tuple[QueueSample, ...]) -> list[QueueSample]:
        if self.sort == "source":
            return list(queues)
        if self.sort == "name":
            return sorted(queues, key=lambda q: (q.name.lower(), q.source))
        figure = {"depth": lambda q: q.depth, "oldest": lambda q: q.oldest_ready_age_s, "dead": lambda q: q.dead}[self.sort]
        # Largest first; unknown figures last, each group in the snapshot's order (a stable sort).
        return sorted(queues, key=lambda q: (figure(q) is None, -(figure(q) or 0)))

    def compose(self):
        yield KeyedTable(self.COLUMNS, id="queues-table")

    def _stale(self, snapshot: Snapshot) -> list[QueueSample]:
        """The queues of the sources the probe could not read this cycle (a lock on the registry
        table, a lock timeout), as last read: kept on screen, marked stale, not dropped."""
        status = snapshot.probes.get("queues")
        unread = status.unread if status is not None else ()
        for q in snapshot.queues:
            self._last_read[f"{q.source}:{q.name}"] = (q, snapshot.taken_at)
        if not unread:
            self.set_subtitle("stale")
            return []
        read = {f"{q.source}:{q.name}" for q in snapshot.queues}
        stale = [(q, at) for key, (q, at) in self._last_read.items() if key not in read and ("all" in unread or q.source in unread)]
        if stale:
            since = min(at for _q, at in stale)
            reason = fmt.one_line(status.error if status is not None else None, 200)
            self.set_subtitle("stale", f"{len(stale)} stale since {since:%H:%M:%S}: {reason}",
                              f"{len(stale)} stale since {since:%H:%M:%S}", f"{len(stale)} stale")
        else:
            self.set_subtitle("stale")
        return [q for q, _at in stale]

    def on_rows_shown(self, message: RowsShown) -> None:
        super().on_rows_shown(message)
        # Rows that scrolled into view are drawn from the last sample now (see show()).
        if self._shown_snapshot is not None:
            self._redraw_only = True
            try:
                self.show(self._shown_snapshot)
            finally:
                self._redraw_only = False

    def record(self, snapshot: Snapshot) -> None:
        """Add a sample to its host's depth histories (once per sample), shown or not: a host in
        another tab keeps its trends."""
        history = self._histories.setdefault(snapshot.host, {})
        windows = self._rate_windows.setdefault(snapshot.host, {})
        previous = self._recorded.get(snapshot.host)
        new = new_sample(self._recorded, snapshot)
        if new is None:
            return
        if new == "earlier":  # a replay went back in time: the trends start again
            history.clear()
            windows.clear()
            previous = None
        start = None if previous is None else previous.timestamp()
        end = snapshot.taken_at.timestamp()
        for q in snapshot.queues:
            key = f"{q.source}:{q.name}"
            if q.depth is not None:
                history.setdefault(key, deque(maxlen=HISTORY)).append(float(q.depth))
            window = windows.get(key)
            if window is None:
                window = windows[key] = RateWindow()
            window.add(start, end, q.enqueued_per_s, q.dequeued_per_s)

    def show(self, snapshot: Snapshot) -> None:
        rows: dict[str, tuple] = {}
        host = snapshot.host
        if not self._redraw_only:
            self.record(snapshot)
        self.history = self._histories.setdefault(host, {})
        self.rates = self._rate_windows.setdefault(host, {})
        self._last_read = self._last_reads.setdefault(host, {})
        self._rendered = self._rendered_by_host.setdefault(host, {})  # a stale row keeps its own host's cells
        self._shown_snapshot = snapshot
        stale = self._stale(snapshot)
        stale_keys = {f"{q.source}:{q.name}" for q in stale}
        table = self.query_one(KeyedTable)
        dialect = snapshot.server.dialect if snapshot.server is not None else self._dialect
        if dialect != self._dialect and dialect in self.WORDS:
            self._dialect = dialect
            table.relabel(self.WORDS[dialect])
        trend_shown = "trend" in table.shown_columns()
        ordered = self._ordered(snapshot.queues + tuple(stale))
        # Only the rows on screen (and a few either side) are formatted anew: with 500 queues,
        # a row scrolled out of view keeps the cells it had until it comes back into view.
        passes = self.passes
        in_view = table.keys_in_view([f"{q.source}:{q.name}" for q in ordered if passes(q)])
        for q in ordered:
            key = f"{q.source}:{q.name}"
            if key in stale_keys:  # the last figures, dimmed (the border says since when and why)
                if key in self._rendered and passes(q):
                    rows[key] = tuple(Text(cell.plain if isinstance(cell, Text) else cell, style="dim italic")
                                      for cell in self._rendered[key][1])
                continue
            history = self.history.get(key) or deque()
            if not passes(q):
                continue
            cached = self._rendered.get(key)
            if cached is not None and in_view is not None and key not in in_view:
                rows[key] = cached[1]
                continue
            # Same sample, same trend, same clock: the same cells (no Text built, none compared).
            window = self.rates.get(key)
            per_minute = window.per_minute() if window is not None else (None, None)
            facts = (q, tuple(history)[-12:], snapshot.taken_at if q.last_vacuum_at else None, per_minute, trend_shown)
            if cached is not None and cached[0] == facts:
                rows[key] = cached[1]
                continue
            if q.error and q.depth is None:
                # Its figures unknown; why is in the border (and the status notes, `queuetop
                # snapshot`): a long text here would widen the Depth column for good. Its verdict
                # stands beside them (blocked: a lock on its table, read from pg_locks alone).
                rows[key] = (Text(_display_name(q), style="red"),
                             Text("unknown", style="bold yellow"), "", "", "", "", "", "", "", "", "", "", _verdict_cell(q))
                self._rendered[key] = (facts, rows[key])
                continue
            # Plain strings unless a cell is coloured: a Text costs several times more to build,
            # compare and measure, and a busy screen of 500 queues changes every row each second.
            name = _display_name(q)
            bloat: str | Text = fmt.count(q.dead_tuples)
            if q.dead_tuples and q.live_tuples is not None and q.dead_tuples > max(1000, 2 * (q.live_tuples or 0)):
                bloat = Text(fmt.count(q.dead_tuples), style="bold yellow")  # more dead than live: vacuum is not keeping up
            age: str | Text = fmt.seconds(q.oldest_ready_age_s)
            if q.oldest_ready_age_s is not None and q.oldest_ready_age_s > 60:
                age = Text(fmt.seconds(q.oldest_ready_age_s), style="bold red")
            dead: str | Text = fmt.figure(q.dead, "dead" in q.estimated, "dead" in q.counting)
            if q.dead:
                dead = Text(fmt.count(q.dead, "dead" in q.estimated), style="red")
            vacuum = "-" if q.last_vacuum_at is None else fmt.seconds(
                snapshot.taken_at.timestamp() - q.last_vacuum_at.timestamp()) + " ago"
            rows[key] = (
                name, fmt.figure(q.depth, q.depth_is_estimate, "depth" in q.counting),
                fmt.figure(q.ready, _estimated(q, "ready"), "ready" in q.counting),
                fmt.figure(q.in_flight, _estimated(q, "in_flight"), "in_flight" in q.counting),
                fmt.figure(q.delayed, _estimated(q, "delayed"), "delayed" in q.counting), dead, age,
                fmt.rate(per_minute[0]), fmt.rate(per_minute[1]),
                fmt.trend(list(history), styled=trend_shown), bloat, vacuum, _verdict_cell(q),
            )
            self._rendered[key] = (facts, rows[key])
        failed = [q for q in snapshot.queues if q.error and q.depth is None and passes(q)]
        if failed:
            reason = fmt.one_line(failed[0].error, 200)
            self.set_subtitle("unknown", f"{len(failed)} unknown: {failed[0].name}: {reason}", f"{len(failed)} unknown")
        else:
            self.set_subtitle("unknown")
        # Sources the probe could not read, with no last rows of theirs to show stale: unknown,
        # not "no queues".
        status = snapshot.probes.get("queues")
        if status is not None and status.error and not stale and (status.unread or not snapshot.queues):
            rows[UNKNOWN_KEY] = unknown_row(status.error, len(self.COLUMNS))
        self.query_one(KeyedTable).sync(rows)
