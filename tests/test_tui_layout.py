"""The dashboard's rows share their width: a name is whole wherever a panel on its row has room to
give (columns it leaves blank, or a figure it shows only where the names can be whole beside it),
and every figure is whole or left out (its panel's border says so), at 80x24 and 100x30.

Fed synthetic snapshots (the model, not a database): what is laid out is the same whoever took
them."""

from __future__ import annotations

import dataclasses

import pytest
from rich.cells import cell_len
from textual.widgets import Tree

from probes.model import LeaseSample, RingSample, Snapshot
from tests.test_tui import rendered_cells, sample_app, settle
from tui.sample import sample_snapshot
from tui.widgets.keyed_table import KeyedTable
from tui.widgets.panels import LeasesPanel, LocksPanel, Panel
from tui.widgets.panels.base import FIGURE, PHRASE, WORDS, wrap_segments

SIZES = [(80, 24), (100, 30)]
SMALL_ROW = ("rings", "leases", "compaction", "replication", "pooler")


def relays(step: int = 0, *, rings: tuple[RingSample, ...] | None = None) -> Snapshot:
    """The issue's screen: a ring beside the relays' leases, one of them `payments-relay`."""
    ring = RingSample(name="demo.audit", capacity=40, used=39, refused_total=21)
    return dataclasses.replace(
        sample_snapshot(step=step), rings=(ring,) if rings is None else rings,
        leases=(LeaseSample(name="payments-relay", holder="payments-relay-2", token=12, expires_in_s=3.2 - step, state="held"),
                LeaseSample(name="outbox-relay", holder="orders-relay-1", token=3, expires_in_s=4.0, state="held")))


async def first_snapshot(pilot, app) -> None:
    await settle(pilot, app, lambda: app.snapshot is not None, "first snapshot")
    await pilot.pause()
    await pilot.pause()


def shown_panels(app, ids: tuple[str, ...]) -> list[Panel]:
    return [p for p in (app.query_one(f"#{i}", Panel) for i in ids) if p.display]


def table_width(table: KeyedTable) -> int:
    return sum(column.get_render_width(table) for column in table.ordered_columns)


def clipped_names(table: KeyedTable) -> list[tuple[str, str, str]]:
    """(row, column, what is shown) for every name shown shortened."""
    return [(row, column, str(shown)) for row, column, shown, given in rendered_cells(table) if str(shown) != str(given)]


def blank_columns(panel: Panel) -> int:
    """The columns of its table's width that no column of it uses (room it could give), beyond
    what its title and border note need."""
    table = panel.query_one(KeyedTable)
    return table.size.width - max(table_width(table), cell_len(str(panel.border_title)) + 2)


def assert_figures_whole(app) -> None:
    """Every cell shown is the panel's own value, or a name (a text column) shortened with an
    ellipsis; every table's columns fit inside its panel."""
    for table in app.query(KeyedTable):
        if not all(getattr(node, "display", True) for node in table.ancestors_with_self):
            continue
        for row, column, shown, given in rendered_cells(table):
            if str(shown) != str(given):
                spec = next(c for c in table._spec if c.key == column)
                assert spec.text, f"{table.id}: figure column {column} was cut: {shown!r} of {given!r}"
                assert str(shown).endswith("…") and str(given).startswith(str(shown)[:-1]), (table.id, row, shown, given)
        assert table_width(table) <= table.size.width, (table.id, table_width(table), table.size.width)


def optional_width(table: KeyedTable) -> int:
    """The width of the columns it shows past its first two (its name and first figure, by
    priority): what it shows only where the row's names can be whole beside them."""
    order = sorted(range(len(table._spec)), key=lambda i: (table._spec[i].priority, i))[2:]
    optional = {table._spec[i].key for i in order}
    return sum(column.get_render_width(table) for column in table.ordered_columns if column.key.value in optional)


def lacking(table: KeyedTable) -> int:
    """How much wider its shortened name columns would have to be for every name to be whole."""
    by_column: dict[str, int] = {}
    for _row, column, shown, given in rendered_cells(table):
        if str(shown) != str(given):
            by_column[column] = max(by_column.get(column, 0), cell_len(str(given)) - cell_len(str(shown)))
    return sum(by_column.values())


