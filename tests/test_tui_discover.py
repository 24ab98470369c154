"""The dashboard is discoverable (issue 28, point 5): the footer shows the keys of the focused
panel, the help lists only the keys that apply now, j and k move (C and K cancel and terminate),
a sort is said on the panel's border and not in a notice, the details box says how to close it,
an unknown queue and an unknown ring are offered for creation the same way, two servers' names
tell them apart, and a stopped server is said plainly. Each at 80×24 and 100×30."""

from __future__ import annotations

import shutil
import tempfile

import pytest
from textual.widgets import DataTable, Input, Tree
from textual.widgets._footer import FooterKey

from dbcore.database import resolve_target
from dbcore.target import host_names
from probes.recording import Recorder, Recording
from probes.sampler import Sampler
from queues.control import EngineControls
from queues.table_queue import TableQueue
from tui.app import replay_app
from tui.backend import DatabaseBackend
from tui.dashboard import HostBar, HostSpec, QueuetopApp, StatusBar
from tui.sample import SampleSource, sample_snapshot
from tui.screens.details import DetailsScreen
from tui.screens.dialogs import ConfirmScreen, HelpScreen, HostsScreen, PromptScreen
from tui.widgets.panels import QueuesPanel

from .test_recording import _hosted
from .test_tui import sample_app, settle

SIZES = [(80, 24), (100, 30)]
sizes = pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")


def footer_keys(app) -> list[str]:
    """The keys the footer shows, left to right, as displayed."""
    return [key.key_display for key in sorted(app.screen.query(FooterKey), key=lambda k: k.region.x)]


def footer_fits(app) -> bool:
    keys = list(app.screen.query(FooterKey))
    return bool(keys) and all(key.region.right <= app.size.width and key.region.width > 0 for key in keys)


def help_lines(app) -> list[tuple[str, str, str]]:
    assert isinstance(app.screen, HelpScreen)
    return app.screen._keys


def sample_app_with(db, **kwargs) -> QueuetopApp:
    """The synthetic snapshot, with a real backend and real engine controls on the test database
    (so that cancel/terminate and the engine's keys apply)."""
    return QueuetopApp(lambda sink: SampleSource(sink, [sample_snapshot(step=n) for n in range(3)]),
                       backend=DatabaseBackend(db.target), controls=EngineControls(db.target), **kwargs)


# -- the context footer --------------------------------------------------------------------------


@sizes
async def test_the_footer_shows_the_keys_of_the_focused_panel(db, size):
    expected = {  # the focused widget: keys it must show, keys it must not
        "#queues-table": ({"⏎", "/", ">", "z", "n", "w", "b", "?"}, {"g", "C", "K", "a", "o"}),
        "#locks-tree": ({"⏎", "C", "K", "?"}, {">", "n", "g", "a"}),
        "#sessions-table": ({"⏎", "C", "K", "a", ">", "?"}, {"n", "g", "o"}),
        "#connections-table": ({"C", "K", ">", "?"}, {"⏎", "n", "a"}),
        "#rings-table": ({"g", "G", "?"}, {"n", "C", ">"}),
        "#leases-table": ({"l", "L", "u", "?"}, {"n", "g", "C"}),
        "#compaction-table": ({"o", "s", "?"}, {"n", "g", "C"}),
    }
    app = sample_app_with(db)
    async with app.run_test(size=size) as pilot:
        await settle(pilot, app, lambda: app.snapshot is not None, "first snapshot")
        for widget, (shown, hidden) in expected.items():
            app.query_one(widget).focus()
            # Every key whole, within the width (once laid out).
            await settle(pilot, app, lambda shown=shown, hidden=hidden: shown <= set(footer_keys(app))
                         and not hidden & set(footer_keys(app)) and footer_fits(app), f"the footer of {widget}: {shown}")
        # A key not shown for the focused panel still acts: the engine's act on the whole host.
        app.query_one("#rings-table").focus()
        await settle(pilot, app, lambda: "n" not in footer_keys(app), "the rings' footer")
        await pilot.press("n")
        assert isinstance(app.screen, PromptScreen)
        await pilot.press("escape")


