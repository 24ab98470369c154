"""The Sessions panel (issue 28, points 1 and 2): every backend as pg_activity lists them, sorted,
filtered, idle ones hidden, blockers and the xmin holder marked; Enter's details; cancel and
terminate on the selected session, confirmed with what it is. Checked against the server's own
pg_stat_activity, at 80x24 and 100x30."""

from __future__ import annotations

import io
import random
import threading
from dataclasses import replace
from datetime import UTC, datetime

import psycopg
import pytest
from rich.console import Console

from probes.config import Config
from tui import format as fmt
from tui.app import ENGINE_OFF
from tui.app import _host as dashboard_host
from tui.dashboard import QueuetopApp
from tui.sample import SampleSource, sample_snapshot
from tui.screens.details import DetailsScreen
from tui.screens.dialogs import ConfirmScreen
from tui.widgets.keyed_table import KeyedTable
from tui.widgets.panels import SessionsPanel
from tui.widgets.panels.sessions import ORDERS, sort_sessions

from .test_tui import live_app, sample_app, settle

SIZES = [(80, 24), (100, 30)]


def panel(app) -> SessionsPanel:
    return app.query_one(SessionsPanel)


def cells(app, pid: int) -> dict[str, str]:
    """A session's row, every column (shown or not), by column key, as plain text."""
    table = panel(app).query_one(KeyedTable)
    row = table.full_rows()[str(pid)]
    keys = [c.key for c in SessionsPanel.COLUMNS]
    return {k: (v.plain if hasattr(v, "plain") else str(v)) for k, v in zip(keys, row, strict=True)}


async def zoom_sessions(pilot, app) -> None:
    """The Sessions list full screen (z): every column, as an operator reads it when the lock
    tree has the row (the sample's sessions are blocked)."""
    panel(app).query_one(KeyedTable).focus()
    await pilot.press("z")
    await settle(pilot, app, lambda: app.screen.maximized is panel(app), "the Sessions panel zoomed")
    await settle(pilot, app, lambda: len(panel(app).query_one(KeyedTable).shown_columns()) == len(SessionsPanel.COLUMNS),
                 "every column")


async def select(pilot, app, pid: int) -> None:
    """Focus the Sessions list and put its cursor on `pid`'s row."""
    table = panel(app).query_one(KeyedTable)
    table.focus()

    def on_row() -> bool:
        if str(pid) not in table.full_rows():
            return False
        table.move_cursor(row=table.get_row_index(str(pid)))
        return panel(app).selected_pid == pid

    await settle(pilot, app, on_row, f"session {pid} selected", 500)


def details_text(app) -> str:
    console = Console(file=io.StringIO(), width=200)
    for renderable in app.screen.renderables:
        console.print(renderable)
    return console.file.getvalue()


# -- on the sample: order, filter, idle, marks ------------------------------------------------

@pytest.mark.parametrize("size", SIZES)
async def test_sessions_are_listed_longest_transaction_first_and_sort_by_any_column(size):
    app = sample_app()
    async with app.run_test(size=size) as pilot:
        await settle(pilot, app, lambda: len(panel(app).shown_pids) == 16, "the sample's 16 sessions")
        snapshot = app.snapshot
        assert snapshot is not None
        # The count in the title, whole, where the border has room for it (80 columns, sessions
        # blocked: the lock tree takes the room and the title says `Sessions` alone).
        full = f"Sessions {len(snapshot.sessions)}"
        assert panel(app).border_title == full or \
            (len(full) + 4 > panel(app).size.width and panel(app).border_title == "Sessions")
        ages = [next(s.xact_age_s for s in snapshot.sessions if s.pid == pid) for pid in panel(app).shown_pids]
        known = [a for a in ages if a is not None]
        assert known == sorted(known, reverse=True) and ages[: len(known)] == known  # no transaction: last
        # `>` on the focused Sessions list: by query time, then by pid.
        await zoom_sessions(pilot, app)
        await pilot.press(">")
        await settle(pilot, app, lambda: panel(app).sort == "time", "sorted by query time")
        times = [next(s.query_age_s for s in snapshot.sessions if s.pid == pid) for pid in panel(app).shown_pids]
        known = [t for t in times if t is not None]
        assert known == sorted(known, reverse=True)
        await pilot.press(">")
        await settle(pilot, app, lambda: panel(app).sort == "pid", "sorted by pid")
        assert panel(app).shown_pids == sorted(s.pid for s in snapshot.sessions)
        assert "by pid" in str(panel(app).border_subtitle)
        # The table's rows are in that order too (what the screen shows).
        table = panel(app).query_one(KeyedTable)
        assert [k.value for k in table.ordered_keys()] == [str(p) for p in panel(app).shown_pids]


