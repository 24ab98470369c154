"""Paging and search at 1M jobs within the queues probe's budget.

1,000,000 jobs in River's `river_job` (River's schema and indexes as its migrations create them),
in a realistic mix: old jobs mostly finished (completed, some discarded and cancelled, as River
keeps them until its cleaner deletes them), the newest waiting (available, retrying, a few running,
pending), a tail scheduled ahead; four queues; then ANALYZE, as autovacuum would have. Each read
the console makes is timed on a probe session (its statement timeout, its plan settings) and must
take a small part of the probe's statement timeout. The times are printed (`-s`).
"""

from __future__ import annotations

import time

import psycopg
import pytest
from psycopg import sql

from jobs.model import SCAN_ROWS, JobFilter
from jobs.river import RiverJobs
from probes.failures import STATEMENT_TIMEOUT_MS
from probes.session import open_probe_connection, probe_transaction

from .oracle.river import SCHEMA_ADDITIONS, install

pytestmark = pytest.mark.oracle

pytest.importorskip("riverqueue", reason="River's Python client is a test dependency (pip install -e '.[test]')")

JOBS = 1_000_000
BUDGET_S = STATEMENT_TIMEOUT_MS / 1000 / 4  # each read: at most a quarter of one statement's timeout
SCHEMA = "river_scale"
# River's indexes (migrations 002 and 005), dropped for the bulk insert and made again after it.
INDEXES = [s for s in SCHEMA_ADDITIONS if s.startswith("CREATE INDEX") or s.startswith("CREATE UNIQUE INDEX")]

FILL = """
INSERT INTO river_job (id, queue, kind, args, state, attempt, max_attempts, priority, created_at, scheduled_at,
                       attempted_at, attempted_by, finalized_at, errors)
SELECT g,
       (ARRAY['default', 'default', 'mail', 'mail', 'mail', 'reports', 'reports', 'webhooks'])[1 + g %% 8],
       (ARRAY['send_email', 'resize_image', 'build_report'])[1 + g %% 3],
       jsonb_build_object('to', 'user' || g || '@example.com', 'tenant', g %% 1000, 'n', g),
       s.state, CASE WHEN s.state IN ('available', 'scheduled', 'pending') THEN 0 ELSE 1 END,
       CASE WHEN s.state = 'discarded' THEN 1 ELSE 25 END, 1 + g %% 4,
       now() - (1000001 - g) * interval '100 ms',
       CASE WHEN s.state IN ('scheduled', 'retryable') THEN now() + (1 + g %% 600) * interval '1 minute'
            ELSE now() - (1000001 - g) * interval '100 ms' END,
       CASE WHEN s.state IN ('available', 'scheduled', 'pending') THEN NULL ELSE now() - (1000001 - g) * interval '90 ms' END,
       CASE WHEN s.state IN ('available', 'scheduled', 'pending') THEN NULL ELSE ARRAY['worker-' || g %% 7] END,
       CASE WHEN s.state IN ('completed', 'discarded', 'cancelled') THEN now() - (1000001 - g) * interval '80 ms' END,
       CASE WHEN s.state IN ('discarded', 'retryable') THEN ARRAY[jsonb_build_object('at', now(), 'attempt', 1,
            'error', 'upstream said ' || (g %% 13), 'trace', '')] END
FROM generate_series(1, %(jobs)s) AS g
CROSS JOIN LATERAL (SELECT (CASE
    WHEN g <= 800000 AND g %% 50 = 0 THEN 'discarded'
    WHEN g <= 800000 AND g %% 97 = 0 THEN 'cancelled'
    WHEN g <= 800000 THEN 'completed'
    WHEN g <= 950000 AND g %% 211 = 1 THEN 'running'
    WHEN g <= 950000 AND g %% 20 = 0 THEN 'retryable'
    WHEN g <= 950000 AND g %% 5000 = 7 THEN 'pending'
    WHEN g <= 950000 THEN 'available'
    WHEN g %% 3 = 0 THEN 'available'
    ELSE 'scheduled' END)::river_job_state AS state) AS s
"""


