"""The reference engine's job console (jobs/reference.py), proved by the engine itself afterwards:
its own worker pools (queues.worker.WorkerPool) make the dead letters and the backing-off
messages, claim and hold messages, and then process what the console retried or ran now (woken by
the NOTIFY an enqueue sends: their poll interval is a minute); the engine's own claim finds no
deleted message, and its own retry_dead_letters no deleted dead letter."""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg
import pytest
from psycopg.rows import dict_row

from jobs.bulk import act_on_ids, run_bulk
from jobs.model import SCAN_ROWS, ActionRefused, JobFilter
from jobs.reference import ReferenceJobs
from jobs.registry import library_for
from probes.sampler import run_cycle
from probes.session import open_probe_connection, probe_transaction
from queues.table_queue import TableQueue
from queues.worker import WorkerPool, WorkOptions

from .conftest import wait_until

pytestmark = pytest.mark.matrix  # the server matrix runs these on every supported major

QUEUE = "jobs"


class Recorder:
    """A handler: records each body it sees; fails those whose "fail" is in `failing`."""

    def __init__(self, failing: tuple[str, ...] = ()) -> None:
        self.failing = failing
        self.bodies: list[dict] = []
        self.lock = threading.Lock()

    def __call__(self, message) -> None:
        body = json.loads(message.body)
        with self.lock:
            self.bodies.append(body)
        if body.get("fail") in self.failing:
            raise RuntimeError(f"cannot {body['fail']}")

    def names(self) -> list[str]:
        with self.lock:
            return [b["name"] for b in self.bodies]


@contextmanager
def running(pool: WorkerPool):
    pool.start()
    try:
        yield pool
    finally:
        pool.stop()
        pool.join(10)


def listening(db) -> bool:
    """The pool's listener has run its LISTEN (a NOTIFY before it would be missed)."""
    with db.connect() as conn:
        return bool(conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'queuetop-listen:%' "
                                 "AND query LIKE 'LISTEN queuetop_enqueue%'").fetchone()[0])


def enqueue(db, *bodies: dict) -> None:
    with db.connect() as conn:
        TableQueue.create(conn, QUEUE).enqueue_batch(conn, [json.dumps(b) for b in bodies])


@dataclass
class Engine:
    """The queue `jobs` in every state the engine has: 3 dead letters (failed once with
    max_attempts 1), 2 backing off (failed, retry in 10 minutes), 1 claimed (claim mode, visibility
    10 minutes), 1 held (a hold-transaction worker's transaction, open), 2 ready."""

    held: psycopg.Connection
    claim_token: int

    def close(self) -> None:
        self.held.rollback()
        self.held.close()


@pytest.fixture
def engine(db):
    enqueue(db, *({"name": f"die{n}", "fail": "die"} for n in range(3)))
    dead = WorkerPool(db.target, QUEUE, Recorder(("die",)), WorkOptions(max_attempts=1, until_empty=True)).run()
    assert dead.dead == 3
    enqueue(db, {"name": "later0", "fail": "later"}, {"name": "later1", "fail": "later"})
    pool = WorkerPool(db.target, QUEUE, Recorder(("later",)), WorkOptions(max_attempts=5, retry_delay_s=600, poll_interval_s=60))
    with running(pool):
        wait_until(lambda: pool.summary.retried == 2, what="two messages backing off")
    enqueue(db, *({"name": f"ok{n}"} for n in range(4)))
    with db.connect() as conn:
        queue = TableQueue.open(conn, QUEUE)
        [claimed] = queue.claim(conn, visibility_s=600)  # the engine's claim: ok0
        held = db.connect(autocommit=False, application_name="queuetop-work:hold-transaction:jobs")
        [taken] = queue.take_held(held.cursor())  # a hold-transaction worker's take of ok1, its transaction open
    assert (json.loads(claimed.body)["name"], json.loads(taken.body)["name"]) == ("ok0", "ok1")
    state = Engine(held=held, claim_token=claimed.claim_token)
    yield state
    state.close()


