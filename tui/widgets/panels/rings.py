"""The Rings panel: each ring buffer's occupancy and refusals."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from probes.model import Snapshot

from ... import format as fmt
from ..keyed_table import Column, KeyedTable
from .base import UNKNOWN_KEY, Panel, unknown_row


class RingsPanel(Panel):
    COLUMNS: ClassVar[list[Column]] = [
        Column("name", "Ring", 0, text=True, min_width=8), Column("used", "Used", 1), Column("occupancy", "Occupancy", 3),
        Column("refused", "Refused", 2, yields_to_names=True),
    ]

    FILTER_FIELDS: ClassVar[dict[str, Callable[[Any], object]]] = {"name": lambda r: r.name}
    FILTER_WORDS = ("name",)

    def __init__(self) -> None:
        super().__init__("Rings", id="rings")

    def compose(self):
        yield KeyedTable(self.COLUMNS, id="rings-table", names_first=True)  # its width shared in its row (share_row)

    def show(self, snapshot: Snapshot) -> None:
        rows: dict[str, tuple[object, ...]] = {}
        for r in snapshot.rings:
            if not self.passes(r):
                continue
            name = fmt.plain(r.name, style="bold red" if r.used >= r.capacity else "")
            rows[r.name] = (name, f"{fmt.count(r.used)}/{fmt.count(r.capacity)}", fmt.bar(r.used, r.capacity),
                            fmt.count(r.refused_total))
        unknown = snapshot.unknown_list("rings")
        if unknown is not None:
            rows[UNKNOWN_KEY] = unknown_row(unknown, len(self.COLUMNS))
        self.query_one(KeyedTable).sync(rows)
        self.fit_width_to_content()
