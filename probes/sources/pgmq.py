"""PGMQ: a table per queue (`q_<name>`) and its archive (`a_<name>`), listed in `pgmq.meta`.

In PGMQ's own terms (its `read` takes rows with `vt <= now()`): ready = `vt <= now()`; in
flight = `vt` ahead of a message read at least once; delayed = `vt` ahead of a message never
read (sent with a delay); dead = archived. Expressed as a job table: visible_at = vt, attempts =
read_ct, the archive as its dead-letter table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from psycopg import sql

from dbcore.database import one
from dbcore.sqlfiles import Queries

from ..config import DeclaredQueue
from .base import Detection, QueueDetails, QueueFigures, QueueSource, has_table
from .jobtable import JobTable

if TYPE_CHECKING:
    from ..config import Config
    from ..postgres import ProbeConnection

PGMQ_SQL = Queries("probes", "sources/pgmq.sql")


class Pgmq(QueueSource):
    name = "pgmq"
    order = 60
    options = ("schema",)
    default_schema = "pgmq"

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self.tables: dict[str, JobTable] = {}

    def detect(self, conn: ProbeConnection) -> Detection | None:
        if not has_table(conn, sql.Identifier(self.schema, "meta").as_string(conn)):
            return None
        return Detection(version=one(conn.execute(PGMQ_SQL["version"]))["version"], schema=self.schema)

    def _queues(self, conn: ProbeConnection) -> dict[str, JobTable]:
        statement = sql.SQL(PGMQ_SQL["queues"]).format(meta=sql.Identifier(self.schema, "meta"))
        current = {}
        for row in conn.execute(statement, {"schema": self.schema}).fetchall():
            name = row["queue_name"]
            table = self.tables.get(name)
            if table is None:
                table = JobTable(DeclaredQueue(
                    name=name, table=row["queue_table"], order_by="msg_id", age_column="enqueued_at",
                    visible_at_column="vt", attempts_column="read_ct", dead_letter_table=row["archive_table"],
                ), index_note=False)
            current[name] = table
        self.tables = current
        return current

    def sample(self, conn: ProbeConnection, detection: Detection) -> list[QueueFigures]:
        return [figures for table in self._queues(conn).values() for figures in table.sample(conn)]

    def details(self, conn: ProbeConnection, name: str) -> QueueDetails:
        table = self._queues(conn).get(name)
        return table.details(conn, None) if table is not None else QueueDetails()


SOURCE = Pgmq
