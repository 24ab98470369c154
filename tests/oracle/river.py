"""River for the truth oracle. River's workers are Go and cannot run here, so: its schema as its
migrations leave it, jobs inserted by River's own (Python, insert-only) client, and every other
write made with the statement River's Go code runs for it, quoted below with its source file
(github.com/riverqueue/river; the sqlc queries in riverdriver/riverpgxv5/internal/dbsqlc/).

What the truth follows. River's fetch, `JobGetAvailable` (dbsqlc/river_job.sql)::

    WITH locked_jobs AS (
        SELECT *
        FROM river_job
        WHERE
            state = 'available'
            AND queue = @queue::text
            AND scheduled_at <= coalesce(sqlc.narg('now')::timestamptz, now())
        ORDER BY priority ASC, scheduled_at ASC, id ASC
        LIMIT @max::integer
        FOR UPDATE
        SKIP LOCKED
    )
    UPDATE river_job
    SET state = 'running', attempt = river_job.attempt + 1, attempted_at = now(),
        attempted_by = array_append(river_job.attempted_by, @attempted_by::text)
    FROM locked_jobs WHERE river_job.id = locked_jobs.id RETURNING river_job.*;

is called by a queue's producer (producer.go), which does not call it for a paused queue::

    func (p *producer) innerFetchLoop(...) {
        var limit int
        if p.paused {
            limit = 0
        } else { limit = p.maxJobsToFetch() ...

where `paused` comes from the queue's row in `river_queue` when the producer starts
(``initiallyPaused := fetchedQueue != nil && (fetchedQueue.PausedAt != nil)``, fetchedQueue from
`QueueCreateOrSetUpdatedAt`) and follows it (``shouldBePaused := (updatedQueue.PausedAt != nil)``
in pollForSettingChanges, or the pause/resume control notifications of `QueuePause` /
`QueueResume`). So the SQL alone does not skip a paused queue's jobs, the fetch loop does. Per
queue:

- ready: ``state = 'available' AND scheduled_at <= now()``, its queue not paused;
- blocked: the same in a queue whose ``river_queue.paused_at`` is set (a queue with no
  `river_queue` row is not paused: a producer creates it unpaused);
- delayed: ``state = 'available' AND scheduled_at > now()`` or state ``scheduled``, ``retryable``
  (backing off; `JobSchedule` makes it available when due, until then the fetch skips it) or
  ``pending``; plus blocked;
- in flight: ``running``;
- dead: ``discarded``; ``completed`` and ``cancelled`` are finished, kept, in nothing.

Queue names as queuetop shows them (probes/sources/river.py): River's queue names; the truth
lists every queue registered in `river_queue` and every queue any job row names.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import Any

import psycopg
from psycopg import sql

SOURCE = "river"  # probes/sources/river.py: River.name
DEFAULT_SCHEMA = "public"
CUSTOM_SCHEMA = "river_custom"
LARGE_SCHEMA = "river_large"
CLIENT_ID = "oracle-client"  # attempted_by, as a River client's ID
MAX_ATTEMPTS_DEFAULT = 25  # riverqueue client.py: MAX_ATTEMPTS_DEFAULT

# -- the schema ------------------------------------------------------------------------------------
# river_job and river_job_state as River's Python client ships them (riverqueue 0.7.0,
# riverqueue/driver/riversqlalchemy/dbsqlc/river_job.sql: River's migrations up to 005), then what
# its migrations add that the client's copy leaves out (the Go repository's
# riverdriver/riverpgxv5/migration/main/):
SCHEMA_ADDITIONS = (
    # 001_create_river_migration, with 005's `line` (005_migration_unique_client.up.sql)
    "CREATE TABLE river_migration (line text NOT NULL DEFAULT 'main', version bigint NOT NULL,"
    " created_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (line, version))",
    "INSERT INTO river_migration (version) SELECT generate_series(1, 5)",
    # 002_initial_schema.up.sql: its indexes (the fetch reads through the prioritized one) and
    # river_leader (004 pins its name to 'default')
    "CREATE INDEX river_job_kind ON river_job USING btree (kind)",
    "CREATE INDEX river_job_state_and_finalized_at_index ON river_job USING btree (state, finalized_at)"
    " WHERE finalized_at IS NOT NULL",
    "CREATE INDEX river_job_prioritized_fetching_index ON river_job USING btree (state, queue, priority, scheduled_at, id)",
    "CREATE INDEX river_job_args_index ON river_job USING gin (args)",
    "CREATE INDEX river_job_metadata_index ON river_job USING gin (metadata)",
    "CREATE UNLOGGED TABLE river_leader (elected_at timestamptz NOT NULL, expires_at timestamptz NOT NULL,"
    " leader_id text NOT NULL, name text PRIMARY KEY DEFAULT 'default' CHECK (name = 'default'))",
    # 004_pending_and_more.up.sql
    "CREATE TABLE river_queue (name text PRIMARY KEY NOT NULL, created_at timestamptz NOT NULL DEFAULT now(),"
    " metadata jsonb NOT NULL DEFAULT '{}'::jsonb, paused_at timestamptz, updated_at timestamptz NOT NULL)",
    # 005_river_migration_add_line_river_job_add_unique_key.up.sql (the client's unique inserts
    # conflict on it)
    "CREATE UNIQUE INDEX river_job_kind_unique_key_idx ON river_job (kind, unique_key) WHERE unique_key IS NOT NULL",
)


def install(conn: psycopg.Connection, schema: str) -> None:
    """River's tables in `schema` (River's `Schema` option: its queries prefix that schema)."""
    from riverqueue.driver import riversqlalchemy

    text = resources.files(riversqlalchemy).joinpath("dbsqlc", "river_job.sql").read_text(encoding="utf-8")
    ddl = text.split("-- name:")[0]  # the schema; the rest are the client's queries
    with conn.transaction():
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(sql.Identifier(schema)))
        conn.execute(ddl)
        for statement in SCHEMA_ADDITIONS:
            conn.execute(statement)


# -- River's writes, each as River's Go code makes it ---------------------------------------------

# producer.go, on start: QueueCreateOrSetUpdatedAt (dbsqlc/river_queue.sql), returning the pause.
REGISTER_QUEUE = """
INSERT INTO {queues} (created_at, metadata, name, paused_at, updated_at)
VALUES (now(), '{{}}'::jsonb, %(name)s::text, NULL, now())
ON CONFLICT (name) DO UPDATE SET updated_at = EXCLUDED.updated_at
RETURNING paused_at
"""
# QueuePause (dbsqlc/river_queue.sql), as Client.QueuePause runs it.
PAUSE_QUEUE = """
UPDATE {queues}
SET paused_at = CASE WHEN paused_at IS NULL THEN now() ELSE paused_at END,
    updated_at = CASE WHEN paused_at IS NULL THEN now() ELSE updated_at END