@pytest.fixture(scope="module")
def million(pg_server):
    from .conftest import drop_database, make_database

    database = make_database(pg_server, prefix="scale")
    began = time.monotonic()
    with psycopg.connect(database.dsn, autocommit=True) as conn:
        install(conn, SCHEMA)
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(SCHEMA)))
        for statement in INDEXES:
            conn.execute("DROP INDEX " + statement.split()[2 if statement.startswith("CREATE INDEX") else 3])
        conn.execute(FILL, {"jobs": JOBS})
        conn.execute("SELECT setval('river_job_id_seq', %s)", (JOBS,))
        conn.execute("SET maintenance_work_mem = '256MB'")
        for statement in INDEXES:
            conn.execute(statement)
        conn.execute("VACUUM ANALYZE river_job")
        counts = dict(conn.execute("SELECT state::text, count(*) FROM river_job GROUP BY 1").fetchall())
    print(f"\n1M River jobs built in {time.monotonic() - began:.1f} s: {counts}")
    yield database
    with psycopg.connect(pg_server.admin_uri, autocommit=True) as conn:
        drop_database(conn, database.name)


def timed(conn, label: str, call):
    with probe_transaction(conn):
        began = time.perf_counter()
        result = call()
        elapsed = time.perf_counter() - began
    print(f"  {label:<52} {elapsed * 1000:8.1f} ms")
    assert elapsed < BUDGET_S, (label, elapsed)
    return result


def test_river_pages_and_searches_at_a_million_jobs(million):
    lib = RiverJobs(SCHEMA)
    with psycopg.connect(million.dsn, autocommit=True) as conn:
        deep = conn.execute(sql.SQL("SELECT id FROM {} WHERE queue = 'mail' AND id >= 900000 ORDER BY id LIMIT 1")
                            .format(sql.Identifier(SCHEMA, "river_job"))).fetchone()[0]
    print(f"\nRiver, {JOBS:,} jobs (budget {BUDGET_S * 1000:.0f} ms a read, probe statement timeout {STATEMENT_TIMEOUT_MS} ms)")
    with open_probe_connection(million.target) as conn:
        page = timed(conn, "first page (queue mail, all states)", lambda: lib.page(conn, "mail", JobFilter(), limit=50))
        assert len(page.jobs) == 50 and int(page.jobs[0].id) < int(page.jobs[-1].id)
        page = timed(conn, f"deep page (after id {deep})", lambda: lib.page(conn, "mail", JobFilter(), after=str(deep), limit=50))
        assert len(page.jobs) == 50 and int(page.jobs[0].id) > deep
        page = timed(conn, "newest first", lambda: lib.page(conn, "mail", JobFilter(), limit=50, newest_first=True))
        assert int(page.jobs[0].id) > 950_000
        for state in ("ready", "delayed", "blocked", "in_flight", "dead", "done"):
            page = timed(conn, f"state {state}", lambda s=state: lib.page(conn, "mail", JobFilter(state=s), limit=50))
            assert all(j.state in ({"delayed", "blocked"} if state == "delayed" else {state}) for j in page.jobs)
            assert len(page.jobs) == (0 if state == "blocked" else 50), state
        page = timed(conn, "state done, newest first (behind 200,000 waiting)",
                     lambda: lib.page(conn, "mail", JobFilter(state="done"), limit=50, newest_first=True))
        assert len(page.jobs) == 50 and all(int(j.id) <= 800_000 for j in page.jobs)
        page = timed(conn, "state delayed, queue webhooks (pending among them)",
                     lambda: lib.page(conn, "webhooks", JobFilter(state="delayed"), limit=50))
        assert len(page.jobs) == 50
        for state in ("ready", "dead"):
            page = timed(conn, f"state {state}, newest first",
                         lambda s=state: lib.page(conn, "mail", JobFilter(state=s), limit=50, newest_first=True))
            assert len(page.jobs) == 50
            page = timed(conn, f"state {state}, deep page (after id {deep})",
                         lambda s=state: lib.page(conn, "mail", JobFilter(state=s), after=str(deep), limit=50))
            assert all(int(j.id) > deep for j in page.jobs)
        page = timed(conn, "kind filter (build_report)", lambda: lib.page(conn, "mail", JobFilter(kind="build_report"), limit=50))
        assert len(page.jobs) == 50 and {j.kind for j in page.jobs} == {"build_report"}
        page = timed(conn, "kind filter, state ready",
                     lambda: lib.page(conn, "mail", JobFilter(state="ready", kind="build_report"), limit=50))
        assert len(page.jobs) == 50
        needle = 912_346  # a mail job (912346 % 8 == 2)
        page = timed(conn, "args containment (GIN-led)",
                     lambda: lib.page(conn, "mail", JobFilter(match={"to": f"user{needle}@example.com"}), limit=50))
        assert [j.id for j in page.jobs] == [str(needle)] and page.note is None and page.after is None
        page = timed(conn, "args containment, 1,000 matches (tenant)",
                     lambda: lib.page(conn, "mail", JobFilter(match={"tenant": 42}), limit=50))
        assert len(page.jobs) == 50 and all(j.args["tenant"] == 42 for j in page.jobs)
        page = timed(conn, "text search (bounded)", lambda: lib.page(conn, "mail", JobFilter(text=f"user{needle}@"), limit=50))
        assert page.jobs == [] and page.note is not None and f"searched {SCAN_ROWS:,} jobs" in page.note
        assert int(page.after) == SCAN_ROWS  # read exactly SCAN_ROWS jobs, from the first
        page = timed(conn, "text search, page from id 900,000", lambda: lib.page(conn, "mail", JobFilter(text=f"user{needle}@"),
                                                                                 after="900000", limit=50))
        assert [j.id for j in page.jobs] == [str(needle)]
        job = timed(conn, "job()", lambda: lib.job(conn, "mail", str(needle)))
        assert job is not None and job.id == str(needle)