def assert_no_name_clipped_beside_room(app, ids: tuple[str, ...] = SMALL_ROW) -> None:
    """The row's rule: while a panel shows a name shortened, the row's blank columns and the
    columns its panels show past their name and first figure would not make it whole."""
    panels = shown_panels(app, ids)
    room = {p.id: (blank_columns(p), optional_width(p.query_one(KeyedTable))) for p in panels}
    for panel in panels:
        lack = lacking(panel.query_one(KeyedTable))
        if lack:
            given = sum(blank + optional for blank, optional in room.values())
            assert given < lack, (f"{panel.id}: names clipped {clipped_names(panel.query_one(KeyedTable))}, {lack} short, "
                                  f"beside (blank, optional columns) {room}")


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_the_lease_name_is_whole_beside_a_ring(size):
    app = sample_app(snapshots=[relays()])
    async with app.run_test(size=size) as pilot:
        await first_snapshot(pilot, app)
        leases = app.query_one("#leases-table", KeyedTable)
        names = {row: str(leases.get_cell(row, "name")) for row in ("payments-relay", "outbox-relay")}
        assert names == {"payments-relay": "payments-relay", "outbox-relay": "outbox-relay"}, names
        rings = app.query_one("#rings-table", KeyedTable)
        assert str(rings.get_cell("demo.audit", "name")) == "demo.audit"
        # Each its figures beside its name: a ring's used/capacity, a lease's TTL; at 100 columns
        # the token too (room the row has once the names are whole).
        assert {"name", "used"} <= set(rings.shown_columns())
        assert {"name", "expires"} <= set(leases.shown_columns())
        assert "token" in leases.shown_columns() or size[0] < 100
        assert_figures_whole(app)
        assert_no_name_clipped_beside_room(app)


async def test_an_empty_rings_panel_gives_its_room_to_the_names():
    # No ring at all: an empty table's headers are no reason to cut a lease's name.
    app = sample_app(snapshots=[relays(rings=())])
    async with app.run_test(size=(80, 24)) as pilot:
        await first_snapshot(pilot, app)
        leases = app.query_one("#leases-table", KeyedTable)
        assert str(leases.get_cell("payments-relay", "name")) == "payments-relay"
        assert_figures_whole(app)
        assert_no_name_clipped_beside_room(app)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_names_too_long_for_the_row_are_cut_and_the_figures_stay_whole(size):
    # 40-odd-character lease names cannot be whole beside a ring and the compaction groups: they
    # are cut with an ellipsis, every figure shown is whole, the columns left out are said in
    # the border, and no panel of the row keeps blank columns while they are cut.
    app = sample_app(snapshots=[sample_snapshot(long_names=True)])
    async with app.run_test(size=size) as pilot:
        await first_snapshot(pilot, app)
        leases_panel = app.query_one(LeasesPanel)
        leases = leases_panel.query_one(KeyedTable)
        cut = clipped_names(leases)
        assert cut and all(column == "name" and shown.endswith("…") for _row, column, shown in cut), cut
        assert leases.hidden and "(z" in str(leases_panel.border_subtitle), (leases.hidden, leases_panel.border_subtitle)
        # Leaving the token out would not make a 48-character name whole: at 100 columns it stays
        # (as it was before names came first).
        assert "token" in leases.shown_columns() or size[0] < 100
        assert_figures_whole(app)
        assert_no_name_clipped_beside_room(app)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("kind", ["sample", "relays", "long"])
async def test_every_row_keeps_its_figures_whole(size, kind):
    snapshot = {"sample": sample_snapshot(), "relays": relays(), "long": sample_snapshot(long_names=True)}[kind]
    app = sample_app(snapshots=[snapshot])
    async with app.run_test(size=size) as pilot:
        await first_snapshot(pilot, app)
        assert_figures_whole(app)
        assert_no_name_clipped_beside_room(app)
        # Nothing off the screen's edge: each row's panels side by side within its width.
        for row in ("#row-queues", "#row-locks", "#row-small"):
            panels = [p for p in app.query_one(row).children if p.display]
            assert sum(p.outer_size.width for p in panels) <= size[0], (row, [(p.id, p.outer_size.width) for p in panels])


async def test_the_blocked_locks_row_at_80_columns_keeps_the_trees_explanations_whole():
    app = sample_app(snapshots=[sample_snapshot()])  # sessions blocked in chains under idle-in-transaction roots
    async with app.run_test(size=(80, 24)) as pilot:
        await first_snapshot(pilot, app)
        locks = app.query_one(LocksPanel)
        assert app.query_one("#row-locks").has_class("-narrow")
        assert locks.outer_size.width >= 37, locks.outer_size.width
        sessions = app.query_one("#sessions-table", KeyedTable)
        assert {"pid", "state"} <= set(sessions.shown_columns())
        assert_figures_whole(app)
        # Every explanation whole: its words over the tree's lines (scrolled to, not cut), never
        # one cut with an ellipsis.
        lines: list[str] = []

        def walk(node) -> None:
            for child in node.children:
                lines.append(str(child.label).strip())
                walk(child)

        walk(locks.query_one(Tree).root)
        text = " ".join(lines)
        assert "wants to update a row of accounts (0,0)" in text, lines
        assert not any("wants" in line and line.endswith("…") for line in lines), lines


