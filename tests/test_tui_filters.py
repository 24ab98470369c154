"""Filters by field (issue 47, point 2): the filter language (tui/filters.py), each panel's own
filter (`/` edits the focused panel's, prefilled; its border says it), refused input that keeps the
filter it had, and `--filter` / `--min-duration` on the command line, checked through the real
entry point against real sessions. At 80x24 and 100x30."""

from __future__ import annotations

import threading
from dataclasses import replace

import psycopg
import pytest
from textual.widgets import DataTable, Input

from tui import app as dashboard
from tui.cli import main
from tui.filters import EMPTY, FilterError, parse, session_duration, with_min_duration
from tui.sample import sample_snapshot
from tui.widgets.panels import LocksPanel, QueuesPanel, SessionsPanel
from tui.widgets.panels.base import filter_forms
from tui.widgets.panels.sessions import SESSION_FIELDS, SESSION_WORDS

from .conftest import wait_until
from .test_tui import queue_rows, sample_app, settle

SIZES = [(80, 24), (100, 30)]
SESSIONS = {s.pid: s for s in sample_snapshot().sessions}


def passing(expression: str) -> set[int]:
    """The sample's sessions the Sessions panel's fields let through `expression`."""
    check = parse(expression).compile(SESSION_FIELDS, SESSION_WORDS)
    return {pid for pid, s in SESSIONS.items() if check(s)}


# -- the language --------------------------------------------------------------------------------


@pytest.mark.parametrize("expression, pids", [
    ("app:worker-3", {1004, 1011}),
    ("APP:Worker-3", {1004, 1011}),  # any case
    ("application:worker-3 pid:1011", {1011}),  # AND; the long name of a field
    ("state:idle", {900, 901, 902}),  # the whole state: not `idle in transaction`
    ('state:"idle in transaction"', {1000}),
    ('state:"idle in xact"', {1000}),  # as the list shows it short
    ("dur>10s", {1000, 1007, 1008, 1009, 1010, 1011}),  # the idle-in-transaction one: its transaction's age (120 s)
    ("dur>=12s dur<0.25m", {1008, 1009, 1010}),  # 15 s is not under a quarter minute
    ("dur<1h -app:worker", {1000}),  # idle with no transaction: no duration, so no dur term holds
    ("orders", {900, 901, 902}),  # a bare word: any text field (their query)
    ('query:"balance -"', {1000}),  # quoted, with its space
    ("-state:active -state:idle", {42, 1000}),
    ('"worker-1" user:worker', {1002, 1009}),
])
def test_the_language_matches_the_fields_it_names(expression, pids):
    assert passing(expression) == pids


@pytest.mark.parametrize("expression, says", [
    ("foo:bar", "no field 'foo'"),
    ("dur:5s", "dur compares: dur>5s"),
    ("dur>5x", "'5x' is not a duration"),
    ("dur>", "the field needs a value"),
    ("app>3", "app takes app:VALUE"),
    ("pid:abc", "a pid is a whole number"),
    ('query:"FOR UPDATE', "a quote is not closed"),
    ('app:"x"y', "a quoted value must end its term"),
    ('app:""', "app: needs a value"),
])
def test_bad_input_is_refused_with_one_line(expression, says):
    with pytest.raises(FilterError) as raised:
        parse(expression)
    assert says in str(raised.value) and "\n" not in str(raised.value)


def test_durations_and_the_duration_of_a_session():
    assert parse("dur>500ms").terms[0].value == 0.5
    assert parse("dur>=2m").terms[0].value == 120.0
    assert parse("dur<1.5h").terms[0].value == 5400.0
    assert parse("dur>30").terms[0].value == 30.0  # a bare number: seconds
    s = SESSIONS[1000]
    assert session_duration(s) == s.xact_age_s  # idle in a transaction: the transaction's age
    assert session_duration(SESSIONS[1011]) == SESSIONS[1011].query_age_s  # running: its query's
    assert session_duration(SESSIONS[900]) is None  # idle, no transaction: none (never 0)
    running_in_old_xact = replace(SESSIONS[1011], query_age_s=1.0, xact_age_s=500.0)
    assert session_duration(running_in_old_xact) == 1.0


