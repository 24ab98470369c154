"""Tags (issue 47, point 3): Space tags sessions in the Sessions panel; C and K then act on every
tagged one after one confirmation that lists them, each signalled by its identity (pid, backend
start) so that a pid another backend has now is refused for that one alone; the server proves
which sessions went. In the Jobs screen Space tags jobs, and r g c d act on exactly those. At
80x24 and 100x30, against a real PostgreSQL."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from textual.widgets import DataTable

from tui.screens.dialogs import ConfirmScreen
from tui.screens.jobs import JobsScreen
from tui.widgets.keyed_table import KeyedTable
from tui.widgets.panels import SessionsPanel
from tui.widgets.panels.sessions import TAG_MARK

from .conftest import wait_until
from .test_jobs_cli import dead_letters
from .test_tui import live_app, sample_app, settle
from .test_tui_filters import Sleeper, running
from .test_tui_jobs import open_jobs, shown_ids
from .test_tui_sessions import select

SIZES = [(80, 24), (100, 30)]


def alive(db, pid: int) -> bool:
    with db.connect() as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()[0] == 1


def said(app, words: str) -> list[str]:
    return [text for _at, _severity, text in app.notices if words in text]


def pid_cell(app, pid: int) -> str:
    return str(app.query_one(SessionsPanel).query_one(KeyedTable).full_rows()[str(pid)][0])


async def tag_sessions(pilot, app, listed, tagged) -> SessionsPanel:
    """Once every sleeper of `listed` is in the Sessions panel, Space on each of `tagged`."""
    panel = app.query_one(SessionsPanel)
    await settle(pilot, app, lambda: {s.pid for s in listed} <= set(panel.shown_pids), "the sleepers listed", 1000)
    for sleeper in tagged:
        await select(pilot, app, sleeper.pid)
        await pilot.press("space")
    return panel


@pytest.mark.parametrize("size", SIZES)
async def test_k_on_two_tagged_sessions_terminates_exactly_those(db, size):
    a, b, c = Sleeper(db, "qt-tag-a"), Sleeper(db, "qt-tag-b"), Sleeper(db, "qt-tag-c")
    try:
        wait_until(lambda: all(running(db, s.pid) for s in (a, b, c)), timeout=15, what="three sleepers")
        app = live_app(db)
        async with app.run_test(size=size) as pilot:
            panel = await tag_sessions(pilot, app, (a, b, c), (a, b))
            assert {pid for pid, _started in panel.tags} == {a.pid, b.pid}
            # Marked on their line (a mark, not a colour alone), counted in the border.
            await settle(pilot, app, lambda: pid_cell(app, a.pid) == f"{TAG_MARK}{a.pid}" and pid_cell(app, c.pid) == str(c.pid),
                         "the tagged marked")
            await settle(pilot, app, lambda: "2 tagged" in str(panel.border_subtitle) or "2*" in str(panel.border_subtitle),
                         "the count in the border")
            if "untags" in str(panel.border_subtitle):  # where it says which key untags, that key untags
                assert f"2 tagged ({app.key_for('sessions.untag')} untags)" in str(panel.border_subtitle)
            # Space again untags; Space once more tags it back.
            await select(pilot, app, b.pid)
            await pilot.press("space")
            assert {pid for pid, _s in panel.tags} == {a.pid}
            await pilot.press("space")
            # K (the cursor on b): one confirmation listing both, not c.
            await pilot.press(app.key_for("backend.terminate"))
            await settle(pilot, app, lambda: isinstance(app.screen, ConfirmScreen), "the confirmation")
            dialog = app.screen
            assert "2 tagged session(s)" in dialog.question
            assert [item.split()[0] for item in dialog.items] == [str(p) for p in sorted((a.pid, b.pid))]
            assert any("qt-tag-a" in item and "pg_sleep(600)" in item and "active" in item for item in dialog.items)
            await pilot.press("y")
            await settle(pilot, app, lambda: not alive(db, a.pid) and not alive(db, b.pid), "a and b terminated", 1000)
            assert alive(db, c.pid) and running(db, c.pid)  # c, untagged, lives and still runs
            await settle(pilot, app, lambda: said(app, "terminated 2 of 2 tagged session(s)"), "the summary", 500)
            assert said(app, f"terminated backend {a.pid}") and said(app, f"terminated backend {b.pid}")  # a line each
            assert panel.tags == {}  # acted on: the tags cleared
    finally:
        for sleeper in (a, b, c):
            sleeper.close(db)


async def test_a_tagged_pid_that_is_another_backends_now_is_refused_for_it_alone(db):
    """Two tagged sessions, one of which the dialog names by an identity that is no longer its
    pid's (the live backend's own pid with an older start, as a reused pid would be): that one is
    refused, said so, and lives; the other is terminated; one summary says both."""
    reused, plain = Sleeper(db, "qt-tag-reused"), Sleeper(db, "qt-tag-plain")
    try:
        wait_until(lambda: running(db, reused.pid) and running(db, plain.pid), timeout=15, what="two sleepers")
        app = live_app(db)
        async with app.run_test(size=(80, 24)) as pilot:
            panel = app.query_one(SessionsPanel)
            await settle(pilot, app, lambda: {reused.pid, plain.pid} <= set(panel.shown_pids), "both listed", 1000)
            sessions = {s.pid: s for s in app.snapshot.sessions}
            live = sessions[reused.pid]
            stale = replace(live, backend_start=live.backend_start.replace(year=live.backend_start.year - 1))
            app.host_actions.signal_tagged(True, [stale, sessions[plain.pid]])
            await settle(pilot, app, lambda: isinstance(app.screen, ConfirmScreen), "the confirmation")
            await pilot.press("y")
            await settle(pilot, app, lambda: said(app, "terminated 1 of 2 tagged session(s)"), "the summary", 1000)
            summary = said(app, "terminated 1 of 2 tagged session(s)")[0]
            assert "1 refused: another backend's pid now" in summary
            refusal = said(app, f"refused to terminate {reused.pid}")
            assert refusal and "another backend" in refusal[0] and "nothing done" in refusal[0]
            assert not alive(db, plain.pid)
            assert alive(db, reused.pid) and running(db, reused.pid)
    finally:
        reused.close(db)
        plain.close(db)


async def test_a_tagged_session_that_ends_is_untagged_and_said(db):
    gone, stays = Sleeper(db, "qt-tag-gone"), Sleeper(db, "qt-tag-stays")
    try:
        wait_until(lambda: running(db, gone.pid) and running(db, stays.pid), timeout=15, what="two sleepers")
        app = live_app(db)
        async with app.run_test(size=(100, 30)) as pilot:
            panel = await tag_sessions(pilot, app, (gone, stays), (gone, stays))
            assert len(panel.tags) == 2
            gone.close(db)  # it ends on its own
            await settle(pilot, app, lambda: {pid for pid, _s in panel.tags} == {stays.pid}, "the ended one untagged", 1000)
            assert said(app, f"tagged session {gone.pid} (qt-tag-gone) ended: untagged")
            await settle(pilot, app, lambda: "1 tagged" in str(panel.border_subtitle) or "1*" in str(panel.border_subtitle),
                         "the border's count")
            # T untags every session; the border says none.
            await pilot.press(app.key_for("sessions.untag"))
            assert panel.tags == {} and "tagged" not in str(panel.border_subtitle)
    finally:
        gone.close(db)
        stays.close(db)


async def test_under_read_only_tagged_sessions_are_not_signalled():
    app = sample_app(read_only=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, lambda: app.snapshot is not None, "first snapshot")
        panel = app.query_one(SessionsPanel)
        await settle(pilot, app, lambda: 1011 in panel.shown_pids, "the sessions listed")
        await select(pilot, app, 1011)
        await pilot.press("space")
        assert len(panel.tags) == 1
        await pilot.press("K")
        assert not isinstance(app.screen, ConfirmScreen)
        assert said(app, "terminate backends is disabled: queuetop runs with --read-only")
        # Space where no session is: said, nothing tagged.
        app.query_one("#queues-table").focus()
        await pilot.press("space")
        assert said(app, "Space tags a session in the Sessions panel") and len(panel.tags) == 1


# -- the Jobs screen ---------------------------------------------------------------------------------


def dead_ids(db, name: str) -> dict[str, int]:
    """The engine's own dead letters of queue `name`: job id (the Jobs screen's: `dead:ID`) -> its message's `n`."""
    with db.connect() as conn:
        rows = conn.execute("SELECT id, body FROM queuetop.dead_letters WHERE queue = %s", (name,)).fetchall()
    return {f"dead:{i}": _body(body)["n"] for i, body in rows}


