"""Hangfire on SQL Server: its `JobQueue` table (one row per enqueued job, many queues in one
table) and its `Job` table (every job, its current state in `StateName`), in the `HangFire`
schema unless `[sources.hangfire] schema = ...` says otherwise.

The states, in Hangfire's own terms (HangfireIO/Hangfire, src/Hangfire.SqlServer; the T-SQL in
probes/sql/mssql/sources/hangfire.sql cites the files):

- ready: a JobQueue row Hangfire's fetch would take now (SqlServerJobQueue: `FetchedAt IS NULL OR
  FetchedAt < DATEADD(second, -timeout, GETUTCDATE())`): never fetched, or fetched by a worker
  that stopped renewing it for longer than the invisibility timeout.
- in flight: a JobQueue row fetched within the timeout (Hangfire 1.8's default, a sliding
  invisibility timeout: the worker sets FetchedAt and refreshes it every timeout / 5,
  SqlServerTimeoutJob), and a row held by the transactional fetch (the default before 1.8: the
  row is deleted in a transaction kept open while the job runs, so it is invisible to a reader
  that skips locked rows and is counted from the lock manager, which needs VIEW SERVER STATE and
  cannot say which queue the row is in).
- delayed: `Scheduled` jobs (waiting for their time, or retries backing off: the automatic retry
  schedules them) and `Awaiting` continuations (waiting for a parent job, as River's `pending`).
- dead: `Failed` jobs (retries exhausted; Hangfire keeps them, unexpiring, until someone retries
  or deletes them). `Succeeded` and `Deleted` are finished: in none of the figures.

Scheduled, Awaiting and Failed jobs have no JobQueue row, and Hangfire's own monitoring counts
them for the whole storage, not per queue (a scheduled job's queue is decided when it is
enqueued, by the job's own queue in 1.8 or by a [Queue] filter in the application's code). So
each queue's row has ready and in flight, and delayed and dead unknown (null); one more row,
`(not queued)`, has the delayed and dead jobs of the whole storage (ready and in flight 0). A
name in parentheses cannot be a Hangfire queue's (queue names are lower-case letters, digits,
`_` and `-`). Enter on a queue shows, besides its head, the failed jobs that last ran on it.

The invisibility timeout is the application's setting, not stored in the database:
`[sources.hangfire] invisibility_timeout_s = "300"` (Hangfire 1.8's default, used unless set).
With the transactional fetch FetchedAt stays NULL, so the setting does not matter there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dbcore.database import DictRow, one
from dbcore.dialect import dialect_of
from dbcore.sqlfiles import Queries

from ..failures import PROBE_FAILURES, describe_error
from .base import Detection, QueueDetails, QueueFigures, QueueSource, has_table

if TYPE_CHECKING:
    from ..session import ProbeConnection

HANGFIRE_SQL = Queries("probes", "sources/hangfire.sql", dialect="mssql")
NOT_QUEUED = "(not queued)"  # the row of the Scheduled, Awaiting and Failed jobs
MAX_QUEUES = 200  # distinct queues listed (one index seek each)
STATE_COUNT_CAP = 10_000  # jobs counted per state; past it, the statistics' estimate
HEAD_ROWS = 20
FAILED_SCAN = 500  # newest failed jobs looked at for a queue's Enter
DEFAULT_INVISIBILITY_TIMEOUT_S = 300  # SqlServerStorageOptions.SlidingInvisibilityTimeout, Hangfire 1.8



class Hangfire(QueueSource):
    name = "hangfire"
    order = 65
    options = ("schema", "invisibility_timeout_s")
    default_schema = "HangFire"
    dialects = ("mssql",)

    def _format(self, conn: ProbeConnection, query: str) -> Any:
        """A statement with its {table} slot filled with the Hangfire schema, quoted."""
        return dialect_of(conn).format(query, table=(self.schema,))

    def _timeout_s(self) -> tuple[int, str | None]:
        raw = self.option("invisibility_timeout_s")
        if raw is None:
            return DEFAULT_INVISIBILITY_TIMEOUT_S, None
        try:
            value = int(str(raw))
        except ValueError:
            value = 0
        if value <= 0:
            return DEFAULT_INVISIBILITY_TIMEOUT_S, (
                f"invisibility_timeout_s {raw!r} is not a positive number of seconds: using {DEFAULT_INVISIBILITY_TIMEOUT_S}")
        return value, None

    def detect(self, conn: ProbeConnection) -> Detection | None:
        quote = dialect_of(conn).quote
        if not (has_table(conn, quote(self.schema, "Job")) and has_table(conn, quote(self.schema, "JobQueue"))):
            return None
        version = None
        if has_table(conn, quote(self.schema, "Schema")):
            row = conn.execute(self._format(conn, HANGFIRE_SQL["version"])).fetchone()
            version = row["version"] if row is not None else None
        return Detection(version=version, schema=self.schema)

    def sample(self, conn: ProbeConnection, detection: Detection) -> list[QueueFigures]:
        table = dialect_of(conn).quote(self.schema, "JobQueue")
        layout = one(conn.execute(HANGFIRE_SQL["layout"], {"schema": self.schema}))
        timeout, timeout_note = self._timeout_s()
        names = [row["queue"] for row in conn.execute(self._format(conn, HANGFIRE_SQL["queues"]), {"max_queues": MAX_QUEUES})]
        out = [QueueFigures(name=name, table=table, relid=layout["jobqueue_relid"]) for name in names]
        if not layout["queue_clustered"]:
            for figures in out:
                figures.error = (f"{table} is not clustered on (Queue, Id) (Hangfire schema before 6): counting a queue "
                                 "would read all its rows; upgrade Hangfire's schema")
        elif out:
            try:
                self._count_queues(conn, out, timeout)
            except PROBE_FAILURES as exc:
                for figures in out:
                    figures.error = describe_error(exc)
        if out and timeout_note:
            out[0].notes.append(timeout_note)
        if len(names) >= MAX_QUEUES:
            out[-1].notes.append(f"only the first {MAX_QUEUES} queues of {table} are shown; depths past a window are estimated "
                                 "from the table's row count, which the others' rows inflate")
        out.append(self._not_queued(conn, layout))
        return out

    def _count_queues(self, conn: ProbeConnection, out: list[QueueFigures], timeout: int) -> None:
        window = self.config.window
        rows = {row["queue"]: row for row in conn.execute(
            self._format(conn, HANGFIRE_SQL["queue_windows"]),
            {"queues": [f.name for f in out], "window": window + 1, "timeout_s": timeout})}
        read = sum(row["head_rows"] for row in rows.values())
        first = next(iter(rows.values()), None)
        held = first["held"] if first is not None else None
        table_rows = (first["table_rows"] if first is not None else None) or 0
        # The windows read one row more than `window`: past it, a queue's depth is estimated. The
        # rows past every window (the table's row count less what was read and what is held) are
        # split among those queues by the Id range each has left past its window, and counted as
        # ready: a worker takes rows in Id order, so fetched rows sit at the head.
        over = {name: row for name, row in rows.items() if row["head_rows"] > window}
        rest = max(0, table_rows - read - (held or 0))
        spans = {name: max(0, row["max_id"] - row["last_head_id"]) for name, row in over.items()}
        total_span = sum(spans.values())
        for figures in out:
            row = rows.get(figures.name)
            if row is None:
                figures.error = "not read"
                continue
            depth = row["head_rows"]
            if figures.name in over:
                share = spans[figures.name] / total_span if total_span else 1 / len(over)
                depth += round(rest * share)
                figures.depth_is_estimate = True
            figures.in_flight = row["in_flight"]
            figures.depth = depth
            figures.ready = max(0, depth - row["in_flight"])
            figures.oldest_ready_age_s = row["oldest_ready_age_s"] if figures.ready else None
        if held is None:
            out[0].notes.append("jobs taken by Hangfire's transactional fetch (held in an open transaction) are not counted: "
                                "reading the lock manager needs VIEW SERVER STATE")
        elif held:
            if len(out) == 1:
                # One queue: the held rows (the lock does not say which queue) are its.
                out[0].in_flight = (out[0].in_flight or 0) + held
                out[0].depth = (out[0].depth or 0) + held
            else:
                out[0].notes.append(f"{held} JobQueue rows are held by open transactions (jobs taken by Hangfire's transactional "
                                    "fetch, or enqueues not yet committed), in queues the lock manager does not name: "
                                    "in no queue's in_flight")
        if len(out) == 1:
            out[0].rates_from = "deletes"  # the table is that queue's alone: inserted = enqueued, deleted = done

    def _not_queued(self, conn: ProbeConnection, layout: DictRow) -> QueueFigures:
        figures = QueueFigures(name=NOT_QUEUED, table=dialect_of(conn).quote(self.schema, "Job"), relid=layout["job_relid"],
                               ready=0, in_flight=0)
        try:
            row = one(conn.execute(self._format(conn, HANGFIRE_SQL["job_states"]),
                                   {"cap": STATE_COUNT_CAP, "job_relid": layout["job_relid"], "stats_id": layout["state_index_id"]}))
        except PROBE_FAILURES as exc:
            figures.error = describe_error(exc)
            return figures
        counts = {}
        for state in ("scheduled", "awaiting", "failed"):
            counted = row[state]
            if counted >= STATE_COUNT_CAP:
                estimate = row[f"{state}_estimate"]
                counted = max(counted, round(estimate)) if estimate is not None else counted
                figures.depth_is_estimate = True
            counts[state] = counted
        figures.delayed = counts["scheduled"] + counts["awaiting"]
        figures.dead = counts["failed"]
        figures.depth = figures.delayed
        return figures

    def details(self, conn: ProbeConnection, name: str) -> QueueDetails:
        if name == NOT_QUEUED:
            head = conn.execute(self._format(conn, HANGFIRE_SQL["waiting_head"]), {"limit": HEAD_ROWS}).fetchall()
            queue = None
        else:
            timeout, _ = self._timeout_s()
            head = conn.execute(self._format(conn, HANGFIRE_SQL["head"]),
                                {"queue": name, "limit": HEAD_ROWS, "timeout_s": timeout}).fetchall()
            queue = name
        dead = conn.execute(self._format(conn, HANGFIRE_SQL["failed"]),
                            {"queue": queue, "limit": HEAD_ROWS, "scan": FAILED_SCAN}).fetchall()
        return QueueDetails(head=head, dead=dead)


SOURCE = Hangfire
