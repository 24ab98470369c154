"""The dashboard, driven with Textual's Pilot: bindings, dialogs, read-only mode, engine controls
against a real PostgreSQL, and snapshot tests of the main screen fed by a deterministic source."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
from datetime import timedelta

import psycopg
import pytest
from rich.console import Console
from textual.widgets import DataTable, Input, Static, Tree

from probes.config import Config, DeclaredQueue
from probes.recording import Recorder, Recording
from probes.sampler import Sampler
from queues import compactor
from queues.control import SCENARIO_KEY, EngineControls
from queues.table_queue import TableQueue
from tui import format as fmt
from tui.app import replay_app
from tui.backend import DatabaseBackend
from tui.dashboard import QueuetopApp, StatusBar
from tui.messages import NoticeFromThread, SnapshotArrived
from tui.sample import SampleSource, sample_snapshot
from tui.screens.details import DetailsScreen
from tui.screens.dialogs import ConfirmScreen, HelpScreen, NoticesScreen, PromptScreen
from tui.widgets.keyed_table import KeyedTable
from tui.widgets.panels import CompactionPanel, ConnectionsPanel, LocksPanel, QueuesPanel


def sample_app(**kwargs) -> QueuetopApp:
    snapshots = kwargs.pop("snapshots", None) or [sample_snapshot(step=n) for n in range(3)]
    return QueuetopApp(lambda sink: SampleSource(sink, snapshots), **kwargs)


async def settle(pilot, app, predicate, what, attempts=200):
    for _ in range(attempts):
        await pilot.pause(0.02)
        if predicate():
            return
    said = [text for _at, _severity, text in app.notices]  # what the operator was told, to explain it
    raise AssertionError(f"timed out waiting for {what}" + (f"; notifications: {said}" if said else ""))


async def answer_prompt(pilot, app, key: str, text: str) -> None:
    """Press an engine action's key, check that its prompt opened, type `text` and run it."""
    await pilot.press(key)
    assert isinstance(app.screen, PromptScreen)
    app.screen.query_one(Input).value = text
    await pilot.press("enter")


async def queue_details_text(pilot, app, row_key: str, width: int = 200) -> str:
    """Select a queue's row once it is shown, press Enter, and return the details as text."""
    await settle(pilot, app, lambda: row_key in queue_rows(app), f"the row {row_key}", 500)
    table = app.query_one(QueuesPanel).query_one(DataTable)
    table.focus()
    table.move_cursor(row=table.get_row_index(row_key))
    await pilot.press("enter")
    assert isinstance(app.screen, DetailsScreen)
    await settle(pilot, app, lambda: app.screen.renderables is not None, "details loaded", 500)
    console = Console(width=width, record=True, file=io.StringIO())
    for renderable in app.screen.renderables:
        console.print(renderable)
    return console.export_text()


def rendered_text(renderable, width: int = 120) -> str:
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def queue_rows(app) -> dict[str, tuple]:
    return panel_rows(app, QueuesPanel)


def compaction_rows(app) -> dict[str, tuple]:
    return panel_rows(app, CompactionPanel)


def panel_rows(app, panel) -> dict[str, tuple]:
    """Every cell of every row, as the panel gave them (columns the width leaves out too)."""
    table = app.query_one(panel).query_one(KeyedTable)
    return {key: tuple(str(c) for c in cells) for key, cells in table.full_rows().items()}


# -- bindings and dialogs (deterministic source) -------------------------------------------


async def test_panels_show_the_snapshot_exactly():
    app = sample_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, app, lambda: app.snapshot is not None, "first snapshot")
        rows = queue_rows(app)
        assert rows["table:orders"][1] == "4,321"  # exact, readable
        assert rows["table:queue-03"][1].startswith("~")  # estimates marked
        for title in ("Queues", "Rings", "Leases", "Locks", ("Connections", "Conns"), "Compaction"):
            assert any(str(w.border_title).startswith(title) for w in app.query("Panel"))
        c = app.snapshot.connections  # sessions against max_connections, in the title (its short form beside the lock tree)
        assert app.query_one(ConnectionsPanel).border_title in (f"Connections {c.total:,}/{c.max:,}", f"Conns {c.total:,}/{c.max:,}")
        assert compaction_rows(app) == {
            "all:task_status": ("1,234", "all (3 groups)"),
            "group:task_status:12": ("1,000", "#12 spring survey"),
            "group:task_status:7": ("200", "#7 onboarding"),
            "group:task_status:3": ("34", "#3 nps"),
        }
        # The border says what fits of the last run, whole: here its short form; zoomed, all of it.
        compaction = app.query_one(CompactionPanel)
        assert compaction.border_subtitle.endswith(("ran 4.0s ago", "4.0s ago: 980 folded"))
        compaction.query_one(KeyedTable).focus()
        await pilot.press("z")
        await settle(pilot, app, lambda: compaction.border_subtitle == "4.0s ago: 980 folded", "zoomed subtitle")
        await pilot.press("escape")
        await settle(pilot, app, lambda: app.screen.maximized is None, "back from zoom")
        tree = app.query_one(LocksPanel).query_one(Tree)
        assert "blocked session" in str(tree.root.label)
        [root] = tree.root.children
        assert "idle in xact" in str(root.label)


async def test_rows_update_in_place():
    app = sample_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, app, lambda: app.snapshot is not None, "first snapshot")
        table = app.query_one(QueuesPanel).query_one(DataTable)
        keys_before = list(table.rows)
        await pilot.press("r")
        await settle(pilot, app, lambda: queue_rows(app)["table:orders"][1] == "4,328", "second sample")
        assert list(table.rows) == keys_before  # same row keys: updated, not rebuilt


async def test_greater_than_cycles_the_queue_order_by_depth_oldest_dead():
    app = sample_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, app, lambda: app.snapshot is not None, "first snapshot")
        table = app.query_one(QueuesPanel).query_one(DataTable)
        queues = app.snapshot.queues
        shown = lambda: [k.value for k in table.ordered_keys()]  # noqa: E731
        assert shown() == [f"{q.source}:{q.name}" for q in queues]  # the snapshot's order
        for order, figure in (("depth ↓", "depth"), ("oldest ready ↓", "oldest_ready_age_s"), ("dead ↓", "dead")):
            await pilot.press("greater_than_sign")
            expected = [f"{q.source}:{q.name}" for q in sorted(queues, key=lambda q: -(getattr(q, figure) or 0))]
            await settle(pilot, app, lambda expected=expected: shown() == expected, f"sorted by {order}")
            assert f"sorted by {order} (>)" in app.query_one(QueuesPanel).border_subtitle
        await pilot.press("greater_than_sign")
        expected = [f"{q.source}:{q.name}" for q in sorted(queues, key=lambda q: q.name.lower())]
        await settle(pilot, app, lambda: shown() == expected, "sorted by name")
        await pilot.press("greater_than_sign")  # and back to the snapshot's order
        await settle(pilot, app, lambda: shown() == [f"{q.source}:{q.name}" for q in queues], "unsorted")
        # The Delayed column makes depth add up: ready + in flight + delayed.
        orders = queue_rows(app)["table:orders"]
        assert [c.label for c in QueuesPanel.COLUMNS][:6] == ["Queue", "Depth", "Ready", "Taken", "Delayed", "Dead"]
        assert orders[4] == "0"


