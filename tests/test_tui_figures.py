"""No figure misleads, and zoom shows everything (issue 28, points 3 and 4), driven with Pilot at
80x24 and 100x30 on the deterministic sample: an expired lease says so in whatever columns are
shown, a column is whole or hidden and listed, names use the free width, the layout follows every
resize, rates are counted over a minute the header names, and a zoomed panel fills the screen
with every column whole, its border and its title: where the screen is narrower, a window of
columns beside the first moves sideways a column at a time (← →), and the border names those
either side; no column is ever cut at the screen's edge (issue 43, point 6)."""

from __future__ import annotations

import dataclasses
import re
from datetime import timedelta
from typing import ClassVar

import pytest
from rich.cells import cell_len
from textual.app import App
from textual.widgets import Tree

from probes.model import LeaseSample, Snapshot
from tests.test_tui import sample_app, settle
from tui.sample import TAKEN_AT, sample_snapshot
from tui.widgets.keyed_table import KeyedTable
from tui.widgets.panels import LeasesPanel, Panel, QueuesPanel
from tui.widgets.panels.base import fair_shares, share_width
from tui.widgets.panels.queues import RATE_WINDOW_S, RateWindow

SIZES = [(80, 24), (100, 30)]
ids = [f"{w}x{h}" for w, h in SIZES]
NEGATIVE = re.compile(r"(^|\s)-\d")


def table_lines(table: KeyedTable) -> list[str]:
    """What the table draws, line by line (header and the rows in view)."""
    return [table.render_line(y).text for y in range(table.size.height)]


def used_width(table: KeyedTable) -> int:
    return sum(column.get_render_width(table) for column in table.ordered_columns)


def shown_cells(table: KeyedTable) -> list[tuple[str, str, str, str]]:
    """(row, column, what the table shows, what the panel gave) for every shown cell."""
    index = {c.key: i for i, c in enumerate(table._spec)}
    return [(row, column, str(table.get_cell(row, column)), str(cells[index[column]]))
            for row, cells in table.full_rows().items() for column in table.shown_columns()]


def layout(app) -> dict[str, tuple[tuple[str, ...], int]]:
    """Each table's shown columns and width."""
    return {str(t.id): (tuple(t.shown_columns()), t.size.width) for t in app.query(KeyedTable)}


async def started(pilot, app) -> None:
    await settle(pilot, app, lambda: app.snapshot is not None, "first snapshot")
    await pilot.pause()
    await pilot.pause()


# -- an expired lease --------------------------------------------------------------------------


def lease_snapshot(*leases: LeaseSample) -> Snapshot:
    return dataclasses.replace(sample_snapshot(), leases=leases)


@pytest.mark.parametrize("size", SIZES, ids=ids)
@pytest.mark.parametrize("long_names", [False, True], ids=["short", "long"])
async def test_an_expired_lease_says_expired_in_whatever_columns_are_shown(size, long_names):
    app = sample_app(snapshots=[sample_snapshot(long_names=long_names)])
    async with app.run_test(size=size) as pilot:
        await started(pilot, app)
        table = app.query_one("#leases-table", KeyedTable)
        expired = next(key for key, cells in table.full_rows().items() if "compactor" in key)
        assert "expires" in table.shown_columns()
        assert str(table.get_cell(expired, "expires")) == "expired"
        lines = table_lines(table)
        assert any("expired" in line for line in lines), lines
        assert not any(NEGATIVE.search(line) for line in lines), lines  # never `-42.0s` beside a holder
        held = next(key for key in table.full_rows() if key.startswith("relay"))
        assert re.fullmatch(r"(1h00m|59m\d\ds)", str(table.get_cell(held, "expires")))  # counted down, held


@pytest.mark.parametrize("size", SIZES, ids=ids)
async def test_a_lease_counted_down_past_its_expiry_says_expired_and_its_ttl_is_never_cut(size):
    """The TTL counts down between samples: past zero it says `expired`, whatever the width
    (the State column shown or not), and every shown column is whole."""

    class Leases(App):
        notices: ClassVar[list] = []  # what settle() quotes when it times out

        def compose(self):
            yield LeasesPanel()

    app = Leases()
    async with app.run_test(size=size) as pilot:
        panel = app.query_one(LeasesPanel)
        table = panel.query_one(KeyedTable)
        seconds = [0.0]
        panel.clock = lambda: TAKEN_AT + timedelta(seconds=seconds[0])
        # From the narrowest its row gives it (its first two columns: a name at its narrowest and the TTL).
        for width in range(21, size[0] + 1, 3):
            panel.styles.width = width
            for name in ("relay", "outbox-relay", "relay.shipping-leader"):
                snapshot = lease_snapshot(LeaseSample(name=name, holder="outbox-relay-1", token=5, expires_in_s=2.5, state="held"))
                for seconds[0], ttl in ((0.0, "2.5s"), (2.0, "0.5s"), (3.0, "expired"), (12.8, "expired")):
                    panel.show(snapshot)
                    await settle(pilot, app, lambda w=width: table.size.width == w - 2 and used_width(table) <= table.size.width,
                                 f"the table fitted to {width}")
                    assert str(table.get_cell(name, "expires")) == ttl
                    lines = table_lines(table)
                    assert any(ttl in line for line in lines), (width, lines)  # whole on screen
                    assert "TTL" in lines[0]
                    assert not any(NEGATIVE.search(line) for line in lines), lines


