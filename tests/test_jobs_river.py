"""River's job console (jobs/river.py), proved by River itself afterwards.

River's workers are Go: nothing here can run them. So (as tests/oracle/river.py builds it) River's
schema as its migrations leave it, jobs inserted by River's own Python client, and what River's
Go code writes made with its own statements: its producer's fetch (JobGetAvailable: the jobs it
would take now), its executor's outcomes, its JobGetByID. Each action is then proved by what River
does next: the fetch takes a retried or run-now job and never a cancelled one, JobGetByID finds no
deleted one, and a LISTEN on River's control channel receives exactly the payload River sends
(its producer acts on that: cancel a running job, pause, resume).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from jobs.bulk import act_on_ids, run_bulk
from jobs.model import SCAN_ROWS, ActionRefused, JobFilter
from jobs.registry import library_for
from jobs.river import RiverJobs
from probes.sampler import run_cycle
from probes.session import open_probe_connection, probe_transaction

from .conftest import wait_until
from .oracle.river import CLIENT_ID, River, build_small, install, parts, truth

pytestmark = pytest.mark.matrix  # the server matrix runs these on every supported major

pytest.importorskip("riverqueue", reason="River's Python client is a test dependency (pip install -e '.[test]')")

SCHEMA = "public"
# River's JobGetByID (riverdriver/riverpgxv5/internal/dbsqlc/river_job.sql).
GET_BY_ID = "SELECT * FROM {jobs} WHERE id = %(id)s LIMIT 1"
# River's completer for a job whose work returned an error (JobSetStateIfRunningMany, River 0.44):
# a job whose cancel was attempted (metadata cancel_attempted_at) is finalized as cancelled
# instead of being scheduled for a retry.
FINISH_WITH_ERROR = """
UPDATE {jobs} AS river_job
SET state = CASE WHEN river_job.state = 'running' AND river_job.metadata ? 'cancel_attempted_at'
                 THEN 'cancelled'::{state_type} ELSE 'retryable'::{state_type} END,
    finalized_at = CASE WHEN river_job.state = 'running' AND river_job.metadata ? 'cancel_attempted_at'
                        THEN now() ELSE river_job.finalized_at END,
    errors = array_append(river_job.errors, jsonb_build_object('at', now(), 'attempt', attempt, 'error', 'context canceled'))
WHERE river_job.id = %(id)s AND river_job.state = 'running'
"""


@pytest.fixture
def river(db):
    workload = build_small(db.dsn)
    yield workload.river
    workload.close()


def lib() -> RiverJobs:
    return RiverJobs(SCHEMA)


def read(db, queue: str, flt: JobFilter, **kw):
    with open_probe_connection(db.target) as conn, probe_transaction(conn):
        return lib().page(conn, queue, flt, **kw)


def read_all(db, queue: str, flt: JobFilter, *, limit: int = 2, newest_first: bool = False) -> list[str]:
    """Every page of `flt`, keyset by keyset, as the console pages: ids in order."""
    ids: list[str] = []
    after = None
    for _ in range(1000):
        page = read(db, queue, flt, after=after, limit=limit, newest_first=newest_first)
        ids += [job.id for job in page.jobs]
        if page.after is None:
            return ids
        after = page.after
    raise AssertionError("paging did not end")


def act(db, queue: str, action: str, ids, expect=None) -> list[str]:
    """The console's action on these ids (jobs/bulk.py: one short compare-and-set transaction)."""
    outcome = act_on_ids(db.target, lib(), queue, action, [str(i) for i in ids], expect=expect)
    assert outcome.changed + outcome.skipped == outcome.matched == len(ids)
    return outcome.ids


def pause(db, queue: str, paused: bool) -> None:
    with psycopg.connect(db.dsn, autocommit=True, row_factory=dict_row) as conn, conn.transaction():
        lib().pause(conn, queue, paused)


def ground(db, queue: str, where: str) -> list[str]:
    with db.connect() as conn:
        rows = conn.execute(sql.SQL("SELECT j.id FROM {jobs} AS j LEFT JOIN {queues} AS q ON q.name = j.queue "
                                    "WHERE j.queue = %(queue)s AND (" + where + ") ORDER BY j.id").format(**parts(SCHEMA)),
                            {"queue": queue}).fetchall()
    return [str(r[0]) for r in rows]