async def test_with_many_queues_the_rows_scrolled_into_view_show_the_latest_sample():
    # Only the rows on screen are formatted anew each sample; one scrolled into view must not
    # show an older sample's figures.
    frames = [sample_snapshot(queues=120, step=n * 1000) for n in range(2)]  # figures far apart
    app = sample_app(snapshots=frames)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, lambda: app.snapshot is not None, "first snapshot")
        await pilot.press("r")
        await settle(pilot, app, lambda: app.snapshot is frames[1], "second snapshot")
        table = app.query_one("#queues-table", KeyedTable)
        last = frames[1].queues[-1]
        key = f"{last.source}:{last.name}"
        assert "rows 1-" in app.query_one(QueuesPanel).border_subtitle and "of 120" in app.query_one(QueuesPanel).border_subtitle
        table.focus()
        await pilot.press("ctrl+end")  # the last row
        expected = fmt.count(last.depth, last.depth_is_estimate)
        assert expected != fmt.count(frames[0].queues[-1].depth, last.depth_is_estimate)
        await settle(pilot, app, lambda: table.full_rows()[key][1] == expected, f"the last row's latest depth {expected}")
        assert "of 120 ↑" in app.query_one(QueuesPanel).border_subtitle


async def test_greater_than_sorts_connections_when_they_have_focus():
    app = sample_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, app, lambda: app.snapshot is not None, "first snapshot")
        table = app.query_one("#connections-table", KeyedTable)
        table.focus()
        shown = lambda: [k.value for k in table.ordered_keys()]  # noqa: E731
        c = app.snapshot.connections
        given = [f"state:{s}" for s in c.by_state] + [f"app:{a}" for a in c.by_application]
        assert shown() == given
        assert ConnectionsPanel.COLUMNS[0].label == "Sessions"  # not an unexplained '#'
        await pilot.press("greater_than_sign")
        counts = {**{f"state:{s}": n for s, n in c.by_state.items()}, **{f"app:{a}": n for a, n in c.by_application.items()}}
        await settle(pilot, app, lambda: shown() == sorted(given, key=lambda k: -counts[k]), "sorted by sessions")
        await pilot.press("z")  # zoomed, the border has room to say the order
        await settle(pilot, app, lambda: "by sessions ↓" in str(app.query_one(ConnectionsPanel).border_subtitle), "the order said")
        await pilot.press("z")
        assert app.query_one(QueuesPanel).sort == "source"  # the focused panel sorted, not Queues
        await pilot.press("greater_than_sign")
        await settle(pilot, app, lambda: shown() == sorted(given, key=lambda k: k.split(":", 1)[1].lower()), "by name")
        # Focus shows in the border's weight, not only its colour.
        assert app.query_one(ConnectionsPanel).styles.border_top[0] == "heavy"
        assert app.query_one(QueuesPanel).styles.border_top[0] == "round"


async def test_help_pause_interval_and_quit():
    app = sample_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
        await pilot.press("p")
        assert app.paused and app.source.paused
        assert "PAUSED" in str(app.query_one("#status").render())
        await pilot.press("r")  # paused: nothing new is applied, and it says so
        assert any("paused" in text and "p resumes" in text for _at, _sev, text in app.notices)
        await pilot.press("p")
        assert not app.paused
        before = app.source.interval_s
        await pilot.press("plus")
        assert app.source.interval_s > before
        await pilot.press("minus", "minus")
        assert app.source.interval_s < before
        await pilot.press("q")
    assert app.source.stopped


async def test_filter_narrows_the_rows():
    app = sample_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, app, lambda: app.snapshot is not None, "first snapshot")
        await pilot.press("slash")
        assert app.query_one("#filter", Input).has_focus
        await pilot.press(*"orders", "enter")
        assert set(queue_rows(app)) == {"table:orders"}
        await pilot.press("slash", "escape")
        assert len(queue_rows(app)) == 4
        # Esc also clears a filter once applied, from the table (as the README says).
        await pilot.press("slash", *"orders", "enter")
        assert set(queue_rows(app)) == {"table:orders"} and app.query_one("#queues-table").has_focus
        await pilot.press("escape")
        assert app.query_one(QueuesPanel).filter_text == "" and len(queue_rows(app)) == 4


async def test_help_scrolls_and_says_how_to_close_it():
    app = sample_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        box = app.screen.query_one("#help-keys")
        assert "Esc" in str(box.border_subtitle) and box.max_scroll_y > 0  # more keys than lines
        await pilot.press("end")
        await settle(pilot, app, lambda: box.scroll_y == box.max_scroll_y, "scrolled to the last key")
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


async def test_z_zooms_the_focused_panel_and_back():
    app = sample_app(snapshots=[sample_snapshot(long_names=True)])
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, lambda: app.snapshot is not None, "first snapshot")
        leases = app.query_one("#leases-table", KeyedTable)
        await pilot.pause()
        before = leases.shown_columns()
        assert "holder" not in before and "state" not in before  # 80 columns, 45-character lease names
        leases.focus()
        await pilot.press("z")
        await settle(pilot, app, lambda: app.screen.maximized is leases.parent, "leases zoomed")
        # Full screen: every column, every cell whole (a window of columns beside the name, moved
        # sideways by → where the screen is narrower), at 80 columns and at 160.
        await settle(pilot, app, lambda: leases.everything, "zoomed")
        seen = set(leases.shown_columns())
        for _ in range(5):
            if not leases.right:
                break
            await pilot.press("right")
            await pilot.pause()
            seen |= set(leases.shown_columns())
        assert {"name", "holder", "token", "expires", "state"} <= seen
        assert not any(str(c).endswith("…") for c in leases.get_column("name"))
        await pilot.resize_terminal(160, 45)
        await settle(pilot, app, lambda: "state" in leases.shown_columns(), "the state, given the width")
        assert not any(str(c).endswith("…") for c in leases.get_column("holder"))
        await pilot.press("escape")
        await settle(pilot, app, lambda: app.screen.maximized is None, "back")