def test_min_duration_is_the_dur_term_and_both_options_are_anded():
    assert with_min_duration(None, None) == EMPTY
    assert with_min_duration(None, 2.5).text == "dur>=2.5s"
    both = with_min_duration("app:worker", 12)
    assert both.text == "app:worker dur>=12s"
    check = both.compile(SESSION_FIELDS, SESSION_WORDS)
    assert {pid for pid, s in SESSIONS.items() if check(s)} == {1008, 1009, 1010, 1011}


def test_a_field_the_panel_lacks_is_refused_for_it_naming_its_fields():
    said = parse("verdict:blocked").refused_by(SESSION_FIELDS)
    assert said is not None and "no field verdict" in said and "app, user" in said
    assert parse("app:x dur>1s").refused_by(SESSION_FIELDS) is None


def test_the_border_form_of_a_long_filter_is_cut_or_said_short():
    assert filter_forms("app:x") == ("/ app:x", "/…")
    forms = filter_forms('app:worker dur>5s query:"FOR UPDATE"')
    assert forms[0] == '/ app:worker dur>5s query:"FOR UPDATE"' and forms[1] == "/ app:worker d…" and forms[-1] == "/…"


# -- per panel, in the dashboard ------------------------------------------------------------------


async def apply(pilot, app, widget: str, text: str) -> None:
    """Focus `widget` (a panel's table or tree), press `/`, type `text` whole, Enter."""
    app.query_one(widget).focus()
    await pilot.press("slash")
    box = app.query_one("#filter", Input)
    assert box.has_focus
    box.value = text
    await pilot.press("enter")


def border_filter(panel) -> str | None:
    """The filter a panel's border says: whole beside its title where the top border has room,
    else first among the bottom border's parts (whole, cut, or `/…`)."""
    title = str(panel.border_title)
    if "  / " in title:
        return title.split("  ", 1)[1]
    first = str(panel.border_subtitle).split(" · ")[0]
    return first if first.startswith("/") else None


def errors(app) -> list[str]:
    return [text for _at, severity, text in app.notices if severity == "error"]


@pytest.mark.parametrize("size", SIZES)
async def test_each_panel_has_its_own_filter_said_in_its_border(size):
    app = sample_app()
    async with app.run_test(size=size) as pilot:
        await settle(pilot, app, lambda: app.snapshot is not None, "first snapshot")
        sessions, queues = app.query_one(SessionsPanel), app.query_one(QueuesPanel)
        await settle(pilot, app, lambda: 1011 in sessions.shown_pids, "the sessions listed")
        # Sessions by application and duration: the box names the panel it filters.
        app.query_one("#sessions-table").focus()
        await pilot.press("slash")
        assert "Sessions filter" in app.query_one("#filter", Input).placeholder
        app.query_one("#filter", Input).value = "app:worker dur>10s"
        await pilot.press("enter")
        await settle(pilot, app, lambda: set(sessions.shown_pids) == {1007, 1008, 1009, 1010, 1011}, "the long workers only")
        assert not app.query_one("#filter", Input).has_class("visible") and app.query_one("#sessions-table").has_focus
        assert len(queue_rows(app)) == 4  # Queues untouched
        await settle(pilot, app, lambda: border_filter(sessions) in filter_forms("app:worker dur>10s"), "its border")
        if sessions.size.width >= len("Sessions 12  / app:worker dur>10s") + 6:  # room beside the title: whole there
            assert border_filter(sessions) == "/ app:worker dur>10s" and "/" not in str(sessions.border_subtitle)
        # Queues by name, at the same time: each keeps its own.
        await apply(pilot, app, "#queues-table", "orders")
        await settle(pilot, app, lambda: set(queue_rows(app)) == {"table:orders"}, "the orders queue alone")
        assert set(sessions.shown_pids) == {1007, 1008, 1009, 1010, 1011}
        assert sessions.filter_text == "app:worker dur>10s" and queues.filter_text == "orders"
        await settle(pilot, app, lambda: border_filter(queues) == "/ orders", "the Queues border")
        # `/` again on Sessions: prefilled with its own filter, not Queues'.
        app.query_one("#sessions-table").focus()
        await pilot.press("slash")
        assert app.query_one("#filter", Input).value == "app:worker dur>10s"
        await pilot.press("escape")  # Esc in the box: that panel's filter cleared, the other's kept
        await settle(pilot, app, lambda: 900 in sessions.shown_pids and sessions.filter_text == "", "Sessions unfiltered")
        assert border_filter(sessions) is None and str(sessions.border_title).startswith("Sessions")
        assert set(queue_rows(app)) == {"table:orders"}
        # A queue's verdict code: the Queues panel's own field.
        await apply(pilot, app, "#queues-table", "verdict:saturated")
        await settle(pilot, app, lambda: set(queue_rows(app)) == {"reference:queue-01"}, "the saturated queue")