GROUND = {
    "ready": "j.state = 'available' AND j.scheduled_at <= now() AND q.paused_at IS NULL",
    "blocked": "j.state = 'available' AND j.scheduled_at <= now() AND q.paused_at IS NOT NULL",
    "delayed": "(j.state = 'available' AND (j.scheduled_at > now() OR q.paused_at IS NOT NULL))"
               " OR j.state IN ('scheduled', 'retryable', 'pending')",
    "in_flight": "j.state = 'running'",
    "dead": "j.state = 'discarded'",
    "done": "j.state IN ('completed', 'cancelled')",
}


def state_of(river: River, job_id: int) -> tuple[str, int, int] | None:
    row = river.conn.execute(sql.SQL("SELECT state::text, attempt, max_attempts FROM {jobs} WHERE id = %s").format(**river.parts),
                             (job_id,)).fetchone()
    return None if row is None else tuple(row)


def test_the_registry_serves_river():
    assert library_for("river") is RiverJobs


def test_each_states_list_agrees_with_rivers_truth_and_the_snapshot(db, river):
    snap = {q.name: q for q in run_cycle(db.target).queues if q.source == "river"}
    with db.connect() as conn:
        expected = truth(conn)
    for queue in ("mail", "reports", "paused_a", "paused_b"):
        listed = {state: read_all(db, queue, JobFilter(state=state)) for state in GROUND}
        for state, where in GROUND.items():
            assert listed[state] == ground(db, queue, where), (queue, state)
        figures = snap[queue]
        assert (len(listed["ready"]), len(listed["delayed"]), len(listed["in_flight"]), len(listed["dead"])) == (
            figures.ready, figures.delayed, figures.in_flight, figures.dead), queue
        assert len(listed["blocked"]) == (figures.blocked or 0) == expected[queue]["blocked"], queue
        # Every job of the queue exactly once, whatever the page size; newest first is the reverse.
        everything = ground(db, queue, "true")
        assert read_all(db, queue, JobFilter(), limit=3) == everything
        assert read_all(db, queue, JobFilter(), limit=2, newest_first=True) == everything[::-1]
    assert snap["paused_a"].blocked == 2  # the workload has a paused queue with due jobs: blocked is exercised


def test_a_page_says_each_jobs_state_status_and_last_error(db, river):
    [dead] = read(db, "mail", JobFilter(state="dead")).jobs
    assert (dead.state, dead.status, dead.last_error, dead.kind) == ("dead", "discarded", "mailbox full", "send_email")
    assert dead.attempts == 1 and dead.max_attempts == 1 and dead.args == {"n": 0} and dead.age_s >= 0
    blocked = read(db, "paused_a", JobFilter(state="delayed")).jobs
    assert {(j.state, j.status) for j in blocked} == {("blocked", "available"), ("delayed", "scheduled")}


def test_kind_args_and_text_searches(db, river):
    river.insert("search", 3, kind="resize_image")
    river.insert("search", 2, kind="send_email")
    with db.connect() as conn:
        conn.execute(sql.SQL("UPDATE {jobs} SET args = jsonb_build_object('to', 'ops+' || id || '@example.com', 'n', id) "
                             "WHERE queue = 'search'").format(**parts(SCHEMA)))
        ids = [str(r[0]) for r in conn.execute("SELECT id FROM river_job WHERE queue = 'search' ORDER BY id")]
    assert [j.id for j in read(db, "search", JobFilter(kind="resize_image")).jobs] == ids[:3]
    page = read(db, "search", JobFilter(match={"n": int(ids[4])}))
    assert [j.id for j in page.jobs] == [ids[4]] and page.note is None  # led by River's GIN index on args
    page = read(db, "search", JobFilter(text=f"OPS+{ids[1]}@"))  # case-insensitive substring of the args' text
    assert [j.id for j in page.jobs] == [ids[1]] and page.after is None and page.note is None  # read to the end
    assert read(db, "search", JobFilter(text="100%_")).jobs == []  # % and _ are the text's own


