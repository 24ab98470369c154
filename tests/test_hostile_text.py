"""Text from the database is inert (issue 24): an application name, a queue name, a query, an error
text or a library's payload is never read as markup and never reaches the terminal with a control
character, in any panel, tree label, dialog, notice, the status line or the text snapshot.

Hostile strings mix markup (`[/]` raised MarkupError and killed every dashboard watching the
server; `[@click=app.quit]` would act), terminal escapes (`ESC ] 2 ;` set the window title,
`ESC [ 2 J` cleared the screen), CR and backspace (overwrite other cells), bidi overrides, zero-width,
wide and combining characters, and lone surrogates."""

from __future__ import annotations

import io
import threading
import time
import unicodedata
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import replace
from datetime import timedelta

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text
from textual.app import App
from textual.widgets import DataTable, Tree

from dbcore.text import inert, inert_line
from probes.config import Config, DeclaredQueue
from probes.model import (
    AppLock,
    BlockedSession,
    Blocker,
    CompactionGroup,
    PreparedXact,
    ProbeStatus,
    Replication,
    ReplicationSlot,
    Snapshot,
    Standby,
)
from probes.sampler import Sampler
from probes.sources import QueueDetails
from tui import format as fmt
from tui.app import DashboardFailed, run_app
from tui.backend import DatabaseBackend
from tui.cli import main
from tui.dashboard import HostSpec, QueuetopApp, StatusBar
from tui.messages import NoticeFromThread
from tui.report import render
from tui.sample import TAKEN_AT, SampleSource, sample_snapshot
from tui.screens.details import DetailsScreen, queue_renderables, session_renderables
from tui.screens.dialogs import ConfirmScreen, HelpScreen, HostsScreen, NoticesScreen, PromptScreen
from tui.widgets.cells import inert_cell, shorten
from tui.widgets.keyed_table import KeyedTable
from tui.widgets.panels import LocksPanel, LockTree, blocked_label, blocker_label, fit_segments, prepared_label

TITLE = "/* \x1b]2;PWNED\x1b\\ \x1b[2J */ SELECT 1"  # set the terminal's title, then cleared the screen
SEEN_TITLE = "\\x1b]2;PWNED"  # what the operator sees of it instead
HOSTILE_NAMES = ("[/]x", TITLE, "a\rb\x08c", "\u202eevil", "[@click=app.quit]q", "[red]r[/red]")

# Characters that must never reach the terminal raw: controls, format characters (bidi, zero
# width), surrogates, private use, unassigned, line and paragraph separators.
RAW = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})

FRAGMENTS = (
    "[/]", "[red]", "[/red]", "[@click=app.quit]", "[b]bold", "]", "[", "\\", ":warning:", "\\x1b",
    "\x1b]2;PWNED\x1b\\", "\x1b[2J", "\x1b[31m", "\x9b2J", "\x07", "\x00", "\r", "\x08", "\t", "\n", "\x7f", "\x85",
    "\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069",
    "\u200b", "\u200d", "\ufeff", "\u00ad", "\u2028", "\u2029",
    "界", "ｗｉｄｅ", "👍", "👨\u200d👩\u200d👧", "\u0301", "e\u0301", "\u20dd", "\ud800", "\udfff", "\U000e0041", "\ue000",
)
HOSTILE = st.lists(
    st.one_of(st.sampled_from(FRAGMENTS), st.text(st.characters(exclude_categories=[]), max_size=3)), min_size=1, max_size=5,
).map("".join).filter(lambda s: s.strip() != "")