@sizes
async def test_without_engine_controls_or_a_database_the_footer_and_help_leave_their_keys_out(size):
    app = sample_app(keymap={"zoom": "Z"})
    async with app.run_test(size=size) as pilot:
        await settle(pilot, app, lambda: app.snapshot is not None, "first snapshot")
        app.query_one("#queues-table").focus()
        await settle(pilot, app, lambda: "Z" in footer_keys(app), "the remapped zoom key in the footer")
        assert not {"n", "w", "b", "z", "C", "K", "]"} & set(footer_keys(app))
        app.query_one("#sessions-table").focus()
        await settle(pilot, app, lambda: "a" in footer_keys(app), "the sessions' footer")
        assert not {"C", "K"} & set(footer_keys(app))  # no database to signal a session on
        await pilot.press("question_mark")
        lines = help_lines(app)
        ids = {binding_id for _key, _what, binding_id in lines}
        assert not any(i.startswith(("engine.", "host.", "replay.", "backend.")) for i in ids), ids
        assert {"help", "pause", "zoom", "sort", "cursor.down", "cursor.up", "sessions.idle", "record"} <= ids
        assert ("Z", "Zoom the focused panel (Esc: back)", "zoom") in lines
        assert any("Engine keys" in what and "off" in what for _key, what, _id in lines)
        assert any("j k" in key and "vim" in what and "C and K" in what and "pg_activity" in what for key, what, _id in lines)


@sizes
async def test_help_lists_host_keys_with_several_hosts_and_engine_keys_with_controls(db, size):
    specs = [HostSpec(name=name, source_factory=lambda sink: SampleSource(sink, [sample_snapshot()]),
                      backend=DatabaseBackend(db.target), controls=EngineControls(db.target) if name == "a" else None,
                      controls_off="engine controls are off on this database: start queuetop with --engine")
             for name in ("a", "b")]
    app = QueuetopApp(hosts=specs)
    async with app.run_test(size=size) as pilot:
        await settle(pilot, app, lambda: app.snapshot is not None, "first snapshot")
        await settle(pilot, app, lambda: "]" in footer_keys(app), "the next-host key in the footer")
        await pilot.press("question_mark")
        ids = {binding_id for _key, _what, binding_id in help_lines(app)}
        assert {"host.next", "host.previous", "hosts", "host.1", "host.2", "engine.burst", "backend.terminate"} <= ids
        assert not any(i.startswith("replay.") for i in ids)
        await pilot.press("escape")
        await pilot.press("2")  # host b: no engine controls there, so the help leaves its keys out
        await settle(pilot, app, lambda: app.current == 1, "host b shown")
        await pilot.press("question_mark")
        lines = help_lines(app)
        assert not any(binding_id.startswith("engine.") for _key, _what, binding_id in lines)
        assert any("--engine" in what for _key, what, _id in lines)  # why they are off, in the host's words


@sizes
async def test_a_replay_lists_its_keys_and_says_there_is_no_database_not_read_only(tmp_path, size):
    path = tmp_path / "r.jsonl.gz"
    recorder = Recorder(path)
    for n in range(3):
        recorder.write(_hosted(sample_snapshot(step=n), "a", n))
    recorder.close()
    app = replay_app(Recording(path), playing=False)
    async with app.run_test(size=size) as pilot:
        await settle(pilot, app, lambda: app.snapshot is not None, "first instant")
        await settle(pilot, app, lambda: {".", "t"} <= set(footer_keys(app)), "the replay's keys in the footer")
        await pilot.press("question_mark")
        lines = help_lines(app)
        ids = {binding_id for _key, _what, binding_id in lines}
        assert {"replay.step", "replay.back", "replay.seek"} <= ids and not {"record", "refresh"} & ids
        assert ("+", "Replay faster", "interval.slower") in lines
        assert not any("--read-only" in what for _key, what, _id in lines)
        assert any("no database behind it" in what for _key, what, _id in lines)
        await pilot.press("escape")
        for key in ("b", "g", "C"):
            await pilot.press(key)
            assert not isinstance(app.screen, (PromptScreen, ConfirmScreen)), key
        said = [text for _at, _severity, text in app.notices]
        assert said and not any("read-only" in text for text in said), said
        assert any("no database behind it" in text for text in said), said
        assert "READ-ONLY" not in str(app.query_one(StatusBar).render())


