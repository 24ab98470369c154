"""The Locks panel: who blocks whom, wait cycles, prepared transactions and application locks."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from probes.model import BlockedSession, Snapshot

from ... import format as fmt
from .base import Panel, fit_segments, matches_filter
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
        self._tree_nodes: dict[tuple[int, ...], TreeNode[int]] = {}
        self._labels: dict[tuple[int, ...], object] = {}  # the frozen sample each label shows
        self._last_facts: tuple | None = None
        self._snapshot: Snapshot | None = None
        self._filter_text = ""

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

        visible_roots: list[object] = [pid for pid in roots if waiters_match(pid, roots[pid].application, roots[pid].query)]
        visible_roots += [key for key, p in prepared.items() if waiters_match(key, p.gid, p.owner, p.database)]
        cycles = {f"cycle:{n}": members for n, members in enumerate(_wait_cycles(snapshot.blocked), 1)
                  if any(matches_filter(filter_text, blocked[m].application, blocked[m].query) for m in members)}

        # Each label fitted to the width; zoomed, whole (the tree scrolls sideways instead).
        width = UNFITTED if self.zoomed else max(20, tree.size.width)

        def label_cycle(key: str) -> Text:
            members = cycles[key]
            return fit_segments([
                ("wait cycle ", "bold red", False), (" → ".join(map(str, [*members, members[0]])), "bold", False),
                (f"  {_deadlock_countdown(snapshot, [blocked[m] for m in members])}", "yellow", True),
            ], label_width(width, 1))

        def sample_of(path: tuple) -> object:
            """What a node's label shows: its label is rebuilt only when this changes."""
            node = path[-1]
            if isinstance(node, str) and node.startswith("cycle:"):
                return tuple(blocked[m] for m in cycles[node])  # the members' waits: the countdown
            if isinstance(node, str):
                return prepared[node]
            return roots[node] if len(path) == 1 and node in roots else blocked.get(node)

        def label_of(path: tuple) -> Text:
            node = path[-1]
            if isinstance(node, str):
                return label_cycle(node) if node.startswith("cycle:") else prepared_label(prepared[node], width)
            if len(path) == 1 and node in roots:
                return blocker_label(roots[node], width)
            return blocked_label(blocked[node], len(path), width, snapshot.server.database)

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
        shape = tuple(paths)
        count = len(blocked)
        # The summary, fitted like every line: each count whole or left out.
        summary = [(f"{count} blocked session(s)", "bold red", False)]
        if cycles:  # the rarest and worst first
            summary.append((f", {len(cycles)} wait cycle(s)", "bold red", False))
        if prepared:
            summary.append((f", {len(prepared)} prepared transaction(s)", "bold red", False))
        summary.append((f", {len(roots)} root blocker(s)", "bold red", False))
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
            self._labels = {}
            parents = {path[:-1] for path in paths}
            for path in paths:
                under = tree.root if len(path) == 1 else self._tree_nodes[path[:-1]]
                label, sample = label_of(path), sample_of(path)
                data = path[-1] if isinstance(path[-1], int) else None  # a session: c, k and Enter act on it
                # A session nobody waits on is a leaf: no ▼ that would open nothing.
                self._tree_nodes[path] = under.add(label, data=data, expand=True) if path in parents \
                    else under.add_leaf(label, data=data)
                self._labels[path] = sample
            tree.root.expand()
            self._shape = shape
            self.call_after_refresh(tree.report_rows)
        else:
            # Only labels whose facts changed are rebuilt and set: each set_label repaints.
            for path, node in self._tree_nodes.items():
                sample = sample_of(path)
                if sample != self._labels.get(path):
                    node.set_label(label_of(path))
                    self._labels[path] = sample

    def zoom_changed(self, zoomed: bool) -> None:
        self.on_resize()  # whole labels zoomed, fitted ones back
        if not zoomed:
            self.query_one(LockTree).scroll_to(x=0, animate=False)

    def on_resize(self) -> None:
        # The labels are fitted to the width: fit them again.
        if self._snapshot is not None:
            self._last_facts, self._labels = None, {}
            self.show(self._snapshot, self._filter_text)

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
