"""Declared job tables (`[[queues]]`): every state a job can be in, shared tables, views,
partitioned parents, dead-letter tables, counts past the cap, row-level security. Every figure
is checked against ground truth computed in SQL by the test itself."""

from __future__ import annotations

import threading

import psycopg
import pytest
from psycopg import sql

from probes.config import Config, DeclaredQueue
from probes.postgres import PostgresProbes, open_probe_connection
from probes.sampler import run_cycle
from probes.sources.jobtable import JobTable
from probes.sources.tally import CycleTallies, cycle_budget

from .conftest import PASSWORD, PASSWORD_ROLE, wait_until

JOBS = """
CREATE TABLE public.jobs (
    id bigserial PRIMARY KEY,
    queue_name text NOT NULL,
    status text NOT NULL,
    scheduled_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX jobs_queue_status ON public.jobs (queue_name, status);
CREATE INDEX jobs_status ON public.jobs (status);
"""


def queues_of(db, *declared: DeclaredQueue, target=None) -> dict[str, object]:
    snap = run_cycle(target or db.target, Config(queues=declared))
    return {q.name: q for q in snap.queues if q.source == "table"}, snap


def truth(conn, query: str, *params) -> int:
    return conn.execute(query, params).fetchone()[0]


SHARED = DeclaredQueue(
    name="jobs", table="public.jobs", order_by="id", age_column="created_at", queue_column="queue_name",
    not_before_column="scheduled_at", state_column="status", ready_states=("todo",), in_flight_states=("doing",),
    done_states=("succeeded", "cancelled"), dead_states=("failed",),
)


def test_a_shared_table_shows_one_row_per_queue_with_every_state_right(db):
    with db.connect() as conn:
        conn.execute(JOBS)
        conn.execute("""
            INSERT INTO public.jobs (queue_name, status, scheduled_at, created_at)
            SELECT 'mail', 'todo', NULL, now() - interval '90 seconds' FROM generate_series(1, 3)   -- ready
            UNION ALL SELECT 'mail', 'todo', now() + interval '1 hour', now() FROM generate_series(1, 2)  -- scheduled
            UNION ALL SELECT 'mail', 'todo', now() - interval '1 minute', now() - interval '30 seconds'  -- due: ready
            UNION ALL SELECT 'mail', 'doing', NULL, now() FROM generate_series(1, 4)              -- running
            UNION ALL SELECT 'mail', 'failed', NULL, now() FROM generate_series(1, 2)             -- dead
            UNION ALL SELECT 'mail', 'succeeded', NULL, now() FROM generate_series(1, 500)        -- done, kept
            UNION ALL SELECT 'sms', 'todo', NULL, now() - interval '5 seconds'
            UNION ALL SELECT 'sms', 'cancelled', NULL, now()""")
        ground = {
            queue: {
                "ready": truth(conn, "SELECT count(*) FROM jobs WHERE queue_name = %s AND status = 'todo'"
                                     " AND (scheduled_at IS NULL OR scheduled_at <= now())", queue),
                "delayed": truth(conn, "SELECT count(*) FROM jobs WHERE queue_name = %s AND status = 'todo'"
                                       " AND scheduled_at > now()", queue),
                "in_flight": truth(conn, "SELECT count(*) FROM jobs WHERE queue_name = %s AND status = 'doing'", queue),
                "dead": truth(conn, "SELECT count(*) FROM jobs WHERE queue_name = %s AND status = 'failed'", queue),
            }
            for queue in ("mail", "sms")
        }
    rows, snap = queues_of(db, SHARED)
    assert set(rows) == {"jobs:mail", "jobs:sms"}
    for queue in ("mail", "sms"):
        q = rows[f"jobs:{queue}"]
        g = ground[queue]
        assert (q.ready, q.delayed, q.in_flight, q.dead) == (g["ready"], g["delayed"], g["in_flight"], g["dead"])
        assert q.depth == g["ready"] + g["delayed"] + g["in_flight"]  # done and dead rows are not in depth
        assert q.depth_is_estimate is False and q.error is None
    assert rows["jobs:mail"].ready == 4 and rows["jobs:mail"].delayed == 2  # scheduled is delayed, not in flight
    assert 85 <= rows["jobs:mail"].oldest_ready_age_s <= 120
    assert rows["jobs:mail"].enqueued_per_s is None  # a shared table's counters are no one queue's
    assert snap.probes["queues"].error is None


def test_in_flight_rows_deep_in_a_large_table_are_counted(db):
    # The old probe read a 1,000-row head and took every row past it to be ready.
    with db.connect() as conn:
        conn.execute(JOBS)
        conn.execute("INSERT INTO jobs (queue_name, status) SELECT 'q', 'todo' FROM generate_series(1, 3000)")
        conn.execute("INSERT INTO jobs (queue_name, status) SELECT 'q', 'doing' FROM generate_series(1, 6)")
    declared = DeclaredQueue(name="deep", table="public.jobs", order_by="id", state_column="status",
                             ready_states=("todo",), in_flight_states=("doing",))
    rows, _ = queues_of(db, declared)
    assert (rows["deep"].ready, rows["deep"].in_flight, rows["deep"].depth) == (3000, 6, 3006)


BIG = """
CREATE TABLE public.big (id bigserial PRIMARY KEY, queue_name text NOT NULL, status text NOT NULL,
                         scheduled_at timestamptz, created_at timestamptz NOT NULL DEFAULT now());
CREATE INDEX big_waiting ON public.big (queue_name, id) WHERE status IN ('todo', 'failed');
CREATE INDEX big_status ON public.big (status) WHERE status IN ('doing', 'failed');
"""
BIG_DECLARED = DeclaredQueue(name="big", table="public.big", order_by="id", queue_column="queue_name",
                             not_before_column="scheduled_at", state_column="status", ready_states=("todo",),
                             in_flight_states=("doing",), done_states=("succeeded",), dead_states=("failed",))


