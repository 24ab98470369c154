"""The Locks panel: who blocks whom, wait cycles, prepared transactions and application locks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from rich.cells import cell_len
from rich.text import Text
from textual.message import Message
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from probes.model import BlockedSession, SessionSample, Snapshot

from ... import format as fmt
from ...filters import session_duration
from .base import FIGURE, SHORT_STATES, WORDS, Panel, fit_segments, wrap_segments
from .lock_layout import Key, Layout, Node, lay_out
from .lock_tree import LockTree, blocked_label, blocker_label, group_label, label_width, member_label, members_label, prepared_label


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


def _lock_state(member: Any, session: SessionSample | None) -> object:
    state = getattr(member, "state", None) or (session.state if session is not None else None)
    return (state, SHORT_STATES.get(state or ""))


def _lock_dur(member: Any, session: SessionSample | None) -> float | None:
    """As the Sessions list's (tui/filters.py session_duration) where the sample lists the session;
    else what the tree knows: a waiter's wait, a root's transaction, a prepared transaction's age."""
    if session is not None:
        return session_duration(session)
    for name in ("wait_s", "xact_age_s", "age_s"):
        value = getattr(member, name, None)
        if value is not None:
            return float(value)
    return None


def _session_or_own(name: str, own: str | None = None) -> Callable[[tuple[Any, SessionSample | None]], object]:
    """A field of a tree member: its own (`own` attribute) where it has one, else its session's."""
    def get(row: tuple[Any, SessionSample | None]) -> object:
        member, session = row
        value = getattr(member, own, None) if own else None
        return value if value is not None else (getattr(session, name, None) if session is not None else None)
    return get


# A label's width when the panel is zoomed: every part whole, however long (a query is cut at 200
# characters by one_line); the tree scrolls sideways.
UNFITTED = 10_000
NOT_SAMPLED_YET = "locks not sampled yet"