def lib() -> ReferenceJobs:
    return ReferenceJobs("queuetop")


def read(db, flt: JobFilter, **kw):
    with open_probe_connection(db.target) as conn, probe_transaction(conn):
        return lib().page(conn, QUEUE, flt, **kw)


def read_all(db, flt: JobFilter, *, limit: int = 2, newest_first: bool = False) -> list[str]:
    ids: list[str] = []
    after = None
    for _ in range(1000):
        page = read(db, flt, after=after, limit=limit, newest_first=newest_first)
        ids += [job.id for job in page.jobs]
        if page.after is None:
            return ids
        after = page.after
    raise AssertionError("paging did not end")


def names(db, flt: JobFilter) -> list[str]:
    return [job.args["name"] for job in read(db, flt, limit=100).jobs]


def act(db, action: str, ids, expect=None) -> list[str]:
    """The console's action on these ids (jobs/bulk.py: one short compare-and-set transaction)."""
    outcome = act_on_ids(db.target, lib(), QUEUE, action, list(ids), expect=expect)
    assert outcome.changed + outcome.skipped == outcome.matched == len(ids)
    return outcome.ids


def ground(db) -> dict[str, list[str]]:
    """Every message's and dead letter's state, read from the engine's tables (held: the row's
    deleter is a transaction still running)."""
    with db.connect() as conn:
        table = TableQueue.open(conn, QUEUE).qualified_name
        rows = conn.execute(
            "SELECT id, CASE WHEN claim_token IS NOT NULL AND visible_at > now() THEN 'in_flight' "
            "WHEN visible_at > now() THEN 'delayed' "
            "WHEN xmax::text::bigint IN (SELECT backend_xid::text::bigint FROM pg_stat_activity "
            "WHERE backend_xid IS NOT NULL) THEN 'in_flight' ELSE 'ready' END FROM " + table + " ORDER BY id").fetchall()
        dead = conn.execute("SELECT id FROM queuetop.dead_letters WHERE queue = %s ORDER BY id", (QUEUE,)).fetchall()
    out: dict[str, list[str]] = {"ready": [], "delayed": [], "in_flight": [], "dead": [f"dead:{d[0]}" for d in dead]}
    for job_id, state in rows:
        out[state].append(str(job_id))
    return out


def test_the_registry_serves_the_engine():
    assert library_for("reference") is ReferenceJobs


def test_each_states_list_agrees_with_the_engines_tables_and_the_snapshot(db, engine):
    truth = ground(db)
    assert {state: len(ids) for state, ids in truth.items()} == {"ready": 2, "delayed": 2, "in_flight": 2, "dead": 3}
    [figures] = [q for q in run_cycle(db.target).queues if q.source == "reference" and q.name == QUEUE]
    for state, ids in truth.items():
        assert read_all(db, JobFilter(state=state)) == ids, state
        assert getattr(figures, state) == len(ids), state
    everything = truth["ready"] + truth["delayed"] + truth["in_flight"]
    assert read_all(db, JobFilter(), limit=3) == sorted(everything, key=int) + truth["dead"]
    assert read_all(db, JobFilter(), limit=2, newest_first=True) == truth["dead"][::-1] + sorted(everything, key=int)[::-1]
    assert names(db, JobFilter(state="in_flight")) == ["ok0", "ok1"]
    assert names(db, JobFilter(state="delayed")) == ["later0", "later1"]
    for state in ("blocked", "done"):  # nothing the engine has
        page = read(db, JobFilter(state=state))
        assert page.jobs == [] and page.after is None and page.note.startswith("the engine")


def test_a_page_says_each_messages_state_and_last_error(db, engine):
    [held, claimed] = sorted(read(db, JobFilter(state="in_flight")).jobs, key=lambda j: j.args["name"], reverse=True)
    assert (claimed.status, held.status) == ("claimed", "held")
    later = read(db, JobFilter(state="delayed")).jobs[0]
    assert (later.status, later.attempts, later.last_error) == ("backing off", 1, "RuntimeError: cannot later")
    assert later.scheduled_at is not None and later.max_attempts is None and later.kind is None
    dead = read(db, JobFilter(state="dead")).jobs[0]
    assert (dead.status, dead.attempts, dead.last_error, dead.args["name"]) == ("dead letter", 1, "RuntimeError: cannot die", "die0")


