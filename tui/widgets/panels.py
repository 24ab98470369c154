"""The six panels. Each takes a snapshot (and the filter text) in `show()` and updates its
widgets in place; none of them does I/O."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from datetime import datetime
from typing import ClassVar

from rich.cells import cell_len
from rich.text import Text
from textual.containers import Vertical
from textual.widgets import Sparkline, Static, Tree
from textual.widgets.tree import TreeNode

from probes.model import BlockedSession, Blocker, Connections, PreparedXact, QueueSample, Snapshot

from .. import format as fmt
from ..report import xmin_holder
from .keyed_table import Column, KeyedTable, RowsShown, rows_shown, shorten

HISTORY = 30
# What a queue's name is followed by, by source: the engine's own queues need no suffix.
SOURCE_SUFFIX = {"reference": "", "outbox": ""}


# The tree's labels are one line each: the long session states said short.
SHORT_STATES = {"idle in transaction": "idle in xact", "idle in transaction (aborted)": "idle in xact (aborted)",
                "sleeping, open transaction": "sleeping, open xact"}
# A session that holds a transaction open and does nothing: the classic root blocker, in each
# database's words (PostgreSQL's state; SQL Server's sleeping session with an open transaction).
CULPRIT_STATES = frozenset({"idle in transaction", "sleeping, open transaction"})


def fit_segments(segments: list[tuple[str, str, bool]], width: int) -> Text:
    """(text, style, may be shortened) parts, in order, as many as fit `width` whole; a part that
    may be shortened (a name, a query) is cut with an ellipsis when at least 8 cells (besides its
    leading spaces) are left for it. A figure is whole or absent. Every part is made inert: the
    tree's labels and the summary lines quote applications, queries and lock names."""
    kept: list[tuple[str, str]] = []
    used = 0
    for raw, style, shrinkable in segments:
        text = fmt.inert(raw)
        size = cell_len(text)
        if used + size <= width:
            kept.append((text, style))
            used += size
            continue
        room = width - used
        if shrinkable and room >= 8 + len(text) - len(text.lstrip()):  # a name or query cut to a letter or two says nothing
            kept.append((shorten(text, room).plain, style))
        break
    return Text.assemble(*kept)


UNKNOWN_KEY = "unknown"


def unknown_row(reason: str, columns: int, at: int = 0) -> tuple[object, ...]:
    """A table's row when its probe could not read it: "unknown: <why>" in its text column (`at`),
    no figure. Never an empty table, which would read as "none", nor a 0."""
    cells: list[object] = [""] * columns
    cells[at] = Text(f"unknown: {fmt.one_line(reason, 300)}", style="bold yellow")
    return tuple(cells)


def _new_sample(recorded: dict[str, datetime], snapshot: Snapshot) -> str | None:
    """Whether `snapshot` is a sample of its host not yet recorded: "later" or "earlier" (a replay
    went back) than the last one, noting it; None when it is that one again."""
    last = recorded.get(snapshot.host)
    if last == snapshot.taken_at:
        return None
    recorded[snapshot.host] = snapshot.taken_at
    return "earlier" if last is not None and snapshot.taken_at < last else "later"


def _estimated(q: QueueSample, field: str) -> bool:
    """Whether a figure of a queue is an estimate (a snapshot recorded before per-figure flags
    has the depth's flag only: its ready figure followed it)."""
    if q.estimated:
        return field in q.estimated
    return q.depth_is_estimate and field == "ready"


def _display_name(q: QueueSample) -> str:
    """A queue's name as the Queues panel shows it (inert): with its source, but for the engine's own."""
    return fmt.inert(q.name + SOURCE_SUFFIX.get(q.source, f" ({q.source})"))


def _matches(filter_text: str, *fields: object) -> bool:
    if not filter_text:
        return True
    needle = filter_text.lower()
    return any(needle in str(f).lower() for f in fields if f is not None)