async def test_prompts_name_what_exists():
    app = sample_app(controls=object())
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, app, lambda: app.snapshot is not None, "first snapshot")
        await pilot.press("g")  # put on a ring: the snapshot's first ring, not a made-up one
        assert isinstance(app.screen, PromptScreen) and app.screen.query_one(Input).value.startswith("audit ")
        await pilot.press("escape")
        await pilot.press("i")  # a blocker: the engine's first queue (the selected row is not the engine's)
        assert app.screen.query_one(Input).value.split()[0] == "queue-01"
        await pilot.press("escape")
        await pilot.press("l")
        assert app.screen.query_one(Input).value.split()[0] == "relay"


async def test_dialogs_wrap_their_text_at_80_columns():
    from textual.widgets import Label

    app = sample_app(controls=object())
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, lambda: app.snapshot is not None, "first snapshot")
        await pilot.press("w")  # the longest hint: QUEUE WORKERS HANDLER MODE(claim|hold-transaction)
        assert isinstance(app.screen, PromptScreen)
        await pilot.pause()
        box = app.screen.query_one("Vertical")
        for label in app.screen.query(Label):
            text = str(label.render())
            assert label.region.right <= box.content_region.right, text
            assert label.size.height * label.size.width >= len(text), f"cut: {text!r}"
        await pilot.press("escape")
        app.push_screen(ConfirmScreen("Backend 123456 is idle in transaction: cancel cannot end it (it runs no query) and "
                                      "its locks stay. Terminate it instead? Its transaction is rolled back and its connection closed."))
        await pilot.pause()
        box = app.screen.query_one("Vertical")
        for label in app.screen.query(Label):
            text = str(label.render())
            assert label.region.right <= box.content_region.right, text
            assert label.size.height * label.size.width >= len(text), f"cut: {text!r}"


async def test_keys_can_be_remapped_by_binding_id():
    app = sample_app(keymap={"pause": "space"})
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("space")
        assert app.paused


async def test_read_only_refuses_actions_without_asking():
    app = sample_app(read_only=True, controls=object())
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, app, lambda: app.snapshot is not None, "first snapshot")
        for key in ("n", "w", "b", "i", "l", "C", "K"):
            await pilot.press(key)
            assert not isinstance(app.screen, (PromptScreen, ConfirmScreen)), key
        assert "READ-ONLY" in str(app.query_one("#status").render())
        assert any("--read-only" in text for _at, _sev, text in app.notices)


async def test_disconnected_state_is_shown_and_figures_kept():
    from dataclasses import replace

    good = sample_snapshot()
    reason = 'password authentication failed for user "queuetop_monitor"'
    down = replace(good, queues=(), extra={"connected": False, "connection_error": reason})
    app = sample_app(snapshots=[good, down, good])
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, lambda: app.snapshot is not None, "first snapshot")
        await pilot.press("r")
        status = app.query_one("#status")
        await settle(pilot, app, lambda: "DISCONNECTED" in str(status.render()), "disconnected")
        line = str(status.render())
        assert "LIVE" not in line  # one state at a time
        assert reason in line  # whole, at 80 columns
        await pilot.resize_terminal(120, 30)  # room for more: the time of the figures still shown
        await settle(pilot, app, lambda: f"figures of {good.taken_at:%H:%M:%S}" in str(status.render()), "the figures' time")
        assert "table:orders" in queue_rows(app)  # last figures stay on screen
        await pilot.press("r")
        await settle(pilot, app, lambda: "DISCONNECTED" not in str(status.render()), "recovered")
        assert "LIVE" in str(status.render())


async def test_notices_take_the_footers_line_not_a_panel_and_m_lists_them_all():
    app = sample_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, lambda: app.snapshot is not None, "first snapshot")
        for n in range(3):
            app.notify(f"notice number {n}")
        await pilot.pause()
        bar = app.query_one("#notice")
        assert bar.display and "notice number 2" in str(bar.render())
        assert not app.query_one("Footer").display  # the footer's line, for a few seconds
        assert not app._notifications  # no toast over the panels
        for panel in ("#leases", "#compaction", "#rings"):
            assert app.query_one(panel).region.bottom <= bar.region.y
        await pilot.press("m")
        assert isinstance(app.screen, NoticesScreen)
        log = rendered_text(app.screen.query_one("#notices-log Static").content)
        assert all(f"notice number {n}" in log for n in range(3)), log
        assert "m closes" in app.screen.query_one("#notices-log").border_subtitle
        await pilot.press("m")
        assert not isinstance(app.screen, NoticesScreen)
        assert app.query_one("Footer").display and not bar.display
        # A notice while a dialog is open goes to the main screen's line, and its timer ends
        # there too (the dialog's screen has no notice line).
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        app.notify("while help is open", timeout=0.2)
        assert bar.display and "while help is open" in str(bar.render())
        await settle(pilot, app, lambda: not bar.display, "the notice's line handed back to the footer")
        assert isinstance(app.screen, HelpScreen)


async def test_nothing_looks_for_the_screens_widgets_while_the_app_shuts_down(tmp_path):
    """Issue 28: a replay's status clock ticked on the app, and went on while the app shut down and
    removed the screen's widgets (NoMatches 'StatusBar', about 1 run in 11). Here a widget slow to
    go holds the screen's removal open, the other widgets gone: the clock's ticks, a notice's
    timer, a last snapshot and a notice from a thread all come then, and none looks for them."""
    path = tmp_path / "r.jsonl.gz"
    recorder = Recorder(path)
    first = sample_snapshot()
    for n in range(2):
        recorder.write(dataclasses.replace(sample_snapshot(step=n), taken_at=first.taken_at + timedelta(seconds=5 * n)))
    recorder.close()
    app = replay_app(Recording(path), playing=False)  # no snapshot arrives unless stepped
    delivered: list[bool] = []

    class SlowToGo(Static):
        async def on_unmount(self) -> None:
            await asyncio.sleep(0.3)  # the other widgets are removed meanwhile
            assert not app.is_running and not app.default_screen.query(StatusBar)
            delivered.append(app.post_message(SnapshotArrived(sample_snapshot(step=5), 0)))
            delivered.append(app.post_message(NoticeFromThread("a sampler's last words", "error")))
            await asyncio.sleep(0.7)  # the clock's ticks (every 0.25 s) and the notice's timer are due

    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, app, lambda: app.snapshot is not None, "the first snapshot")
        status = app.query_one(StatusBar)
        assert " x1" in str(status.render())
        app.replay.faster(1)  # the clock alone, nothing rendered: the bar's own tick shows it
        await settle(pilot, app, lambda: " x2" in str(status.render()), "the clock's tick on the status line")
        await app.screen.mount(SlowToGo())
        app.notify("gone before its time is up", timeout=0.2)
    assert delivered == [True, True]  # handled while the app shut down (run_test re-raises what they raised)
    assert any(text == "a sampler's last words" for _at, _severity, text in app.notices)  # in the log, not drawn


