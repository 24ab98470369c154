"""How many jobs arrived, left and failed in each queue between two reads: the rates of the
libraries' queues, from what each library records itself.

A table's statistics (pg_stat_user_tables) count inserts and deletes of a whole table, up to ten
seconds after they happen (a backend sends them when it goes idle, at most once a second): no
figure for one queue of a shared table, and a burst or a drain seen late. So each library's
queues are read from its own records, through an index, at a cost that follows the traffic
between two reads and never the depth of a queue (at most FEED_CAP rows a read):

- **Procrastinate**: its events table (one row per change of a job's status, written by its
  triggers in the same transaction): `deferred` arrived; `succeeded`, `failed`, `cancelled`,
  `aborted` left (`failed`, failed for good).
- **River**: its jobs (kept a day after they finish) read by id as they arrive; those finalized
  in the window by `finalized_at` through its (state, finalized_at) index (`discarded`: failed).
- **Graphile Worker** deletes a job when it completes: its id sequence tells how many arrived,
  the jobs still there which task and queue they went to, and the count's change what left
  (arrived - growth of the rows). Jobs that came and went between two reads are put to the one
  task (queue) that moved; where several did, shared out by what each did, and flagged estimates.
- **PgQueuer**: its log (a row per change of a job's status): `queued` with no traceback arrived
  (with one, a retry's back-off); `successful`, `exception`, `canceled`, `deleted`, `failed` left
  (`exception`, `failed`: failed for good).
- **PGMQ**: a table per queue; its msg_id sequence tells what arrived, and what left (deleted or
  archived) is what arrived minus the growth of its rows, when both counts are exact.

A read by id ("feed") keeps the highest id read, and the ids missing below it (a write not
committed yet when it was read, or rolled back): those are looked for again at each read for
GAP_TTL_S, so that a job is counted once, when its write is committed, whatever order writers
commit in. A read by recorded time (River's finalized_at) ends SETTLE_S before the server's clock,
and the next starts there.

A source without a reader here (pg-boss, declared tables, the engine's) keeps the rates its
tables' statistics give (probes/postgres.py).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from psycopg import sql

from dbcore.database import one
from dbcore.sqlfiles import Queries

from .base import Flow, Identifier
from .tally import SETTLE_S

if TYPE_CHECKING:
    from ..configmodel import DeclaredQueue
    from ..session import ProbeConnection
    from .base import QueueFigures, QueueSource
    from .tally import TallyView

FLOWS_SQL = Queries("probes", "sources/flows.sql")
FEED_CAP = 50_000  # rows a feed reads at most in one read (the rest at the next)
MAX_GAPS = 5_000  # ids missing below the highest read, looked for again (the oldest dropped past this)
GAP_TTL_S = 30.0  # ... for this long: a write that commits later than that is not counted


Tally = dict[str, dict[str, float]]  # queue name -> "enqueued" | "dequeued" | "failed" -> count


class IdFeed:
    """The rows of a table of records that came into sight since the last read, by id
    (FLOWS_SQL `id_feed`): the first read finds where to start (its highest id) and counts
    nothing."""

    def __init__(self, table: sql.Composable, id_column: sql.Composable,
                 rows: Callable[[sql.Composable], sql.Composable], *, cap: int = FEED_CAP) -> None:
        self.table, self.id_column, self.rows, self.cap = table, id_column, rows, cap
        self.hi: int | None = None
        self.gaps: dict[int, float] = {}  # id -> when it was first found missing (monotonic)
        self.blocks: set[int] = set()  # the pages the jobs read at the last read are on

    def read(self, conn: ProbeConnection) -> Counter[tuple[str | None, str]] | None:
        now = time.monotonic()
        if self.hi is None:
            start = one(conn.execute(sql.SQL(FLOWS_SQL["top_id"]).format(table=self.table, id=self.id_column)))["top"]
            self.hi = int(start) if start is not None else 0
            return None
        after = sql.SQL(FLOWS_SQL["ids_after"]).format(id=self.id_column)
        again = sql.SQL(FLOWS_SQL["ids_in"]).format(id=self.id_column)
        statement = sql.SQL(FLOWS_SQL["id_feed"]).format(rows_after=self.rows(after), rows_in=self.rows(again))
        counts: Counter[tuple[str | None, str]] = Counter()
        top: int | None = None
        missing: list[int] = []
        found: list[int] = []
        for row in conn.execute(statement, {"hi": self.hi, "cap": self.cap, "gaps": sorted(self.gaps)}):
            if row["part"] == "rows":
                counts[(row["grp"], row["kind"])] += int(row["n"])
            elif row["part"] == "top":
                top = int(row["n"]) if row["n"] is not None else None
            elif row["part"] == "missing":
                missing = list(row["ids"] or ())
            elif row["part"] == "blocks":
                self.blocks = set(row["ids"] or ())
            else:
                found = list(row["ids"] or ())
        for gone in found:
            self.gaps.pop(gone, None)
        for gap in missing:
            self.gaps[gap] = now
        for gap in [g for g, at in self.gaps.items() if now - at > GAP_TTL_S]:
            del self.gaps[gap]
        if len(self.gaps) > MAX_GAPS:
            self.gaps = dict(sorted(self.gaps.items(), key=lambda item: item[1])[-MAX_GAPS:])
        if top is not None:
            self.hi = max(self.hi, top)
        return counts


class FlowReader:
    """One library install's reader, kept from one probe cycle to the next. `read` says each
    queue's flow since the last read (None the first time: where to start is all it learns)."""

    def __init__(self, source: QueueSource) -> None:
        self.source = source
        self.at: float | None = None
        # Counts of a queue the records name and the figures do not list yet (its first job came
        # after its source's list was read): given to it at the next read, where it is listed.
        self.carried: dict[str, dict[str, float]] = {}
        self.blocks: set[int] = set()  # the pages of the jobs that moved since the last read

    def read(self, conn: ProbeConnection, figures: list[QueueFigures]) -> dict[str, Flow] | None:
        counts = self.counts(conn, figures)
        now = time.monotonic()
        span = now - self.at if self.at is not None else None
        self.at = now
        if counts is None or span is None or span <= 0:
            return None
        listed = {f.name for f in figures}
        for name, carried in self.carried.items():
            if name in listed and name in counts:
                for key, n in carried.items():
                    if counts[name].get(key) is not None:
                        counts[name][key] += n
        self.carried = {name: {k: v for k, v in c.items() if not k.endswith("_estimated")}
                        for name, c in counts.items() if name not in listed}
        if len(self.carried) > 1000:  # names that never come: a bound
            self.carried = {}
        flows = {}
        for f in figures:
            c = counts.get(f.name)
            if c is None:
                continue

            def whole(key: str, c: dict[str, float] = c) -> int | None:
                value = c.get(key)
                return None if value is None else max(0, round(value))

            estimated = tuple(k for k in ("enqueued", "dequeued", "failed") if c.get(f"{k}_estimated"))
            flows[f.name] = Flow(whole("enqueued"), whole("dequeued"), whole("failed"), span, estimated)
        return flows

    def counts(self, conn: ProbeConnection, figures: list[QueueFigures]) -> Tally | None:
        raise NotImplementedError


