"""Which queues a shared job table lists (probes/sources/queuenames.py): every queue it holds a
row of, finished ones too (at 0), read through an index that leads with the queue column, or with
the state column and then it; where none does, the queues of its unfinished rows (and a drained
one a while after), with a note saying so. Each library's own listing is in its peer test
(tests/test_peer_*.py). Every figure is checked against ground truth computed in SQL."""

from __future__ import annotations

from probes.config import DeclaredQueue
from probes.postgres import open_probe_connection
from probes.sources.jobtable import JobTable
from probes.sources.queuenames import DRAINED_KEPT_S, MAX_QUEUES

from .test_jobtable import SHARED

TABLE = """
CREATE TABLE public.jobs (id bigserial PRIMARY KEY, queue_name text NOT NULL, status text NOT NULL,
                          scheduled_at timestamptz, created_at timestamptz NOT NULL DEFAULT now());
"""
# A queue with waiting jobs, one with only finished ones, and one with failed (dead) ones only.
ROWS = """
INSERT INTO jobs (queue_name, status)
SELECT 'mail', CASE WHEN g % 4 = 0 THEN 'succeeded' ELSE 'todo' END FROM generate_series(1, 4000) AS g
UNION ALL SELECT 'archive', CASE WHEN g % 2 = 0 THEN 'succeeded' ELSE 'cancelled' END FROM generate_series(1, 3000) AS g
UNION ALL SELECT 'bounces', 'failed' FROM generate_series(1, 3);
ANALYZE jobs;
"""


def truth(conn) -> dict[str, tuple[int, int, int]]:
    """queue -> (ready, in flight, dead), for every queue the table holds a row of."""
    rows = conn.execute("""SELECT queue_name, count(*) FILTER (WHERE status = 'todo'), count(*) FILTER (WHERE status = 'doing'),
                                  count(*) FILTER (WHERE status = 'failed')
                           FROM jobs GROUP BY queue_name""").fetchall()
    return {f"jobs:{r[0]}": (r[1], r[2], r[3]) for r in rows}


def figures(rows) -> dict[str, tuple[int, int, int]]:
    return {q.name: (q.ready, q.in_flight, q.dead) for q in rows}


def test_a_queue_holding_only_finished_jobs_is_listed_at_zero_through_the_queue_index(db):
    with db.connect() as conn:
        conn.execute(TABLE)
        conn.execute("CREATE INDEX jobs_queue ON jobs (queue_name)")
        conn.execute(ROWS)
        ground = truth(conn)
    table = JobTable(SHARED)
    with open_probe_connection(db.target) as conn:
        rows = table.sample(conn)
        assert figures(rows) == ground and ground["jobs:archive"] == (0, 0, 0)
        archive = next(q for q in rows if q.name == "jobs:archive")
        assert (archive.depth, archive.error, archive.notes) == (0, None, [])
        assert table.queue_names is not None and table.queue_names.how == "queue index"
        # Its rows removed, a queue is no longer one the table holds: gone at the next sample
        # (not kept DRAINED_KEPT_S); a new queue of finished jobs only appears at once.
        with db.connect() as writer:
            writer.execute("DELETE FROM jobs WHERE queue_name = 'archive'")
            writer.execute("INSERT INTO jobs (queue_name, status) VALUES ('done', 'succeeded')")
            ground = truth(writer)
        rows = table.sample(conn)
    assert figures(rows) == ground and set(ground) == {"jobs:mail", "jobs:bounces", "jobs:done"}


def test_an_index_led_by_state_then_queue_lists_every_state_s_queues(db):
    # River's fetching index shape: (state, queue, ...), none led by the queue alone. Each state's
    # queues are skipped through, the finished states' too.
    with db.connect() as conn:
        conn.execute(TABLE)
        conn.execute("CREATE INDEX jobs_fetch ON jobs (status, queue_name, id)")
        conn.execute(ROWS)
        ground = truth(conn)
    table = JobTable(SHARED)
    with open_probe_connection(db.target) as conn:
        rows = table.sample(conn)
    assert figures(rows) == ground and "jobs:archive" in ground
    assert table.queue_names is not None and table.queue_names.how == "state and queue index"
    assert all(q.notes == [] for q in rows)


def test_with_no_index_to_read_the_queues_by_it_says_so_and_lists_the_unfinished_ones(db):
    # Only a partial index leads with the queue column (it holds no finished row): the planner
    # would scan the table for each queue, so no such read is made. The queues are those of the
    # unfinished rows, a drained one kept DRAINED_KEPT_S, and a note says what is not listed.
    with db.connect() as conn:
        conn.execute(TABLE)
        conn.execute("CREATE INDEX jobs_waiting ON jobs (queue_name, id) WHERE status = 'todo'")
        conn.execute(ROWS)
        # Past what is read whole every cycle (a small table's queues are found in one pass over it).
        conn.execute("INSERT INTO jobs (queue_name, status) SELECT 'mail', 'succeeded' FROM generate_series(1, 30000)")
        ground = truth(conn)
    table = JobTable(SHARED)
    with open_probe_connection(db.target) as conn:
        rows = table.sample(conn)
        assert figures(rows) == {name: ground[name] for name in ("jobs:mail", "jobs:bounces")}
        assert table.queue_names is not None and table.queue_names.how is None
        note = next(iter(rows)).notes[-1]
        assert note.startswith("no index leads with queue_column 'queue_name' of \"public\".\"jobs\"") and "finished" in note
        with db.connect() as writer:
            writer.execute("UPDATE jobs SET status = 'succeeded' WHERE queue_name = 'bounces'")
        rows = table.sample(conn)
    assert DRAINED_KEPT_S >= 60
    assert figures(rows) == {"jobs:mail": ground["jobs:mail"], "jobs:bounces": (0, 0, 0)}


