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
from tui.sample import TAKEN_AT, SampleSource, sample_snapshot
from tui.screens.details import DetailsScreen
from tui.screens.dialogs import ConfirmScreen
from tui.widgets.keyed_table import KeyedTable
from tui.widgets.panels import SessionsPanel
from tui.widgets.panels.base import SHORT_STATES
from tui.widgets.panels.sessions import ORDERS, sort_sessions

from .conftest import wait_until
from .test_tui import live_app, sample_app, settle

SIZES = [(80, 24), (100, 30)]
# The sample's client sessions: what the list shows until A (the autovacuum launcher and
# queuetop's own probe session are the sample's others).
CLIENTS = [s for s in sample_snapshot().sessions if not s.background and not s.own]


def panel(app) -> SessionsPanel:
    return app.query_one(SessionsPanel)


def cells(app, pid: int) -> dict[str, str]:
    """A session's row, every column (shown or not), by column key, as plain text."""
    table = panel(app).query_one(KeyedTable)
    row = table.full_rows()[str(pid)]
    keys = [c.key for c in SessionsPanel.COLUMNS]
    return {k: (v.plain if hasattr(v, "plain") else str(v)) for k, v in zip(keys, row, strict=True)}


async def zoom_sessions(pilot, app) -> None:
    """The Sessions list full screen (z): every column whole, a window at a time, as an operator
    reads it when the lock tree has the row (the sample's sessions are blocked)."""
    panel(app).query_one(KeyedTable).focus()
    await pilot.press("z")
    await settle(pilot, app, lambda: app.screen.maximized is panel(app), "the Sessions panel zoomed")
    # Every column whole, a window of them beside PID (← and → move it: the zoom tests).
    await settle(pilot, app, lambda: panel(app).query_one(KeyedTable).everything
                 and panel(app).query_one(KeyedTable).shown_columns()[:2] == ["pid", "state"], "every column, a window at a time")


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
        await settle(pilot, app, lambda: len(panel(app).shown_pids) == len(CLIENTS), "the sample's client sessions")
        snapshot = app.snapshot
        assert snapshot is not None
        # The count in the title, whole, where the border has room for it (80 columns, sessions
        # blocked: the lock tree takes the room and the title says `Sessions` alone).
        full = f"Sessions {len(CLIENTS)}"  # what is listed: not the launcher, not queuetop's own
        assert panel(app).border_title == full or \
            (len(full) + 4 > panel(app).size.width and panel(app).border_title == "Sessions")
        assert len(snapshot.sessions) == len(CLIENTS) + 2
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
        assert panel(app).shown_pids == sorted(s.pid for s in CLIENTS)
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
        await settle(pilot, app, lambda: len(panel(app).shown_pids) == len(CLIENTS), "the sample's sessions")
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
        await settle(pilot, app, lambda: len(panel(app).shown_pids) == len(CLIENTS), "the sample's sessions")
        snapshot = app.snapshot
        idle = {s.pid for s in snapshot.sessions if s.state == "idle"}
        assert idle
        await zoom_sessions(pilot, app)
        await pilot.press(app.key_for("sessions.idle"))
        await settle(pilot, app, lambda: not idle & set(panel(app).shown_pids), "the idle sessions hidden")
        assert len(panel(app).shown_pids) == len(CLIENTS) - len(idle)  # an idle-in-transaction one stays
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
        await settle(pilot, app, lambda: panel(app).shown_pids == [s.pid for s in expected if not s.background and not s.own],
                     "the sessions sorted")


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
        clients = [s for s in frames[0].sessions if not s.background and not s.own]
        await settle(pilot, app, lambda: len(panel(app).shown_pids) == len(clients), "the first sample listed")
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
        last = panel(app).shown_pids[-1]  # the last client session (the launcher is not listed: A)
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


# -- issue 43, points 5 and 6: the cursor is a session; sessions as an operator reads them --------


def shuffled_ages(snapshot, order: list[int]):
    """`snapshot` with its client sessions' transaction ages set so that they sort in `order`
    (pids, the oldest first), as successive samples re-sort a real list."""
    ages = {pid: 1000.0 - n for n, pid in enumerate(order)}
    sessions = tuple(replace(s, xact_age_s=ages[s.pid]) if s.pid in ages else s for s in snapshot.sessions)
    return replace(snapshot, sessions=sessions, sessions_in_order=False)


