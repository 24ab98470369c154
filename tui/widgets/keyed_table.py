"""A DataTable that is updated in place from keyed rows: new keys added, gone keys removed,
changed cells updated; nothing rebuilt per tick (the way Dolphie does it).

It never shows a figure cut: it shows the columns that fit its width whole, in the order of
their priority, and says which it left out (`Fitted`). Only a text column (a name) may be
shortened, and then with an ellipsis. Zoomed (`show_everything`), it shows every column whole,
a window of them at a time beside the first (the row's name), moved sideways a column at a time
by ← and →, and says which columns lie either side (`Fitted.left`, `Fitted.right`): a column is
never cut at the edge of the screen.

The cursor is on a row, not a line: once the operator chose a row (moved the cursor, or focused
the table), it stays on that row's key while rows re-sort, come and go, and the columns are laid
out again; a panel whose row ends can put it on a row of its own saying so (`sync(cursor_to=)`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Self, cast

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual._two_way_dict import TwoWayDict
from textual.cache import LRUCache
from textual.coordinate import Coordinate
from textual.geometry import Region
from textual.message import Message
from textual.widgets import DataTable
from textual.widgets.data_table import CellKey, ColumnKey, RowKey

from .cells import cell_width as _cell_width
from .cells import inert_cell, shorten


class RowsShown(Message):
    """Which rows (lines) of a table or tree are on screen changed: (first, last, total), 1-based,
    or None when all are. Tables and trees here draw no scrollbar (its thumb, in the last column,
    reads as a glyph of the row); their panel's border says this instead."""

    def __init__(self, shown: tuple[int, int, int] | None) -> None:
        super().__init__()
        self.shown = shown


def rows_shown(total: int, room: int, scroll_y: float) -> tuple[int, int, int] | None:
    if total <= room:
        return None
    first = round(scroll_y)
    return first + 1, min(total, first + max(0, room)), total


@dataclass(frozen=True, slots=True)
class Column:
    key: str
    label: str
    priority: int = 0  # which go first when the width runs out: the highest; 0 never
    text: bool = False  # a name: may be shortened (with an ellipsis), down to min_width
    min_width: int = 10
    # Shown only once the text columns can be whole (a lease's state word is worth less than the
    # rest of its name); a text column always yields to the text columns before it.
    yields_to_names: bool = False