def big_truth(conn) -> dict[str, tuple[int, int, int, int]]:
    """queue -> (ready, in_flight, delayed, dead), counted over the whole table."""
    rows = conn.execute("""SELECT queue_name,
                                  count(*) FILTER (WHERE status = 'todo' AND coalesce(scheduled_at <= now(), true)),
                                  count(*) FILTER (WHERE status = 'doing'),
                                  count(*) FILTER (WHERE status = 'todo' AND scheduled_at > now()),
                                  count(*) FILTER (WHERE status = 'failed')
                           FROM big WHERE status <> 'succeeded' GROUP BY queue_name""").fetchall()
    return {r[0]: tuple(r[1:]) for r in rows}


def fill_big(conn) -> None:
    """150,000 rows with correlated queues and states: one queue holds the backlog, one only
    finished jobs, a third a few of everything; two thirds of the schedule in one hour."""
    conn.execute(BIG)
    # No autovacuum of it: its VACUUM after these inserts reads every page, which heap_blocks
    # (the database's counters for the table) would count as the probe's (a CI run saw 3,399).
    conn.execute("ALTER TABLE big SET (autovacuum_enabled = false)")
    conn.execute("""INSERT INTO big (queue_name, status, scheduled_at)
                    SELECT CASE WHEN g <= 120000 THEN 'backlog' WHEN g <= 140000 THEN 'finished' ELSE 'mixed' END,
                           CASE WHEN g <= 120000 THEN 'todo' WHEN g <= 140000 THEN 'succeeded'
                                WHEN g <= 140300 THEN 'doing' WHEN g <= 140307 THEN 'failed' ELSE 'todo' END,
                           CASE WHEN g > 140307 AND g % 3 <> 0 THEN now() + interval '1 hour' END
                    FROM generate_series(1, 150000) AS g""")
    conn.execute("ANALYZE big")


def figures_of(rows) -> dict[str, tuple[int, int, int, int]]:
    return {q.name.removeprefix("big:"): (q.ready, q.in_flight, q.delayed, q.dead) for q in rows}


def test_a_table_within_the_cycles_budget_is_exact_in_every_queue_and_state(db):
    # The planner takes queue and state to be independent: it put ~25,000 ready jobs in the queue
    # that holds only finished ones, and never says 0. The tally counts.
    with db.connect() as conn:
        fill_big(conn)
        truth_rows = big_truth(conn)
    with open_probe_connection(db.target) as conn:
        rows = JobTable(BIG_DECLARED).sample(conn)
    assert figures_of(rows) == {**truth_rows, "finished": (0, 0, 0, 0)} or figures_of(rows) == truth_rows
    assert truth_rows["backlog"] == (120_000, 0, 0, 0) and truth_rows["mixed"][1:] == (300, 6462, 7)
    assert not any(q.depth_is_estimate or q.estimated for q in rows)


def heap_blocks(conn, table: str) -> int:
    """Heap blocks of `table` this database has read (hits and reads), with what the session
    `conn` read itself flushed first (a probe session's counters otherwise reach the statistics
    only once it has been idle a while)."""
    conn.execute("SELECT pg_stat_force_next_flush()")
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute("SELECT heap_blks_read + heap_blks_hit AS n FROM pg_statio_user_tables WHERE relid = %s::regclass",
                       (table,)).fetchone()
    return int(row["n"])


def test_a_table_past_the_budget_is_counted_in_turns_and_its_small_states_stay_exact(db):
    with db.connect() as conn:
        fill_big(conn)
        truth_rows = big_truth(conn)
        pages = conn.execute("SELECT pg_relation_size('big') / 8192").fetchone()[0]
    budget = 128  # pages a cycle: the table has ~8 times more
    assert pages > 6 * budget
    table = JobTable(BIG_DECLARED)
    with open_probe_connection(db.target) as conn:
        blocks = heap_blocks(conn, "big")
        with cycle_budget(budget):
            first = {q.name: q for q in table.sample(conn)}
        read = heap_blocks(conn, "big") - blocks
        # One chunk of pages and the small states' bounded reads: not the table.
        assert read <= budget + 2 * 320, (read, pages)
        # 'doing' and 'failed' are read whole through their index: exact now, in every queue.
        assert first["big:mixed"].in_flight == 300 and first["big:mixed"].dead == 7
        assert "in_flight" not in first["big:mixed"].estimated and "dead" not in first["big:mixed"].estimated
        # The rest is extrapolated from the pages read so far: flagged, with no count behind it.
        assert first["big:backlog"].estimated["ready"] is None and first["big:backlog"].depth_is_estimate
        cycles = 1
        while True:
            with cycle_budget(budget):
                rows = table.sample(conn)
            cycles += 1
            if cycles > pages // budget + 1:
                break
        assert figures_of(rows) == {**truth_rows, "finished": (0, 0, 0, 0)} or figures_of(rows) == truth_rows
        backlog = {q.name: q for q in rows}["big:backlog"]
        age = backlog.estimated["ready"]
        assert backlog.depth_is_estimate and age is not None and 0 <= age < 120  # an exact count, this old
        # Jobs move: the small states are exact at once, the big ones as the pass comes round.
        with db.connect() as writer:
            writer.execute("UPDATE big SET status = 'failed' WHERE id IN (SELECT id FROM big WHERE status = 'doing' LIMIT 10)")
        with cycle_budget(budget):
            moved = {q.name: q for q in table.sample(conn)}
        assert (moved["big:mixed"].in_flight, moved["big:mixed"].dead) == (290, 17)


