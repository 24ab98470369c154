"""River. Its workers are Go (nothing here can run them), so: the `river_job` schema as River's
own Python client (PyPI `riverqueue`) ships it, River's fetching index, jobs inserted through
that client, and the worker's state changes written as River's executor writes them (running:
attempt counted and attempted_at set; retryable: scheduled again with the error appended;
discarded and completed: finalized). queuetop finds it with no config; every figure matches
ground truth in SQL."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib import resources

import pytest

from probes.details import queue_details
from probes.postgres import open_probe_connection
from probes.sampler import run_cycle

pytestmark = pytest.mark.matrix  # the server matrix runs these on every supported major

riverqueue = pytest.importorskip("riverqueue", reason="River's Python client is a test dependency (pip install -e '.[test]')")
sqlalchemy = pytest.importorskip("sqlalchemy")

# River's fetching index (its migration 002/004), for the probe to read states through.
FETCH_INDEX = "CREATE INDEX river_job_prioritized_fetching_index ON river_job (state, queue, priority, scheduled_at, id)"


@dataclass
class SendEmail:
    to: str
    kind: str = "send_email"

    def to_json(self) -> str:
        return json.dumps({"to": self.to})


def install_schema(db) -> None:
    from riverqueue.driver import riversqlalchemy

    text = resources.files(riversqlalchemy).joinpath("dbsqlc", "river_job.sql").read_text(encoding="utf-8")
    ddl = text.split("-- name:")[0]  # the schema part; the rest are the client's queries
    with db.connect() as conn:
        conn.execute(ddl)
        conn.execute(FETCH_INDEX)


def worker(db, statement: str, *ids: int) -> None:
    """What River's Go executor writes when it takes, retries, discards or completes a job."""
    with db.connect() as conn:
        conn.execute(statement, {"ids": list(ids)})


TAKE = """UPDATE river_job SET state = 'running', attempt = attempt + 1, attempted_at = now(),
          attempted_by = array_append(attempted_by, 'worker-1') WHERE id = ANY(%(ids)s)"""
RETRY_LATER = """UPDATE river_job SET state = 'retryable', scheduled_at = now() + interval '10 minutes',
                 errors = array_append(errors, jsonb_build_object('at', now(), 'attempt', attempt, 'error', 'smtp timeout'))
                 WHERE id = ANY(%(ids)s)"""
DISCARD = """UPDATE river_job SET state = 'discarded', finalized_at = now(),
             errors = array_append(errors, jsonb_build_object('at', now(), 'attempt', attempt, 'error', 'mailbox full'))
             WHERE id = ANY(%(ids)s)"""
COMPLETE = "UPDATE river_job SET state = 'completed', finalized_at = now() WHERE id = ANY(%(ids)s)"


@pytest.fixture
def river(db):
    from riverqueue.driver import riversqlalchemy

    install_schema(db)
    engine = sqlalchemy.create_engine(db.dsn.replace("postgresql://", "postgresql+psycopg://", 1))
    client = riverqueue.Client(riversqlalchemy.Driver(engine))

    def insert(queue: str, to: str, **opts) -> int:
        return client.insert(SendEmail(to), insert_opts=riverqueue.InsertOpts(queue=queue, **opts)).job.id

    mail = [insert("mail", f"user{n}@example.com") for n in range(9)]
    worker(db, TAKE, *mail[:6])  # six taken by a worker ...
    worker(db, COMPLETE, *mail[:3])  # ... three done
    worker(db, RETRY_LATER, mail[3])  # one failed, retrying in 10 minutes
    worker(db, DISCARD, mail[4])  # one failed for good
    # mail[5] still running; mail[6:] available
    later = datetime.now(UTC) + timedelta(hours=1)
    insert("mail", "later1@example.com", scheduled_at=later)
    insert("mail", "later2@example.com", scheduled_at=later)
    insert("reports", "ops@example.com")
    yield client
    engine.dispose()


def ground_truth(db, queue: str) -> dict[str, int]:
    """River's fetch: state = 'available' AND scheduled_at <= now()."""
    with db.connect() as conn:
        ready, delayed, in_flight, dead = conn.execute(
            """SELECT count(*) FILTER (WHERE state = 'available' AND scheduled_at <= now()),
                      count(*) FILTER (WHERE (state = 'available' AND scheduled_at > now())
                                         OR state IN ('scheduled', 'retryable', 'pending')),
                      count(*) FILTER (WHERE state = 'running'),
                      count(*) FILTER (WHERE state = 'discarded')
               FROM river_job WHERE queue = %s""",
            (queue,),
        ).fetchone()
    return {"ready": ready, "delayed": delayed, "in_flight": in_flight, "dead": dead, "depth": ready + delayed + in_flight}