async def test_the_cursor_stays_on_its_session_while_samples_re_sort_the_list():
    base = sample_snapshot()
    pids = [s.pid for s in CLIENTS]
    first, second = shuffled_ages(base, pids), shuffled_ages(base, list(reversed(pids)))
    app = QueuetopApp(lambda sink: SampleSource(sink, [first]))
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, app, lambda: panel(app).shown_pids == pids, "the first order")
        chosen = pids[2]
        await select(pilot, app, chosen)
        table = panel(app).query_one(KeyedTable)
        at = table.cursor_row
        app.apply_snapshot(second)
        await settle(pilot, app, lambda: panel(app).shown_pids == list(reversed(pids)), "the list re-sorted")
        # The line under the cursor before is another session's now; the cursor went with its own.
        assert panel(app).shown_pids[at] != chosen
        assert panel(app).selected_pid == chosen and table.cursor_row == panel(app).shown_pids.index(chosen)
        assert panel(app).selected_identity == next(s.identity for s in base.sessions if s.pid == chosen)
        # A session that comes and one that goes, above it: still on it.
        newcomer = replace(CLIENTS[0], pid=5555, backend_start=TAKEN_AT, xact_age_s=5000.0)
        gone = pids[-1]
        third = replace(second, sessions=(newcomer, *(s for s in second.sessions if s.pid != gone)))
        app.apply_snapshot(third)
        await settle(pilot, app, lambda: 5555 in panel(app).shown_pids and gone not in panel(app).shown_pids, "rows came and went")
        assert panel(app).selected_pid == chosen
        # Zoomed and back: the columns are laid out again, the cursor stays on it.
        await pilot.press("z")
        await settle(pilot, app, lambda: table.everything, "zoomed")
        assert panel(app).selected_pid == chosen
        await pilot.press("right")
        await pilot.press("z")
        await settle(pilot, app, lambda: not table.everything, "back")
        assert panel(app).selected_pid == chosen


async def test_a_session_that_ends_under_the_cursor_says_so_and_keys_do_not_slip_onto_another():
    base = sample_snapshot()
    chosen = CLIENTS[3].pid
    ended = replace(base, sessions=tuple(s for s in base.sessions if s.pid != chosen))
    backend = RecordingBackend()
    app = QueuetopApp(lambda sink: SampleSource(sink, [base]), backend=backend)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, lambda: chosen in panel(app).shown_pids, "the sample listed")
        await select(pilot, app, chosen)
        at = panel(app).query_one(KeyedTable).cursor_row
        app.apply_snapshot(ended)
        table = panel(app).query_one(KeyedTable)
        await settle(pilot, app, lambda: chosen not in panel(app).shown_pids, "the session gone from the list")
        # Its line stays where it was, under the cursor, saying it ended.
        assert table.cursor_key() == f"ended:{chosen}" and table.cursor_row == at
        row = table.full_rows()[f"ended:{chosen}"]
        assert str(row[1]) == "ended" and str(row[-1]) == f"session {chosen} ended"
        assert panel(app).selected_pid is None and panel(app).ended_pid == chosen
        assert any(f"session {chosen}" in text and "ended" in text for _a, _s, text in app.notices)
        # C, K and Enter say so, and act on nobody (the next line is another session's).
        for key in ("backend.terminate", "backend.cancel"):
            await pilot.press(app.key_for(key))
            assert not isinstance(app.screen, ConfirmScreen)
        await pilot.press("enter")
        assert not isinstance(app.screen, DetailsScreen)
        assert sum(f"session {chosen} ended" in text for _a, _s, text in app.notices) >= 3
        assert backend.signalled == [] and backend.details == []
        # Zoomed, moved sideways to the last columns: PID and State stay, so `ended` is in sight.
        await pilot.press("z")
        await settle(pilot, app, lambda: table.everything, "zoomed")
        for _ in range(len(SessionsPanel.COLUMNS)):
            await pilot.press("right")
        await pilot.pause()
        assert table.shown_columns()[:2] == ["pid", "state"] and "query" in table.shown_columns()
        assert table.cursor_key() == f"ended:{chosen}"
        await pilot.press("z")
        await settle(pilot, app, lambda: not table.everything, "back")
        # A later sample keeps the line while the cursor is on it; once the cursor moves, it goes.
        app.apply_snapshot(ended)
        await pilot.pause()
        assert table.cursor_key() == f"ended:{chosen}"
        await pilot.press("down")
        app.apply_snapshot(ended)
        await settle(pilot, app, lambda: f"ended:{chosen}" not in table.full_rows(), "the ended line gone")
        assert panel(app).selected_pid is not None and panel(app).selected_pid != chosen