def test_an_empty_queue_and_an_empty_state_are_exact_zeros_never_a_phantom(db):
    with db.connect() as conn:
        fill_big(conn)
    with open_probe_connection(db.target) as conn:
        rows = {q.name: q for q in JobTable(BIG_DECLARED).sample(conn, queues=["backlog", "finished", "idle"])}
    for name in ("big:finished", "big:idle"):
        assert (rows[name].ready, rows[name].in_flight, rows[name].delayed, rows[name].dead, rows[name].depth) == (0,) * 5
    assert (rows["big:backlog"].in_flight, rows["big:backlog"].dead, rows["big:backlog"].delayed) == (0, 0, 0)


def test_a_scheduled_share_in_due_order_is_counted_not_sampled(db):
    # pg-boss's shape: the waiting jobs' index is in due order (name, start_after), so a bounded
    # read through it meets every due job before the first scheduled one.
    with db.connect() as conn:
        conn.execute("""CREATE TABLE public.due (id bigserial PRIMARY KEY, name text NOT NULL, state text NOT NULL,
                                                 start_after timestamptz NOT NULL DEFAULT now());
                        CREATE INDEX due_fetch ON public.due (name, start_after) WHERE state = 'created'""")
        conn.execute("""INSERT INTO due (name, state, start_after)
                        SELECT CASE WHEN g % 2 = 0 THEN 'a' ELSE 'b' END,
                               CASE WHEN g % 5 = 0 THEN 'completed' ELSE 'created' END,
                               CASE WHEN g % 10 IN (1, 2) THEN now() + interval '1 hour' ELSE now() - interval '1 minute' END
                        FROM generate_series(1, 150000) AS g""")
        conn.execute("ANALYZE due")
        truth_rows = conn.execute("""SELECT name, count(*) FILTER (WHERE start_after > now()) AS later, count(*) AS waiting
                                     FROM due WHERE state = 'created' GROUP BY name""").fetchall()
    declared = DeclaredQueue(name="due", table="public.due", order_by="id", queue_column="name", state_column="state",
                             not_before_column="start_after", age_column="start_after", ready_states=("created",),
                             done_states=("completed",))
    with open_probe_connection(db.target) as conn:
        rows = {q.name: q for q in JobTable(declared).sample(conn)}
    for name, later, waiting in truth_rows:  # 60,000 waiting, 15,000 of them later (a quarter)
        q = rows[f"due:{name}"]
        assert (q.depth, q.delayed, q.depth_is_estimate) == (waiting, later, False)
        assert q.oldest_ready_age_s is not None and 55 <= q.oldest_ready_age_s <= 300, q.oldest_ready_age_s


def test_a_large_shared_table_led_by_state_then_queue_lists_every_queue(db):
    # River's shape without its river_queue registry: the only index is (state, queue, ...), so
    # the queues are found by skipping through each state's, not from what a 200-row sample of
    # the big 'available' state meets (its first queue only).
    with db.connect() as conn:
        conn.execute("""CREATE TABLE public.rj (id bigserial PRIMARY KEY, queue text NOT NULL, state text NOT NULL);
                        CREATE INDEX rj_fetch ON public.rj (state, queue, id)""")
        conn.execute("""INSERT INTO rj (queue, state)
                        SELECT 'q' || (g % 3), CASE WHEN g % 100 = 0 THEN 'running' ELSE 'available' END
                        FROM generate_series(1, 120000) AS g""")
        conn.execute("INSERT INTO rj (queue, state) VALUES ('rare', 'running')")
        conn.execute("ANALYZE rj")
    declared = DeclaredQueue(name="rj", table="public.rj", order_by="id", queue_column="queue", state_column="state",
                             ready_states=("available",), in_flight_states=("running",))
    with open_probe_connection(db.target) as conn:
        rows = {q.name: q for q in JobTable(declared).sample(conn)}
    assert sorted(rows) == ["rj:q0", "rj:q1", "rj:q2", "rj:rare"]
    for name in ("rj:q0", "rj:q1", "rj:q2"):  # 39,600 available each
        assert 0.85 * 39_600 <= rows[name].ready <= 1.15 * 39_600, (name, rows[name].ready)


def test_a_partitioned_parent_is_counted_partition_by_partition_and_keeps_its_schedule(db):
    with db.connect() as conn:
        conn.execute("""CREATE TABLE public.pj (id bigserial, name text NOT NULL, state text NOT NULL, start_after timestamptz)
                        PARTITION BY LIST (name);
                        CREATE TABLE public.pj_a PARTITION OF public.pj FOR VALUES IN ('a');
                        CREATE TABLE public.pj_b PARTITION OF public.pj FOR VALUES IN ('b');
                        CREATE INDEX ON public.pj (state); CREATE INDEX ON public.pj (name)""")
        conn.execute("""INSERT INTO pj (name, state, start_after)
                        SELECT n, 'created', CASE WHEN g % 10 = 0 THEN now() + interval '1 hour' END
                        FROM (VALUES ('a'), ('b')) AS q(n), generate_series(1, 30000) AS g""")
        conn.execute("ANALYZE pj")
    declared = DeclaredQueue(name="p", table="public.pj", order_by="id", queue_column="name", state_column="state",
                             not_before_column="start_after", ready_states=("created",))
    table = JobTable(declared, cap=500, chunk_pages=8)
    with open_probe_connection(db.target) as conn:
        rows = {q.name: q for q in table.sample(conn)}
        with cycle_budget(16):  # pages a cycle (two chunks, one of each partition): each has ~160
            for _ in range(40):
                later = {q.name: q for q in table.sample(conn)}
    for name in ("p:a", "p:b"):  # 30,000 each, a tenth scheduled
        assert (rows[name].depth, rows[name].delayed, rows[name].depth_is_estimate) == (30_000, 3_000, False)
        assert (later[name].depth, later[name].delayed, later[name].depth_is_estimate) == (30_000, 3_000, True)


