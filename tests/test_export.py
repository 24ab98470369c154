"""Copy and export (issue 47, point 4): `y` puts the selected session's whole query (or a row's
name, or the job under the cursor as JSON) on the clipboard through OSC 52; `e` writes the focused
table as CSV, every row it lists with the snapshot's values whole, mode 600, never through a link
and never half-written, the file named in a notice."""

from __future__ import annotations

import csv
import json
import os
import threading

import psycopg
import pytest
from textual.widgets import DataTable

from probes.jsonform import jsonable
from tui.dashboard.export import ENV_EXPORT_DIR, write_new_file
from tui.sample import sample_snapshot
from tui.screens.jobs import JobsScreen
from tui.widgets.keyed_table import KeyedTable
from tui.widgets.panels import (
    CompactionPanel,
    ConnectionsPanel,
    LeasesPanel,
    LocksPanel,
    QueuesPanel,
    RingsPanel,
    SessionsPanel,
)

from .test_tui import live_app, sample_app, settle
from .test_tui_jobs import FixedPage

SIZES = [(80, 24), (100, 30)]


def _said(app, start: str) -> str:
    found = [text for _at, _sev, text in app.notices if text.startswith(start)]
    assert found, [text for _a, _s, text in app.notices]
    return found[-1]


def _exported(app) -> tuple[str, list[dict[str, str]]]:
    said = _said(app, "exported ")
    path = said.split(" to ", 1)[1]
    with open(path, newline="", encoding="utf-8") as f:
        return path, list(csv.DictReader(f))


async def _export(pilot, app, panel_cls) -> tuple[str, list[dict[str, str]]]:
    before = len(app.notices)
    panel = app.query_one(panel_cls)
    target = panel.query_one(KeyedTable) if panel.query(KeyedTable) else panel.query_one("Tree")
    target.focus()
    await pilot.press("e")
    await settle(pilot, app, lambda: len(app.notices) > before, "the export's notice")
    return _exported(app)


# -- y: copy -----------------------------------------------------------------------------------