@pytest.mark.parametrize("size", SIZES)
async def test_bad_input_is_refused_and_the_old_filter_kept(size):
    app = sample_app()
    async with app.run_test(size=size) as pilot:
        await settle(pilot, app, lambda: app.snapshot is not None, "first snapshot")
        sessions = app.query_one(SessionsPanel)
        await apply(pilot, app, "#sessions-table", "state:idle")
        await settle(pilot, app, lambda: set(sessions.shown_pids) == {900, 901, 902}, "the idle sessions")
        # A wrong duration: refused, said, the box kept open on it, the filter as it was.
        app.query_one("#sessions-table").focus()
        await pilot.press("slash")
        box = app.query_one("#filter", Input)
        box.value = "dur>5x"
        await pilot.press("enter")
        await settle(pilot, app, lambda: any("'5x' is not a duration" in e for e in errors(app)), "the refusal said")
        assert sessions.filter_text == "state:idle" and set(sessions.shown_pids) == {900, 901, 902}
        assert box.has_focus and box.value == "dur>5x"
        # A field Sessions' rows do not have: refused for it, naming the fields it has.
        box.value = "verdict:blocked"
        await pilot.press("enter")
        await settle(pilot, app, lambda: any("Sessions: no field verdict here" in e for e in errors(app)), "the panel's refusal")
        assert sessions.filter_text == "state:idle"
        # Queues has no user: refused there too.
        await apply(pilot, app, "#queues-table", "user:ops")
        await settle(pilot, app, lambda: any("Queues: no field user here" in e for e in errors(app)), "Queues' refusal")
        assert app.query_one(QueuesPanel).filter_text == "" and len(queue_rows(app)) == 4
        # An empty filter clears it.
        await pilot.press("escape")
        await apply(pilot, app, "#sessions-table", "")
        await settle(pilot, app, lambda: sessions.filter_text == "" and 1011 in sessions.shown_pids, "cleared by an empty filter")


async def test_the_locks_tree_keeps_a_chain_whole_when_a_member_matches():
    app = sample_app(snapshots=[sample_snapshot()])
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, app, lambda: app.snapshot is not None, "first snapshot")
        locks = app.query_one(LocksPanel)
        await settle(pilot, app, lambda: locks._layout is not None and locks._layout.nodes, "the tree")
        whole = {n.key for n in locks._layout.nodes}
        waiter = next(b for b in app.snapshot.blocked if b.pid != 1000)
        # A waiter's application: the whole tree, root and all, as without a filter.
        await apply(pilot, app, "#locks-tree", f"pid:{waiter.pid}")
        await settle(pilot, app, lambda: locks.filter_text == f"pid:{waiter.pid}", "the filter applied")
        assert {n.key for n in locks._layout.nodes} == whole
        # Nobody in it: no tree.
        await apply(pilot, app, "#locks-tree", "app:nobody-here")
        await settle(pilot, app, lambda: not locks._layout.nodes, "the tree filtered out")
        # The root's own user (its session's, from the sample's sessions).
        await apply(pilot, app, "#locks-tree", "user:billing dur>100s")
        await settle(pilot, app, lambda: {n.key for n in locks._layout.nodes} == whole, "the root's chain back")