def test_a_search_no_index_leads_reads_at_most_scan_rows_a_page_and_says_so(db, river):
    with db.connect() as conn:
        conn.execute("INSERT INTO river_job (queue, kind, args, max_attempts, state) "
                     "SELECT 'bulk', 'noop', jsonb_build_object('n', g), 25, 'available' FROM generate_series(1, %s) AS g",
                     (SCAN_ROWS + 5_000,))
        [(needle,)] = conn.execute("INSERT INTO river_job (queue, kind, args, max_attempts) "
                                   "VALUES ('bulk', 'noop', '{\"needle\": \"hay\"}', 25) RETURNING id").fetchall()
        [(first,)] = conn.execute("SELECT min(id) FROM river_job").fetchall()
    page = read(db, "bulk", JobFilter(text="needle"))
    assert page.jobs == [] and page.after is not None
    assert page.note == (f"searched {SCAN_ROWS:,} jobs up to id {page.after}: a text search reads at most {SCAN_ROWS:,} jobs a page")
    with db.connect() as conn:  # exactly SCAN_ROWS jobs, in id order from the first
        read_rows = conn.execute("SELECT count(*) FROM river_job WHERE id BETWEEN %s AND %s", (first, int(page.after))).fetchone()
    assert read_rows[0] == SCAN_ROWS
    following = read(db, "bulk", JobFilter(text="needle"), after=page.after)
    assert [j.id for j in following.jobs] == [str(needle)] and following.after is None and following.note is None
    # Without River's GIN index on args, a search by args is bounded the same way, and says why.
    with db.connect() as conn:
        conn.execute("DROP INDEX river_job_args_index")
    page = read(db, "bulk", JobFilter(match={"needle": "hay"}))
    assert page.jobs == [] and "no GIN index on river_job.args" in page.note
    assert [j.id for j in read(db, "bulk", JobFilter(match={"needle": "hay"}), after=page.after).jobs] == [str(needle)]
    # Without River's fetching index (the Python client's schema has none), a list is bounded too.
    assert read(db, "bulk", JobFilter(state="dead")).note is None  # led by the fetching index: no bound, no note
    with db.connect() as conn:
        conn.execute("DROP INDEX river_job_prioritized_fetching_index")
    page = read(db, "bulk", JobFilter(state="dead"))
    assert page.jobs == [] and "river_job_prioritized_fetching_index is missing here" in page.note


def test_job_gives_every_error_river_kept_and_who_holds_it(db, river):
    [job_id] = river.ids("reports", "retryable")

    def due_again() -> None:  # its retry time comes: River's scheduler (JobSchedule) makes it available
        river.conn.execute("UPDATE river_job SET state = 'available', scheduled_at = now() - interval '1 second' "
                           "WHERE id = %s", (job_id,))

    due_again()
    assert job_id in river.fetch("reports", 10)  # taken again ...
    river.fail([job_id], "renderer crashed again")  # ... and failed again
    due_again()
    assert job_id in river.fetch("reports", 10)
    with open_probe_connection(db.target) as conn, probe_transaction(conn):
        job = lib().job(conn, "reports", str(job_id))
        assert lib().job(conn, "mail", str(job_id)) is None  # another queue's id
    assert [e["error"] for e in job.errors] == ["renderer crashed", "renderer crashed again"]
    assert [e["attempt"] for e in job.errors] == [1, 2] and job.last_error == "renderer crashed again"
    assert (job.state, job.status, job.held_by, job.attempts) == ("in_flight", "running", CLIENT_ID, 3)
    assert job.extra["priority"] == 1 and job.extra["attempted_by"] == [CLIENT_ID] * 3 and "args" not in job.extra


def test_retry_makes_river_fetch_a_dead_job_again_with_one_more_attempt(db, river):
    [dead] = river.ids("mail", "discarded")
    [done, *_] = river.ids("mail", "completed")
    assert state_of(river, dead) == ("discarded", 1, 1)
    assert act(db, "mail", "retry", [dead], expect="dead") == [str(dead)]
    assert state_of(river, dead) == ("available", 1, 2)  # River's JobRetry: attempts used up, one more allowed
    # River's own fetch takes it now.
    assert dead in river.fetch("mail", 100)
    # A completed job is retried too (River re-drives any job not running).
    assert act(db, "mail", "retry", [done]) == [str(done)]
    assert river.fetch("mail", 100) == [done]


