"""PgQueuer (https://github.com/janbjorge/pgqueuer), 1.x: `pgqueuer`, one table for every
entrypoint (PgQueuer's queues), a `pgqueuer_status` enum, and `pgqueuer_log`, a row per change of
a job's status (kept until someone clears it: its aggregation into `pgqueuer_statistics` only
marks rows `aggregated`).

In its own terms (its dequeue, QueryQueueBuilder.build_dequeue_query; the SQL in
probes/sql/postgresql/sources/pgqueuer.sql quotes it), per entrypoint:

- ready: `queued` with `execute_after < now()` (the dequeue's `next_queued`, claimed in `priority
  DESC, id` order), and `picked` jobs gone stale: a heartbeat older than the workers'
  heartbeat_timeout, which the dequeue's `next_stale` takes again (their worker died or hangs; a
  live worker beats every timeout / 2). Counted ready, as Hangfire's fetched rows past the
  invisibility timeout are, and named in a note with how long their worker has been silent.
- in flight: `picked` with a fresh heartbeat.
- delayed: `queued` with `execute_after` ahead (enqueued with a delay, or a retry's back-off:
  retry_job sets `execute_after = now() + delay`).
- dead: `failed` jobs (an entrypoint registered with on_failure='hold' keeps them for `pgq
  requeue`), and the `exception` rows of pgqueuer_log: by default (on_failure='delete') a job that
  fails is deleted and logged `exception` with its traceback. Those log rows stay until the log is
  cleared (Queries.clear_queue_log, TRUNCATE): dead counts every job that failed since. Both
  tables are counted by the job-table layer (jobtable.py): exact, or estimated with a flag.
- blocked: not counted. The dequeue claims no fresh job of an entrypoint whose picked jobs reach
  its concurrency_limit (`1` serialises it), but the limit is in the workers' code, not in the
  database: where picked jobs hold concurrency slots and due jobs wait, a note says so and
  `blocked` is unknown (None).

The heartbeat_timeout is the application's setting (QueueManager.run, PgQueuer.run, `pgq run
--heartbeat-timeout`), 30 s unless set: `[sources.pgqueuer] heartbeat_timeout_s = "30"`.

Found by its tables' names in any schema (its DBSettings' `db_schema`, or the search_path). An
install with a table prefix (DBSettings' `prefix`: `<prefix>pgqueuer`, `<prefix>pgqueuer_log`) or
renamed tables is not found: a signature names its relations exactly.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from psycopg import sql

from dbcore.sqlfiles import Queries

from ..configmodel import DeclaredQueue
from .base import Detection, Identifier, Install, QueueDetails, QueueFigures, QueueSource
from .jobtable import COUNT_CAP, HEAD_ROWS, JobTable
from .queuenames import DRAINED_KEPT_S  # (a drained entrypoint stays listed at 0 this long, as elsewhere)

if TYPE_CHECKING:
    from ..configmodel import Config
    from ..session import ProbeConnection

PGQUEUER_SQL = Queries("probes", "sources/pgqueuer.sql")
DEFAULT_HEARTBEAT_TIMEOUT_S = 30.0  # QueueManager.run(heartbeat_timeout=timedelta(seconds=30)), PgQueuer 1.x
# Its status labels (pgqueuer 1.6, domain/schema/declaration.py), where the install's own cannot be read.
LABELS = ("queued", "picked", "successful", "exception", "canceled", "deleted", "failed")
LOG_EXTRA = "pgqueuer_log.traceback"
SLOT_EXTRA = "pgqueuer.slot"


class PgQueuer(QueueSource):
    name = "pgqueuer"
    order = 67
    options = ("schema", "heartbeat_timeout_s")
    # Its job table by the columns PgQueuer gives it; its log table (with its traceback column,
    # which later releases added) and the concurrency slot column (1.x) may be missing.
    signature = ("pgqueuer.entrypoint", "pgqueuer.status", "pgqueuer.priority", "pgqueuer.execute_after",
                 "pgqueuer.heartbeat", "pgqueuer.queue_manager_id")
    signature_extras = (LOG_EXTRA, SLOT_EXTRA)

    def __init__(self, config: Config, schema: str | None = None) -> None:
        super().__init__(config, schema)
        self._extras: frozenset[str] = frozenset()
        self._labels: tuple[str, ...] = LABELS
        self._tables: tuple[tuple[str, ...], bool, JobTable, JobTable | None] | None = None
        self._seen: dict[str, float] = {}  # an entrypoint that had a job -> when (monotonic), for DRAINED_KEPT_S

    def _parts(self) -> dict[str, sql.Composable]:
        return {"jobs": Identifier(self.schema, "pgqueuer"), "log": Identifier(self.schema, "pgqueuer_log")}

    def detected(self, conn: ProbeConnection, install: Install) -> Detection | None:
        self._extras = install.extras
        jobs = sql.Identifier(self.schema, "pgqueuer").as_string(conn)
        labels = tuple(r["label"] for r in conn.execute(PGQUEUER_SQL["labels"], {"jobs": jobs}))
        self._labels = labels or LABELS
        return Detection(schema=install.schema)

    @property
    def _has_log(self) -> bool:
        return LOG_EXTRA in self._extras

    def _timeout_s(self) -> tuple[float, str | None]:
        """The workers' heartbeat_timeout in seconds, and a note when the option is not one."""
        raw = self.option("heartbeat_timeout_s")
        if raw is None:
            return DEFAULT_HEARTBEAT_TIMEOUT_S, None
        try:
            value = float(str(raw))
        except ValueError:
            value = 0.0
        if not 0 < value < 10**7:
            return DEFAULT_HEARTBEAT_TIMEOUT_S, (f"heartbeat_timeout_s {raw!r} is not a positive number of seconds: "
                                                 f"using {DEFAULT_HEARTBEAT_TIMEOUT_S:g}")
        return value, None

    def _job_tables(self) -> tuple[JobTable, JobTable | None]:
        """The job table and the log, as job tables (made again when the install's labels change)."""
        labels, has_log = self._labels, self._has_log
        if self._tables is None or self._tables[:2] != (labels, has_log):
            failed = ("failed",) if "failed" in labels else ()
            jobs = JobTable(DeclaredQueue(
                name="", table=sql.Identifier(self.schema, "pgqueuer").as_string(None), order_by="id",
                age_column="execute_after", queue_column="entrypoint", state_column="status",
                not_before_column="execute_after", ready_states=("queued",), in_flight_states=("picked",),
                dead_states=failed, done_states=tuple(s for s in labels if s not in ("queued", "picked", *failed)),
            ), index_note=False, held_by_transactions=False, queue_names=False)
            log = None
            if has_log:
                # Its `exception` rows are dead (a failed job, deleted); every other status is a
                # record of a change, finished.
                log = JobTable(DeclaredQueue(
                    name="", table=sql.Identifier(self.schema, "pgqueuer_log").as_string(None), order_by="id",
                    queue_column="entrypoint", state_column="status", dead_states=("exception",),
                    done_states=tuple(s for s in labels if s != "exception"),
                ), index_note=False, held_by_transactions=False, queue_names=False)
            self._tables = (labels, has_log, jobs, log)
        return self._tables[2], self._tables[3]

    def sample(self, conn: ProbeConnection, detection: Detection) -> list[QueueFigures]:
        jobs, log = self._job_tables()
        timeout, timeout_note = self._timeout_s()
        # The log's dead (failed and deleted) jobs by entrypoint, first: an entrypoint with only
        # those is listed too.
        dead: dict[str, int] = {}
        dead_estimated: dict[str, float | None] = {}
        dead_counting: set[str] = set()
        log_error = None
        if log is not None:
            for figures in log.sample(conn):
                if figures.error is not None:
                    log_error = figures.error
                    continue
                if figures.dead is None and "dead" in figures.counting:  # the log is being counted
                    dead_counting.add(figures.name)
                dead[figures.name] = figures.dead or 0
                if "dead" in figures.estimated:
                    dead_estimated["dead"] = figures.estimated["dead"]
        now = time.monotonic()
        for name in [n for n, at in self._seen.items() if now - at > DRAINED_KEPT_S]:
            del self._seen[name]
        out = jobs.sample(conn, queues=sorted(set(dead) | set(self._seen)))
        counted = [f for f in out if f.error is None]
        for figures in counted:
            if figures.dead is None and "dead" in figures.counting:
                continue
            figures.dead = None if log_error is not None else (figures.dead or 0) + dead.get(figures.name, 0)
            if figures.name in dead_counting:
                figures.dead = None
                figures.counting.append("dead")
                continue
            if log_error is not None:
                figures.notes.append(f"its failed jobs are unknown: {log_error}")
            elif "dead" in dead_estimated:  # the older of the two counts' ages (None: never counted)
                age = dead_estimated["dead"]
                if "dead" in figures.estimated:
                    mine = figures.estimated["dead"]
                    age = None if age is None or mine is None else max(age, mine)
                figures.estimated["dead"] = age
        self._oldest_ready(conn, counted)
        self._slots(conn, counted)  # (before the stale jobs are counted ready: the limit does not hold those back)
        self._stale(conn, counted, timeout)
        for figures in counted:
            if figures.depth or figures.dead:
                self._seen[figures.name] = now
        if timeout_note and out:
            out[0].notes.append(timeout_note)
        return sorted(out, key=lambda f: f.name)

    def _oldest_ready(self, conn: ProbeConnection, out: list[QueueFigures]) -> None:
        """Each entrypoint's oldest due queued job, through its (entrypoint, execute_after) index:
        exact now, whatever the counts are."""
        waiting = [f.name for f in out if f.ready]
        if not waiting:
            return
        statement = sql.SQL(PGQUEUER_SQL["oldest_ready"]).format(**self._parts())
        ages = {r["queue"]: r["age_s"] for r in conn.execute(statement, {"queues": waiting})}
        for figures in out:
            if figures.name in ages:
                figures.oldest_ready_age_s = max(0.0, ages[figures.name])

    def _stale(self, conn: ProbeConnection, out: list[QueueFigures], timeout: float) -> None:
        """Picked jobs past the heartbeat timeout: its dequeue takes them again, so they move from
        in flight to ready (claimable since their heartbeat plus the timeout), with a note."""
        if not any(f.in_flight for f in out):
            return
        statement = sql.SQL(PGQUEUER_SQL["stale"]).format(**self._parts())
        rows = conn.execute(statement, {"timeout_s": timeout, "limit": COUNT_CAP + 1}).fetchall()
        capped = sum(r["stale"] for r in rows) > COUNT_CAP  # more than were read: at least these
        found = {r["queue"]: r for r in rows}
        for figures in out:
            row = found.get(figures.name)
            if row is None:
                continue
            stale = int(row["stale"])
            if figures.in_flight is not None:
                stale = min(stale, figures.in_flight)
                figures.in_flight -= stale
            if "ready" not in figures.counting:
                figures.ready = (figures.ready or 0) + stale
            if capped:
                for key in ("ready", "in_flight"):
                    figures.estimated.setdefault(key, None)
                figures.depth_is_estimate = True
            claimable_s = max(0.0, float(row["silent_s"]) - timeout)
            figures.oldest_ready_age_s = max(figures.oldest_ready_age_s or 0.0, claimable_s)
            figures.notes.append(
                f"{'at least ' if capped else ''}{stale:,} picked job(s) stale, counted ready: no heartbeat for over "
                f"{timeout:g} s (its workers' heartbeat_timeout), the oldest for {float(row['silent_s']):,.0f} s - "
                "their worker died or hangs; PgQueuer's dequeue takes them again")

    def _slots(self, conn: ProbeConnection, out: list[QueueFigures]) -> None:
        """Entrypoints whose picked jobs hold concurrency slots while due jobs wait: the limit is
        the workers' (not in the database), so whether those jobs are held back is not known."""
        if SLOT_EXTRA not in self._extras or not any(f.in_flight and f.ready for f in out):
            return
        statement = sql.SQL(PGQUEUER_SQL["slots"]).format(**self._parts())
        holding = {r["queue"]: int(r["holding"]) for r in conn.execute(statement)}
        for figures in out:
            held = holding.get(figures.name, 0)
            if held and figures.ready:
                figures.blocked = None
                figures.notes.append(
                    f"concurrency-limited: {held:,} running job(s) hold its slots; its due jobs wait while they are as many "
                    "as the concurrency_limit its workers register (in their code, not in the database: blocked unknown)")

    def moved(self, blocks: set[int]) -> None:
        self._job_tables()[0].tally.moved(blocks)

    def details(self, conn: ProbeConnection, name: str) -> QueueDetails:
        if self.detect(conn) is None:  # (reads which tables and labels the install has)
            return QueueDetails()
        timeout, _ = self._timeout_s()
        parts = self._parts()
        params: dict[str, Any] = {"queue": name, "limit": HEAD_ROWS, "timeout_s": timeout}
        head = conn.execute(sql.SQL(PGQUEUER_SQL["head"]).format(**parts), params).fetchall()
        dead: list[Any] = []
        if "failed" in self._labels:  # held after failing (on_failure 'hold')
            held = PGQUEUER_SQL["failed_held"] if self._has_log else PGQUEUER_SQL["failed_held_no_log"]
            dead.extend(conn.execute(sql.SQL(held).format(**parts), params).fetchall())
        if self._has_log:  # failed and deleted (on_failure 'delete', the default): logged with the traceback
            dead.extend(conn.execute(sql.SQL(PGQUEUER_SQL["exceptions"]).format(**parts), params).fetchall())
        dead.sort(key=lambda r: (r["failed_at"], r["job_id"]), reverse=True)
        return QueueDetails(head=head, dead=dead[:HEAD_ROWS])


SOURCE = PgQueuer
