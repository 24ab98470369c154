"""From a queue's verdict to what holds it up (issue 29, point 3): `v` on the Queues panel's
selected queue, or in its Enter details, puts the Locks cursor on a blocked queue's root blocker
and the Sessions cursor on a bloating queue's xmin holder, where C and K act on it (confirmed);
a holder with no session (a prepared transaction, a replication slot), another verdict, no
verdict, or a session gone since the sample: a notice that says why there is nothing to go to.
Built snapshots, and a real blocker on the embedded server, terminated from there."""

from __future__ import annotations

import dataclasses

import psycopg
import pytest
from textual.widgets import DataTable, Input, Tree
from textual.widgets._footer import FooterKey

from probes.model import Diagnosis, Snapshot
from probes.sources import QueueDetails
from queues.table_queue import TableQueue
from tui.dashboard.view import PanelsView
from tui.sample import sample_snapshot
from tui.screens.details import DetailsScreen
from tui.screens.dialogs import ConfirmScreen
from tui.widgets.panels import LocksPanel, QueuesPanel, SessionsPanel

from .test_conformance_probes import Waiter
from .test_tui import live_app, queue_rows, rendered_text, sample_app, settle
from .test_tui_actions import put_cursor

SIZES = [(80, 24), (100, 30)]
ORDERS = "table:orders"  # the sample's first queue: blocked by pid 1000 (idle in transaction, billing)


class FakeBackend:
    """A database behind the sample: details of nothing, and the signals it was asked to send."""

    def __init__(self) -> None:
        self.signalled: list[tuple[int, bool]] = []

    def queue_details(self, source: str, name: str) -> QueueDetails:
        return QueueDetails()

    def session_details(self, pid: int, started=None) -> dict:
        return {"session": None, "locks": []}

    def signal_backend(self, pid: int, terminate: bool, started=None) -> bool:
        self.signalled.append((pid, terminate))
        return True


def with_verdict(diagnosis: Diagnosis | None, *, snapshot: Snapshot | None = None, **changes) -> Snapshot:
    """The sample with its first queue (orders) judged `diagnosis`, and other fields changed."""
    snapshot = snapshot or sample_snapshot()
    queues = (dataclasses.replace(snapshot.queues[0], diagnosis=diagnosis), *snapshot.queues[1:])
    return dataclasses.replace(snapshot, queues=queues, **changes)


def notices(app) -> list[str]:
    return [text for _at, _severity, text in app.notices]


def focused_panel(app):
    return app.query_one(PanelsView).focused_panel()


def footer_labels(app) -> list[str]:
    return [str(key.description) for key in app.screen.query(FooterKey)]


async def started(pilot, app, select: str = ORDERS) -> None:
    await settle(pilot, app, lambda: app.snapshot is not None and select in queue_rows(app), "a sample")
    await put_cursor(pilot, app, app.query_one(QueuesPanel).query_one(DataTable), select)


async def notice_after_v(pilot, app, what: str) -> str:
    before = len(app.notices)
    await pilot.press("v")
    await settle(pilot, app, lambda: len(app.notices) > before, what)
    return notices(app)[-1]


# -- blocked: the Locks cursor on the root blocker ----------------------------------------------


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_v_on_a_blocked_queue_puts_the_locks_cursor_on_its_root_blocker(size):
    backend = FakeBackend()
    app = sample_app(snapshots=[sample_snapshot()], backend=backend)
    async with app.run_test(size=size) as pilot:
        await started(pilot, app)
        # The footer offers the key while the selected queue's verdict names a session...
        await settle(pilot, app, lambda: "Culprit" in footer_labels(app), "v in the footer")
        said = await notice_after_v(pilot, app, "the jump's notice")
        locks = app.query_one(LocksPanel)
        await settle(pilot, app, lambda: focused_panel(app) is locks, "the Locks panel focused")
        assert locks.selected_pid == 1000
        assert said == "'orders': root blocker 1000 selected (C cancels, K terminates)"
        # ... and C acts on it there, as it does: confirmed, with the session named.
        await pilot.press("K")
        assert isinstance(app.screen, ConfirmScreen) and "Backend 1000" in app.screen.question
        await pilot.press("y")
        await settle(pilot, app, lambda: backend.signalled == [(1000, True)], "the root blocker terminated")
        # Not on a queue whose verdict names no session: no `v` in the footer.
        await put_cursor(pilot, app, app.query_one(QueuesPanel).query_one(DataTable), "reference:queue-02")
        await settle(pilot, app, lambda: "Culprit" not in footer_labels(app) and "Details" in footer_labels(app),
                     "no v in the footer")


