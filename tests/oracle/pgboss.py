"""pg-boss 10 and 9 for the truth oracle: workloads made through pg-boss's own API
(tests/peers/pgboss_oracle.mjs), and the ground truth counted from pg-boss's own fetch query.

What the truth follows, quoted from the library (node_modules/pg-boss/src/plans.js, 10.4.2;
node_modules/pg-boss-9/src/plans.js, 9.0.3):

pg-boss 10, `fetchNextJob`::

    WITH next as (
      SELECT id, singleton_key, policy
      FROM ${schema}.job
      WHERE name = $1
        AND state < '${JOB_STATES.active}'
        ${ignoreStartAfter ? '' : 'AND start_after < now()'}
      ORDER BY ${priority ? 'priority desc, ' : ''}created_on, id
      LIMIT $2
      FOR UPDATE SKIP LOCKED
    ), grouped as ( ... row_number() OVER (PARTITION BY CASE
            WHEN $2 > 1 AND n.policy in ('singleton', 'stately') THEN n.singleton_key ...
    UPDATE ${schema}.job j SET state = '${JOB_STATES.active}', ...

and the unique partial indexes every queue's partition gets (`create_queue`)::

    CREATE UNIQUE INDEX job_i2 ON ${schema}.job (name, COALESCE(singleton_key, ''))
      WHERE state = '${JOB_STATES.active}' AND policy = '${QUEUE_POLICIES.singleton}'
    CREATE UNIQUE INDEX job_i3 ON ${schema}.job (name, state, COALESCE(singleton_key, ''))
      WHERE state <= '${JOB_STATES.active}' AND policy = '${QUEUE_POLICIES.stately}'

with `manager.fetch`: ``catch (err) { // errors from fetchquery should only be unique constraint
violations }`` -> ``return result?.rows || []``. So, per queue (states are the `job_state` enum,
created < retry < active < completed < cancelled < failed):

- ready: ``state < 'active' AND start_after < now()`` and not blocked;
- blocked: the same, in a `singleton` or `stately` queue (the job's own `policy`, copied from
  its queue at insert), while a job of the same queue, policy and ``COALESCE(singleton_key, '')``
  is ``active``: the fetch's UPDATE to active would break job_i2 / job_i3, the statement fails
  and pg-boss returns no job. (That failure also takes down the rest of its batch: a due job of
  another key *behind* a blocked one in the fetch order is not claimed either while the blocked
  one is at the head. The workloads here give every policy queue one key, so both readings
  agree; queuetop counts, like this truth, the jobs the indexes refuse.)
- delayed: ``state < 'active' AND start_after >= now()`` (scheduled, or `retry` backing off:
  `failJobs` sets ``start_after = now() + retry_delay * interval '1'``), plus blocked;
- in flight: ``active``;
- dead: ``failed`` (retries exhausted: ``WHEN retry_count < retry_limit THEN 'retry' ELSE
  'failed'``); `completed` and `cancelled` are finished and in no figure. (`getQueueSize`
  counts ``state < 'active'`` whatever start_after: delayed jobs as queued; not followed.)

pg-boss 9, `fetchNextJob`::

    WITH nextJob as (
      SELECT id
      FROM ${schema}.job j
      WHERE state < '${states.active}'
        AND name LIKE $1
        AND startAfter < now()
        ${enforceSingletonQueueActiveLimit
        ? `AND (
          CASE
            WHEN singletonKey IS NOT NULL
              AND singletonKey LIKE '${SINGLETON_QUEUE_KEY_ESCAPED}%'
              THEN NOT EXISTS (
                SELECT 1
                FROM ${schema}.job active_job
                WHERE active_job.state = '${states.active}'
                  AND active_job.name = j.name
                  AND active_job.singletonKey = j.singletonKey ...
        : ''}
      ORDER BY priority desc, createdOn, id

- ready: ``state < 'active' AND startAfter < now()``; delayed: the same with startAfter ahead
  (`failJobs`: ``startAfter = ... now() + retryDelay * interval '1'``); in flight: active;
- dead: ``failed`` and ``expired`` (`expire`: ``WHEN retryCount < retryLimit THEN 'retry' ELSE
  'expired'``: timed out with no retry left, as final as failed); completed and cancelled are
  finished;
- blocked: v9 has no queue policy. Its one rule that skips a due job is the singleton queue's
  active limit above, and it applies only to a fetch called with
  ``enforceSingletonQueueActiveLimit: true`` (a `work()`/`fetch()` option of each consumer, off by
  default, recorded nowhere in the database): pg-boss's default fetch claims a queued
  singleton-queue job while another is active. So the truth is blocked = 0 (the library's
  default); ``truth(..., enforce_singleton_active_limit=True)`` counts it the other way, for a
  deployment known to pass the option (and for the `blocked_v9` fragment's test).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from ..conftest import NodeWorkload
from .contract import FIELDS

V10, V9 = "10", "9"
VERSIONS = (V10, V9)
SOURCE = "pg-boss"  # probes/sources/pgboss.py: PgBoss.name
DEFAULT_SCHEMA = "pgboss"
CUSTOM_SCHEMA = "boss2"
LARGE_SCHEMA = "boss_big"
SINGLETON_QUEUE_KEY = "__pgboss__singleton_queue"  # pg-boss 9's plans.js: SINGLETON_QUEUE_KEY
MINUTE, HOUR = 60, 3600


@dataclass(frozen=True)
class QueueShape:
    """One queue of a workload: how many jobs end in each state (see pgboss_oracle.mjs)."""

    name: str
    policy: str | None = None  # v10 queue policy (createQueue): singleton, stately
    completed: int = 0  # finished, kept
    failed: int = 0  # failed for good (retryLimit 0)
    retry: int = 0  # failed once, backing off 600 s before a retry (retryLimit 3)
    expired: int = 0  # v9: timed out with no retry left (pg-boss's expire())
    active: int = 0  # fetched, never completed
    worker: bool = False  # one more job held by a real worker (work())
    blocked: int = 0  # v10: due, created while the singleton/stately queue has one active
    singleton_queue: bool = False  # v9: sendSingleton: one fetched (active), one queued
    scheduled: tuple[tuple[int, int], ...] = ()  # (count, seconds ahead)
    ready: tuple[tuple[int, int], ...] = ()  # (count, priority)

    def expected(self, *, enforce_singleton_active_limit: bool = False) -> dict[str, int]:
        """What the truth must say of this queue once it is built."""
        v9_blocked = int(self.singleton_queue and enforce_singleton_active_limit)
        blocked = self.blocked + v9_blocked
        return {
            "ready": sum(n for n, _ in self.ready) + int(self.singleton_queue) - v9_blocked,
            "in_flight": self.active + int(self.worker) + int(self.singleton_queue),
            "delayed": sum(n for n, _ in self.scheduled) + self.retry + blocked,
            "dead": self.failed + self.expired,
            "blocked": blocked,
        }

    @property
    def rows(self) -> int:
        return (self.completed + self.failed + self.retry + self.expired + self.active + int(self.worker)
                + 2 * int(self.singleton_queue) + self.blocked + sum(n for n, _ in self.scheduled)
                + sum(n for n, _ in self.ready))


@dataclass
class Workload:
    """A running pg-boss workload: its shapes per install (schema), held until close()."""

    version: str
    installs: dict[str, tuple[QueueShape, ...]]
    node: NodeWorkload
    report: dict[str, Any] = field(default_factory=dict)

    def expected(self, schema: str, **options: bool) -> dict[str, dict[str, int]]:
        return {q.name: q.expected(**options) for q in self.installs[schema]}

    @property
    def rows(self) -> int:
        return sum(q.rows for shapes in self.installs.values() for q in shapes)

    def close(self) -> None:
        self.node.close()


def small_shapes(version: str, variant: int = 0) -> tuple[QueueShape, ...]:
    """Every state in at least two queues. `variant` shifts some counts, so that two installs
    in one database cannot be mistaken for each other."""
    v = variant
    shapes = [
        QueueShape("mail", completed=4, failed=1 + v, retry=1, scheduled=((2, HOUR),), ready=((3 + v, 0),),
                   expired=1 if version == V9 else 0),
        QueueShape("reports", completed=2, failed=2, worker=True, ready=((1, 0),)),
        QueueShape("thumbs", completed=1, active=2 + v, retry=2, scheduled=((1, 5 * MINUTE),), ready=((4, 0), (1, 5)),
                   expired=1 if version == V9 else 0),
    ]
    if version == V10:
        shapes += [
            QueueShape("single", policy="singleton", completed=1, active=1, blocked=2 + v, scheduled=((1, HOUR),)),
            QueueShape("stately", policy="stately", completed=1, failed=1, worker=True, blocked=1),
            QueueShape("empty"),
        ]
    else:
        shapes += [QueueShape("single", completed=1, singleton_queue=True)]
    return tuple(shapes)


def large_shapes(version: str) -> tuple[QueueShape, ...]:
    """285,072 rows (v10; 285,071 for v9) with correlated states: one queue holding only
    finished jobs (60k), one holding the whole backlog (150k due, skewed priorities), bimodal
    start_after (12k at +10 min, 15k at +6 h), figures of 0..50 next to figures of 10k..50k in
    the same table. (+10 min: far enough ahead that they stay delayed while the tests run.)"""
    policy = version == V10
    return (
        QueueShape("archive", completed=60_000),
        QueueShape("backlog", ready=((135_000, 0), (13_500, 5), (1_500, 10))),
        QueueShape("bulk", completed=5_000, failed=7, retry=11_000, active=50,
                   scheduled=((12_000, 10 * MINUTE), (15_000, 6 * HOUR)), ready=((20_000, 0),)),
        QueueShape("dead", failed=12_000, ready=((1, 0),)),
        QueueShape("mail", scheduled=((5, HOUR),), ready=((3, 0),)),
        QueueShape("single", policy="singleton", worker=True, blocked=3) if policy
        else QueueShape("single", singleton_queue=True),
        QueueShape("stately", policy="stately", active=1, blocked=1) if policy else QueueShape("held", active=1),
        QueueShape("empty") if policy else QueueShape("idle", completed=2),
    )


def _start(modules: Path, dsn: str, version: str, installs: dict[str, tuple[QueueShape, ...]]) -> Workload:
    if version not in VERSIONS:
        raise ValueError(f"pg-boss {version}: one of {VERSIONS}")
    spec = {"installs": [{"schema": schema, "queues": [_spec(q) for q in shapes]} for schema, shapes in installs.items()]}
    node = NodeWorkload(modules, "pgboss_oracle.mjs", dsn, version, json.dumps(spec))
    return Workload(version=version, installs=installs, node=node, report=node.report)


def _spec(q: QueueShape) -> dict[str, Any]:
    return {k: v for k, v in asdict(q).items() if v not in (None, 0, False, ())}


def prepare(conn: psycopg.Connection) -> None:
    """gen_random_uuid() is core from PostgreSQL 13; pg-boss asks for pgcrypto before."""
    if conn.info.server_version < 130000:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pgcrypto")


def build_small(modules: Path, dsn: str, version: str,
                schemas: Iterable[str] = (DEFAULT_SCHEMA, CUSTOM_SCHEMA)) -> Workload:
    """The small workload in each of `schemas` (one install each, in one database)."""
    return _start(modules, dsn, version, {schema: small_shapes(version, n) for n, schema in enumerate(schemas)})


def build_large(modules: Path, dsn: str, version: str, schema: str = LARGE_SCHEMA) -> Workload:
    """The 250k+ workload in one install (`schema`)."""
    return _start(modules, dsn, version, {schema: large_shapes(version)})


# -- ground truth ------------------------------------------------------------------------------

_TRUTH_V10 = """
WITH active AS (
    -- What job_i2 / job_i3 hold: the active jobs of singleton and stately queues, by key.
    SELECT DISTINCT name, policy, COALESCE(singleton_key, '') AS k
    FROM {job} WHERE state = 'active' AND policy IN ('singleton', 'stately')
), jobs AS (
    SELECT j.name, j.state,
           j.state < 'active' AND j.start_after < now() AS due,
           j.state < 'active' AND j.start_after >= now() AS later,
           a.name IS NOT NULL AS held_back
    FROM {job} j
    LEFT JOIN active a ON a.name = j.name AND a.policy = j.policy AND a.k = COALESCE(j.singleton_key, '')
)
SELECT q.name,
       count(j.name) FILTER (WHERE j.due AND NOT j.held_back) AS ready,
       count(j.name) FILTER (WHERE j.state = 'active') AS in_flight,
       count(j.name) FILTER (WHERE j.later OR (j.due AND j.held_back)) AS delayed,
       count(j.name) FILTER (WHERE j.state = 'failed') AS dead,
       count(j.name) FILTER (WHERE j.due AND j.held_back) AS blocked