# Procrastinate (3.x): procrastinate_jobs as its package's sql/schema.sql creates it, the same
# shape of history: old jobs succeeded (some failed, some cancelled), the newest waiting (todo,
# some doing, some behind a lock), a tail scheduled ahead.
PROCRASTINATE_FILL = """
INSERT INTO procrastinate_jobs (id, queue_name, task_name, priority, lock, args, status, scheduled_at, attempts)
SELECT g,
       (ARRAY['default', 'default', 'mail', 'mail', 'mail', 'reports', 'reports', 'webhooks'])[1 + g %% 8],
       (ARRAY['send_email', 'resize_image', 'build_report'])[1 + g %% 3],
       g %% 3,
       CASE WHEN s.status = 'todo' AND g %% 10 = 0 THEN 'account-' || (g %% 100) END,
       jsonb_build_object('to', 'user' || g || '@example.com', 'tenant', g %% 1000, 'n', g),
       s.status,
       CASE WHEN g > 950000 AND g %% 3 <> 0 THEN now() + (1 + g %% 600) * interval '1 minute' END,
       CASE WHEN s.status IN ('todo') THEN 0 ELSE 1 END
FROM generate_series(1, %(jobs)s) AS g
CROSS JOIN LATERAL (SELECT (CASE
    WHEN g <= 800000 AND g %% 50 = 0 THEN 'failed'
    WHEN g <= 800000 AND g %% 97 = 0 THEN 'cancelled'
    WHEN g <= 800000 THEN 'succeeded'
    WHEN g <= 950000 AND g %% 211 = 1 THEN 'doing'
    ELSE 'todo' END)::procrastinate_job_status AS status) AS s
"""