def test_run_now_makes_a_scheduled_job_fetched_now(db, river):
    later = sorted(river.ids("mail", "scheduled"))
    assert not set(later) & set(river.fetch("mail", 100))  # not due: River's fetch leaves them
    assert act(db, "mail", "run-now", later[:1], expect="delayed") == [str(later[0])]
    assert river.fetch("mail", 100) == [later[0]]
    assert state_of(river, later[1])[0] == "scheduled"


def test_cancel_a_waiting_job_it_is_never_fetched_and_a_running_one_is_told_to_its_producer(db, river):
    waiting = river.ids("mail", "available")
    [running] = river.ids("mail", "running")
    with db.connect() as listener:
        listener.execute('LISTEN "public.river_control"')
        assert act(db, "mail", "cancel", [waiting[0]], expect="ready") == [str(waiting[0])]
        assert act(db, "mail", "cancel", [running], expect="in_flight") == [str(running)]
        got = [n.payload for n in listener.notifies(timeout=5, stop_after=2)]
    # JobCancel's payloads, as its json_build_object writes them.
    assert got == [f'{{"action" : "cancel", "job_id" : {waiting[0]}, "queue" : "mail"}}',
                   f'{{"action" : "cancel", "job_id" : {running}, "queue" : "mail"}}']
    assert state_of(river, waiting[0])[0] == "cancelled"
    assert river.fetch("mail", 100) == waiting[1:]  # River's fetch takes the others, never the cancelled one
    # The running one stays running, marked: when its work returns (cancelled by its producer),
    # River's completer finalizes it as cancelled, not retryable.
    with db.connect() as conn:
        state, metadata = conn.execute("SELECT state::text, metadata FROM river_job WHERE id = %s", (running,)).fetchone()
        assert state == "running" and datetime.fromisoformat(metadata["cancel_attempted_at"].replace("Z", "+00:00"))
        conn.execute(sql.SQL(FINISH_WITH_ERROR).format(**parts(SCHEMA)), {"id": running})
    assert state_of(river, running)[0] == "cancelled"


def test_delete_removes_the_job_from_river_and_leaves_a_running_one(db, river):
    [dead] = river.ids("reports", "discarded")[:1]
    [running] = river.ids("reports", "running")
    assert act(db, "reports", "delete", [dead, running]) == [str(dead)]
    with db.connect() as conn:
        assert conn.execute(sql.SQL(GET_BY_ID).format(**parts(SCHEMA)), {"id": dead}).fetchone() is None  # River's JobGetByID
        assert conn.execute(sql.SQL(GET_BY_ID).format(**parts(SCHEMA)), {"id": running}).fetchone() is not None


def test_an_action_only_changes_jobs_still_in_the_state_they_were_listed_in(db, river):
    listed = [j.id for j in read(db, "reports", JobFilter(state="dead")).jobs]
    assert len(listed) == 2
    with db.connect() as conn:  # meanwhile someone retried one through River (Client.JobRetry) and River ran it
        conn.execute("UPDATE river_job SET state = 'available', finalized_at = NULL, scheduled_at = now(), "
                     "max_attempts = max_attempts + 1 WHERE id = %s", (int(listed[0]),))
    assert int(listed[0]) in river.fetch("reports", 100)
    outcome = act_on_ids(db.target, lib(), "reports", "delete", listed, expect="dead")
    assert (outcome.ids, outcome.changed, outcome.skipped) == ([listed[1]], 1, 1)  # the other one is skipped, counted
    assert state_of(river, int(listed[0]))[0] == "running"
    # And a job another session holds locked right now is skipped, not waited for.
    [retrying] = river.ids("reports", "retryable")
    with db.connect() as holder, holder.transaction():
        holder.execute("SELECT 1 FROM river_job WHERE id = %s FOR UPDATE", (retrying,))
        assert act(db, "reports", "run-now", [retrying]) == []
    assert act(db, "reports", "run-now", [retrying]) == [str(retrying)]


