"""The Compaction panel: delta rows waiting to be folded, per group, and the compactor's last run."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from rich.text import Text

from probes.model import Snapshot

from ... import format as fmt
from ..keyed_table import Column, KeyedTable
from .base import UNKNOWN_KEY, Panel, unknown_row


class CompactionPanel(Panel):
    """Pattern 5's compactor: delta rows waiting to be folded, per group, and its last run (in the
    border's subtitle, so the table keeps every line)."""

    COLUMNS: ClassVar[list[Column]] = [Column("pending", "Pending", 0), Column("group", "Group", 0, text=True, min_width=5)]

    # A group's title and its key (the `all` line stays: the total).
    FILTER_FIELDS: ClassVar[dict[str, Callable[[Any], object]]] = {"name": lambda g: (g.title, str(g.group))}
    FILTER_WORDS = ("name",)

    def __init__(self) -> None:
        super().__init__("Compaction", id="compaction")

    def compose(self):
        yield KeyedTable(self.COLUMNS, id="compaction-table", names_first=True)  # its width shared in its row (share_row)

    def show(self, snapshot: Snapshot) -> None:
        rows: dict[str, tuple[object, ...]] = {}
        subtitles: tuple[str, ...] = ()
        for c in snapshot.compaction:
            total = Text(fmt.count(c.pending_deltas, c.pending_is_estimate), style="bold yellow" if c.pending_deltas else "")
            rows[f"all:{c.name}"] = (total, Text(f"all ({c.groups:,} group{'' if c.groups == 1 else 's'})", style="bold"))
            for g in c.by_group:
                if self.passes(g):
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