# -- j and k --------------------------------------------------------------------------------------


@sizes
async def test_j_and_k_move_the_cursor_and_never_signal(db, size):
    app = sample_app_with(db)
    async with app.run_test(size=size) as pilot:
        await settle(pilot, app, lambda: app.snapshot is not None, "first snapshot")
        table = app.query_one("#queues-table", DataTable)
        table.focus()
        await settle(pilot, app, lambda: table.row_count > 2, "the queues' rows")
        assert table.cursor_row == 0
        await pilot.press("j", "j")
        assert table.cursor_row == 2
        await pilot.press("k")
        assert table.cursor_row == 1
        tree = app.query_one("#locks-tree", Tree)
        tree.focus()
        await pilot.pause()
        line = tree.cursor_line
        await pilot.press("j")
        await settle(pilot, app, lambda: tree.cursor_line == line + 1, "the tree's cursor down")
        await pilot.press("k")
        await settle(pilot, app, lambda: tree.cursor_line == line, "and up")
        assert not isinstance(app.screen, ConfirmScreen)  # k no longer terminates
        # In the help, j and k scroll.
        await pilot.press("question_mark")
        box = app.screen.query_one("#help-keys")
        await pilot.press("j", "j", "j")
        await settle(pilot, app, lambda: box.scroll_y > 0, "the help scrolled by j")
        await pilot.press("k", "k", "k")
        await settle(pilot, app, lambda: box.scroll_y == 0, "and back by k")
        assert "j k" in str(box.border_subtitle)


# -- sorting, details ----------------------------------------------------------------------------


@sizes
async def test_a_sort_is_said_on_the_border_not_in_a_notice(size):
    app = sample_app()
    async with app.run_test(size=size) as pilot:
        await settle(pilot, app, lambda: app.snapshot is not None, "first snapshot")
        before = len(app.notices)
        panel, bar = app.query_one(QueuesPanel), app.query_one("NoticeBar")
        for order in ("depth ↓", "oldest ready ↓", "dead ↓"):
            await pilot.press("greater_than_sign")
            # On the border; where it has no room (80 columns: the hidden columns are listed
            # there first), on the footer's line for a moment, and not logged.
            await settle(pilot, app, lambda order=order: f"sorted by {order}" in str(panel.border_subtitle)
                         or (bar.display and f"sorted by {order}" in str(bar.render())), order)
            if size[0] >= 100:
                assert f"sorted by {order}" in str(panel.border_subtitle)
            if bar.display:
                assert "m: all notices" not in str(bar.render())
        assert len(app.notices) == before


@sizes
async def test_the_details_box_says_how_to_close_it(db, size):
    with db.connect() as conn:
        TableQueue.create(conn, "disc").enqueue_batch(conn, ['{"n": 1}'])
    app = QueuetopApp(lambda sink: Sampler(db.target, sink, interval_s=0.3), backend=DatabaseBackend(db.target))
    async with app.run_test(size=size) as pilot:
        table = app.query_one("#queues-table", DataTable)
        await settle(pilot, app, lambda: "reference:disc" in [k.value for k in table.rows], "the queue's row", 500)
        table.focus()
        for close in ("escape", "q", "enter"):
            table.move_cursor(row=table.get_row_index("reference:disc"))
            await pilot.press("enter")
            assert isinstance(app.screen, DetailsScreen)
            box = app.screen.query_one("VerticalScroll")
            assert "Esc, q or Enter closes" in str(box.border_subtitle)
            await pilot.pause()
            assert box.region.right <= size[0]  # the subtitle is on a border inside the screen
            await settle(pilot, app, lambda: app.screen.renderables is not None, "details loaded", 500)
            await pilot.press(close)
            await settle(pilot, app, lambda: not isinstance(app.screen, DetailsScreen), f"closed by {close}")


