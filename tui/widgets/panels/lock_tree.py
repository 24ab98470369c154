"""The Locks panel's tree widget and its one-line labels (root blockers, prepared transactions,
waiting sessions)."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from probes.locklabels import MODE_WORDS
from probes.model import BlockedSession, Blocker, PreparedXact

from ... import format as fmt
from ..keyed_table import RowsShown, rows_shown
from .base import CULPRIT_STATES, CUT, FIGURE, PHRASE, SHORT_STATES, WORDS, fit_segments, wrap_segments


def label_width(tree_width: int, depth: int) -> int:
    """The cells a tree label at `depth` has: the guides take 2 cells a level and 2 for the arrow."""
    return tree_width - 2 * depth - 2


# The Locks tree's labels (wrap_segments): the figures whole, each explanation whole over as many
# lines as it takes (the lines after the first are the node's first children), a name or a
# session's query cut only after a whole word (Enter shows it whole).
# Every text from the database is inert. A figure that changes every sample is padded to its
# widest form, so that the lines break at the same places from one sample to the next.
WAIT_CELLS = len("waits 59.9s")  # (a wait past a minute is a character longer: the lines are laid out again once)
XACT_CELLS = len("  xact 59m59s")


def blocker_label(r: Blocker, tree_width: int) -> list[Text]:
    """A root blocker: its pid, state, how many it blocks (and the processes, its waiters'
    parallel workers counted), its transaction's age, its application and query."""
    return wrap_segments([
        (f"{r.pid} ", "bold", FIGURE),
        (SHORT_STATES.get(r.state or "?", r.state or "?"), "bold red" if r.state in CULPRIT_STATES else "yellow", FIGURE),
        (f"  holds {MODE_WORDS.get(r.held_mode, r.held_mode)}" if r.held_mode else "", "magenta", PHRASE),
        (f"  blocks {fmt.blocks_text(r.blocked_count, r.blocked_processes)}", "", FIGURE),
        (f"  xact {fmt.seconds(r.xact_age_s)}".ljust(XACT_CELLS), "", FIGURE),
        (f"  {r.application or '-'}", "cyan", CUT), (f"  {fmt.one_line(r.query, 200)}", "", CUT),
    ], label_width(tree_width, 1), label_width(tree_width, 2))


def prepared_label(p: PreparedXact, tree_width: int) -> list[Text]:
    """A prepared transaction at the root of waits: no session holds it."""
    return wrap_segments([
        ("prepared ", "bold red", FIGURE), (f"{p.gid!r}", "bold", CUT), (f"  blocks {p.blocked_count}", "", FIGURE),
        (f"  age {fmt.seconds(p.age_s)}", "", FIGURE), ("  no session: COMMIT or ROLLBACK PREPARED", "yellow", WORDS),
        (f"  {p.owner or '?'}@{p.database or '?'}", "cyan", CUT),
    ], label_width(tree_width, 1), label_width(tree_width, 2))


# Those a waiting session queues behind, named in its label before they are counted instead.
QUEUED_NAMED = 3


def blocked_label(b: BlockedSession, depth: int, tree_width: int, here: str | None, parent: int | None = None) -> list[Text]:
    """A waiting session at `depth`: how long it waits, what its statement wants and who holds
    it (fmt.wait_phrase; `parent`, the session it is shown under, goes without saying), its
    parallel workers waiting with it, its application and query (`here`: the database the
    dashboard watches, named only when the lock is in another)."""
    return wrap_segments([
        (f"{b.pid} ", "bold", FIGURE), (f"waits {fmt.seconds(b.wait_s)}".ljust(WAIT_CELLS), "red", FIGURE),
        (f"  {fmt.wait_phrase(b, here, parent=parent, most=QUEUED_NAMED)}", "magenta", WORDS),
        (f"  +{len(b.worker_pids)} parallel worker{'s' if len(b.worker_pids) > 1 else ''}" if b.worker_pids else "", "yellow", FIGURE),
        (f"  {b.application or '-'}", "cyan", CUT),
        (f"  {fmt.one_line(b.query, 200)}", "", CUT),
    ], label_width(tree_width, depth), label_width(tree_width, depth + 1))


def group_label(members: list[BlockedSession], depth: int, tree_width: int, here: str | None, parent: int | None = None) -> list[Text]:
    """Identical waiters under one node (lock_layout.py): how many, their waits from the
    shortest to the longest, what each wants and who holds it, their application and statement;
    opened, each is listed."""
    waits = [b.wait_s for b in members if b.wait_s is not None]
    shortest, longest = (fmt.seconds(min(waits)), fmt.seconds(max(waits))) if waits else (fmt.seconds(None),) * 2
    span = shortest if shortest == longest else f"{shortest}–{longest}"
    workers = sum(len(b.worker_pids) for b in members)
    first = members[0]
    unread = any(b.ahead_unread for b in members)
    return wrap_segments([
        (f"{len(members):,} sessions ", "bold red", FIGURE), (f"wait {span}", "red", FIGURE),
        (f"  {fmt.wait_phrase(first, here, parent=parent, queued=False)}", "magenta", WORDS),
        ("  (their order in the queue not read)" if unread else "", "dim", WORDS),
        (f"  +{workers} parallel worker{'s' if workers > 1 else ''}" if workers else "", "yellow", FIGURE),
        (f"  {first.application or '-'}", "cyan", CUT),
        (f"  {fmt.one_line(first.query, 200)}", "", CUT),
    ], label_width(tree_width, depth), label_width(tree_width, depth + 1))


def member_label(b: BlockedSession, depth: int, tree_width: int, parent: int | None = None) -> list[Text]:
    """A session of an opened group, on one line: its pid, how long it has waited and its place in
    the line, each whole or left out (what it wants, from whom, its application and statement are
    the group's line; Enter shows the rest). One line, not wrapped: a group may list 2,000."""
    ahead = fmt.queued_behind(b, parent)
    place = "" if b.ahead_unread else f"  queued behind {ahead:,}" if ahead else "  first in line"
    return [fit_segments([
        (f"{b.pid} ", "bold", False), (f"waits {fmt.seconds(b.wait_s)}".ljust(WAIT_CELLS), "red", False),
        (place, "magenta", False),
        (f"  +{len(b.worker_pids)} parallel worker{'s' if len(b.worker_pids) > 1 else ''}" if b.worker_pids else "", "yellow", False),
    ], label_width(tree_width, depth))]


def members_label(pids: tuple[int, ...], depth: int, tree_width: int) -> Text:
    """The line under a group that lists its sessions when opened: their count, and as many of
    their pids as fit."""
    return fit_segments([(f"the {len(pids):,} sessions", "bold", False),
                         (f": {', '.join(map(str, pids))}", "dim", True)], label_width(tree_width, depth))


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

    def set_labels(self, changes: list[tuple[TreeNode[int], Text]]) -> None:
        """Many nodes' labels set at once, with one repaint: TreeNode.set_label schedules a repaint
        of each node's lines, thousands of callbacks for an opened group of a pile-up. The line
        cache is keyed by each node's update count, which this moves on as set_label does."""
        for node, label in changes:
            node._updates += 1
            node._label = self.process_label(label)
        if changes:
            self.refresh()

    def report_rows(self) -> None:
        shown = rows_shown(self.last_line + 1, self.size.height, self.scroll_y)
        if shown != self._rows_shown:
            self._rows_shown = shown
            self.post_message(RowsShown(shown))