async def test_ctrl_p_lists_our_commands_before_anything_is_typed():
    app = sample_app(controls=object())
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("ctrl+p")

        def offered():
            lists = app.screen.query("CommandList")
            if not lists or not lists.first().option_count:
                return []
            command_list = lists.first()
            return [str(command_list.get_option_at_index(i).prompt) for i in range(command_list.option_count)]

        await settle(pilot, app, lambda: any("Kill the relay leader" in o for o in offered()), "our commands listed")
        assert any("Notices" in o for o in offered()) and any("Zoom" in o for o in offered())


# -- snapshot tests ------------------------------------------------------------------------


SIZES = [(80, 24), (100, 30), (160, 45)]


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_main_screen(snap_compare, size):
    assert snap_compare(sample_app(snapshots=[sample_snapshot()]), terminal_size=size)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_main_screen_with_long_names(snap_compare, size):
    assert snap_compare(sample_app(snapshots=[sample_snapshot(long_names=True)]), terminal_size=size)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_help_screen(snap_compare, size):
    assert snap_compare(sample_app(snapshots=[sample_snapshot()]), terminal_size=size, press=["question_mark"])


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("panel", ["leases", "queues", "sessions"])
def test_zoomed_panel(snap_compare, panel, size):
    async def zoom(pilot):
        pilot.app.query_one(f"#{panel}-table").focus()
        await pilot.press("z")

    assert snap_compare(sample_app(snapshots=[sample_snapshot(long_names=True)]), terminal_size=size, run_before=zoom)


def rendered_cells(table: KeyedTable) -> list[tuple[str, str, object, object]]:
    """(row, column, what the table shows, what the panel gave) for every shown cell."""
    full = table.full_rows()
    index = {c.key: i for i, c in enumerate(table._spec)}
    out = []
    for row_key in full:
        for column in table.shown_columns():
            shown = table.get_cell(row_key, column)
            out.append((row_key, column, shown, full[row_key][index[column]]))
    return out


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_no_cell_is_ever_cut_and_every_table_fits_its_panel(size):
    # A figure is whole or absent: every cell shown is the panel's own value, or a name cut with
    # an ellipsis; every table's columns fit inside its panel (nothing scrolls off the edge).
    app = sample_app(snapshots=[sample_snapshot(long_names=True)])
    async with app.run_test(size=size) as pilot:
        await settle(pilot, app, lambda: app.snapshot is not None, "first snapshot")
        await pilot.pause()
        for table in app.query(KeyedTable):
            if not all(getattr(node, "display", True) for node in table.ancestors_with_self):
                continue  # a panel that takes no room (Pooler without a PgBouncer, Replication with nothing to show)
            for row, column, shown, given in rendered_cells(table):
                if str(shown) != str(given):
                    assert str(shown).endswith("…"), (table.id, row, column, str(shown), str(given))
                    assert str(given).startswith(str(shown)[:-1]), (table.id, row, column, str(shown))
                    spec = next(c for c in table._spec if c.key == column)
                    assert spec.text, f"{table.id}: figure column {column} was cut: {shown!r}"
            widths = sum(col.get_render_width(table) for col in table.ordered_columns)
            assert widths <= table.size.width, (table.id, widths, table.size.width)
        # Names, holders and seven-digit tokens everywhere: the Leases token is shown whole, or
        # its column is hidden and the border says so.
        leases = app.query_one("#leases-table", KeyedTable)
        if "token" in leases.shown_columns():
            assert any("2,718,288" in str(cell) for _r, c, cell, _g in rendered_cells(leases) if c == "token")
        else:
            assert "hidden" in str(leases.parent.border_subtitle) or "(z)" in str(leases.parent.border_subtitle)
        # A lease's state and holder yield to its name: shown only once the name is whole.
        shown = leases.shown_columns()
        if "state" in shown or "holder" in shown:
            assert not any(str(cell).endswith("…") for _r, c, cell, _g in rendered_cells(leases) if c == "name")
        # The ring's used/capacity and the compaction's group beside their names, even at 80x24.
        assert {"name", "used"} <= set(app.query_one("#rings-table", KeyedTable).shown_columns())
        assert {"pending", "group"} <= set(app.query_one("#compaction-table", KeyedTable).shown_columns())
        # A lease's TTL beside its name; its token where the row has room (at 80 columns the
        # names and the group come first: it is hidden, and the border says so, as checked above).
        assert {"name", "expires"} <= set(shown) and ("token" in shown or size[0] < 100)


def test_the_depth_trend_says_its_scale():
    from tui import format as fmt

    assert fmt.trend([1.0, 1.0]).plain == "██ 1"  # a full bar of 1 says it is 1
    assert fmt.trend([0.0, 2000.0, 4000.0]).plain == "▁▅█ 4.00k"
    assert fmt.trend([]) == "" and fmt.trend([2.0], styled=False) == "█ 2"


# -- against a real PostgreSQL -------------------------------------------------------------


def live_app(db, **kwargs) -> QueuetopApp:
    return QueuetopApp(
        lambda sink: Sampler(db.target, sink, interval_s=0.3),
        backend=DatabaseBackend(db.target),
        **kwargs,
    )


async def test_end_to_end_queue_depth_appears(db):
    with db.connect() as conn:
        queue = TableQueue.create(conn, "e2e")
        queue.enqueue_batch(conn, [json.dumps({"n": n}) for n in range(987)])
    app = live_app(db)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, app, lambda: queue_rows(app).get("reference:e2e", ("", ""))[1] == "987", "depth 987", 500)
        with db.connect() as conn:  # above the probe's window: still exact digits, marked ~
            queue.enqueue_batch(conn, ["{}"] * 1234)
        await settle(pilot, app, lambda: queue_rows(app)["reference:e2e"][1] == "~2,221", "depth ~2,221", 500)