def test_a_bulk_retry_of_every_dead_job_then_river_fetches_them(db, river):
    dead = river.ids("reports", "discarded")
    outcome = run_bulk(db.target, lib(), "reports", "retry", JobFilter(state="dead"), batch=1)
    assert (outcome.matched, outcome.changed, outcome.skipped, outcome.ids) == (2, 2, 0, [str(i) for i in dead])
    assert set(dead) <= set(river.fetch("reports", 100))
    assert read(db, "reports", JobFilter(state="dead")).jobs == []


def test_refusals_say_why(db, river):
    with pytest.raises(ActionRefused, match="retry is for dead, done jobs, not ready"):
        act(db, "mail", "retry", river.ids("mail", "available"), expect="ready")
    with pytest.raises(ActionRefused, match="no queue 'nowhere' in river_queue"):
        pause(db, "nowhere", True)
    with db.connect() as conn:
        conn.execute("DROP TABLE river_queue")
    with pytest.raises(ActionRefused, match="no river_queue table"):
        pause(db, "mail", True)


def test_pause_and_resume_as_river_does_its_producer_is_told_and_due_jobs_are_blocked(db, river):
    with db.connect() as listener:
        listener.execute('LISTEN "public.river_control"')
        pause(db, "mail", True)
        [note] = listener.notifies(timeout=5, stop_after=1)
        assert (note.channel, note.payload) == ("public.river_control", '{"action":"pause","queue":"mail"}')
        paused_at = river.conn.execute("SELECT paused_at FROM river_queue WHERE name = 'mail'").fetchone()[0]
        assert paused_at is not None
        assert river.fetch("mail", 100) == []  # a producer starting now reads the pause and fetches nothing
        snap = {q.name: q for q in run_cycle(db.target).queues if q.source == "river"}
        assert (snap["mail"].ready, snap["mail"].blocked) == (0, 3)
        assert len(read(db, "mail", JobFilter(state="blocked")).jobs) == 3
        pause(db, "mail", False)
        [note] = listener.notifies(timeout=5, stop_after=1)
        assert note.payload == '{"action":"resume","queue":"mail"}'
    assert river.conn.execute("SELECT paused_at FROM river_queue WHERE name = 'mail'").fetchone()[0] is None
    assert len(river.fetch("mail", 100)) == 3


def test_a_retried_job_is_fetched_by_a_polling_producer_within_its_poll(db, river):
    # River's JobRetry sends no notification: its producer finds the job at its next fetch (poll).
    [dead] = river.ids("mail", "discarded")
    act(db, "mail", "retry", [dead])
    wait_until(lambda: dead in river.fetch("mail", 100), timeout=5, what="River's fetch to take the retried job")


def test_an_install_in_another_schema(db):
    with db.connect() as conn:
        install(conn, "river_custom")
    river = River(db.dsn, "river_custom")
    try:
        river.insert("mail", 2)
        river.insert("mail", max_attempts=1)
        taken = river.fetch("mail", 3)
        river.fail(taken[2:], "boom")
        custom = RiverJobs("river_custom")
        with open_probe_connection(db.target) as conn, probe_transaction(conn):
            [dead] = custom.page(conn, "mail", JobFilter(state="dead")).jobs
        with db.connect() as listener:
            listener.execute('LISTEN "river_custom.river_control"')
            with psycopg.connect(db.dsn, autocommit=True, row_factory=dict_row) as conn, conn.transaction():
                assert custom.act(conn, "mail", "cancel", [str(taken[0])], None) == [str(taken[0])]
            [note] = listener.notifies(timeout=5, stop_after=1)
        assert json.loads(note.payload) == {"action": "cancel", "job_id": taken[0], "queue": "mail"}
        assert dead.id == str(taken[2]) and dead.last_error == "boom"
    finally:
        river.close()


def test_go_time_and_json_are_written_as_go_writes_them():
    from jobs.river import _go_json, _go_time

    assert _go_time(datetime(2024, 5, 1, 12, 0, 0, 120000, tzinfo=UTC)) == "2024-05-01T12:00:00.12Z"
    assert _go_time(datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC) + timedelta(hours=0)) == "2024-05-01T12:00:00Z"
    assert _go_json({"action": "pause", "queue": "a<b&c"}) == '{"action":"pause","queue":"a\\u003cb\\u0026c"}'