async def test_v_undoes_the_zoom_and_the_filter_that_hide_the_root_blocker():
    app = sample_app(snapshots=[sample_snapshot()])
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        # The Locks panel's filter hides the lock tree's root (billing, accounts).
        app.query_one(LocksPanel).query_one(Tree).focus()
        await pilot.press("slash")
        app.query_one("#filter", Input).value = "orders"
        await pilot.press("enter")
        locks = app.query_one(LocksPanel)
        await settle(pilot, app, lambda: locks.filter_text == "orders" and not locks.select_pid(1000), "the root filtered out")
        await put_cursor(pilot, app, app.query_one(QueuesPanel).query_one(DataTable), ORDERS)
        await pilot.press("z")
        assert app.screen.maximized is app.query_one(QueuesPanel)
        said = await notice_after_v(pilot, app, "the jump's notice")
        locks = app.query_one(LocksPanel)
        await settle(pilot, app, lambda: focused_panel(app) is locks and locks.selected_pid == 1000, "the root selected")
        assert app.screen.maximized is None and locks.filter_text == ""
        assert "the Locks filter cleared" in said


async def test_v_in_a_queues_details_closes_them_and_goes_to_the_root_blocker():
    app = sample_app(snapshots=[sample_snapshot()], backend=FakeBackend())
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        await pilot.press("enter")
        assert isinstance(app.screen, DetailsScreen)
        await settle(pilot, app, lambda: app.screen.renderables is not None, "the details loaded")
        text = rendered_text(app.screen.renderables[0])
        assert text.startswith("blocked") and "v: go to the root blocker" in text
        await pilot.press("v")
        locks = app.query_one(LocksPanel)
        await settle(pilot, app, lambda: not isinstance(app.screen, DetailsScreen) and focused_panel(app) is locks
                     and locks.selected_pid == 1000, "the details closed, the root selected")


async def test_a_prepared_transaction_at_the_root_is_named_with_how_to_end_it():
    gid = "billing-42'x"
    diagnosis = Diagnosis(code="blocked", reason=f"consumer 1001 waits for a lock held by prepared transaction {gid}",
                          pids=(1001,), objects=("accounts", f"prepared:{gid}"), since_s=5.0)
    app = sample_app(snapshots=[with_verdict(diagnosis)], backend=FakeBackend())
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        assert "Culprit" not in footer_labels(app)
        said = await notice_after_v(pilot, app, "the notice")
        assert "prepared transaction \"billing-42'x\"" in said and "ROLLBACK PREPARED 'billing-42''x'" in said
        assert focused_panel(app) is app.query_one(QueuesPanel)  # no jump
        # In the details too: the verdict says no key line, v says the same and the box stays.
        await pilot.press("enter")
        await settle(pilot, app, lambda: isinstance(app.screen, DetailsScreen) and app.screen.renderables is not None,
                     "the details loaded")
        assert "go to" not in rendered_text(app.screen.renderables[0])
        await notice_after_v(pilot, app, "the notice again")
        assert isinstance(app.screen, DetailsScreen)


async def test_a_root_blocker_gone_from_the_tree_is_said_not_jumped_to():
    # The verdict names pid 4242, whom the tree no longer shows (the sample's tree moved on).
    diagnosis = Diagnosis(code="blocked", reason="consumer 1001 waits for a lock held by pid 4242", pids=(4242, 1001))
    app = sample_app(snapshots=[with_verdict(diagnosis)])
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        said = await notice_after_v(pilot, app, "the notice")
        assert "4242 is no longer in the lock tree" in said and "nothing to go to" in said
        assert focused_panel(app) is app.query_one(QueuesPanel)