@pytest.mark.parametrize("size", SIZES)
async def test_y_copies_the_selected_sessions_whole_query(db, size):
    """A real session running a long query (wider than any column): y puts all of it on the
    clipboard, as pg_stat_activity has it, and the notice says whose and how long."""
    query = ("SELECT pg_sleep(60) /* nightly reconciliation of the ledger against the payment provider's settlement "
             "report, every account, every currency, with the adjustments of the last 30 days; " + "x" * 200 + " */")
    runner = psycopg.connect(db.dsn, autocommit=True, application_name="qt-export-long")
    pid = runner.info.backend_pid
    thread = threading.Thread(target=lambda: _run_until_cancelled(runner, query), daemon=True)
    thread.start()
    app = live_app(db)
    try:
        async with app.run_test(size=size) as pilot:
            panel = app.query_one(SessionsPanel)
            await settle(pilot, app, lambda: pid in panel.shown_pids, "the long query listed", 500)
            table = panel.query_one(KeyedTable)
            table.focus()
            table.move_cursor(row=table.get_row_index(str(pid)))
            await settle(pilot, app, lambda: panel.selected_pid == pid, "its row selected")
            sampled = next(s.query for s in app.snapshot.sessions if s.pid == pid)
            assert len(query) > 300 and sampled == query[:300]  # the sample keeps 300 characters: y reads the rest
            await pilot.press("y")
            await settle(pilot, app, lambda: app.clipboard == query, "the whole query, read from the server, copied", 500)
            said = _said(app, "copied ")
            assert said.startswith(f"copied pid {pid}'s query ({len(query):,} characters; OSC 52")
            # In the Queues panel: the queue's whole name.
            queues = app.query_one(QueuesPanel).query_one(KeyedTable)
            queues.focus()
            await settle(pilot, app, lambda: queues.cursor_key() is not None, "a queue selected")
            await pilot.press("y")
            _source, _, name = queues.cursor_key().partition(":")
            assert app.clipboard == name and _said(app, "copied ").startswith(f"copied the queue name {name!r}")
    finally:
        with psycopg.connect(db.dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_cancel_backend(%s)", (pid,))
        thread.join(30)
        runner.close()


def _run_until_cancelled(conn, query: str) -> None:
    try:
        conn.execute(query)
    except psycopg.errors.QueryCanceled:
        pass


async def test_y_in_the_locks_tree_copies_the_selected_sessions_query():
    snapshot = sample_snapshot()
    app = sample_app(snapshots=[snapshot])
    async with app.run_test(size=(100, 30)) as pilot:
        locks = app.query_one(LocksPanel)
        tree = locks.query_one("Tree")
        tree.focus()
        await settle(pilot, app, lambda: tree.root.children, "the tree")
        for _ in range(40):  # down to a session
            if locks.selected_pid is not None:
                break
            await pilot.press("down")
        pid = locks.selected_pid
        assert pid is not None
        await pilot.press("y")
        expected = next(s.query for s in snapshot.sessions if s.pid == pid)
        assert app.clipboard == expected and _said(app, "copied ").startswith(f"copied pid {pid}'s query")
        # A panel with nothing to copy says so, and copies nothing.
        app.copy_to_clipboard("before")
        app.query_one(CompactionPanel).query_one(KeyedTable).focus()
        await pilot.press("y")
        assert app.clipboard == "before" and "nothing here" in app.notices[-1][2]


# -- e: export -----------------------------------------------------------------------------------

@pytest.mark.parametrize("size", SIZES)
async def test_e_writes_the_sessions_listed_with_their_whole_values(tmp_path, monkeypatch, size):
    monkeypatch.setenv(ENV_EXPORT_DIR, str(tmp_path / "exports"))
    snapshot = sample_snapshot(sessions=60)
    app = sample_app(snapshots=[snapshot])
    async with app.run_test(size=size) as pilot:
        panel = app.query_one(SessionsPanel)
        await settle(pilot, app, lambda: panel.shown_pids, "the sessions listed")
        path, rows = await _export(pilot, app, SessionsPanel)
        assert os.path.dirname(path) == str(tmp_path / "exports")
        assert os.path.basename(path).startswith("queuetop-sessions-") and path.endswith(".csv")
        assert oct(os.stat(path).st_mode & 0o777) == "0o600"
        listed = {s.pid: s for s in snapshot.sessions if s.pid in set(panel.shown_pids)}
        assert [int(r["pid"]) for r in rows] == panel.shown_pids  # every row, in the panel's order
        assert len(rows) == len(listed) > 50
        for row in rows:
            s = listed[int(row["pid"])]
            assert row["query"] == s.query and row["application"] == s.application and row["state"] == (s.state or "")
            assert row["backend_start"] == jsonable(s.backend_start) and row["backend_start"].endswith("Z")
            assert row["xact_age_s"] == ("" if s.xact_age_s is None else repr(s.xact_age_s))  # a number, whole
            assert row["blocked_by"] == " ".join(map(str, s.blocked_by))
        # Idle sessions hidden (a): the export lists what the panel lists, no more.
        panel.query_one(KeyedTable).focus()
        await pilot.press("a")
        await settle(pilot, app, lambda: len(panel.shown_pids) < len(listed), "idle sessions hidden")
        _path, rows = await _export(pilot, app, SessionsPanel)
        assert [int(r["pid"]) for r in rows] == panel.shown_pids
        assert not any(r["state"] == "idle" for r in rows)


async def test_e_exports_every_panel_with_rows(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_EXPORT_DIR, str(tmp_path))
    snapshot = sample_snapshot()
    app = sample_app(snapshots=[snapshot])
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, app, lambda: app.snapshot is not None, "the sample")
        _p, rows = await _export(pilot, app, QueuesPanel)
        assert sorted(r["name"] for r in rows) == sorted(q.name for q in snapshot.queues)
        orders = next(r for r in rows if r["name"] == "orders")
        q = next(q for q in snapshot.queues if q.name == "orders")
        assert (int(orders["depth"]), orders["diagnosis.code"], orders["diagnosis.reason"]) == (q.depth, q.diagnosis.code,
                                                                                              q.diagnosis.reason)
        assert orders["last_vacuum_at"] == jsonable(q.last_vacuum_at)
        _p, rows = await _export(pilot, app, RingsPanel)
        assert [(r["name"], int(r["used"]), int(r["capacity"])) for r in rows] == [(r.name, r.used, r.capacity) for r in snapshot.rings]
        _p, rows = await _export(pilot, app, LeasesPanel)
        assert sorted((r["name"], r["holder"], r["expires_in_s"]) for r in rows) == sorted(
            (le.name, le.holder or "", "" if le.expires_in_s is None else repr(le.expires_in_s)) for le in snapshot.leases)
        _p, rows = await _export(pilot, app, ConnectionsPanel)
        c = snapshot.connections
        assert sorted((r["by"], r["name"], int(r["sessions"])) for r in rows) == sorted(
            [("state", k, v) for k, v in c.by_state.items()] + [("app", k, v) for k, v in c.by_application.items()])
        _p, rows = await _export(pilot, app, LocksPanel)
        roots = [r for r in rows if r["role"] == "root"]
        blocked = [r for r in rows if r["role"] == "blocked"]
        assert sorted(int(r["pid"]) for r in roots) == sorted(b.pid for b in snapshot.blockers)
        assert sorted(int(r["pid"]) for r in blocked) == sorted(b.pid for b in snapshot.blocked)
        one = snapshot.blocked[0]
        row = next(r for r in blocked if int(r["pid"]) == one.pid)
        assert (row["blocked_by"], row["mode"], row["relation"], row["query"], row["wait_s"]) == (
            " ".join(map(str, one.blocked_by)), one.mode, one.relation, one.query, repr(one.wait_s))
        # No export where the panel is a summary: said, nothing written.
        files = set(os.listdir(tmp_path))
        app.query_one(CompactionPanel).query_one(KeyedTable).focus()
        await pilot.press("e")
        assert "has no export" in app.notices[-1][2] and set(os.listdir(tmp_path)) == files