PROPERTY = settings(max_examples=200, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def raw_characters(text: str) -> list[str]:
    return [f"U+{ord(c):04X}" for c in text if unicodedata.category(c) in RAW]


def assert_inert(text: str, where: str = "") -> None:
    assert not raw_characters(text), (where, raw_characters(text), text)


def assert_cut_whole(s: str, cut: str) -> None:
    """`cut` is inert(s) whole, or cut with '…' after a whole character or escape (half of `\\x1b`
    would read as other text). inert(s[:i]) is a prefix of inert(s): each is a place it may end."""
    shown = inert(s)
    if not cut.endswith("…") or cut == shown:
        assert cut == shown
        return
    head = cut[:-1].rstrip(" ")  # a wide character that did not fit leaves a space
    assert shown.startswith(head), (cut, shown)
    assert len(head) in {len(inert(s[:i])) for i in range(len(s) + 1)}, (cut, shown)


def terminal_lines(renderable, width: int = 200) -> list[str]:
    """The text of each line a terminal console would write for `renderable` (without the styles'
    escape codes, which are the console's own)."""
    console = Console(width=width, file=io.StringIO(), force_terminal=True, color_system="truecolor")
    lines = console.render_lines(renderable, console.options.update(height=None), pad=False)
    return ["".join(segment.text for segment in line if not segment.control) for line in lines]


def assert_rendered_inert(renderable, *expected: str, width: int = 200) -> str:
    """`renderable` as a terminal would get it: no raw character on any line; and each `expected`
    (the escaped original: markup would have been consumed) in its text."""
    lines = terminal_lines(renderable, width)
    for line in lines:
        assert_inert(line, repr(renderable)[:80])
    text = renderable.plain if isinstance(renderable, Text) else "\n".join(lines)  # a Text: as it is, unwrapped
    for part in expected:
        assert part in text, (part, text)
    return text


# -- the formatting helpers, the labels, the cells, the details and the report ---------------


@PROPERTY
@given(s=HOSTILE)
def test_the_formatting_helpers_make_database_text_inert(s):
    assert fmt.one_line(s, 200) == inert_line(s, 200)
    assert_inert(fmt.one_line(s, 200))
    for line in fmt.inert_lines(s).split("\n"):
        assert_inert(line)
    assert fmt.plain(s).plain == inert(s)
    cut = fmt.cut(inert(s), 10)
    assert_inert(cut)
    assert cell_len(cut) <= 10
    assert_cut_whole(s, cut)
    waiting = BlockedSession(pid=2, blocked_by=(1,), root_blocker=1, wait_s=1.0, lock_type=s, mode=s, relation=s,
                             query=s, application=s, database=s + "db")
    assert inert(s) in fmt.lock_target(waiting, "app")
    assert_inert(fmt.lock_target(waiting, "app"))
    status = fmt.fit_by_priority([("queuetop ", "bold", 7), (s, "bold", 0), (f" │ {s}", "", 1)], 1000)
    assert inert(s) in status.plain
    assert_rendered_inert(status, inert(s))
    assert_inert(fmt.database_name(s))


@PROPERTY
@given(s=HOSTILE)
def test_table_cells_are_never_markup_nor_raw(s):
    cell = inert_cell(s)
    assert str(cell) == inert(s)  # a Text's str is its plain text: nothing was read as markup
    if isinstance(cell, str):
        assert "[" not in cell and cell.count(":") < 2  # DataTable would read these as markup
    assert_rendered_inert(cell if isinstance(cell, Text) else Text(cell), inert(s))
    # A Text built from raw text (a panel that forgot) is made inert too, keeping its style.
    raw = Text(s, style="red")  # (Rich drops BEL, BS, VT, FF and CR from a Text itself; not ESC)
    styled = inert_cell(raw)
    assert isinstance(styled, Text) and styled.plain == inert(raw.plain) and styled.style == "red"
    short = shorten(inert(s), 8).plain
    assert_inert(short)
    assert_cut_whole(s, short)


@PROPERTY
@given(s=HOSTILE)
def test_the_locks_tree_labels_are_inert(s):
    root = Blocker(pid=1, blocked_count=2, state=s, xact_age_s=3.0, query=s, application=s)
    assert_rendered_inert(one_text(blocker_label(root, 2000)), inert(f"  {s}"), inert(s), fmt.one_line(s, 200))
    waiting = BlockedSession(pid=2, blocked_by=(1,), root_blocker=1, root_blockers=(1,), wait_s=1.0, lock_type="tuple",
                             mode=s, relation=s, query=s, application=s, database=s + "db", row=s)
    assert_rendered_inert(one_text(blocked_label(waiting, 2, 2000, "app")), inert(f"  {s}"), fmt.one_line(s, 200), inert(f" {s}"))
    told = replace(waiting, wants=f"to update a row of {s}", holders=(1,))
    assert_rendered_inert(one_text(blocked_label(told, 2, 2000, "app")), inert(f"wants to update a row of {s}"))
    # Wrapped at a narrow width, each line is inert too (a line may not end inside an escape).
    for line in blocked_label(told, 2, 40, "app") + blocker_label(root, 40):
        assert_rendered_inert(line)
    prepared = PreparedXact(gid=s, owner=s, database=s, age_s=9.0, blocked_count=1)
    assert_rendered_inert(one_text(prepared_label(prepared, 2000)), inert(repr(s)))
    assert_rendered_inert(fit_segments([("summary: ", "bold", False), (s, "", True)], 2000), inert(s))
    # Tree reads a str label as markup: the Locks tree never does, whoever builds the label.
    tree = LockTree("locks")
    assert tree.process_label(s).plain == inert(s)
    assert tree.process_label(Text(s)).plain == inert(Text(s).plain)


@settings(PROPERTY, max_examples=80)  # each example draws nine Rich tables
@given(s=HOSTILE)
def test_the_details_screens_are_inert(s):
    engine = QueueDetails(
        head=[{"id": s, "state": s, "attempts": 1, "enqueued_at": TAKEN_AT, "body": s, "last_error": s}],
        dead=[{"message_id": 7, "attempts": 3, "died_at": TAKEN_AT, "last_error": s, "body": s}],
    )
    renderables = queue_renderables(engine)
    # A library's rows: its own column names and values (more than six columns: one record a time).
    renderables += queue_renderables(QueueDetails(head=[{s: s, "id": 1}], dead=[{"error": s}]))
    renderables += queue_renderables(QueueDetails(head=[{f"{s}{n}": s for n in range(8)}]))
    session = {"pid": 42, "usename": s, "application_name": s, "client_addr": s, "state": s, "wait_event_type": s,
               "wait_event": s, "session_age_s": 9.0, "xact_age_s": 8.0, "query_age_s": None, "query": s}
    locks = [{"locktype": s, "mode": s, "granted": False, "relation": s, "transactionid": None, "classid": None, "objid": None}]
    renderables += session_renderables({"session": session, "locks": locks})
    for renderable in renderables:
        assert_rendered_inert(renderable)
    # Every value and column name the database gave is a Text (a str cell would be read as markup),
    # shown escaped; the whole query keeps its own lines.
    texts = [text.plain for renderable in renderables for text in table_texts(renderable)]
    for expected in (fmt.one_line(s, 40), fmt.one_line(s, 60), fmt.one_line(s, 300), inert(s), fmt.inert_lines(s)):
        assert expected in texts, (expected, texts)


def one_text(lines: list[Text]) -> Text:
    """A tree label's lines (one, at a width this wide) as one Text."""
    assert len(lines) == 1
    return lines[0]


def table_texts(renderable) -> list[Text]:
    """Every Text in a Rich table (its title, headers and cells, nested tables too); a str cell of
    the database's text would fail the test above, as it would have been read as markup."""
    if isinstance(renderable, Text):
        return [renderable]
    if not isinstance(renderable, Table):
        return []
    out: list[Text] = []
    for column in renderable.columns:
        for cell in [column.header, *column._cells]:
            out += table_texts(cell)
    return out


def hostile_snapshot(s: str, *, step: int = 0) -> Snapshot:
    """The sample snapshot with `s` in every text the database gives: names, sources, holders,
    applications, queries, states, lock targets, group titles, probe errors, the server's words."""
    base = sample_snapshot(step=step)
    c = base.connections
    assert c is not None
    return replace(
        base,
        server=replace(base.server, version=s, database=s, label=s),
        probes={**base.probes, "rings": ProbeStatus(elapsed_ms=1.0, error=s)},
        queues=(*(replace(q, name=f"{s}{i}", table=s, source=q.source if i % 2 else f"{s}src") for i, q in enumerate(base.queues)),
                replace(base.queues[0], name=f"{s}err", depth=None, error=s)),  # a queue its probe could not read
        rings=tuple(replace(r, name=f"{s}{r.name}") for r in base.rings),
        leases=tuple(replace(lease, name=f"{s}{lease.name}", holder=s) for lease in base.leases),
        blockers=tuple(replace(b, state=s, application=s, query=s) for b in base.blockers),
        blocked=tuple(replace(b, application=s, query=s, mode=s, relation=s, row=s) for b in base.blocked),
        prepared_xacts=(PreparedXact(gid=s, owner=s, database=s, age_s=5.0, blocked_count=1),),
        app_locks=(AppLock(pid=7, resource=s, mode=s, granted=True, wait_s=None, application=s, database=s),),
        connections=replace(c, by_state={**c.by_state, s: 1}, by_application={s: 3, "": 1}, xmin_holder_application=s),
        compaction=tuple(replace(x, name=s, by_group=(*x.by_group, CompactionGroup(group=99, title=s, pending_deltas=5)))
                         for x in base.compaction),
        replication=Replication(
            standbys=(Standby(application=s, client=s, state=s, sync_state=s, write_lag_s=1.0, flush_lag_s=1.0, replay_lag_s=1.0,
                              replay_lag_bytes=10, pid=314),),
            slots=(ReplicationSlot(name=s, type=s, active=False, retained_wal_bytes=10, xmin_age=None, catalog_xmin_age=7,
                                   database=s, plugin=s, wal_status=s),),
            standbys_unknown=s),
    )


@PROPERTY
@given(s=HOSTILE)
def test_the_text_snapshot_is_inert(s):
    text = render(hostile_snapshot(s))
    for line in text.split("\n"):
        assert_inert(line)
    assert inert(f"{s}0") in text and inert(f"{s}audit") in text and inert_line(s) in text


# -- the dashboard ---------------------------------------------------------------------------


def screen_lines(app) -> list[str]:
    """The text of every line the app would write to the terminal now (every segment of the
    screen as its compositor renders it, the screens beneath a dialog included)."""
    update = app.screen._compositor.render_update(full=True, screen_stack=app._background_screens)
    lines = []
    for line in update.strips:
        lines.append("".join(segment.text for strip in line for segment in strip if not segment.control))
    return lines


def assert_screen_inert(app, where: str) -> str:
    lines = screen_lines(app)
    for number, line in enumerate(lines):
        assert not raw_characters(line), (where, number, raw_characters(line), line)
    return "\n".join(lines)


async def settle(pilot, predicate, what: str, attempts: int = 300) -> None:
    for _ in range(attempts):
        if predicate():
            return
        await pilot.pause(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def panel_cells(app) -> list[object]:
    return [cell for table in app.query(KeyedTable) for cells in table.full_rows().values() for cell in cells]


def tree_labels(app) -> list[Text]:
    tree = app.query_one(LocksPanel).query_one(Tree)
    labels, nodes = [], [tree.root]
    while nodes:
        node = nodes.pop()
        labels.append(node.label)
        nodes.extend(node.children)
    return labels


async def test_every_panel_shows_any_database_text_inert():
    app = QueuetopApp(lambda sink: SampleSource(sink, [sample_snapshot()]))
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, lambda: app.snapshot is not None, "the first snapshot")
        steps = iter(range(1, 1_000_000))

        @settings(PROPERTY, max_examples=40)  # each example is a whole snapshot applied and the screen drawn
        @given(s=HOSTILE)
        def shown_inert(s):
            app.apply_snapshot(hostile_snapshot(s, step=next(steps)))
            for cell in panel_cells(app):
                assert_inert(str(cell), "a table cell")
                if isinstance(cell, str):
                    assert "[" not in cell, cell
            for label in tree_labels(app):
                assert isinstance(label, Text)
                assert_inert(label.plain, "a tree label")
            assert_inert(str(app.query_one(StatusBar).content), "the status line")
            for panel in app.query("Panel"):
                assert_inert(str(panel.border_subtitle or ""), "a border")
            # A queue's name as it is (escaped), not read as markup.
            assert any(str(cell).startswith(inert(f"{s}0")) for cell in panel_cells(app))
            assert_screen_inert(app, "the main screen")

        shown_inert()
        assert app.is_running


def sample_host(name: str, snapshot: Snapshot) -> HostSpec:
    return HostSpec(name=name, source_factory=lambda sink: SampleSource(sink, [snapshot]))


async def test_a_hostile_application_and_queue_name_leave_the_dashboard_running_and_the_screen_intact():
    live = hostile_snapshot(TITLE)
    live = replace(live, queues=tuple(replace(q, name=name) for q, name in zip(live.queues, HOSTILE_NAMES, strict=False)),
                   blockers=tuple(replace(b, application="[/]x") for b in live.blockers),
                   blocked=tuple(replace(b, application=HOSTILE_NAMES[n % len(HOSTILE_NAMES)]) for n, b in enumerate(live.blocked)),
                   extra={**live.extra, "host": "[/]h\x1b[2J"})
    down = replace(sample_snapshot(), taken_at=TAKEN_AT + timedelta(seconds=5),
                   extra={"connected": False, "host": "b", "connection_error": f"FATAL: {TITLE}\n\u202eevil"})
    app = QueuetopApp(hosts=[sample_host("[/]h\x1b[2J", live), sample_host("b\r\x08", down)])
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, lambda: all(h.snapshot is not None for h in app.hosts), "both hosts' snapshots")
        await pilot.pause()
        text = assert_screen_inert(app, "the main screen")
        assert SEEN_TITLE in text and "[/]x" in text  # shown escaped, and as written: nothing read as markup

        for panel in ("queues-table", "locks-tree", "connections-table", "rings-table", "leases-table", "compaction-table"):
            app.query_one(f"#{panel}").focus()
            await pilot.press("z")  # (a key press waits until the screen has taken it in)
            assert_screen_inert(app, f"{panel} zoomed")
            await pilot.press("escape")
            await settle(pilot, lambda: app.screen.maximized is None, "back from zoom")

        app.post_message(NoticeFromThread(f"probe failed: {TITLE} [/]x\r\x08\u202e", "error"))  # as a sampler says it
        await settle(pilot, lambda: len(app.notices) > 0, "the notice")
        await pilot.pause()
        assert SEEN_TITLE in assert_screen_inert(app, "the notice bar")
        for key, screen in (("m", NoticesScreen), ("question_mark", HelpScreen), ("H", HostsScreen)):
            await pilot.press(key)
            await settle(pilot, lambda screen=screen: isinstance(app.screen, screen), f"{screen.__name__}")
            assert_screen_inert(app, screen.__name__)
            await pilot.press("escape")
            await settle(pilot, lambda: len(app.screen_stack) == 1, f"{screen.__name__} closed")

        # The details of a queue and of a session, a confirmation naming them, a prompt.
        details = QueueDetails(head=[{"id": 1, "state": "[/]x", "attempts": 0, "enqueued_at": TAKEN_AT, "body": TITLE,
                                      "last_error": "a\rb\x08c"}])
        app.push_screen(DetailsScreen(f"Queue {TITLE}", lambda: queue_renderables(details)))
        await settle(pilot, lambda: isinstance(app.screen, DetailsScreen) and app.screen.renderables is not None, "details")
        await pilot.pause()
        assert SEEN_TITLE in assert_screen_inert(app, "queue details")
        await pilot.press("escape")
        session = {"pid": 1000, "usename": "[/]x", "application_name": "[/]x", "client_addr": None, "state": "active",
                   "wait_event_type": "Lock", "wait_event": "\u202eevil", "session_age_s": 1.0, "xact_age_s": 1.0,
                   "query_age_s": 1.0, "query": TITLE}
        app.push_screen(DetailsScreen("Session 1000", lambda: session_renderables({"session": session, "locks": []})))
        await settle(pilot, lambda: isinstance(app.screen, DetailsScreen) and app.screen.renderables is not None, "details")
        await pilot.pause()
        assert SEEN_TITLE in assert_screen_inert(app, "session details")
        await pilot.press("escape")
        app.push_screen(ConfirmScreen(f"Terminate backend 1000 ({TITLE}, [/]x)?"))
        await pilot.pause()
        assert SEEN_TITLE in assert_screen_inert(app, "a confirmation")
        await pilot.press("n")
        app.push_screen(PromptScreen(f"Start a producer on {TITLE}", "[/]QUEUE", "[/]x\x1b[2J 50"))
        await pilot.pause()
        assert_screen_inert(app, "a prompt")
        await pilot.press("escape")
        await settle(pilot, lambda: len(app.screen_stack) == 1, "the dialogs closed")

        await pilot.press("right_square_bracket")  # the host that is down: its error on the status line
        await settle(pilot, lambda: app.current == 1, "the second host")
        await pilot.pause()
        assert SEEN_TITLE in assert_screen_inert(app, "a host that is down")
        assert app.is_running
    assert app.return_code in (None, 0)