WHERE CASE WHEN %(name)s::text = '*' THEN true ELSE name = %(name)s END
"""
# JobGetAvailable (dbsqlc/river_job.sql), quoted above: the producer's fetch.
FETCH = """
WITH locked_jobs AS (
    SELECT * FROM {jobs}
    WHERE state = 'available' AND queue = %(queue)s::text AND scheduled_at <= now()
    ORDER BY priority ASC, scheduled_at ASC, id ASC
    LIMIT %(max)s::integer
    FOR UPDATE SKIP LOCKED
)
UPDATE {jobs} AS river_job
SET state = 'running', attempt = river_job.attempt + 1, attempted_at = now(),
    attempted_by = array_append(river_job.attempted_by, %(attempted_by)s::text)
FROM locked_jobs
WHERE river_job.id = locked_jobs.id
RETURNING river_job.id
"""
# The executor's outcomes, written by the completer through JobSetStateIfRunningMany
# (dbsqlc/river_job.sql: only a job still `running` is set): success -> completed with
# finalized_at (JobSetStateCompleted); an error -> discarded with finalized_at once
# ``job.Attempt >= job.MaxAttempts`` (internal/jobexecutor/job_executor.go, JobSetStateDiscarded),
# else retryable at the retry time (JobSetStateErrorRetryable), the error appended to `errors` as
# rivertype.AttemptError ({at, attempt, error, trace}). The retry time is the worker's NextRetry()
# (River's Worker interface lets each worker choose it; DefaultClientRetryPolicy's attempt^4 s
# would be under the scheduler interval on a first failure, and the executor then sets the job
# `available` at once, not retryable).
COMPLETE = """
UPDATE {jobs} SET state = 'completed', finalized_at = now()
WHERE id = ANY(%(ids)s::bigint[]) AND state = 'running'
"""
FAIL = """
UPDATE {jobs}
SET state = (CASE WHEN attempt >= max_attempts THEN 'discarded' ELSE 'retryable' END)::{state_type},
    finalized_at = CASE WHEN attempt >= max_attempts THEN now() END,
    scheduled_at = CASE WHEN attempt >= max_attempts THEN scheduled_at ELSE now() + %(retry_after)s::interval END,
    errors = array_append(errors, jsonb_build_object('at', now(), 'attempt', attempt, 'error', %(error)s::text,
                                                     'trace', ''))
