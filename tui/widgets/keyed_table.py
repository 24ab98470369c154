"""A DataTable that is updated in place from keyed rows: new keys added, gone keys removed,
changed cells updated; nothing rebuilt per tick (the way Dolphie does it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import cast

from rich.cells import cell_len
from rich.text import Text
from textual._two_way_dict import TwoWayDict
from textual.cache import LRUCache
from textual.coordinate import Coordinate
from textual.widgets import DataTable
from textual.widgets.data_table import CellKey, ColumnKey, RowKey


class KeyedTable(DataTable):
    DEFAULT_CSS = """
    KeyedTable { height: 1fr; }
    """

    def __init__(self, columns: Sequence[tuple[str, str]], **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kwargs)
        self._column_spec = list(columns)
        self._cells: dict[str, tuple] = {}
        self._shown: list[str] = []  # row keys in display order (kept here: the hot path compares it)
        # DataTable's own cell cache is keyed by a table-wide update counter, so one changed cell
        # re-renders every visible cell. This cache is keyed per cell by a version bumped only
        # when that cell's value changes. It falls back to DataTable's path if its internals change.
        self._cell_versions: dict[tuple[str, str], int] = {}
        self._own_cache: LRUCache[tuple, object] = LRUCache(4096)

    def on_mount(self) -> None:
        for key, label in self._column_spec:
            self.add_column(label, key=key)

    def sync(self, rows: Mapping[str, Sequence[object]]) -> None:
        """Make the table show exactly `rows` (key → cells, in column order), in that order."""
        column_keys = [key for key, _ in self._column_spec]
        for gone in [k for k in self._cells if k not in rows]:
            self.remove_row(gone)
            del self._cells[gone]
            self._shown.remove(gone)
        changes: list[tuple[str, str, object, bool]] = []
        for key, cells in rows.items():
            cells = tuple(cells)
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
        keys = list(rows)
        if self._shown != keys:
            self._reorder(keys)
            self._shown = keys

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
            self._update_count += 1
            self.refresh()
        except (AttributeError, KeyError, TypeError):
            for key, column, value, wider in changes:
                self.update_cell(key, column, value, update_width=wider)

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
            lines = super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
            self._own_cache[key] = lines
        return lines


def _cell_width(value: object) -> int:
    return value.cell_len if isinstance(value, Text) else cell_len(str(value))