# -- bloat: the Sessions cursor on the xmin holder ----------------------------------------------


async def test_v_on_a_bloating_queue_puts_the_sessions_cursor_on_the_xmin_holder_and_k_ends_it():
    diagnosis = Diagnosis(code="bloat", reason="90,000 dead tuples (+40,000) kept by the xmin horizon: pid 1000",
                          pids=(1000,), objects=('"queuetop"."q_orders"',))
    backend = FakeBackend()
    app = sample_app(snapshots=[with_verdict(diagnosis)], backend=backend)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        await settle(pilot, app, lambda: "Culprit" in footer_labels(app), "v in the footer")
        said = await notice_after_v(pilot, app, "the jump's notice")
        sessions = app.query_one(SessionsPanel)
        await settle(pilot, app, lambda: focused_panel(app) is sessions and sessions.selected_pid == 1000, "the holder selected")
        assert said == "'orders': xmin holder 1000 selected (C cancels, K terminates)"
        await pilot.press("C")  # idle in transaction: cancel cannot end it, terminate is offered
        assert isinstance(app.screen, ConfirmScreen) and "Backend 1000" in app.screen.question
        assert "cannot end it" in app.screen.question
        await pilot.press("y")
        await settle(pilot, app, lambda: backend.signalled == [(1000, True)], "the holder terminated")


async def test_the_details_of_a_bloating_queue_say_v_goes_to_the_xmin_holder():
    diagnosis = Diagnosis(code="bloat", reason="dead tuples kept by the xmin horizon: pid 1000", pids=(1000,))
    app = sample_app(snapshots=[with_verdict(diagnosis)], backend=FakeBackend())
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        await pilot.press("enter")
        await settle(pilot, app, lambda: isinstance(app.screen, DetailsScreen) and app.screen.renderables is not None,
                     "the details loaded")
        assert "v: go to the xmin holder" in rendered_text(app.screen.renderables[0])
        await pilot.press("v")
        sessions = app.query_one(SessionsPanel)
        await settle(pilot, app, lambda: focused_panel(app) is sessions and sessions.selected_pid == 1000, "the holder selected")


@pytest.mark.parametrize(("kind", "name", "expected"), [
    ("prepared", "nightly-7", "ROLLBACK PREPARED 'nightly-7'"),
    ("slot", "standby1", "pg_drop_replication_slot('standby1')"),
    ("standby", "replica-2", "set hot_standby_feedback off there"),
])
async def test_a_horizon_held_by_no_session_is_named_with_what_ends_it(kind, name, expected):
    base = sample_snapshot()
    connections = dataclasses.replace(base.connections, xmin_holder_pid=None, xmin_holder_kind=kind, xmin_holder_name=name)
    diagnosis = Diagnosis(code="bloat", reason=f"dead tuples kept by the xmin horizon: {kind} {name}",
                          objects=('"queuetop"."q_orders"', f"{kind}:{name}"))
    app = sample_app(snapshots=[with_verdict(diagnosis, snapshot=base, connections=connections)])
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        said = await notice_after_v(pilot, app, "the notice")
        assert repr(name) in said and expected in said
        assert focused_panel(app) is app.query_one(QueuesPanel)


async def test_an_xmin_holder_not_in_the_sessions_list_is_said_not_jumped_to():
    diagnosis = Diagnosis(code="bloat", reason="dead tuples kept by the xmin horizon: pid 4343", pids=(4343,))
    app = sample_app(snapshots=[with_verdict(diagnosis)])
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        said = await notice_after_v(pilot, app, "the notice")
        assert "xmin holder 4343 is no longer in the sessions" in said
        assert focused_panel(app) is app.query_one(QueuesPanel)


