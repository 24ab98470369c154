"""pg-boss, versions 9 and 10: `<schema>.job` (v10: partitioned by queue, one partition per queue
of `<schema>.queue`; v9: one table), a `job_state` enum.

In its own terms (fetchNextJob): ready = `created` or `retry` with `start_after < now()`;
delayed = the same states with `start_after` ahead (scheduled, or backing off before a retry:
its `getQueueSize` counts those as queued, queuetop does not); in flight = `active`; dead =
`failed` (and v9's `expired`); `completed` and `cancelled` are finished. `id` is a random uuid:
the order is `created_on`, the ready age is from `start_after` (when the job became due). Its
queues: v10, every queue of its `queue` table (a job can only be sent to a queue created there);
v9, every name its job table holds a job of, finished ones too (at 0), through its `name` index
(archived jobs have left the table).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from psycopg import sql

from dbcore.database import one
from dbcore.sqlfiles import Queries

from ..configmodel import DeclaredQueue
from .base import Detection, Identifier, Install, QueueDetails, QueueFigures, QueueSource
from .jobtable import HEAD_ROWS, JobTable

if TYPE_CHECKING:
    from ..configmodel import Config
    from ..session import ProbeConnection

PGBOSS_SQL = Queries("probes", "sources/pgboss.sql")
V10 = 21  # pg-boss 10's schema version: the queue table and one partition per queue


class PgBoss(QueueSource):
    name = "pg-boss"
    order = 62
    options = ("schema", "enforce_singleton_queue_active_limit")
    default_schema = "pgboss"
    # Its tables have generic names (job, version, archive, schedule, subscription, and v10's
    # queue): the signature takes the columns only pg-boss gives them, as v10 spells them
    # (start_after, singleton_key) or v9 (startafter, singletonkey), beside its version table's
    # cron_on. Its schema is the `schema` constructor option: any, several in one database.
    signature = ("job.name", "job.state", "job.start_after|job.startafter", "job.singleton_key|job.singletonkey",
                 "version.version", "version.cron_on", "archive", "schedule.cron", "subscription.event")

    def __init__(self, config: Config, schema: str | None = None) -> None:
        super().__init__(config, schema)
        self.tables: dict[int, JobTable] = {}

    def _parts(self) -> dict[str, sql.Composable]:
        return {"jobs": Identifier(self.schema, "job"), "queues": Identifier(self.schema, "queue"),
                "versions": Identifier(self.schema, "version")}

    def detected(self, conn: ProbeConnection, install: Install) -> Detection | None:
        version = one(conn.execute(sql.SQL(PGBOSS_SQL["version"]).format(**self._parts())))["version"]
        return Detection(version=str(version) if version is not None else None, schema=install.schema)

    def _table(self, schema_version: int) -> JobTable:
        table = self.tables.get(schema_version)
        if table is None:
            v10 = schema_version >= V10
            start_after = "start_after" if v10 else "startafter"  # v9 spelled its columns without _
            table = self.tables[schema_version] = JobTable(DeclaredQueue(
                name="", table=sql.Identifier(self.schema, "job").as_string(None),
                order_by="created_on" if v10 else "createdon", age_column=start_after, queue_column="name",
                state_column="state", not_before_column=start_after, ready_states=("created", "retry"),
                in_flight_states=("active",), done_states=("completed", "cancelled"),
                dead_states=("failed",) if v10 else ("failed", "expired"),
                # Its rates: when each job was created, and completed (done, failed or cancelled).
                created_column="created_on" if v10 else "createdon", finished_column="completed_on" if v10 else "completedon",
            ), index_note=False, blocked=self._blocked(v10), held_by_transactions=False,
                # Its queues are all listed (v10: its queue table; v9: its job names, through
                # its own index): none is read from the rows besides.
                queue_names=False)
        return table

    def _blocked(self, v10: bool) -> sql.Composable | None:
        """Due jobs pg-boss's fetch skips now. v10: a singleton or stately queue's jobs while one
        of their key is active (its unique indexes refuse a second). v9: a singleton queue's, but
        only for consumers that pass `enforceSingletonQueueActiveLimit` - not recorded in the
        database, so said in the config (`[sources.pg-boss] enforce_singleton_queue_active_limit`)."""
        parts = {"job": sql.Identifier(self.schema, "job")}
        if v10:
            return sql.SQL(PGBOSS_SQL["blocked_v10"]).format(**parts)
        if self.option("enforce_singleton_queue_active_limit", False) is True:
            return sql.SQL(PGBOSS_SQL["blocked_v9"]).format(**parts)
        return None

    def sample(self, conn: ProbeConnection, detection: Detection) -> list[QueueFigures]:
        schema_version = int(detection.version or 0)
        table = self._table(schema_version)
        if schema_version < V10:  # v9: the queues are the distinct job names
            names = sql.SQL(PGBOSS_SQL["queues_v9"]).format(**self._parts())
            return table.sample(conn, queues=[r["name"] for r in conn.execute(names)])
        queues = sql.SQL(PGBOSS_SQL["queues_v10"]).format(**self._parts())
        partitions = {r["name"]: r["relid"] for r in conn.execute(queues, {"schema": self.schema})}
        out = table.sample(conn, queues=list(partitions))
        for figures in out:
            # Each queue has its partition to itself: its counters are the queue's.
            figures.relid = partitions.get(figures.name)
            figures.rates_from = "arrivals" if figures.relid is not None else None
        return out

    def details(self, conn: ProbeConnection, name: str) -> QueueDetails:
        detection = self.detect(conn)
        if detection is None:
            return QueueDetails()
        schema_version = int(detection.version or 0)
        generic = self._table(schema_version).details(conn, name)
        failures = sql.SQL(PGBOSS_SQL["failures_v10" if schema_version >= V10 else "failures_v9"]).format(**self._parts())
        blocked = []
        if schema_version >= V10:
            head = sql.SQL(PGBOSS_SQL["blocked_head_v10"]).format(job=sql.Identifier(self.schema, "job"))
            blocked = conn.execute(head, {"queue": name, "limit": HEAD_ROWS}).fetchall()
        return QueueDetails(head=generic.head, dead=conn.execute(failures, {"queue": name, "limit": HEAD_ROWS}).fetchall(),
                            blocked=blocked)


SOURCE = PgBoss