class Departures:
    """What left a queue between two reads, as what arrived minus the growth of its rows, the
    counts read by other statements than the arrivals (a moment apart): a job that arrived
    between the two is counted arrived and not yet among the rows, so one interval's figure may
    come out below 0. That is owed by the next rather than clamped to 0 (which would count it
    twice): the figures add up to the truth. A read whose rows are not exact (its count failed,
    or is an estimate, or is being made) says nothing of what left; what arrived meanwhile is kept,
    and the next exact read's figure covers the reads since the last exact one: none is lost."""

    def __init__(self) -> None:
        self.owed: dict[str, float] = {}
        self.base: dict[str, int] = {}  # the rows at the last exact read, while the reads since are not exact
        self.waiting: dict[str, float] = {}  # ... and what arrived since then

    def left(self, name: str, arrived: float, rows_now: int | None, rows_then: int | None) -> float | None:
        if rows_now is None:
            start = self.base.get(name, rows_then)
            if start is not None:
                self.base[name] = start
                self.waiting[name] = self.waiting.get(name, 0.0) + arrived
            return None
        then = self.base.pop(name) if name in self.base else rows_then
        if then is None:
            self.owed.pop(name, None)
            self.waiting.pop(name, None)
            return None
        arrived += self.waiting.pop(name, 0.0)
        left = arrived - (rows_now - then) - self.owed.get(name, 0.0)
        self.owed[name] = max(0.0, -left)
        return max(0.0, left)


