"""The panels, as one view: laid out in three rows (`PanelsView.build`), each snapshot handed to
every panel (once per snapshot and set of filters), other hosts' trends kept going, the focused
panel sorted, zoomed and filtered (`/`: each panel keeps its own filter). The app gives it the
snapshots (data down)."""

from __future__ import annotations

from textual.containers import Horizontal, Vertical
from textual.widget import Widget

from probes.model import Snapshot

from ..widgets.keyed_table import KeyedTable
from ..widgets.panels import (
    CompactionPanel,
    ConnectionsPanel,
    LeasesPanel,
    LocksPanel,
    Panel,
    PoolerPanel,
    QueuesPanel,
    ReplicationPanel,
    RingsPanel,
    SessionsPanel,
)

PANELS = (QueuesPanel, LocksPanel, SessionsPanel, ConnectionsPanel, RingsPanel, LeasesPanel, CompactionPanel, ReplicationPanel,
          PoolerPanel)


# The app's stylesheet: the panels' rows, and the filter box under them.
LAYOUT_CSS = """
    Screen { layout: vertical; }
    #row-queues { height: 3fr; min-height: 6; }
    #row-locks { height: 2fr; min-height: 6; }
    /* As tall as the longest of Rings, Leases and Compaction needs (every lease in sight when
       relays take over), up to 40 % of the screen; z zooms a panel to full screen. */
    #row-small { height: auto; max-height: 40%; }
    #row-small Panel { height: auto; min-height: 5; }
    #row-small KeyedTable { height: auto; }
    /* Locks, Sessions and Connections. While sessions are blocked the lock tree gets the room
       (its labels: who, how long, on what), the Sessions list enough for PID, State and App
       side by side (32: a 4-digit pid, `idle in xact` and 8 cells of a name; a longer pid
       shortens the name, down to 6), and Connections its figures' lines and a count per state
       (23), the tree the rest (25 at 80 columns: its header whole); when
       none is, the tree says one line and the Sessions list gets the room. */
    #locks { width: 5fr; }
    #sessions { width: 2fr; min-width: 32; }
    #connections { width: 2fr; min-width: 23; }
    /* Application locks held and nobody blocked: the tree says one line (its count whole), the
       Sessions list what is left beside Connections. */
    #row-locks.-held #sessions { width: 1fr; min-width: 14; }
    /* Narrower than 100 columns (80x24), sessions blocked: the tree keeps the 37 columns it
       needs to say every explanation whole; Sessions PID and State (App joins from 100 columns,
       the border lists it among the hidden), Connections its figures' lines and a count per
       name (19). */
    #row-locks.-narrow #locks { width: 1fr; min-width: 37; }
    #row-locks.-narrow #sessions { width: 24; min-width: 24; }
    #row-locks.-narrow #connections { width: 19; min-width: 19; }
    #row-locks.-calm #locks { width: 24; }
    #row-locks.-calm #sessions { width: 2fr; }
    #row-locks.-calm #connections { width: 1fr; }
    /* Rings and Compaction as wide as their rows need (set from their content), within these
       bounds; Leases takes the rest. At 80 columns: a ring's name and used/capacity, a lease's
       name, token and TTL, the pending deltas and their group. */
    #rings { width: 24; min-width: 16; max-width: 28%; }
    #compaction { width: 22; min-width: 16; max-width: 30%; }
    /* Replication (shown only where a standby or a slot is): a replica's or slot's name, its
       state and the WAL behind or kept, fitted as Rings is. */
    #replication { width: 30; min-width: 20; max-width: 40%; }
    /* Pooler (shown only where a PgBouncer is given): a pool's name and its waiting clients
       first, fitted as Rings is. */
    #pooler { width: 30; min-width: 20; max-width: 40%; }
    #leases { width: 1fr; min-width: 40%; }
    /* Padding, not a margin: a sibling's margin narrowed the table below (its fraction of the
       width is the container's less the widest margin), a column lost at 23 cells. */
    #connections-spark { height: 1; padding: 0 1; }
    #connections-summary { height: 1; padding: 0 1; }
    #filter { dock: bottom; display: none; }
    #filter.visible { display: block; }
    /* Zoomed (z): the panel fills the screen above the footer, whatever its row made of it (a
       width fitted to its rows, an auto height), with its border and title; its table or tree
       shows every column whole and scrolls sideways where the screen is narrower. */
    Screen.-maximized-view Panel.-maximized {
        width: 1fr !important; height: 1fr !important; min-width: 0 !important; max-width: 100% !important;
        min-height: 0 !important; max-height: 100% !important;
    }
    Screen.-maximized-view Panel.-maximized KeyedTable { height: 1fr !important; }
    """