def test_a_stateless_table_is_counted_whole_and_its_few_marked_rows_exact(db):
    with db.connect() as conn:
        conn.execute("""CREATE TABLE public.big (id bigserial PRIMARY KEY, run_at timestamptz NOT NULL DEFAULT now(),
                        locked_at timestamptz);
                        CREATE INDEX ON public.big (locked_at) WHERE locked_at IS NOT NULL""")
        conn.execute("INSERT INTO big (run_at) SELECT now() - interval '1 s' FROM generate_series(1, 5000)")
        conn.execute("INSERT INTO big (locked_at) SELECT now() FROM generate_series(1, 7)")
        conn.execute("INSERT INTO big (run_at) SELECT now() + interval '1 h' FROM generate_series(1, 3)")
        conn.execute("ANALYZE big")
    declared = DeclaredQueue(name="big", table="public.big", order_by="id", not_before_column="run_at",
                             in_flight_when_not_null="locked_at")
    with open_probe_connection(db.target) as conn:
        [q] = JobTable(declared, cap=200).sample(conn)
    assert (q.ready, q.in_flight, q.delayed, q.depth_is_estimate) == (5000, 7, 3, False)


def test_a_job_table_without_states_locked_scheduled_backing_off_and_exhausted(db):
    # Graphile Worker's shape: no state column; locked_at, run_at, attempts, max_attempts.
    with db.connect() as conn:
        conn.execute("""CREATE TABLE public.gw (
            id bigserial PRIMARY KEY, task text NOT NULL, run_at timestamptz NOT NULL DEFAULT now(),
            locked_at timestamptz, attempts int NOT NULL DEFAULT 0, max_attempts int NOT NULL DEFAULT 3,
            created_at timestamptz NOT NULL DEFAULT now())""")
        conn.execute("""
            INSERT INTO gw (task, run_at, locked_at, attempts) VALUES
              ('t', now() - interval '10 s', NULL, 0),            -- ready
              ('t', now() - interval '10 s', NULL, 1),            -- ready again after a failure
              ('t', now(), now(), 1),                             -- locked: in flight
              ('t', now() + interval '1 h', NULL, 0),             -- scheduled: delayed
              ('t', now() + interval '30 s', NULL, 2),            -- backing off: delayed
              ('t', now() - interval '1 h', NULL, 3),             -- attempts exhausted: dead
              ('t', now(), now(), 3)                              -- exhausted but running: in flight""")
    declared = DeclaredQueue(name="gw", table="public.gw", order_by="id", age_column="run_at",
                             not_before_column="run_at", in_flight_when_not_null="locked_at",
                             attempts_column="attempts", max_attempts_column="max_attempts")
    rows, _ = queues_of(db, declared)
    q = rows["gw"]
    assert (q.ready, q.in_flight, q.delayed, q.dead, q.depth) == (2, 2, 2, 1, 6)
    assert q.depth_is_estimate is False


def test_visibility_with_attempts_and_a_dead_letter_table(db):
    # PGMQ's shape: vt ahead means read (in flight) when read_ct > 0, sent with a delay when 0;
    # the archive table holds the dead.
    with db.connect() as conn:
        conn.execute("""CREATE TABLE public.q_x (msg_id bigserial PRIMARY KEY, read_ct int NOT NULL DEFAULT 0,
                        enqueued_at timestamptz NOT NULL DEFAULT now(), vt timestamptz NOT NULL DEFAULT now());
                        CREATE TABLE public.a_x (msg_id bigint PRIMARY KEY, archived_at timestamptz DEFAULT now())""")
        conn.execute("""INSERT INTO q_x (read_ct, vt) VALUES (0, now() - interval '1 s'), (2, now() - interval '1 s'),
                        (1, now() + interval '30 s'), (0, now() + interval '5 min')""")
        conn.execute("INSERT INTO a_x (msg_id) SELECT g FROM generate_series(100, 104) g")
    declared = DeclaredQueue(name="x", table="public.q_x", order_by="msg_id", age_column="enqueued_at",
                             visible_at_column="vt", attempts_column="read_ct", dead_letter_table="public.a_x")
    rows, _ = queues_of(db, declared)
    q = rows["x"]
    assert (q.ready, q.in_flight, q.delayed, q.dead, q.depth) == (2, 1, 1, 5, 4)


def test_a_view_and_a_partitioned_parent_are_accepted_and_exact(db):
    with db.connect() as conn:
        conn.execute("""CREATE TABLE public.pjobs (id bigserial, name text NOT NULL, state text NOT NULL)
                        PARTITION BY LIST (name);
                        CREATE TABLE public.pjobs_a PARTITION OF public.pjobs FOR VALUES IN ('a');
                        CREATE TABLE public.pjobs_b PARTITION OF public.pjobs FOR VALUES IN ('b');
                        CREATE INDEX ON public.pjobs (name, state)""")
        conn.execute("""INSERT INTO pjobs (name, state) SELECT 'a', 'created' FROM generate_series(1, 1300)
                        UNION ALL SELECT 'b', 'created' FROM generate_series(1, 1077)
                        UNION ALL SELECT 'b', 'completed' FROM generate_series(1, 40)""")
        conn.execute("CREATE VIEW public.pending_b AS SELECT id, state FROM pjobs WHERE name = 'b'")
        total = truth(conn, "SELECT count(*) FROM pjobs WHERE state = 'created'")
    parent = DeclaredQueue(name="p", table="public.pjobs", order_by="id", queue_column="name", state_column="state",
                           ready_states=("created",), done_states=("completed",))
    view = DeclaredQueue(name="v", table="public.pending_b", order_by="id", state_column="state",
                         ready_states=("created",), done_states=("completed",))
    rows, _ = queues_of(db, parent, view)
    assert (rows["p:a"].depth, rows["p:b"].depth, rows["v"].depth) == (1300, 1077, 1077)
    assert rows["p:a"].depth + rows["p:b"].depth == total
    assert not any(rows[k].depth_is_estimate for k in ("p:a", "p:b", "v"))


