"""Which queues a shared job table holds (a `queue_column` and no `queue`): every queue of which
it holds a row, finished ones too, so that a queue whose jobs have all finished is listed, at 0,
as long as its rows are kept (a library that keeps its finished jobs: Procrastinate, River,
pg-boss; a declared table with `done_states`).

They are read by skipping through an index, one index probe per queue (`distinct_values`), or
where the queue column leads no index but follows the state column in one (River's fetching
index), one probe per state and queue (`distinct_in_states`); at most MAX_QUEUES of them. The
read is made only where the planner says it would go through the index (EXPLAIN, kept while the
table's statistics stay as they were): a read that would scan the table for each queue is never
run. Where none can be made, a queue is listed while the tally counts an unfinished row of it,
and DRAINED_KEPT_S after its last (a busy queue emptied between two samples would otherwise blink
out of the dashboard and out of its verdict's window), with a note saying so.

The read costs one index probe a queue, and is made every sample; one that took longer than
SLOW_READ_S is kept SLOW_KEPT_S (the queues the tally finds meanwhile are listed too).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from psycopg import sql

from dbcore.sqlfiles import Queries

from .plans import Estimates
from .resolved import ResolvedTable
from .tally import SMALL_TABLE_PAGES, facts_of

if TYPE_CHECKING:
    from ..session import ProbeConnection

JOBTABLE_SQL = Queries("probes", "sources/jobtable.sql")
MAX_QUEUES = 200  # distinct queues of one shared table
DRAINED_KEPT_S = 300.0  # without an index to read the queues through: a drained queue stays listed this long
SLOW_READ_S = 0.05
SLOW_KEPT_S = 30.0


class QueueNames:
    """The queues one shared table holds, sample after sample (see the module's doc)."""

    def __init__(self) -> None:
        self._seen: dict[str, float] = {}  # with no index read: a queue found in the rows -> when (monotonic)
        self._read: list[str] | None = None  # the last index read's names (one past MAX_QUEUES at most)
        self._enum_states: list[str] | None = None
        self._read_at = 0.0
        self._read_kept_s = 0.0
        self.how: str | None = None  # "queue index", "small table", "state and queue index", or None (no read: the tally's)

    def listed(self, conn: ProbeConnection, table: ResolvedTable, estimates: Estimates, column: str,
               found: Iterable[str | None], wanted: list[str | None] | None) -> tuple[list[str | None], list[str]]:
        """The queues of `column` to show (`wanted` first, as a library's registry names them, then
        the others sorted; with no `wanted`, all sorted), at most MAX_QUEUES: those the tally
        `found` with an unfinished row first; and the notes to add to each."""
        now = time.monotonic()
        active = sorted({g for g in found if g is not None})
        names = self._index_read(conn, table, estimates, now)
        notes = []
        if names is None:
            notes.append(f"no index leads with queue_column {column!r} of {table.qualified}: a queue is listed while it "
                         f"holds an unfinished job (and {DRAINED_KEPT_S / 60:.0f} min after), not one that holds only "
                         "finished ones; create one")
            if wanted is None:
                self._seen.update((g, now) for g in active)
                for name in [n for n, at in self._seen.items() if now - at > DRAINED_KEPT_S]:
                    del self._seen[name]
                if len(self._seen) > 2 * MAX_QUEUES:  # many names come and go: the latest only
                    self._seen = dict(sorted(self._seen.items(), key=lambda item: item[1])[-2 * MAX_QUEUES:])
                names = sorted(self._seen)
            else:
                names = []
        elif len(names) > MAX_QUEUES:
            notes.append(f"more than {MAX_QUEUES} queues in {table.qualified}: {MAX_QUEUES} are listed, those with "
                         "unfinished jobs first")
        given = list(wanted or [])
        chosen: dict[str | None, None] = dict.fromkeys(given)
        for name in [*active, *names]:
            if len(chosen) >= MAX_QUEUES:
                break
            chosen.setdefault(name)
        rest = sorted(n for n in chosen if n not in given and n is not None)
        return [*given, *rest], notes

    def _index_read(self, conn: ProbeConnection, table: ResolvedTable, estimates: Estimates, now: float) -> list[str] | None:
        """The queues the table holds, read through an index (kept a while when slow), or None
        where no index leads to them."""
        if self._read is not None and now - self._read_at < self._read_kept_s:
            return self._read
        statement, params = self._statement(conn, table, estimates)
        if statement is None:
            self._read, self.how = None, None
            return None
        started = time.monotonic()
        names = {r["value"] for r in conn.execute(statement, params)}
        self._read, self._read_at = sorted(names)[:MAX_QUEUES + 1], now
        self._read_kept_s = SLOW_KEPT_S if time.monotonic() - started > SLOW_READ_S else 0.0
        return self._read

    def _statement(self, conn: ProbeConnection, table: ResolvedTable,
                   estimates: Estimates) -> tuple[sql.Composed | None, dict[str, Any]]:
        """The distinct read this table's indexes allow, and its parameters; (None, {}) where the
        planner would not go through an index for it."""
        parts = table.parts
        # (A view has no index of its own: the planner may read its table's.)
        if table.queue_indexed or table.relkind == "v":
            read = sql.SQL(JOBTABLE_SQL["distinct_values"]).format(table=parts["table"], column=parts["queue_column"])
            params: dict[str, Any] = {"max_values": MAX_QUEUES + 1}  # one more: whether there are more
            if _index_led(conn, estimates, "queues", read, params):
                self.how = "queue index"
                return read, params
        if table.state_queue_indexed and table.state_type is not None:
            states = self._states(conn, table, estimates)
            if states is not None:
                read = sql.SQL(JOBTABLE_SQL["distinct_in_states"]).format(
                    table=parts["table"], column=parts["queue_column"], state=parts["state"], state_type=table.state_type)
                params = {"max_values": MAX_QUEUES + 1, "states": states}
                if _index_led(conn, estimates, "queues in states", read, params):
                    self.how = "state and queue index"
                    return read, params
        if table.relkind != "v" and sum(facts_of(conn, table.relid, JOBTABLE_SQL["relation_facts"]).pages.values()) <= SMALL_TABLE_PAGES:
            # A table small enough to be read whole every cycle (its statistics may not favour the
            # index yet): one pass over it.
            self.how = "small table"
            read = sql.SQL(JOBTABLE_SQL["distinct_small"]).format(table=parts["table"], column=parts["queue_column"])
            return read, {"max_values": MAX_QUEUES + 1}
        return None, {}

    def _states(self, conn: ProbeConnection, table: ResolvedTable, estimates: Estimates) -> list[str] | None:
        """Every state the state column can hold: an enum's labels, or the distinct values of a
        text column (through the index that leads with it), finished ones included."""
        if table.state_type_name is not None:  # an enum's labels, once
            if self._enum_states is None:
                self._enum_states = [r["value"] for r in conn.execute(JOBTABLE_SQL["enum_labels"], {"type": table.state_type_name})]
            return self._enum_states
        read = sql.SQL(JOBTABLE_SQL["distinct_values"]).format(table=table.parts["table"], column=table.parts["state"])
        params = {"max_values": MAX_QUEUES}
        if not _index_led(conn, estimates, "states", read, params):
            return None
        return [r["value"] for r in conn.execute(read, params)]


def _index_led(conn: ProbeConnection, estimates: Estimates, what: str, read: sql.Composed, params: dict[str, Any]) -> bool:
    """Whether the planner reads `read` through an index, one probe per value (EXPLAIN, kept while
    the table's statistics stay as they were)."""
    def plan() -> Any:
        return conn.execute(sql.SQL(JOBTABLE_SQL["names_plan"]).format(read=read), params).fetchone()

    answer = estimates.remember(("names_plan", repr((what, sorted(params.get("states") or [])))), plan)
    return answer is not None and _probes_only(answer)


def _probes_only(plan: dict[str, Any]) -> bool:
    """Whether every read of a relation in a plan is an index probe: an Index Scan or an Index
    Only Scan with an index condition (the value to skip past), none filtering rows out after
    they were fetched, and no sort (the index gives the order). A scan of the table, or a sort
    of its rows, for each value, is none of these. (No bound on the planner's cost: it takes a
    hundred values a state, whatever the table holds.)"""
    document = plan["QUERY PLAN"]
    if isinstance(document, str):
        document = json.loads(document)
    stack = [document[0]["Plan"]]
    while stack:
        node = stack.pop()
        if "Relation Name" in node and (node.get("Node Type") not in ("Index Scan", "Index Only Scan")
                                        or not node.get("Index Cond") or node.get("Filter")):
            return False
        if "Sort" in str(node.get("Node Type", "")):
            return False
        stack.extend(node.get("Plans", []))
    return True
