"""The reference engine's table queues (pattern 1): `queuetop.queues` lists them, one table each."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dbcore.database import one
from dbcore.dialect import dialect_of
from dbcore.sqlfiles import Queries

from ..failures import PROBE_FAILURES, describe_error
from ..session import contained
from .base import Detection, QueueDetails, QueueFigures, QueueSource, has_table

if TYPE_CHECKING:
    from ..session import ProbeConnection

REFERENCE_SQL = Queries("probes", "sources/reference.sql")
DEAD_COUNT_CAP = 10_000
HEAD_ROWS = 20


class ReferenceQueues(QueueSource):
    name = "reference"
    kind = "reference"
    order = 10
    dialects = ("postgresql", "mssql")

    def detect(self, conn: ProbeConnection) -> Detection | None:
        return Detection(schema="queuetop") if has_table(conn, "queuetop.queues") else None

    def sample(self, conn: ProbeConnection, detection: Detection) -> list[QueueFigures]:
        window = self.config.window
        out = []
        for entry in conn.execute(REFERENCE_SQL["registry"]).fetchall():
            dialect, parts = dialect_of(conn), (entry["schema_name"], entry["table_name"])
            figures = QueueFigures(name=entry["name"], table=dialect.quote(*parts), relid=entry["relid"], rates_from="deletes")
            try:
                with contained(conn):  # a statement that fails leaves the probe's transaction usable for the next queue
                    head = one(conn.execute(dialect.format(REFERENCE_SQL["head_window"], table=parts), {"window": window + 1}))
                    dead = one(conn.execute(REFERENCE_SQL["dead_letters"], {"queue": entry["name"], "cap": DEAD_COUNT_CAP}))
            except PROBE_FAILURES as exc:
                figures.error = describe_error(exc)
                out.append(figures)
                continue
            # The probe reads one row more than the window: whether there is more is then known.
            if head["head_rows"] <= window:
                depth = head["head_rows"]
            else:
                depth = head["head_rows"] + max(0, head["max_id"] - head["last_head_id"])
            figures.depth = depth
            figures.in_flight = head["in_flight"]
            figures.delayed = head["delayed"]
            figures.ready = max(0, depth - head["in_flight"] - head["delayed"])
            figures.oldest_ready_age_s = head["oldest_ready_age_s"]
            capped = dead["counted"] >= DEAD_COUNT_CAP
            figures.dead = dead["span"] if capped else dead["counted"]
            figures.depth_is_estimate = head["head_rows"] > window or capped
            out.append(figures)
        return out

    def details(self, conn: ProbeConnection, name: str) -> QueueDetails:
        row = conn.execute(REFERENCE_SQL["table_of"], {"queue": name}).fetchone()
        if row is None:
            return QueueDetails()
        table = dialect_of(conn).format(REFERENCE_SQL["head"], table=(row["schema_name"], row["table_name"]))
        head = conn.execute(table, {"limit": HEAD_ROWS}).fetchall()
        dead = conn.execute(REFERENCE_SQL["dead_head"], {"queue": name, "limit": HEAD_ROWS}).fetchall()
        return QueueDetails(head=head, dead=dead)


SOURCE = ReferenceQueues