WHERE id = ANY(%(ids)s::bigint[]) AND state = 'running'
"""
# JobCancel (dbsqlc/river_job.sql) of a job that is not running: cancelled and finalized at once.
CANCEL = """
UPDATE {jobs}
SET state = CASE WHEN state = 'running' THEN state ELSE 'cancelled' END,
    finalized_at = CASE WHEN state = 'running' THEN finalized_at ELSE now() END,
    metadata = jsonb_set(metadata, '{{cancel_attempted_at}}'::text[], to_jsonb(now()), true)
WHERE id = ANY(%(ids)s::bigint[]) AND state NOT IN ('cancelled', 'completed', 'discarded') AND finalized_at IS NULL
"""

# -- the truth ---------------------------------------------------------------------------------------

TRUTH = """
WITH names AS (
    SELECT name FROM {queues}
    UNION
    SELECT DISTINCT queue FROM {jobs}
), per_queue AS (
    SELECT queue,
           count(*) FILTER (WHERE state = 'available' AND scheduled_at <= now()) AS due,
           count(*) FILTER (WHERE (state = 'available' AND scheduled_at > now())
                              OR state IN ('scheduled', 'retryable', 'pending')) AS later,
           count(*) FILTER (WHERE state = 'running') AS in_flight,
           count(*) FILTER (WHERE state = 'discarded') AS dead
    FROM {jobs} GROUP BY queue
)
SELECT n.name, q.paused_at IS NOT NULL AS paused,
       coalesce(c.due, 0), coalesce(c.later, 0), coalesce(c.in_flight, 0), coalesce(c.dead, 0)
FROM names n
LEFT JOIN {queues} q ON q.name = n.name
LEFT JOIN per_queue c ON c.queue = n.name
"""


def parts(schema: str) -> dict[str, sql.Identifier]:
    return {"jobs": sql.Identifier(schema, "river_job"), "queues": sql.Identifier(schema, "river_queue"),
            "state_type": sql.Identifier(schema, "river_job_state")}


def truth(conn: psycopg.Connection, schema: str = DEFAULT_SCHEMA) -> dict[str, dict[str, int]]:
    """Every queue of the River install in `schema`: ready, in_flight, delayed (blocked included),
    dead, blocked, as River's producers and fetch see them now."""
    out: dict[str, dict[str, int]] = {}
    for name, paused, due, later, in_flight, dead in conn.execute(sql.SQL(TRUTH).format(**parts(schema))).fetchall():
        blocked = due if paused else 0
        out[name] = {"ready": due - blocked, "in_flight": in_flight, "delayed": later + blocked, "dead": dead,
                     "blocked": blocked}
    return out


def fetch_would_claim(conn: psycopg.Connection, schema: str = DEFAULT_SCHEMA) -> dict[str, int]:
    """What River's fetch (JobGetAvailable, no limit) would claim now in each queue whose producer
    fetches at all (not paused), rolled back: the truth's `ready` must be exactly this."""
    p = parts(schema)
    out: dict[str, int] = {}
    with conn.transaction(force_rollback=True):
        for name, paused, *_ in conn.execute(sql.SQL(TRUTH).format(**p)).fetchall():
            if paused:
                continue
            claimed = conn.execute(sql.SQL(FETCH).format(**p), {"queue": name, "max": 2**31 - 1,
                                                               "attempted_by": "oracle"}).fetchall()
            out[name] = len(claimed)
    return out


# -- River, driven ---------------------------------------------------------------------------------