def tally_flow(declared: DeclaredQueue, view: TallyView, group: str | None, figures: QueueFigures, span: float | None,
               departures: Departures, rows_before: dict[str | None, int | None]) -> Flow | None:
    """A declared table's queue's traffic since the last sample, from its recorded times
    (created_column, finished_column), counted by the tally in each chunk's window: exact where
    every chunk was read in this cycle with the same window (view.window_s), else what the chunks
    read now caught (flagged estimates). Without a finished column, what left is what arrived minus
    the growth of its rows, where both counts are exact (`departures`, `rows_before`: the table's)."""
    d = declared
    if not (d.created_column or d.finished_column) or span is None or span <= 0:
        return None
    arrived, finished, failed = view.flows.get(group, (0, 0, 0))
    exact = view.window_s is not None
    rows = _exact_rows(figures)
    left: float | None = finished if d.finished_column else None
    if left is None and d.created_column and exact:
        left = departures.left(str(group), arrived, rows, rows_before.get(group))
    rows_before[group] = rows
    return Flow(enqueued=arrived if d.created_column else None, dequeued=None if left is None else round(left),
                failed=failed if d.finished_column and d.dead_states else None,
                span_s=view.window_s if exact and view.window_s else span,
                estimated=() if exact else ("enqueued", "dequeued", "failed"))


def _exact_rows(f: QueueFigures) -> int | None:
    """A queue's rows in its table (waiting, running and dead), where every count is exact."""
    if f.error is not None or f.depth is None or f.depth_is_estimate or "dead" in f.estimated:
        return None
    return f.depth + (f.dead or 0)


class EventFeedFlows(FlowReader):
    """A library's table of records read by id (IdFeed): which kinds of record say a job arrived,
    left, failed for good."""

    ARRIVED: frozenset[str] = frozenset()
    LEFT: frozenset[str] = frozenset()
    FAILED: frozenset[str] = frozenset()
    feed: IdFeed

    def counts(self, conn: ProbeConnection, figures: list[QueueFigures]) -> Tally | None:
        read = self.feed.read(conn)
        self.blocks = self.feed.blocks
        if read is None:
            return None
        out: Tally = {f.name: {"enqueued": 0, "dequeued": 0, "failed": 0} for f in figures}
        for (queue, kind), n in read.items():
            if queue is None:
                continue
            c = out.setdefault(queue, {"enqueued": 0, "dequeued": 0, "failed": 0})
            c["enqueued"] += n if kind in self.ARRIVED else 0
            c["dequeued"] += n if kind in self.LEFT else 0
            c["failed"] += n if kind in self.FAILED else 0
        return out


class ProcrastinateFlows(EventFeedFlows):
    """Procrastinate's events table, read by id (its primary key)."""

    ARRIVED = frozenset({"deferred"})
    LEFT = frozenset({"succeeded", "failed", "cancelled", "aborted"})
    FAILED = frozenset({"failed"})

    def __init__(self, source: QueueSource) -> None:
        super().__init__(source)
        parts = {"jobs": Identifier(source.schema, "procrastinate_jobs"),
                 "events": Identifier(source.schema, "procrastinate_events")}
        self.feed = IdFeed(sql.SQL("{} AS e").format(parts["events"]), sql.SQL("e.id"),
                           lambda where: sql.SQL(FLOWS_SQL["procrastinate_events"]).format(**parts, where=where))


