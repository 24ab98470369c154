"""A DataTable that is updated in place from keyed rows: new keys added, gone keys removed,
changed cells updated; nothing rebuilt per tick (the way Dolphie does it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from textual.widgets import DataTable


class KeyedTable(DataTable):
    DEFAULT_CSS = """
    KeyedTable { height: 1fr; }
    """

    def __init__(self, columns: Sequence[tuple[str, str]], **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kwargs)
        self._column_spec = list(columns)
        self._cells: dict[str, tuple] = {}

    def on_mount(self) -> None:
        for key, label in self._column_spec:
            self.add_column(label, key=key)

    def sync(self, rows: Mapping[str, Sequence[object]]) -> None:
        """Make the table show exactly `rows` (key → cells, in column order), in that order."""
        column_keys = [key for key, _ in self._column_spec]
        for gone in [k for k in self._cells if k not in rows]:
            self.remove_row(gone)
            del self._cells[gone]
        order_changed = False
        for key, cells in rows.items():
            cells = tuple(cells)
            old = self._cells.get(key)
            if old is None:
                self.add_row(*cells, key=key)
                order_changed = True
            elif old != cells:
                for column, before, after in zip(column_keys, old, cells):
                    if before != after:
                        self.update_cell(key, column, after, update_width=True)
            self._cells[key] = cells
        if order_changed and list(self._cells) != list(rows):
            self._cells = {k: self._cells[k] for k in rows}

    @property
    def selected_key(self) -> str | None:
        if self.row_count == 0:
            return None
        try:
            row_key, _ = self.coordinate_to_cell_key(self.cursor_coordinate)
        except Exception:
            return None
        return row_key.value