def test_a_small_table_s_queues_are_found_in_one_pass_whatever_its_indexes(db):
    # A table the tally reads whole every cycle (at most 1 MB), with no index on the queue column
    # at all (or statistics that do not favour one yet): its finished queues are listed too.
    with db.connect() as conn:
        conn.execute(TABLE)
        conn.execute(ROWS)
        ground = truth(conn)
    table = JobTable(SHARED)
    with open_probe_connection(db.target) as conn:
        rows = table.sample(conn)
    assert figures(rows) == ground and "jobs:archive" in ground
    assert table.queue_names is not None and table.queue_names.how == "small table"


def test_at_most_max_queues_are_listed_those_with_unfinished_jobs_first(db):
    with db.connect() as conn:
        conn.execute(TABLE)
        conn.execute("CREATE INDEX jobs_queue ON jobs (queue_name)")
        conn.execute(f"""INSERT INTO jobs (queue_name, status)
                         SELECT 'done' || lpad(g::text, 4, '0'), 'succeeded' FROM generate_series(1, {MAX_QUEUES + 10}) AS g""")
        conn.execute("INSERT INTO jobs (queue_name, status) VALUES ('zz_busy', 'todo'), ('zz_busy', 'todo')")
    table = JobTable(SHARED)
    with open_probe_connection(db.target) as conn:
        rows = table.sample(conn)
    names = [q.name for q in rows]
    assert len(names) == MAX_QUEUES and names == sorted(names)
    # The first MAX_QUEUES names of the index would leave it out: the queue with jobs waiting is first in.
    busy = next(q for q in rows if q.name == "jobs:zz_busy")
    assert busy.ready == 2
    assert f"more than {MAX_QUEUES} queues in \"public\".\"jobs\"" in busy.notes[-1]


def test_a_registry_s_queues_come_first_and_the_table_s_other_queues_after(db):
    # A library with a queue registry (River's river_queue) passes its queues; those the table
    # holds besides, finished ones too, are listed after them.
    with db.connect() as conn:
        conn.execute(TABLE)
        conn.execute("CREATE INDEX jobs_queue ON jobs (queue_name)")
        conn.execute(ROWS)
        ground = truth(conn)
    declared = DeclaredQueue(**{**{f: getattr(SHARED, f) for f in SHARED.__slots__}, "name": ""})
    with open_probe_connection(db.target) as conn:
        rows = JobTable(declared).sample(conn, queues=["registered", "mail"])
    assert [q.name for q in rows] == ["registered", "mail", "archive", "bounces"]
    assert {q.name: (q.ready, q.in_flight, q.dead) for q in rows} == {
        "registered": (0, 0, 0), **{name.removeprefix("jobs:"): value for name, value in ground.items()}}


def test_a_partitioned_parent_and_a_view_list_their_finished_queues_through_the_tables_index(db):
    # A partitioned parent's index is each partition's (one probe of each per queue); a view has
    # no index of its own, but the planner reads through its table's.
    with db.connect() as conn:
        conn.execute(TABLE)
        conn.execute("CREATE INDEX jobs_queue ON jobs (queue_name)")
        conn.execute(ROWS)
        conn.execute("CREATE VIEW public.jobs_view AS SELECT id, queue_name, status, scheduled_at, created_at FROM jobs")
        conn.execute("""CREATE TABLE public.pjobs (id bigserial, name text NOT NULL, state text NOT NULL) PARTITION BY LIST (name);
                        CREATE TABLE public.pjobs_a PARTITION OF public.pjobs FOR VALUES IN ('a');
                        CREATE TABLE public.pjobs_c PARTITION OF public.pjobs FOR VALUES IN ('c');
                        CREATE INDEX ON public.pjobs (name, state);
                        INSERT INTO pjobs (name, state) SELECT 'a', 'created' FROM generate_series(1, 30)
                        UNION ALL SELECT 'c', 'completed' FROM generate_series(1, 20);""")
        ground = truth(conn)
    view = DeclaredQueue(**{**{f: getattr(SHARED, f) for f in SHARED.__slots__}, "table": "public.jobs_view"})
    parent = DeclaredQueue(name="p", table="public.pjobs", order_by="id", queue_column="name", state_column="state",
                           ready_states=("created",), done_states=("completed",))
    with open_probe_connection(db.target) as conn:
        viewed, partitioned = JobTable(view), JobTable(parent)
        assert figures(viewed.sample(conn)) == ground and "jobs:archive" in ground
        assert {q.name: (q.ready, q.depth) for q in partitioned.sample(conn)} == {"p:a": (30, 30), "p:c": (0, 0)}
    assert viewed.queue_names is not None and viewed.queue_names.how == "queue index"
    assert partitioned.queue_names is not None and partitioned.queue_names.how == "queue index"