def test_an_exception_in_the_dashboard_is_one_line_and_exit_1(capsys):
    class Crashing(App[None]):
        def on_mount(self) -> None:
            Text.from_markup(f"[/]x {TITLE}")  # what a str from the database did as markup

        def run(self, **kwargs):  # type: ignore[override]
            return super().run(headless=True, **kwargs)

    with pytest.raises(DashboardFailed) as raised:
        run_app(Crashing())
    assert raised.value.exit_code == 1
    message = str(raised.value)
    assert message.startswith("internal error: MarkupError: closing tag '[/]'") and "--debug" in message
    assert_inert(message)
    assert capsys.readouterr().err == ""  # no Rich traceback, no locals


# -- against a real PostgreSQL ---------------------------------------------------------------


JOBS = Config(queues=(DeclaredQueue(name="jobs", table="public.hostile_jobs", order_by="id", queue_column="queue_name"),))


@pytest.fixture
def hostile_server(db, tmp_path):
    """A session called `[/]x` holding a row lock that blocks a session whose query sets the
    terminal's title and clears its screen; a job table whose queues are called the same."""
    with db.connect() as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
        conn.execute("INSERT INTO t VALUES (1)")
        conn.execute("CREATE TABLE public.hostile_jobs (id bigserial PRIMARY KEY, queue_name text NOT NULL, body text)")
        conn.execute("INSERT INTO public.hostile_jobs (queue_name, body) VALUES ('[/]x', %s), (%s, 'b'), (%s, '[red]')",
                     (TITLE, TITLE, "a\rb\x08c\u202e"))
    blocker = db.connect(application_name="[/]x", autocommit=False)
    blocker.execute("UPDATE t SET id = id WHERE id = 1")
    waiter = db.connect(application_name="[red]w", autocommit=True)
    waiter_pid = waiter.info.backend_pid

    def wait() -> None:
        try:
            waiter.execute(f"{TITLE.removesuffix('SELECT 1')}UPDATE t SET id = id WHERE id = 1")
        except psycopg.Error:
            pass

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    with db.connect() as conn:
        deadline = time.monotonic() + 10
        while not conn.execute("SELECT cardinality(pg_blocking_pids(%s)) > 0", (waiter_pid,)).fetchone()[0]:
            assert time.monotonic() < deadline, "the waiter never waited"
            time.sleep(0.01)  # the poll's pace
    config = tmp_path / "queuetop.toml"
    config.write_text('[[queues]]\nname = "jobs"\ntable = "public.hostile_jobs"\norder_by = "id"\nqueue_column = "queue_name"\n')
    try:
        yield config
    finally:
        blocker.close()
        thread.join(10)
        waiter.close()