async def test_v_on_a_queue_whose_xmin_holder_waits_goes_to_the_root_blocker_behind_it():
    """The xmin holder (1001) is itself blocked by 1000: the verdict names the root first, and v
    puts the Locks cursor on it, not on the victim."""
    diagnosis = Diagnosis(code="bloat", reason="dead tuples kept by the xmin horizon: pid 1001, itself waiting for a lock "
                          "held by pid 1000", pids=(1000, 1001))
    snapshot = with_verdict(diagnosis)
    assert any(b.pid == 1001 and 1000 in b.root_blockers for b in snapshot.blocked)
    app = sample_app(snapshots=[snapshot], backend=FakeBackend())
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        said = await notice_after_v(pilot, app, "the jump's notice")
        locks = app.query_one(LocksPanel)
        await settle(pilot, app, lambda: focused_panel(app) is locks and locks.selected_pid == 1000, "the root selected")
        assert "root blocker 1000 selected: it holds up 1001, the xmin holder" in said


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_a_queue_whose_table_is_locked_shows_its_figures_unknown_its_verdict_blocked_and_v_goes_to_the_locker(size):
    """Its figures could not be read (the table is locked ACCESS EXCLUSIVE): unknown, and the
    verdict from the locks beside them. The locker blocks no session yet (it is not in the lock
    tree): v puts the Sessions cursor on it."""
    base = sample_snapshot()
    locker = next(s for s in base.sessions if s.application == "web")
    assert locker.pid not in {b.pid for b in base.blockers} | {b.pid for b in base.blocked}
    unread = dataclasses.replace(base.queues[0], depth=None, ready=None, in_flight=None, delayed=None, dead=None,
                                 oldest_ready_age_s=None, enqueued_per_s=None, dequeued_per_s=None,
                                 error="skipped: lock timeout (100 ms), the table is locked by another session")
    diagnosis = Diagnosis(code="blocked", reason=f"its table is locked by pid {locker.pid}, idle in transaction, holding "
                          "ACCESS EXCLUSIVE on orders", pids=(locker.pid,), objects=("orders",))
    snapshot = dataclasses.replace(base, queues=(dataclasses.replace(unread, diagnosis=diagnosis), *base.queues[1:]))
    app = sample_app(snapshots=[snapshot], backend=FakeBackend())
    async with app.run_test(size=size) as pilot:
        await started(pilot, app)
        row = queue_rows(app)[ORDERS]
        assert str(row[1]) == "unknown" and str(row[-1]) == "blocked", row
        table = app.query_one(QueuesPanel).query_one(DataTable)
        assert "Verdict" in [str(c.label) for c in table.columns.values()]  # on screen at this size too
        said = await notice_after_v(pilot, app, "the jump's notice")
        sessions = app.query_one(SessionsPanel)
        await settle(pilot, app, lambda: focused_panel(app) is sessions and sessions.selected_pid == locker.pid,
                     "the locker selected")
        assert f"session {locker.pid}, which holds its table locked, selected" in said


async def test_a_queue_not_judged_reads_unknown_in_its_verdict_never_ok():
    diagnosis = Diagnosis(code="not-judged", reason="one sample: rates and growth need two")
    app = sample_app(snapshots=[with_verdict(diagnosis)])
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        assert str(queue_rows(app)[ORDERS][-1]) == "unknown"


# -- any other verdict, or none: a notice ----------------------------------------------------------