def test_river_queues_are_found_with_no_config_and_every_figure_is_right(db, river):
    snap = run_cycle(db.target)
    rows = {q.name: q for q in snap.queues if q.source == "river"}
    assert set(rows) == {"mail", "reports"}
    for queue in ("mail", "reports"):
        q, g = rows[queue], ground_truth(db, queue)
        assert (q.ready, q.delayed, q.in_flight, q.dead, q.depth) == (g["ready"], g["delayed"], g["in_flight"], g["dead"], g["depth"])
        assert q.error is None and q.depth_is_estimate is False
    # River's meaning: the client's scheduled inserts and the retry are delayed, the 3 completed are finished.
    assert (rows["mail"].ready, rows["mail"].delayed, rows["mail"].in_flight, rows["mail"].dead) == (3, 3, 1, 1)
    assert snap.probes["queues"].error is None


def test_river_uses_its_queue_registry_when_it_has_one(db, river):
    with db.connect() as conn:  # as River's producers keep it (migration 004)
        conn.execute("CREATE TABLE river_queue (name text PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now(),"
                     " metadata jsonb NOT NULL DEFAULT '{}', paused_at timestamptz, updated_at timestamptz NOT NULL DEFAULT now())")
        conn.execute("INSERT INTO river_queue (name) VALUES ('mail'), ('idle')")
    rows = {q.name: q for q in run_cycle(db.target).queues if q.source == "river"}
    # The registered queues, an empty one too, and a queue holding jobs that no producer registered.
    assert set(rows) == {"mail", "idle", "reports"} and rows["idle"].depth == 0 and rows["mail"].depth == 7


def test_river_details_show_waiting_jobs_and_the_last_error(db, river):
    with open_probe_connection(db.target) as conn:
        details = queue_details(conn, "river", "mail")
    assert {row["state"] for row in details.head} == {"available", "running", "retryable", "scheduled"}
    [discarded] = details.dead
    assert discarded["last_error"] == "mailbox full"


def test_a_large_river_table_keeps_every_queues_oldest_ready_job(db, river):
    # 120,000 more available jobs (as River's client inserts them, in bulk here): counted exactly
    # by the tally (the table is within a cycle's budget of pages), and each queue's oldest ready
    # job found, though the fetching index's order meets one queue's jobs first.
    with db.connect() as conn:
        conn.execute("""INSERT INTO river_job (queue, kind, args, max_attempts, priority, state, scheduled_at)
                        SELECT CASE WHEN g % 2 = 0 THEN 'bulk_a' ELSE 'bulk_b' END, 'send_email', '{}', 25,
                               1 + g % 4, 'available', now() - make_interval(secs => 120 + g % 600)
                        FROM generate_series(1, 120000) AS g""")
        conn.execute("ANALYZE river_job")
        truth = dict(conn.execute("""SELECT queue, extract(epoch FROM now() - min(scheduled_at))::float8 FROM river_job
                                     WHERE state = 'available' AND scheduled_at <= now() GROUP BY queue""").fetchall())
    rows = {q.name: q for q in run_cycle(db.target).queues if q.source == "river"}
    for queue in ("bulk_a", "bulk_b"):
        q = rows[queue]
        assert q.depth_is_estimate is False and q.ready == 60_000, (queue, q.ready)
        assert abs(q.oldest_ready_age_s - truth[queue]) <= 30, (queue, q.oldest_ready_age_s, truth[queue])


def test_a_queue_whose_jobs_all_finished_is_listed_at_zero_registered_or_not(db, river):
    # River keeps completed and cancelled jobs in river_job. A queue whose jobs all finished is
    # listed at 0 - found through River's fetching index (state, queue, ...), every state's
    # queues, finished ones too - with no river_queue, and beside it when no producer registered it.
    ids = [river.insert(SendEmail(f"n{n}@example.com"), insert_opts=riverqueue.InsertOpts(queue="nightly")).job.id
           for n in range(3)]
    worker(db, TAKE, *ids)
    worker(db, COMPLETE, *ids[:2])
    worker(db, "UPDATE river_job SET state = 'cancelled', finalized_at = now() WHERE id = ANY(%(ids)s)", ids[2])
    assert ground_truth(db, "nightly") == {"ready": 0, "delayed": 0, "in_flight": 0, "dead": 0, "depth": 0}
    for registry in (False, True):
        if registry:  # as River's producers keep it (migration 004): they served mail, never nightly
            with db.connect() as conn:
                conn.execute("CREATE TABLE river_queue (name text PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now(),"
                             " metadata jsonb NOT NULL DEFAULT '{}', paused_at timestamptz,"
                             " updated_at timestamptz NOT NULL DEFAULT now())")
                conn.execute("INSERT INTO river_queue (name) VALUES ('mail')")
        snap = run_cycle(db.target)
        rows = {q.name: q for q in snap.queues if q.source == "river"}
        assert set(rows) == {"mail", "reports", "nightly"}, registry
        nightly = rows["nightly"]
        assert (nightly.ready, nightly.delayed, nightly.in_flight, nightly.dead, nightly.depth, nightly.error) == (0, 0, 0, 0, 0, None)
        assert rows["mail"].depth == ground_truth(db, "mail")["depth"] == 7
        assert "queue_column" not in (snap.probes["queues"].notes or "")  # read through the index: no note