class PgQueuerFlows(EventFeedFlows):
    """PgQueuer's log table, read by id (its primary key)."""

    ARRIVED = frozenset({"queued"})
    LEFT = frozenset({"successful", "exception", "canceled", "deleted", "failed"})
    FAILED = frozenset({"exception", "failed"})

    def __init__(self, source: QueueSource) -> None:
        super().__init__(source)
        log, jobs = Identifier(source.schema, "pgqueuer_log"), Identifier(source.schema, "pgqueuer")
        self.feed = IdFeed(sql.SQL("{} AS l").format(log), sql.SQL("l.id"),
                           lambda where: sql.SQL(FLOWS_SQL["pgqueuer_log"]).format(log=log, jobs=jobs, where=where))


class RiverFlows(FlowReader):
    """River's jobs: arrivals by id, departures by finalized_at."""

    def __init__(self, source: QueueSource) -> None:
        super().__init__(source)
        self.jobs = Identifier(source.schema, "river_job")
        self.feed = IdFeed(sql.SQL("{} AS j").format(self.jobs), sql.SQL("j.id"),
                           lambda where: sql.SQL(FLOWS_SQL["river_jobs"]).format(jobs=self.jobs, where=where))
        self.since: float | None = None
        self.indexed = False
        self.reads = 0

    def counts(self, conn: ProbeConnection, figures: list[QueueFigures]) -> Tally | None:
        arrived = self.feed.read(conn)
        self.blocks = set(self.feed.blocks)
        if self.reads % 100 == 0:  # (a migration may add it meanwhile)
            self.indexed = bool(one(conn.execute(FLOWS_SQL["river_finalized_index"],
                                                 {"table": self.jobs.as_string(None)}))["indexed"])
        self.reads += 1
        if not self.indexed:  # no (state, finalized_at) index: what left is not read (it would scan the table)
            self.since = None
            if arrived is None:
                return None
            queues = _by_queue(arrived)
            only: Tally = {f.name: {"enqueued": float(queues.get(f.name, 0))} for f in figures}
            for queue, n in queues.items():
                only.setdefault(queue, {"enqueued": float(n)})
            return only
        statement = sql.SQL(FLOWS_SQL["river_finalized"]).format(jobs=self.jobs)
        finalized: Counter[tuple[str, str]] = Counter()
        until = None
        for row in conn.execute(statement, {"since": self.since, "settle": SETTLE_S}):
            if row["kind"] == "until":
                until = float(row["until"])
            else:
                finalized[(row["grp"], row["kind"])] += int(row["n"])
                self.blocks.update(row["blocks"] or ())
        first = self.since is None
        self.since = until
        if arrived is None or first:
            return None
        out: Tally = {f.name: {"enqueued": 0, "dequeued": 0, "failed": 0} for f in figures}
        for queue, n in _by_queue(arrived).items():
            out.setdefault(queue, {"enqueued": 0, "dequeued": 0, "failed": 0})["enqueued"] += n
        for (queue, state), n in finalized.items():
            c = out.setdefault(queue, {"enqueued": 0, "dequeued": 0, "failed": 0})
            c["dequeued"] += n
            if state == "discarded":
                c["failed"] += n
        return out