# -- whole or hidden; names use the free width -------------------------------------------------


def check_whole_or_hidden(app) -> None:
    for table in app.query(KeyedTable):
        if not all(getattr(node, "display", True) for node in table.ancestors_with_self):
            continue  # a panel that takes no room (Pooler without a PgBouncer, Replication with nothing to show)
        assert used_width(table) <= table.size.width, (table.id, table.shown_columns())
        for row, column, shown, given in shown_cells(table):
            if shown != given:  # only a name is shortened, with an ellipsis
                assert shown.endswith("…") and given.startswith(shown[:-1]), (table.id, row, column, shown)
                assert next(c for c in table._spec if c.key == column).text, (table.id, column, shown)
        hidden = [c.label for c in table._spec if c.key not in table.shown_columns()]
        assert tuple(hidden) == table.hidden  # listed (the border says it: see the zoom tests)


def check_names_use_the_free_width(app) -> None:
    """A name is cut only where its row has no width to spare: its table has none, nor the
    tables of the panels beside it that share the row's width."""
    for table in app.query(KeyedTable):
        cut = any(shown != given for _r, _c, shown, given in shown_cells(table))
        if cut:
            assert table.size.width - used_width(table) <= 0, (table.id, table.size.width, used_width(table))
    row = [app.query_one(f"#{name}", Panel) for name in ("rings", "leases", "compaction")]
    tables = [panel.query_one(KeyedTable) for panel in row]
    cut = [str(t.id) for t in tables if any(shown != given for _r, _c, shown, given in shown_cells(t))]

    def spare(t: KeyedTable) -> int:  # beyond its columns and the border's note of those left out (`+3 (z)`)
        note = cell_len(f"+{len(t.hidden)} (z)") + 6 if t.hidden else 0
        return max(0, t.size.width - max(used_width(t), note))

    if cut:
        assert sum(spare(t) for t in tables) <= 2, (cut, {str(t.id): spare(t) for t in tables})


@pytest.mark.parametrize("size", SIZES, ids=ids)
@pytest.mark.parametrize("long_names", [False, True], ids=["short", "long"])
async def test_every_column_is_whole_or_hidden_and_names_use_the_free_width(size, long_names):
    app = sample_app(snapshots=[sample_snapshot(long_names=long_names)])
    async with app.run_test(size=size) as pilot:
        await started(pilot, app)
        check_whole_or_hidden(app)
        check_names_use_the_free_width(app)
        if size == (100, 30) and not long_names:
            # The compaction's summary row whole where the row has room for it (`all (1 gro…` was
            # cut beside a Leases panel with columns to spare).
            compaction = app.query_one("#compaction-table", KeyedTable)
            assert str(compaction.get_cell("all:task_status", "group")) == "all (3 groups)"


@pytest.mark.parametrize(("first", "then"), [(SIZES[0], SIZES[1]), (SIZES[1], SIZES[0])], ids=["grow", "shrink"])
async def test_the_layout_is_recomputed_on_every_resize(first, then):
    """After a resize, every table shows what it would had the app started at that size: no
    column left hidden beside blank columns, none left cut."""
    fresh = sample_app(snapshots=[sample_snapshot(long_names=True)])
    async with fresh.run_test(size=then) as pilot:
        await started(pilot, fresh)
        expected = layout(fresh)
    app = sample_app(snapshots=[sample_snapshot(long_names=True)])
    async with app.run_test(size=first) as pilot:
        await started(pilot, app)
        before = layout(app)
        await pilot.resize_terminal(*then)
        await settle(pilot, app, lambda: layout(app) == expected, f"the layout of a {then} start", 100)
        assert before != expected
        check_whole_or_hidden(app)
        check_names_use_the_free_width(app)


