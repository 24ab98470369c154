"""NServiceBus's SQL Server transport: one table per queue, found by its columns in any schema of
the database, with no config; each is a queue named `schema.table`.

The states, in the transport's own terms (Particular/NServiceBus.SqlServer, Queuing/SqlConstants.cs
and SqlServerConstants.cs; probes/sql/mssql/sources/nservicebus.sql cites them):

- ready: a row whose `Expires` is NULL or after GETUTCDATE() (UTC, as the transport writes it).
  A row past its `Expires` is discarded unprocessed by the next receive (and by the purger): it
  is in none of the figures, and a note says how many were seen.
- in flight: the transport's receive is destructive (`DELETE TOP(1) ... WITH (UPDLOCK, READPAST,
  ROWLOCK) OUTPUT` in the receive's transaction, open until the handler is done), so a message
  being handled is a deleted row still held by its receiver. Reads skip such rows (READPAST);
  they are counted from the lock manager (exclusive row locks of other sessions on the table),
  which needs VIEW SERVER STATE: without it in_flight is null. That count also takes in sends
  not yet committed (a handler's outgoing messages are inserted in its receive transaction),
  and a receive in the transport's no-transaction mode has committed its delete before handling
  (in none of the figures).
- delayed: the rows of the endpoint's delayed-delivery table, `<queue table>.<suffix>` in the same
  schema (suffix `Delayed` by default: DelayedDeliveryOptions.TableSuffix), found by its columns
  (Headers, Body, Due, RowVersion). All of them: a row whose `Due` has passed is not claimable
  until the endpoint's mover moves it into the queue (it does, in batches, every second or so),
  and counting it nowhere would hide a stopped mover; a note says when the earliest due one has
  waited more than a minute. A delayed table with no queue table of that name is a row of its own.
- dead: NServiceBus moves a message whose retries are exhausted to the error queue, a queue table
  like the others (`error` unless the endpoints say otherwise: `[sources.nservicebus] error_queue
  = "..."`). That table's row reports its messages as dead (ready, in flight and delayed 0, so
  its depth is 0); the endpoints' own rows have dead null, since which endpoint a failed message
  came from is only in its headers (NServiceBus.FailedQ), which counting would read row by row.
  Enter on an endpoint's queue shows the error queue's newest messages that failed there.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dbcore.database import DictRow, one
from dbcore.dialect import dialect_of
from dbcore.sqlfiles import Queries

from ..failures import PROBE_FAILURES, describe_error
from .base import Detection, QueueDetails, QueueFigures, QueueSource

if TYPE_CHECKING:
    from ..configmodel import Config
    from ..session import ProbeConnection

NSB_SQL = Queries("probes", "sources/nservicebus.sql", dialect="mssql")
MAX_TABLES = 200  # transport tables listed (queue and delayed tables together)
DISCOVERY_TTL_S = 30.0  # how long the catalog's list of transport tables is reused
DELAYED_COUNT_CAP = 10_000  # delayed rows counted; past it, the table's row count
OVERDUE_NOTE_S = 60.0  # a due delayed message still waiting this long gets a note
HEAD_ROWS = 20
ERROR_SCAN = 200  # newest error-queue messages looked at for an endpoint's Enter
DEFAULT_ERROR_QUEUE = "error"



@dataclass(frozen=True, slots=True)
class TransportTable:
    """A table with the transport's columns, as the catalog lists it."""

    schema: str
    table: str
    relid: int
    kind: str  # "queue" or "delayed"
    indexed: bool  # an index leads with RowVersion (a queue) or Due (a delayed table)

    @property
    def name(self) -> str:
        return f"{self.schema}.{self.table}"


