"""The Locks panel: who blocks whom, wait cycles, prepared transactions and application locks."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from probes.model import BlockedSession, Snapshot

from ... import format as fmt
from .base import FIGURE, WORDS, Panel, fit_segments, matches_filter, wrap_segments
from .lock_tree import LockTree, blocked_label, blocker_label, label_width, prepared_label


def _wait_cycles(blocked: tuple[BlockedSession, ...]) -> list[list[int]]:
    """The sessions in wait cycles, one list per cycle, each in the order of its waits."""
    members = {b.pid: b for b in blocked if b.in_cycle}
    cycles: list[list[int]] = []
    seen: set[int] = set()
    for start in sorted(members):
        if start in seen:
            continue
        order, current = [], start
        while current in members and current not in order:
            order.append(current)
            current = next((p for p in sorted(members[current].blocked_by) if p in members), start)
        seen.update(order)
        cycles.append(order)
    return cycles


def _deadlock_countdown(snapshot: Snapshot, members: list[BlockedSession]) -> str:
    """When the server will look for the deadlock: deadlock_timeout after a member began to wait
    (the server's setting; a session may have set its own)."""
    timeout = snapshot.server.deadlock_timeout_s
    waited = max((m.wait_s or 0.0 for m in members), default=0.0)
    if timeout is None:
        return "deadlock: broken after deadlock_timeout"
    left = timeout - waited
    if left > 0:
        return f"deadlock: broken in ≤{fmt.seconds(left)} (deadlock_timeout {timeout:g}s)"
    return f"deadlock, past deadlock_timeout {timeout:g}s (a session set its own?)"


# A label's width when the panel is zoomed: every part whole, however long (a query is cut at 200
# characters by one_line); the tree scrolls sideways.
UNFITTED = 10_000


class LocksPanel(Panel):
    """The blocking tree: root blocker → the sessions it blocks → ... Rebuilt only when the tree's
    shape changes; otherwise labels (wait times) are refreshed in place."""

    def __init__(self) -> None:
        super().__init__("Locks", id="locks")
        self._shape: tuple = ()
        self._tree_nodes: dict[tuple, TreeNode[int]] = {}
        self._more_nodes: dict[tuple, list[TreeNode[int]]] = {}  # a node's wrapped lines: its first children
        self._lines: dict[tuple, tuple[object, list[Text]]] = {}  # the frozen sample each label shows, and its lines
        self._last_facts: tuple | None = None
        self._snapshot: Snapshot | None = None
        self._filter_text = ""
        self._fitted_to = 0  # the width the labels were fitted to

    @property
    def calm(self) -> bool:
        """Nothing in the tree: no session blocked, no prepared transaction holding one, no
        application lock held (and the locks were read: unknown is not calm)."""
        s = self._snapshot
        if s is None:
            return False
        status = s.probes.get("locks")
        return (status is not None and not status.error and not s.blocked and not any(a.granted for a in s.app_locks)
                and not any(p.blocked_count for p in s.prepared_xacts))

    def compose(self):
        tree = LockTree("no blocked sessions", id="locks-tree")
        tree.show_root = True
        tree.guide_depth = 2
        yield tree

    def show(self, snapshot: Snapshot, filter_text: str = "") -> None:
        self._snapshot, self._filter_text = snapshot, filter_text
        if not self._fitted_to and not self.zoomed and not self.query_one(LockTree).size.width:
            return  # never laid out yet: its first resize builds the tree, fitted to its width
        facts = (snapshot.blocked, snapshot.blockers, snapshot.prepared_xacts, snapshot.app_locks, filter_text)
        if facts == self._last_facts:
            return  # the same tree: nothing to rebuild or relabel
        self._last_facts = facts
        tree = self.query_one(LockTree)
        blocked = {b.pid: b for b in snapshot.blocked}
        roots = {r.pid: r for r in snapshot.blockers}
        prepared = {f"prepared:{p.gid}": p for p in snapshot.prepared_xacts if p.blocked_count}
        # Who waits under whom: a session (pid) or a prepared transaction ("prepared:<gid>").
        children: dict[object, list[int]] = {}
        for b in blocked.values():
            for parent in b.blocked_by:
                children.setdefault(parent, []).append(b.pid)
            for gid in b.blocked_by_prepared:
                children.setdefault(f"prepared:{gid}", []).append(b.pid)

        def waiters_match(node: object, *fields: object) -> bool:
            return matches_filter(filter_text, *fields, *[blocked[c].application for c in children.get(node, []) if c in blocked])

        # A wait cycle's members are roots of one another and of all behind them: shown once, under
        # their cycle (a recording from before cycles were an object of their own: found here).
        found_cycles = [list(c.members) for c in snapshot.cycles] or _wait_cycles(snapshot.blocked)
        in_cycles = {m for members in found_cycles for m in members}
        visible_roots: list[object] = [pid for pid in roots if pid not in in_cycles
                                       and waiters_match(pid, roots[pid].application, roots[pid].query)]
        visible_roots += [key for key, p in prepared.items() if waiters_match(key, p.gid, p.owner, p.database)]
        cycles = {f"cycle:{n}": members for n, members in enumerate(found_cycles, 1)
                  if all(m in blocked for m in members)
                  and any(matches_filter(filter_text, blocked[m].application, blocked[m].query) for m in members)}

        # Each label fitted to the width, over more lines where an explanation needs them; zoomed,
        # on one line (the tree scrolls sideways instead).
        width = self._fitted_to = self._label_width()

        def label_cycle(key: str) -> list[Text]:
            members = cycles[key]
            return wrap_segments([
                ("wait cycle ", "bold red", FIGURE), (" → ".join(map(str, [*members, members[0]])), "bold", WORDS),
                (f"  {_deadlock_countdown(snapshot, [blocked[m] for m in members])}", "yellow", WORDS),
            ], label_width(width, 1), label_width(width, 2))

        def sample_of(path: tuple) -> object:
            """What a node's label shows: its label is rebuilt only when this changes."""
            node = path[-1]
            if isinstance(node, str) and node.startswith("cycle:"):
                return tuple(blocked[m] for m in cycles[node])  # the members' waits: the countdown
            if isinstance(node, str):
                return prepared[node]
            return roots[node] if len(path) == 1 and node in roots else blocked.get(node)

        def label_of(path: tuple) -> list[Text]:
            node = path[-1]
            if isinstance(node, str):
                return label_cycle(node) if node.startswith("cycle:") else prepared_label(prepared[node], width)
            if len(path) == 1 and node in roots:
                return blocker_label(roots[node], width)
            parent = path[-2] if len(path) > 1 and isinstance(path[-2], int) else None
            return blocked_label(blocked[node], len(path), width, snapshot.server.database, parent)

        # Shape: which node hangs under which path. Labels change every tick; the shape rarely.
        paths: list[tuple] = []

        def walk(path: tuple, skip: frozenset = frozenset()) -> None:
            paths.append(path)
            for child in sorted(children.get(path[-1], [])):
                if child not in path and child not in skip and len(path) < 12:
                    walk((*path, child), skip)

        for root in visible_roots:
            walk((root,))
        for key, members in cycles.items():
            # The cycle, then each member with whatever waits on it (its fellow members are
            # listed once, beside it, not under it).
            paths.append((key,))
            for member in members:
                walk((key, member), frozenset(members))
        # Each node's lines: its label, then (as its first children) the lines its explanation
        # wrapped onto. Built only for what changed: a label's facts are its sample.
        lines_of: dict[tuple, list[Text]] = {}
        for path in paths:
            sample = sample_of(path)
            kept = self._lines.get(path)
            lines_of[path] = kept[1] if kept is not None and kept[0] == sample else label_of(path)
        shape = tuple((path, len(lines_of[path])) for path in paths)
        count = len(blocked)
        # The summary, fitted like every line: each count whole or left out.
        summary = [(f"{count} blocked session(s)", "bold red", False)]
        if cycles:  # the rarest and worst first
            summary.append((f", {len(cycles)} wait cycle(s)", "bold red", False))
        if prepared:
            summary.append((f", {len(prepared)} prepared transaction(s)", "bold red", False))
        summary.append((f", {len([pid for pid in roots if pid not in in_cycles])} root blocker(s)", "bold red", False))
        if not count:
            # "None blocked" only when the probe read the locks: a failed probe (no privilege, a
            # lock timeout) or none run (a replay before the host's recording) knows nothing.
            status = snapshot.probes.get("locks")
            if status is None:
                summary = [("locks not sampled", "dim", False)]
            elif status.error:
                summary = [("blocked sessions unknown: ", "bold yellow", False),
                           (fmt.one_line(status.error, 200), "yellow", True)]
            else:
                summary = [("no blocked sessions", "green", False)]
        # Application locks held (advisory locks; sp_getapplock's): seen before anyone waits.
        held = [a for a in snapshot.app_locks if a.granted and matches_filter(filter_text, a.resource, a.application)]
        if held:
            held_said = f", {len(held)} app lock{'' if len(held) == 1 else 's'} held"
            if summary[0][0] == "no blocked sessions" and len(summary[0][0]) + len(held_said) > width - 2:
                summary[0] = ("none blocked", "green", False)  # the shorter words, so that the count stays whole
            summary.append((held_said, "", False))
            names = ", ".join(f"{a.resource} by {a.pid}" for a in held[:5]) + (", …" if len(held) > 5 else "")
            summary.append((f": {names}", "dim", True))
        root_label = fit_segments(summary, width - 2)
        if root_label.plain != str(tree.root.label):
            tree.root.set_label(root_label)
        if shape != self._shape:
            tree.root.remove_children()
            self._tree_nodes = {}
            self._more_nodes = {}
            self._lines = {}
            parents = {path[:-1] for path in paths}
            for path in paths:
                under = tree.root if len(path) == 1 else self._tree_nodes[path[:-1]]
                label, *more = lines_of[path]
                data = path[-1] if isinstance(path[-1], int) else None  # a session: c, k and Enter act on it
                # A session nobody waits on, whose label is one line, is a leaf: no ▼ that would open nothing.
                node = under.add(label, data=data, expand=True) if path in parents or more else under.add_leaf(label, data=data)
                self._tree_nodes[path] = node
                self._more_nodes[path] = [node.add_leaf(line, data=data) for line in more]
                self._lines[path] = (sample_of(path), lines_of[path])
            tree.root.expand()
            self._shape = shape
            self.call_after_refresh(tree.report_rows)
        else:
            # Only labels whose facts changed are set: each set_label repaints.
            for path, node in self._tree_nodes.items():
                sample = sample_of(path)
                if self._lines.get(path, (None,))[0] != sample:
                    label, *more = lines_of[path]
                    node.set_label(label)
                    for extra, line in zip(self._more_nodes[path], more, strict=True):
                        extra.set_label(line)
                    self._lines[path] = (sample, lines_of[path])

    def zoom_changed(self, zoomed: bool) -> None:
        self.on_resize()  # whole labels zoomed, fitted ones back
        if not zoomed:
            self.query_one(LockTree).scroll_to(x=0, animate=False)

    def on_resize(self) -> None:
        # The labels are fitted to the width: fit them again, if it changed (a taller panel
        # changes none; a tree of 5,000 waiters took seconds to build again, measured).
        if self._snapshot is not None and self._fitted_to != self._label_width():
            self._last_facts, self._lines = None, {}
            self.show(self._snapshot, self._filter_text)

    def _label_width(self) -> int:
        return UNFITTED if self.zoomed else max(20, self.query_one(LockTree).size.width)

    @property
    def selected_pid(self) -> int | None:
        node = self.query_one(Tree).cursor_node
        return None if node is None else node.data

    def select_pid(self, pid: int) -> bool:
        """Put the tree's cursor on session `pid` (where C, K and Enter act), on its highest node
        (a root blocker's root), focused; False when the tree does not show it (ended, filtered out)."""
        found = [path for path in self._tree_nodes if path[-1] == pid]
        if not found:
            return False
        node = self._tree_nodes[min(found, key=len)]
        tree = self.query_one(LockTree)
        _ = tree.last_line  # the lines built (a rebuilt tree's are built when drawn): the node's line is known
        tree.move_cursor(node)
        tree.focus()
        return tree.cursor_node is node
