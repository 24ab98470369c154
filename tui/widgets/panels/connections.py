"""The Connections panel: sessions against the limit, the oldest transaction and what holds the
cleanup horizon, sessions by state and by application."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from datetime import datetime
from typing import Any, ClassVar

from rich.cells import cell_len
from rich.text import Text
from textual.widgets import Sparkline, Static

from probes.model import Connections, Snapshot

from ... import format as fmt
from ...report import horizon_age, xmin_holder
from ..keyed_table import Column, KeyedTable
from .base import CULPRIT_STATES, SHORT_STATES, Panel, fit_segments, new_sample


def near_limit_text(c: Connections, width: int) -> Text | None:
    """The warning line of a server whose connections are nearly all taken (Connections.near_limit:
    90 % of those ordinary roles may use): `2,002 of 2,097 usable connections in use (95 %)`, in
    the longest form that fits `width` with its figures whole; None below it."""
    if not c.near_limit or c.usable is None:
        return None
    percent = f"{100 * c.total / c.usable:.0f} %"
    used, usable = fmt.count(c.total), fmt.count(c.usable)
    forms = (f"{used} of {usable} usable connections in use ({percent})", f"{used} of {usable} usable in use ({percent})",
             f"{used}/{usable} usable ({percent})", f"{percent} of usable in use", f"{percent} used")
    text = next((form for form in forms if cell_len(form) <= width), forms[-1])
    return Text(text, style="bold red")


class ConnectionsPanel(Panel):
    HORIZON: ClassVar[dict[str, str]] = {"postgresql": "xmin", "mssql": "snapshot"}
    # Sessions: how many connections are in that state, or come from that application (`N` where
    # the panel is narrower than the two headers: the names beside the counts stay, 19 columns,
    # the blocked row's at 80).
    COLUMNS: ClassVar[list[Column]] = [Column("n", "Sessions", 0), Column("what", "By", 1, yields_to_names=True),
                                       Column("name", "State/app", 0, text=True, min_width=9)]
    SORTS: ClassVar[tuple[tuple[str, str], ...]] = (("given", "state, then app"), ("sessions", "sessions ↓"), ("name", "name"))

    # Its per-application lines (the states' lines stay: the whole's counts).
    FILTER_FIELDS: ClassVar[dict[str, Callable[[Any], object]]] = {"app": lambda app: app}
    FILTER_WORDS = ("app",)

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
        new = new_sample(self._recorded, snapshot)
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

    def show(self, snapshot: Snapshot) -> None:
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
                self.show_title("Connections")
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
        entries += [("app", app, n) for app, n in c.by_application.items() if self.passes(app)]
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
        width = max(10, self.query_one("#connections-summary", Static).size.width)  # the content's: padding apart
        if c is None:
            if self._unknown is not None:  # the probe failed: no figure, and why (on a line of its own where narrow)
                why = fmt.one_line(self._unknown, 300)
                lines = 1 if len("sessions unknown: ") + len(why) <= width else 2
                line = fit_segments([("sessions unknown: ", "bold yellow", False), (why, "yellow", True)], width) if lines == 1 \
                    else Text("\n").join([Text("sessions unknown: ", style="bold yellow"), fit_segments([(why, "yellow", True)], width)])
                summary = self.query_one("#connections-summary", Static)
                if summary.styles.height is None or summary.styles.height.value != lines:
                    summary.styles.height = lines
                if line.plain != self._summary_text:
                    self._summary_text = line.plain
                    summary.update(line, layout=False)
            return
        holder = xmin_holder(c, words="short")
        xmin_style = "bold yellow" if holder or c.xmin_holder_unknown else ""
        session = c.xmin_holder_kind in (None, "session")
        # How old the horizon is, where nothing else on the line says it (a standby's feedback, a
        # slot, a prepared transaction; a session's is its transaction's, the line above).
        age = horizon_age(c) if holder and not session else None
        age = age.replace("at least ", "≥") if age else age
        # The oldest transaction, then what holds the horizon: each figure whole or left out, a
        # name cut last. On one line where it fits whole, else on two (a narrow panel). Unknown
        # (other roles' sessions hidden) is said, never a calm "-".
        first = [("oldest xact ", "", False),
                 ("unknown", "bold yellow", False) if c.oldest_xact_unknown else (fmt.seconds(c.oldest_xact_age_s), "bold", False),
                 (f" pid {c.oldest_xact_pid}" if c.oldest_xact_pid else "", "", False)]
        if cell_len(first[0][0] + first[1][0]) > width:  # narrow (the blocked row at 80 columns): the figure before the words
            first[0] = ("oldest ", "", False)
        second = [
            (f"{self._horizon} unknown" if c.xmin_holder_unknown else "", xmin_style, False),
            (f"{self._horizon} {holder}" if holder and session else "", xmin_style, False),
            (f"{self._horizon} {age}" if age else "", xmin_style, False),
            # A standby's name and address, a prepared transaction's gid or a slot's name: a name, cut last but one.
            (f"{' ' if age else self._horizon + ' '}{holder}" if holder and not session else "", xmin_style, True),
            (f" {c.xmin_holder_application}" if holder and session and c.xmin_holder_application else "", xmin_style, True),
            (f"{' · ' if holder else ''}version store {fmt.kilobytes(c.version_store_kb)}" if c.version_store_kb is not None
             else "", "", False),
        ]
        if holder and not session and cell_len("".join(t for t, _s, _c in second)) > width:
            # Narrow: the kind's word ("standby", "slot", "prepared") gives way to the name it
            # qualifies; then, where even 8 cells of the name would not fit beside it, the age (an
            # age that names no holder says nothing; zoomed, both are there).
            quoted = holder.find(repr(c.xmin_holder_name)) if c.xmin_holder_name is not None else -1
            name = holder[quoted:] if quoted >= 0 else holder.split(" ", 1)[-1]
            if age and cell_len(f"{self._horizon} {age} ") + min(8, cell_len(name)) > width:
                second[2], second[3] = ("", "", False), (f"{self._horizon} {name}", xmin_style, True)
            else:
                second[3] = ((" " if age else f"{self._horizon} ") + name, xmin_style, True)
        whole = sum(cell_len(text) for text, _style, _cut in first + second) + (3 if any(t for t, _s, _c in second) else 0)
        if whole <= width or not any(text for text, _style, _cut in second):
            oldest = fit_segments([*first, *((" · " + t if i == 0 and t else t, st, cut)
                                             for i, (t, st, cut) in enumerate(x for x in second if x[0]))], width)
            lines = 1
        else:
            oldest = Text("\n").join([fit_segments(first, width), fit_segments(second, width)])
            lines = 2
        near = near_limit_text(c, width)
        if near is not None:  # first: consumers may soon be refused a connection
            oldest = Text("\n").join([near, oldest])
            lines += 1
        # Sessions against max_connections in the title: the lines below are for the rows.
        figures = fmt.sessions(c.total, c.max)
        # The count whole, with the panel's name where the border has room for both.
        title = next((t for t in (f"Connections {figures}", f"Conns {figures}") if len(t) + 4 <= self.size.width), figures) \
            if self.size.width else f"Connections {figures}"
        self.show_title(title)
        summary = self.query_one("#connections-summary", Static)
        if summary.styles.height is None or summary.styles.height.value != lines:
            summary.styles.height = lines
        if oldest.plain != self._summary_text:  # repaint only what changed
            self._summary_text = oldest.plain
            summary.update(oldest, layout=False)

    def on_resize(self) -> None:
        self._render_summary()  # refit the line to the new width
        table = self.query_one(KeyedTable)
        table.relabel({"n": "Sessions" if self.size.width >= 21 else "N"})
        # The history line only where it leaves room for at least three rows.
        self.query_one(Sparkline).display = self.size.height - 2 >= 6
