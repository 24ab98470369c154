"""The queue verdicts' logic (issue 29), on snapshots built here: each verdict from the evidence
it needs, over the samples it needs, and not from less. What the probes see on a real server
(consumers on a table's locks, the scenarios that make each cause) is tested against the
server in the scenario tests; this pins the judging."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from probes.consumers import consumers_of, names_table, table_name, takes_messages
from probes.diagnosis import CODES, Diagnoser
from probes.model import (
    BlockedSession,
    Blocker,
    Connections,
    Consumer,
    Locker,
    QueueSample,
    ServerInfo,
    SessionSample,
    Snapshot,
)

T0 = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
TABLE = 'queuetop."q_jobs"'
FETCH = 'DELETE FROM queuetop."q_jobs" WHERE id = (SELECT id FROM queuetop."q_jobs" ORDER BY id FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING *'


def queue(**figures) -> QueueSample:
    values: dict = dict(name="jobs", kind="reference", table=TABLE, depth=0, ready=0, in_flight=0, delayed=0, dead=0,
                        oldest_ready_age_s=None, enqueued_per_s=0.0, dequeued_per_s=0.0, depth_is_estimate=False,
                        dead_tuples=0, live_tuples=0, last_vacuum_at=None, last_autovacuum_at=None, inserted_total=0,
                        deleted_total=0, enqueued_total=0, dequeued_total=0)
    values.update(figures)
    return QueueSample(**values)


def session(pid: int, query: str | None = FETCH, state: str = "active", application: str = "worker", **more) -> SessionSample:
    return SessionSample(pid=pid, database="app", user="app", application=application, client="local",
                         backend_type="client backend", state=state, xact_age_s=more.pop("xact_age_s", 0.1),
                         query_age_s=more.pop("query_age_s", 0.1), wait_event_type=None, wait_event=None, query=query, **more)


def snapshot(at_s: float, queues, sessions=(), blocked=(), blockers=(), connections=None) -> Snapshot:
    return Snapshot(taken_at=T0 + timedelta(seconds=at_s), server=ServerInfo(dialect="postgresql", version="16", database="app"),
                    probes={}, queues=tuple(queues), sessions=tuple(sessions), blocked=tuple(blocked),
                    blockers=tuple(blockers), connections=connections)


def verdicts(frames) -> list:
    diagnoser = Diagnoser()
    return [diagnoser.diagnose(frame).queues[0].diagnosis for frame in frames]


# -- who is a consumer --------------------------------------------------------------------------

def test_a_consumer_takes_messages_from_the_table_by_name():
    assert table_name('queuetop."q_demo.emails"') == "q_demo.emails"
    assert table_name('pgboss.job') == "job" and table_name('"we""ird"."t"') == "t"
    assert names_table("UPDATE pgboss.job SET state = 'active'", "job")
    assert not names_table("UPDATE pgboss.jobs_archive SET x = 1", "job")  # a whole word only
    assert takes_messages(FETCH) and takes_messages("SELECT * FROM procrastinate_fetch_job($1)")
    assert not takes_messages('INSERT INTO queuetop."q_jobs" (body) VALUES ($1)')  # a producer
    assert not takes_messages('SELECT count(*) FROM queuetop."q_jobs"')  # a monitoring read
    q = queue()
    sessions = [session(10), session(11, query='INSERT INTO queuetop."q_jobs" (body) VALUES ($1)'),
                session(12, application="queuetop-probe"), session(13, query='DELETE FROM "q_jobs_dead" WHERE id = 1'),
                replace(session(14), backend_type="autovacuum worker")]
    found = consumers_of(q, sessions, {})
    assert [c.pid for c in found] == [10] and found[0].evidence == "query" and not found[0].waiting
    # On the table's locks (the probe's), only those whose statement takes messages, or is unknown.
    on_locks = tuple(Consumer(pid=pid, state="active", application="x", for_s=1.0) for pid in (20, 21, 22, 23))
    lockers = [session(20), session(21, "LOCK TABLE queuetop.\"q_jobs\" IN SHARE MODE", "idle in transaction"),
               session(22, 'INSERT INTO queuetop."q_jobs" (body) VALUES ($1)'), session(23, None)]
    assert [c.pid for c in consumers_of(replace(q, consumers=on_locks), lockers, {})] == [20, 23]


# -- each verdict ---------------------------------------------------------------------------------

def test_blocked_names_the_root_blocker_and_how_long_its_transaction_is_open():
    q = queue(depth=40, ready=40, oldest_ready_age_s=9.0)
    waiter = replace(session(20), blocked_by=(7,))
    lock = BlockedSession(pid=20, blocked_by=(7,), root_blocker=7, root_blockers=(7,), wait_s=6.5, lock_type="relation",
                          mode="RowExclusiveLock", relation="q_jobs", query=FETCH, application="worker")
    root = Blocker(pid=7, blocked_count=1, state="idle in transaction", xact_age_s=35.0, query="LOCK q_jobs", application="billing")
    first = verdicts([snapshot(0, [q], [waiter, session(7, "LOCK q_jobs", "idle in transaction", "billing")], [lock], [root])])[0]
    assert first.code == "blocked"  # one sample: a 6.5 s wait is evidence enough
    assert first.pids == (7, 20) and first.since_s == 6.5 and first.objects == ("q_jobs",)
    assert "pid 7, idle in transaction, application billing, transaction open 35 s" in first.reason
    # A lock held for a blink is no verdict.
    brief = replace(lock, wait_s=0.2)
    assert verdicts([snapshot(0, [q], [waiter], [brief], [root])])[0].code != "blocked"


def test_no_consumers_is_said_from_one_sample_with_ready_messages_and_nobody_on_the_table():
    frames = [snapshot(0, [queue(depth=5, ready=5, oldest_ready_age_s=3.0)]),
              snapshot(2, [queue(depth=5, ready=5, oldest_ready_age_s=5.0)])]
    first, second = verdicts(frames)
    assert first.code == "no-consumers" and first.since_s == 3.0  # what one sample shows is said from one sample
    assert second.code == "no-consumers" and second.since_s == 5.0 and "5 ready" in second.reason
    # A consumer at work, or messages dequeued between the samples: someone consumes it.
    worked = [frames[0], replace(frames[1], sessions=(session(30),))]
    assert verdicts(worked)[1].code != "no-consumers"
    taken = [frames[0], replace(frames[1], queues=(queue(depth=5, ready=5, oldest_ready_age_s=1.0, dequeued_total=3),))]
    assert verdicts(taken)[1].code != "no-consumers"


def test_failing_when_more_go_dead_than_complete():
    frames = [snapshot(0, [queue(depth=10, ready=10, dead=0, dequeued_total=0)], [session(40)]),
              snapshot(2, [queue(depth=10, ready=10, dead=6, dequeued_total=8)], [session(40)])]
    verdict = verdicts(frames)[1]
    assert verdict.code == "failing" and "6 went dead" in verdict.reason and "2 completed" in verdict.reason
    fine = [frames[0], snapshot(2, [queue(depth=10, ready=10, dead=1, dequeued_total=30)], [session(40)])]
    assert verdicts(fine)[1].code == "healthy"


def test_bloat_names_the_session_that_holds_the_horizon():
    horizon = Connections(total=5, max=100, by_state={}, by_application={}, oldest_xact_age_s=90.0, oldest_xact_pid=77,
                          xmin_holder_pid=77, xmin_holder_age_xids=5000, xmin_holder_application="report",
                          xmin_holder_kind="session")
    holder = session(77, "SELECT * FROM big_report", "idle in transaction", "report", xact_age_s=90.0)
    frames = [snapshot(0, [queue(dead_tuples=100, live_tuples=100)], [holder], connections=horizon),
              snapshot(2, [queue(dead_tuples=900, live_tuples=100)], [holder], connections=horizon)]
    verdict = verdicts(frames)[1]
    assert verdict.code == "bloat" and verdict.pids == (77,) and "pid 77" in verdict.reason and "900 dead tuples" in verdict.reason
    # A prepared transaction holding it is named by its gid.
    prepared = replace(horizon, xmin_holder_pid=None, xmin_holder_kind="prepared", xmin_holder_name="tx-1")
    verdict = verdicts([replace(f, connections=prepared) for f in frames])[1]
    assert verdict.code == "bloat" and verdict.objects == (TABLE, "prepared:tx-1")
    # Dead tuples under autovacuum's threshold: nothing to say.
    small = [snapshot(0, [queue(dead_tuples=10, live_tuples=1000)], [holder], connections=horizon),
             snapshot(2, [queue(dead_tuples=60, live_tuples=1000)], [holder], connections=horizon)]
    assert verdicts(small)[1].code == "healthy"
    # The oldest transaction is another session's, one that holds no horizon (no xid, no
    # snapshot): the holder's own transaction, a second old, is no held horizon.
    young = replace(horizon, oldest_xact_pid=5, xmin_holder_pid=78)
    busy_worker = session(78, FETCH, "active", "worker", xact_age_s=0.2)
    idle_one = session(5, "SELECT 1", "idle in transaction", "psql", xact_age_s=90.0)
    frames = [snapshot(t, [queue(dead_tuples=d, live_tuples=100)], [busy_worker, idle_one], connections=young)
              for t, d in ((0, 100), (2, 900))]
    assert verdicts(frames)[1].code == "healthy"


def test_bloat_when_autovacuum_falls_behind_but_not_for_a_table_just_seen():
    """Over autovacuum's threshold with no horizon held: flagged only once these samples have
    seen it over the threshold, unvacuumed, for AUTOVACUUM_LATE_S (a dashboard just started on a
    busy table says nothing)."""
    from probes.diagnosis import AUTOVACUUM_LATE_S

    frames = [snapshot(10 * n, [queue(dead_tuples=1000 + 100 * n, live_tuples=100)]) for n in range(int(AUTOVACUUM_LATE_S / 10) + 2)]
    codes = [v.code for v in verdicts(frames)]
    assert codes[: int(AUTOVACUUM_LATE_S / 10)] == ["not-judged"] + ["healthy"] * (int(AUTOVACUUM_LATE_S / 10) - 1)
    assert codes[-1] == "bloat"
    vacuumed = [replace(f, queues=(replace(f.queues[0], last_autovacuum_at=f.taken_at - timedelta(seconds=5)),)) for f in frames]
    assert {v.code for v in verdicts(vacuumed)[1:]} == {"healthy"}


def test_saturated_when_busy_consumers_fall_behind_and_healthy_when_they_keep_up():
    busy = [session(50), session(51)]
    growing = [snapshot(4 * n, [queue(depth=10 + 20 * n, ready=10 + 20 * n, enqueued_total=100 * n, dequeued_total=80 * n)], busy)
               for n in range(4)]
    codes = [v.code for v in verdicts(growing)]
    assert codes[:3] == ["not-judged", "healthy", "healthy"]  # 8 s of growth is not yet a verdict
    assert codes[3] == "saturated"
    verdict = verdicts(growing)[-1]
    assert verdict.code == "saturated" and verdict.pids == (50, 51) and "+60" in verdict.reason
    assert "2 consumers: 1,500/min in, 1,200/min out" in verdict.reason
    # A busy queue whose backlog goes up and down while consumers keep up is never flagged.
    steady = [snapshot(2 * n, [queue(depth=depth, ready=depth, enqueued_total=100 * n, dequeued_total=100 * n - depth)], busy)
              for n, depth in enumerate([5, 3, 8, 4, 6, 2, 7, 5])]
    assert {v.code for v in verdicts(steady)[1:]} == {"healthy"}
    # Nor one that gains a message or two over a minute (the demo's e-mails: retries in and out).
    creeping = [snapshot(5 * n, [queue(depth=n // 4, ready=0, enqueued_total=200 * n, dequeued_total=200 * n - n // 4)], busy)
                for n in range(13)]
    assert {v.code for v in verdicts(creeping)[1:]} == {"healthy"}


def test_a_verdict_says_how_long_it_has_held_and_travels_in_the_json():
    frames = [snapshot(2 * n, [queue(depth=10, ready=10, dead=5 * n, dequeued_total=5 * n)], [session(60)]) for n in range(4)]
    diagnoser = Diagnoser()
    out = [diagnoser.diagnose(frame) for frame in frames]
    codes = [s.queues[0].diagnosis.code for s in out]
    assert codes == ["not-judged", "failing", "failing", "failing"]
    assert [s.queues[0].diagnosis.since_s for s in out[1:]] == [0.0, 2.0, 4.0]
    document = json.loads(json.dumps(out[-1].to_json()))
    assert document["queues"][0]["diagnosis"] == {"code": "failing", "reason": out[-1].queues[0].diagnosis.reason, "pids": [],
                                                  "objects": [TABLE], "since_s": 4.0}
    assert document["queues"][0]["consumers"][0]["pid"] == 60
    assert Snapshot.from_json(document) == out[-1]


# -- a table several queues share (Procrastinate, pg-boss, River, Graphile Worker) -----------------

SHARED = '"public"."procrastinate_jobs"'
PROC_FETCH = "SELECT * FROM procrastinate_fetch_job_v2($1, $2)"


def shared_queue(name: str, **figures) -> QueueSample:
    return queue(name=name, source="procrastinate", kind="procrastinate", table=SHARED, enqueued_total=None,
                 dequeued_total=None, **figures)


def test_a_worker_of_a_shared_table_is_a_consumer_of_each_queue_but_only_its_own_listen_ties_it_to_one():
    mail, reports = shared_queue("mail"), shared_queue("reports")
    sessions = [session(30, PROC_FETCH, state="idle"),
                session(31, 'LISTEN "procrastinate_queue_v1#reports"', state="idle"),
                session(32, 'LISTEN "procrastinate_any_queue_v1"', state="idle"),
                session(33, 'LISTEN "other_channel"', state="idle")]
    diagnosed = Diagnoser().diagnose(snapshot(0, [mail, reports], sessions))
    by_name = {q.name: {c.pid: c for c in q.consumers} for q in diagnosed.queues}
    assert set(by_name["mail"]) == {30, 32} and set(by_name["reports"]) == {30, 31, 32}
    assert by_name["mail"][30].shared and by_name["mail"][30].evidence == "query"
    assert by_name["reports"][31].evidence == "listen" and not by_name["reports"][31].shared  # its own channel
    assert by_name["reports"][32].shared  # every queue's channel


def test_on_a_shared_table_a_queue_nobody_serves_is_no_consumers_once_its_oldest_message_outlives_a_poll():
    """Workers of `reports` only: `mail` backs up although sessions work the table."""
    others = [session(30, PROC_FETCH, state="idle"), session(31, 'LISTEN "procrastinate_queue_v1#reports"', state="idle")]
    frames = [snapshot(t, [shared_queue("mail", depth=5, ready=5, oldest_ready_age_s=age), shared_queue("reports")], others)
              for t, age in ((0, 4.0), (2, 6.0), (4, 8.0), (6, 10.5))]
    codes = [v.code for v in verdicts(frames)]
    # One sample cannot say whether the sessions on the shared table serve it; then not before a
    # worker's poll (10 s) is outlived.
    assert codes == ["not-judged", "healthy", "healthy", "no-consumers"]
    assert "may serve it or other queues" in verdicts(frames)[0].reason
    last = verdicts(frames)[-1]
    assert "serve other queues" in last.reason and last.since_s == 10.5
    # Its messages being worked (in flight) is someone serving it.
    busy = [replace(f, queues=(replace(f.queues[0], in_flight=1), *f.queues[1:])) for f in frames]
    assert [v.code for v in verdicts(busy)][-1] == "healthy"
    # A worker listening on its own channel serves it, however old the message.
    own = [replace(f, sessions=(*others, session(34, 'LISTEN "procrastinate_queue_v1#mail"', state="idle"))) for f in frames]
    assert [v.code for v in verdicts(own)][-1] == "healthy"


def test_a_waiting_worker_of_a_shared_table_blocks_the_queues_with_ready_messages_only():
    waiter = replace(session(40, PROC_FETCH), blocked_by=(7,))
    lock = BlockedSession(pid=40, blocked_by=(7,), root_blocker=7, root_blockers=(7,), wait_s=5.0, lock_type="relation",
                          mode="RowExclusiveLock", relation="procrastinate_jobs", query=PROC_FETCH, application="worker")
    root = Blocker(pid=7, blocked_count=1, state="idle in transaction", xact_age_s=20.0, query="LOCK procrastinate_jobs",
                   application="migration")
    frame = snapshot(0, [shared_queue("mail", depth=3, ready=3, oldest_ready_age_s=5.0), shared_queue("reports")],
                     [waiter, session(7, "LOCK procrastinate_jobs", "idle in transaction", "migration")], [lock], [root])
    codes = {q.name: q.diagnosis.code for q in Diagnoser().diagnose(frame).queues}
    assert codes == {"mail": "blocked", "reports": "not-judged"}  # reports: nothing ready, and one sample


def test_consumers_are_found_in_one_pass_over_the_sessions_whatever_the_queues():
    """500 queues × 5,000 sessions: the sessions are sorted once (takers, listeners), then each
    queue looks at the takers only; the same consumers as a pass per queue."""
    import time

    queues = [queue(name=f"q{i}", table=f'queuetop."q_{i}"') for i in range(500)]
    sessions = [session(100 + i, f'DELETE FROM queuetop."q_{i % 40}" WHERE id = 1' if i % 100 == 0 else "SELECT 1",
                        state="idle") for i in range(5000)]
    started = time.perf_counter()
    diagnosed = Diagnoser().diagnose(snapshot(0, queues, sessions))
    elapsed = time.perf_counter() - started
    found = {q.name: [c.pid for c in q.consumers] for q in diagnosed.queues}
    assert found == {q.name: [c.pid for c in consumers_of(q, sessions, {})] for q in queues}
    assert found["q0"] == [100 + i for i in range(0, 5000, 200)] and found["q1"] == []
    assert elapsed < 1.0, elapsed  # a pass per queue over 5,000 sessions took 2.5 s here


def test_a_queue_worked_earlier_in_the_window_is_no_consumers_only_once_its_oldest_outlives_a_poll():
    """A polling worker (pg-boss, every few seconds) leaves no trace between polls: seen once, it
    is not missing until the oldest ready message has waited SHARED_IDLE_S; never seen, two
    samples suffice."""
    worker = session(60, 'UPDATE queuetop."q_jobs" SET claimed = true', state="idle")
    frames = [snapshot(0, [queue(depth=0, ready=0)], [worker])] + [
        snapshot(t, [queue(depth=4, ready=4, oldest_ready_age_s=age)]) for t, age in ((1, 0.5), (2, 1.5), (3, 2.5), (11, 10.5))]
    assert [v.code for v in verdicts(frames)] == ["not-judged", "healthy", "healthy", "healthy", "no-consumers"]
    assert "since its consumers were last seen" in verdicts(frames)[-1].reason
    assert "its consumers were last seen 2 s ago" in verdicts(frames)[2].reason  # healthy: a consumer seen in the window
    never = [snapshot(t, [queue(depth=4, ready=4, oldest_ready_age_s=age)]) for t, age in ((1, 0.5), (2, 1.5))]
    assert [v.code for v in verdicts(never)] == ["no-consumers", "no-consumers"]  # from its first sample


def test_failing_holds_while_deaths_are_half_the_completions_and_pgboss_deaths_are_no_completions():
    def frames(source, dead_and_taken):
        return [snapshot(t, [queue(source=source, depth=5, ready=5, dead=d, dequeued_total=n)], [session(61)])
                for t, (d, n) in enumerate(dead_and_taken)]
    # 4 dead, 6 taken: 2 completed -> failing; then 6 more dead, 16 more taken: 10 completed, held.
    assert [v.code for v in verdicts(frames("reference", [(0, 0), (4, 6), (10, 22)]))][1:] == ["failing", "failing"]
    assert verdicts(frames("reference", [(0, 0), (1, 20)]))[1].code == "healthy"  # 1 dead, 19 completed
    # pg-boss counts a failed job as taken twice (deleted, inserted back): 5 dead, 10 taken is 0 completed.
    verdict = verdicts(frames("pg-boss", [(0, 0), (5, 10)]))[1]
    assert verdict.code == "failing" and verdict.reason.endswith(", 0 completed")


def test_rows_counted_before_their_inserts_statistics_are_not_departures():
    """A job table's queue first seen with 5 fresh jobs whose inserts the statistics do not hold
    yet (live tuples 0): once sent, the 5 inserts are arrivals that are still there, not 5 jobs
    taken (a pg-boss verdict read "0 consumers, keeping up" on PostgreSQL 12 in CI)."""
    from types import SimpleNamespace

    from probes.postgres import PostgresProbes
    from probes.sources import QueueFigures

    probes = PostgresProbes()
    source = SimpleNamespace(name="pg-boss", kind="table")
    figures = QueueFigures(name="orphan", table="pgboss.job", relid=1, depth=5, ready=5, in_flight=0, delayed=0, dead=0,
                           rates_from="arrivals")
    stats = {"n_tup_ins": 0, "n_tup_del": 0, "n_live_tup": 0, "n_dead_tup": 0, "last_vacuum": None, "last_autovacuum": None}
    probes._queue_sample(source, figures, stats, now=100.0)
    later = probes._queue_sample(source, figures, {**stats, "n_tup_ins": 5, "n_live_tup": 5}, now=101.0)
    assert later.enqueued_per_s == 5.0 and later.dequeued_per_s == 0.0 and later.dequeued_total == 0
    # A job taken after that is a departure again.
    taken = probes._queue_sample(source, replace(figures, depth=4, ready=4), {**stats, "n_tup_ins": 5, "n_live_tup": 5}, now=102.0)
    assert taken.dequeued_per_s == 1.0 and taken.dequeued_total == 1


# -- blocked from the locks on its table (issue 43, point 2) -----------------------------------------

def locker(pid: int = 7, mode: str = "AccessExclusiveLock", xact_age_s: float | None = 35.0, **more) -> Locker:
    values: dict = dict(pid=pid, mode=mode, relation="queuetop.q_jobs", state="idle in transaction", application="migration",
                        xact_age_s=xact_age_s)
    values.update(more)
    return Locker(**values)


UNREAD = dict(depth=None, ready=None, in_flight=None, delayed=None, dead=None, enqueued_per_s=None, dequeued_per_s=None,
              dead_tuples=None, live_tuples=None, inserted_total=None, deleted_total=None, enqueued_total=None,
              dequeued_total=None, error="skipped: lock timeout (100 ms), the table is locked by another session")


def test_a_table_locked_in_a_mode_that_stops_consumers_is_blocked_by_the_locker_whether_or_not_its_figures_were_read():
    migration = session(7, "LOCK TABLE queuetop.q_jobs IN ACCESS EXCLUSIVE MODE", "idle in transaction", "migration",
                        xact_age_s=35.0)
    unread = queue(lockers=(locker(),), **UNREAD)
    diagnosed = Diagnoser().diagnose(snapshot(0, [unread], [migration])).queues[0]
    verdict = diagnosed.diagnosis
    assert verdict.code == "blocked" and verdict.pids == (7,) and verdict.objects == ("queuetop.q_jobs",)
    assert "pid 7, idle in transaction, application migration, transaction open 35 s, holding ACCESS EXCLUSIVE on " \
           "queuetop.q_jobs" in verdict.reason
    # Its figures stay unknown beside the verdict (never a zero), and the locker is no consumer.
    assert (diagnosed.depth, diagnosed.ready, diagnosed.dead, diagnosed.error) == (None, None, None, UNREAD["error"])
    assert diagnosed.consumers == ()
    # Read figures change nothing: the lock is the verdict, over anything else (its 40 ready, nobody taking).
    read = queue(depth=40, ready=40, oldest_ready_age_s=90.0, lockers=(locker(),))
    assert Diagnoser().diagnose(snapshot(0, [read], [migration])).queues[0].diagnosis.code == "blocked"
    # Every mode that conflicts with ROW EXCLUSIVE; not one that lets an UPDATE or DELETE through.
    for mode, words in (("ShareLock", "SHARE on"), ("ShareRowExclusiveLock", "SHARE ROW EXCLUSIVE on"),
                        ("ExclusiveLock", "EXCLUSIVE on")):
        verdict = verdicts([snapshot(0, [replace(read, lockers=(locker(mode=mode),))], [migration])])[0]
        assert verdict.code == "blocked" and f"holding {words}" in verdict.reason, mode
    autovacuum = replace(read, lockers=(locker(mode="ShareUpdateExclusiveLock"),))
    assert verdicts([snapshot(0, [autovacuum], [migration])])[0].code != "blocked"
    # Its figures not read and no lock on it: not judged, and why; never healthy.
    verdict = verdicts([snapshot(0, [queue(lockers=(), **UNREAD)])])[0]
    assert verdict.code == "not-judged" and verdict.reason.startswith("its figures could not be read: skipped: lock timeout")


def test_a_lock_taken_a_blink_ago_is_no_verdict_until_it_lasts():
    """A lock in a transaction younger than MIN_WAIT_S (a quick CREATE INDEX, a TRUNCATE) says
    nothing on one sample; still there at the next, or held MIN_WAIT_S, it is the verdict."""
    fresh = queue(depth=3, ready=3, oldest_ready_age_s=1.0, lockers=(locker(xact_age_s=0.3),))
    frames = [snapshot(0, [fresh], [session(30)]), snapshot(1, [replace(fresh, lockers=(locker(xact_age_s=1.3),))], [session(30)])]
    assert [v.code for v in verdicts(frames)] == ["not-judged", "blocked"]
    assert verdicts(frames)[0].reason.endswith("its table locked ACCESS EXCLUSIVE a moment ago by pid 7)")
    # Another locker at the second sample is no evidence for the first.
    other = [frames[0], snapshot(1, [replace(fresh, lockers=(locker(pid=8, xact_age_s=0.2),))], [session(30)])]
    assert verdicts(other)[1].code == "healthy"
    # A locker held a while names whoever waits on the queue with it, even one that just began to.
    just = BlockedSession(pid=30, blocked_by=(7,), root_blocker=7, root_blockers=(7,), wait_s=0.3, lock_type="relation",
                          mode="RowExclusiveLock", relation="q_jobs", query=FETCH, application="worker")
    held = replace(fresh, lockers=(locker(),))
    verdict = verdicts([snapshot(0, [held], [replace(session(30), blocked_by=(7,)), session(7, "LOCK x", "idle in transaction")],
                                 [just])])[0]
    assert verdict.code == "blocked" and verdict.pids == (7, 30) and verdict.since_s == 0.3
    # A consumer seen waiting behind it is evidence enough, on one sample.
    waiter = replace(session(30), blocked_by=(7,))
    wait = BlockedSession(pid=30, blocked_by=(7,), root_blocker=7, root_blockers=(7,), wait_s=4.0, lock_type="relation",
                          mode="RowExclusiveLock", relation="q_jobs", query=FETCH, application="worker")
    verdict = verdicts([snapshot(0, [fresh], [waiter, session(7, "LOCK q_jobs", "idle in transaction")], [wait])])[0]
    assert verdict.code == "blocked" and verdict.pids == (7, 30) and "consumer 30 waits" in verdict.reason
    assert "holding ACCESS EXCLUSIVE" in verdict.reason


def test_a_locker_that_waits_itself_is_blocked_by_the_root_of_its_chain():
    """pid 7 holds the table locked and waits for a row that pid 3 holds, idle: 3 is the root, named
    first; 7 beside it."""
    chain = BlockedSession(pid=7, blocked_by=(3,), root_blocker=3, root_blockers=(3,), wait_s=12.0, lock_type="transactionid",
                           mode="ShareLock", relation="accounts", query="UPDATE accounts SET n = 1", application="migration")
    root = Blocker(pid=3, blocked_count=1, state="idle in transaction", xact_age_s=80.0, query="UPDATE accounts", application="psql")
    sessions = [session(7, "UPDATE accounts SET n = 1", "active", "migration", xact_age_s=40.0),
                session(3, "UPDATE accounts", "idle in transaction", "psql", xact_age_s=80.0)]
    q = queue(lockers=(locker(state="active", xact_age_s=40.0),), **UNREAD)
    verdict = verdicts([snapshot(0, [q], sessions, [chain], [root])])[0]
    assert verdict.code == "blocked" and verdict.pids == (3, 7)
    assert "pid 7, active, application migration, transaction open 40 s, holding ACCESS EXCLUSIVE on queuetop.q_jobs, " \
           "itself waiting for a lock held by pid 3, idle in transaction, application psql, transaction open 80 s" in verdict.reason


def test_a_prepared_transaction_holding_the_table_locked_is_named_by_its_gid():
    q = queue(lockers=(locker(pid=0, gid="billing-7", state=None, application=None, xact_age_s=50.0),), **UNREAD)
    verdict = verdicts([snapshot(0, [q])])[0]
    assert verdict.code == "blocked" and verdict.pids == ()
    assert verdict.objects == ("queuetop.q_jobs", "prepared:billing-7")
    assert "prepared transaction billing-7, prepared 50 s ago, holding ACCESS EXCLUSIVE on queuetop.q_jobs" in verdict.reason


def test_a_lock_on_a_shared_table_blocks_every_queue_in_it():
    """Unlike a shared worker's wait, a table lock stops every queue of the table, ready or not
    (its producers too: nothing can arrive)."""
    lock = (locker(relation="procrastinate_jobs"),)
    frame = snapshot(0, [shared_queue("mail", depth=3, ready=3, lockers=lock), shared_queue("reports", lockers=lock)],
                     [session(7, "LOCK procrastinate_jobs", "idle in transaction", "migration", xact_age_s=35.0)])
    assert {q.name: q.diagnosis.code for q in Diagnoser().diagnose(frame).queues} == {"mail": "blocked", "reports": "blocked"}


def test_lockers_travel_in_the_json():
    frame = Diagnoser().diagnose(snapshot(0, [queue(lockers=(locker(),), **UNREAD)], [session(7, "LOCK x", "idle in transaction")]))
    document = json.loads(json.dumps(frame.to_json()))
    assert document["queues"][0]["lockers"][0] == {"pid": 7, "mode": "AccessExclusiveLock", "relation": "queuetop.q_jobs",
                                                   "state": "idle in transaction", "application": "migration",
                                                   "xact_age_s": 35.0, "waiting": False, "gid": None}
    assert document["queues"][0]["depth"] is None and document["queues"][0]["diagnosis"]["code"] == "blocked"
    assert Snapshot.from_json(document) == frame


# -- no calm that was not judged (point 3) ---------------------------------------------------------

def test_one_sample_says_what_it_can_and_not_judged_for_the_rest():
    assert "not-judged" in CODES
    empty, busy = verdicts([snapshot(0, [queue()])])[0], verdicts([snapshot(0, [queue(depth=5, ready=5)], [session(30)])])[0]
    assert empty.code == busy.code == "not-judged"
    assert empty.reason == "one sample: rates and growth need two (empty, no lock holding it up)"
    assert busy.reason == "one sample: rates and growth need two (5 ready, 1 consumer, no lock holding it up)"
    # Ready messages and nobody: said from the one sample.
    alone = verdicts([snapshot(0, [queue(depth=20, ready=20, oldest_ready_age_s=0.4)])])[0]
    assert alone.code == "no-consumers" and alone.reason.startswith("20 ready and no session takes them")


def test_ready_messages_with_nobody_consuming_are_never_healthy():
    """Over every sequence here, a sample with ready messages, none in flight, none taken and no
    session on the queue (nor one seen in the window) is never judged healthy."""
    sequences = [
        [queue(depth=0, ready=0), queue(depth=4, ready=4, oldest_ready_age_s=0.2), queue(depth=4, ready=4, oldest_ready_age_s=1.2)],
        [queue(depth=4, ready=4, oldest_ready_age_s=0.1)] * 5,
        [queue(depth=0, ready=0)] * 3 + [queue(depth=9, ready=9, oldest_ready_age_s=0.1)],
    ]
    for frames in sequences:
        codes = [v.code for v in verdicts([snapshot(n, [q]) for n, q in enumerate(frames)])]
        assert all(code != "healthy" for code, q in zip(codes, frames, strict=True) if q.ready), codes


def test_workers_that_are_starting_are_not_flashed_starved():
    """The queue empty and unconsumed; messages arrive; workers start a few seconds later: not
    `no-consumers` for the seconds before their first claim (not judged meanwhile, never ok); if
    nobody comes, `no-consumers` once that has held STARVED_HOLD_S."""
    from probes.diagnosis import STARVED_HOLD_S

    arriving = [snapshot(0, [queue()]), snapshot(1, [queue(depth=6, ready=6, oldest_ready_age_s=0.5)]),
                snapshot(2, [queue(depth=12, ready=12, oldest_ready_age_s=1.5)])]
    started = [*arriving, snapshot(3, [queue(depth=9, ready=8, in_flight=1, oldest_ready_age_s=2.5, dequeued_total=3)],
                                   [session(30)]),
               snapshot(4, [queue(depth=2, ready=1, in_flight=1, oldest_ready_age_s=0.5, dequeued_total=12)], [session(30)])]
    codes = [v.code for v in verdicts(started)]
    assert codes == ["not-judged", "not-judged", "not-judged", "healthy", "healthy"]
    assert "no consumer seen yet (1 s)" in verdicts(started)[2].reason
    nobody = [*arriving, snapshot(1 + STARVED_HOLD_S, [queue(depth=12, ready=12, oldest_ready_age_s=STARVED_HOLD_S + 0.5)])]
    assert [v.code for v in verdicts(nobody)][-1] == "no-consumers"
    # Its oldest message waited that long already: said at once.
    late = [snapshot(0, [queue()]), snapshot(1, [queue(depth=2, ready=2, oldest_ready_age_s=STARVED_HOLD_S + 1)])]
    assert verdicts(late)[-1].code == "no-consumers"


# -- the chain behind every verdict (point 4) ----------------------------------------------------------

HORIZON = Connections(total=5, max=100, by_state={}, by_application={}, oldest_xact_age_s=90.0, oldest_xact_pid=20,
                      xmin_holder_pid=20, xmin_holder_age_xids=5000, xmin_holder_application="worker", xmin_holder_kind="session")


def bloating(connections: Connections, sessions=(), blocked=(), blockers=()) -> list[Snapshot]:
    return [snapshot(t, [queue(dead_tuples=d, live_tuples=100)], sessions, blocked, blockers, connections)
            for t, d in ((0, 100), (2, 900))]


def test_bloat_behind_a_holder_that_waits_names_its_root_blocker_first():
    """B (a consumer of another queue, with a snapshot) holds the horizon, and waits for a row A
    holds, idle in its transaction: A, the root, first; B beside it. (A consumer of this queue
    that waits would make it `blocked`.)"""
    b = replace(session(20, 'DELETE FROM queuetop."q_other" WHERE id = 1', "active", "worker", xact_age_s=95.0), blocked_by=(10,))
    a = session(10, "SELECT * FROM queuetop.q_other WHERE id = 1 FOR UPDATE", "idle in transaction", "psql", xact_age_s=60.0)
    wait = BlockedSession(pid=20, blocked_by=(10,), root_blocker=10, root_blockers=(10,), wait_s=50.0, lock_type="transactionid",
                          mode="ShareLock", relation="q_other", query=b.query, application="worker")
    root = Blocker(pid=10, blocked_count=1, state="idle in transaction", xact_age_s=60.0, query=a.query, application="psql")
    verdict = verdicts(bloating(replace(HORIZON, xmin_holder_age_s=95.0), [b, a], [wait], [root]))[1]
    assert verdict.code == "bloat" and verdict.pids == (10, 20)
    assert "kept by the xmin horizon: pid 20, active, application worker, transaction open 95 s (horizon 95 s and 5,000 " \
           "transactions old), itself waiting for a lock held by pid 10, idle in transaction, application psql, " \
           "transaction open 60 s" in verdict.reason


def test_bloat_behind_a_standbys_feedback_names_the_standby_and_the_horizons_age():
    """A walsender has no transaction age: the horizon's own age says it is held."""
    feedback = replace(HORIZON, xmin_holder_pid=4711, xmin_holder_kind="standby", xmin_holder_name="replica-1",
                       xmin_holder_application="replica-1", xmin_holder_client="10.0.0.7", xmin_holder_age_s=95.0,
                       xmin_holder_age_xids=24_000)
    verdict = verdicts(bloating(feedback))[1]
    assert verdict.code == "bloat" and verdict.pids == () and verdict.objects == (TABLE, "standby:replica-1")
    assert "kept by the xmin horizon: standby feedback from replica-1 at 10.0.0.7 (horizon 95 s and 24,000 " \
           "transactions old)" in verdict.reason
    # A horizon that moves (its age under HORIZON_HELD_S, or not yet known to be older): not held.
    assert verdicts(bloating(replace(feedback, xmin_holder_age_s=4.0)))[1].code == "healthy"
    assert verdicts(bloating(replace(feedback, xmin_holder_age_s=6.0, xmin_holder_age_at_least=True)))[1].code == "healthy"
    older = verdicts(bloating(replace(feedback, xmin_holder_age_s=45.0, xmin_holder_age_at_least=True)))[1]
    assert older.code == "bloat" and "horizon at least 45 s and 24,000 transactions old" in older.reason
    # A slot a standby streams from: the slot, and the standby.
    slot = replace(feedback, xmin_holder_pid=None, xmin_holder_kind="slot", xmin_holder_name="replica_slot")
    verdict = verdicts(bloating(slot))[1]
    assert verdict.code == "bloat" and verdict.objects == (TABLE, "slot:replica_slot")
    assert "kept by the xmin horizon: slot replica_slot (standby replica-1) (horizon 95 s" in verdict.reason