def test_an_enum_state_with_no_ready_list_reads_every_other_label(db):
    with db.connect() as conn:
        conn.execute("""CREATE TYPE job_state AS ENUM ('available', 'scheduled', 'running', 'completed', 'discarded');
                        CREATE TABLE public.rj (id bigserial PRIMARY KEY, state job_state NOT NULL);
                        CREATE INDEX ON public.rj (state)""")
        conn.execute("""INSERT INTO rj (state) VALUES ('available'), ('available'), ('scheduled'), ('running'),
                        ('completed'), ('completed'), ('discarded')""")
    declared = DeclaredQueue(name="rj", table="public.rj", order_by="id", state_column="state",
                             in_flight_states=("running",), done_states=("completed",), dead_states=("discarded",))
    rows, _ = queues_of(db, declared)
    # 'available' and 'scheduled' are the other labels: ready (no time column says otherwise).
    assert (rows["rj"].ready, rows["rj"].in_flight, rows["rj"].dead) == (3, 1, 1)


def test_a_row_held_by_an_open_transaction_is_in_flight(db):
    with db.connect() as conn:
        conn.execute(JOBS)
        conn.execute("INSERT INTO jobs (queue_name, status) SELECT 'q', 'todo' FROM generate_series(1, 3)")
    holder = db.connect(autocommit=False)
    try:
        holder.execute("SELECT id FROM jobs ORDER BY id LIMIT 1 FOR UPDATE")
        declared = DeclaredQueue(name="held", table="public.jobs", order_by="id", state_column="status",
                                 ready_states=("todo",))
        rows, _ = queues_of(db, declared)
        assert (rows["held"].ready, rows["held"].in_flight) == (2, 1)
    finally:
        holder.close()


def _limited_target(db):
    from dbcore.database import resolve_target

    with db.connect() as conn:
        conn.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(sql.Identifier(db.name), sql.Identifier(PASSWORD_ROLE)))
    return resolve_target(db.dsn.replace("postgres@", f"{PASSWORD_ROLE}:{PASSWORD}@"))


def test_row_level_security_that_hides_rows_is_said_not_shown_as_zero(db):
    with db.connect() as conn:
        conn.execute(JOBS)
        conn.execute("INSERT INTO jobs (queue_name, status) SELECT 'q', 'todo' FROM generate_series(1, 300)")
        conn.execute("ALTER TABLE jobs ENABLE ROW LEVEL SECURITY")  # and no policy: a non-owner sees nothing
        conn.execute(sql.SQL("GRANT SELECT ON public.jobs TO {}").format(sql.Identifier(PASSWORD_ROLE)))
        conn.execute("ANALYZE jobs")
    declared = DeclaredQueue(name="rls", table="public.jobs", order_by="id", state_column="status", ready_states=("todo",))
    target = _limited_target(db)
    rows, snap = queues_of(db, declared, target=target)
    assert rows["rls"].depth == 0  # what this role can see ...
    note = snap.probes["queues"].notes
    assert "rls: row-level security hides rows from this role: 0 visible of ~300 live" in note  # ... and that it is not all
    assert "row-level security" not in (snap.probes["queues"].error or "")  # a note, not a failure
    owner_rows, owner_snap = queues_of(db, declared)  # the owner is not subject to it
    assert owner_rows["rls"].depth == 300 and owner_snap.probes["queues"].notes is None


def test_no_select_privilege_is_reported_on_the_row(db):
    with db.connect() as conn:
        conn.execute(JOBS)
        conn.execute("INSERT INTO jobs (queue_name, status) VALUES ('q', 'todo')")
    declared = DeclaredQueue(name="hidden", table="public.jobs", order_by="id", state_column="status", ready_states=("todo",))
    rows, snap = queues_of(db, declared, target=_limited_target(db))
    assert rows["hidden"].depth is None and "no SELECT privilege" in rows["hidden"].error
    assert "no SELECT privilege" in snap.probes["queues"].error


def test_dequeue_rates_come_from_arrivals_when_finished_rows_stay(db):
    # A table whose jobs are UPDATEd to done (never deleted): out/s is what arrived and is no
    # longer waiting, not zero.
    with db.connect() as conn:
        conn.execute(JOBS)
    declared = DeclaredQueue(name="rated", table="public.jobs", order_by="id", state_column="status",
                             ready_states=("todo",), done_states=("succeeded",))
    probes = PostgresProbes(Config(queues=(declared,)))
    run_cycle(db.target, probes=probes)
    with db.connect() as conn:
        conn.execute("INSERT INTO jobs (queue_name, status) SELECT 'q', 'todo' FROM generate_series(1, 40)")
        conn.execute("UPDATE jobs SET status = 'succeeded' WHERE id IN (SELECT id FROM jobs ORDER BY id LIMIT 30)")

    def rated():
        [q] = [q for q in run_cycle(db.target, probes=probes).queues if q.name == "rated"]
        return q if q.inserted_total == 40 else None  # the statistics have caught up

    q = wait_until(rated, timeout=15, interval=0.3, what="statistics of 40 inserts")
    assert q.depth == 10
    # The first sample after the inserts saw 40 arrivals and a depth 10 higher: 30 left.
    assert q.enqueued_per_s > 0 and q.dequeued_per_s == pytest.approx(q.enqueued_per_s * 30 / 40, rel=1e-6)