FROM {queue} q
LEFT JOIN jobs j ON j.name = q.name
GROUP BY q.name
"""

_TRUTH_V9 = """
WITH active AS (
    -- What the enforced active limit looks for: active jobs of singleton queues, by key.
    SELECT DISTINCT name, singletonkey FROM {job}
    WHERE state = 'active' AND starts_with(singletonkey, {prefix})
), jobs AS (
    SELECT j.name, j.state,
           j.state < 'active' AND j.startafter < now() AS due,
           j.state < 'active' AND j.startafter >= now() AS later,
           {enforce} AND a.name IS NOT NULL AS held_back
    FROM {job} j
    LEFT JOIN active a ON a.name = j.name AND a.singletonkey = j.singletonkey
)
SELECT name,
       count(*) FILTER (WHERE due AND NOT held_back) AS ready,
       count(*) FILTER (WHERE state = 'active') AS in_flight,
       count(*) FILTER (WHERE later OR (due AND held_back)) AS delayed,
       count(*) FILTER (WHERE state IN ('failed', 'expired')) AS dead,
       count(*) FILTER (WHERE due AND held_back) AS blocked
FROM jobs
GROUP BY name
"""


def truth(conn: psycopg.Connection, schema: str, version: str, *,
          enforce_singleton_active_limit: bool = False) -> dict[str, dict[str, int]]:
    """queue -> {ready, in_flight, delayed, dead, blocked} of the install in `schema`, as
    pg-boss `version`'s fetch sees it now (one statement: one now() for every figure). v10's
    queues are its queue table's (an empty one too), v9's the distinct job names. See the
    module's docstring for the lines followed; `enforce_singleton_active_limit` (v9 only): as
    consumers passing that option see it."""
    parts: dict[str, sql.Composable] = {"job": sql.Identifier(schema, "job"), "queue": sql.Identifier(schema, "queue")}
    if version == V10:
        statement = sql.SQL(_TRUTH_V10).format(**parts)
    elif version == V9:
        statement = sql.SQL(_TRUTH_V9).format(**parts, enforce=sql.Literal(enforce_singleton_active_limit),
                                              prefix=sql.Literal(SINGLETON_QUEUE_KEY))
    else:
        raise ValueError(f"pg-boss {version}: one of {VERSIONS}")
    with conn.cursor() as cur:
        cur.execute(statement)
        return {row[0]: dict(zip(FIELDS, (int(n) for n in row[1:]), strict=True)) for row in cur.fetchall()}