@pytest.mark.parametrize(("diagnosis", "expected"), [
    (Diagnosis(code="healthy", reason="keeping up"), "is ok: it keeps up; nothing to go to"),
    (Diagnosis(code="no-consumers", reason="3 ready and no session works its table"), "has nobody on it: nobody works its table"),
    (Diagnosis(code="starved", reason="starved: 4 clients waiting in pool app/postgres for 40 s"),
     "is starved: its consumers wait in the PgBouncer pool"),
    (Diagnosis(code="failing", reason="5 went dead"), "is failing"),
    (Diagnosis(code="saturated", reason="backlog grows"), "is behind"),
    (Diagnosis(code="bloat", reason="over autovacuum's threshold"), "autovacuum behind"),
    (Diagnosis(code="not-judged", reason="one sample: rates and growth need two"),
     "is unknown: not judged (one sample: rates and growth need two)"),
    (None, "has no verdict"),
], ids=["healthy", "no-consumers", "starved", "failing", "saturated", "autovacuum", "not-judged", "none"])
async def test_a_verdict_that_names_no_session_says_there_is_nothing_to_go_to(diagnosis, expected):
    app = sample_app(snapshots=[with_verdict(diagnosis)])
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        assert "Culprit" not in footer_labels(app)
        said = await notice_after_v(pilot, app, "the notice")
        assert "'orders'" in said and expected in said, said
        assert focused_panel(app) is app.query_one(QueuesPanel)


async def test_the_help_lists_v():
    app = sample_app(snapshots=[sample_snapshot()])
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app, "reference:queue-02")  # a healthy queue: v is not in the footer, but in the help
        await pilot.press("question_mark")
        keys = {binding_id: (key, text) for key, text, binding_id in app.screen._keys}
        assert keys["verdict.goto"][0] == "v" and "root blocker" in keys["verdict.goto"][1]


# -- on the embedded server: a real blocker, terminated from its queue's verdict ------------------


@pytest.mark.parametrize("engine_db", ["postgresql"], indirect=True)
async def test_v_on_a_really_blocked_queue_lands_on_pg_blocking_pids_and_k_ends_it(engine_db):
    with engine_db.connect() as conn:
        queue = TableQueue.create(conn, "stuck-ui")
        queue.enqueue(conn, '{"n": 1}')
    # A session locks the queue's table and idles in its transaction; a consumer's claim waits.
    blocker = psycopg.connect(engine_db.dsn, autocommit=False, application_name="qt-verdict-blocker")
    admin = psycopg.connect(engine_db.dsn, autocommit=True)
    try:
        blocker.execute(queue.statement_for(blocker, "block_table"))
        blocker_pid = blocker.info.backend_pid
        waiter = Waiter(engine_db, lambda s: queue.claim(s, visibility_s=30))
        app = live_app(engine_db)
        async with app.run_test(size=(80, 24)) as pilot:

            def verdict() -> str | None:
                q = next((q for q in (app.snapshot.queues if app.snapshot else ()) if q.name == "stuck-ui"), None)
                return q.diagnosis.code if q is not None and q.diagnosis is not None else None

            await settle(pilot, app, lambda: verdict() == "blocked", "the queue judged blocked", 1000)
            await put_cursor(pilot, app, app.query_one(QueuesPanel).query_one(DataTable), "reference:stuck-ui")
            # Who blocks the consumer, in the server's own words.
            waiting = [c.pid for q in app.snapshot.queues if q.name == "stuck-ui" for c in q.consumers or () if c.waiting]
            assert waiting
            blocking = admin.execute("SELECT pg_blocking_pids(%s)", (waiting[0],)).fetchone()[0]
            assert list(blocking) == [blocker_pid]
            await pilot.press("v")
            locks = app.query_one(LocksPanel)
            await settle(pilot, app, lambda: focused_panel(app) is locks and locks.selected_pid == blocker_pid,
                         "the real blocker selected", 500)
            await pilot.press("C")  # idle in transaction: cancel cannot end it, and says so; terminate is offered
            assert isinstance(app.screen, ConfirmScreen) and "cannot end it" in app.screen.question
            await pilot.press("n")
            assert locks.selected_pid == blocker_pid
            await pilot.press("K")
            assert isinstance(app.screen, ConfirmScreen) and f"Backend {blocker_pid}" in app.screen.question
            await pilot.press("y")

            def gone() -> bool:
                return admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (blocker_pid,)).fetchone()[0] == 0

            await settle(pilot, app, gone, "the blocker terminated", 500)
            waiter.finish()  # the consumer took its message once the blocker was gone
    finally:
        blocker.close()
        admin.close()
