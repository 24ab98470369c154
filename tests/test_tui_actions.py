"""Actions on what is selected (issue 28, point 2): prompts default to the selected ring or lease,
the engine's actions that end something ask first, and an engine queue's dead letters are retried
or purged from Enter's details, confirmed. The truth is read from the database."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable, Input

from queues.control import EngineControls
from queues.table_queue import TableQueue
from tui.screens.dialogs import ConfirmScreen, PromptScreen
from tui.screens.queue_details import EngineQueueDetails
from tui.widgets.panels import LeasesPanel, QueuesPanel, RingsPanel

from .test_tui import live_app, queue_rows, sample_app, settle

SIZES = [(80, 24), (100, 30)]


async def put_cursor(pilot, app, table: DataTable, key: str) -> None:
    table.focus()

    def there() -> bool:
        if key not in [k.value for k in table.rows]:
            return False
        table.move_cursor(row=table.get_row_index(key))
        return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value == key

    await settle(pilot, app, there, f"the row {key}", 500)


@pytest.mark.parametrize("size", SIZES)
async def test_ring_and_lease_prompts_default_to_the_selected_row(size):
    app = sample_app(controls=object())
    async with app.run_test(size=size) as pilot:
        await settle(pilot, app, lambda: app.snapshot is not None, "a sample")
        await put_cursor(pilot, app, app.query_one(RingsPanel).query_one(DataTable), "metrics")
        await pilot.press(app.key_for("engine.ring.put"))
        assert isinstance(app.screen, PromptScreen)
        assert app.screen.query_one(Input).value.split()[0] == "metrics"  # not the first ring, audit
        await pilot.press("escape")
        await put_cursor(pilot, app, app.query_one(LeasesPanel).query_one(DataTable), "compactor")
        await pilot.press(app.key_for("engine.lease.release"))
        assert isinstance(app.screen, PromptScreen)
        assert app.screen.query_one(Input).value.split()[0] == "compactor"
        await pilot.press("escape")


@pytest.mark.parametrize("binding_id", ["relays.kill", "relays.stop", "scenario.stop"])
async def test_engine_actions_that_end_something_ask_first(binding_id):
    app = sample_app(controls=object())
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, lambda: app.snapshot is not None, "a sample")
        await pilot.press(app.key_for(f"engine.{binding_id}"))
        assert isinstance(app.screen, ConfirmScreen)
        assert app.screen.question.split()[0] in ("Kill", "Stop")
        await pilot.press("n")
        assert not isinstance(app.screen, ConfirmScreen)
        await settle(pilot, app, lambda: any(text.endswith("nothing done") for _a, _s, text in app.notices), "nothing done")


@pytest.mark.parametrize("size", SIZES)
async def test_dead_letters_are_retried_then_purged_from_the_details(db, size):
    with db.connect() as conn:
        queue = TableQueue.create(conn, "ui-dead")
        queue.enqueue_batch(conn, ['{"n": 1}', '{"n": 2}', '{"n": 3}'])
        for message in queue.claim(conn, visibility_s=30, batch=3):
            assert queue.dead_letter_claimed(conn, message, "boom")
    controls = EngineControls(db.target)
    app = live_app(db, controls=controls)

    def truth() -> tuple[int, int]:
        with db.connect() as conn:
            counts = queue.counts(conn)
            return counts.dead, counts.ready

    try:
        async with app.run_test(size=size) as pilot:
            await settle(pilot, app, lambda: queue_rows(app).get("reference:ui-dead", ("",) * 6)[5] == "3", "3 dead shown", 500)
            await put_cursor(pilot, app, app.query_one(QueuesPanel).query_one(DataTable), "reference:ui-dead")
            await pilot.press("enter")
            assert isinstance(app.screen, EngineQueueDetails)
            await pilot.press("r")
            assert isinstance(app.screen, ConfirmScreen) and "Retry the 3 dead letter(s) of queue 'ui-dead'" in app.screen.question
            await pilot.press("n")
            assert truth() == (3, 0)  # nothing done
            await pilot.press("r")
            await pilot.press("y")
            await settle(pilot, app, lambda: truth() == (0, 3), "the dead letters back in the queue", 500)
            assert isinstance(app.screen, EngineQueueDetails)  # the details stay open, reloaded
            # A purge, once more dead letters exist: confirmed, then gone for good.
            with db.connect() as conn:
                (message,) = queue.claim(conn, visibility_s=30)
                assert queue.dead_letter_claimed(conn, message, "boom again")
            await settle(pilot, app, lambda: queue_rows(app).get("reference:ui-dead", ("",) * 6)[5] == "1", "1 dead shown", 500)
            await pilot.press("d")
            assert isinstance(app.screen, ConfirmScreen) and "Purge the 1 dead letter(s)" in app.screen.question
            await pilot.press("y")
            await settle(pilot, app, lambda: truth() == (0, 2), "the dead letter purged", 500)
    finally:
        controls.stop_all()


async def test_under_read_only_the_details_offer_no_dead_letter_keys(db):
    with db.connect() as conn:
        queue = TableQueue.create(conn, "ui-dead-ro")
        queue.enqueue(conn, "{}")
        (message,) = queue.claim(conn, visibility_s=30)
        assert queue.dead_letter_claimed(conn, message, "boom")
    app = live_app(db, controls=EngineControls(db.target), read_only=True)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, app, lambda: "reference:ui-dead-ro" in queue_rows(app), "the queue", 500)
        await put_cursor(pilot, app, app.query_one(QueuesPanel).query_one(DataTable), "reference:ui-dead-ro")
        await pilot.press("enter")
        assert isinstance(app.screen, EngineQueueDetails)
        await pilot.press("d")
        assert not isinstance(app.screen, ConfirmScreen)
        with db.connect() as conn:
            assert queue.counts(conn).dead == 1