async def test_a_locked_registry_keeps_the_last_queue_rows_marked_stale(db):
    with db.connect() as conn:
        queue = TableQueue.create(conn, "reg-q")
        queue.enqueue_batch(conn, ["{}"] * 5)
    app = live_app(db)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, app, lambda: queue_rows(app).get("reference:reg-q", ("", ""))[1] == "5", "depth 5", 500)
        panel = app.query_one(QueuesPanel)
        with psycopg.connect(db.target.conninfo, autocommit=True) as locker:
            locker.execute("BEGIN")
            locker.execute("LOCK TABLE queuetop.queues IN ACCESS EXCLUSIVE MODE")
            await settle(pilot, app, lambda: "stale" in str(panel.border_subtitle), "the rows marked stale", 500)
            assert app.snapshot.probes["queues"].unread == ("reference",)
            assert "reference:reg-q" not in {f"{q.source}:{q.name}" for q in app.snapshot.queues}  # the JSON does not pretend
            row = app.query_one(KeyedTable).full_rows()["reference:reg-q"]
            assert str(row[1]) == "5" and "dim" in str(row[1].style)  # kept, dimmed
            assert "lock timeout" in str(panel.border_subtitle) or "1 stale since" in str(panel.border_subtitle)
            assert "LIVE" in str(app.query_one("#status").render()) and "notes: queues" in str(app.query_one("#status").render())
            locker.execute("ROLLBACK")
        await settle(pilot, app, lambda: "stale" not in str(panel.border_subtitle), "fresh rows again", 500)
        row = app.query_one(KeyedTable).full_rows()["reference:reg-q"]
        assert "dim" not in str(getattr(row[1], "style", ""))


async def test_start_consumers_from_the_ui_drains_the_queue(db):
    with db.connect() as conn:
        queue = TableQueue.create(conn, "ui-drain")
        queue.enqueue_batch(conn, ["{}"] * 300)
    controls = EngineControls(db.target)
    app = live_app(db, controls=controls)
    async with app.run_test(size=(100, 30)) as pilot:
        await answer_prompt(pilot, app, "w", "ui-drain 2 noop claim")

        def drained():
            with db.connect() as conn:
                return queue.counts(conn).depth == 0

        await settle(pilot, app, drained, "the queue to drain", 1000)
        await settle(pilot, app, lambda: queue_rows(app).get("reference:ui-drain", ("", ""))[1] == "0", "panel shows 0", 500)
        assert any(a.key == "consumers:ui-drain" for a in controls.activities())
    # Quitting stops what the dashboard started.
    assert controls.activities() == []


async def test_a_prompt_naming_an_unknown_queue_asks_before_creating_it(db):
    controls = EngineControls(db.target)
    app = live_app(db, controls=controls)

    def registered(name):
        with db.connect() as conn:
            return conn.execute("SELECT count(*) FROM queuetop.queues WHERE name = %s", (name,)).fetchone()[0] == 1

    async with app.run_test(size=(100, 30)) as pilot:
        await answer_prompt(pilot, app, "b", "orders 10")  # the demo's queue is demo.orders: a typo
        await settle(pilot, app, lambda: isinstance(app.screen, ConfirmScreen), "the question", 500)
        assert "'orders' does not exist" in app.screen.question
        await pilot.press("n")
        await settle(pilot, app, lambda: any("nothing done" in text for _a, _s, text in app.notices), "nothing done", 500)
        assert not registered("orders")
        await answer_prompt(pilot, app, "b", "orders 10")
        await settle(pilot, app, lambda: isinstance(app.screen, ConfirmScreen), "the question again", 500)
        await pilot.press("y")
        await settle(pilot, app, lambda: any("enqueued 10 on orders" in text for _a, _s, text in app.notices), "the burst", 500)
        assert registered("orders")
        with db.connect() as conn:  # recorded as the dashboard's: `demo reset` removes it
            assert conn.execute("SELECT count(*) FROM queuetop.meta WHERE key = 'made-by-dashboard:queue:orders'").fetchone()[0] == 1

        # The palette's demo reset removes it again, after a confirmation.
        await pilot.press("ctrl+p")
        await pilot.press(*"reset the demo")
        await settle(pilot, app, lambda: app.screen.query("CommandList") and app.screen.query("CommandList").first().option_count
                     and "Reset the demo" in str(app.screen.query("CommandList").first().get_option_at_index(0).prompt),
                     "the reset command", 500)
        await pilot.press("enter")
        await settle(pilot, app, lambda: isinstance(app.screen, ConfirmScreen), "the reset question", 500)
        await pilot.press("y")
        await settle(pilot, app, lambda: any(text.startswith("demo reset: removed 1 queue") for _a, _s, text in app.notices),
                     "the reset's notice", 1000)
        assert not registered("orders")


async def test_terminate_a_blocker_after_confirmation(db):
    with db.connect() as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
        conn.execute("INSERT INTO t VALUES (1)")
    blocker = db.connect(application_name="qt-ui-blocker", autocommit=False)
    blocker.execute("UPDATE t SET id = id WHERE id = 1")
    waiter = db.connect(application_name="qt-ui-waiter")
    import threading

    def wait_for_lock():
        try:
            waiter.execute("UPDATE t SET id = id WHERE id = 1")
        except psycopg.Error:
            pass

    thread = threading.Thread(target=wait_for_lock, daemon=True)
    thread.start()
    app = live_app(db)
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            tree = app.query_one(LocksPanel).query_one(Tree)
            await settle(pilot, app, lambda: len(tree.root.children) == 1, "the blocker in the tree", 500)
            tree.focus()

            def blocker_selected() -> bool:
                # A node's line is known only once the rebuilt tree was laid out: until then
                # move_cursor cannot place the cursor, so it is retried until it holds.
                if tree.root.children:
                    tree.move_cursor(tree.root.children[0])
                return app.query_one(LocksPanel).selected_pid == blocker.info.backend_pid

            await settle(pilot, app, blocker_selected, "the root blocker selected", 500)
            await pilot.press("C")  # cancel cannot end an idle transaction: it says so, and offers terminate
            assert isinstance(app.screen, ConfirmScreen) and "cannot end it" in app.screen.question
            await pilot.press("n")
            await pilot.press("K")
            assert isinstance(app.screen, ConfirmScreen)
            # What ending it releases, from the last sample.
            assert "It holds up 1 session(s); ending it frees 1 of them." in app.screen.question
            await pilot.press("y")

            def gone():
                with db.connect() as conn:
                    return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s",
                                        (blocker.info.backend_pid,)).fetchone()[0] == 0

            await settle(pilot, app, gone, "the blocker terminated", 500)
        thread.join(10)
        assert not thread.is_alive()  # the waiter got its lock
    finally:
        waiter.close()
        blocker.close()