@dataclass
class SendEmail:
    """Job args as River's Python client takes them (kind + JSON)."""

    payload: dict[str, Any]
    kind: str = "send_email"

    def to_json(self) -> str:
        return json.dumps(self.payload)


class River:
    """One River install (a schema): River's Python client for inserts, and River's Go client's
    statements (above) for what its producers, executors and API calls write."""

    def __init__(self, dsn: str, schema: str) -> None:
        import riverqueue
        import sqlalchemy
        from riverqueue.driver import riversqlalchemy

        self.schema = schema
        self.parts = parts(schema)
        self.conn = psycopg.connect(dsn, autocommit=True, application_name="river-oracle")
        url = dsn.replace("postgresql://", "postgresql+psycopg://", 1)
        # The client's queries name river_job unqualified: its schema is the session's search path.
        self.engine = sqlalchemy.create_engine(url, connect_args={"options": f"-csearch_path={schema}"})
        self.client = riverqueue.Client(riversqlalchemy.Driver(self.engine))
        self._riverqueue = riverqueue

    def _run(self, statement: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        cursor = self.conn.execute(sql.SQL(statement).format(**self.parts), params)
        return cursor.fetchall() if cursor.description else []

    def insert(self, queue: str, count: int = 1, *, kind: str = "send_email", priority: int | None = None,
               max_attempts: int | None = None, scheduled_at: datetime | None = None) -> None:
        """`count` jobs through the client: one insert, or one insert_many (JobInsertFastMany)."""
        opts = self._riverqueue.InsertOpts(queue=queue, priority=priority, max_attempts=max_attempts,
                                           scheduled_at=scheduled_at)
        if count == 1:
            self.client.insert(SendEmail({"n": 0}, kind=kind), insert_opts=opts)
            return
        self.client.insert_many([self._riverqueue.InsertManyParams(args=SendEmail({"n": n}, kind=kind), insert_opts=opts)
                                 for n in range(count)])

    def insert_many(self, jobs: Sequence[tuple[str, str, int, datetime | None]], *, chunk: int = 40_000) -> None:
        """(queue, kind, priority, scheduled_at) per job, in batches through the client's own batch
        insert (its driver's JobInsertFastMany, with the arrays its `insert_many` builds: a job
        given a time is `scheduled`, else `available` as of now; max_attempts 25, no metadata or
        tags). The client's per-job argument checks are left out: they cost more than the insert."""
        from riverqueue.driver.riversqlalchemy.dbsqlc import river_job

        for start in range(0, len(jobs), chunk):
            batch = jobs[start:start + chunk]
            now = datetime.now(UTC)
            params = river_job.JobInsertFastManyParams(
                args=[json.dumps({"n": start + n}) for n in range(len(batch))], kind=[kind for _, kind, _, _ in batch],
                max_attempts=[MAX_ATTEMPTS_DEFAULT] * len(batch), metadata=["{}"] * len(batch),
                priority=[priority for _, _, priority, _ in batch], queue=[queue for queue, _, _, _ in batch],
                scheduled_at=[at or now for *_, at in batch],
                state=[river_job.models.RiverJobState.SCHEDULED if at else river_job.models.RiverJobState.AVAILABLE
                       for *_, at in batch],
                tags=[""] * len(batch))
            with self.engine.begin() as conn:
                river_job.Querier(conn).job_insert_fast_many(params)

    def register(self, queue: str) -> bool:
        """A producer for `queue` starts; whether the queue is paused."""
        [(paused_at,)] = self._run(REGISTER_QUEUE, {"name": queue})
        return paused_at is not None

    def fetch(self, queue: str, limit: int) -> list[int]:
        """A producer's fetch of up to `limit` jobs (none while its queue is paused): their ids."""
        if self.register(queue):
            return []
        rows = self._run(FETCH, {"queue": queue, "max": limit, "attempted_by": CLIENT_ID})
        return sorted(r[0] for r in rows)

    def complete(self, ids: Sequence[int]) -> None:
        self._run(COMPLETE, {"ids": list(ids)})

    def fail(self, ids: Sequence[int], error: str, retry_after: timedelta = timedelta(minutes=10)) -> None:
        self._run(FAIL, {"ids": list(ids), "error": error, "retry_after": retry_after})

    def cancel(self, ids: Sequence[int]) -> None:
        self._run(CANCEL, {"ids": list(ids)})

    def pause(self, queue: str) -> None:
        self._run(PAUSE_QUEUE, {"name": queue})

    def ids(self, queue: str, state: str) -> list[int]:
        rows = self.conn.execute(sql.SQL("SELECT id FROM {jobs} WHERE queue = %s AND state::text = %s ORDER BY id")
                                 .format(**self.parts), (queue, state)).fetchall()
        return [r[0] for r in rows]

    def close(self) -> None:
        self.engine.dispose()
        self.conn.close()


@dataclass
class Workload:
    """A built workload. River holds no lock or transaction while a job runs (its state is all
    there is), so its running jobs stay running with no process; close() finishes them as the
    executor would when their work returns (completed), and lets go of the connections."""

    schema: str
    size: str
    expected: dict[str, dict[str, int]]
    river: River
    running: list[int] = field(default_factory=list)
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def build_s(self) -> float:
        return float(self.report["seconds"])

    def close(self) -> None:
        try:
            self.river.complete(self.running)
        finally:
            self.river.close()


def _shape(ready: int = 0, in_flight: int = 0, scheduled: int = 0, retrying: int = 0, dead: int = 0,
           blocked: int = 0) -> dict[str, int]:
    return {"ready": ready, "in_flight": in_flight, "delayed": scheduled + retrying + blocked, "dead": dead,
            "blocked": blocked}


# Small, in each schema: every state in at least two queues. Running: fetched and not finished;
# retrying: fetched, failed, retry in 10 minutes; dead: fetched with max_attempts 1, failed
# (discarded); blocked: due jobs of a paused queue (paused_a, paused_b); finished: completed
# (mail 3, reports 1, paused_a 1, archive 3) and cancelled (mail 1); idle: registered, no jobs.
SMALL: dict[str, dict[str, int]] = {
    "mail": _shape(ready=3, in_flight=1, scheduled=2, retrying=1, dead=1),
    "reports": _shape(ready=2, in_flight=1, scheduled=1, retrying=1, dead=2),
    "paused_a": _shape(in_flight=1, scheduled=1, blocked=2),
    "paused_b": _shape(dead=1, blocked=1),
    "archive": _shape(),
    "idle": _shape(),
}


def build_small(dsn: str, schema: str = DEFAULT_SCHEMA) -> Workload:
    """SMALL in `schema` (installed here)."""
    began = time.monotonic()
    with psycopg.connect(dsn, autocommit=True) as conn:
        install(conn, schema)
    river = River(dsn, schema)
    running: list[int] = []
    try:
        later = datetime.now(UTC) + timedelta(hours=1)
        # mail: six fetched; three complete, one fails (retry), one fails for good, one runs on.
        river.insert("mail", 5)
        river.insert("mail", max_attempts=1)
        taken = river.fetch("mail", 6)
        river.complete(taken[:3])
        river.fail([taken[3]], "smtp timeout")
        river.fail([taken[5]], "mailbox full")  # max_attempts 1: discarded
        running.append(taken[4])
        river.insert("mail")
        river.cancel(river.ids("mail", "available"))  # cancelled before any worker took it
        river.insert("mail", 2, scheduled_at=later)
        river.insert("mail", 3)
        # reports: five fetched; one completes, one retries, two fail for good, one runs on.
        river.insert("reports", 3)
        river.insert("reports", 2, max_attempts=1)
        taken = river.fetch("reports", 5)
        river.complete(taken[:1])
        river.fail([taken[1]], "renderer crashed")
        river.fail(taken[3:], "template missing")
        running.append(taken[2])
        river.insert("reports", scheduled_at=later + timedelta(hours=1))
        river.insert("reports", priority=2)
        river.insert("reports", priority=4)
        # paused_a: one completes, one runs on, then the queue is paused: two due jobs wait (blocked).
        river.insert("paused_a", 2)
        taken = river.fetch("paused_a", 2)
        river.complete(taken[:1])
        running.append(taken[1])
        river.pause("paused_a")
        river.insert("paused_a", 2)
        river.insert("paused_a", scheduled_at=later)
        assert river.fetch("paused_a", 10) == []  # its producer fetches nothing now
        # paused_b: one fails for good, then paused with one due job.
        river.insert("paused_b", max_attempts=1)
        river.fail(river.fetch("paused_b", 1), "bad address")
        river.pause("paused_b")
        river.insert("paused_b")
        # archive: only finished jobs; idle: a producer, no jobs.
        river.insert("archive", 3)
        river.complete(river.fetch("archive", 3))
        river.register("idle")
        rows = river.conn.execute(sql.SQL("SELECT count(*) FROM {jobs}").format(**river.parts)).fetchone()
    except BaseException:
        river.close()
        raise
    return Workload(schema=schema, size="small", expected=SMALL, river=river, running=running,
                    report={"seconds": time.monotonic() - began, "jobs": rows[0] if rows else None})


# Large (280,018 jobs), correlated: bulk holds the whole backlog (160,000 available, priorities
# 1/2/4 skewed 150,000/8,000/2,000), done only finished ones (62,000 fetched and completed, as
# River leaves them until its cleaner deletes them a day later), digest only scheduled (bimodal:
# 12,000 at +15 min, 15,000 at +6 h), notify 20,000 available and 11,000 retrying; small figures
# in the same table: mail (7 discarded, 2 retrying, 5 ready, none running), hold (one running,
# then paused: 3 blocked).
LARGE: dict[str, dict[str, int]] = {
    "bulk": _shape(ready=160_000),
    "done": _shape(),
    "digest": _shape(scheduled=27_000),
    "notify": _shape(ready=20_000, retrying=11_000),
    "mail": _shape(ready=5, retrying=2, dead=7),
    "hold": _shape(in_flight=1, blocked=3),
}
LARGE_ROWS = 280_018


def build_large(dsn: str, schema: str = LARGE_SCHEMA) -> Workload:
    """LARGE in `schema` (installed here), then ANALYZE, as autovacuum would have by the time an
    operator looks."""
    began = time.monotonic()
    phases: dict[str, float] = {}

    def phase(name: str, since: float) -> float:
        now = time.monotonic()
        phases[name] = now - since
        return now

    with psycopg.connect(dsn, autocommit=True) as conn:
        install(conn, schema)
    river = River(dsn, schema)
    running: list[int] = []
    try:
        t = time.monotonic()
        for queue in LARGE:
            river.register(queue)  # every queue has a producer (a River client working it)
        river.insert("mail", 7, max_attempts=1)
        river.fail(river.fetch("mail", 7), "mailbox full")
        river.insert("mail", 2)
        river.fail(river.fetch("mail", 2), "smtp timeout")
        river.insert("mail", 5)
        river.insert("hold", 1)
        running += river.fetch("hold", 1)
        river.pause("hold")
        river.insert("hold", 3)
        t = phase("small figures", t)
        river.insert_many([("done", "archive", 1, None)] * 62_000)
        river.complete(river.fetch("done", 62_000))
        t = phase("done: 62,000 inserted, fetched, completed", t)
        river.insert_many([("notify", "notify", 1, None)] * 11_000)
        river.fail(river.fetch("notify", 11_000), "push gateway down", retry_after=timedelta(minutes=30))
        river.insert_many([("notify", "notify", 1, None)] * 20_000)
        t = phase("notify: 11,000 retrying, 20,000 available", t)
        soon, late = datetime.now(UTC) + timedelta(minutes=15), datetime.now(UTC) + timedelta(hours=6)
        river.insert_many([("digest", "digest", 1, soon + timedelta(seconds=n % 60)) for n in range(12_000)]
                          + [("digest", "digest", 1, late + timedelta(seconds=n % 60)) for n in range(15_000)])
        t = phase("digest: 27,000 scheduled", t)
        river.insert_many([("bulk", "thumb", 4 if n % 80 == 0 else 2 if n % 20 == 1 else 1, None) for n in range(160_000)])
        t = phase("bulk: 160,000 available", t)
        river.conn.execute(sql.SQL("ANALYZE {}").format(river.parts["jobs"]))
        phase("analyze", t)
    except BaseException:
        river.close()
        raise
    return Workload(schema=schema, size="large", expected=LARGE, river=river, running=running,
                    report={"seconds": time.monotonic() - began, "jobs": LARGE_ROWS, "phases_s": phases})