# -- creation prompts ----------------------------------------------------------------------------


@sizes
async def test_an_unknown_ring_is_offered_for_creation_as_an_unknown_queue_is(db, size):
    app = QueuetopApp(lambda sink: Sampler(db.target, sink, interval_s=0.3), backend=DatabaseBackend(db.target),
                      controls=EngineControls(db.target))
    async with app.run_test(size=size) as pilot:
        await settle(pilot, app, lambda: app.snapshot is not None, "first snapshot", 500)

        async def prompt(key: str, text: str) -> None:
            await pilot.press(key)
            assert isinstance(app.screen, PromptScreen)
            app.screen.query_one(Input).value = text
            await pilot.press("enter")

        # The queue: asked, and refused.
        await prompt("b", "nosuchq 5")
        await settle(pilot, app, lambda: isinstance(app.screen, ConfirmScreen), "the queue's question", 500)
        assert app.screen.question.startswith("Queue 'nosuchq' does not exist. Create it as a new, empty queue?")
        await pilot.press("n")
        await settle(pilot, app, lambda: any("nothing done: no queue 'nosuchq'" in t for _a, _s, t in app.notices), "refused")

        # The ring: asked the same way, with its capacity; Esc does nothing.
        await prompt("g", "newring 3")
        await settle(pilot, app, lambda: isinstance(app.screen, PromptScreen) and "does not exist" in app.screen.title_text,
                     "the ring's question", 500)
        assert app.screen.title_text.startswith("Ring 'newring' does not exist. Create it as a new, empty ring?")
        assert "capacity" in app.screen.title_text
        await pilot.press("escape")
        await settle(pilot, app, lambda: any("nothing done: no ring 'newring'" in t for _a, _s, t in app.notices), "refused")
        with db.connect() as conn:
            assert conn.execute("SELECT count(*) FROM queuetop.rings WHERE name = 'newring'").fetchone()[0] == 0

        # Asked again and answered: created with that capacity, and the put done.
        await prompt("g", "newring 3")
        await settle(pilot, app, lambda: isinstance(app.screen, PromptScreen) and "does not exist" in app.screen.title_text,
                     "the ring's question", 500)
        app.screen.query_one(Input).value = "10"
        await pilot.press("enter")
        await settle(pilot, app, lambda: any("put 3 on ring newring (a new ring of 10 cells)" in t for _a, _s, t in app.notices),
                     "the put on the new ring", 500)
        with db.connect() as conn:
            assert conn.execute("SELECT capacity FROM queuetop.rings WHERE name = 'newring'").fetchone()[0] == 10
        await settle(pilot, app, lambda: any(r.name == "newring" and r.used == 3 for r in app.snapshot.rings),
                     "the ring in the snapshot", 500)

        # Taking from a ring that does not exist says how to make one, not "use the CLI".
        await prompt("G", "nosuchring 1")
        await settle(pilot, app, lambda: any("no ring 'nosuchring'" in t for _a, _s, t in app.notices), "the take refused", 500)
        said = next(t for _a, _s, t in app.notices if "no ring 'nosuchring'" in t)
        assert "queuetop engine ring create" not in said and "offers to create it" in said


# -- host names, a stopped server ---------------------------------------------------------------