class LocksPanel(Panel):
    """The blocking tree: root blocker → the sessions it blocks → ... (laid out by lock_layout.py:
    each session once, identical waiters grouped). Rebuilt only when the tree's shape changes;
    otherwise labels (wait times) are refreshed in place. The cursor stays on the node it was on
    (a session, a group, a prepared transaction) whatever moves around it; when its session ends,
    the tree says so."""

    # A tree member (a root blocker, a waiting session, a prepared transaction, an application
    # lock) with the sample's session of its pid, if any: the fields of the sessions it names.
    FILTER_FIELDS: ClassVar[dict[str, Callable[[Any], object]]] = {
        "pid": lambda row: getattr(row[0], "pid", None),
        "app": _session_or_own("application", "application"),
        "user": _session_or_own("user", "owner"),
        "db": _session_or_own("database", "database"),
        "state": lambda row: _lock_state(*row),
        "query": _session_or_own("query", "query"),
        "client": _session_or_own("client"),
        "backend": _session_or_own("backend_type"),
        "wait": lambda row: (getattr(row[0], "wants", None), getattr(row[0], "lock_type", None), getattr(row[0], "mode", None),
                             getattr(row[0], "relation", None)),
        "name": lambda row: getattr(row[0], "gid", None) or getattr(row[0], "resource", None),
        "dur": lambda row: _lock_dur(*row),
    }
    FILTER_WORDS = ("app", "query", "user", "db", "name")

    def __init__(self) -> None:
        super().__init__("Locks", id="locks")
        self._shape: tuple = ()
        self._tree_nodes: dict[Key, TreeNode[int]] = {}
        self._more_nodes: dict[Key, list[TreeNode[int]]] = {}  # a node's wrapped lines: its first children
        self._lines: dict[Key, tuple[object, list[Text]]] = {}  # the facts each label shows, and its lines
        self._key_of: dict[int, Key] = {}  # id(tree node) -> its key (a wrapped line: its node's)
        self._shown: dict[Key, list[Text]] = {}  # the lines each node shows now
        self._layout: Layout | None = None
        self._passes_member: Callable[[Any], bool] | None = None  # the filter `_layout` was laid out with
        self._summary_width = 0  # summary_width() when the tree was last built
        self._layout_nodes: list[Node] = []  # the layout's nodes, each group's list line among them
        self._opened: set[Key] = set()  # the groups whose sessions are listed (opened by the user)
        self._listed: dict[Key, tuple] = {}  # an opened group -> the sessions listed under it (and their lines)
        self._ended: int | None = None  # the session the cursor was on, which has ended since
        self._last_facts: tuple | None = None
        self._snapshot: Snapshot | None = None
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
        # Until the first sample, nothing is known (a pooler may hold the probes' first queries for
        # a while): never "no blocked sessions" before the locks were read.
        tree = LockTree(NOT_SAMPLED_YET, id="locks-tree")
        tree.show_root = True
        tree.guide_depth = 2
        yield tree

    # -- the labels ---------------------------------------------------------------------------

    def _facts(self, node: Node) -> object:
        """What a node's label shows: its label is made again only when this changes."""
        layout = self._layout
        assert layout is not None
        kind, ident = node.key[0], node.key[1]
        if kind == "c":
            return tuple(layout.blocked[m] for m in layout.cycles[ident])  # the members' waits: the countdown
        if kind == "p":
            return layout.prepared[ident]
        if kind == "g":
            members = [layout.blocked[m] for m in node.members]
            waits = [b.wait_s for b in members if b.wait_s is not None]
            return (node.members, min(waits, default=None), max(waits, default=None),
                    sum(len(b.worker_pids) for b in members), members[0], node.depth, node.under)
        if kind == "m":
            return (node.members, node.depth)
        if node.depth == 1 and ident in layout.roots:
            return layout.roots[ident]
        b = layout.blocked.get(ident)
        if node.parent is not None and node.parent[0] == "m":  # a listed member of a group: its wait and place
            return (b.wait_s if b else None, len(b.blocked_by) if b else None, b.worker_pids if b else None, node.depth)
        return (b, node.depth, node.under)

    def _label(self, node: Node, width: int) -> list[Text]:
        layout, snapshot = self._layout, self._snapshot
        assert layout is not None and snapshot is not None
        kind, ident = node.key[0], node.key[1]
        here = snapshot.server.database
        if kind == "c":
            members = layout.cycles[ident]
            return wrap_segments([
                ("wait cycle ", "bold red", FIGURE), (" → ".join(map(str, [*members, members[0]])), "bold", WORDS),
                (f"  {_deadlock_countdown(snapshot, [layout.blocked[m] for m in members])}", "yellow", WORDS),
            ], label_width(width, 1), label_width(width, 2))
        if kind == "p":
            return prepared_label(layout.prepared[ident], width)
        if kind == "g":
            return group_label([layout.blocked[m] for m in node.members], node.depth, width, here, node.under)
        if kind == "m":
            return [members_label(node.members, node.depth, width)]
        if node.depth == 1 and ident in layout.roots:
            return blocker_label(layout.roots[ident], width)
        if node.parent is not None and node.parent[0] == "m":
            return member_label(layout.blocked[ident], node.depth, width, node.under)
        return blocked_label(layout.blocked[ident], node.depth, width, here, node.under)

    def _lines_of(self, node: Node, width: int) -> list[Text]:
        facts = self._facts(node)
        kept = self._lines.get(node.key)
        if kept is not None and kept[0] == facts:
            return kept[1]
        lines = self._label(node, width)
        self._lines[node.key] = (facts, lines)
        return lines

    # -- the tree -----------------------------------------------------------------------------

    def _member_passes(self, snapshot: Snapshot) -> Callable[[Any], bool] | None:
        """Whether a tree member passes the filter, looked at with its session's fields (None: no filter)."""
        if not self.filter:
            return None
        sessions = {s.pid: s for s in snapshot.sessions}
        passes = self.passes
        return lambda member: passes((member, sessions.get(getattr(member, "pid", -1))))

    def show(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot
        if not self._fitted_to and not self.zoomed and not self.query_one(LockTree).size.width:
            return  # never laid out yet: its first resize builds the tree, fitted to its width
        facts = (snapshot.blocked, snapshot.blockers, snapshot.prepared_xacts, snapshot.app_locks, snapshot.cycles, self.filter,
                 self._ended is not None and self._cursor_key() is None)
        if facts == self._last_facts:
            return  # the same tree: nothing to rebuild or relabel
        self._last_facts = facts
        tree = self.query_one(LockTree)
        if self._ended is not None and self._cursor_key() is not None:
            self._ended = None  # the operator moved the cursor on since: the notice was read
        # Built once per tree (a dict of the sample's sessions): the layout and the root's line use it.
        member_passes = self._passes_member = self._member_passes(snapshot)
        layout = self._layout = lay_out(snapshot, member_passes)
        # Each label fitted to the width, over more lines where an explanation needs them; zoomed,
        # on one line (the tree scrolls sideways instead).
        width = self._fitted_to = self._label_width()
        nodes = self._layout_nodes = _with_member_lists(layout.nodes)
        lines_of = {node.key: self._lines_of(node, width) for node in nodes}
        opened = [node for node in nodes if node.key[0] == "m" and node.key in self._opened]
        keep = set(lines_of) | {("s", pid) for node in opened for pid in node.members}
        self._lines = {key: lines for key, lines in self._lines.items() if key in keep}  # (forget what is no longer shown)
        shape = tuple((node.key, node.parent, len(lines_of[node.key])) for node in nodes)
        root_label = fit_segments(self._summary(snapshot, layout, width), width - 2)
        if root_label.plain != str(tree.root.label):
            tree.root.set_label(root_label)
        if (summary := self._summary_needs()) != self._summary_width:
            self._summary_width = summary
            self.post_message(self.SummaryWidth())  # the locks row may share its width again
        if shape != self._shape:
            cursor = self._cursor_key()
            tree.root.remove_children()
            self._tree_nodes, self._more_nodes, self._key_of, self._listed, self._shown = {}, {}, {}, {}, {}
            parents = layout.parents
            for node in nodes:
                under = tree.root if node.parent is None else self._tree_nodes[node.parent]
                label, *more = lines_of[node.key]
                data = node.key[1] if node.key[0] == "s" else None  # a session: C, K and Enter act on it
                if node.key[0] == "m":  # a group's sessions, listed when it is opened
                    added = under.add(label, data=None, expand=False, allow_expand=True)
                elif node.parent is None or node.key in parents or more or node.key[0] == "g":
                    added = under.add(label, data=data, expand=True)
                else:  # a session nobody waits on, whose label is one line: a leaf, no ▼ that would open nothing
                    added = under.add_leaf(label, data=data)
                self._remember(node.key, added, [added.add_leaf(line, data=data) for line in more], lines_of[node.key])
            for node in opened:
                self._list_members(node, width)
                self._tree_nodes[node.key].expand()
            tree.root.expand()
            self._shape = shape
            self._restore_cursor(cursor)
            self.call_after_refresh(tree.report_rows)
        else:
            # Only labels whose facts changed are set, all at once, with one repaint.
            changes: list[tuple[TreeNode[int], Text]] = []
            for node in nodes:
                if self._shown.get(node.key) is not lines_of[node.key]:
                    self._relabel(node.key, lines_of[node.key], changes)
            for node in opened:
                self._list_members(node, width, changes)
            tree.set_labels(changes)

    def _summary(self, snapshot: Snapshot, layout: Layout, width: int) -> list[tuple[str, str, bool]]:
        """The root's line: what the tree holds, each count whole or left out."""
        count = len(snapshot.blocked)
        summary = []
        summary.append((f"{count:,} blocked session(s)", "bold red", False))
        if layout.cycles:  # the rarest and worst first
            summary.append((f", {len(layout.cycles)} wait cycle(s)", "bold red", False))
        if layout.prepared:
            summary.append((f", {len(layout.prepared)} prepared transaction(s)", "bold red", False))
        summary.append((f", {len(layout.roots):,} root blocker(s)", "bold red", False))
        if not count:
            summary = []
            # "None blocked" only when the probe read the locks: a failed probe (no privilege, a
            # lock timeout) or none run (a replay before the host's recording) knows nothing.
            status = snapshot.probes.get("locks")
            if status is None:
                summary.append(("locks not sampled", "dim", False))
            elif status.error:
                summary += [("blocked sessions unknown: ", "bold yellow", False), (fmt.one_line(status.error, 200), "yellow", True)]
            else:
                summary.append(("no blocked sessions", "green", False))
        counted = len(summary)  # the blocked counts, or what is known of them
        # Application locks held (advisory locks; sp_getapplock's): seen before anyone waits.
        member_passes = self._passes_member  # the filter of the tree `layout` was laid out with
        held = [a for a in snapshot.app_locks if a.granted and (member_passes is None or member_passes(a))]
        if held:
            held_said = f", {len(held)} app lock{'' if len(held) == 1 else 's'} held"
            said = "".join(text for text, _style, _cut in summary)
            if said.endswith("no blocked sessions") and len(said) + len(held_said) > width - 2:
                summary[-1] = ("none blocked", "green", False)  # the shorter words, so that the count stays whole
            summary.append((held_said, "", False))
            names = ", ".join(f"{a.resource} by {a.pid}" for a in held[:5]) + (", …" if len(held) > 5 else "")
            summary.append((f": {names}", "dim", True))
        if self._ended is not None:
            # The session the cursor was on ended: said first, in fewer words where the first count
            # would not fit beside it, else after the counts (a narrow Locks panel kept only the
            # notice, and at 100x30 with nobody blocked left nothing at all: a bare ▼).
            first = cell_len(summary[0][0])
            for ended in (f"session {self._ended} ended · ", f"{self._ended} ended · "):
                if cell_len(ended) + first <= width - 2:
                    summary.insert(0, (ended, "bold yellow", False))
                    break
            else:
                summary.insert(counted, (f" · session {self._ended} ended", "bold yellow", False))
        return summary

    def _remember(self, key: Key, node: TreeNode[int], more: list[TreeNode[int]], lines: list[Text]) -> None:
        self._tree_nodes[key], self._more_nodes[key], self._shown[key] = node, more, lines
        for each in (node, *more):
            self._key_of[id(each)] = key

    def _relabel(self, key: Key, lines: list[Text], changes: list[tuple[TreeNode[int], Text]]) -> None:
        """Queue the node's new lines on `changes` (set together: LockTree.set_labels)."""
        label, *more = lines
        changes.append((self._tree_nodes[key], label))
        changes.extend(zip(self._more_nodes[key], more, strict=True))
        self._shown[key] = lines

    def _list_members(self, node: Node, width: int, changes: list[tuple[TreeNode[int], Text]] | None = None) -> None:
        """A group's sessions under its list node (when opened), each labelled as a session."""
        layout = self._layout
        assert layout is not None
        group = self._tree_nodes[node.key]
        depth = node.depth + 1
        members = [Node(("s", pid), node.key, depth, node.under) for pid in node.members]
        lines_of = {m.key: self._lines_of(m, width) for m in members}
        shape = tuple((m.key, len(lines_of[m.key])) for m in members)
        if self._listed.get(node.key) != shape:
            for gone in [k for k, n in self._tree_nodes.items() if n.parent is group]:
                self._forget(gone)
            group.remove_children()
            for m in members:
                label, *more = lines_of[m.key]
                pid = m.key[1]
                added = group.add(label, data=pid, expand=True) if more else group.add_leaf(label, data=pid)
                self._remember(m.key, added, [added.add_leaf(line, data=pid) for line in more], lines_of[m.key])
            self._listed[node.key] = shape
            return
        queued: list[tuple[TreeNode[int], Text]] = [] if changes is None else changes
        for m in members:
            if self._shown.get(m.key) is not lines_of[m.key]:
                self._relabel(m.key, lines_of[m.key], queued)
        if changes is None:
            self.query_one(LockTree).set_labels(queued)

    def _forget(self, key: Key) -> None:
        self._shown.pop(key, None)
        for each in (self._tree_nodes.pop(key, None), *self._more_nodes.pop(key, [])):
            if each is not None:
                self._key_of.pop(id(each), None)

    def on_tree_node_expanded(self, event: Tree.NodeExpanded) -> None:
        key = self._key_of.get(id(event.node))
        if key is None or key[0] != "m" or key in self._opened or self._layout is None:
            return
        self._opened.add(key)
        node = next((n for n in self._layout_nodes if n.key == key), None)
        if node is not None:
            self._list_members(node, self._fitted_to or self._label_width())

    def on_tree_node_collapsed(self, event: Tree.NodeCollapsed) -> None:
        key = self._key_of.get(id(event.node))
        if key is not None and key[0] == "m":
            self._opened.discard(key)

    # -- the cursor: a node, not a line ---------------------------------------------------------

    def _cursor_key(self) -> Key | None:
        node = self.query_one(LockTree).cursor_node
        return None if node is None else self._key_of.get(id(node))

    def _restore_cursor(self, key: Key | None) -> None:
        """Put the cursor back on the node `key` after the tree was built again (its line may
        have moved); on the group that now holds its session; or, when its session ended, on the
        root, whose line says so."""
        if key is None:
            return
        tree = self.query_one(LockTree)
        _ = tree.last_line  # the lines built: each node's line is known
        target = self._tree_nodes.get(key)
        if target is None and key[0] == "s" and self._layout is not None:
            group = self._list_holding(key[1])
            target = self._tree_nodes.get(group.key) if group is not None else None
            if target is None and key[1] not in self._layout.blocked and key[1] not in self._layout.roots and self._snapshot is not None:
                self._ended = key[1]
                tree.root.set_label(fit_segments(self._summary(self._snapshot, self._layout, self._fitted_to), self._fitted_to - 2))
        tree.move_cursor(target if target is not None else tree.root)

    def _list_holding(self, pid: int) -> Node | None:
        """The line listing the group whose member `pid` is (its sessions drawn when opened)."""
        return next((n for n in self._layout_nodes if n.key[0] == "m" and pid in n.members), None)

    def zoom_changed(self, zoomed: bool) -> None:
        self.on_resize()  # whole labels zoomed, fitted ones back
        if not zoomed:
            self.query_one(LockTree).scroll_to(x=0, animate=False)

    def on_resize(self) -> None:
        # The labels are fitted to the width: fit them again, if it changed (a taller panel
        # changes none).
        if self._snapshot is not None and self._fitted_to != self._label_width():
            self._last_facts, self._lines = None, {}
            self.show(self._snapshot)

    def _label_width(self) -> int:
        return UNFITTED if self.zoomed else max(20, self.query_one(LockTree).size.width)

    class SummaryWidth(Message):
        """The width the root's line needs to say every count whole changed (summary_width)."""

    def summary_width(self) -> int:
        """The width (its border and the root's ▼ included) at which the root's line says every
        count whole: what the locks row keeps for the tree (PanelsView) before names beside it
        are made whole. 0 before its first tree."""
        return self._summary_width

    def _summary_needs(self) -> int:
        if self._snapshot is None or self._layout is None:
            return 0
        return len(fit_segments(self._summary(self._snapshot, self._layout, UNFITTED), UNFITTED)) + 4

    @property
    def selected_pid(self) -> int | None:
        node = self.query_one(Tree).cursor_node
        return None if node is None else node.data

    def select_pid(self, pid: int) -> bool:
        """Put the tree's cursor on session `pid` (where C, K and Enter act), focused, opening the
        group that holds it; False when the tree does not show it (ended, filtered out)."""
        tree = self.query_one(LockTree)
        key = ("s", pid)
        if key not in self._tree_nodes and self._layout is not None:
            group = self._list_holding(pid)
            if group is None or group.key not in self._tree_nodes:
                return False
            self._opened.add(group.key)
            self._list_members(group, self._fitted_to or self._label_width())
            self._tree_nodes[group.key].expand()
        node = self._tree_nodes.get(key)
        if node is None:
            return False
        _ = tree.last_line  # the lines built (a rebuilt tree's are built when drawn): the node's line is known
        tree.move_cursor(node)
        tree.focus()
        return tree.cursor_node is node


def _with_member_lists(nodes: tuple[Node, ...]) -> list[Node]:
    """The layout's nodes, each group followed by the node that lists its sessions when opened."""
    out: list[Node] = []
    for node in nodes:
        out.append(node)
        if node.key[0] == "g":
            out.append(Node(("m", node.key), node.key, node.depth + 1, node.under, node.members))
    return out