def test_job_gives_the_last_error_and_who_holds_it(db, engine):
    truth = ground(db)
    claimed_id, held_id = truth["in_flight"]
    with open_probe_connection(db.target) as conn, probe_transaction(conn):
        claimed = lib().job(conn, QUEUE, claimed_id)
        held = lib().job(conn, QUEUE, held_id)
        dead = lib().job(conn, QUEUE, truth["dead"][0])
        assert lib().job(conn, QUEUE, "999999") is None and lib().job(conn, QUEUE, "dead:999999") is None
    assert claimed.held_by == f"claim token {engine.claim_token}"
    pid = engine.held.info.backend_pid
    assert held.held_by == f"queuetop-work:hold-transaction:jobs (pid {pid})"
    assert dead.errors == ["RuntimeError: cannot die"] and dead.extra["message_id"] > 0 and dead.extra["died_at"]


def test_retried_dead_letters_are_processed_by_a_waiting_worker_woken_at_once(db, engine):
    recorder = Recorder()
    pool = WorkerPool(db.target, QUEUE, recorder, WorkOptions(poll_interval_s=60))  # it polls once a minute
    with running(pool):
        wait_until(lambda: sorted(recorder.names()) == ["ok2", "ok3"] and listening(db), what="the ready messages processed")
        dead = ground(db)["dead"]
        assert act(db, "retry", dead[:2], expect="dead") == dead[:2]
        # Woken by the enqueue's NOTIFY, far sooner than its poll.
        wait_until(lambda: len(recorder.names()) == 4, timeout=10, what="the retried dead letters processed")
    assert sorted(recorder.names()[2:]) == ["die0", "die1"]
    assert ground(db)["dead"] == dead[2:]  # left the dead letters, the third stays


def test_retry_makes_new_messages_with_attempts_zero_in_one_transaction(db, engine):
    dead = ground(db)["dead"]
    with psycopg.connect(db.dsn, autocommit=True, row_factory=dict_row) as conn:
        with conn.transaction(force_rollback=True):  # rolled back: nothing moved
            assert lib().act(conn, QUEUE, "retry", dead, "dead") == dead
        assert ground(db)["dead"] == dead
        with db.connect() as listener:
            listener.execute("LISTEN queuetop_enqueue")
            with conn.transaction():
                assert lib().act(conn, QUEUE, "retry", dead, "dead") == dead
            [note] = listener.notifies(timeout=5, stop_after=1)
        assert (note.channel, note.payload) == ("queuetop_enqueue", QUEUE)
    after = ground(db)
    assert after["dead"] == [] and len(after["ready"]) == 5
    page = read(db, JobFilter(state="ready"))
    assert [(j.args["name"], j.attempts, j.last_error) for j in page.jobs[-3:]] == [("die0", 0, None), ("die1", 0, None),
                                                                                   ("die2", 0, None)]


def test_run_now_makes_a_backing_off_message_processed_now(db, engine):
    recorder = Recorder()
    pool = WorkerPool(db.target, QUEUE, recorder, WorkOptions(poll_interval_s=60))
    with running(pool):
        wait_until(lambda: sorted(recorder.names()) == ["ok2", "ok3"] and listening(db), what="the ready messages processed")
        later = ground(db)["delayed"]
        assert act(db, "run-now", later[:1], expect="delayed") == later[:1]
        wait_until(lambda: len(recorder.names()) == 3, timeout=10, what="the message run now")
    assert recorder.names()[2] == "later0" and ground(db)["delayed"] == later[1:]