def queued_ns(db, name: str) -> set[int]:
    with db.connect() as conn:
        table = conn.execute("SELECT table_name FROM queuetop.queues WHERE name = %s", (name,)).fetchone()[0]
        return {_body(body)["n"] for (body,) in conn.execute(f'SELECT body FROM queuetop."{table}"').fetchall()}


def _body(body) -> dict:
    return body if isinstance(body, dict) else json.loads(body)


@pytest.mark.parametrize("size", SIZES)
async def test_r_on_tagged_jobs_retries_exactly_those(db, size):
    dead_letters(db, "ui-tags", 4)
    before = dead_ids(db, "ui-tags")
    app = live_app(db)
    async with app.run_test(size=size) as pilot:
        screen = await open_jobs(pilot, app, "reference:ui-tags")
        await settle(pilot, app, lambda: len(shown_ids(screen)) == 4, "the 4 dead jobs listed", 500)
        table = screen.query_one(DataTable)
        table.focus()
        listed = shown_ids(screen)
        chosen = [listed[1], listed[3]]
        for job_id in chosen:
            table.move_cursor(row=listed.index(job_id))
            await pilot.press("space")
        assert set(screen.tags) == set(chosen)
        assert str(table.get_cell(chosen[0], "id")) == f"*{chosen[0]}" and str(table.get_cell(listed[0], "id")) == listed[0]
        id_column = next(c for c in table.ordered_columns if c.key.value == "id")
        assert id_column.content_width >= len(f"*{max(chosen, key=len)}")  # the marked id whole, not `*dead:`
        table.move_cursor(row=0)  # the cursor on an untagged job: the tags, not it, are acted on
        await pilot.press("r")
        await settle(pilot, app, lambda: isinstance(app.screen, ConfirmScreen), "one confirmation", 500)
        assert "2 tagged job(s)" in app.screen.question
        assert sorted(item.split()[0] for item in app.screen.items) == sorted(chosen)
        await pilot.press("y")
        await settle(pilot, app, lambda: set(dead_ids(db, "ui-tags")) == set(listed) - set(chosen), "exactly the two retried", 500)
        assert queued_ns(db, "ui-tags") == {before[j] for j in chosen}  # back in the queue: those two messages
        await settle(pilot, app, lambda: any("retry 2 of 2 tagged job(s)" in t for _a, _s, t in app.notices), "the outcome", 500)
        assert screen.tags == {}
        # A tagged job that changed since it was listed is left alone (compare-and-set on its state).
        await settle(pilot, app, lambda: len(shown_ids(screen)) == 2, "the list reloaded", 500)
        left = shown_ids(screen)[0]
        table.move_cursor(row=0)
        await pilot.press("space")
        with db.connect() as conn:  # someone else purges it meanwhile
            conn.execute("DELETE FROM queuetop.dead_letters WHERE id = %s", (int(left.removeprefix("dead:")),))
        await pilot.press("d")
        await settle(pilot, app, lambda: isinstance(app.screen, ConfirmScreen), "the delete's confirmation", 500)
        await pilot.press("y")
        await settle(pilot, app, lambda: any("delete 0 of 1 tagged job(s): 1 had changed" in t for _a, _s, t in app.notices),
                     "the skipped job said", 500)
        assert len(dead_ids(db, "ui-tags")) == 1
        assert isinstance(app.screen, JobsScreen)