# -- the command line --------------------------------------------------------------------------


def test_a_bad_filter_on_the_command_line_is_one_line_and_exit_2(capsys, monkeypatch):
    opened = []
    monkeypatch.setattr(dashboard, "run_app", lambda app, **_kw: opened.append(app))
    for argv, says in ((["--filter", "dur>5x"], "queuetop: error: --filter: 'dur>5x': '5x' is not a duration"),
                       (["--filter", "verdict:blocked"], "queuetop: error: --filter: Sessions: no field verdict here"),
                       (["--min-duration", "-1"], "argument --min-duration: '-1' must be between 0 and 86,400")):
        assert main([*argv, "--dsn", "postgresql://nobody@127.0.0.1:1/nowhere"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(says if says.startswith("queuetop") else "queuetop: error: ") and says in err, err
        assert err.count("\n") == 1
    assert opened == []  # refused before the dashboard opened (and before connecting)


class Sleeper:
    """`SELECT pg_sleep(600)` on a session of its own, in a thread, under `application`."""

    def __init__(self, db, application: str, statement: str = "SELECT pg_sleep(600)") -> None:
        self.conn = db.connect(application_name=application, autocommit=True)
        self.pid = self.conn.info.backend_pid
        self.thread = threading.Thread(target=self._run, args=(statement,), daemon=True)
        self.thread.start()

    def _run(self, statement: str) -> None:
        try:
            self.conn.execute(statement)
        except psycopg.Error:  # cancelled or terminated: what the tests do to it
            pass

    def close(self, db) -> None:
        if self.thread.is_alive():
            with db.connect() as admin:
                admin.execute("SELECT pg_cancel_backend(%s)", (self.pid,))
        self.thread.join(30)
        self.conn.close()


def running(db, pid: int) -> bool:
    with db.connect() as conn:
        row = conn.execute("SELECT state FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
    return row is not None and row[0] == "active"


@pytest.mark.parametrize("size", SIZES)
async def test_filter_and_min_duration_from_the_command_line(db, size, monkeypatch):
    """`queuetop --filter app:qt-flt --min-duration 1` through the real entry point: the Sessions
    panel opens filtered (its border says so); a long query of that application is listed, an
    idle session of it (no duration) and another application's long query are not."""
    opened = []
    monkeypatch.setattr(dashboard, "run_app", lambda app, **_kw: opened.append(app))
    long_one, other = Sleeper(db, "qt-flt-long"), Sleeper(db, "qt-other-long")
    idle = db.connect(application_name="qt-flt-idle")
    idle.execute("SELECT 1")
    try:
        wait_until(lambda: running(db, long_one.pid) and running(db, other.pid), timeout=15, what="both sleeping")
        assert main(["--filter", "app:qt-flt", "--min-duration", "1", "--no-demo", "--read-only", "--dsn", db.dsn]) == 0
        (app,) = opened
        async with app.run_test(size=size) as pilot:
            sessions = app.query_one(SessionsPanel)
            assert sessions.filter_text == "app:qt-flt dur>=1s"
            await settle(pilot, app, lambda: long_one.pid in sessions.shown_pids, "the long query listed", 1000)
            assert other.pid not in sessions.shown_pids and idle.info.backend_pid not in sessions.shown_pids
            assert set(sessions.shown_pids) == {long_one.pid}
            await settle(pilot, app, lambda: border_filter(sessions) in filter_forms("app:qt-flt dur>=1s"),
                         "the border says the filter")
            # The other panels are not filtered by it.
            assert app.query_one(QueuesPanel).filter_text == "" and app.query_one(LocksPanel).filter_text == ""
            assert isinstance(app.query_one("#sessions-table"), DataTable)
    finally:
        long_one.close(db)
        other.close(db)
        idle.close()