def test_a_bursty_backlog_that_grows_is_behind_though_it_falls_between_bursts():
    """1.6k → 11.5k in 40 s: a burst of 1,500 every 4 s, drained at 120/s between them, the backlog
    falling in three samples of each four. One falling sample used to reset the rule."""
    busy = [session(50), session(51)]
    frames, depth, arrived, left = [], 1600, 0, 0
    for t in range(41):
        if t and t % 4 == 0:
            depth, arrived = depth + 1500, arrived + 1500
        elif t:
            depth, left = depth - 120, left + 120
        frames.append(snapshot(t, [queue(depth=depth, ready=depth, enqueued_total=arrived, dequeued_total=left)], busy))
    assert frames[-1].queues[0].depth > 11_000 and frames[-1].queues[0].depth - frames[0].queues[0].depth > 9_000
    codes = [v.code for v in verdicts(frames)]
    assert "saturated" in codes[: 16]  # within SATURATED_MIN_S and a few samples
    first = codes.index("saturated")
    assert set(codes[first:]) == {"saturated"}, codes  # and it stays, through every fall
    # A burst that comes and is drained is not behind, nor bursts that are drained each time.
    drained = [snapshot(t, [queue(depth=d, ready=d, enqueued_total=3000 if t >= 5 else 0, dequeued_total=3000 - d if t >= 5 else 0)],
                        busy) for t, d in ((t, 0 if t < 5 else max(0, 3000 - 60 * (t - 5))) for t in range(60))]
    assert "saturated" not in {v.code for v in verdicts(drained)}
    periodic = [snapshot(t, [queue(depth=d, ready=d, enqueued_total=500 * (t // 15 + 1), dequeued_total=500 * (t // 15 + 1) - d)],
                         busy) for t, d in ((t, max(0, 500 - 100 * (t % 15))) for t in range(90))]
    assert "saturated" not in {v.code for v in verdicts(periodic)}
    # A churn starting on 10 waiting jobs: filled to 50-80 in its first second, then swinging there
    # (pg-boss's producer and worker, CI's run of test_diagnosis_pgboss): its low points may rise by
    # the swing (10, 40, 50), but its floor never passes what it reached at first: not behind.
    swings = [10, 10, 60, 70, 50, 70, 50, 70, 80, 60, 70, 50, 70, 50, 70, 50, 70, 40, 60, 80, 60, 80, 60, 80, 50, 60, 60]
    churn = [snapshot(t, [queue(depth=d, ready=d, enqueued_total=55 * t + d, dequeued_total=55 * t)], busy) for t, d in enumerate(swings)]
    assert "saturated" not in {v.code for v in verdicts(churn)}, [v.code for v in verdicts(churn)]


def test_a_queue_whose_every_message_dies_stays_failing_while_nothing_completes():
    """Every message dies: failing. Then nothing arrives any more: still failing (the window no
    longer sees deaths, but nothing has succeeded), saying so. A message that completes ends it."""
    busy = [session(61)]
    dying = [snapshot(t, [queue(depth=2, ready=2, dead=5 * t, dequeued_total=5 * t, enqueued_total=5 * t + 2)], busy)
             for t in range(0, 10, 2)]
    quiet = [snapshot(t, [queue(depth=0, ready=0, dead=40, dequeued_total=42, enqueued_total=42)], busy) for t in range(10, 200, 10)]
    codes = [v.code for v in verdicts(dying + quiet)]
    assert codes[0] == "not-judged" and set(codes[1:]) == {"failing"}, codes
    last = verdicts(dying + quiet)[-1]
    assert "none has completed in the" in last.reason and "nothing arrived since: its last messages all died" in last.reason
    # New messages keep dying: failing, each death counted.
    still = dying + quiet + [snapshot(200, [queue(depth=1, ready=1, dead=43, dequeued_total=45, enqueued_total=46)], busy)]
    assert verdicts(still)[-1].code == "failing"
    # One completes: no longer failing.
    done = dying + quiet + [snapshot(200, [queue(depth=0, ready=0, dead=40, dequeued_total=43, enqueued_total=43)], busy)]
    assert verdicts(done)[-1].code == "healthy"