async def test_a_wait_cycle_is_shown_with_everything_waiting_on_it(db):
    with db.connect() as conn:
        conn.execute("CREATE TABLE pairs (id int PRIMARY KEY, v int)")
        conn.execute("INSERT INTO pairs VALUES (1, 0), (2, 0)")
    from .test_probes import sessions, start_waiting

    with sessions(db, "qt-cycle-a", "qt-cycle-b", "qt-cycle-c") as (a, b, c):
        for s in (a, b):  # the deadlock stays until the test ends (superuser may set this per session)
            s.run("SET deadlock_timeout = '120s'")
            s.run("BEGIN")
        a.run("UPDATE pairs SET v = 1 WHERE id = 1")
        b.run("UPDATE pairs SET v = 1 WHERE id = 2")
        # Each waits before the next one starts: c's UPDATE reaching row 1 before b's would queue b
        # behind c, a cycle of three that c's own deadlock_timeout (1 s) breaks (CI found it so).
        start_waiting(db, a, "UPDATE pairs SET v = 2 WHERE id = 2")  # a waits for b
        start_waiting(db, b, "UPDATE pairs SET v = 2 WHERE id = 1", a)  # b waits for a: a cycle
        start_waiting(db, c, "UPDATE pairs SET v = 3 WHERE id = 1", a, b)  # c waits on the cycle
        app = live_app(db)
        async with app.run_test(size=(160, 40)) as pilot:
            tree = app.query_one(LocksPanel).query_one(Tree)

            def cycle_node():
                return next((n for n in tree.root.children if "wait cycle" in str(n.label)), None)

            def said(node) -> str:
                """A node's label with the lines it wraps onto (its first children, which carry no session)."""
                return " ".join([str(node.label), *(str(ch.label) for ch in node.children if ch.data is None)])

            await settle(pilot, app, lambda: (node := cycle_node()) is not None
                         and {ch.data for ch in node.children} - {None} == {a.pid, b.pid}
                         and any(g.data == c.pid for ch in node.children for g in ch.children), "the cycle and its waiter", 1000)
            label = said(cycle_node())
            assert f"{min(a.pid, b.pid)} → {max(a.pid, b.pid)} → {min(a.pid, b.pid)}" in label
            assert ("deadlock" in label and "(deadlock_timeout 1s)" in label) or "past deadlock_timeout 1s" in label
            # The server's setting counts down; these sessions set their own, and the label says so once past it.
            await settle(pilot, app, lambda: "deadlock, past deadlock_timeout 1s" in said(cycle_node()), "past it", 1000)
            assert "1 wait cycle(s)" in str(tree.root.label)
            assert {x.pid for x in app.snapshot.blocked if x.in_cycle} == {a.pid, b.pid}


async def test_a_prepared_transaction_is_a_root_of_the_lock_tree(db):
    from .test_locks import prepared
    from .test_probes import sessions

    gid = f"qt-ui-{db.name}"
    with db.connect() as conn:
        conn.execute("CREATE TABLE invoices (id int PRIMARY KEY, paid bool)")
        conn.execute("INSERT INTO invoices VALUES (1, false)")
    with prepared(db, gid, "UPDATE invoices SET paid = true WHERE id = 1"), sessions(db, "qt-ui-prep-waiter") as (waiter,):
        waiter.start("UPDATE invoices SET paid = false WHERE id = 1")
        app = live_app(db)
        async with app.run_test(size=(160, 40)) as pilot:
            tree = app.query_one(LocksPanel).query_one(Tree)

            def prepared_node():
                return next((n for n in tree.root.children if str(n.label).startswith("prepared ")), None)

            await settle(pilot, app, lambda: (node := prepared_node()) is not None  # (its label's further lines: no session)
                         and [ch.data for ch in node.children if ch.data is not None] == [waiter.pid],
                         "the prepared transaction and its waiter", 1000)
            node = prepared_node()
            label = " ".join([str(node.label), *(str(c.label) for c in node.children if c.data is None)])  # its lines
            assert repr(gid) in label and "blocks 1" in label and "no session: COMMIT or ROLLBACK PREPARED" in label
            assert "row of invoices (0,1)" in str(next(c for c in prepared_node().children if c.data == waiter.pid).label)
            assert prepared_node().data is None  # not a session: c and k have nothing to signal


async def test_tab_moves_between_panels_and_palette_finds_actions():
    app = sample_app(controls=object())
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, app, lambda: app.snapshot is not None, "first snapshot")
        assert app.focused.id == "queues-table"
        await pilot.press("tab")
        assert app.focused.id == "locks-tree"
        await pilot.press("tab")
        assert app.focused.id == "sessions-table"
        await pilot.press("tab")
        assert app.focused.id == "connections-table"
        await pilot.press("shift+tab", "shift+tab", "shift+tab")
        assert app.focused.id == "queues-table"
        await pilot.press("ctrl+p")
        await pilot.press(*"burst")
        await settle(pilot, app, lambda: "Burst" in str(app.screen.query("CommandList").first().get_option_at_index(0).prompt)
                     if app.screen.query("CommandList") and app.screen.query("CommandList").first().option_count else False,
                     "the palette to offer the burst action")
        await pilot.press("enter")
        await settle(pilot, app, lambda: isinstance(app.screen, PromptScreen), "the burst prompt")


async def test_enter_shows_a_queues_head_and_dead_letters(db):
    with db.connect() as conn:
        queue = TableQueue.create(conn, "details")
        queue.enqueue_batch(conn, ['{"order": 1}', '{"order": 2}'])
        [claimed] = queue.claim(conn, visibility_s=30)
        queue.dead_letter_claimed(conn, claimed, "ValueError: bad order")
    app = live_app(db)
    async with app.run_test(size=(100, 30)) as pilot:
        text = await queue_details_text(pilot, app, "reference:details")
        assert '{"order": 2}' in text and "ValueError: bad order" in text
        await pilot.press("escape")
        assert not isinstance(app.screen, DetailsScreen)