def _names_whole(panel: Panel, first: int) -> int:
    """The narrowest width (border included) at which its table shows at least its first
    `first + 1` columns (by priority) and every name it shows whole: where a figure its table
    would show beside them (Sessions' `Holds up`) takes the room, with that figure too. Not its
    title, which is fitted to the width it is given (`Conns` or `Connections`)."""
    steps = panel.query_one(KeyedTable).width_steps()
    for k in range(min(first, len(steps) - 1), len(steps)):
        if k + 1 == len(steps) or steps[k + 1][0] > steps[k][1]:
            return steps[k][1] + 2
    return 0


class PanelsView(Vertical):
    _applied: tuple[Snapshot, tuple[str, ...]] | None = None  # what the panels show, and with which filters

    @classmethod
    def build(cls) -> PanelsView:
        """The panels in three rows: the queues; locks, sessions and connections; rings, leases,
        compaction and replication (where there is any)."""
        return cls(
            Horizontal(QueuesPanel(), id="row-queues"),
            Horizontal(LocksPanel(), SessionsPanel(), ConnectionsPanel(), id="row-locks"),
            Horizontal(RingsPanel(), LeasesPanel(), CompactionPanel(), ReplicationPanel(), PoolerPanel(), id="row-small"),
        )

    def show(self, snapshot: Snapshot) -> None:
        """Hand `snapshot` to every panel, unless they show it already with their filters (a
        panel adds each sample it is given to its history)."""
        panels = [self.query_one(panel) for panel in PANELS]
        filters = tuple(panel.filter.text for panel in panels)
        if self._applied is not None and self._applied[0] is snapshot and self._applied[1] == filters:
            return
        self._applied = (snapshot, filters)
        with self.app.batch_update():
            for panel in panels:
                panel.show(snapshot)
            calm = self.query_one(LocksPanel).calm
            row = self.query_one("#row-locks")
            row.set_class(calm, "-calm")
            row.set_class(not calm and not snapshot.blocked and not snapshot.cycles, "-held")
            self._narrow()

    NARROW = 100  # below it, the blocked row's layout for 80 columns (LAYOUT_CSS: -narrow)

    def _narrow(self) -> None:
        """The blocked row's narrow layout below NARROW columns (not calm, not app locks alone)."""
        row = self.query_one("#row-locks")
        blocked = not row.has_class("-calm") and not row.has_class("-held")
        row.set_class(blocked and 0 < self.size.width < self.NARROW, "-narrow")
        self._names_whole_in_locks_row(row)

    # What the locks row keeps for each panel (LAYOUT_CSS): the tree 37 columns while sessions are
    # blocked (every explanation whole), or its root's line with every count whole if wider; its
    # one line (24) when calm; Sessions PID, State and App (32); Connections its figures' lines
    # and a count per name (23).
    KEEP_TREE, KEEP_TREE_CALM, KEEP_SESSIONS, KEEP_CONNECTIONS = 37, 24, 32, 23
    SETTLE = 2  # a panel narrower by at most this many columns keeps its width (no jump per sample)
    _floors: tuple[int | None, int | None] = (None, None)  # the min-widths set on Sessions and Connections
    _basis: tuple[object, ...] | None = None  # what they were worked out from

    def _names_whole_in_locks_row(self, row: Widget) -> None:
        """Sessions' App and Connections' names whole where the row has the room beside what each
        panel keeps: each panel's min-width raised to show its names whole, the smallest need
        first, and only where it is met in full (a name a few cells longer but still cut is not
        worth the tree's lines). The stylesheet's widths otherwise (wider screens leave them
        more); at 80 columns blocked (-narrow) and with application locks alone (-held) its
        widths are fixed already. Set only when it changes (no layout loop)."""
        width = self.size.width
        floors: list[int | None] = [None, None]
        if width > 0 and not row.has_class("-narrow") and not row.has_class("-held"):
            calm = row.has_class("-calm")
            sessions, connections = self.query_one(SessionsPanel), self.query_one(ConnectionsPanel)
            tree = self.KEEP_TREE_CALM if calm else max(self.KEEP_TREE, self.query_one(LocksPanel).summary_width())
            # What it depends on: the same as last time (most samples: the same names), nothing to do.
            basis = (width, calm, tree, sessions.query_one(KeyedTable).column_widths(),
                     connections.query_one(KeyedTable).column_widths())
            if basis == self._basis:
                return
            self._basis = basis
            keep = (self.KEEP_SESSIONS, self.KEEP_CONNECTIONS)
            # Whole: Sessions' PID, State and App (its first three columns); Connections' counts
            # and names (its first two). Calm, Sessions has the row's room already.
            wants = (keep[0] if calm else _names_whole(sessions, 2), _names_whole(connections, 1))
            spare = width - tree - sum(keep)
            for index in sorted(range(2), key=lambda i: wants[i] - keep[i]):
                lack = wants[index] - keep[index]
                if 0 < lack <= spare:
                    floors[index] = wants[index]
                    spare -= lack
            for index, (old, new) in enumerate(zip(self._floors, floors, strict=True)):
                if old is not None and new is not None and 0 < old - new <= min(self.SETTLE, spare):
                    floors[index] = old  # a name a cell or two shorter: not worth a layout
                    spare -= old - new
        else:
            self._basis = None
        if tuple(floors) != self._floors:
            self._floors = (floors[0], floors[1])
            self.query_one(SessionsPanel).styles.min_width = floors[0]  # None: the stylesheet's
            self.query_one(ConnectionsPanel).styles.min_width = floors[1]

    def on_resize(self) -> None:
        self._narrow()

    def on_locks_panel_summary_width(self) -> None:
        self._narrow()  # the tree built, or its root's line grew or shrank: what it keeps changed

    def record(self, snapshot: Snapshot) -> None:
        """Another host's snapshot, not shown: its trends and countdowns go on."""
        self.query_one(QueuesPanel).record(snapshot)
        self.query_one(ConnectionsPanel).record(snapshot)
        self.query_one(LeasesPanel).record(snapshot)

    def focused_panel(self) -> Panel | None:
        focused = self.app.focused
        return next((w for w in (focused.ancestors_with_self if focused else []) if isinstance(w, Panel)), None)

    def zoom(self) -> None:
        """The focused panel full screen, or back."""
        screen = self.screen
        if screen.maximized is not None:
            screen.minimize()
            return
        panel = self.focused_panel() or self.query_one(QueuesPanel)
        screen.maximize(panel, container=False)
        if self.focused_panel() is not panel:  # its keys (arrows, sideways scroll) act on what is shown
            target = next((w for w in panel.query("*") if w.focusable), None)
            if target is not None:
                target.focus()

    def filter_target(self) -> Panel:
        """The panel `/` filters: the focused one (Queues when none is)."""
        return self.focused_panel() or self.query_one(QueuesPanel)

    def sort(self, snapshot: Snapshot | None) -> str:
        """Cycle the focused panel's order (Queues when the focused one does not sort); says what it did."""
        panel = self.focused_panel()
        if panel is None or len(panel.SORTS) < 2:
            panel = self.query_one(QueuesPanel)
        order = panel.cycle_sort()
        if snapshot is not None:
            panel.show(snapshot)
        return f"{panel.title_text} sorted by {order}"