class KeyedTable(DataTable):
    DEFAULT_CSS = """
    /* No scrollbars: a thumb drawn in the last column looks like a glyph of the row; the panel's
       border says which rows are shown ("rows 1-4 of 7") instead. */
    KeyedTable { height: 1fr; overflow-x: hidden; scrollbar-size-vertical: 0; }
    """


    class Fitted(Message):
        """The columns left out changed (labels, in their order). Zoomed, those out of the window
        either side: `left` (→ brought them, ← brings them back) and `right` (→ brings them)."""

        def __init__(self, table: KeyedTable, hidden: tuple[str, ...], left: tuple[str, ...] = (),
                     right: tuple[str, ...] = ()) -> None:
            super().__init__()
            self.table = table
            self.hidden = hidden
            self.left = left
            self.right = right

    def __init__(self, columns: Sequence[Column | tuple[str, str]], *, pinned: int = 1, names_first: bool = False,
                 **kwargs) -> None:
        """`pinned`: how many first columns a zoomed table keeps beside its window of the others
        (the row's name; the Sessions list's pid and state). `names_first`: past its first two
        columns (a name and its first figure), a column is shown only where the names stay whole
        beside it, wherever they could be whole without it: a table whose width is shared in a
        row of panels (the small panels), where a name cut for a figure that could have been
        left out reads as a clipped name beside room (a lease `payments-rel…`)."""
        super().__init__(cursor_type="row", zebra_stripes=False, **kwargs)
        self._pinned = max(1, pinned)
        self._names_first = names_first
        # A bare (key, label) list: the first column is the name, the others go last first.
        self._spec = [c if isinstance(c, Column) else Column(c[0], c[1], priority=i, text=i == 0)
                      for i, c in enumerate(columns)]
        self._full: dict[str, tuple] = {}  # every column's cell, by row key
        self._widths = [cell_len(c.label) for c in self._spec]  # widest cell (or label) per column
        # Whether a column has a cell with something in it: a column blank in every row (nobody's
        # transaction open, nobody held up) yields to the names, as a figure that could be left out.
        self._filled = [False] * len(self._spec)
        self._visible: list[int] = list(range(len(self._spec)))
        self._text_widths: dict[int, int] = {}  # a shortened text column's width
        self.hidden: tuple[str, ...] = ()
        self._cells: dict[str, tuple] = {}
        self._shown: list[str] = []  # row keys in display order (kept here: the hot path compares it)
        # DataTable's own cell cache is keyed by a table-wide update counter, so one changed cell
        # re-renders every visible cell. This cache is keyed per cell by a version bumped only
        # when that cell's value changes. It falls back to DataTable's path if its internals change.
        self._cell_versions: dict[tuple[str, str], int] = {}
        self._own_cache: LRUCache[tuple, object] = LRUCache(4096)
        self._rows_shown: tuple[int, int, int] | None = None
        self._style_memo: Style | None = None
        self._everything = False  # every column whole, a window at a time (zoomed), not fitted
        self._first = self._pinned  # zoomed: the window's first column beside the pinned ones
        self.left: tuple[str, ...] = ()  # zoomed: the columns before the window, and after it
        self.right: tuple[str, ...] = ()
        # The cursor follows its row's key once the operator chose a row; not while the table
        # itself moves it (a rebuild, a reorder).
        self._chosen = False
        self._moving = 0

    @property
    def everything(self) -> bool:
        """Whether the table shows every column whole (zoomed) rather than those that fit."""
        return self._everything

    def show_everything(self, on: bool) -> None:
        """Every column, each cell whole, a window of them at a time beside the first where the
        widget is narrower (its panel zoomed: ← and → move it); off: back to the columns that fit
        the width, the others listed."""
        if on == self._everything:
            return
        self._everything = on
        self._first = self._pinned
        self.set_class(on, "-everything")
        if self.is_mounted:
            self._refit(force=True)

    def action_cursor_right(self) -> None:
        if self._everything:
            self.shift_window(1)
        else:
            super().action_cursor_right()

    def action_cursor_left(self) -> None:
        if self._everything:
            self.shift_window(-1)
        else:
            super().action_cursor_left()

    def shift_window(self, by: int) -> bool:
        """Zoomed: the window of columns a column further right (`by` 1) or left (-1), where there
        are columns that way; False when there are none."""
        if not self._everything or (by > 0 and not self.right) or (by < 0 and not self.left):
            return False
        self._first = max(self._pinned, min(len(self._spec) - 1, self._first + by))
        self._refit()
        return True

    # -- the cursor on its row ------------------------------------------------------------

    def cursor_key(self) -> str | None:
        """The key of the row under the cursor, None when there is none."""
        if not self.row_count:
            return None
        try:
            key = self._row_locations.get_key(self.cursor_row)
        except AttributeError:  # DataTable internals changed
            key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key
        return None if key is None or key.value is None else str(key.value)

    def watch_cursor_coordinate(self, old_coordinate: Coordinate, new_coordinate: Coordinate) -> None:
        super().watch_cursor_coordinate(old_coordinate, new_coordinate)
        if not self._moving and old_coordinate != new_coordinate:
            self._chosen = True  # the operator's keys or mouse, or a panel's select: follow it now

    def on_focus(self) -> None:
        self._chosen = True  # the row it shows highlighted is the one C, K and Enter act on

    def followed_key(self) -> str | None:
        """The row to keep the cursor on through a change: the chosen one, if any."""
        return self.cursor_key() if self._chosen or self.has_focus else None

    def _follow(self, key: str | None) -> None:
        """Put the cursor back on `key`'s row, wherever it went (the line under the cursor is
        another row's after a re-sort); nothing when it is gone."""
        if key is None:
            return
        try:
            index = self._row_locations.get(RowKey(key))
        except AttributeError:  # DataTable internals changed
            index = self.get_row_index(key) if key in self._cells else None
        if index is None or index == self.cursor_row:
            return
        self._moving += 1
        try:
            self.move_cursor(row=index, scroll=self.has_focus)
        finally:
            self._moving -= 1

    def on_mount(self) -> None:
        self._add_columns()

    def _add_columns(self) -> None:
        for index in self._visible:
            column = self._spec[index]
            self.add_column(column.label, key=column.key, width=self._text_widths.get(index))

    # -- fitting the width ---------------------------------------------------------------

    def _fit(self) -> tuple[list[int], dict[int, int]]:
        """The columns to show, by priority, each whole, within the width; a text column at
        least its min_width, then widened with what is left, up to its widest cell. Zoomed
        (`show_everything`): every column, whole."""
        if self._everything:
            return self._window()
        available = self.size.width
        if available <= 0:
            return self._visible, self._text_widths
        pad = 2 * self.cell_padding
        chosen: list[int] = []
        used = 0
        for index in self._by_priority():
            column = self._spec[index]
            need = (self._base(index) if column.text else self._widths[index]) + pad
            # A second text column (a lease's holder) only once the more important ones (its
            # name) can be whole: a name cut to make room for a holder helps no one.
            deficit = sum(self._widths[i] - self._base(i) for i in chosen if self._spec[i].text)
            if not self._yields(index, len(chosen), names_whole=used + deficit <= available):
                deficit = 0
            if chosen and used + need + deficit > available:
                break  # this one and every less important one stay out
            chosen.append(index)
            used += need
        text_widths: dict[int, int] = {}
        left = available - used
        for index in chosen:
            column = self._spec[index]
            if column.text:
                base = self._base(index)
                width = min(self._widths[index], base + max(0, left))
                left -= width - base
                if width < self._widths[index]:
                    text_widths[index] = width
        return sorted(chosen), text_widths

    def _window(self) -> tuple[list[int], dict[int, int]]:
        """Zoomed: the pinned columns (the row's name) and, from the window's first, as many
        columns as fit whole; a text column too wide for the screen alone (a query) is shortened
        when it is the window's first. The others are either side of it (`left`, `right`)."""
        count = len(self._spec)
        available = self.size.width
        pinned = min(self._pinned, count)
        if available <= 0 or pinned >= count:
            return list(range(count)), {}
        pad = 2 * self.cell_padding
        chosen = list(range(pinned))
        text_widths: dict[int, int] = {}
        used = sum(self._widths[i] + pad for i in chosen)
        if used > available and self._spec[0].text:
            text_widths[0] = max(self._base(0), available - pad - (used - self._widths[0] - pad))
            used = available
        first = max(pinned, min(self._first, count - 1))
        for index in range(first, count):
            need = self._widths[index] + pad
            if used + need <= available:
                chosen.append(index)
                used += need
                continue
            room = available - used - pad
            if index == first and self._spec[index].text and room >= self._base(index):
                chosen.append(index)
                text_widths[index] = room
                used = available
            break
        # The last column reached with room left (a wider screen): the columns before the window
        # come back into it, whole, the nearest first.
        while chosen[-1] == count - 1 and first > pinned and not text_widths.get(first) \
                and used + self._widths[first - 1] + pad <= available:
            first -= 1
            chosen.insert(pinned, first)
            used += self._widths[first] + pad
        self._first = first
        return chosen, text_widths

    def ideal_width(self) -> int:
        """The width that shows every column and every cell whole (with the scrollbar's column)."""
        return sum(width + 2 * self.cell_padding for width in self._widths) + 1

    def column_widths(self) -> tuple[int, ...]:
        """Each column's widest cell (or label): what its width_steps are worked out from."""
        return tuple(self._widths)

    def width_steps(self) -> list[tuple[int, int]]:
        """For each column in turn (as `_fit` picks them: by priority, the names at their
        narrowest, a second name once the first can be whole): the width at which it is shown,
        and the width at which the columns shown then are all whole (their names too)."""
        pad = 2 * self.cell_padding
        steps: list[tuple[int, int]] = []
        chosen: list[int] = []
        used = 0  # no scrollbar beside the rows (ideal_width counts one)
        for index in self._by_priority():
            column = self._spec[index]
            need = (self._base(index) if column.text else self._widths[index]) + pad
            used += need
            deficit = sum(self._widths[i] - self._base(i) for i in chosen if self._spec[i].text)
            # A names_first figure first shows at `used` where that is narrower than the names
            # whole without it (they cannot be whole: it is shown as in any table, need <
            # deficit), else where the names stay whole beside it (used + deficit).
            owed = deficit if self._yields(index, len(chosen), names_whole=need >= deficit) else 0
            chosen.append(index)
            shown = max(used + owed, steps[-1][0] if steps else 0)
            whole = used + sum(self._widths[i] - self._base(i) for i in chosen if self._spec[i].text)
            steps.append((shown, max(shown, whole)))
        return steps

    def _by_priority(self) -> list[int]:
        """The columns in the order they are given room: by priority, those blank in every row
        last (a blank column shown while a figure or a name is left out says nothing); the first
        column (the row's name) first whatever it holds."""
        filled = self._filled
        return sorted(range(len(self._spec)), key=lambda i: (i > 0 and not filled[i], self._spec[i].priority, i))

    def _yields(self, index: int, before: int, *, names_whole: bool) -> bool:
        """Whether the column at `index`, with `before` columns chosen ahead of it, is shown only once the text
        columns before it can be whole: a second name (a lease's holder), a column that yields to
        names, and in a `names_first` table every column past the first two where the names can
        be whole without it (`names_whole`), and a column blank in every row (`_filled`). Where
        they cannot (a name longer than the row), a figure left out would not make them whole:
        it is shown as in any table."""
        column = self._spec[index]
        return column.text or column.yields_to_names or (self._names_first and before >= 2 and names_whole) \
            or (before >= 1 and not self._filled[index])

    def _base(self, index: int) -> int:
        """A text column's narrowest: its min_width, never narrower than its header (a cut header
        reads as another word), never wider than its widest cell."""
        column = self._spec[index]
        return min(max(column.min_width, cell_len(column.label)), self._widths[index])

    def relabel(self, labels: Mapping[str, str]) -> None:
        """New header words for some columns (the database's own: ghost records on SQL Server,
        where PostgreSQL has dead tuples); the columns are laid out again."""
        changed = False
        for index, column in enumerate(self._spec):
            label = labels.get(column.key)
            if label is not None and label != column.label:
                self._spec[index] = replace(column, label=label)
                # As wide as the new header and the widest cell (a shorter header: narrower).
                self._widths[index] = max([cell_len(label), *(_cell_width(cells[index]) for cells in self._full.values())])
                changed = True
        if changed and self.is_mounted:
            self._refit(force=True)

    def _refit(self, force: bool = False) -> bool:
        """Re-layout if what fits changed (or `force`): rebuild the columns and rows, the cursor
        on the row it was on (where the operator chose one) and the rows scrolled as they were.
        True if it did."""
        visible, text_widths = self._fit()
        if visible == self._visible and text_widths == self._text_widths and not force:
            return False
        hidden = tuple(self._spec[i].label for i in range(len(self._spec)) if i not in visible)
        left = tuple(self._spec[i].label for i in range(self._pinned, min(visible[self._pinned:], default=self._pinned))
                     if i not in visible) \
            if self._everything else ()
        right = tuple(label for label in hidden if label not in left) if self._everything else ()
        self._visible, self._text_widths = visible, text_widths
        keys = list(self._full)
        followed, scrolled = self.followed_key(), self.scroll_y
        self._moving += 1
        try:
            self.clear(columns=True)
            self._cells, self._shown, self._cell_versions = {}, [], {}
            self._own_cache.clear()
            self._add_columns()
            for key in keys:
                cells = self._project(self._full[key])
                self.add_row(*cells, key=key)
                self._cells[key] = cells
                self._shown.append(key)
        finally:
            self._moving -= 1
        if scrolled:
            self.call_after_refresh(self.scroll_to, y=scrolled, animate=False)
        self._follow(followed)
        if (hidden, left, right) != (self.hidden, self.left, self.right):
            self.hidden, self.left, self.right = hidden, left, right
            self.post_message(self.Fitted(self, hidden, left, right))
        self._report_rows()
        return True

    def _rewidth(self, text_widths: dict[int, int]) -> bool:
        """Give the shortened text columns their new widths in place; False if DataTable's
        internals changed (the caller rebuilds instead)."""
        try:
            for index in set(self._text_widths) | set(text_widths):
                column = self.columns[ColumnKey(self._spec[index].key)]
                width = text_widths.get(index)
                if width is None:  # whole again: as wide as its widest cell
                    column.auto_width, column.content_width = True, self._widths[index]
                else:
                    column.auto_width, column.width = False, width
            self._require_update_dimensions = True
        except (AttributeError, KeyError):
            return False
        self._text_widths = text_widths
        return True

    def _narrow_columns(self, text_widths: dict[int, int]) -> bool:
        """After rows went away, their widest cells with them: the shown columns as narrow as the
        cells left (DataTable only ever widens a column; a column wider than `_fit` reckoned
        pushed the last one past the edge, a TTL drawn `2.5`, its header `T`). False if
        DataTable's internals changed (the caller rebuilds instead)."""
        try:
            for index in self._visible:
                if index in text_widths:
                    continue  # a shortened name: its own width (_rewidth)
                column = self.columns[ColumnKey(self._spec[index].key)]
                if column.auto_width and column.content_width > self._widths[index]:
                    column.content_width = self._widths[index]
                    self._require_update_dimensions = True
                    self.refresh()
        except (AttributeError, KeyError):
            return False
        return True

    def on_resize(self, event: events.Resize) -> None:
        self._refit()
        self._report_rows()

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        self._report_rows()

    def keys_in_view(self, keys: Sequence[str], margin: int = 5) -> set[str] | None:
        """Which of `keys` (in display order) the screen shows now, with `margin` rows either
        side; None before the first layout (all of them, then)."""
        span = self.view_span(margin)
        return None if span is None else set(keys[span[0]: span[1]])

    def view_span(self, margin: int = 5) -> tuple[int, int] | None:
        """The positions (start, stop) of the rows the screen shows now, with `margin` rows either
        side; None before the first layout."""
        room = self.size.height - (self.header_height if self.show_header else 0)
        if room <= 0 or not self.is_mounted:
            return None
        first = round(self.scroll_y)
        return max(0, first - margin), first + room + margin

    def _report_rows(self) -> None:
        """Tell the panel which rows are on screen when not all of them are (no scrollbar here)."""
        room = self.size.height - (self.header_height if self.show_header else 0)
        shown = rows_shown(self.row_count, room, self.scroll_y)
        if shown != self._rows_shown:
            self._rows_shown = shown
            self.post_message(RowsShown(shown))

    def _project(self, cells: tuple) -> tuple:
        out = []
        for index in self._visible:
            cell = cells[index]
            width = self._text_widths.get(index)
            if width is not None and _cell_width(cell) > width:
                cell = shorten(cell, width)
            out.append(cell)
        return tuple(out)

    def _measure(self, rows: Mapping[str, tuple], changed: list[str], *, everything: bool) -> bool:
        """Update the widest cell of each column from the `changed` rows (all of them when
        `everything`); True if a column's widest cell is now wider than the layout assumed."""
        widths = [cell_len(c.label) for c in self._spec] if everything else self._widths
        filled = [False] * len(self._spec) if everything else self._filled
        grew = False
        for key in rows if everything else changed:
            for index, cell in enumerate(rows[key]):
                if not filled[index] and _cell_width(cell):
                    filled[index] = grew = True  # (a column blank until now is laid out again)
                if cell.__class__ is str and len(cell) <= widths[index] and cell.isascii():
                    continue  # the common case, without a call
                width = _cell_width(cell)
                if width > widths[index]:
                    widths[index] = width
                    grew = True
        self._widths = widths
        self._filled = filled
        return grew

    def full_rows(self) -> dict[str, tuple]:
        """Every row's cells in every column (shown or left out), in display order."""
        return dict(self._full)

    def shown_columns(self) -> list[str]:
        """The keys of the columns on screen, in order."""
        return [self._spec[i].key for i in self._visible]

    # -- rows --------------------------------------------------------------------------------

    def sync(self, rows: Mapping[str, Sequence[object]], cursor_to: str | None = None) -> None:
        """Make the table show exactly `rows` (key → cells, in column order), in that order; the
        cursor stays on its row (where the operator chose one), or goes to `cursor_to`'s row (a
        row of the panel's own that stands for the one that went: `session 1234 ended`)."""
        full = {key: cells if cells.__class__ is tuple else tuple(cells) for key, cells in rows.items()}
        had = self._full.get
        # The one comparison: a row given the very tuple it had (a panel's cached cells) is not
        # compared cell by cell.
        changed = [key for key, cells in full.items() if (old := had(key)) is not cells and old != cells]
        self._made_inert(full, changed)
        removed = not self._full.keys() <= full.keys()
        followed = self.followed_key()
        self._show_rows(full, changed, removed=removed, reorder=True)
        self._follow(cursor_to if cursor_to is not None and cursor_to in full else followed)

    def update_rows(self, rows: Mapping[str, tuple]) -> None:
        """New cells for some of the rows the table has; the other rows and the order stay as they
        are. What a panel of thousands of rows calls when its rows and their order are those of
        its last sync: the rows it formatted again, without sync's pass over every row."""
        if not rows.keys() <= self._full.keys():
            self.sync({**self._full, **rows})
            return
        had = self._full.get
        changed = [key for key, cells in rows.items() if (old := had(key)) is not cells and old != cells]
        if not changed:
            return
        full = self._full
        for key in changed:
            full[key] = rows[key]
        self._made_inert(full, changed)
        self._show_rows(full, changed, removed=False, reorder=False)

    @staticmethod
    def _made_inert(full: dict[str, tuple], changed: list[str]) -> None:
        """Only new and changed rows: the others were made inert when they came."""
        for key in changed:
            cells = full[key]
            safe = tuple([inert_cell(cell) for cell in cells])
            if any(a is not b for a, b in zip(safe, cells, strict=True)):
                full[key] = safe  # else the caller's tuple is kept, so that the next sample's is the same object

    def _show_rows(self, full: dict[str, tuple], changed: list[str], *, removed: bool, reorder: bool) -> None:
        self._moving += 1  # rows removed and reordered move the cursor's line: the table's doing
        try:
            self._show_rows_moving(full, changed, removed=removed, reorder=reorder)
        finally:
            self._moving -= 1

    def _show_rows_moving(self, full: dict[str, tuple], changed: list[str], *, removed: bool, reorder: bool) -> None:
        grew = self._measure(full, changed, everything=removed)
        self._full = full
        if grew or removed:
            visible, text_widths = self._fit()
            if visible != self._visible:
                self._refit()
                return  # rebuilt from these rows
            if removed and not self._narrow_columns(text_widths):
                self._refit()
                return
            if text_widths != self._text_widths:
                # The same columns, a name column wider or narrower: set its width and re-project
                # every row (only the cells that change are written), no rebuild of 500 rows.
                if not self._rewidth(text_widths):
                    self._refit()
                    return
                changed = list(full)
        column_keys = [self._spec[i].key for i in self._visible]
        for gone in [k for k in self._cells if k not in full] if removed or len(self._cells) > len(full) else ():
            self.remove_row(gone)
            del self._cells[gone]
            self._shown.remove(gone)
        changes: list[tuple[str, str, object, bool]] = []
        for key in changed:
            cells = self._project(full[key])
            old = self._cells.get(key)
            if old is None:
                self.add_row(*cells, key=key)
                self._shown.append(key)
            elif old != cells:
                for column, before, after in zip(column_keys, old, cells, strict=True):
                    if before != after:
                        # Widening the column costs a layout pass: only when the value no longer fits.
                        self._cell_versions[(key, column)] = self._cell_versions.get((key, column), 0) + 1
                        wider = _cell_width(after) > self.columns[ColumnKey(column)].content_width
                        changes.append((key, column, after, wider))
            self._cells[key] = cells
        self._apply_changes(changes)
        if reorder:
            keys = list(full)
            if self._shown != keys:
                self._reorder(keys)
                self._shown = keys
        self._report_rows()

    def ordered_keys(self) -> list[RowKey]:
        """The row keys in display order, as DataTable has them."""
        return [self.coordinate_to_cell_key(Coordinate(index, 0)).row_key for index in range(self.row_count)] if self.columns else []

    def _reorder(self, keys: list[str]) -> None:
        """Show the existing rows in `keys` order (as DataTable.sort does, by position)."""
        try:
            self._row_locations = TwoWayDict({RowKey(k): index for index, k in enumerate(keys)})
            self._update_count += 1
            self.refresh()
        except AttributeError:  # DataTable internals changed: rebuild the rows instead
            cells = dict(self._cells)
            self.clear()
            for key in keys:
                self.add_row(*cells[key], key=key)

    def _apply_changes(self, changes: list[tuple[str, str, object, bool]]) -> None:
        """All changed cells, then one refresh. DataTable.update_cell refreshes per cell (160 per
        busy snapshot, most of the apply time); this writes the same state and refreshes once,
        falling back to update_cell if DataTable's internals ever change."""
        if not changes:
            return
        try:
            data, updated = self._data, self._updated_cells
            for key, column, value, wider in changes:
                row_key, column_key = RowKey(key), ColumnKey(column)
                data[row_key][column_key] = value
                if wider:
                    updated.add(CellKey(row_key, column_key))
                    self._require_update_dimensions = True
            # What is drawn changed, not which rows there are nor their order: drop the drawn
            # lines, keep the rows' order and offsets. Bumping DataTable's update count would
            # drop those too, and with 5,000 sessions each is a walk over every row, per sample.
            for cache in (self._row_render_cache, self._cell_render_cache, self._row_renderable_cache, self._line_cache):
                cache.clear()
            self.refresh()
        except (AttributeError, KeyError, TypeError):
            for key, column, value, wider in changes:
                self.update_cell(key, column, value, update_width=wider)

    # -- rendering -----------------------------------------------------------------------------

    @property
    def rich_style(self) -> Style:
        """DataTable asks for it on every line it draws, and each time it walks every ancestor's
        styles; kept until the next repaint or style change, as Widget keeps its component styles."""
        if self._style_memo is None:
            self._style_memo = super().rich_style
        return self._style_memo

    def refresh(self, *regions: Region, repaint: bool = True, layout: bool = False, recompose: bool = False) -> Self:
        if repaint:
            self._style_memo = None
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)

    def notify_style_update(self) -> None:
        self._style_memo = None
        super().notify_style_update()

    def _render_cell(self, row_index, column_index, base_style, width, cursor=False, hover=False):
        if row_index < 0 or column_index < 0:
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        try:
            row_key = cast(str, cast(RowKey, self._row_locations.get_key(row_index)).value)
            column_key = cast(str, cast(ColumnKey, self._column_locations.get_key(column_index)).value)
            key = (
                row_key, column_key, self._cell_versions.get((row_key, column_key), 0), row_index, column_index,
                base_style, width, cursor, hover, self._show_hover_cursor, self._pseudo_class_state,
            )
        except AttributeError:  # DataTable internals changed: no shortcut
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        lines = self._own_cache.get(key)
        if lines is None:
            lines = self._render_one_line_cell(row_key, column_key, row_index, column_index, base_style, width, cursor, hover)
            if lines is None:
                lines = super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
            self._own_cache[key] = lines
        return lines

    def _render_one_line_cell(self, row_key: str, column_key: str, row_index: int, column_index: int, base_style: Style,
                              width: int, cursor: bool, hover: bool) -> list[list[Segment]] | None:
        """A body cell as DataTable would draw it (padding, cursor and hover styles), without its
        general path through a Console (Padding, Styled, wrapping): every cell here is one line,
        a str or a Text already fitted to its column. With every figure changing each second
        this is most of the dashboard's CPU. A str is shown as it is, never read as markup (a
        queue may be called "[red]"). None: not such a cell, let DataTable draw it."""
        try:
            value = self._data[RowKey(row_key)][ColumnKey(column_key)]
            if self.rows[RowKey(row_key)].height != 1 or not isinstance(value, (str, Text)):
                return None
            component_style, post_style = self._get_styles_to_render_cell(
                False, False, row_index < self.fixed_rows or column_index < self.fixed_columns, hover, cursor,
                self.show_cursor, self._show_hover_cursor, self.cursor_foreground_priority == "css",
                self.cursor_background_priority == "css",
            )
        except (AttributeError, KeyError, TypeError):
            return None
        style = base_style + Style.from_meta({"row": row_index, "column": column_index}) + component_style
        console = self.app.console
        if isinstance(value, Text):
            content = list(value.render(console))  # its spans; its own style is applied below, as rich does
            if value.style:
                content = list(Segment.apply_style(content, console.get_style(value.style, default=Style.null())))
        else:
            content = [Segment(value)]
        pad = self.cell_padding
        # As Padding draws it: the content cropped or filled to the inner width, then the padding.
        inner = Segment.adjust_line_length(content, max(0, width - 2 * pad))
        segments = [Segment(" " * pad), *inner, Segment(" " * pad)]
        return [list(Segment.apply_style(segments, style, post_style))]