def _by_queue(read: Counter[tuple[str | None, str]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for (queue, _kind), n in read.items():
        if queue is not None:
            out[queue] = out.get(queue, 0) + n
    return out


@dataclass
class _Rows:
    """What a Graphile Worker task or queue held at a read."""

    rows: int | None  # waiting, running and dead: None where a count is not exact
    dead: int | None
    in_flight: int


class GraphileFlows(FlowReader):
    """Graphile Worker: its id sequence, its jobs still there, and the change of its counts."""

    def __init__(self, source: QueueSource) -> None:
        super().__init__(source)
        self.parts = {name: Identifier(source.schema, table) for name, table in (
            ("jobs", "_private_jobs"), ("tasks", "_private_tasks"), ("job_queues", "_private_job_queues"))}
        self.table_name = self.parts["jobs"].as_string(None)
        self.last: int | None = None  # the sequence's value at the last read
        self.held: dict[str, _Rows] = {}
        self.departures = Departures()
        self.pending: list[int] = []  # ids of the last read's range missing then
        self.activity: dict[str, dict[str, float]] = {}  # ... and what each task (queue) did in that window
        self.dead_seen: dict[str, int] = {}  # each task's (queue's) dead rows at the last read that counted them

    def counts(self, conn: ProbeConnection, figures: list[QueueFigures]) -> Tally | None:
        row = one(conn.execute(FLOWS_SQL["sequence_values"], {"tables": [self.table_name], "columns": ["id"]}))
        value = int(row["value"]) if row["value"] is not None else 0
        held = {f.name: _Rows(_exact_rows(f), f.dead if f.error is None and "dead" not in f.estimated else None,
                              f.in_flight or 0) for f in figures}
        last, before = self.last, self.held
        self.held = held
        if last is None:
            self.last = value
            return None
        upto = min(value, last + FEED_CAP)  # (the rest at the next read)
        self.last = upto
        for name in held:  # a task (queue) first listed now held nothing at the last read
            before.setdefault(name, _Rows(0, 0, 0))
        # The ids missing at the last read are looked for once more (an insert not committed then
        # is seen now, its task known); those missing twice came and went: their task is not known.
        pending, self.pending = self.pending, []
        seen: Counter[str] = Counter()
        self.blocks = set()
        if upto > last or pending:
            statement = sql.SQL(FLOWS_SQL["graphile_new"]).format(**self.parts)
            for r in conn.execute(statement, {"lo": last, "hi": upto, "pending": pending}):
                if r["part"] == "missing":  # (the ids are in the blocks column of that row)
                    self.pending = list(r["blocks"] or ())
                    continue
                seen[f"task:{r['task']}"] += int(r["n"])
                self.blocks.update(r["blocks"] or ())
                if r["queue"] is not None:
                    seen[f"queue:{r['queue']}"] += int(r["n"])
        # Jobs that arrived and are gone already, whose task (queue) is not known: of the last
        # read's missing ids, those still missing.
        gone = max(0, (upto - last) + len(pending) - len(self.pending) - sum(v for k, v in seen.items() if k.startswith("task:")))
        out: Tally = {}
        activities: dict[str, dict[str, float]] = {}
        for kind in ("task:", "queue:"):
            names = [name for name in held if name.startswith(kind)]
            for name in seen:  # its first jobs came after the list was read: theirs, at the next read
                if name.startswith(kind) and name not in held:
                    out[name] = {"enqueued": seen[name]}
                    # It held nothing at the last read; what it holds now is not known: what left
                    # is said at the next read that lists it, these arrivals among its figure.
                    self.departures.left(name, seen[name], None, 0)
            # Those gone went missing in the last read's window: shared out by what each task
            # (queue) did then. A named queue is a job's option: those gone among queues are at most
            # those among tasks.
            activities[kind] = activity = {n: self._activity(n, seen[n], before.get(n), held[n]) for n in names}
            then_activity = self.activity.get(kind, {})
            moving = [n for n, a in then_activity.items() if a > 0 and n in held]
            total = sum(then_activity.get(n, 0.0) for n in names)
            for name in names:
                share: float = 0.0
                estimated = False
                if gone > 0 and kind == "task:" and len(moving) == 1:
                    share = gone if name in moving else 0.0
                elif gone > 0:
                    share, estimated = (gone * then_activity.get(name, 0.0) / total if total else 0.0), True
                c: dict[str, float] = {"enqueued": seen[name] + share}
                now, then = held[name], before.get(name)
                left = self.departures.left(name, c["enqueued"], now.rows, then.rows if then is not None else None)
                if left is not None:
                    c["dequeued"] = left
                # The dead rows' growth since the last read that counted them exactly (a read whose
                # count failed between says nothing, and loses nothing).
                dead_then = self.dead_seen.get(name, then.dead if then is not None else None)
                if now.dead is not None:
                    if dead_then is not None:
                        c["failed"] = max(0, now.dead - dead_then)
                    self.dead_seen[name] = now.dead
                if estimated:
                    c["enqueued_estimated"] = c["dequeued_estimated"] = 1
                out[name] = c
            del activity
        self.activity = activities
        return out

    @staticmethod
    def _activity(name: str, seen: int, then: _Rows | None, now: _Rows) -> float:
        """How much a task (queue) did between two reads, as far as can be seen: its jobs that
        arrived and are still there, those running at either read, and the change of its rows."""
        moved = abs(now.rows - then.rows) if then is not None and now.rows is not None and then.rows is not None else 0
        return seen + now.in_flight + (then.in_flight if then is not None else 0) + moved


class PgmqFlows(FlowReader):
    """PGMQ: each queue table's msg_id sequence, and the change of its rows."""

    def __init__(self, source: QueueSource) -> None:
        super().__init__(source)
        self.last: dict[str, tuple[int, int | None]] = {}  # queue -> (sequence value, exact rows)
        self.departures = Departures()

    def counts(self, conn: ProbeConnection, figures: list[QueueFigures]) -> Tally | None:
        tables = {f.name: Identifier(self.source.schema, f"q_{f.name}".lower()).as_string(None)
                  for f in figures if f.error is None}
        if not tables:
            return None
        names = list(tables)
        values = {r["table_name"]: r["value"] for r in conn.execute(
            FLOWS_SQL["sequence_values"], {"tables": [tables[n] for n in names], "columns": ["msg_id"] * len(names)})}
        current: dict[str, tuple[int, int | None]] = {}
        out: Tally = {}
        by_name = {f.name: f for f in figures}
        for name in names:
            value = values.get(tables[name])
            value = int(value) if value is not None else 0
            rows = by_name[name].depth if not by_name[name].depth_is_estimate else None
            current[name] = (value, rows)
            previous = self.last.get(name)
            if previous is None:
                continue
            arrived = max(0, value - previous[0])
            c: dict[str, Any] = {"enqueued": arrived}
            left = self.departures.left(name, arrived, rows, previous[1])
            if left is not None:
                c["dequeued"] = left
            out[name] = c
        first = not self.last
        self.last = current
        return None if first else out


READERS: dict[str, type[FlowReader]] = {
    "procrastinate": ProcrastinateFlows,
    "river": RiverFlows,
    "graphile-worker": GraphileFlows,
    "pgmq": PgmqFlows,
    "pgqueuer": PgQueuerFlows,
}


@dataclass
class Flows:
    """The flow readers of one monitored database's library installs, kept across cycles."""

    readers: dict[tuple[str, str], FlowReader] = field(default_factory=dict)

    def read(self, conn: ProbeConnection, source: QueueSource, figures: list[QueueFigures]) -> None:
        """Give each of `source`'s queues its flow since the last read (QueueFigures.flow)."""
        cls = READERS.get(source.name)
        if cls is None or not source.signature:
            return
        key = (source.name, source.schema)
        reader = self.readers.get(key)
        if reader is None:
            reader = self.readers[key] = cls(source)
        flows = reader.read(conn, figures)
        if reader.blocks:  # where the jobs that moved are now: their counts are read again first
            source.moved(reader.blocks)
        if flows is None:
            return
        for f in figures:
            f.flow = flows.get(f.name)

    def keep_only(self, present: set[tuple[str, str]]) -> None:
        """Forget the readers of installs that are gone."""
        for key in [k for k in self.readers if k not in present]:
            del self.readers[key]