async def test_a_pid_that_another_backend_took_is_not_the_chosen_session():
    """The chosen session ended and a new backend got its pid (another start) between samples:
    the cursor says the chosen one ended; Enter and K on the new one act on the new one's identity."""
    base = sample_snapshot()
    chosen = next(s for s in CLIENTS if s.state == "idle")
    reborn = replace(chosen, backend_start=TAKEN_AT, application="other-app")
    later = replace(base, sessions=tuple(reborn if s.pid == chosen.pid else s for s in base.sessions))
    backend = RecordingBackend()
    app = QueuetopApp(lambda sink: SampleSource(sink, [base]), backend=backend)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, app, lambda: chosen.pid in panel(app).shown_pids, "the sample listed")
        await select(pilot, app, chosen.pid)
        app.apply_snapshot(later)
        table = panel(app).query_one(KeyedTable)
        await settle(pilot, app, lambda: table.cursor_key() == f"ended:{chosen.pid}", "the chosen session said ended")
        assert str(table.full_rows()[str(chosen.pid)][6]) == "other-app"  # the new backend, a row of its own
        await pilot.press("down")  # the new backend's row follows the ended line
        await settle(pilot, app, lambda: panel(app).selected_pid == chosen.pid, "the new backend selected")
        assert panel(app).selected_identity == (chosen.pid, TAKEN_AT)
        await pilot.press("enter")
        await settle(pilot, app, lambda: backend.details == [(chosen.pid, TAKEN_AT)], "its details, by identity")
        await pilot.press("escape")
        await pilot.press(app.key_for("backend.terminate"))
        assert isinstance(app.screen, ConfirmScreen) and "other-app" in app.screen.question
        await pilot.press("y")
        await settle(pilot, app, lambda: backend.signalled == [(chosen.pid, True, TAKEN_AT)], "signalled by identity")


@pytest.mark.parametrize("size", SIZES)
async def test_server_processes_and_queuetops_own_sessions_hide_behind_a_toggle_and_block_nobody(size):
    base = sample_snapshot()
    launcher, own = 42, 43
    # queuetop's own probe waits on a blocker (1001, which holds up 4 clients): not counted.
    snapshot = replace(base, sessions=tuple(replace(s, blocked_by=(1001,), wait_event_type="Lock", wait_event="relation")
                                            if s.pid == own else s for s in base.sessions))
    app = sample_app(snapshots=[snapshot])
    async with app.run_test(size=size) as pilot:
        await settle(pilot, app, lambda: len(panel(app).shown_pids) == len(CLIENTS), "the clients' sessions")
        assert {launcher, own}.isdisjoint(panel(app).shown_pids)
        assert panel(app).border_title in (f"Sessions {len(CLIENTS)}", "Sessions")  # what is listed
        await zoom_sessions(pilot, app)
        assert "+2 server/queuetop backends (A)" in str(panel(app).border_subtitle) or "+2 (A)" in str(panel(app).border_subtitle)
        holds = cells(app, 1001)["role"]
        direct = sum(1 for s in CLIENTS if 1001 in s.blocked_by)
        assert holds == str(direct)  # the clients waiting on it, not queuetop's probe
        await pilot.press(app.key_for("sessions.all"))
        await settle(pilot, app, lambda: {launcher, own} <= set(panel(app).shown_pids), "every backend")
        assert panel(app).border_title == f"Sessions {len(snapshot.sessions)}"
        assert "every backend" in str(panel(app).border_subtitle) or "all (A)" in str(panel(app).border_subtitle)
        assert cells(app, 1001)["role"] == str(direct)  # shown or not, never counted as blocked
        assert cells(app, own)["application"] == "queuetop-probe"
        await pilot.press(app.key_for("sessions.all"))
        await settle(pilot, app, lambda: {launcher, own}.isdisjoint(panel(app).shown_pids), "clients again")
        # The help lists the toggle.
        from tui.dashboard.keymap import KeyContext, help_keys
        lines = help_keys(app.key_for, KeyContext(hosts=1, replay=False, engine=False, backend=False, read_only=False))
        assert any(binding == "sessions.all" and key == "A" for key, _what, binding in lines)