@pytest.fixture(scope="module")
def procrastinate_million(pg_server):
    from importlib import resources

    import procrastinate

    from .conftest import drop_database, make_database

    database = make_database(pg_server, prefix="scale")
    began = time.monotonic()
    schema = resources.files(procrastinate).joinpath("sql", "schema.sql").read_text(encoding="utf-8")
    with psycopg.connect(database.dsn, autocommit=True) as conn:
        conn.execute(schema)
        indexes = [r[0] for r in conn.execute("SELECT indexdef FROM pg_indexes WHERE tablename = 'procrastinate_jobs' "
                                              "AND indexname <> 'procrastinate_jobs_pkey'").fetchall()]
        for definition in indexes:
            conn.execute("DROP INDEX " + definition.split()[3 if definition.startswith("CREATE UNIQUE") else 2])
        conn.execute("ALTER TABLE procrastinate_jobs DISABLE TRIGGER USER")  # no events for the fill
        conn.execute(PROCRASTINATE_FILL, {"jobs": JOBS})
        conn.execute("ALTER TABLE procrastinate_jobs ENABLE TRIGGER USER")
        conn.execute("SELECT setval('procrastinate_jobs_id_seq', %s)", (JOBS,))
        conn.execute("SET maintenance_work_mem = '256MB'")
        for definition in indexes:
            conn.execute(definition)
        conn.execute("VACUUM ANALYZE procrastinate_jobs")
        counts = dict(conn.execute("SELECT status::text, count(*) FROM procrastinate_jobs GROUP BY 1").fetchall())
    print(f"\n1M procrastinate jobs built in {time.monotonic() - began:.1f} s: {counts}")
    yield database
    with psycopg.connect(pg_server.admin_uri, autocommit=True) as conn:
        drop_database(conn, database.name)


def test_procrastinate_pages_and_searches_at_a_million_jobs(procrastinate_million):
    from jobs.procrastinate import ProcrastinateJobs

    lib = ProcrastinateJobs("public")
    deep = 900_002  # a mail job (900002 % 8 == 2)
    print(f"\nprocrastinate, {JOBS:,} jobs (budget {BUDGET_S * 1000:.0f} ms a read)")
    with open_probe_connection(procrastinate_million.target) as conn:
        page = timed(conn, "first page (queue mail, all states)", lambda: lib.page(conn, "mail", JobFilter(), limit=50))
        assert len(page.jobs) == 50
        page = timed(conn, f"deep page (after id {deep})", lambda: lib.page(conn, "mail", JobFilter(), after=str(deep), limit=50))
        assert len(page.jobs) == 50 and int(page.jobs[0].id) > deep
        page = timed(conn, "newest first", lambda: lib.page(conn, "mail", JobFilter(), limit=50, newest_first=True))
        assert int(page.jobs[0].id) > 950_000
        for state in ("ready", "delayed", "blocked", "in_flight", "dead", "done"):
            for newest in (False, True):
                label = f"state {state}" + (", newest first" if newest else "")
                page = timed(conn, label, lambda s=state, n=newest: lib.page(conn, "mail", JobFilter(state=s), limit=50,
                                                                             newest_first=n))
                assert all(j.state in ({"delayed", "blocked"} if state == "delayed" else {state}) for j in page.jobs)
                assert len(page.jobs) <= 50 and (page.jobs or page.after is None or page.note)
        page = timed(conn, "kind filter (build_report)", lambda: lib.page(conn, "mail", JobFilter(kind="build_report"), limit=50))
        assert all(j.kind == "build_report" for j in page.jobs)
        page = timed(conn, "args containment (no index: bounded)",
                     lambda: lib.page(conn, "mail", JobFilter(match={"to": "user912346@example.com"}), limit=50))
        assert page.jobs or page.note
        page = timed(conn, "text search (bounded)", lambda: lib.page(conn, "mail", JobFilter(text="user912346@"), limit=50))
        assert page.jobs or page.note
        job = timed(conn, "job()", lambda: lib.job(conn, "mail", "912346"))
        assert job is not None and job.id == "912346"