async def test_enter_on_a_declared_queue_shows_its_head_rows(db):
    with db.connect() as conn:
        conn.execute("CREATE TABLE public.mail (id bigserial PRIMARY KEY, recipient text)")
        conn.execute("INSERT INTO public.mail (recipient) VALUES ('ops@example.com'), ('dev@example.com')")
    config = Config(queues=(DeclaredQueue(name="mail", table="public.mail", order_by="id"),))
    app = QueuetopApp(lambda sink: Sampler(db.target, sink, config, interval_s=0.3),
                      backend=DatabaseBackend(db.target, config))
    async with app.run_test(size=(100, 30)) as pilot:
        text = await queue_details_text(pilot, app, "table:mail")
        assert "recipient" in text and "ops@example.com" in text and "dev@example.com" in text
        assert text.index("ops@example.com") < text.index("dev@example.com")  # the dequeue order


async def test_details_of_a_wide_table_show_every_value_whole_at_80_columns(db):
    with db.connect() as conn:
        conn.execute("CREATE TABLE public.wide_jobs (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now(),"
                     " run_at timestamptz NOT NULL DEFAULT now() + interval '1 hour', attempts int DEFAULT 0,"
                     " max_attempts int DEFAULT 25, priority int DEFAULT 0, kind text DEFAULT 'send_invoice_email',"
                     " queue text DEFAULT 'default', payload jsonb DEFAULT '{}')")
        conn.execute("INSERT INTO public.wide_jobs (id, created_at) VALUES (1234567, '2026-01-02 03:04:05.123456+00'),"
                     " (1234568, now())")
    config = Config(queues=(DeclaredQueue(name="wide", table="public.wide_jobs", order_by="id"),))
    app = QueuetopApp(lambda sink: Sampler(db.target, sink, config, interval_s=0.3),
                      backend=DatabaseBackend(db.target, config))
    async with app.run_test(size=(80, 24)) as pilot:
        # The details box is 95 % of 80 columns, less its border and padding.
        text = await queue_details_text(pilot, app, "table:wide", width=72)
        assert "2026-01-02T03:04:05.123456+00:00" in text, text  # the whole timestamp, on one line
        assert "1234567" in text and "1234568" in text and "send_invoice_email" in text
        assert "…" not in text


async def test_compact_now_from_the_ui_is_reflected_in_the_snapshot(db):
    with db.connect() as conn:
        task = compactor.create_task(conn, "ui survey")
        compactor.submit(conn, task, list(range(1, 31)))
        for user in range(1, 11):
            compactor.answer(conn, task, user)  # 1 + 20 delta rows pending
    controls = EngineControls(db.target)
    app = live_app(db, controls=controls)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, app, lambda: compaction_rows(app).get(f"group:task_status:{task}") == ("21", f"#{task} ui survey"),
                     "21 pending deltas for the task", 500)
        assert app.snapshot.compaction[0].runs_total == 0
        await pilot.press("o")
        assert isinstance(app.screen, PromptScreen)
        assert app.screen.query_one(Input).value == "all"
        await pilot.press("enter")

        def folded():
            c = app.snapshot.compaction[0]
            return c.pending_deltas == 0 and c.runs_total == 1 and c.last_rows_folded == 21

        await settle(pilot, app, folded, "the snapshot to show the compaction", 500)
        await settle(pilot, app, lambda: compaction_rows(app) == {"all:task_status": ("0", "all (0 groups)")},
                     "the panel to show nothing pending", 500)
        compaction = app.query_one(CompactionPanel)
        compaction.query_one(KeyedTable).focus()
        await pilot.press("z")  # zoomed, the border has room for the whole last run
        await settle(pilot, app, lambda: compaction.border_subtitle.endswith("ago: 21 folded"), "the last run", 200)
    with db.connect() as conn:
        assert compactor.status_counts(conn, task) == {"PENDING": 20, "DONE": 10}


async def test_contention_scenario_from_the_ui_fills_the_locks_panel(db):
    controls = EngineControls(db.target)
    app = live_app(db, controls=controls)
    async with app.run_test(size=(100, 30)) as pilot:
        await answer_prompt(pilot, app, "s", "naive 8 120")
        tree = app.query_one(LocksPanel).query_one(Tree)

        def scenario_blocked():
            s = app.snapshot
            return s is not None and sum(1 for b in s.blocked if (b.application or "").startswith("queuetop-scenario")) >= 2

        await settle(pilot, app, scenario_blocked, "scenario sessions blocked in the Locks panel", 1500)
        await settle(pilot, app, lambda: "blocked session" in str(tree.root.label), "the tree's label", 500)
        await pilot.press("S")  # no prompt: asks, stops, then reports
        assert isinstance(app.screen, ConfirmScreen) and app.screen.question.startswith("Stop the contention scenario?")
        await pilot.press("y")
        await settle(pilot, app, lambda: not any(a.key == SCENARIO_KEY for a in controls.activities()), "stopped", 1500)
        await settle(pilot, app, lambda: any("contention naive" in text and ", consistent" in text
                                             for _at, _sev, text in app.notices), "the summary notice", 500)
        # The summary stays in the notices log (m), after the footer's line has moved on.
        app.notify("something later")
        await pilot.press("m")
        assert isinstance(app.screen, NoticesScreen)
        log = rendered_text(app.screen.query_one("#notices-log Static").content)
        assert "contention naive" in log and "something later" in log
    with db.connect() as conn:
        assert conn.execute("SELECT count(*) FROM queuetop.tasks WHERE title LIKE 'contention%'").fetchone()[0] == 0


async def test_relays_from_the_ui_and_killing_the_leader_moves_the_lease(db):
    controls = EngineControls(db.target)
    app = live_app(db, controls=controls)

    def relay_lease():
        s = app.snapshot
        return next((lease for lease in s.leases if lease.name == "outbox-relay"), None) if s else None

    async with app.run_test(size=(100, 30)) as pilot:
        await answer_prompt(pilot, app, "u", "2 50")  # u: start outbox relays (y copies)
        await settle(pilot, app, lambda: (lease := relay_lease()) is not None and lease.state == "held",
                     "the relay lease held", 1500)
        first = relay_lease()
        await settle(pilot, app, lambda: any(q.kind == "outbox" for q in app.snapshot.queues), "the outbox row", 500)
        await pilot.press("x")  # no prompt: asks, then SIGKILLs the holder
        assert isinstance(app.screen, ConfirmScreen) and app.screen.question.startswith("Kill the relay leader?")
        await pilot.press("y")
        await settle(pilot, app, lambda: (lease := relay_lease()) is not None and lease.state == "held"
                     and lease.holder != first.holder and lease.token > first.token, "a standby taking over", 2500)
        await pilot.press("U")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await settle(pilot, app, lambda: controls.activities() == [], "everything stopped", 1500)
    with db.connect() as conn:
        assert conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'queuetop-relay:%'"
                            ).fetchone()[0] == 0