def test_a_row_is_shared_by_need_smallest_first():
    assert fair_shares([10, 50, 20], 100) == [10, 50, 20]
    assert fair_shares([10, 50, 20], 60) == [10, 30, 20]
    assert sum(fair_shares([40, 40, 40], 80)) == 80
    # Each its first two columns, then the next column that costs least, then names longer.
    steps = [[(10, 10), (23, 23), (32, 32)], [(12, 12), (22, 59), (33, 70)], [(11, 11), (19, 28)]]
    # Even the first two columns do not fit: each its first, then the second columns that cost least.
    assert share_width(steps, 52) == [10, 23, 19]
    assert share_width(steps, 30) == [10, 10, 10]  # none's second column fits: the first ones, fairly
    shares = share_width(steps, 90)
    assert sum(shares) <= 90
    assert shares[2] == 28  # the compaction's group whole, before a third column anywhere
    assert shares[0] == 23 and shares[1] >= 22
    assert share_width(steps, 200) == [32, 70, 28]  # everything whole, the rest left to the one that fills


# -- rates over a minute -------------------------------------------------------------------------


def test_a_rate_window_counts_the_last_minute():
    window = RateWindow()
    window.add(None, 0.0, 2.0, None)
    assert window.per_minute() == (120.0, None)  # the first sample's rate, per minute
    t = 0.0
    for _ in range(30):  # quiet for a minute
        window.add(t, t + 2, 0.0, 0.0)
        t += 2
    window.add(t, t + 2, 500.0, 400.0)  # a burst: 1,000 in and 800 out in two seconds
    t += 2
    assert window.per_minute() == (1000.0, 800.0)
    for _ in range(29):
        window.add(t, t + 2, 0.0, 0.0)
        t += 2
    assert window.per_minute() == (1000.0, 800.0)  # still in sight 58 s later
    window.add(t, t + 2, 0.0, None)  # out unknown this cycle: counted over the seconds known
    t += 2
    assert window.per_minute()[0] == 0.0
    window.add(t, t + 30, 1.0, 1.0)  # a long span partly outside the window counts its share
    assert window.per_minute() == (30.0, pytest.approx(30.0 * 60 / 58))


def queue_snapshot(step: int, per_s: float) -> Snapshot:
    base = sample_snapshot(queues=2)
    queues = tuple(dataclasses.replace(q, enqueued_per_s=per_s if q.name == "orders" else 1.0, dequeued_per_s=per_s / 2)
                   for q in base.queues)
    return dataclasses.replace(base, queues=queues, taken_at=TAKEN_AT + timedelta(seconds=2 * step))


