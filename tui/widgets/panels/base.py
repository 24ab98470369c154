"""What every panel shares: the `Panel` base (border, subtitle, sort, fitted width) and the
helpers the panels' rows and labels are built with."""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

from rich.cells import cell_len
from rich.text import Text
from textual.containers import Vertical

from probes.model import Snapshot

from ... import format as fmt
from ..keyed_table import KeyedTable, RowsShown, shorten

# The Locks tree's labels and the Connections rows are one line each: the long session states
# said short.
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


def new_sample(recorded: dict[str, datetime], snapshot: Snapshot) -> str | None:
    """Whether `snapshot` is a sample of its host not yet recorded: "later" or "earlier" (a replay
    went back) than the last one, noting it; None when it is that one again."""
    last = recorded.get(snapshot.host)
    if last == snapshot.taken_at:
        return None
    recorded[snapshot.host] = snapshot.taken_at
    return "earlier" if last is not None and snapshot.taken_at < last else "later"


def matches_filter(filter_text: str, *fields: object) -> bool:
    """Whether a row is shown under `filter_text`: one of its `fields` holds it, in any case."""
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