def test_host_names_say_what_differs_and_no_more():
    def names(*dsns: str) -> list[str]:
        return host_names([("", resolve_target(dsn)) for dsn in dsns])  # type: ignore[misc]

    assert names("postgresql:///queuetop?host=/tmp/a", "postgresql:///queuetop?host=/tmp/b") == \
        ["/tmp/a/queuetop", "/tmp/b/queuetop"]
    assert names("postgresql:///queuetop?host=/tmp/a") == ["local/queuetop"]  # alone: short
    assert names("postgresql:///queuetop?host=/tmp/a", "postgresql:///queuetop?host=/tmp/a&port=5433") == \
        ["local/queuetop", "local:5433/queuetop"]
    assert names("postgresql://ann@/q?host=/tmp/a", "postgresql://bob@/q?host=/tmp/a") == ["ann@/tmp/a/q", "bob@/tmp/a/q"]
    assert names("postgresql:///q?host=/tmp/a", "postgresql:///q?host=/tmp/a") == ["local/q", "local/q#2"]  # the same DSN
    assert names("postgresql://u@db1/app", "postgresql://u@db1:5433/app") == ["db1/app", "db1:5433/app"]
    given = host_names([("prod", resolve_target("postgresql:///q?host=/tmp/a")),  # type: ignore[list-item]
                        ("", resolve_target("postgresql:///q?host=/tmp/b"))])
    assert given == ["prod", "local/q"]


@sizes
async def test_two_socket_servers_are_told_apart_in_the_host_bar(size):
    named = [("", resolve_target(f"postgresql:///queuetop?host={d}")) for d in ("/tmp/a", "/tmp/b")]
    names = host_names(named)  # type: ignore[arg-type]
    specs = [HostSpec(name=name, source_factory=lambda sink: SampleSource(sink, [sample_snapshot()])) for name in names]
    app = QueuetopApp(hosts=specs)
    async with app.run_test(size=size) as pilot:
        bar = app.query_one(HostBar)
        await settle(pilot, app, lambda: "1 /tmp/a/queuetop" in str(bar.render()) and "2 /tmp/b/queuetop" in str(bar.render()),
                     "both names in the host bar")
        assert "#2" not in str(bar.render())


@pytest.fixture
def stopped_server_target():
    """Where a server's socket would be, with none running there (as after `queuetop server stop`)."""
    directory = tempfile.mkdtemp(prefix="qtstop")  # short: the status line has room for it
    target = resolve_target(f"postgresql:///qt?host={directory}")
    yield target
    shutil.rmtree(directory, ignore_errors=True)


@sizes
async def test_a_stopped_server_is_said_plainly(stopped_server_target, size):
    target = stopped_server_target
    specs = [HostSpec(name=name, source_factory=lambda sink, name=name: Sampler(target, sink, interval_s=0.3, host=name))
             for name in ("stopped", "other")]
    app = QueuetopApp(hosts=specs)
    async with app.run_test(size=size) as pilot:
        status = app.query_one(StatusBar)
        await settle(pilot, app, lambda: "SERVER STOPPED" in str(status.render()), "the stopped state", 500)
        line = str(status.render())
        assert "No such file or directory" not in line and "DISCONNECTED" not in line
        assert "LIVE" not in line
        assert target.masked not in line or f"nothing answers at {target.masked}" in line
        if size[0] >= 100:  # room for the masked target
            assert f"nothing answers at {target.masked}" in line
        await settle(pilot, app, lambda: "STOPPED" in str(app.query_one(HostBar).render()), "the host bar says it")
        await pilot.press("H")
        assert isinstance(app.screen, HostsScreen)
        rows = app.screen._rows
        assert rows[0][2] == "STOPPED" and f"the server is not running: nothing answers at {target.masked}" in rows[0][-1]


def test_the_stopped_state_is_only_for_a_server_that_is_not_running():
    """Text of the status line: a refused password is not a stopped server."""
    from dataclasses import replace

    from tui.dashboard.bars import StatusFacts, status_parts

    def line(reason: str) -> str:
        snapshot = replace(sample_snapshot(), extra={"connected": False, "connection_error": reason})
        facts = StatusFacts(snapshot=snapshot, last_good_at=None, host_name=None, replay=None, paused=False,
                            recording=False, read_only=False, interval_s=2.0)
        return "".join(text for text, _style, _priority in status_parts(facts))

    assert "SERVER STOPPED" in line("No such file or directory") and "SERVER STOPPED" in line("Connection refused at h:5432")
    refused = line('password authentication failed for user "x"')
    assert "DISCONNECTED" in refused and "SERVER STOPPED" not in refused