@pytest.mark.parametrize("size", SIZES)
async def test_state_and_application_stay_beside_pid_while_the_lock_tree_has_the_room(size):
    """While sessions are blocked the lock tree takes the row's room: the Sessions list keeps PID,
    State and App side by side from 100 columns; at 80, PID and State (the tree needs the rest)."""
    app = sample_app()
    async with app.run_test(size=size) as pilot:
        await settle(pilot, app, lambda: len(panel(app).shown_pids) == len(CLIENTS), "the sample's sessions")
        await pilot.pause()
        assert "-calm" not in app.query_one("#row-locks").classes  # sessions are blocked: the tree's layout
        table = panel(app).query_one(KeyedTable)
        if size[0] >= 100:
            assert table.shown_columns()[:3] == ["pid", "state", "application"]
        else:
            # 80 columns: the tree keeps the width it needs to say everything whole (37), and
            # Sessions PID and State; the application is listed among the hidden columns (z).
            assert table.shown_columns() == ["pid", "state"] and "App" in table.hidden
            assert app.query_one("#locks").size.width >= 35 and "-narrow" in app.query_one("#row-locks").classes
        # Whole where they fit: the pid and the state; the application at least 6 cells of it.
        lines = [table.render_line(y).text for y in range(1, min(table.size.height, 4))]
        pids_in_view = panel(app).shown_pids[: len(lines)]
        assert lines
        for line, pid in zip(lines, pids_in_view, strict=False):
            s = next(x for x in CLIENTS if x.pid == pid)
            state = SHORT_STATES.get(s.state or "", s.state or "")
            words = line.split()
            assert words[0] == str(pid) and f" {state}" in line, line
            if size[0] >= 100:
                assert (s.application or "")[:5] in line, line


class RecordingBackend:
    """A database behind the sample: the details and signals it was asked for, by identity."""

    def __init__(self) -> None:
        self.signalled: list[tuple[int, bool, datetime | None]] = []
        self.details: list[tuple[int, datetime | None]] = []

    def queue_details(self, source: str, name: str):
        from probes.sources import QueueDetails

        return QueueDetails()

    def session_details(self, pid: int, started: datetime | None = None) -> dict:
        self.details.append((pid, started))
        return {"session": None, "locks": []}

    def signal_backend(self, pid: int, terminate: bool, started: datetime | None = None) -> bool:
        self.signalled.append((pid, terminate, started))
        return True


# -- on a real server: a real re-sort, a session that ends, a pid that is another's ---------------


def _xact_start(db, pid: int):
    with db.connect() as conn:
        return conn.execute("SELECT xact_start, backend_start FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()


async def test_on_a_real_server_the_cursor_follows_its_session_through_a_re_sort_and_says_when_it_ends(db):
    """Two sessions with open transactions, the older listed first; the older one commits and
    opens a new transaction, so the next sample lists it last: the cursor stays on the session it
    was on. Then that session disconnects: its line says it ended, and K offers nobody."""
    first = db.connect(application_name="qt-resort-a", autocommit=False)
    second = db.connect(application_name="qt-resort-b", autocommit=False)
    first.execute("SELECT txid_current()")
    wait_until(lambda: _xact_start(db, first.info.backend_pid)[0] is not None, what="a's transaction")
    second.execute("SELECT txid_current()")
    a, b = first.info.backend_pid, second.info.backend_pid
    app = live_app(db)
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            def order() -> list[int]:
                return [p for p in panel(app).shown_pids if p in (a, b)]

            await settle(pilot, app, lambda: order() == [a, b], "a (older) listed before b", 500)
            await select(pilot, app, a)
            first.commit()  # a's transaction ends; a new one starts: now b's is the older
            first.execute("SELECT txid_current()")
            await settle(pilot, app, lambda: order() == [b, a], "the list re-sorted by the server's ages", 500)
            assert panel(app).selected_pid == a
            table = panel(app).query_one(KeyedTable)
            assert table.cursor_row == panel(app).shown_pids.index(a)
            started = _xact_start(db, a)[1]
            assert panel(app).selected_identity == (a, started)
            # a ends: its line says so, under the cursor.
            first.close()
            await settle(pilot, app, lambda: table.cursor_key() == f"ended:{a}", "a's line says it ended", 500)
            assert panel(app).selected_pid is None and a not in panel(app).shown_pids
            await pilot.press(app.key_for("backend.terminate"))
            assert not isinstance(app.screen, ConfirmScreen)
            assert any(f"session {a} ended: nothing to terminate" in text for _x, _s, text in app.notices)
            with db.connect() as conn:  # b, next to it, was not touched
                assert conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (b,)).fetchone()[0] == 1
    finally:
        first.close()
        second.close()


