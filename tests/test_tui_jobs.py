"""The Jobs screen (issue 46, point 1, in the dashboard): from a queue's details, `J` lists its jobs
by state, Enter shows one whole, `r` acts on the job under the cursor when the key was pressed
(whatever the list shows by the time the confirmation is answered), `R` on every job the filter
matches with the count in the question, and --read-only offers no action. At 80×24 and 100×30.
The truth is read back from the database."""

from __future__ import annotations

import json

import pytest
from textual.widgets import DataTable

from queues.table_queue import TableQueue
from tui.screens.details import DetailsScreen
from tui.screens.dialogs import ConfirmScreen
from tui.screens.jobs import JobsScreen
from tui.widgets.panels import QueuesPanel

from .test_jobs_cli import dead_letters
from .test_tui import live_app, queue_rows, settle
from .test_tui_actions import put_cursor

SIZES = [(80, 24), (100, 30)]


def truth(db, queue: TableQueue) -> tuple[int, int]:
    with db.connect() as conn:
        c = queue.counts(conn)
        return c.dead, c.ready


async def open_jobs(pilot, app, key: str) -> JobsScreen:
    await settle(pilot, app, lambda: key in queue_rows(app), f"the queue {key}", 500)
    await put_cursor(pilot, app, app.query_one(QueuesPanel).query_one(DataTable), key)
    await pilot.press("enter")
    assert isinstance(app.screen, DetailsScreen)
    assert app.screen.CLOSE_HINT.count("J jobs") == 1  # the box says the key, once
    await pilot.press("J")
    assert isinstance(app.screen, JobsScreen)
    return app.screen


def shown_ids(screen: JobsScreen) -> list[str]:
    return [job.id for job in screen.page_now.jobs] if screen.page_now is not None else []


@pytest.mark.parametrize("size", SIZES)
async def test_jobs_listed_shown_and_retried_one_then_all(db, size, monkeypatch, tmp_path):
    monkeypatch.setenv("QUEUETOP_AUDIT", str(tmp_path / "audit.jsonl"))
    queue = dead_letters(db, "ui-jobs", 4)
    app = live_app(db)
    async with app.run_test(size=size) as pilot:
        await settle(pilot, app, lambda: queue_rows(app).get("reference:ui-jobs", ("",) * 6)[5] == "4", "4 dead shown", 500)
        screen = await open_jobs(pilot, app, "reference:ui-jobs")
        await settle(pilot, app, lambda: len(shown_ids(screen)) == 4, "the 4 dead jobs listed", 500)
        assert screen.state == "dead"
        # Enter: the job whole, its error as the engine kept it.
        screen.query_one(DataTable).focus()
        await pilot.press("enter")
        assert isinstance(app.screen, DetailsScreen)
        await settle(pilot, app, lambda: app.screen.renderables is not None, "the job's details", 500)
        assert "boom" in str(app.screen.renderables[0])
        await pilot.press("escape")
        assert app.screen is screen
        # r on the first row; the list changes under the question; the job pressed on is the one acted on.
        first = shown_ids(screen)[0]
        await pilot.press("r")
        assert isinstance(app.screen, ConfirmScreen) and f"job {first}" in app.screen.question
        screen.newest = True  # the list reloads newest first meanwhile: another job is under the cursor now
        screen.load()
        await settle(pilot, app, lambda: shown_ids(screen) and shown_ids(screen)[0] != first, "the list reordered", 500)
        await pilot.press("y")
        await settle(pilot, app, lambda: truth(db, queue) == (3, 1), "one dead letter back in the queue", 500)
        await settle(pilot, app, lambda: first not in shown_ids(screen), "the list reloaded without it", 500)
        assert len(shown_ids(screen)) == 3
        # R: every dead job, the count in the question.
        await pilot.press("R")
        await settle(pilot, app, lambda: isinstance(app.screen, ConfirmScreen), "the bulk question", 500)
        assert "all 3 job(s)" in app.screen.question
        await pilot.press("y")
        await settle(pilot, app, lambda: truth(db, queue) == (0, 4), "every dead letter back in the queue", 500)
        await settle(pilot, app, lambda: any("3 changed" in text for _a, _s, text in app.notices), "the outcome noticed", 500)
        # P: the engine has no paused queue, and says so (no question asked).
        await pilot.press("P")
        assert app.screen is screen
        await settle(pilot, app, lambda: any("reference cannot pause a queue: " in text for _a, _s, text in app.notices),
                     "why not said", 500)
    records = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert sum(r["count"] for r in records if r["event"] == "batch") == 4


async def test_under_read_only_the_jobs_screen_offers_no_action(db):
    queue = dead_letters(db, "ui-jobs-ro", 2)
    app = live_app(db, read_only=True)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await open_jobs(pilot, app, "reference:ui-jobs-ro")
        await settle(pilot, app, lambda: len(shown_ids(screen)) == 2, "the dead jobs listed", 500)
        for key in ("r", "R", "d", "D", "c", "g"):
            await pilot.press(key)
            assert app.screen is screen, key
        assert truth(db, queue) == (2, 0)
        # States cycle; an empty state says so, never an error.
        await pilot.press("s")
        await settle(pilot, app, lambda: screen.state == "ready" and screen.page_now is not None and not screen.page_now.jobs,
                     "the ready state, empty", 500)


# -- the screen's picture (pytest-textual-snapshot): a fixed page, so the picture is the same each run --

class FixedPage:
    """The host backend's job methods answering one fixed page (the live tests above read real ones)."""

    def __init__(self) -> None:
        from datetime import UTC, datetime

        from jobs.model import Job, Page

        at = datetime(2026, 11, 29, 3, 12, 40, tzinfo=UTC)
        jobs = [Job(id=str(1041 + 7 * i), queue="emails", state="dead", status="discarded", kind="send_email", attempts=25,
                    max_attempts=25, created_at=at, scheduled_at=at, age_s=7380.0 + 60 * i,
                    last_error=["smtp: 550 mailbox unavailable", "smtp: timeout after 30 s", "dns: no MX for example.invalid"][i % 3],
                    args={"to": f"user{i}@example.com", "template": "welcome"}) for i in range(12)]
        self.page = Page(jobs=jobs, after=jobs[-1].id)

    def jobs_page(self, queue, flt, *, after, limit, newest_first):
        return self.page


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_jobs_screen(snap_compare, size):
    from jobs.resolve import queue_of

    from .test_tui import sample_app, sample_snapshot

    app = sample_app(snapshots=[sample_snapshot()])

    async def open_screen(pilot) -> None:
        counts = {"ready": 120, "delayed": 4, "blocked": 0, "in_flight": 8, "dead": 5230}
        screen = JobsScreen(FixedPage(), queue_of("river", "public", "emails"), counts=lambda: counts)
        app.push_screen(screen)
        await settle(pilot, app, lambda: screen.page_now is not None, "the page shown")

    assert snap_compare(app, terminal_size=size, run_before=open_screen)