def delayed_tables_of(tables: list[TransportTable]) -> tuple[dict[str, TransportTable], list[TransportTable]]:
    """Each queue's delayed-delivery table (`<queue table>.<suffix>` in its schema; the longest
    queue name wins), by queue name, and the delayed tables no queue has."""
    queues = [t for t in tables if t.kind == "queue"]
    paired: dict[str, TransportTable] = {}
    alone = []
    for delayed in (t for t in tables if t.kind == "delayed"):
        owners = [q for q in queues if q.schema == delayed.schema and delayed.table.startswith(q.table + ".")]
        owner = max(owners, key=lambda q: len(q.table), default=None)
        if owner is None or owner.name in paired:
            alone.append(delayed)
        else:
            paired[owner.name] = delayed
    return paired, alone


def failed_in(failed_queue: str | None, queue: TransportTable) -> bool:
    """Whether an error-queue message's NServiceBus.FailedQ (`table@[schema]@[catalog]`, or a bare
    table name) names `queue`."""
    if not failed_queue:
        return False
    parts = [part.strip().strip("[]") for part in failed_queue.split("@")]
    if parts[0].lower() != queue.table.lower():
        return False
    return len(parts) < 2 or not parts[1] or parts[1].lower() == queue.schema.lower()


class NServiceBus(QueueSource):
    name = "nservicebus"
    order = 66
    options = ("error_queue",)
    dialects = ("mssql",)

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self._found: tuple[float, list[TransportTable]] | None = None

    @property
    def error_queue(self) -> str:
        return str(self.option("error_queue", DEFAULT_ERROR_QUEUE))

    def is_error_queue(self, table: TransportTable) -> bool:
        return table.kind == "queue" and table.table.lower() == self.error_queue.lower()

    def tables(self, conn: ProbeConnection) -> list[TransportTable]:
        """The transport's tables, from the catalog (one statement), reused for DISCOVERY_TTL_S."""
        now = time.monotonic()
        if self._found is None or now - self._found[0] > DISCOVERY_TTL_S:
            found = [TransportTable(schema=row["schema_name"], table=row["table_name"], relid=row["relid"], kind=row["kind"],
                                    indexed=bool(row["indexed"]))
                     for row in conn.execute(NSB_SQL["tables"], {"max_tables": MAX_TABLES})]
            self._found = (now, found)
        return self._found[1]

    def detect(self, conn: ProbeConnection) -> Detection | None:
        return Detection() if any(t.kind == "queue" for t in self.tables(conn)) else None

    def _format(self, conn: ProbeConnection, query: str, table: TransportTable) -> Any:
        return dialect_of(conn).format(query, table=(table.schema, table.table))

    def sample(self, conn: ProbeConnection, detection: Detection) -> list[QueueFigures]:
        tables = self.tables(conn)
        queues = [t for t in tables if t.kind == "queue"]
        paired, alone = delayed_tables_of(tables)
        problem = None
        try:
            held = {row["relid"]: row for row in conn.execute(NSB_SQL["held_rows"], {"relids": [q.relid for q in queues]})}
        except PROBE_FAILURES as exc:
            held, problem = {}, describe_error(exc)
        if problem is None and any(not row["visible"] for row in held.values()):
            problem = "reading the lock manager needs VIEW SERVER STATE"
        out = [self._queue(conn, queue, held.get(queue.relid), paired.get(queue.name)) for queue in queues]
        out += [self._delayed_alone(conn, delayed) for delayed in alone]
        if problem is not None and out:
            out[0].notes.append(f"messages being handled (rows their receivers' open transactions hold) are not counted: {problem}")
        if len(tables) >= MAX_TABLES and out:
            out[-1].notes.append(f"only the first {MAX_TABLES} transport tables are shown")
        return out

    def _queue(self, conn: ProbeConnection, queue: TransportTable, held: DictRow | None,
               delayed: TransportTable | None) -> QueueFigures:
        quoted = dialect_of(conn).quote(queue.schema, queue.table)
        figures = QueueFigures(name=queue.name, table=quoted, relid=queue.relid, rates_from="deletes")
        if not queue.indexed:
            figures.error = f"{quoted} has no index that leads with RowVersion: reading its head would scan it"
            return figures
        window = self.config.window
        try:
            head = one(conn.execute(self._format(conn, NSB_SQL["head_window"], queue), {"window": window + 1}))
        except PROBE_FAILURES as exc:
            figures.error = describe_error(exc)
            return figures
        # In the window (it reads one row more): exact. Past it: the table's row count, less the
        # expired rows seen, all counted as ready (an estimate).
        visible = head["head_rows"]
        if visible > window:
            visible = max(visible, head["table_rows"] or 0)
            figures.depth_is_estimate = True
        ready = max(0, visible - head["expired"])
        in_flight = held["held"] if held is not None and held["visible"] else None
        if head["expired"]:
            count = f"at least {window}" if head["expired"] > window else str(head["expired"])
            figures.notes.append(f"{count} expired messages (Expires passed): the transport discards them unprocessed")
        figures.oldest_ready_age_s = head["oldest_ready_age_s"] if ready else None
        delayed_count = 0
        if delayed is not None:
            counted, problem = self._delayed_count(conn, delayed, figures)
            if problem is not None:
                figures.notes.append(f"{delayed.name}: {problem}: its delayed messages are not counted")
            delayed_count = counted or 0
        if self.is_error_queue(queue):
            figures.ready, figures.in_flight, figures.delayed = 0, 0, delayed_count
            figures.dead = ready + (in_flight or 0)
            figures.depth = delayed_count
            figures.oldest_ready_age_s = None
            return figures
        figures.ready = ready
        figures.in_flight = in_flight
        figures.delayed = delayed_count
        figures.depth = ready + (in_flight or 0) + delayed_count
        return figures

    def _delayed_count(self, conn: ProbeConnection, delayed: TransportTable, figures: QueueFigures) -> tuple[int | None, str | None]:
        """The rows of a delayed-delivery table (capped, then its row count), or why they could not
        be counted; a note on `figures` when the earliest due one has waited long."""
        if not delayed.indexed:
            return None, "no index leads with Due"
        try:
            row = one(conn.execute(self._format(conn, NSB_SQL["delayed"], delayed), {"cap": DELAYED_COUNT_CAP}))
        except PROBE_FAILURES as exc:
            return None, describe_error(exc)
        counted: int = row["counted"]
        if counted >= DELAYED_COUNT_CAP:
            counted = max(counted, row["table_rows"] or 0)
            figures.depth_is_estimate = True
        overdue = row["overdue_s"]
        if overdue is not None and overdue > OVERDUE_NOTE_S:
            figures.notes.append(f"the earliest due message in {delayed.name} has waited {overdue:.0f} s to be moved into the "
                                 "queue: is the endpoint running?")
        return counted, None

    def _delayed_alone(self, conn: ProbeConnection, delayed: TransportTable) -> QueueFigures:
        figures = QueueFigures(name=delayed.name, table=dialect_of(conn).quote(delayed.schema, delayed.table),
                               relid=delayed.relid, rates_from="deletes")
        counted, problem = self._delayed_count(conn, delayed, figures)
        if problem is not None:
            figures.error = problem
            return figures
        figures.ready, figures.in_flight, figures.delayed, figures.depth = 0, 0, counted, counted
        return figures

    def details(self, conn: ProbeConnection, name: str) -> QueueDetails:
        tables = self.tables(conn)
        table = next((t for t in tables if t.name == name), None)
        if table is None or not table.indexed:
            return QueueDetails()
        if table.kind == "delayed":
            return QueueDetails()
        if self.is_error_queue(table):
            return QueueDetails(dead=conn.execute(self._format(conn, NSB_SQL["failed"], table), {"limit": HEAD_ROWS}).fetchall())
        head = conn.execute(self._format(conn, NSB_SQL["head"], table), {"limit": HEAD_ROWS}).fetchall()
        failed: list[DictRow] = []
        for error in (t for t in tables if self.is_error_queue(t) and t.indexed):
            rows = conn.execute(self._format(conn, NSB_SQL["failed"], error), {"limit": ERROR_SCAN}).fetchall()
            failed += [row for row in rows if failed_in(row["failed_queue"], table)]
        return QueueDetails(head=head, dead=failed[:HEAD_ROWS])


SOURCE = NServiceBus