async def test_a_role_without_privileges_gets_the_dashboard_with_notes(db, pg_server):
    from dbcore.database import resolve_target
    from tui.app import engine_usable

    role = f"qt_nopriv_{db.name}"
    with db.connect() as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
        TableQueue.create(conn, "owners-queue")
    target = resolve_target(pg_server.uri(db.name, user=role))
    try:
        ready, note = engine_usable(target)  # this raised "permission denied for schema queuetop" (exit 2)
        assert not ready and "may not use the queuetop schema" in note
        app = QueuetopApp(lambda sink: Sampler(target, sink, interval_s=0.3), backend=DatabaseBackend(target), controls_off=note)
        async with app.run_test(size=(100, 30)) as pilot:
            await settle(pilot, app, lambda: app.snapshot is not None and app.snapshot.connections is not None,
                         "a snapshot with what this role can see", 500)
            assert app.snapshot.extra.get("connected") is True
            assert "DISCONNECTED" not in str(app.query_one("#status").render())
            await pilot.press("b")  # an engine action: says why there are no controls
            assert any("may not use the queuetop schema" in text for _a, _s, text in app.notices)
    finally:
        with db.connect() as conn:
            conn.execute(f'DROP ROLE IF EXISTS "{role}"')


async def test_the_panels_speak_the_databases_words():
    """A SQL Server snapshot: the Queues panel says ghost records and statistics where PostgreSQL
    has dead tuples and vacuum, and a sleeping session with an open transaction is the culprit
    the Locks panel marks, as `idle in transaction` is."""
    from dataclasses import replace

    from probes.model import ServerInfo

    base = sample_snapshot(step=0)
    mssql = replace(base, server=ServerInfo(dialect="mssql", version="16.0", database="app", label="sample"),
                    blockers=tuple(replace(b, state="sleeping, open transaction") for b in base.blockers),
                    connections=replace(base.connections, version_store_kb=12_595))
    app = sample_app(snapshots=[base])
    async with app.run_test(size=(160, 45)) as pilot:
        table = app.query_one("#queues-table", KeyedTable)
        await settle(pilot, app, lambda: "Dead tup" in [str(c.label) for c in table.columns.values()], "PostgreSQL's words")
        app.apply_snapshot(mssql)
        await settle(pilot, app, lambda: {"Ghosts", "Stats upd"} <= {str(c.label) for c in table.columns.values()}, "SQL Server's words")
        assert "Dead tup" not in {str(c.label) for c in table.columns.values()}
        root = app.query_one(Tree).root.children[0]
        assert "sleeping, open xact" in str(root.label) and "bold red" in str(root.label.spans)
        summary = str(app.query_one("#connections-summary").render())
        assert "snapshot pid 1000" in summary and "xmin" not in summary
    async with sample_app(snapshots=[mssql]).run_test(size=(300, 50)) as pilot:  # room for the version store too
        app = pilot.app
        await settle(pilot, app, lambda: "version store 12.3 MB" in str(app.query_one("#connections-summary").render()),
                     "the version store's size")


async def test_held_application_locks_are_counted_on_the_locks_tree_and_their_names_yield_first():
    from dataclasses import replace

    from probes.model import AppLock

    base = sample_snapshot(step=0)
    locks = (AppLock(pid=53, resource="queuetop.compact.7", mode="X", granted=True, wait_s=None, application="worker",
                     database="app", owner_type="TRANSACTION"),
             AppLock(pid=54, resource="queuetop.compact.7", mode="X", granted=False, wait_s=1.5, application="worker",
                     database="app", owner_type="TRANSACTION"))
    quiet = replace(base, blocked=(), blockers=(), app_locks=locks)
    async with sample_app(snapshots=[quiet]).run_test(size=(160, 45)) as pilot:
        app = pilot.app
        tree = app.query_one(LocksPanel).query_one(Tree)
        await settle(pilot, app, lambda: "app lock" in str(tree.root.label), "the held lock counted")
        assert str(tree.root.label) == "no blocked sessions, 1 app lock held: queuetop.compact.7 by 53"
    async with sample_app(snapshots=[quiet]).run_test(size=(80, 24)) as pilot:
        app = pilot.app
        tree = app.query_one(LocksPanel).query_one(Tree)
        await settle(pilot, app, lambda: "app lock" in str(tree.root.label), "the held lock counted")
        label = str(tree.root.label)  # the names are shortened or dropped, the count is whole
        assert label.startswith(("no blocked sessions, 1 app lock held", "none blocked, 1 app lock held")), label


async def test_before_the_first_sample_the_locks_tree_claims_no_calm():
    """Watched in tmux behind a PgBouncer whose pool was exhausted: the status line waited for the
    first sample while the Locks tree already said "no blocked sessions"."""
    from tui.sample import SampleSource
    from tui.widgets.panels.locks import NOT_SAMPLED_YET

    class Silent(SampleSource):
        def start(self) -> None:  # the first sample never comes
            self.started = True

    app = QueuetopApp(lambda sink: Silent(sink, [sample_snapshot(step=0)]))
    async with app.run_test(size=(100, 30)) as pilot:
        tree = app.query_one(LocksPanel).query_one(Tree)
        await pilot.pause(0.2)
        assert app.snapshot is None and str(tree.root.label) == NOT_SAMPLED_YET
        await pilot.press("r")  # a refresh brings the first sample: now the tree knows
        await settle(pilot, app, lambda: app.snapshot is not None and str(tree.root.label) != NOT_SAMPLED_YET, "the first sample")


async def test_the_locks_tree_claims_no_calm_it_did_not_see():
    """An empty tree says "no blocked sessions" only when the locks probe read the locks: a probe
    that failed (no privilege, a lock timeout) says it does not know, and why."""
    from dataclasses import replace

    from probes.model import ProbeStatus

    base = sample_snapshot(step=0)
    denied = "permission denied: VIEW SERVER STATE is needed to see other sessions' locks"
    failed = replace(base, blocked=(), blockers=(), probes={**base.probes, "locks": ProbeStatus(elapsed_ms=1.0, error=denied)})
    async with sample_app(snapshots=[failed]).run_test(size=(160, 45)) as pilot:
        app = pilot.app
        tree = app.query_one(LocksPanel).query_one(Tree)
        await settle(pilot, app, lambda: "unknown" in str(tree.root.label), "the failed probe said")
        assert str(tree.root.label).startswith("blocked sessions unknown: permission denied: VIEW SERVER STATE")
        assert "no blocked" not in str(tree.root.label)
