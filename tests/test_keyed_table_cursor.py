"""Every list's cursor is on a row, not a line (issue 43, point 5): the keyed table every panel
shows its rows in keeps the cursor on the row the operator chose while rows re-sort, come and go,
and its columns are laid out again (a resize, a zoom); a list nobody chose a row in stays at its
top. Driven with Pilot on the table alone."""

from __future__ import annotations

from textual.app import App, ComposeResult

from tui.widgets.keyed_table import Column, KeyedTable

from .test_tui import settle

COLUMNS = [Column("name", "Name", 0, text=True, min_width=6), Column("n", "N", 1), Column("note", "Note", 2, text=True)]


def rows(*names: str) -> dict[str, tuple[str, str, str]]:
    return {name: (name, str(len(name)), f"about {name}") for name in names}


class OneTable(App[None]):
    AUTO_FOCUS = None  # as a panel's table before the operator goes to it

    def compose(self) -> ComposeResult:
        yield KeyedTable(COLUMNS, id="t")


async def test_the_cursor_follows_the_chosen_row_through_re_sorts_arrivals_departures_and_layouts():
    app = OneTable()
    async with app.run_test(size=(60, 20)) as pilot:
        table = app.query_one(KeyedTable)
        table.sync(rows("alpha", "bravo", "charlie", "delta"))
        await pilot.pause()
        # Nobody chose a row: a re-sort leaves the cursor at the top.
        table.sync(rows("delta", "charlie", "bravo", "alpha"))
        await pilot.pause()
        assert table.cursor_row == 0 and table.cursor_key() == "delta"
        table.focus()
        await pilot.press("down", "down")  # the operator chooses the third line: bravo
        await settle(pilot, app, lambda: table.cursor_key() == "bravo", "bravo chosen")
        table.sync(rows("alpha", "bravo", "charlie", "delta"))  # re-sorted: bravo is second now
        await pilot.pause()
        assert table.cursor_key() == "bravo" and table.cursor_row == 1
        table.sync(rows("aardvark", "abacus", "alpha", "bravo", "charlie"))  # two come above it, one goes below
        await pilot.pause()
        assert table.cursor_key() == "bravo" and table.cursor_row == 3
        await pilot.resize_terminal(20, 20)  # the columns laid out again (rebuilt)
        await settle(pilot, app, lambda: table.shown_columns() != ["name", "n", "note"], "fewer columns")
        assert table.cursor_key() == "bravo"
        table.show_everything(True)  # zoomed: rebuilt again
        await pilot.pause()
        assert table.cursor_key() == "bravo"
        table.show_everything(False)
        await pilot.pause()
        assert table.cursor_key() == "bravo"
        # Its row goes: the cursor stays on a row of the list (there is no row of its own to say so
        # here: the Sessions panel puts one there, its tests show it).
        table.sync(rows("aardvark", "abacus", "alpha", "charlie"))
        await pilot.pause()
        assert table.cursor_key() in ("aardvark", "abacus", "alpha", "charlie")


async def test_a_panel_may_put_the_cursor_on_a_row_of_its_own_that_stands_for_the_one_gone():
    app = OneTable()
    async with app.run_test(size=(60, 20)) as pilot:
        table = app.query_one(KeyedTable)
        table.sync(rows("alpha", "bravo", "charlie"))
        table.focus()
        await pilot.press("down")
        await settle(pilot, app, lambda: table.cursor_key() == "bravo", "bravo chosen")
        table.sync({**rows("charlie"), "gone:bravo": ("bravo", "-", "ended"), **rows("alpha")}, cursor_to="gone:bravo")
        await pilot.pause()
        assert table.cursor_key() == "gone:bravo" and table.cursor_row == 1