def test_a_lock_on_the_table_is_a_note_on_its_row_and_the_other_queues_go_on(db):
    with db.connect() as conn:
        conn.execute(JOBS)
        conn.execute("CREATE TABLE public.other (id bigserial PRIMARY KEY)")
        conn.execute("INSERT INTO other DEFAULT VALUES")
    locker = db.connect(autocommit=False)
    try:
        locker.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
        locked = DeclaredQueue(name="locked", table="public.jobs", order_by="id", state_column="status", ready_states=("todo",))
        free = DeclaredQueue(name="free", table="public.other", order_by="id")
        rows, snap = queues_of(db, locked, free)
        assert rows["free"].depth == 1
        assert "lock timeout" in snap.probes["queues"].error
    finally:
        locker.close()


def test_configured_names_never_become_sql(db):
    with db.connect() as conn:
        conn.execute(JOBS)
    hostile = DeclaredQueue(name="h", table="public.jobs", order_by="id", queue_column='queue_name"; DROP TABLE jobs; --')
    rows, _ = queues_of(db, hostile)
    assert "queue_column column" in rows["h"].error
    with db.connect() as conn:
        assert conn.execute("SELECT to_regclass('public.jobs') IS NOT NULL").fetchone()[0]


@pytest.mark.parametrize("threads", [4])
def test_a_job_moving_between_states_while_the_probe_reads_is_counted_once(db, threads):
    """Real threads move jobs todo -> doing while the probe samples. The jobs only change state,
    so every sample must count exactly 400: the per-state reads share one snapshot (read one
    after the other, a job seen as todo and then, moved, as doing would count twice)."""
    with db.connect() as conn:
        conn.execute(JOBS)
        conn.execute("INSERT INTO jobs (queue_name, status) SELECT 'q', 'todo' FROM generate_series(1, 400)")
    stop = threading.Event()

    def work():
        with db.connect() as conn:
            while not stop.is_set():
                row = conn.execute("UPDATE jobs SET status = 'doing' WHERE id = (SELECT id FROM jobs WHERE status = 'todo'"
                                   " ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id").fetchone()
                if row is None:
                    return

    workers = [threading.Thread(target=work, daemon=True) for _ in range(threads)]
    for w in workers:
        w.start()
    declared = DeclaredQueue(name="moving", table="public.jobs", order_by="id", state_column="status",
                             ready_states=("todo",), in_flight_states=("doing",), done_states=("succeeded",))
    probes = PostgresProbes(Config(queues=(declared,)))
    samples = 0
    try:
        while any(w.is_alive() for w in workers) or samples < 3:
            [q] = [q for q in run_cycle(db.target, probes=probes).queues if q.name == "moving"]
            assert q.error is None
            # A job being claimed is locked in its todo row: in flight either way.
            assert (q.depth, q.ready + q.in_flight) == (400, 400), (q.ready, q.in_flight)
            samples += 1
    finally:
        stop.set()
        for w in workers:
            w.join(10)
    assert samples >= 3
    with psycopg.connect(db.dsn) as conn:
        assert truth(conn, "SELECT count(*) FROM jobs WHERE status = 'doing'") == 400


def test_a_time_budget_reads_a_chunk_only_when_a_tables_credit_pays_for_it(db):
    # The probes' budget: 1 ms of tally a cycle for all tables (here one). A chunk of this table
    # costs more than a cycle's share, so most cycles read no page of it; the credit adds up, a
    # chunk is read every few cycles, and the pass still comes round to the exact counts.
    with db.connect() as conn:
        fill_big(conn)
        truth_rows = big_truth(conn)
    table = JobTable(BIG_DECLARED, chunk_pages=64)
    tallies = CycleTallies(ms=1.0)
    with open_probe_connection(db.target) as conn:
        with tallies.cycle():
            table.sample(conn)  # the first cycle: the whole table, as one snapshot would
        idle = reading = 0
        for _ in range(400):
            before = heap_blocks(conn, "big")
            with tallies.cycle():
                rows = table.sample(conn)
            read = heap_blocks(conn, "big") - before
            assert read <= 2 * 64 + 2 * 320, read  # a chunk or two at most (and the small states' bounded reads)
            if read >= 64:
                reading += 1
            else:
                idle += 1
            if table.tally.cursor == 0 and reading:
                break
    assert reading and idle > reading, (idle, reading)
    assert figures_of(rows) == {**truth_rows, "finished": (0, 0, 0, 0)} or figures_of(rows) == truth_rows


def test_a_queue_emptied_between_passes_is_at_exact_zero_once_the_pass_comes_round(db):
    # The tally keeps each table's totals as chunks are read again: the 'mixed' queue's rows,
    # deleted while the table is read in turns, leave no count behind (not a stale count that
    # lingers, not a negative one) once every chunk has been read since. No index leads with the
    # queue column alone (big_waiting is partial): its queues are those of the unfinished rows,
    # one that drained kept listed at 0 for a while (queuenames.DRAINED_KEPT_S), not vanished;
    # the queue of only finished jobs is not one of them, and a note says so.
    with db.connect() as conn:
        fill_big(conn)
    table = JobTable(BIG_DECLARED, chunk_pages=64)
    with open_probe_connection(db.target) as conn:
        with cycle_budget(128):
            table.sample(conn)
            assert table.tally.cursor != 0  # read in turns
            with db.connect() as writer:
                writer.execute("DELETE FROM big WHERE queue_name = 'mixed'")
                writer.execute("UPDATE big SET status = 'succeeded' WHERE id % 1000 = 0")
                truth_rows = big_truth(writer)
            for _ in range(200):
                rows = table.sample(conn)
                if table.tally.cursor == 0:
                    break
            rows = table.sample(conn)
            for _ in range(200):  # one more whole pass, every chunk read after the change
                if table.tally.cursor == 0:
                    break
                rows = table.sample(conn)
    assert "mixed" not in truth_rows and figures_of(rows) == {**truth_rows, "mixed": (0, 0, 0, 0)}
    assert "no index leads with queue_column 'queue_name'" in rows[0].notes[-1]
    assert all(key[0] != "mixed" for key in table.tally.totals)
    assert all(n[0] > 0 and min(n) >= 0 for n in table.tally.totals.values())