def test_the_text_snapshot_of_a_hostile_server_is_inert(db, hostile_server):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["snapshot", "--dsn", db.dsn, "--config", str(hostile_server)])
    assert code == 0, err.getvalue()
    text = out.getvalue()
    for line in text.split("\n"):
        assert_inert(line)
    assert "[/]x" in text and SEEN_TITLE in text  # the root blocker's application, the waiter's query, a queue's name
    # The JSON keeps the original text (JSON escapes the controls itself).
    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(io.StringIO()):
        assert main(["snapshot", "--json", "--dsn", db.dsn, "--config", str(hostile_server)]) == 0
    assert "\\u001b]2;PWNED" in out.getvalue()


async def test_the_dashboard_on_a_hostile_server_keeps_running_and_the_screen_intact(db, hostile_server):
    app = QueuetopApp(lambda sink: Sampler(db.target, sink, JOBS, interval_s=0.3), backend=DatabaseBackend(db.target, JOBS))
    async with app.run_test(size=(100, 30)) as pilot:
        tree = app.query_one(LocksPanel).query_one(Tree)
        await settle(pilot, lambda: len(tree.root.children) == 1 and app.snapshot is not None
                     and any(q.name == f"jobs:{TITLE}" for q in app.snapshot.queues), "the blocker and the job table's queues", 500)
        await pilot.pause()
        text = assert_screen_inert(app, "the main screen")
        assert "[/]x" in text and "jobs:/* \\x1b]2" in text, text  # as written, and escaped (cut to its column)
        # Enter on the blocked session: its whole query, from the server.
        tree.focus()

        def waiter_selected() -> bool:
            # A node's line is known only once the tree was laid out: moved to until it holds.
            roots = tree.root.children
            if not roots or not roots[0].children:
                return False
            # (the root's first children may be the lines its label wrapped onto: the same session)
            waiter = next((c for c in roots[0].children if c.data != roots[0].data), None)
            if waiter is None:
                return False
            tree.move_cursor(waiter)
            return tree.cursor_node is waiter

        await settle(pilot, waiter_selected, "the waiting session selected", 500)
        await pilot.press("enter")
        await settle(pilot, lambda: isinstance(app.screen, DetailsScreen) and app.screen.renderables is not None, "details", 500)
        await pilot.pause()
        assert SEEN_TITLE in assert_screen_inert(app, "the session's details")
        await pilot.press("escape")
        # Enter on the queue the job table calls by the escape sequence: its rows.
        table = app.query_one("#queues-table", DataTable)
        table.focus()
        table.move_cursor(row=table.get_row_index(f"table:jobs:{TITLE}"))
        await pilot.press("enter")
        await settle(pilot, lambda: isinstance(app.screen, DetailsScreen) and app.screen.renderables is not None, "details", 500)
        await pilot.pause()
        assert SEEN_TITLE in assert_screen_inert(app, "the queue's details")
        await pilot.press("escape")
        for key in ("m", "question_mark"):
            await pilot.press(key)
            await pilot.pause()
            assert_screen_inert(app, key)
            await pilot.press("escape")
        assert app.is_running
    assert app.return_code in (None, 0)