@pytest.mark.parametrize("size", SIZES, ids=ids)
async def test_a_burst_between_two_refreshes_stays_in_sight_for_a_minute(size):
    """The snapshot's rates are per second since the last probe cycle: a burst of 1,000 shows in
    one frame. The Queues panel counts them over the last minute, and its header says so."""
    app = sample_app(snapshots=[queue_snapshot(0, 0.0)])
    async with app.run_test(size=size) as pilot:
        await started(pilot, app)
        panel = app.query_one(QueuesPanel)
        table = panel.query_one(KeyedTable)
        labels = {c.key: str(c.label) for c in table._spec}
        assert labels["in"].endswith("/min") and labels["out"].endswith("/min")
        assert {"in", "out"} <= set(table.shown_columns())  # at 80 columns too
        header = table_lines(table)[0]
        assert "In/min" in header and "Out/min" in header
        window = int(RATE_WINDOW_S // 2)
        for step in range(1, window + 1):
            panel.show(queue_snapshot(step, 0.0))
        panel.show(queue_snapshot(window + 1, 500.0))  # 1,000 arrive in two seconds, 500 leave
        await pilot.pause()
        assert table.get_cell("table:orders", "in") == "1,000"
        assert table.get_cell("table:orders", "out") == "500"
        assert any("1,000" in line for line in table_lines(table))
        for step in range(window + 2, 2 * window + 1):  # a minute of quiet after it
            panel.show(queue_snapshot(step, 0.0))
        await pilot.pause()
        assert table.get_cell("table:orders", "in") == "1,000"
        panel.show(queue_snapshot(2 * window + 2, 0.0))
        await pilot.pause()
        assert table.get_cell("table:orders", "in") == "0.0"  # out of the window
        assert table.get_cell("reference:queue-01", "in") == "60.0"  # a steady 1/s is 60 a minute


# -- zoom ----------------------------------------------------------------------------------------


ZOOMABLE = ["queues", "locks", "leases", "rings", "compaction", "connections"]


@pytest.mark.parametrize("size", SIZES, ids=ids)
@pytest.mark.parametrize("panel_id", ZOOMABLE)
async def test_zoom_fills_the_screen_with_every_column_its_border_and_title(size, panel_id):
    app = sample_app(snapshots=[sample_snapshot(long_names=True)])
    async with app.run_test(size=size) as pilot:
        await started(pilot, app)
        panel = app.query_one(f"#{panel_id}", Panel)
        title = str(panel.border_title)
        tables = list(panel.query(KeyedTable))
        before = [t.shown_columns() for t in tables]
        inner = next(w for w in panel.query("*") if w.focusable)
        inner.focus()
        await pilot.press("z")
        await settle(pilot, app, lambda: app.screen.maximized is panel, f"{panel_id} zoomed")
        await pilot.pause()
        screen = app.screen.region
        footer = app.screen.query_one("Footer")
        assert panel.region.x == 0 and panel.region.width == screen.width
        assert panel.region.y == 0 and panel.region.bottom == footer.region.y  # every line above the footer
        # The title as it was (Connections' in its long form where the zoom gives it room).
        assert str(panel.border_title).replace("Connections ", "Conns ") == title.replace("Connections ", "Conns ")
        assert panel.styles.border_top[0] not in ("", "none", "hidden")
        assert "hidden" not in str(panel.border_subtitle) and "(z)" not in str(panel.border_subtitle)
        for table in tables:
            assert table.everything
            keys = [c.key for c in table._spec]
            seen: set[str] = set()
            for _step in range(len(keys)):  # → until no column is left to the right
                shown_columns = table.shown_columns()
                assert shown_columns[0] == keys[0] and shown_columns == sorted(shown_columns, key=keys.index)
                seen.update(shown_columns)
                for _row, column, shown, given in shown_cells(table):
                    # Every cell whole; only a name too wide for the screen alone (the window's first), shortened.
                    assert shown == given or (column == shown_columns[1] and table._spec[keys.index(column)].text
                                              and shown.endswith("…") and given.startswith(shown[:-1])), (column, shown, given)
                assert used_width(table) <= table.size.width and table.max_scroll_x == 0  # nothing cut at the edge
                left = [table._spec[i].label for i in range(1, keys.index(shown_columns[1]))] if len(shown_columns) > 1 else []
                right = [c.label for c in table._spec if c.key not in shown_columns and c.label not in left]
                assert (list(table.left), list(table.right)) == (left, right)
                subtitle = str(panel.border_subtitle).replace("(←/→ columns)", "").replace("(←/→)", "")
                assert ("→" in subtitle) == bool(right) and ("←" in subtitle) == bool(left), subtitle
                if not right:
                    break
                await pilot.press("right")
                await settle(pilot, app, lambda t=table, s=shown_columns: t.shown_columns() != s, "the window moved right")
            assert seen == set(keys)  # every column, whole, on some window
            assert table.region.right <= panel.region.right - 1  # inside its border
            assert table.size.height >= min(table.row_count + 1, panel.region.height - 3)
        await pilot.press("z")
        await settle(pilot, app, lambda: app.screen.maximized is None, "back")
        await pilot.pause()
        await pilot.pause()
        assert [t.shown_columns() for t in tables] == before
        assert all(t.scroll_x == 0 and not t.left and not t.right for t in tables)


@pytest.mark.parametrize("size", SIZES, ids=ids)
async def test_zoomed_queues_and_locks_scroll_sideways_at_80_columns(size):
    app = sample_app(snapshots=[sample_snapshot(long_names=True, sessions=40)])
    async with app.run_test(size=size) as pilot:
        await started(pilot, app)
        queues = app.query_one(QueuesPanel)
        table = queues.query_one(KeyedTable)
        assert "trend" not in table.shown_columns()  # the trend does not fit beside the long names
        table.focus()
        await pilot.press("z")
        await settle(pilot, app, lambda: table.everything, "zoomed")
        assert "hidden" not in str(queues.border_subtitle)
        # The trend lies right of the window, named in the border; → brings it, whole.
        if "trend" not in table.shown_columns():
            assert "Trend (peak)" in table.right
            for _ in range(len(table._spec)):
                if "trend" in table.shown_columns():
                    break
                await pilot.press("right")
                await pilot.pause()
        assert "trend" in table.shown_columns() and table.max_scroll_x == 0
        await pilot.press("escape")  # Escape is back from zoom too
        await settle(pilot, app, lambda: "trend" not in table.shown_columns(), "fitted again")

        locks = app.query_one("#locks", Panel)
        tree = locks.query_one(Tree)
        tree.focus()
        await pilot.press("z")
        await settle(pilot, app, lambda: app.screen.maximized is locks, "locks zoomed")
        # Whole labels: the root blocker's query is not cut with an ellipsis.
        await settle(pilot, app, lambda: all(not str(n.label).endswith("…") for n in tree.root.children), "whole labels")
        assert tree.virtual_size.width > tree.size.width and tree.max_scroll_x > 0
        assert locks.region.width == size[0] and tree.region.right <= locks.region.right - 1
        await pilot.press("right")
        await settle(pilot, app, lambda: tree.scroll_x > 0, "the tree scrolled sideways")
        await pilot.press("z")
        await settle(pilot, app, lambda: app.screen.maximized is None, "back")
        await settle(pilot, app, lambda: tree.virtual_size.width <= tree.size.width + 1, "labels fitted again")
