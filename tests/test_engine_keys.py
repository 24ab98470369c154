"""The dashboard's engine keys check the engine's schema when pressed (issue 43, point 9): a
dashboard started with --engine before `queuetop engine init` drives the engine after it; and
where --engine is what is missing, their advice says so. Driven through Pilot on a real database."""

from __future__ import annotations

from textual.widgets import Input

from dbcore.dialect import open_session
from probes.config import Config
from queues import schema
from queues.table_queue import TableQueue
from tui.app import ENGINE_OFF, single_host
from tui.dashboard import QueuetopApp
from tui.screens.dialogs import PromptScreen

from .test_tui import settle


def drop_schema(db) -> None:
    with db.connect() as conn:
        conn.execute("DROP SCHEMA queuetop CASCADE")


def notices(app) -> list[str]:
    return [text for _at, _severity, text in app.notices]


async def test_an_engine_key_pressed_after_engine_init_works(db):
    drop_schema(db)
    host = single_host("", db.target, Config(), 0.3, engine=True)  # queuetop --engine --dsn ...
    assert host.controls is None and host.prepare is not None
    assert "the queuetop schema is not installed" in host.controls_off and "queuetop engine init" in host.controls_off
    app = QueuetopApp(hosts=[host])
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, app, lambda: app.snapshot is not None, "a sample", 1000)
        await pilot.press(app.key_for("engine.burst"))
        await settle(pilot, app, lambda: any("queuetop engine init" in text for text in notices(app)), "the no-schema notice", 500)
        assert "not installed" in notices(app)[-1] and "--engine" not in notices(app)[-1]  # --engine was given
        assert not isinstance(app.screen, PromptScreen)
        # `queuetop engine init` meanwhile, from elsewhere; and a queue made.
        with open_session(db.target, application_name="queuetop-tests") as session:
            schema.install(session)
        with db.connect() as conn:
            queue = TableQueue.create(conn, "later")
        await pilot.press(app.key_for("engine.burst"))
        await settle(pilot, app, lambda: isinstance(app.screen, PromptScreen), "the burst prompt", 500)
        app.screen.query_one(Input).value = "later 250"
        await pilot.press("enter")
        with db.connect() as conn:
            def enqueued() -> bool:
                return conn.execute(f"SELECT count(*) FROM queuetop.{queue.table_name}").fetchone()[0] == 250

            await settle(pilot, app, enqueued, "250 messages in the queue's table", 1000)
        assert app.host.controls is not None  # on for good now: the footer shows the engine keys


async def test_without_engine_the_keys_say_to_start_with_it(db):
    with_schema = single_host("", db.target, Config(), 0.3)  # queuetop --dsn ... (not the embedded server)
    assert with_schema.controls is None and with_schema.prepare is None and with_schema.controls_off == ENGINE_OFF
    drop_schema(db)
    host = single_host("", db.target, Config(), 0.3)
    assert host.controls is None and host.prepare is None
    # Both missing: --engine first, and the schema.
    assert host.controls_off.startswith("engine controls are off on this database: start queuetop with --engine")
    assert "the queuetop schema is not installed" in host.controls_off and "queuetop engine init" in host.controls_off
    app = QueuetopApp(hosts=[host])
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, app, lambda: app.snapshot is not None, "a sample", 1000)
        await pilot.press(app.key_for("engine.burst"))
        await settle(pilot, app, lambda: any("start queuetop with --engine" in text for text in notices(app)),
                     "the engine-off notice", 500)
        assert not isinstance(app.screen, PromptScreen)
        # Installing the schema does not turn them on without --engine: they write to this database.
        with open_session(db.target, application_name="queuetop-tests") as session:
            schema.install(session)
        await pilot.press(app.key_for("engine.burst"))
        await settle(pilot, app, lambda: sum("--engine" in text for text in notices(app)) == 2, "the notice again", 500)
        assert not isinstance(app.screen, PromptScreen) and app.host.controls is None