def test_the_catalog_is_asked_once_a_cycle_for_every_table(db):
    # Each table's pages and statistics come from one catalog statement a cycle for all of them
    # (the tables the last cycle sampled), not one per table: the statements that ask for
    # relations' facts are counted as the probe's connection sends them.
    with db.connect() as conn:
        fill_big(conn)
        conn.execute(JOBS)
    tables = [JobTable(BIG_DECLARED), JobTable(SHARED)]
    tallies = CycleTallies()
    with open_probe_connection(db.target) as conn:
        asked = []
        execute = conn.execute

        def counting(query, params=None, **kwargs):
            if params and "relids" in params:
                asked.append(list(params["relids"]))
            return execute(query, params, **kwargs)

        conn.execute = counting  # observes the real connection's statements; the server answers
        for cycle in range(3):
            asked.clear()
            with tallies.cycle():
                for table in tables:
                    table.sample(conn)
            if cycle == 0:
                assert len(asked) == 2  # the first cycle: each table as it comes
            else:
                assert len(asked) == 1 and sorted(asked[0]) == sorted(t.resolved(conn).relid for t in tables)


def test_a_small_table_is_exact_every_cycle_whatever_the_time_budget(db):
    # A table of at most 1 MB is read whole every cycle, outside the tallies' shared time: even
    # with a budget too small to pay for any chunk, each cycle's figures are the truth now.
    with db.connect() as conn:
        conn.execute(JOBS)
        conn.execute("""INSERT INTO jobs (queue_name, status, scheduled_at)
                        SELECT 'q' || (g % 3), CASE WHEN g % 10 = 0 THEN 'doing' ELSE 'todo' END,
                               CASE WHEN g % 7 = 0 THEN now() + interval '1 hour' END
                        FROM generate_series(1, 3000) AS g""")
    table = JobTable(SHARED)
    tallies = CycleTallies(ms=0.001)

    def truth_now(conn) -> dict[str, tuple[int, int, int, int]]:
        rows = conn.execute("""SELECT queue_name,
                                      count(*) FILTER (WHERE status = 'todo' AND coalesce(scheduled_at <= now(), true)),
                                      count(*) FILTER (WHERE status = 'doing'),
                                      count(*) FILTER (WHERE status = 'todo' AND scheduled_at > now()),
                                      count(*) FILTER (WHERE status = 'failed')
                               FROM jobs WHERE status NOT IN ('succeeded', 'cancelled') GROUP BY queue_name""").fetchall()
        return {f"jobs:{r[0]}": tuple(r[1:]) for r in rows}

    with open_probe_connection(db.target) as conn, db.connect() as writer:
        for cycle in range(6):
            writer.execute("UPDATE jobs SET status = 'succeeded' WHERE id IN (SELECT id FROM jobs WHERE status = 'todo' "
                           "ORDER BY id LIMIT 100)")
            writer.execute("UPDATE jobs SET status = 'failed' WHERE id = %s", (cycle * 10 + 10,))
            expected = truth_now(writer)
            with tallies.cycle():
                rows = table.sample(conn)
            assert {q.name: (q.ready, q.in_flight, q.delayed, q.dead) for q in rows} == expected, cycle
            assert not any(q.depth_is_estimate or q.estimated for q in rows), cycle


# -- a multi-column order_by; a filter of the dead-letter table's rows ------------------------------

WORK = """
CREATE TABLE public.work (id bigserial PRIMARY KEY, queue_name text NOT NULL, priority int, status text NOT NULL);
INSERT INTO work (queue_name, priority, status) VALUES
    ('q', 1, 'todo'), ('q', 5, 'todo'), ('q', NULL, 'todo'), ('q', 5, 'todo'), ('q', 3, 'failed'), ('q', 1, 'failed'),
    ('q', 9, 'succeeded'), ('r', 9, 'todo');
"""
ORDER = ("priority DESC NULLS LAST", "id")


def work(order_by: str | tuple[str, ...] = ORDER) -> DeclaredQueue:
    return DeclaredQueue(name="work", table="public.work", order_by=order_by, queue_column="queue_name",
                         state_column="status", ready_states=("todo",), done_states=("succeeded",), dead_states=("failed",))


def test_a_multi_column_order_by_orders_the_head_and_the_dead_rows_by_every_column(db):
    with db.connect() as conn:
        conn.execute(WORK)
        head = [r[0] for r in conn.execute("SELECT id FROM work WHERE queue_name = 'q' AND status = 'todo'"
                                           " ORDER BY priority DESC NULLS LAST, id")]
        dead = [r[0] for r in conn.execute("SELECT id FROM work WHERE queue_name = 'q' AND status = 'failed'"
                                           " ORDER BY priority ASC NULLS FIRST, id DESC")]  # newest first: the order reversed
    assert head == [2, 4, 1, 3] and dead == [6, 5]
    with open_probe_connection(db.target) as conn:
        details = JobTable(work()).details(conn, "q")
        assert [int(r["id"]) for r in details.head] == head
        assert [int(r["id"]) for r in details.dead] == dead
        # One column with its direction, as a string: the single-string form.
        details = JobTable(work("priority DESC NULLS LAST")).details(conn, "q")
        assert [r["priority"] for r in details.head][:2] == ["5", "5"] and details.head[-1]["priority"] is None