def calm(*, apps: dict[str, int] | None = None) -> Snapshot:
    """Nobody blocked: the tree says one line; the connections by state and by `apps`."""
    snapshot = sample_snapshot()
    connections = snapshot.connections
    assert connections is not None
    if apps is not None:
        connections = dataclasses.replace(connections, by_application=apps)
    return dataclasses.replace(snapshot, blocked=(), blockers=(), cycles=(), connections=connections, sessions=tuple(
        dataclasses.replace(s, blocked_by=(), wait_event_type=None, wait_event=None) for s in snapshot.sessions))


def blocked_with_long_apps() -> Snapshot:
    """Blocked sessions whose applications are named at length (the Sessions list's App)."""
    snapshot = sample_snapshot()
    connections = snapshot.connections
    assert connections is not None
    return dataclasses.replace(
        snapshot, connections=dataclasses.replace(connections, by_application={"payments-relay-worker": 9, "billing": 1}),
        sessions=tuple(dataclasses.replace(s, application=f"payments-relay-{s.pid % 10}") for s in snapshot.sessions))


def names_in(table: KeyedTable, column: str) -> dict[str, str]:
    return {row: str(table.get_cell(row, column)) for row in table.full_rows() if column in table.shown_columns()}


async def test_connections_names_are_whole_where_the_calm_row_has_room():
    # Calm: the tree says one line in 24 columns, Sessions keeps PID, State and App (32); the
    # room beyond goes to Connections' names before Sessions' further columns.
    app = sample_app(snapshots=[calm(apps={"queuetop-worker-pool": 8, "queuetop-producer": 3, "billing": 1})])
    async with app.run_test(size=(100, 30)) as pilot:
        await first_snapshot(pilot, app)
        assert app.query_one("#row-locks").has_class("-calm")
        connections = app.query_one("#connections-table", KeyedTable)
        names = names_in(connections, "name")
        assert "queuetop-worker-pool" in names.values() and not any(n.endswith("…") for n in names.values()), names
        sessions = app.query_one("#sessions-table", KeyedTable)
        assert {"pid", "state", "application"} <= set(sessions.shown_columns())
        assert sessions.parent is not None and app.query_one("#sessions").outer_size.width >= 32
        assert_figures_whole(app)


async def test_the_blocked_row_keeps_the_trees_counts_before_names_beside_it():
    # 100 columns, sessions blocked: the tree's root line says every count (`1 root blocker(s)`);
    # Connections' `idle in xact` waits for a wider screen (120), where the tree still says them.
    for width, whole in ((100, False), (120, True)):
        app = sample_app(snapshots=[sample_snapshot()])
        async with app.run_test(size=(width, 30)) as pilot:
            await first_snapshot(pilot, app)
            await settle(pilot, app, lambda app=app: "root blocker" in str(app.query_one(LocksPanel).query_one(Tree).root.label),
                         f"the tree's root line at {width}")
            connections = app.query_one("#connections-table", KeyedTable)
            assert (names_in(connections, "name").get("state:idle in transaction") == "idle in xact") is whole, \
                (width, names_in(connections, "name"))
            assert_figures_whole(app)


async def test_sessions_apps_are_whole_where_the_tree_has_room_beyond_its_counts():
    # Sessions' further figures (Holds up, Time, Xact) come before its App is widened: at 160
    # columns the row has room for those and the names whole.
    app = sample_app(snapshots=[blocked_with_long_apps()])
    async with app.run_test(size=(160, 40)) as pilot:
        await first_snapshot(pilot, app)
        await settle(pilot, app, lambda: "root blocker" in str(app.query_one(LocksPanel).query_one(Tree).root.label), "the tree")
        sessions = app.query_one("#sessions-table", KeyedTable)
        apps = names_in(sessions, "application")
        assert apps and all(a.startswith("payments-relay-") and not a.endswith("…") for a in apps.values()), apps
        assert app.query_one(LocksPanel).outer_size.width >= 37
        assert_figures_whole(app)
    # At 100 columns the tree's counts and Sessions' figures leave no room: App is cut, as before.
    app = sample_app(snapshots=[blocked_with_long_apps()])
    async with app.run_test(size=(100, 30)) as pilot:
        await first_snapshot(pilot, app)
        sessions = app.query_one("#sessions-table", KeyedTable)
        assert any(a.endswith("…") for a in names_in(sessions, "application").values())
        assert_figures_whole(app)


