"""What every panel shares: the `Panel` base (border, subtitle, sort, fitted width) and the
helpers the panels' rows and labels are built with."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from typing import Any, ClassVar

from rich.cells import cell_len, set_cell_size
from rich.text import Text
from textual.containers import Vertical
from textual.widget import Widget

from probes.model import Snapshot

from ... import format as fmt
from ...filters import EMPTY, Filter
from ..cells import shorten
from ..keyed_table import KeyedTable, RowsShown

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


# The kinds of a wrapped label's parts (wrap_segments).
FIGURE, WORDS, PHRASE, CUT = "figure", "words", "phrase", "cut"
_TOKENS = re.compile(r"\s*\S+")


def wrap_segments(segments: list[tuple[str, str, str]], width: int, more_width: int) -> list[Text]:
    """(text, style, kind) parts laid out over lines: the first `width` cells wide, the next ones
    `more_width`. Nothing is ever cut inside a word:

    - FIGURE: whole, on the line where it fits (the next one if need be), never cut;
    - WORDS: an explanation, whole, broken between words over as many lines as it takes;
    - PHRASE: words that read as one (a lock mode: "holds ACCESS EXCLUSIVE"), on one line, the
      next one if need be; broken as WORDS only where no line could hold them;
    - CUT: a name or a query, on the line it starts on: whole, or its first words and an ellipsis
      (at least 6 cells of it), or left out.

    Every part is made inert (the labels quote applications, queries and lock names)."""
    # However deep a node (a chain twelve long in a narrow tree), a line holds a word or two: the
    # tree crops what it cannot show, and zoomed (z) it scrolls sideways.
    width, more_width = max(width, 8), max(more_width, 8)
    lines: list[list[tuple[str, str]]] = [[]]
    used = 0

    def room() -> int:
        return (width if len(lines) == 1 else more_width) - used

    def new_line() -> None:
        nonlocal used
        lines.append([])
        used = 0

    def put(text: str, style: str) -> None:
        nonlocal used
        line = lines[-1]
        if not line:
            text = text.lstrip()
        if line and line[-1][1] == style:  # one piece per style run: Text.assemble costs per piece
            line[-1] = (line[-1][0] + text, style)
        else:
            line.append((text, style))
        used += cell_len(text)

    for raw, style, kind in segments:
        text = fmt.inert(raw)
        if kind == FIGURE:
            if cell_len(text) > room() and lines[-1]:
                new_line()
            if cell_len(text.lstrip() if not lines[-1] else text) <= room():
                put(text, style)
            continue
        if kind == PHRASE and lines[-1] and cell_len(text) > room() and cell_len(text.lstrip()) <= more_width:
            new_line()
        tokens = _TOKENS.findall(text)
        if kind == CUT:
            if cell_len(text) <= room():
                put(text, style)
                continue
            taken = ""
            for token in tokens:
                if cell_len(taken + token) + 1 > room():
                    break
                taken += token
            if cell_len(taken.strip()) >= 6:  # a word or two: a letter or two would say nothing
                put(taken + "…", style)
            continue
        for token in tokens:  # WORDS, and a PHRASE
            if cell_len(token if lines[-1] else token.lstrip()) <= room():
                put(token, style)
                continue
            if lines[-1]:
                new_line()
            token = token.lstrip()
            while cell_len(token) > room():  # a word longer than a whole line: broken, nothing lost
                head = set_cell_size(token, room())
                put(head, style)
                token = token[len(head):]
                new_line()
            put(token, style)
    return [Text.assemble(*line) for line in lines if line]


# The border subtitle's parts, most important first: the first ones say the panel is incomplete or
# old, then what the operator chose it to leave out (a filter) or act on (tags).
SUBTITLE_PARTS = ("stale", "unknown", "filter", "tags", "rows", "hidden", "sort", "idle", "backends", "last run")


def fit_parts(parts: list[list[str]], room: int) -> list[str]:
    """One text of each part (its forms longest first), joined by ` · `, within `room` cells: as
    many parts as fit, the first ones first, each in its shortest form if need be; then, with the
    room left, each part in turn as long as it can be. A part that does not fit even short is left
    out (a later, shorter one may still fit)."""
    def width(texts: list[str]) -> int:
        return cell_len(" · ".join(texts))

    chosen: list[tuple[list[str], int]] = []  # (a part's forms, the one shown)
    for forms in parts:
        if forms and width([f[i] for f, i in chosen] + [forms[-1]]) <= room:
            chosen.append((forms, len(forms) - 1))
    for n, (forms, _i) in enumerate(chosen):  # then longer forms, the first parts first
        for i in range(len(forms)):
            trial = [f[j] for f, j in chosen]
            trial[n] = forms[i]
            if width(trial) <= room:
                chosen[n] = (forms, i)
                break
    return [forms[i] for forms, i in chosen]


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


def _shown_always(_row: object) -> bool:
    return True


def filter_forms(text: str) -> tuple[str, ...]:
    """The border's part for a filter, longest first: whole, its first words cut with an
    ellipsis, then only that one is on (`/…`): the border keeps every part whole or leaves it
    out, so a long filter still says it hides rows at 80 columns."""
    whole = f"/ {text}"
    forms = [whole]
    if len(text) > 14:
        forms.append(f"/ {text[:12].rstrip()}…")
    forms.append("/…")
    return tuple(forms)


def share_width(steps: list[list[tuple[int, int]]], room: int) -> list[int]:
    """Widths for parts within `room`, each with, for each of its columns in turn, the width that
    shows it and the width that shows it and those before it whole (`steps`): first each its
    first column (fairly, if even these do not fit); then its second, the cheapest first, while
    one fits; then those whole (fairly: names longer); then one more column at a time where it
    costs least; then what is left fairly to the parts whose names are cut, up to whole. What
    none can use is left (the part that fills the row takes it)."""
    shown = [0] * len(steps)
    shares = fair_shares([s[0][0] for s in steps], room)

    def more_columns(up_to: int) -> None:
        while True:
            left = room - sum(shares)
            costs = [(s[n + 1][0] - shares[i], i) for i, (s, n) in enumerate(zip(steps, shown, strict=True))
                     if n + 1 < min(len(s), up_to + 1) and s[n + 1][0] - shares[i] <= left]
            if not costs:
                return
            _cost, index = min(costs)
            shown[index] += 1
            shares[index] = max(shares[index], steps[index][shown[index]][0])

    def names_whole() -> None:
        lacks = [max(0, s[n][1] - share) for s, n, share in zip(steps, shown, shares, strict=True)]
        for index, extra in enumerate(fair_shares(lacks, room - sum(shares))):
            shares[index] += extra

    more_columns(1)  # a name and its first figure: a ring's used/capacity, a lease's TTL
    names_whole()  # a name cut beside free columns helps no one
    more_columns(max((len(s) for s in steps), default=0))
    names_whole()
    return shares


def fair_shares(needs: list[int], room: int) -> list[int]:
    """Widths for parts that need `needs` within `room`: each what it needs if all fit, else the
    smallest needs met first and the rest shared evenly (max-min fair)."""
    shares = [0] * len(needs)
    left = max(0, room)
    order = sorted(range(len(needs)), key=needs.__getitem__)
    for done, index in enumerate(order):
        shares[index] = min(needs[index], left // (len(needs) - done))
        left -= shares[index]
    return shares


def share_row(row: object) -> None:
    """Share a row's width among its panels that fit their width to their rows (Rings,
    Compaction) and the one that takes what is left (Leases, FILLS_ROW), by what each needs to show
    its rows whole: all of it where the row has room (the rest to the one that fills), else each
    its first columns, then one more column at a time where it costs least (share_width). Fixed
    shares (a percentage each) cut a ring's name or a group (`all (1 gro…`) while a neighbour had
    columns to spare. The other panels of the row keep the stylesheet's widths. Nothing is set
    where nothing changed (no layout loop)."""
    if not isinstance(row, Widget) or row.size.width <= 0 or getattr(row.styles.layout, "name", None) != "horizontal":
        return  # not in a row: its width is its container's business
    panels = [w for w in row.children if isinstance(w, Panel) and w.display]
    if any(p.zoomed for p in panels):
        return
    shared = [p for p in panels if p._width_wanted or p.FILLS_ROW]
    if not any(p._width_wanted for p in shared):
        return
    room = row.size.width - sum(p.outer_size.width for p in panels if p not in shared)
    shares = share_width([p.width_steps() for p in shared], room)
    for panel, width in zip(shared, shares, strict=True):
        # The one that fills takes what the others leave (its share or more): a row that grows or
        # shrinks resizes it, and its resize shares the row again.
        panel._set_width("1fr" if panel.FILLS_ROW else width)


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
    # Takes the width its row leaves beside the panels fitted to their rows (share_row).
    FILLS_ROW: ClassVar[bool] = False
    # The fields its rows have for the filter (`/`, tui/filters.py): each field's value of a row;
    # a bare word looks into the FILTER_WORDS fields. A filter naming another field is refused
    # for this panel, saying which it has.
    FILTER_FIELDS: ClassVar[dict[str, Callable[[Any], object]]] = {}
    FILTER_WORDS: ClassVar[tuple[str, ...]] = ()

    def __init__(self, title: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self._title_base = title  # its title, as its panel sets it (show_title); the filter may join it
        self.border_title = title
        self._subtitles: dict[str, tuple[str, ...]] = {}
        self._subtitle_shown = ""
        self.sort = self.SORTS[0][0]
        self._width_wanted = 0
        self._width_set: int | str | None = None  # the width share_row gave it
        self._zoomed = False
        self._table: KeyedTable | None = None
        self.filter: Filter = EMPTY  # its own filter (`/` on the panel)
        self.passes: Callable[[Any], bool] = _shown_always  # whether a row passes it

    @property
    def filter_text(self) -> str:
        return self.filter.text

    def set_filter(self, flt: Filter) -> str | None:
        """Filter its rows by `flt` (EMPTY: none); the border says it. Returns why it is refused
        (a field its rows do not have; the filter it had stays), else None. The caller shows it
        again (PanelsView.show)."""
        refused = flt.refused_by(self.FILTER_FIELDS)
        if refused is not None:
            return f"{self.panel_name}: {refused}"
        self.filter = flt
        self.passes = flt.compile(self.FILTER_FIELDS, self.FILTER_WORDS)
        self.set_subtitle("filter", *(filter_forms(flt.text) if flt else ()))
        return None

    @property
    def panel_name(self) -> str:
        """Its name, as notices say it (its title may carry a count)."""
        return (self.id or type(self).__name__).capitalize()

    def on_mount(self) -> None:
        # Zoomed (`z`) and back (`z`, Escape): whoever maximizes the panel, it follows the screen.
        self.watch(self.screen, "maximized", self._maximized_changed, init=False)

    @property
    def zoomed(self) -> bool:
        """Whether the panel is zoomed (the screen's maximized widget)."""
        return self._zoomed

    def _maximized_changed(self, maximized: object) -> None:
        zoomed = maximized is self
        if zoomed == self._zoomed:
            return
        self._zoomed = zoomed
        if self._width_wanted or self.FILLS_ROW:  # its width shared out in its row: the zoom's own, then back
            if zoomed:
                self._set_width(None)
            else:
                share_row(self.parent)
        for table in self.query(KeyedTable):
            table.show_everything(zoomed)  # every column whole, scrolled sideways where narrower
        self.zoom_changed(zoomed)

    def zoom_changed(self, zoomed: bool) -> None:
        """Called when the panel is zoomed or back (its tables already show every column, or fit)."""

    def _set_width(self, width: int | str | None) -> None:
        """Its width in its row, set by share_row: cells, "1fr" (what the others leave: it
        follows the row's width, and its resize shares the row again), or None (the stylesheet's)."""
        if width == self._width_set:
            return
        self._width_set = width
        styles = self.styles
        if isinstance(width, str):
            styles.width, styles.min_width, styles.max_width = width, 0, None
        else:  # over the stylesheet's share of the row
            styles.width = styles.min_width = styles.max_width = width

    def _first_table(self) -> KeyedTable | None:
        """Its (first) table, looked up once: a DOM query per snapshot costs more than the rest of
        fitting the width."""
        if self._table is None:
            self._table = next(iter(self.query(KeyedTable)), None)
        return self._table

    def wanted_width(self) -> int:
        """The width (border included) that shows its table whole, and its title."""
        table = self._first_table()
        return max(table.ideal_width() if table is not None else 0, cell_len(self._title_base) + 4) + 2

    def width_steps(self) -> list[tuple[int, int]]:
        """For each column of its table in turn, the width (border included) at which it is shown
        and the one at which what is shown then is whole (KeyedTable.width_steps); never narrower
        than its title."""
        table = self._first_table()
        steps = table.width_steps() if table is not None else [(0, 0)]
        title = cell_len(self._title_base) + 4
        out = []
        for n, (shown, whole) in enumerate(steps):
            left_out = len(steps) - n - 1  # the border lists them, at least as `+2 (z)`
            note = cell_len(f"+{left_out} (z)") + 6 if left_out else 0
            out.append((max(shown, title, note) + 2, max(whole, title, note) + 2))
        return out

    def fit_width_to_content(self) -> None:
        """As wide as its table needs to show everything, as far as its row allows (share_row):
        for the small panels beside Leases, so each gets the width its names and figures need
        rather than a fixed share, and none is cut while a neighbour has columns to spare."""
        want = self.wanted_width()
        if want != self._width_wanted:
            self._width_wanted = want
            share_row(self.parent)

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

    @property
    def title_text(self) -> str:
        """Its title without the filter beside it (what notices name it by)."""
        return self._title_base

    def show_title(self, title: str) -> None:
        """Its title (a name, a count): the panel's own; its filter joins it where the border has room."""
        self._title_base = title
        self._render_title()

    def _title_filter(self) -> str | None:
        """The filter, whole, where the top border has room for it beside the title (the bottom
        one holds the rows, the hidden columns, the tags: there a long filter is cut to `/…`)."""
        if not self.filter or not self.size.width:
            return None
        whole = f"/ {self.filter.text}"
        return whole if cell_len(self._title_base) + 2 + cell_len(whole) + 6 <= self.size.width else None

    def _render_title(self) -> None:
        extra = self._title_filter()
        # A Text: a str border title is read as markup, and the filter is what the operator typed.
        title: str | Text = self._title_base if extra is None else Text(fmt.inert(f"{self._title_base}  {extra}"))
        if str(self.border_title) != str(title):
            self.border_title = title

    def _render_subtitle(self) -> None:
        self._render_title()
        subtitles = dict(self._subtitles)
        if self._title_filter() is not None:
            subtitles.pop("filter", None)  # whole in the title
        subtitle = " · ".join(fit_parts([[t for t in subtitles.get(part, ()) if t] for part in SUBTITLE_PARTS],
                                        self.size.width - 6 if self.size.width else 1_000))
        if subtitle != self._subtitle_shown:
            self._subtitle_shown = subtitle
            # A Text (a str border title is read as markup), inert: the stale part quotes an error.
            self.border_subtitle = Text(fmt.inert(subtitle))

    def on_resize(self) -> None:
        self._render_subtitle()
        if (self._width_wanted or self.FILLS_ROW) and not self._zoomed:
            share_row(self.parent)  # the row's width changed (or a neighbour's): share it again

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
        if message.table.everything:
            # Zoomed: every column whole, a window at a time; the border names those either side
            # (← and → move the window a column).
            left, right = message.left, message.right
            if not left and not right:
                self.set_subtitle("hidden")
                return
            def side(names: tuple[str, ...], arrow: str, before: bool) -> tuple[str, str]:
                if not names:
                    return "", ""
                return ((f"{arrow} {', '.join(names)}" if before else f"{', '.join(names)} {arrow}"),
                        (f"{arrow}{len(names)}" if before else f"{len(names)}{arrow}"))
            (left_long, left_short), (right_long, right_short) = side(left, "←", True), side(right, "→", False)
            forms = [f"{' · '.join(p for p in (left_long, right_long) if p)} (←/→ columns)",
                     f"{' · '.join(p for p in (left_long, right_short) if p)} (←/→)",
                     f"{' · '.join(p for p in (left_short, right_long) if p)} (←/→)",
                     f"{' · '.join(p for p in (left_short, right_short) if p)} (←/→)"]
            self.set_subtitle("hidden", *dict.fromkeys(sorted(forms, key=len, reverse=True)))
            return
        if hidden:
            self.set_subtitle("hidden", f"+{len(hidden)} hidden: {', '.join(hidden)} (z zoom)", f"+{len(hidden)} hidden (z)",
                              f"+{len(hidden)} (z)")
        else:
            self.set_subtitle("hidden")

    def show(self, snapshot: Snapshot) -> None:
        """Show what `snapshot` says (the rows its filter passes), changing only what changed."""
        raise NotImplementedError
