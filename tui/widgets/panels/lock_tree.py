"""The Locks panel's tree widget and its one-line labels (root blockers, prepared transactions,
waiting sessions)."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Tree

from probes.model import BlockedSession, Blocker, PreparedXact

from ... import format as fmt
from ..keyed_table import RowsShown, rows_shown
from .base import CULPRIT_STATES, SHORT_STATES, fit_segments


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
    /* Zoomed, the labels are whole: the tree scrolls sideways, with a scrollbar under its lines. */
    .-maximized LockTree { overflow-x: auto; scrollbar-size-horizontal: 1; }
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