def test_an_export_never_replaces_a_file_nor_follows_a_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (tmp_path / "queuetop-x-1.csv").symlink_to(victim)  # a link where the export would go
    path = write_new_file(tmp_path, "queuetop-x-1", ".csv", b"a,b\r\n")
    assert path.name == "queuetop-x-1-2.csv" and path.read_bytes() == b"a,b\r\n"
    assert victim.read_text() == "precious\n"
    again = write_new_file(tmp_path, "queuetop-x-1", ".csv", b"c\r\n")
    assert again.name == "queuetop-x-1-3.csv" and path.read_bytes() == b"a,b\r\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left
    linked = tmp_path / "linked"
    linked.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (tmp_path / "elsewhere").mkdir()
    with pytest.raises(OSError):
        write_new_file(linked, "queuetop-x-1", ".csv", b"a\r\n")
    assert list((tmp_path / "elsewhere").iterdir()) == []


# -- the Jobs screen -------------------------------------------------------------------------------

async def test_y_and_e_in_the_jobs_screen(tmp_path, monkeypatch):
    from jobs.resolve import queue_of

    monkeypatch.setenv(ENV_EXPORT_DIR, str(tmp_path))
    app = sample_app(snapshots=[sample_snapshot()])
    backend = FixedPage()
    async with app.run_test(size=(100, 30)) as pilot:
        queue = queue_of("river", "public", "emails")
        screen = JobsScreen(backend, queue)
        app.push_screen(screen)
        await settle(pilot, app, lambda: screen.page_now is not None, "the page shown")
        table = screen.query_one(DataTable)
        table.focus()
        await pilot.press("down", "down")
        job = backend.page.jobs[2]
        await pilot.press("y")
        assert json.loads(app.clipboard) == {"queue": queue.shown, "source": queue.source, "job": job.to_json(whole=True)}
        assert _said(app, "copied ").startswith(f"copied job {job.id} as JSON")
        await pilot.press("e")
        path, rows = _exported(app)
        assert os.path.basename(path).startswith("queuetop-jobs-") and oct(os.stat(path).st_mode & 0o777) == "0o600"
        assert [r["id"] for r in rows] == [j.id for j in backend.page.jobs]
        assert rows[0]["created_at"] == backend.page.jobs[0].to_json()["created_at"] == "2026-11-29T03:12:40+00:00"
        assert json.loads(rows[1]["args"]) == backend.page.jobs[1].args and rows[1]["attempts"] == "25"
