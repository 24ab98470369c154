"""Acting on jobs: a few ids, or everything a filter matches, in bounded compare-and-set batches.

A bulk action pages through what the filter matches (keyset, oldest first, on a probe session)
and acts on each page's ids in a transaction of its own on a write session: a lock timeout of
LOCK_TIMEOUT_MS (a worker holding a row or the table makes the batch give way, smaller, not wait),
a statement timeout, and at most BATCH_S of work (the batch size adapts to keep each transaction
about that long). Each job is acted on only if it is still in the state it was listed in
(compare-and-set in the library's statement): one that changed since is skipped and counted.
The action stops between batches when asked (`stop`), saying where (`stopped_after`), and resumes
from there (`after`). Every batch that changed something is written to the audit file as it
commits (audit.py), so an interrupted action still says what it did.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg.rows import dict_row

from dbcore.database import Target, connect, one
from dbcore.errors import OperationFailed, StandbyReadOnly
from dbcore.sqlfiles import Queries
from probes.session import open_probe_connection, probe_transaction

from .audit import Audit
from .library import JobLibrary
from .model import MAX_PAGE, JobFilter, Outcome

BATCH_SQL = Queries("jobs", "batch.sql")
APPLICATION_NAME = "queuetop-jobs"
LOCK_TIMEOUT_MS = 1000
STATEMENT_TIMEOUT_MS = 5000
BATCH_S = 0.3  # the work one batch transaction aims at (well under a second)
FIRST_BATCH = 200
GIVE_WAY = 6  # a batch refused by a lock (or the statement timeout) this many times, halved each time, fails the action


def write_session(target: Target) -> psycopg.Connection[Any]:
    """A session that acts on jobs: autocommit (each batch opens its own transaction), dict rows,
    named `queuetop-jobs`; refused on a hot standby (StandbyReadOnly, exit 2), nothing written."""
    conn = connect(target, application_name=APPLICATION_NAME, row_factory=dict_row)
    try:
        if one(conn.execute(BATCH_SQL["in_recovery"]))["in_recovery"]:
            raise StandbyReadOnly(target.masked)
    except BaseException:
        conn.close()
        raise
    return conn


def _batch(conn: psycopg.Connection[Any], library: JobLibrary, queue: str, action: str, ids: list[str],
           expect: str | None) -> list[str]:
    """One batch in one short transaction: the ids changed."""
    with conn.transaction():
        conn.execute(BATCH_SQL["batch_settings"], {"lock_timeout_ms": str(LOCK_TIMEOUT_MS),
                                                   "statement_timeout_ms": str(STATEMENT_TIMEOUT_MS)})
        return library.act(conn, queue, action, ids, expect)


def _giving_way(conn: psycopg.Connection[Any], library: JobLibrary, queue: str, action: str, ids: list[str],
                expect: str | None) -> list[str]:
    """A batch that a lock (or the statement timeout) refuses is split in halves and each tried
    again; a single job a few times, a moment apart: the worker holding the lock goes on meanwhile."""
    refused: Exception | None = None
    for attempt in range(GIVE_WAY):
        try:
            return _batch(conn, library, queue, action, ids, expect)
        except (psycopg.errors.LockNotAvailable, psycopg.errors.QueryCanceled) as exc:
            refused = exc
        if len(ids) > 1:
            half = len(ids) // 2
            return (_giving_way(conn, library, queue, action, ids[:half], expect)
                    + _giving_way(conn, library, queue, action, ids[half:], expect))
        time.sleep(0.05 * (attempt + 1))  # one job, locked: give its holder a moment
    raise OperationFailed(f"job {ids[0]} stayed locked by another session ({type(refused).__name__}); "
                          f"the jobs listed before it were done")


def act_on_ids(target: Target, library: JobLibrary, queue: str, action: str, ids: list[str], *,
               expect: str | None = None, shown: str | None = None, audit: Audit | None = None) -> Outcome:
    """`action` on the jobs `ids` of `queue` (each only where it is in a state the action applies
    to, and in the queuetop state `expect` where given: the state it was listed in), in batches of
    at most MAX_PAGE ids."""
    type(library).refuse(action)
    outcome = Outcome(queue=shown or queue, source=library.source, action=action, matched=len(ids))
    with write_session(target) as conn:
        for start in range(0, len(ids), MAX_PAGE):
            chunk = [str(i) for i in ids[start:start + MAX_PAGE]]
            changed = _giving_way(conn, library, queue, action, chunk, expect)
            _count(outcome, chunk, changed, audit)
    return outcome


def _count(outcome: Outcome, ids: list[str], changed: list[str], audit: Audit | None) -> None:
    outcome.changed += len(changed)
    outcome.skipped += len(ids) - len(changed)
    outcome.ids.extend(changed)
    if audit is not None and changed:
        audit.batch(outcome, changed)


def run_bulk(target: Target, library: JobLibrary, queue: str, action: str, flt: JobFilter, *, batch: int | None = None,
             progress: Callable[[Outcome], None] | None = None, stop: threading.Event | None = None,
             after: str | None = None, shown: str | None = None, audit: Audit | None = None) -> Outcome:
    """`action` on every job of `queue` that `flt` matches, oldest first (after the id `after`, to
    resume), a batch at a time: `batch` ids (None: adapted to BATCH_S a transaction). `progress`
    is called after each batch with the outcome so far; `stop` set ends it after the batch in hand
    (`stopped_after` then says where to resume)."""
    type(library).refuse(action)
    outcome = Outcome(queue=shown or queue, source=library.source, action=action)
    size = batch or FIRST_BATCH
    reader = open_probe_connection(target, application_name=f"{APPLICATION_NAME}:list")
    try:
        with write_session(target) as conn:
            while True:
                if stop is not None and stop.is_set():
                    outcome.stopped_after = after
                    break
                with probe_transaction(reader):
                    page = library.page(reader, queue, flt, after=after, limit=size)
                ids = [job.id for job in page.jobs]
                if ids:
                    started = time.monotonic()
                    changed = _giving_way(conn, library, queue, action, ids, flt.state)
                    outcome.matched += len(ids)
                    _count(outcome, ids, changed, audit)
                    if batch is None:  # aim each transaction at BATCH_S
                        took = max(time.monotonic() - started, 1e-3)
                        size = max(10, min(MAX_PAGE, int(size * min(2.0, max(0.5, BATCH_S / took)))))
                    if progress is not None:
                        progress(outcome)
                after = page.after
                if after is None:
                    break
    finally:
        reader.close()
    return outcome


def count_matching(target: Target, library: JobLibrary, queue: str, flt: JobFilter, *,
                   limit: int | None = None) -> tuple[int, bool]:
    """How many jobs of `queue` `flt` matches now (for the confirmation), by the same keyset pages
    a bulk action reads; at most `limit` counted (then the second value is True: more)."""
    counted, after = 0, None
    reader = open_probe_connection(target, application_name=f"{APPLICATION_NAME}:count")
    try:
        while True:
            with probe_transaction(reader):
                page = library.page(reader, queue, flt, after=after, limit=MAX_PAGE)
            counted += len(page.jobs)
            if limit is not None and counted >= limit:
                return counted, True
            after = page.after
            if after is None:
                return counted, False
    finally:
        reader.close()