async def test_a_column_blank_in_every_row_gives_its_room_to_the_names():
    # Calm, everyone idle outside a transaction: Xact says nothing for any session. It is left
    # out (the border counts it) before an application's name is cut, and comes back once a row
    # has something to say in it.
    snapshot = calm()
    assert snapshot.connections is not None
    idle = dataclasses.replace(snapshot, sessions=tuple(
        dataclasses.replace(s, state="idle", xact_age_s=None, application=f"queuetop-listen:claim:demo.q{s.pid % 7}")
        for s in snapshot.sessions), blockers=(), connections=dataclasses.replace(snapshot.connections, xmin_holder_pid=None))
    # Then a transaction 42 s long: Xact has something to say.
    busy = dataclasses.replace(idle, sessions=(dataclasses.replace(idle.sessions[0], state="active", xact_age_s=42.0),
                                               *idle.sessions[1:]))
    app = sample_app(snapshots=[idle, busy])
    async with app.run_test(size=(100, 30)) as pilot:
        await first_snapshot(pilot, app)
        sessions = app.query_one("#sessions-table", KeyedTable)
        keys = [c.key for c in sessions._spec]

        def blank() -> list[str]:
            rows = sessions.full_rows().values()
            return [c for c in ("xact", "role") if rows and all(not str(cells[keys.index(c)]).strip() for cells in rows)]

        await settle(pilot, app, lambda: sessions.row_count > 0, "the sessions listed")
        assert "xact" in blank()  # (the premise: nothing in it)
        assert not set(blank()) & set(sessions.shown_columns()), sessions.shown_columns()
        assert "time" in sessions.shown_columns()  # a figure with something to say stays
        assert_figures_whole(app)
        await pilot.press("r")  # the next sample
        await settle(pilot, app, lambda: "xact" not in blank(), "the open transaction listed")
        await settle(pilot, app, lambda: "xact" in sessions.shown_columns(), "Xact laid out again")
        assert_figures_whole(app)


async def test_widths_hold_still_from_sample_to_sample_and_follow_a_resize():
    # The same rows sample after sample (figures changing, the countdown running): no panel's width
    # moves by a column; a smaller terminal shares the row again, names still whole where they fit.
    app = sample_app(snapshots=[relays(step) for step in range(3)])
    async with app.run_test(size=(100, 30)) as pilot:
        await first_snapshot(pilot, app)

        def widths() -> dict[str, int]:
            return {p.id or "": p.outer_size.width for p in shown_panels(app, SMALL_ROW)}

        first = widths()
        for step in (1, 2):
            await pilot.press("r")
            await settle(pilot, app, lambda step=step: app.snapshot is not None and app.snapshot.leases[0].expires_in_s == 3.2 - step,
                         f"sample {step}")
            await pilot.pause()
            assert widths() == first
        await pilot.resize_terminal(80, 24)
        await settle(pilot, app, lambda: sum(widths().values()) <= 80, "the row shared again")
        await pilot.pause()
        assert str(app.query_one("#leases-table", KeyedTable).get_cell("payments-relay", "name")) == "payments-relay"
        assert_figures_whole(app)
        assert_no_name_clipped_beside_room(app)


def test_a_lock_mode_is_not_broken_over_two_lines_where_one_line_holds_it():
    """A root blocker's "holds ACCESS EXCLUSIVE" read "holds ACCESS" / "EXCLUSIVE  blocks 88" in a
    narrow Locks panel (tmux, 100x30, a migration's lock): a PHRASE goes to the next line whole;
    only where no line could hold it is it broken between words, nothing lost."""
    def lines(kind, width, more):
        parts = [("14016 ", "", FIGURE), ("idle in xact", "", FIGURE), ("  holds ACCESS EXCLUSIVE", "", kind),
                 ("  blocks 88", "", FIGURE)]
        return [line.plain for line in wrap_segments(parts, width, more)]

    assert lines(WORDS, 36, 34) == ["14016 idle in xact  holds ACCESS", "EXCLUSIVE  blocks 88"]  # as it was
    assert lines(PHRASE, 36, 34) == ["14016 idle in xact", "holds ACCESS EXCLUSIVE  blocks 88"]
    assert lines(PHRASE, 60, 60) == ["14016 idle in xact  holds ACCESS EXCLUSIVE  blocks 88"]  # room: one line
    narrow = lines(PHRASE, 18, 14)  # no line holds it: broken between words, every word kept
    assert narrow[0] == "14016 idle in xact" and " ".join(narrow).split() == "14016 idle in xact holds ACCESS EXCLUSIVE blocks 88".split()