class Panel(Vertical):
    ALLOW_MAXIMIZE = True
    DEFAULT_CSS = """
    Panel { border: round $primary-darken-2; height: 1fr; }
    /* Focus shows in the border's weight and the title, not in its colour alone (NO_COLOR). */
    Panel:focus-within { border: heavy $accent; border-title-style: bold reverse; }
    """
    # What `>` cycles through when the panel has focus: (name, what it means); the first is the
    # snapshot's own order. A panel with one entry does not sort.
    SORTS: ClassVar[tuple[tuple[str, str], ...]] = (("given", ""),)

    def __init__(self, title: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.border_title = title
        self._subtitles: dict[str, tuple[str, ...]] = {}
        self._subtitle_shown = ""
        self.sort = self.SORTS[0][0]
        self._width_wanted = 0

    def fit_width_to_content(self) -> None:
        """As wide as its table needs to show everything (the CSS caps it): for the small panels
        beside Leases, so each gets the width its names and figures need rather than a fixed share."""
        want = max(self.query_one(KeyedTable).ideal_width(), cell_len(str(self.border_title)) + 4) + 2  # + the border
        if want != self._width_wanted:
            self._width_wanted = want
            self.styles.width = want

    def cycle_sort(self) -> str | None:
        """Sort by the next entry of SORTS; returns what it means, None if the panel does not sort."""
        if len(self.SORTS) < 2:
            return None
        names = [name for name, _meaning in self.SORTS]
        self.sort = names[(names.index(self.sort) + 1) % len(names)]
        meaning = dict(self.SORTS)[self.sort]
        self.set_subtitle("sort", *(() if self.sort == names[0] else (f"sorted by {meaning} (>)", f"by {meaning}")))
        return meaning

    def set_subtitle(self, part: str, *texts: str) -> None:
        """One part of the border's subtitle (the sort, the hidden columns, a last run...), as
        one or more texts, longest first: the border shows each part whole, in the longest form
        that fits, or not at all (the border would cut it, figures and all)."""
        if self._subtitles.get(part, ()) == texts:
            return
        self._subtitles[part] = texts
        self._render_subtitle()

    def _render_subtitle(self) -> None:
        room = self.size.width - 6 if self.size.width else 1_000
        shown: list[str] = []
        for part in ("stale", "unknown", "rows", "hidden", "sort", "last run"):  # the first ones say the panel is incomplete or old
            for text in self._subtitles.get(part, ()):
                if text and cell_len(" · ".join([*shown, text])) <= room:
                    shown.append(text)
                    break
        subtitle = " · ".join(shown)
        if subtitle != self._subtitle_shown:
            self._subtitle_shown = subtitle
            # A Text (a str border title is read as markup), inert: the stale part quotes an error.
            self.border_subtitle = Text(fmt.inert(subtitle))

    def on_resize(self) -> None:
        self._render_subtitle()

    def on_rows_shown(self, message: RowsShown) -> None:
        if message.shown is None:
            self.set_subtitle("rows")
            return
        first, last, total = message.shown
        if last < first:  # no room for a single row
            self.set_subtitle("rows", f"{total} rows: z zooms", f"{total} rows (z)")
            return
        more = "↓" if last < total else ""
        more += "↑" if first > 1 else ""
        self.set_subtitle("rows", f"rows {first}-{last} of {total} {more}", f"{first}-{last}/{total}{more}")

    def on_keyed_table_fitted(self, message: KeyedTable.Fitted) -> None:
        hidden = message.hidden
        if hidden:
            self.set_subtitle("hidden", f"+{len(hidden)} hidden: {', '.join(hidden)} (z zoom)", f"+{len(hidden)} hidden (z)",
                              f"+{len(hidden)} (z)")
        else:
            self.set_subtitle("hidden")

    def show(self, snapshot: Snapshot, filter_text: str = "") -> None:
        """Show what `snapshot` says (rows matching `filter_text`), changing only what changed."""
        raise NotImplementedError


class QueuesPanel(Panel):
    # Priority: what goes last when the width runs out (0 never goes).
    COLUMNS: ClassVar[list[Column]] = [
        Column("name", "Queue", 0, text=True, min_width=12), Column("depth", "Depth", 1), Column("ready", "Ready", 3),
        Column("in_flight", "In flight", 5), Column("delayed", "Delayed", 6), Column("dead", "Dead", 4),
        Column("age", "Oldest", 2), Column("in", "In/s", 7), Column("out", "Out/s", 8), Column("trend", "Trend (peak)", 11),
        Column("bloat", "Dead tup", 9), Column("vacuum", "Vacuumed", 10),
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

    def __init__(self) -> None:
        super().__init__("Queues", id="queues")
        self._dialect = "postgresql"
        # Per host (a snapshot's `host`: the dashboard may watch several): each queue's depth over
        # the samples seen, and the last sample of each queue and when it was read.
        self._histories: dict[str, dict[str, deque[float]]] = {}
        self._recorded: dict[str, datetime] = {}  # host -> the sample last added to its histories
        self._rendered: dict[str, tuple[object, tuple]] = {}  # the shown host's: key -> (facts, cells)
        self._rendered_by_host: dict[str, dict[str, tuple[object, tuple]]] = {}
        self._last_reads: dict[str, dict[str, tuple[QueueSample, datetime]]] = {}
        self.history: dict[str, deque[float]] = {}  # the shown host's
        self._last_read: dict[str, tuple[QueueSample, datetime]] = {}
        self._shown_snapshot: tuple[Snapshot, str] | None = None
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
                self.show(*self._shown_snapshot)
            finally:
                self._redraw_only = False

    def record(self, snapshot: Snapshot) -> None:
        """Add a sample to its host's depth histories (once per sample), shown or not: a host in
        another tab keeps its trends."""
        history = self._histories.setdefault(snapshot.host, {})
        new = _new_sample(self._recorded, snapshot)
        if new is None:
            return
        if new == "earlier":  # a replay went back in time: the trends start again
            history.clear()
        for q in snapshot.queues:
            if q.depth is not None:
                history.setdefault(f"{q.source}:{q.name}", deque(maxlen=HISTORY)).append(float(q.depth))

    def show(self, snapshot: Snapshot, filter_text: str = "") -> None:
        rows: dict[str, tuple] = {}
        host = snapshot.host
        if not self._redraw_only:
            self.record(snapshot)
        self.history = self._histories.setdefault(host, {})
        self._last_read = self._last_reads.setdefault(host, {})
        self._rendered = self._rendered_by_host.setdefault(host, {})  # a stale row keeps its own host's cells
        self._shown_snapshot = (snapshot, filter_text)
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
        in_view = table.keys_in_view([f"{q.source}:{q.name}" for q in ordered if _matches(filter_text, q.name, q.table)])
        for q in ordered:
            key = f"{q.source}:{q.name}"
            if key in stale_keys:  # the last figures, dimmed (the border says since when and why)
                if key in self._rendered and _matches(filter_text, q.name, q.table):
                    rows[key] = tuple(Text(cell.plain if isinstance(cell, Text) else cell, style="dim italic")
                                      for cell in self._rendered[key][1])
                continue
            history = self.history.get(key) or deque()
            if not _matches(filter_text, q.name, q.table):
                continue
            cached = self._rendered.get(key)
            if cached is not None and in_view is not None and key not in in_view:
                rows[key] = cached[1]
                continue
            # Same sample, same trend, same clock: the same cells (no Text built, none compared).
            facts = (q, tuple(history)[-12:], snapshot.taken_at if q.last_vacuum_at else None)
            if cached is not None and cached[0] == facts:
                rows[key] = cached[1]
                continue
            if q.error and q.depth is None:
                # Its figures unknown; why is in the border (and the status notes, `queuetop
                # snapshot`): a long text here would widen the Depth column for good.
                rows[key] = (Text(_display_name(q), style="red"),
                             Text("unknown", style="bold yellow"), "", "", "", "", "", "", "", "", "", "")
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
            dead: str | Text = fmt.count(q.dead, "dead" in q.estimated)
            if q.dead:
                dead = Text(fmt.count(q.dead, "dead" in q.estimated), style="red")
            vacuum = "-" if q.last_vacuum_at is None else fmt.seconds(
                snapshot.taken_at.timestamp() - q.last_vacuum_at.timestamp()) + " ago"
            rows[key] = (
                name, fmt.count(q.depth, q.depth_is_estimate), fmt.count(q.ready, _estimated(q, "ready")),
                fmt.count(q.in_flight, _estimated(q, "in_flight")), fmt.count(q.delayed, _estimated(q, "delayed")), dead, age,
                fmt.rate(q.enqueued_per_s), fmt.rate(q.dequeued_per_s),
                fmt.trend(list(history), styled=trend_shown), bloat, vacuum,
            )
            self._rendered[key] = (facts, rows[key])
        failed = [q for q in snapshot.queues if q.error and q.depth is None and _matches(filter_text, q.name, q.table)]
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


class RingsPanel(Panel):
    COLUMNS: ClassVar[list[Column]] = [
        Column("name", "Ring", 0, text=True, min_width=8), Column("used", "Used", 1), Column("occupancy", "Occupancy", 3),
        Column("refused", "Refused", 2, yields_to_names=True),
    ]

    def __init__(self) -> None:
        super().__init__("Rings", id="rings")

    def compose(self):
        yield KeyedTable(self.COLUMNS, id="rings-table")

    def show(self, snapshot: Snapshot, filter_text: str = "") -> None:
        rows: dict[str, tuple[object, ...]] = {}
        for r in snapshot.rings:
            if not _matches(filter_text, r.name):
                continue
            name = fmt.plain(r.name, style="bold red" if r.used >= r.capacity else "")
            rows[r.name] = (name, f"{fmt.count(r.used)}/{fmt.count(r.capacity)}", fmt.bar(r.used, r.capacity),
                            fmt.count(r.refused_total))
        unknown = snapshot.unknown_list("rings")
        if unknown is not None:
            rows[UNKNOWN_KEY] = unknown_row(unknown, len(self.COLUMNS))
        self.query_one(KeyedTable).sync(rows)
        self.fit_width_to_content()


class LeasesPanel(Panel):
    COLUMNS: ClassVar[list[Column]] = [
        # The holder before the state (which the TTL implies): a takeover is a new holder and token.
        Column("name", "Lease", 0, text=True, min_width=8), Column("state", "State", 4, yields_to_names=True),
        Column("holder", "Holder", 3, text=True),
        Column("token", "Token", 2), Column("expires", "TTL", 1),
    ]

    def __init__(self) -> None:
        super().__init__("Leases", id="leases")
        self._lease_snapshot: Snapshot | None = None
        self._filter_text = ""
        self._received = 0.0
        # Per host: the latest sample's time and when it arrived (monotonic), so that a tab shown
        # again counts down from its sample's arrival, not from the moment it is shown.
        self._arrivals: dict[str, tuple[datetime, float]] = {}
        # A replay's recorded clock: the countdown runs on it (paused, stepped, at x8); live, it
        # runs from when the sample arrived, on this machine's monotonic clock.
        self.clock: Callable[[], datetime] | None = None

    def record(self, snapshot: Snapshot) -> None:
        """Note when a sample arrived (once per sample), shown or not."""
        host = snapshot.host
        known = self._arrivals.get(host)
        if known is None or known[0] != snapshot.taken_at:
            self._arrivals[host] = (snapshot.taken_at, time.monotonic())

    def compose(self):
        yield KeyedTable(self.COLUMNS, id="leases-table")

    def on_mount(self) -> None:
        # The countdown runs locally between samples: no query per second.
        self._countdown = self.set_interval(1.0, self._tick)

    def show(self, snapshot: Snapshot, filter_text: str = "") -> None:
        self.record(snapshot)
        taken_at, received = self._arrivals[snapshot.host]
        self._received = received if taken_at == snapshot.taken_at else time.monotonic()
        self._lease_snapshot, self._filter_text = snapshot, filter_text
        self._tick()
        # Counted from this sample: with samples every second the countdown never needs a
        # repaint of its own between them (one repaint a second, not two).
        self._countdown.reset()

    def _tick(self) -> None:
        if self._lease_snapshot is None:
            return
        if self.clock is not None:
            elapsed = max(0.0, (self.clock() - self._lease_snapshot.taken_at).total_seconds())
        else:
            elapsed = time.monotonic() - self._received
        rows: dict[str, tuple[object, ...]] = {}
        for lease in self._lease_snapshot.leases:
            if not _matches(self._filter_text, lease.name, lease.holder):
                continue
            left = None if lease.expires_in_s is None else lease.expires_in_s - elapsed
            state = lease.state if not (lease.state == "held" and left is not None and left <= 0) else "expired"
            style = {"held": "green", "expired": "bold red", "free": "dim"}.get(state, "")  # a recording may say anything
            rows[lease.name] = (
                fmt.inert(lease.name), fmt.plain(state, style=style), fmt.inert(lease.holder or "-"), fmt.count(lease.token),
                Text(fmt.seconds(left), style="bold red" if left is not None and left <= 0 else ""),
            )
        unknown = self._lease_snapshot.unknown_list("leases")
        if unknown is not None:
            rows[UNKNOWN_KEY] = unknown_row(unknown, len(self.COLUMNS))
        self.query_one(KeyedTable).sync(rows)


def _wait_cycles(blocked: tuple[BlockedSession, ...]) -> list[list[int]]:
    """The sessions in wait cycles, one list per cycle, each in the order of its waits."""
    members = {b.pid: b for b in blocked if b.in_cycle}
    cycles: list[list[int]] = []
    seen: set[int] = set()
    for start in sorted(members):
        if start in seen:
            continue
        order, current = [], start
        while current in members and current not in order:
            order.append(current)
            current = next((p for p in sorted(members[current].blocked_by) if p in members), start)
        seen.update(order)
        cycles.append(order)
    return cycles


def _deadlock_countdown(snapshot: Snapshot, members: list[BlockedSession]) -> str:
    """When the server will look for the deadlock: deadlock_timeout after a member began to wait
    (the server's setting; a session may have set its own)."""
    timeout = snapshot.server.deadlock_timeout_s
    waited = max((m.wait_s or 0.0 for m in members), default=0.0)
    if timeout is None:
        return "deadlock: broken after deadlock_timeout"
    left = timeout - waited
    if left > 0:
        return f"deadlock: broken in ≤{fmt.seconds(left)} (deadlock_timeout {timeout:g}s)"
    return f"deadlock, past deadlock_timeout {timeout:g}s (a session set its own?)"


def label_width(tree_width: int, depth: int) -> int:
    """The cells a tree label at `depth` has: the guides take 2 cells a level and 2 for the arrow."""
    return tree_width - 2 * depth - 2


# The Locks tree's labels: each part whole, in order (the figures first), a text part shortened
# with an ellipsis, never a figure; every text from the database inert (fit_segments).


def blocker_label(r: Blocker, tree_width: int) -> Text:
    """A root blocker: its pid, state, how many it blocks, its transaction's age, its application
    and query."""
    return fit_segments([
        (f"{r.pid} ", "bold", False),
        (SHORT_STATES.get(r.state or "?", r.state or "?"), "bold red" if r.state in CULPRIT_STATES else "yellow", False),
        (f"  blocks {r.blocked_count}", "", False), (f"  xact {fmt.seconds(r.xact_age_s)}", "", False),
        (f"  {r.application or '-'}", "cyan", True), (f"  {fmt.one_line(r.query, 200)}", "", True),
    ], label_width(tree_width, 1))


def prepared_label(p: PreparedXact, tree_width: int) -> Text:
    """A prepared transaction at the root of waits: no session holds it."""
    return fit_segments([
        ("prepared ", "bold red", False), (f"{p.gid!r}", "bold", True), (f"  blocks {p.blocked_count}", "", False),
        (f"  age {fmt.seconds(p.age_s)}", "", False), ("  no session: COMMIT or ROLLBACK PREPARED", "yellow", True),
        (f"  {p.owner or '?'}@{p.database or '?'}", "cyan", True),
    ], label_width(tree_width, 1))


def blocked_label(b: BlockedSession, depth: int, tree_width: int, here: str | None) -> Text:
    """A waiting session at `depth`: how long it waits, for what, its application and query
    (`here`: the database the dashboard watches, named only when the lock is in another)."""
    return fit_segments([
        (f"{b.pid} ", "bold", False), (f"waits {fmt.seconds(b.wait_s)}", "red", False),
        (f"  {(b.mode or '?').removesuffix('Lock')}", "", True),
        (f" {fmt.lock_target(b, here, with_row=False)}", "magenta", True),
        (f" {b.row}" if b.row and b.lock_type in ("transactionid", "tuple") else "", "magenta", False),  # a ctid: whole or absent
        (f"  {b.application or '-'}", "cyan", True),
        (f"  {fmt.one_line(b.query, 200)}", "", True),
    ], label_width(tree_width, depth))


class LockTree(Tree[int]):
    """The blocking tree, without a scrollbar: the panel's border says which lines are shown."""

    DEFAULT_CSS = """
    LockTree { scrollbar-size: 0 0; }
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._rows_shown: tuple[int, int, int] | None = None

    def process_label(self, label: str | Text) -> Text:
        """A label is never markup (Tree reads a str label as markup) and never holds a control
        character, whoever builds it; the labels here are built inert already (fit_segments)."""
        if isinstance(label, str):
            return Text(fmt.inert(label))
        plain = label.plain
        if not (plain.isascii() and plain.isprintable()) and fmt.inert(plain) != plain:
            return Text(fmt.inert(plain), style=label.style)  # its spans would no longer fit
        return label

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        self.report_rows()

    def on_resize(self) -> None:
        self.report_rows()

    def report_rows(self) -> None:
        shown = rows_shown(self.last_line + 1, self.size.height, self.scroll_y)
        if shown != self._rows_shown:
            self._rows_shown = shown
            self.post_message(RowsShown(shown))


class LocksPanel(Panel):
    """The blocking tree: root blocker → the sessions it blocks → ... Rebuilt only when the tree's
    shape changes; otherwise labels (wait times) are refreshed in place."""

    def __init__(self) -> None:
        super().__init__("Locks", id="locks")
        self._shape: tuple = ()
        self._tree_nodes: dict[tuple[int, ...], TreeNode[int]] = {}
        self._labels: dict[tuple[int, ...], object] = {}  # the frozen sample each label shows
        self._last_facts: tuple | None = None
        self._snapshot: Snapshot | None = None
        self._filter_text = ""

    def compose(self):
        tree = LockTree("no blocked sessions", id="locks-tree")
        tree.show_root = True
        tree.guide_depth = 2
        yield tree

    def show(self, snapshot: Snapshot, filter_text: str = "") -> None:
        self._snapshot, self._filter_text = snapshot, filter_text
        facts = (snapshot.blocked, snapshot.blockers, snapshot.prepared_xacts, snapshot.app_locks, filter_text)
        if facts == self._last_facts:
            return  # the same tree: nothing to rebuild or relabel
        self._last_facts = facts
        tree = self.query_one(LockTree)
        blocked = {b.pid: b for b in snapshot.blocked}
        roots = {r.pid: r for r in snapshot.blockers}
        prepared = {f"prepared:{p.gid}": p for p in snapshot.prepared_xacts if p.blocked_count}
        # Who waits under whom: a session (pid) or a prepared transaction ("prepared:<gid>").
        children: dict[object, list[int]] = {}
        for b in blocked.values():
            for parent in b.blocked_by:
                children.setdefault(parent, []).append(b.pid)
            for gid in b.blocked_by_prepared:
                children.setdefault(f"prepared:{gid}", []).append(b.pid)

        def waiters_match(node: object, *fields: object) -> bool:
            return _matches(filter_text, *fields, *[blocked[c].application for c in children.get(node, []) if c in blocked])

        visible_roots: list[object] = [pid for pid in roots if waiters_match(pid, roots[pid].application, roots[pid].query)]
        visible_roots += [key for key, p in prepared.items() if waiters_match(key, p.gid, p.owner, p.database)]
        cycles = {f"cycle:{n}": members for n, members in enumerate(_wait_cycles(snapshot.blocked), 1)
                  if any(_matches(filter_text, blocked[m].application, blocked[m].query) for m in members)}

        width = max(20, tree.size.width)

        def label_cycle(key: str) -> Text:
            members = cycles[key]
            return fit_segments([
                ("wait cycle ", "bold red", False), (" → ".join(map(str, [*members, members[0]])), "bold", False),
                (f"  {_deadlock_countdown(snapshot, [blocked[m] for m in members])}", "yellow", True),
            ], label_width(width, 1))

        def sample_of(path: tuple) -> object:
            """What a node's label shows: its label is rebuilt only when this changes."""
            node = path[-1]
            if isinstance(node, str) and node.startswith("cycle:"):
                return tuple(blocked[m] for m in cycles[node])  # the members' waits: the countdown
            if isinstance(node, str):
                return prepared[node]
            return roots[node] if len(path) == 1 and node in roots else blocked.get(node)

        def label_of(path: tuple) -> Text:
            node = path[-1]
            if isinstance(node, str):
                return label_cycle(node) if node.startswith("cycle:") else prepared_label(prepared[node], width)
            if len(path) == 1 and node in roots:
                return blocker_label(roots[node], width)
            return blocked_label(blocked[node], len(path), width, snapshot.server.database)

        # Shape: which node hangs under which path. Labels change every tick; the shape rarely.
        paths: list[tuple] = []

        def walk(path: tuple, skip: frozenset = frozenset()) -> None:
            paths.append(path)
            for child in sorted(children.get(path[-1], [])):
                if child not in path and child not in skip and len(path) < 12:
                    walk((*path, child), skip)

        for root in visible_roots:
            walk((root,))
        for key, members in cycles.items():
            # The cycle, then each member with whatever waits on it (its fellow members are
            # listed once, beside it, not under it).
            paths.append((key,))
            for member in members:
                walk((key, member), frozenset(members))
        shape = tuple(paths)
        count = len(blocked)
        # The summary, fitted like every line: each count whole or left out.
        summary = [(f"{count} blocked session(s)", "bold red", False)]
        if cycles:  # the rarest and worst first
            summary.append((f", {len(cycles)} wait cycle(s)", "bold red", False))
        if prepared:
            summary.append((f", {len(prepared)} prepared transaction(s)", "bold red", False))
        summary.append((f", {len(roots)} root blocker(s)", "bold red", False))
        if not count:
            # "None blocked" only when the probe read the locks: a failed probe (no privilege, a
            # lock timeout) or none run (a replay before the host's recording) knows nothing.
            status = snapshot.probes.get("locks")
            if status is None:
                summary = [("locks not sampled", "dim", False)]
            elif status.error:
                summary = [("blocked sessions unknown: ", "bold yellow", False),
                           (fmt.one_line(status.error, 200), "yellow", True)]
            else:
                summary = [("no blocked sessions", "green", False)]
        # Application locks held (advisory locks; sp_getapplock's): seen before anyone waits.
        held = [a for a in snapshot.app_locks if a.granted and _matches(filter_text, a.resource, a.application)]
        if held:
            summary.append((f", {len(held)} app lock(s) held", "", False))
            names = ", ".join(f"{a.resource} by {a.pid}" for a in held[:5]) + (", …" if len(held) > 5 else "")
            summary.append((f": {names}", "dim", True))
        root_label = fit_segments(summary, width - 2)
        if root_label.plain != str(tree.root.label):
            tree.root.set_label(root_label)
        if shape != self._shape:
            tree.root.remove_children()
            self._tree_nodes = {}
            self._labels = {}
            parents = {path[:-1] for path in paths}
            for path in paths:
                under = tree.root if len(path) == 1 else self._tree_nodes[path[:-1]]
                label, sample = label_of(path), sample_of(path)
                data = path[-1] if isinstance(path[-1], int) else None  # a session: c, k and Enter act on it
                # A session nobody waits on is a leaf: no ▼ that would open nothing.
                self._tree_nodes[path] = under.add(label, data=data, expand=True) if path in parents \
                    else under.add_leaf(label, data=data)
                self._labels[path] = sample
            tree.root.expand()
            self._shape = shape
            self.call_after_refresh(tree.report_rows)
        else:
            # Only labels whose facts changed are rebuilt and set: each set_label repaints.
            for path, node in self._tree_nodes.items():
                sample = sample_of(path)
                if sample != self._labels.get(path):
                    node.set_label(label_of(path))
                    self._labels[path] = sample

    def on_resize(self) -> None:
        # The labels are fitted to the width: fit them again.
        if self._snapshot is not None:
            self._last_facts, self._labels = None, {}
            self.show(self._snapshot, self._filter_text)

    @property
    def selected_pid(self) -> int | None:
        node = self.query_one(Tree).cursor_node
        return None if node is None else node.data


class ConnectionsPanel(Panel):
    HORIZON: ClassVar[dict[str, str]] = {"postgresql": "xmin", "mssql": "snapshot"}
    # Sessions: how many connections are in that state, or come from that application.
    COLUMNS: ClassVar[list[Column]] = [Column("n", "Sessions", 0), Column("what", "By", 1, yields_to_names=True),
                                       Column("name", "State/app", 0, text=True)]
    SORTS: ClassVar[tuple[tuple[str, str], ...]] = (("given", "state, then app"), ("sessions", "sessions ↓"), ("name", "name"))

    def __init__(self) -> None:
        super().__init__("Connections", id="connections")
        self._histories: dict[str, deque[float]] = {}  # per host: total sessions over the samples seen
        self._recorded: dict[str, datetime] = {}
        self._history: deque[float] = deque(maxlen=60)  # the shown host's
        self._shown_host: str | None = None
        self._summary_text = ""
        self._connections: Connections | None = None
        self._unknown: str | None = None  # why the connections are unknown (the probe failed)
        self._horizon = "xmin"


    def record(self, snapshot: Snapshot) -> None:
        """Add a sample to its host's history of sessions (once per sample), shown or not."""
        if snapshot.connections is None:
            return
        new = _new_sample(self._recorded, snapshot)
        if new is None:
            return
        history = self._histories.setdefault(snapshot.host, deque(maxlen=60))
        if new == "earlier":  # a replay went back in time
            history.clear()
        history.append(float(snapshot.connections.total))

    def compose(self):
        yield Static("", id="connections-summary")
        yield Sparkline([], id="connections-spark")
        yield KeyedTable(self.COLUMNS, id="connections-table")

    def show(self, snapshot: Snapshot, filter_text: str = "") -> None:
        # What holds the cleanup horizon back, in the database's words: PostgreSQL's xmin, SQL
        # Server's oldest snapshot transaction (which keeps the version store from shrinking).
        self._horizon = self.HORIZON.get(snapshot.server.dialect, "xmin")
        self.record(snapshot)
        host = snapshot.host
        self._history = self._histories.setdefault(host, deque(maxlen=60))
        c = snapshot.connections
        if c is None:
            # Another host's figures must not stay under this one's name, nor any where nothing was
            # sampled (a replay before this host's recording begins: no probe ran), nor any where
            # the probe failed: the sessions are unknown, and the summary says why.
            unknown = snapshot.unknown_list("connections")
            other_host = host != self._shown_host
            if other_host or "connections" not in snapshot.probes or unknown is not None:
                self._shown_host, self._connections, self._summary_text = host, None, ""
                self._unknown = unknown
                self.border_title = "Connections"
                self.query_one("#connections-summary", Static).update("", layout=False)
                if other_host or unknown is None:  # this host's history of sessions stays: it was seen
                    self.query_one(Sparkline).data = []
                self.query_one(KeyedTable).sync({})
                self._render_summary()
            return
        self._shown_host = host
        self._connections, self._unknown = c, None
        self._render_summary()
        spark = self.query_one(Sparkline)
        history = list(self._history)
        if spark.data != history:
            spark.data = history
        entries = [("state", state, n) for state, n in c.by_state.items()]
        entries += [("app", app, n) for app, n in c.by_application.items() if _matches(filter_text, app)]
        if self.sort == "sessions":
            entries.sort(key=lambda e: -e[2])  # stable: states before apps among equals
        elif self.sort == "name":
            entries.sort(key=lambda e: (e[1] or "").lower())
        rows: dict[str, tuple[object, ...]] = {}
        for what, name, n in entries:
            label = fmt.plain(SHORT_STATES.get(name, name), style="bold red" if name in CULPRIT_STATES else "") \
                if what == "state" else (fmt.inert(name) or "(none)")
            rows[f"{what}:{name}"] = (fmt.count(n), what, label)
        self.query_one(KeyedTable).sync(rows)


    def _render_summary(self) -> None:
        c = self._connections
        width = max(10, self.query_one("#connections-summary", Static).size.width - 2)
        if c is None:
            if self._unknown is not None:  # the probe failed: no figure, and why
                line = fit_segments([("sessions unknown: ", "bold yellow", False), (fmt.one_line(self._unknown, 300), "yellow", True)],
                                    width)
                if line.plain != self._summary_text:
                    self._summary_text = line.plain
                    self.query_one("#connections-summary", Static).update(line, layout=False)
            return
        holder = xmin_holder(c, words="short")
        xmin_style = "bold yellow" if holder else ""
        session = c.xmin_holder_kind in (None, "session")
        # The second line fitted to the width: each figure whole or left out, the app name cut last.
        oldest = fit_segments([
            ("oldest xact ", "", False), (fmt.seconds(c.oldest_xact_age_s), "bold", False),
            (f" pid {c.oldest_xact_pid}" if c.oldest_xact_pid else "", "", False),
            (f" · {self._horizon} {holder}" if holder and session else "", xmin_style, False),
            # A prepared transaction's gid or a slot's name: a name, cut last but one.
            (f" · {self._horizon} {holder}" if holder and not session else "", xmin_style, True),
            (f" · version store {fmt.kilobytes(c.version_store_kb)}" if c.version_store_kb is not None else "", "", False),
            (f" {c.xmin_holder_application}" if holder and session and c.xmin_holder_application else "", xmin_style, True),
        ], width)
        # Sessions against max_connections in the title: the lines below are for the rows.
        title = f"Connections {fmt.sessions(c.total, c.max)}"
        if self.border_title != title:
            self.border_title = title
        if oldest.plain != self._summary_text:  # repaint only what changed
            self._summary_text = oldest.plain
            self.query_one("#connections-summary", Static).update(oldest, layout=False)  # fixed height

    def on_resize(self) -> None:
        self._render_summary()  # refit the line to the new width
        # The history line only where it leaves room for at least three rows.
        self.query_one(Sparkline).display = self.size.height - 2 >= 6


class CompactionPanel(Panel):
    """Pattern 5's compactor: delta rows waiting to be folded, per group, and its last run (in the
    border's subtitle, so the table keeps every line)."""

    COLUMNS: ClassVar[list[Column]] = [Column("pending", "Pending", 0), Column("group", "Group", 0, text=True, min_width=5)]

    def __init__(self) -> None:
        super().__init__("Compaction", id="compaction")

    def compose(self):
        yield KeyedTable(self.COLUMNS, id="compaction-table")

    def show(self, snapshot: Snapshot, filter_text: str = "") -> None:
        rows: dict[str, tuple[object, ...]] = {}
        subtitles: tuple[str, ...] = ()
        for c in snapshot.compaction:
            total = Text(fmt.count(c.pending_deltas, c.pending_is_estimate), style="bold yellow" if c.pending_deltas else "")
            rows[f"all:{c.name}"] = (total, Text(f"all ({c.groups:,} group{'' if c.groups == 1 else 's'})", style="bold"))
            for g in c.by_group:
                if _matches(filter_text, g.title, g.group):
                    rows[f"group:{c.name}:{g.group}"] = (
                        fmt.count(g.pending_deltas, c.pending_is_estimate), f"#{g.group} {fmt.one_line(g.title, 40)}"
                    )
            if c.last_run_at is None:
                subtitles = ("never compacted", "never run")
            else:
                ago = fmt.seconds(max(0.0, (snapshot.taken_at - c.last_run_at).total_seconds()))
                subtitles = (f"{ago} ago: {fmt.count(c.last_rows_folded)} folded", f"ran {ago} ago", ago)
        unknown = snapshot.unknown_list("compaction")
        if unknown is not None:
            rows[UNKNOWN_KEY] = unknown_row(unknown, len(self.COLUMNS), at=1)
        self.set_subtitle("last run", *subtitles)
        self.query_one(KeyedTable).sync(rows)
        self.fit_width_to_content()