def test_each_order_is_one_key_after_another_with_missing_values_last_and_ties_by_pid():
    """The stable sorts, one key at a time, give the order a tuple key gives (written out here
    independently), on sessions with missing ages, equal ages, mixed case and missing text."""
    inf = float("inf")
    reference = {
        "xact": lambda s: (-s.xact_age_s if s.xact_age_s is not None else inf,
                           -s.query_age_s if s.query_age_s is not None else inf, s.pid),
        "time": lambda s: (-s.query_age_s if s.query_age_s is not None else inf, s.pid),
        "pid": lambda s: s.pid,
        "state": lambda s: ((s.state or "").lower(), s.pid),
        "wait": lambda s: (not s.blocked_by, (s.wait_event_type or "").lower(), (s.wait_event or "").lower(), s.pid),
        "application": lambda s: ((s.application or "").lower(), s.pid),
        "query": lambda s: ((s.query or "").lower(), s.pid),
    }
    rnd = random.Random(7)
    sessions = [replace(s, xact_age_s=rnd.choice([None, 1.0, 2.0, s.xact_age_s]), query_age_s=rnd.choice([None, 1.0, s.query_age_s]),
                        state=rnd.choice([None, "idle", "Active", "active"]), application=rnd.choice([None, "B", "a", "b"]))
                for s in sample_snapshot(queues=1, sessions=400, step=3).sessions]
    for name, key in reference.items():
        for _ in range(3):
            rnd.shuffle(sessions)
            ours = list(sessions)
            sort_sessions(ours, name)
            assert [s.pid for s in ours] == [s.pid for s in sorted(sessions, key=key)], name
    assert set(ORDERS) == {key for key, _ in SessionsPanel.SORTS}  # every order the panel offers


@pytest.mark.parametrize("size", SIZES)
async def test_blockers_and_the_xmin_holder_are_marked_as_the_lock_tree_counts_them(size):
    app = sample_app()
    async with app.run_test(size=size) as pilot:
        await settle(pilot, app, lambda: len(panel(app).shown_pids) == 16, "the sample's sessions")
        await zoom_sessions(pilot, app)
        snapshot = app.snapshot
        holder = snapshot.connections.xmin_holder_pid
        for root in snapshot.blockers:
            assert cells(app, root.pid)["role"].split(",")[0] == str(root.blocked_count)
        assert "xmin" in cells(app, holder)["role"]
        waiting = next(s for s in snapshot.sessions if s.blocked_by)
        wait = cells(app, waiting.pid)["wait"]
        assert wait.endswith("← " + ",".join(map(str, waiting.blocked_by)))
        idle = next(s for s in snapshot.sessions if s.state == "idle")
        assert cells(app, idle.pid)["role"] == ""
        # The marks are among the first columns: on screen, zoomed, at 80 columns too.
        table = panel(app).query_one(KeyedTable)
        assert table.shown_columns().index("role") <= 4 and table.scroll_x == 0