def test_delete_removes_waiting_messages_and_dead_letters_never_a_claimed_or_held_one(db, engine):
    truth = ground(db)
    targets = truth["ready"][:1] + truth["in_flight"] + truth["dead"][:1]
    assert act(db, "delete", targets) == truth["dead"][:1] + truth["ready"][:1]
    with db.connect() as conn:
        queue = TableQueue.open(conn, QUEUE)
        # The engine's own claim finds only the ready message left.
        assert [json.loads(m.body)["name"] for m in queue.claim(conn, visibility_s=60, batch=10)] == ["ok3"]
        # The engine's own retry of dead letters moves the two left.
        assert queue.retry_dead_letters(conn) == 2
    assert ground(db)["in_flight"][:2] == truth["in_flight"]


def test_an_action_only_changes_messages_still_in_the_state_they_were_listed_in(db, engine):
    listed = [j.id for j in read(db, JobFilter(state="delayed")).jobs]
    with db.connect() as conn:  # meanwhile its back-off ended (release_for_retry with no delay)
        table = TableQueue.open(conn, QUEUE).qualified_name
        conn.execute("UPDATE " + table + " SET visible_at = NULL WHERE id = %s", (int(listed[0]),))
    outcome = act_on_ids(db.target, lib(), QUEUE, "run-now", listed, expect="delayed")
    assert (outcome.ids, outcome.changed, outcome.skipped) == (listed[1:], 1, 1)
    dead = ground(db)["dead"]
    with db.connect() as conn:
        conn.execute("DELETE FROM queuetop.dead_letters WHERE id = %s", (int(dead[0].removeprefix("dead:")),))  # purged meanwhile
    assert act(db, "retry", dead, expect="dead") == dead[1:]


def test_a_bulk_action_goes_through_a_long_queue_window_by_window(db):
    enqueue(db, *({"name": f"n{n}"} for n in range(SCAN_ROWS + 500)))
    with db.connect() as conn:
        queue = TableQueue.open(conn, QUEUE)
        [claimed] = queue.claim(conn, visibility_s=600)
    outcome = run_bulk(db.target, lib(), QUEUE, "delete", JobFilter(state="ready"))
    assert (outcome.matched, outcome.changed, outcome.skipped) == (SCAN_ROWS + 499, SCAN_ROWS + 499, 0)
    assert ground(db) == {"ready": [], "delayed": [], "in_flight": [str(claimed.id)], "dead": []}


def test_refusals_say_why(db, engine):
    with pytest.raises(ActionRefused, match="reference has no cancel: the engine has no cancelled state"):
        act(db, "cancel", ground(db)["ready"])
    with pytest.raises(ActionRefused, match="retry is for dead messages, not ready"):
        act(db, "retry", ground(db)["ready"], expect="ready")
    with psycopg.connect(db.dsn, autocommit=True, row_factory=dict_row) as conn, pytest.raises(
            ActionRefused, match="reference cannot pause a queue: the engine has no notion of a paused queue"):
        lib().pause(conn, QUEUE, True)
    assert ground(db)["ready"]  # nothing changed


def test_search_by_args_and_text_and_the_bounded_list(db):
    enqueue(db, *({"name": f"n{n}", "tenant": n % 3} for n in range(SCAN_ROWS + 2_000)))
    enqueue(db, {"name": "needle", "tenant": 7})
    assert [j.args["name"] for j in read(db, JobFilter(match={"tenant": 1}), limit=3).jobs] == ["n1", "n4", "n7"]
    page = read(db, JobFilter(text="NEEDLE"))
    assert page.jobs == [] and page.note == (
        f"searched {SCAN_ROWS:,} messages up to id {page.after}: the queue's table has only its primary key, "
        f"a list reads at most {SCAN_ROWS:,} messages a page")
    following = read(db, JobFilter(text="NEEDLE"), after=page.after)
    assert [j.args["name"] for j in following.jobs] == ["needle"] and following.after is None
    assert read(db, JobFilter(text="50%_")).jobs == []  # % and _ are the text's own
    page = read(db, JobFilter(kind="anything"))
    assert page.jobs == [] and "no kind" in page.note