@pytest.mark.parametrize("index, served", [
    ("", False),
    ("CREATE INDEX ON work (priority DESC NULLS LAST, id)", True),
    ("CREATE INDEX ON work (priority ASC NULLS FIRST, id DESC)", True),  # the exact reverse: a backward scan
    ("CREATE INDEX ON work (queue_name, priority DESC NULLS LAST, id, status)", True),  # one queue's rows in order
    ("CREATE INDEX ON work (priority DESC, id)", False),  # NULLS FIRST: not the order
    ("CREATE INDEX ON work (priority DESC NULLS LAST, id DESC)", False),  # one direction reversed, not all
    ("CREATE INDEX ON work (priority DESC NULLS LAST)", False),  # the first column only
], ids=["none", "same", "reversed", "after-queue", "nulls", "mixed", "prefix"])
def test_an_index_serves_a_multi_column_order_when_its_columns_and_directions_match(db, index, served):
    with db.connect() as conn:
        conn.execute(WORK)
        if index:
            conn.execute(index)
    with open_probe_connection(db.target) as conn:
        rows = JobTable(work()).sample(conn)
    assert [q.name for q in rows] == ["work:q", "work:r"] and rows[0].ready == 4
    note = "no index leads with order_by ['priority DESC NULLS LAST', 'id'] (or its reverse) of \"public\".\"work\""
    assert any(n.startswith(note) for n in rows[0].notes) is not served, rows[0].notes


def test_every_column_of_a_multi_column_order_by_must_be_there(db):
    with db.connect() as conn:
        conn.execute(WORK)
    for order_by, says in [(("priority DESC", "nope"), "order_by column 'nope' not in table public.work"),
                           (("priority DESCENDING",), "order_by column 'priority DESCENDING' not in table public.work"),
                           (("id; DROP TABLE work; -- DESC",), "order_by column 'id; DROP TABLE work; -- DESC' not in table")]:
        rows, _ = queues_of(db, work(order_by))
        [q] = rows.values()
        assert q.depth is None and says in q.error, (order_by, q.error)
    with db.connect() as conn:
        assert conn.execute("SELECT count(*) FROM work").fetchone()[0] == 8


DEAD_LETTERS = """
CREATE TABLE public.mail (id bigserial PRIMARY KEY, queue_name text NOT NULL, status text NOT NULL DEFAULT 'todo');
CREATE TABLE public.mail_dead (id bigserial PRIMARY KEY, queue_name text NOT NULL, status text NOT NULL,
                               attempts int NOT NULL, final boolean NOT NULL);
INSERT INTO mail (queue_name) VALUES ('mail'), ('mail'), ('sms');
INSERT INTO mail_dead (queue_name, status, attempts, final) VALUES
    ('mail', 'exception', 3, true), ('mail', 'failed', 5, true), ('mail', 'retrying', 1, false),
    ('mail', 'failed', 2, false), ('sms', 'failed', 4, true), ('sms', 'parked', 9, true), ('mail', 'exception', 7, true);
"""


def mail(where: tuple = (("status", ("exception", "failed")), ("final", (True,)))) -> DeclaredQueue:
    return DeclaredQueue(name="mail", table="public.mail", order_by="id", queue_column="queue_name", state_column="status",
                         ready_states=("todo",), dead_letter_table="public.mail_dead", dead_letter_where=where)


def test_dead_letter_where_counts_and_shows_only_the_rows_it_takes(db):
    with db.connect() as conn:
        conn.execute(DEAD_LETTERS)
        dead = {queue: [r[0] for r in conn.execute(
            "SELECT id FROM mail_dead WHERE queue_name = %s AND status IN ('exception', 'failed') AND final ORDER BY id DESC",
            (queue,))] for queue in ("mail", "sms")}
    assert dead == {"mail": [7, 2, 1], "sms": [5]}
    rows, _ = queues_of(db, mail())
    assert {name: (q.ready, q.dead, q.error) for name, q in rows.items()} == {"mail:mail": (2, 3, None), "mail:sms": (1, 1, None)}
    with open_probe_connection(db.target) as conn:
        table = JobTable(mail())
        assert [int(r["id"]) for r in table.details(conn, "mail").dead] == dead["mail"]
        assert [int(r["id"]) for r in table.details(conn, "sms").dead] == dead["sms"]
    # Whole numbers for an integer column; no filter: every row of it is dead, as before.
    rows, _ = queues_of(db, mail((("attempts", (4, 5, 9)),)))
    assert (rows["mail:mail"].dead, rows["mail:sms"].dead) == (1, 2)
    rows, _ = queues_of(db, mail(()))
    assert (rows["mail:mail"].dead, rows["mail:sms"].dead) == (5, 2)


def test_dead_letter_where_values_are_bound_and_its_columns_checked(db):
    with db.connect() as conn:
        conn.execute(DEAD_LETTERS)
    rows, _ = queues_of(db, mail((("status", ("failed'); DROP TABLE mail_dead; --",)),)))
    assert (rows["mail:mail"].dead, rows["mail:mail"].error) == (0, None)  # a value like any other: no row holds it
    for where, says in [((("nope", ("x",)),), "dead_letter_where column 'nope' not in dead_letter_table public.mail_dead"),
                        ((("attempts", ("three",)),), "dead_letter_where column 'attempts' of public.mail_dead is integer: "
                                                      "give it whole numbers"),
                        ((("final", (1,)),), "dead_letter_where column 'final' of public.mail_dead is boolean: give it true or false"),
                        ((("status", (7,)),), "dead_letter_where column 'status' of public.mail_dead is text: give it strings")]:
        rows, _ = queues_of(db, mail(where))
        [q] = rows.values()  # unknown: its queues are not known either
        assert q.depth is None and q.error == says, (where, q.error)
    with db.connect() as conn:
        assert conn.execute("SELECT count(*) FROM mail_dead").fetchone()[0] == 7