@pytest.mark.parametrize("size", SIZES)
async def test_idle_sessions_hide_and_the_filter_narrows_the_list(size):
    app = sample_app()
    async with app.run_test(size=size) as pilot:
        await settle(pilot, app, lambda: len(panel(app).shown_pids) == 16, "the sample's sessions")
        snapshot = app.snapshot
        idle = {s.pid for s in snapshot.sessions if s.state == "idle"}
        assert idle
        await zoom_sessions(pilot, app)
        await pilot.press(app.key_for("sessions.idle"))
        await settle(pilot, app, lambda: not idle & set(panel(app).shown_pids), "the idle sessions hidden")
        assert len(panel(app).shown_pids) == 16 - len(idle)  # an idle-in-transaction one stays
        assert "idle hidden" in str(panel(app).border_subtitle) or "-idle" in str(panel(app).border_subtitle)
        await pilot.press(app.key_for("sessions.idle"))
        await settle(pilot, app, lambda: idle <= set(panel(app).shown_pids), "the idle sessions back")
        # `/`: only the sessions whose application, user, query... hold the text.
        await pilot.press("slash")
        for ch in "billing":
            await pilot.press(ch)
        await pilot.press("enter")
        wanted = {s.pid for s in snapshot.sessions if "billing" in f"{s.application} {s.user} {s.query}".lower()}
        await settle(pilot, app, lambda: set(panel(app).shown_pids) == wanted, "only billing's sessions")


async def test_sessions_that_do_not_come_in_order_are_sorted():
    """A snapshot whose sessions the database did not sort (a recording, SQL Server's probe) is
    sorted by the panel; one that says it comes in order is taken as it is."""
    base = sample_snapshot(queues=1, sessions=60, step=2)
    shuffled = list(base.sessions)
    random.Random(5).shuffle(shuffled)
    expected = list(base.sessions)
    sort_sessions(expected, "xact")
    assert [s.pid for s in expected] == [s.pid for s in base.sessions]  # the sample comes in order
    app = QueuetopApp(lambda sink: SampleSource(sink, [replace(base, sessions=tuple(shuffled), sessions_in_order=False)]))
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, app, lambda: panel(app).shown_pids == [s.pid for s in expected], "the sessions sorted")


