"""PGMQ: a table per queue (`q_<name>`) and its archive (`a_<name>`), listed in `pgmq.meta`.

In PGMQ's own terms (its `read` takes rows with `vt <= now()`): ready = `vt <= now()`; in
flight = `vt` ahead of a message read at least once; delayed = `vt` ahead of a message never
read (sent with a delay); dead = archived. Expressed as a job table: visible_at = vt, attempts =
read_ct, the archive as its dead-letter table. Its queues: every queue `pgmq.meta` lists, whatever
its tables hold (one whose messages were all deleted is at 0; archived ones are its dead).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from psycopg import sql

from dbcore.sqlfiles import Queries

from ..configmodel import DeclaredQueue
from .base import Detection, Identifier, Install, QueueDetails, QueueFigures, QueueSource
from .jobtable import HEAD_ROWS, JobTable

if TYPE_CHECKING:
    from ..configmodel import Config
    from ..session import ProbeConnection

PGMQ_SQL = Queries("probes", "sources/pgmq.sql")


class Pgmq(QueueSource):
    name = "pgmq"
    order = 60
    options = ("schema",)
    default_schema = "pgmq"
    # Its queue list and two of its functions. PGMQ's SQL (pgmq.sql, and the extension, whose
    # control file sets `schema = pgmq`) names its schema `pgmq` in every statement and function
    # body: it cannot be installed anywhere else, and is found once per database at most.
    signature = ("meta.queue_name", "meta.is_partitioned", "send()", "read()")

    def __init__(self, config: Config, schema: str | None = None) -> None:
        super().__init__(config, schema)
        self.tables: dict[str, JobTable] = {}

    def detected(self, conn: ProbeConnection, install: Install) -> Detection | None:
        # The extension's version when installed as one (none when installed from its SQL).
        return Detection(version=install.extension_version("pgmq"), schema=install.schema)

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
                ), index_note=False, held_by_transactions=False,
                    # A visible message of a FIFO group whose head is not: the grouped reads skip it.
                    blocked=sql.SQL(PGMQ_SQL["blocked"]).format(table=Identifier(self.schema, f"q_{name}".lower()))
                    if row["has_headers"] else None)
            current[name] = table
        self.tables = current
        return current

    def sample(self, conn: ProbeConnection, detection: Detection) -> list[QueueFigures]:
        return [figures for table in self._queues(conn).values() for figures in table.sample(conn)]

    def details(self, conn: ProbeConnection, name: str) -> QueueDetails:
        table = self._queues(conn).get(name)
        if table is None:
            return QueueDetails()
        generic = table.details(conn, None)
        blocked = []
        if table.blocked is not None:  # FIFO groups are possible: its table has headers
            head = sql.SQL(PGMQ_SQL["blocked_head"]).format(table=Identifier(self.schema, f"q_{name}".lower()))
            blocked = conn.execute(head, {"limit": HEAD_ROWS}).fetchall()
        return QueueDetails(head=generic.head, dead=generic.dead, blocked=blocked)


SOURCE = Pgmq