async def test_terminate_refuses_a_pid_that_is_another_backends_now_and_says_so(db):
    """The dialog named a session that has ended; its pid is a live backend's now (simulated: the
    live backend's own pid with an older start, as a reused pid would be). The statement that
    signals refuses, the notice says why, and the live backend is still there."""
    live = db.connect(application_name="qt-reused-pid")
    pid = live.info.backend_pid
    started = _xact_start(db, pid)[1]
    app = live_app(db)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot, app, lambda: pid in panel(app).shown_pids, "the backend listed", 500)
            stale = started.replace(year=started.year - 1)
            app.host_actions.signal(True, pid, "Sessions", started=stale, known=True)
            await settle(pilot, app, lambda: isinstance(app.screen, ConfirmScreen), "the confirmation")
            assert f"Backend {pid} (not in the last sample" in app.screen.question  # not the live one's facts
            await pilot.press("y")
            await settle(pilot, app, lambda: any("refused to terminate" in text for _a, _s, text in app.notices),
                         "the refusal", 500)
            said = next(text for _a, _s, text in app.notices if "refused to terminate" in text)
            assert f"{pid}" in said and "another backend" in said and "nothing done" in said
            assert live.execute("SELECT 1").fetchone() == (1,)  # alive, answering
            # The same key on the session as listed: its identity is the live one's, and it ends.
            await select(pilot, app, pid)
            await pilot.press(app.key_for("backend.terminate"))
            assert isinstance(app.screen, ConfirmScreen) and f"started {started.astimezone(UTC):%Y-%m-%d %H:%M:%S}" in app.screen.question
            await pilot.press("y")

            def gone() -> bool:
                with db.connect() as conn:
                    return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()[0] == 0

            await settle(pilot, app, gone, "the backend terminated", 500)
    finally:
        live.close()


async def test_a_blockers_held_lock_mode_is_shown_beside_what_it_holds_up():
    """The mode a session holds on a queue's table that stops its consumers (the snapshot's
    QueueSample.lockers, read from pg_locks), in Holds up beside the count: `11, ACCESS EXCLUSIVE`."""
    from probes.model import Locker

    base = sample_snapshot()
    locker = Locker(pid=1000, mode="AccessExclusiveLock", relation="accounts", state="idle in transaction",
                    application="billing", xact_age_s=120.0)
    snapshot = replace(base, queues=(replace(base.queues[0], lockers=(locker,)), *base.queues[1:]))
    app = sample_app(snapshots=[snapshot])
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, app, lambda: 1000 in panel(app).shown_pids, "the sample listed")
        root = next(b for b in snapshot.blockers if b.pid == 1000)
        assert cells(app, 1000)["role"] == f"{root.blocked_count}, ACCESS EXCLUSIVE, xmin"
        assert "EXCLUSIVE" not in cells(app, 1001)["role"]  # only the session that holds it
    # The locks probe's own word for a root blocker (on what its waiters want) comes first.
    rooted = replace(snapshot, blockers=tuple(replace(b, held_mode="ShareLock") if b.pid == 1000 else b
                                              for b in snapshot.blockers))
    app = sample_app(snapshots=[rooted])
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, app, lambda: 1000 in panel(app).shown_pids, "the sample listed")
        assert cells(app, 1000)["role"] == f"{root.blocked_count}, SHARE, xmin"


async def test_on_a_real_server_a_migrations_lock_on_a_queue_table_is_shown_with_its_mode(db):
    from queues.table_queue import TableQueue

    with db.connect() as conn:
        TableQueue.create(conn, "qt_locked_q")
    migration = db.connect(application_name="qt-migration", autocommit=False)
    migration.execute("LOCK TABLE queuetop.q_qt_locked_q IN ACCESS EXCLUSIVE MODE")
    app = live_app(db)
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            pid = migration.info.backend_pid

            def shown() -> bool:
                return pid in panel(app).shown_pids and "ACCESS EXCLUSIVE" in cells(app, pid)["role"]

            await settle(pilot, app, shown, "the migration's held mode", 500)
            with db.connect() as conn:  # the server's truth
                assert conn.execute("SELECT mode FROM pg_locks WHERE pid = %s AND relation = 'queuetop.q_qt_locked_q'::regclass",
                                    (pid,)).fetchone() == ("AccessExclusiveLock",)
    finally:
        migration.close()