async def test_samples_in_the_same_order_update_the_rows_on_screen_and_those_scrolled_into_view():
    """Thousands of sessions whose ages all grow alike keep their order: then only the rows on
    screen are formatted again. What the table draws is still the latest sample's, at the top
    and after scrolling to the bottom."""
    frames = [sample_snapshot(queues=2, sessions=2000, step=n) for n in range(4)]
    app = QueuetopApp(lambda sink: SampleSource(sink, frames[:1]))

    def drawn_time(pid: int) -> str:
        value = panel(app).query_one(KeyedTable).get_cell(str(pid), "time")
        return value.plain if hasattr(value, "plain") else str(value)

    def expected_time(frame, pid: int) -> str:
        return fmt.seconds(next(s.query_age_s for s in frame.sessions if s.pid == pid))

    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, app, lambda: len(panel(app).shown_pids) == len(frames[0].sessions), "the first sample listed")
        await zoom_sessions(pilot, app)  # the lock tree has the row: zoomed, every column shows
        table = panel(app).query_one(KeyedTable)
        for frame in frames[1:3]:
            order = list(panel(app).shown_pids)
            app.apply_snapshot(frame)
            await pilot.pause()
            assert panel(app).shown_pids == order  # the same order: the usual sample
            top = order[0]
            assert drawn_time(top) == expected_time(frame, top) != expected_time(frames[0], top)
        table.focus()
        table.move_cursor(row=table.row_count - 1)
        await settle(pilot, app, lambda: table.cursor_row == table.row_count - 1, "the last row selected")
        last = panel(app).shown_pids[-2]  # the last client session (the launcher has no query time)
        app.apply_snapshot(frames[3])
        await pilot.pause()
        await settle(pilot, app, lambda: drawn_time(last) == expected_time(frames[3], last), "the bottom row's latest time")
        # A row that was off screen through two samples shows the latest once scrolled back to.
        middle = panel(app).shown_pids[len(panel(app).shown_pids) // 2]
        table.move_cursor(row=panel(app).shown_pids.index(middle))
        await settle(pilot, app, lambda: drawn_time(middle) == expected_time(frames[3], middle), "the middle row's latest time")


def test_five_thousand_sessions_cost_little_to_apply():
    """The list of 5,000 sessions (the probe's cap) applied to the widgets: the bench's goal,
    p95 under 50 ms, at a tiny size (benchmarks are not tests: this proves it works, with margin)."""
    from tui.bench import run_tui_bench

    result = run_tui_bench(warm_up_s=0, sessions=5000, queues=5, snapshots=4, idle_seconds=0.2)
    assert result["sessions_listed"] >= 5000
    assert result["apply_ms_p50"] < 500  # a CI machine, loaded: the bench reports the real figure


# -- on a real server: the truth is pg_stat_activity ------------------------------------------

@pytest.mark.parametrize("size", SIZES)
async def test_sessions_match_pg_stat_activity_and_enter_shows_blockers(db, size):
    with db.connect() as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS sess_t (id int PRIMARY KEY)")
        conn.execute("INSERT INTO sess_t VALUES (1) ON CONFLICT DO NOTHING")
    idle = db.connect(application_name="qt-sess-idle")
    holder = db.connect(application_name="qt-sess-holder", autocommit=False)
    holder.execute("UPDATE sess_t SET id = id WHERE id = 1")  # a row lock and an xid: idle in transaction
    waiter = db.connect(application_name="qt-sess-waiter")

    def wait_for_lock() -> None:
        try:
            waiter.execute("UPDATE sess_t SET id = id WHERE id = 1")
        except psycopg.Error:
            pass

    thread = threading.Thread(target=wait_for_lock, daemon=True)
    thread.start()
    pids = {name: c.info.backend_pid for name, c in (("idle", idle), ("holder", holder), ("waiter", waiter))}
    truth_sql = ("SELECT pid, state, usename, application_name, extract(epoch FROM now() - xact_start), "
                 "pg_blocking_pids(pid) FROM pg_stat_activity WHERE pid = ANY(%s)")
    app = live_app(db)
    try:
        async with app.run_test(size=size) as pilot:
            def listed() -> bool:
                shown = set(panel(app).shown_pids)
                s = app.snapshot
                return set(pids.values()) <= shown and s is not None and \
                    any(x.pid == pids["waiter"] and x.blocked_by for x in s.sessions)

            await settle(pilot, app, listed, "the three sessions, the waiter blocked", 500)
            # The truth right before and right after a sample taken in between.
            with db.connect() as conn:
                before = {r[0]: r for r in conn.execute(truth_sql, (list(pids.values()),))}
            # taken_at is when a sample was put together, after its probes ran: the sample after
            # the first one stamped later than the truth was read wholly after it (cycles never overlap).
            seen = datetime.now(UTC)
            await settle(pilot, app, lambda: app.snapshot.taken_at > seen, "a sample stamped after the truth", 500)
            first = app.snapshot.taken_at
            await settle(pilot, app, lambda: app.snapshot.taken_at > first and listed(), "a sample read after the truth", 500)
            with db.connect() as conn:
                after = {r[0]: r for r in conn.execute(truth_sql, (list(pids.values()),))}
            sessions = {s.pid: s for s in app.snapshot.sessions}
            for pid in pids.values():
                s = sessions[pid]
                assert s.state == after[pid][1]
                assert s.user == after[pid][2] and s.application == after[pid][3]
                if after[pid][4] is not None:  # the transaction's age lies between the two truths
                    assert float(before[pid][4] or 0) - 0.01 <= s.xact_age_s <= float(after[pid][4]) + 0.01
            assert list(sessions[pids["waiter"]].blocked_by) == list(after[pids["waiter"]][5]) == [pids["holder"]]
            assert cells(app, pids["holder"])["role"].split(",")[0] == "1"
            assert cells(app, pids["holder"])["state"] == "idle in xact"
            # Enter on the waiter: its whole query, blocked by the holder.
            await select(pilot, app, pids["waiter"])
            await pilot.press("enter")
            await settle(pilot, app, lambda: isinstance(app.screen, DetailsScreen) and app.screen.renderables is not None,
                         "the waiter's details", 500)
            text = details_text(app)
            assert f"Blocked by: pid {pids['holder']}" in text and "UPDATE sess_t SET id = id WHERE id = 1" in text
            assert "WAITING" in text  # its lock, not granted
            await pilot.press("escape")
            await select(pilot, app, pids["holder"])
            await pilot.press("enter")
            await settle(pilot, app, lambda: isinstance(app.screen, DetailsScreen) and app.screen.renderables is not None,
                         "the holder's details", 500)
            assert f"Blocks: pid {pids['waiter']}" in details_text(app)
            await pilot.press("escape")
    finally:
        holder.rollback()
        thread.join(10)
        for c in (idle, holder, waiter):
            c.close()


@pytest.mark.parametrize("size", SIZES)
async def test_cancel_and_terminate_act_on_the_selected_session_and_say_what_it_is(db, size):
    victim = db.connect(application_name="qt-sess-victim", autocommit=False)
    victim.execute("SELECT txid_current() /* a long report */")  # idle in transaction, holding an xid
    pid = victim.info.backend_pid
    app = live_app(db)
    try:
        async with app.run_test(size=size) as pilot:
            await settle(pilot, app, lambda: pid in panel(app).shown_pids, "the victim listed", 500)
            await select(pilot, app, pid)
            await pilot.press(app.key_for("backend.cancel"))  # idle: cancel cannot end it, terminate is offered
            assert isinstance(app.screen, ConfirmScreen)
            question = app.screen.question
            for said in (f"Backend {pid}", "user postgres", "application qt-sess-victim", "state idle in transaction",
                         "transaction open", "Query: SELECT txid_current() /* a long report */", "cannot end it"):
                assert said in question, (said, question)
            await pilot.press("n")
            assert pid in {s.pid for s in app.snapshot.sessions}  # nothing done
            await pilot.press(app.key_for("backend.terminate"))
            assert isinstance(app.screen, ConfirmScreen) and app.screen.question.startswith("Terminate this backend?")
            assert f"Backend {pid}" in app.screen.question and "No session waits on it." in app.screen.question
            await pilot.press("y")

            def gone() -> bool:
                with db.connect() as conn:
                    return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()[0] == 0

            await settle(pilot, app, gone, "the victim terminated", 500)
            await settle(pilot, app, lambda: pid not in panel(app).shown_pids, "the victim gone from the list", 500)
    finally:
        victim.close()


async def test_the_xmin_holder_is_what_connections_acts_on(db):
    holder = db.connect(application_name="qt-sess-xmin", autocommit=False)
    holder.execute("SELECT txid_current()")
    pid = holder.info.backend_pid
    app = live_app(db)
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            await settle(pilot, app, lambda: app.snapshot is not None and app.snapshot.connections is not None
                         and app.snapshot.connections.xmin_holder_pid == pid, "the xmin holder", 500)
            assert "xmin" in cells(app, pid)["role"]
            app.query_one("#connections-table").focus()
            await pilot.press(app.key_for("backend.terminate"))
            assert isinstance(app.screen, ConfirmScreen)
            assert f"Backend {pid}" in app.screen.question and "holds back the xmin horizon" in app.screen.question
            await pilot.press("n")
    finally:
        holder.close()


async def test_cancel_with_no_session_selected_says_where_to_select_one():
    app = sample_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, lambda: app.snapshot is not None, "a sample")
        app.query_one("#queues-table").focus()
        await pilot.press(app.key_for("backend.terminate"))
        assert not isinstance(app.screen, ConfirmScreen)
        assert any("select a session in the Sessions or Locks panel" in text for _a, _s, text in app.notices)


# -- engine controls: the embedded server's, or --engine --------------------------------------

async def test_engine_keys_are_off_on_another_database_unless_engine_is_given(db):
    off = dashboard_host("", db.target, Config(), 0.3, False)
    assert off.controls is None and off.prepare is None and off.controls_off == ENGINE_OFF
    on = dashboard_host("", db.target, Config(), 0.3, False, engine=True)
    assert on.prepare is not None  # its controls are checked once the dashboard runs
    app = QueuetopApp(hosts=[off])
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press(app.key_for("engine.burst"))
        await settle(pilot, app, lambda: any("--engine" in text for _a, _s, text in app.notices), "the engine-off notice")
        assert not isinstance(app.screen, ConfirmScreen)
