"""Any job table, counted right or honestly estimated at a cost that does not grow with depth.

A `DeclaredQueue` (the config's `[[queues]]`, also what the library adapters are made of)
says which columns mean what. Each row of a queue is then, in this order:

- done (`done_states`): not counted at all;
- dead: in `dead_states`, or its attempts reached their maximum (and it is not being worked);
- in flight: in `in_flight_states`, or `in_flight_when_not_null` is set, or `visible_at` is
  ahead and the row was attempted (claimed until then), or an open transaction holds it;
- delayed: in `delayed_states`, or `not_before` is ahead, or `visible_at` is ahead on a row
  never attempted (sent with a delay);
- ready: the rest of the `ready_states` (all of them, with no state list).

Counting reads at most `cap` rows per state (or per queue, without a state column), through
the state's index where the table has one; past the cap, the figure is the planner's estimate
for that state, split in the proportions of the rows read, and flagged as an estimate.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from dbcore.database import one
from dbcore.sqlfiles import Queries

from ..config import DeclaredQueue
from ..failures import describe_error
from .base import QueueDetails, QueueFigures, is_relation_name

if TYPE_CHECKING:
    from ..postgres import ProbeConnection

JOBTABLE_SQL = Queries("probes", "sources/jobtable.sql")
COUNT_CAP = 10_000  # rows read per state (all queues of a shared table together) in a table that is not large
LARGE_TABLE_CAP = 1_000  # the same in a large table (past LARGE_TABLE_ROWS), where more is estimated
ESTIMATES_MAX_AGE_S = 60.0
SPLIT_SAMPLE_PAGES = 64  # random pages read to split an estimated state (held, later, exhausted)
MIN_SPLIT_ROWS = 30  # rows of a state (of a queue) the page sample must meet to split it
OLDEST_COST_PER_QUEUE = 50.0  # an oldest-due lookup is made when it is an index probe per queue
SAMPLE_ROWS = 200  # read of a state the planner expects to exceed the cap: enough to split it
READ_COST_PER_ROW = 5.0  # a large table's state is read when the planner expects it to cost at most this a row
MAX_QUEUES = 200  # distinct queues of one shared table
LARGE_TABLE_ROWS = 100_000  # above this, a state no index serves is estimated, not read
_NOTHING_READ: dict[str, Any] = {"scanned": 0, "held": 0, "later": 0, "exhausted": 0, "oldest_due_age_s": None}
HEAD_ROWS = 20
_TIMESTAMPS = ("timestamp", "date")


@dataclass(frozen=True, slots=True)
class ResolvedTable:
    """A declared table, resolved through the catalog once (names quoted from the catalog)."""

    relid: int
    qualified: str
    relkind: str  # r table, p partitioned parent, v view, m materialized view
    can_select: bool
    rls_active: bool
    parts: dict[str, sql.Composable]  # the {fields} of jobtable.sql
    state_type: sql.Composable | None
    state_type_name: str | None  # the state column's type, for enum labels
    queue_type: sql.Composable | None
    indexed: bool  # order_by leads an index
    queue_indexed: bool  # queue_column leads an index (the distinct-queue skip scan needs it)
    state_queue_indexed: bool  # an index leads with (state_column, queue_column): a skip scan per state


def resolve(conn: ProbeConnection, declared: DeclaredQueue) -> ResolvedTable:
    """Look the table and every configured column up in the catalog; LookupError says what is
    missing. Nothing configured is ever put into SQL as text."""
    # Not a relation's name at all: not found, without asking (to_regclass raises on it before 16).
    row = conn.execute(JOBTABLE_SQL["resolve"], {"table": declared.table}).fetchone() if is_relation_name(declared.table) else None
    if row is None:
        raise LookupError(f"table {declared.table!r} not found (or not a table or view)")
    columns = {r["name"]: r for r in conn.execute(JOBTABLE_SQL["columns"], {"relid": row["relid"]})}

    def column(key: str, value: str | None, types: tuple[str, ...] = ()) -> sql.Composable:
        if value is None:
            return sql.Literal(None)
        if value not in columns:
            raise LookupError(f"{declared.name}: {key} column {value!r} not in {declared.table}")
        if types and not str(columns[value]["type"]).startswith(types):
            raise LookupError(f"{declared.name}: {key} column {value!r} is {columns[value]['type']}, not a timestamp")
        return sql.Identifier(value)

    def type_of(value: str | None) -> sql.Composable | None:
        if value is None:
            return None
        return sql.Identifier(columns[value]["type_schema"], columns[value]["type_name"])

    table = sql.Identifier(row["schema_name"], row["table_name"])
    parts: dict[str, sql.Composable] = {
        "table": table,
        "order": column("order_by", declared.order_by),
        "age": column("age_column", declared.age_column, _TIMESTAMPS),
        "visible": column("visible_at_column", declared.visible_at_column, _TIMESTAMPS),
        "not_before": column("not_before_column", declared.not_before_column, _TIMESTAMPS),
        "state": column("state_column", declared.state_column),
        "locked": column("in_flight_when_not_null", declared.in_flight_when_not_null),
        "attempts": column("attempts_column", declared.attempts_column),
        "max_attempts": (column("max_attempts_column", declared.max_attempts_column)
                         if declared.max_attempts_column else sql.Literal(declared.max_attempts)),
        "queue_column": column("queue_column", declared.queue_column),
        # A view has no xmax: rows held by an open transaction cannot be seen through it.
        "xmax": sql.Identifier("xmax") if row["relkind"] in ("r", "p", "m") else sql.Literal(None),
    }
    pairs = [(r["name"], r["second"]) for r in conn.execute(JOBTABLE_SQL["leading_index_columns"], {"relid": row["relid"]})]
    leading = {first for first, _ in pairs}
    return ResolvedTable(
        relid=row["relid"],
        qualified=table.as_string(conn),
        relkind=row["relkind"],
        can_select=row["can_select"],
        rls_active=bool(row["rls_active"]),
        parts=parts,
        state_type=type_of(declared.state_column),
        state_type_name=(sql.Identifier(columns[declared.state_column]["type_schema"], columns[declared.state_column]["type_name"])
                         .as_string(conn) if declared.state_column and columns[declared.state_column]["typtype"] == "e" else None),
        queue_type=type_of(declared.queue_column),
        indexed=declared.order_by in leading or row["relkind"] == "v",
        queue_indexed=declared.queue_column in leading if declared.queue_column else False,
        state_queue_indexed=bool(declared.state_column and declared.queue_column
                                 and (declared.state_column, declared.queue_column) in pairs),
    )


class Estimates:
    """The planner's answers (EXPLAIN) about one relation, kept while what they depend on - its
    statistics and its indexes (the `fingerprint`) - stays as it was, and for at most
    ESTIMATES_MAX_AGE_S (between two ANALYZEs the planner also scales by the table's current
    size; a view's statistics are its tables', which it cannot fingerprint).
    Planning against a partitioned table is the dearest thing a sample would do otherwise."""

    def __init__(self) -> None:
        self.key: str | None = None
        self.at = 0.0
        self.plans: dict[tuple[str, str], Any] = {}

    def refresh(self, key: str | None) -> None:
        now = time.monotonic()
        if key != self.key or now - self.at > ESTIMATES_MAX_AGE_S:
            self.key, self.at = key, now
            self.plans.clear()

    def explain(self, conn: ProbeConnection, statement: sql.Composed, params: dict[str, Any]) -> dict[str, Any]:
        return self.remember((statement.as_string(conn), repr(sorted(params.items()))),
                             lambda: one(conn.execute(statement, params)))

    def remember(self, key: tuple[str, str], compute: Callable[[], Any]) -> Any:
        """What `compute` returned for `key` under the current fingerprint, computed once."""
        self.refresh(self.key)  # expired by age
        if key not in self.plans:
            self.plans[key] = compute()
        return self.plans[key]


class JobTable:
    """Samples the queue(s) of one declared table; keeps the catalog lookups between samples."""

    def __init__(self, declared: DeclaredQueue, *, cap: int = COUNT_CAP, index_note: bool = True) -> None:
        self.declared = declared
        self.cap = cap
        self.index_note = index_note  # a library's order is its own business: no note for it
        self._resolved: ResolvedTable | None = None
        self._dead_letters: ResolvedTable | None = None
        self._other_states: list[str] | None = None
        self.estimates = Estimates()
        self._fingerprint: dict[str, Any] = {}
        self.dead_letter_estimates = Estimates()  # kept by age only: the dead-letter table is not fingerprinted

    def resolved(self, conn: ProbeConnection) -> ResolvedTable:
        if self._resolved is None:
            self._resolved = resolve(conn, self.declared)
        return self._resolved

    # -- sampling ------------------------------------------------------------------------

    def sample(self, conn: ProbeConnection, queues: list[str] | None = None) -> list[QueueFigures]:
        """One QueueFigures per queue: the configured `queue`, every distinct value of
        `queue_column` (or the `queues` a library's registry names), or the whole table."""
        d = self.declared
        try:
            table = self.resolved(conn)
        except LookupError as exc:
            return [QueueFigures(name=d.name, table=d.table, error=str(exc.args[0]))]
        if not table.can_select:
            return [QueueFigures(name=d.name, table=table.qualified, error=f"no SELECT privilege on {table.qualified}")]
        if d.queue_column is None:
            names: list[str | None] = [None]
        elif d.queue is not None:
            names = [d.queue]
        elif queues is not None:
            names = list(queues)
        elif table.queue_indexed or not d.state_column:
            names = list(self._distinct(conn, table, "queue_column"))
        elif table.state_queue_indexed:
            # An index leads with (state, queue): skip through each state's queues.
            states = self._states(conn, table)
            statement = sql.SQL(JOBTABLE_SQL["distinct_in_states"]).format(**table.parts, state_type=table.state_type)
            names = sorted(r["value"] for r in conn.execute(statement, {"states": states, "max_values": MAX_QUEUES}))
        else:
            # No index leads with the queue column: skipping through the values would read the
            # table once per queue. The queues are those the state reads meet instead (a
            # sampled state's, only those its sample meets).
            names = []
        all_queues = bool(d.state_column and d.queue_column and d.queue is None)
        try:
            live = self.fingerprint(conn)["live"]
        except psycopg.Error as exc:
            return [QueueFigures(name=self._name(q) or table.qualified, table=table.qualified, error=describe(exc))
                    for q in names or [None]]
        if all_queues:
            try:
                out = self._all_queues(conn, table, [n for n in names if n is not None], large=live > LARGE_TABLE_ROWS)
            except psycopg.Error as exc:
                out = [QueueFigures(name=self._name(q), table=table.qualified, error=describe(exc)) for q in names]
            for figures in out:
                self._add_notes(figures, table, live)
            return out
        out = []
        for queue in names:
            try:
                figures = self._figures(conn, table, queue, large=live > LARGE_TABLE_ROWS)
            except psycopg.Error as exc:
                figures = QueueFigures(name=self._name(queue), table=table.qualified, error=describe(exc))
            self._add_notes(figures, table, live)
            out.append(figures)
        return out

    def fingerprint(self, conn: ProbeConnection) -> dict[str, Any]:
        """The table's live rows as its statistics count them; the planner's estimates kept from
        earlier samples are dropped when its statistics, size or indexes have changed."""
        row = one(conn.execute(JOBTABLE_SQL["fingerprint"], {"relid": self.resolved(conn).relid}))
        self.estimates.refresh(row["stats_key"])
        self._fingerprint = row
        return row

    def _state_plan(self, table: ResolvedTable, group: sql.Composable, where: sql.Composable) -> sql.Composed:
        """EXPLAIN of one state's bounded read, as states_read makes it (%(state)s, %(limit)s)."""
        read = sql.SQL(JOBTABLE_SQL["state_branch"]).format(**table.parts, index=sql.Literal(0), group=group, filter=where,
                                                            state_type=table.state_type, state_value=sql.Placeholder("state"),
                                                            limit=sql.Placeholder("limit"))
        return sql.SQL(JOBTABLE_SQL["state_plan"]).format(read=read)

    def _plan_reads(self, conn: ProbeConnection, table: ResolvedTable, states: list[str], group: sql.Composable,
                    where: sql.Composable, params: dict[str, Any], *, large: bool) -> tuple[dict[str, int], list[str]]:
        """How many rows to read of each state, and which states not to read at all. In a small
        table, `cap` of each. In a large one (LARGE_TABLE_CAP at most), by the plan of each state's read (cached while the
        table's statistics stay as they were): none when no index leads to the state alone (its
        figure is then the planner's estimate); SAMPLE_ROWS when the planner expects more rows
        than `cap` (the count will be an estimate anyway: the read only says how it splits, and
        a read that ends short of its limit is still exact, stale statistics or not)."""
        cap = self.limit(large)
        if not large:
            return dict.fromkeys(states, cap), []
        plan_of = self._state_plan(table, group, where)
        limits: dict[str, int] = {}
        unread: list[str] = []
        for state in states:
            plan = self.estimates.explain(conn, plan_of, {**params, "state": state, "limit": cap})
            if _too_dear(plan, cap):
                unread.append(state)
            else:
                limits[state] = cap if _expected_rows(plan) <= cap else min(cap, SAMPLE_ROWS)
        return limits, unread

    def limit(self, large: bool) -> int:
        """Rows read at most per state (or per queue, without states): `cap`, or in a large
        table LARGE_TABLE_CAP (if lower)."""
        return min(self.cap, LARGE_TABLE_CAP) if large else self.cap

    def _read_states(self, conn: ProbeConnection, table: ResolvedTable, limits: dict[str, int], group: sql.Composable,
                     where: sql.Composable, params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
        """At most `limits[state]` rows of each state, in one statement (states_read): per
        state, the counts of each group (queue) met."""
        if not limits:
            return {}
        states = list(limits)
        branch = sql.SQL(JOBTABLE_SQL["state_branch"])
        branches = sql.SQL(JOBTABLE_SQL["union_all"]).join(
            branch.format(**table.parts, index=sql.Literal(i), group=group, filter=where, state_type=table.state_type,
                          state_value=sql.Placeholder(f"state_{i}"), limit=sql.Placeholder(f"limit_{i}"))
            for i in range(len(states)))
        statement = sql.SQL(JOBTABLE_SQL["states_read"]).format(branches=branches)
        values: dict[str, Any] = {f"state_{i}": state for i, state in enumerate(states)}
        values.update({f"limit_{i}": limits[state] for i, state in enumerate(states)})
        out: dict[str, list[dict[str, Any]]] = {state: [] for state in states}
        for row in conn.execute(statement, {**params, **values}):
            out[states[row["state_index"]]].append(row)
        return out

    def _add_notes(self, figures: QueueFigures, table: ResolvedTable, live: int | None) -> None:
        if table.rls_active:
            figures.notes.append(f"row-level security hides rows from this role: {figures.depth or 0:,} visible"
                                 f" of ~{live or 0:,} live in {table.qualified}")
        if not table.indexed and self.index_note:
            figures.notes.append(f"no index leads with order_by column {self.declared.order_by!r} of {table.qualified}: "
                                 "its head (Enter) is sorted from the whole queue; create one")

    def _all_queues(self, conn: ProbeConnection, table: ResolvedTable, names: list[str], *, large: bool) -> list[QueueFigures]:
        """Every queue of a shared table, every state across all queues in one read (states_read).
        A state with more rows than the cap, or one no index leads to in a large table (reading it
        would read other states' rows, or the table), is not split from what was read - a capped read of a partitioned
        or clustered table meets one queue's rows first - but taken from the planner's estimate
        per queue (its statistics, per partition where there are partitions), flagged as an
        estimate. With no list of queues, the queues are those the reads meet."""
        d = self.declared
        states = self._states(conn, table)
        discover = not names
        figures: dict[str, dict[str, Any]] = {}

        def queue(name: str) -> dict[str, Any]:
            return figures.setdefault(name, {"ready": 0, "in_flight": 0, "delayed": 0, "dead": 0, "oldest": None})

        for name in names:
            queue(name)
        estimate = False
        per_queue_estimate = sql.SQL(JOBTABLE_SQL["estimate_state"]).format(
            **table.parts, state_type=table.state_type, filter=self._filter(table, ""))
        group, every_row = table.parts["queue_column"], sql.SQL(JOBTABLE_SQL["every_row"])
        limits, not_read = self._plan_reads(conn, table, states, group, every_row, {}, large=large)
        # A state no index leads to (the statistics say instead), or one with more rows than its
        # read, and what that read saw per queue.
        unread: list[tuple[str, dict[str, dict[str, Any]]]] = [(state, {}) for state in not_read]
        for state, rows in self._read_states(conn, table, limits, group, every_row, {}).items():
            if sum(int(r["scanned"]) for r in rows) >= limits[state]:
                # More than one bounded read: the statistics say how many; what the read saw
                # of each queue says how they split (held, scheduled, out of attempts).
                unread.append((state, {r["queue"]: r for r in rows}))
                if discover:
                    for row in rows:
                        queue(row["queue"])
                continue
            for row in rows:
                if row["queue"] in figures or discover:
                    _credit(d, state, queue(row["queue"]), row, row["oldest_due_age_s"])
        sampled = self._split_sample(conn, table, [state for state, _ in unread], group, every_row, {})
        oldest_due = self._oldest_due(conn, table, [state for state, _ in unread], list(figures))
        for state, seen in unread:
            estimate = True
            for name, counts in figures.items():
                guess = plan_rows(self.estimates.explain(conn, per_queue_estimate, {"state": state, "queue": name}))
                # The random sample's split of this queue, else of all its queues; else what the
                # bounded read saw of this queue, else of all the queues it met together.
                by_queue = sampled.get(state, {})
                split = (_enough(by_queue.get(name)) or _enough(_pooled(by_queue.values()))
                         or seen.get(name) or _pooled(seen.values()))
                oldest = oldest_due.get(state, {}).get(name, seen[name]["oldest_due_age_s"] if name in seen else None)
                _credit(d, state, counts, _split(guess, split), oldest)
        shared_table = table.relid if table.relkind != "v" else None
        out = []
        for name, c in sorted(figures.items()):
            f = QueueFigures(name=self._name(name), table=table.qualified, relid=shared_table, rates_from=None,
                             ready=c["ready"], in_flight=c["in_flight"], delayed=c["delayed"], dead=c["dead"],
                             depth_is_estimate=estimate)
            f.depth = c["ready"] + c["in_flight"] + c["delayed"]
            f.oldest_ready_age_s = c["oldest"] if c["ready"] else None
            out.append(f)
        return out

    def _distinct(self, conn: ProbeConnection, table: ResolvedTable, key: str) -> list[str]:
        statement = sql.SQL(JOBTABLE_SQL["distinct_values"]).format(table=table.parts["table"], column=table.parts[key])
        return [r["value"] for r in conn.execute(statement, {"max_values": MAX_QUEUES})]

    def _states(self, conn: ProbeConnection, table: ResolvedTable) -> list[str]:
        """Every state that is read: the ready ones, in flight, delayed, dead (never the done)."""
        d = self.declared
        return [*self._ready_states(conn, table), *d.in_flight_states, *d.delayed_states, *d.dead_states]

    def _waiting(self, states: list[str]) -> list[str]:
        """Those of `states` whose rows the row itself classifies (the ready states): due, held,
        later or out of attempts."""
        d = self.declared
        listed = {*d.in_flight_states, *d.delayed_states, *d.dead_states}
        return [s for s in states if s not in listed]

    def _ready_states(self, conn: ProbeConnection, table: ResolvedTable) -> list[str]:
        """The states read as ready-unless-the-row-says-otherwise: those listed, or with none
        listed, every state the column holds that is not listed elsewhere (an enum's labels, or
        the column's distinct values)."""
        d = self.declared
        if d.ready_states:
            return list(d.ready_states)
        listed = {*d.in_flight_states, *d.delayed_states, *d.done_states, *d.dead_states}
        if table.state_type_name is None:  # a text column: the values it holds now
            return [v for v in self._distinct(conn, table, "state") if v not in listed]
        if self._other_states is None:  # an enum: its labels, once
            labels = conn.execute(JOBTABLE_SQL["enum_labels"], {"type": table.state_type_name})
            self._other_states = [r["value"] for r in labels if r["value"] not in listed]
        return self._other_states

    def _filter(self, table: ResolvedTable, queue: str | None) -> sql.Composable:
        if queue is None:
            return sql.SQL(JOBTABLE_SQL["every_row"])
        return sql.SQL(JOBTABLE_SQL["queue_is"]).format(queue_column=table.parts["queue_column"],
                                                        queue_type=table.queue_type)

    def _name(self, queue: str | None) -> str:
        """A queue's row name: the entry's name, or with one row per queue of a shared table,
        `name:queue` (a library adapter's entries have no name: just the queue)."""
        d = self.declared
        if queue is None or d.queue is not None:
            return d.name
        return f"{d.name}:{queue}" if d.name else queue

    def _figures(self, conn: ProbeConnection, table: ResolvedTable, queue: str | None, *, large: bool) -> QueueFigures:
        d = self.declared
        name = self._name(queue)
        # The table's counters are this queue's only when the queue has the table to itself.
        shared = d.queue_column is not None
        keeps_rows = bool(d.done_states or d.dead_states or d.max_attempts or d.max_attempts_column)
        figures = QueueFigures(name=name, table=table.qualified,
                               relid=table.relid if table.relkind != "v" else None,
                               rates_from=None if shared else "arrivals" if keeps_rows else "deletes")
        where = self._filter(table, queue)
        cap = self.limit(large)
        params: dict[str, Any] = {"cap": cap, "queue": queue}
        ready = in_flight = delayed = dead = 0
        oldest: float | None = None
        estimate = False
        if d.state_column:
            states = self._states(conn, table)
            estimate_state = sql.SQL(JOBTABLE_SQL["estimate_state"]).format(**table.parts, filter=where,
                                                                             state_type=table.state_type)
            counts: dict[str, Any] = {"ready": 0, "in_flight": 0, "delayed": 0, "dead": 0, "oldest": None}
            limits, not_read = self._plan_reads(conn, table, states, sql.Literal(None), where, params, large=large)
            # No index leads to these alone: the statistics say how many.
            guesses = {state: plan_rows(self.estimates.explain(conn, estimate_state, {"state": state, "queue": queue}))
                       for state in not_read}
            seen: dict[str, dict[str, Any]] = {}
            for state, rows in self._read_states(conn, table, limits, sql.Literal(None), where, params).items():
                row = rows[0] if rows else _NOTHING_READ
                if int(row["scanned"]) < limits[state]:  # all of them: exact
                    _credit(d, state, counts, row, row["oldest_due_age_s"])
                    continue
                guesses[state] = max(limits[state], plan_rows(self.estimates.explain(
                    conn, estimate_state, {"state": state, "queue": queue})))
                seen[state] = row
            sampled = self._split_sample(conn, table, list(guesses), sql.Literal(None), where, params)
            for state, guess in guesses.items():
                estimate = True
                split = _enough(sampled.get(state, {}).get(None)) or seen.get(state)
                _credit(d, state, counts, _split(guess, split), seen[state]["oldest_due_age_s"] if state in seen else None)
            ready, in_flight, delayed, dead, oldest = (counts[k] for k in ("ready", "in_flight", "delayed", "dead", "oldest"))
        else:
            statement = sql.SQL(JOBTABLE_SQL["stateless"]).format(**table.parts, filter=where)
            row = one(conn.execute(statement, params))
            estimate_marked = sql.SQL(JOBTABLE_SQL["estimate_marked"]).format(**table.parts, filter=where)
            marked, marked_exact = self._scaled(conn, row, estimate_marked, {"queue": queue}, limit=cap)
            total, total_exact = int(row["total"]), int(row["total"]) < cap
            if not total_exact:
                plan = self.estimates.explain(conn, sql.SQL(JOBTABLE_SQL["estimate_rows"]).format(**table.parts, filter=where),
                                              {"queue": queue})
                total = max(cap, plan_rows(plan), marked["scanned"])
            estimate = not (marked_exact and total_exact)
            in_flight = marked["held"] + int(row["held_unmarked"])
            delayed, dead = marked["later"], marked["exhausted"]
            ready = max(0, total - marked["scanned"] - int(row["held_unmarked"]))
            oldest = row["oldest_due_age_s"]
        if d.dead_letter_table:
            extra, extra_exact = self._dead_letter_count(conn, queue, cap)
            dead += extra
            estimate = estimate or not extra_exact
        figures.ready, figures.in_flight, figures.delayed, figures.dead = ready, in_flight, delayed, dead
        figures.depth = ready + in_flight + delayed
        figures.oldest_ready_age_s = oldest if ready else None
        figures.depth_is_estimate = estimate
        return figures

    def _oldest_due(self, conn: ProbeConnection, table: ResolvedTable, states: list[str],
                    queues: list[str]) -> dict[str, dict[str, float | None]]:
        """Each queue's oldest due job in each estimated waiting state (oldest_due), where an
        index makes it one probe per queue (OLDEST_COST_PER_QUEUE cost units at most)."""
        d = self.declared
        waiting = self._waiting(states)
        if not waiting or not queues or d.age_column is None or d.queue_column is None:
            return {}
        statement = sql.SQL(JOBTABLE_SQL["oldest_due"]).format(**table.parts, state_type=table.state_type,
                                                                queue_type=table.queue_type)
        plan_of = sql.SQL(JOBTABLE_SQL["oldest_due_plan"]).format(read=statement)
        out: dict[str, dict[str, float | None]] = {}
        for state in waiting:
            params = {"state": state, "queues": queues}
            plan = self.estimates.explain(conn, plan_of, params)
            if _plan_cost(plan) <= OLDEST_COST_PER_QUEUE * len(queues) and not _scans_table(_plan_root(plan)):
                out[state] = {r["queue"]: r["oldest_due_age_s"] for r in conn.execute(statement, params)}
        return out

    def _split_sample(self, conn: ProbeConnection, table: ResolvedTable, states: list[str], group: sql.Composable,
                      where: sql.Composable, params: dict[str, Any]) -> dict[str, dict[str | None, dict[str, Any]]]:
        """How the estimated waiting states split (held, due later, out of attempts), per state
        and group, from SPLIT_SAMPLE_PAGES random pages of the table (split_sample): unlike the
        bounded reads, which follow an index's order, a page sample is not ordered by when the
        jobs are due. Kept as long as the planner's estimates are. Nothing to split without the
        columns that say so."""
        d = self.declared
        waiting = self._waiting(states)
        marked = (d.not_before_column, d.visible_at_column, d.in_flight_when_not_null, d.attempts_column)
        if not waiting or not any(marked) or table.relkind == "v":  # a view cannot be sampled by pages
            return {}
        pages = max(int(self._fingerprint.get("pages") or 0), int(self._fingerprint.get("live") or 0) // 50, 1)
        percent = min(100.0, 100.0 * SPLIT_SAMPLE_PAGES / pages)
        statement = sql.SQL(JOBTABLE_SQL["split_sample"]).format(**table.parts, state_type=table.state_type,
                                                                  group=group, filter=where)
        def sample() -> dict[str, dict[str | None, dict[str, Any]]]:
            out: dict[str, dict[str | None, dict[str, Any]]] = {}
            for row in conn.execute(statement, {**params, "states": waiting, "percent": percent}):
                out.setdefault(row["state"], {})[row["queue"]] = row
            return out

        # Random pages are likely not in the server's cache: taken again only when the estimates
        # are (the table's statistics changed, or a minute passed), not on every sample.
        return self.estimates.remember((statement.as_string(conn), repr(sorted({**params, "states": waiting}.items()))),
                                       sample)

    def _scaled(self, conn: ProbeConnection, row: dict[str, Any], estimate: sql.Composed,
                params: dict[str, Any], *, limit: int | None = None) -> tuple[dict[str, int], bool]:
        """The row's counts, exact when fewer rows were read than the read's limit (`cap`);
        else `estimate`'s (an EXPLAIN of the same rows) figure, split in the proportions of the
        rows read."""
        limit = self.cap if limit is None else limit
        counts = {key: int(row[key]) for key in ("scanned", "held", "later", "exhausted")}
        if counts["scanned"] < limit:
            return counts, True
        estimated = max(limit, plan_rows(self.estimates.explain(conn, estimate, params)))
        factor = estimated / counts["scanned"]
        return {key: round(value * factor) for key, value in counts.items()}, False

    def _dead_letter_table(self, conn: ProbeConnection) -> ResolvedTable:
        d = self.declared
        assert d.dead_letter_table is not None
        if self._dead_letters is None:
            dlq = DeclaredQueue(name=d.name, table=d.dead_letter_table, order_by=d.order_by, queue_column=d.queue_column)
            try:
                self._dead_letters = resolve(conn, dlq)
            except LookupError:  # no queue column there: the whole table is this queue's
                self._dead_letters = resolve(conn, DeclaredQueue(name=d.name, table=d.dead_letter_table, order_by=d.order_by))
        return self._dead_letters

    def _dead_letter_count(self, conn: ProbeConnection, queue: str | None, cap: int) -> tuple[int, bool]:
        table = self._dead_letter_table(conn)
        where = self._filter(table, queue if table.queue_type is not None else None)
        statement = sql.SQL(JOBTABLE_SQL["dead_letters"]).format(**table.parts, filter=where)
        scanned = int(one(conn.execute(statement, {"cap": cap, "queue": queue}))["scanned"])
        if scanned < cap:
            return scanned, True
        plan = self.dead_letter_estimates.explain(conn, sql.SQL(JOBTABLE_SQL["estimate_rows"]).format(**table.parts, filter=where),
                                                  {"queue": queue})
        return max(cap, plan_rows(plan)), False

    # -- details -------------------------------------------------------------------------

    def details(self, conn: ProbeConnection, queue: str | None) -> QueueDetails:
        """The head rows in queue order, and the dead rows (dead states, or the dead-letter
        table) newest first; every column as text cut to 200 characters."""
        table = self.resolved(conn)
        d = self.declared
        where = self._filter(table, queue)
        head_where: sql.Composable = where
        waiting: list[str] = []
        if d.state_column:  # the head is what waits or runs: not the finished or dead rows
            waiting = [*self._ready_states(conn, table), *d.in_flight_states, *d.delayed_states]
            fragment = sql.SQL(JOBTABLE_SQL["waiting_state_is"]).format(**table.parts, state_type=table.state_type)
            head_where = sql.SQL(JOBTABLE_SQL["both"]).format(first=where, second=fragment)
        head = conn.execute(sql.SQL(JOBTABLE_SQL["head"]).format(**table.parts, filter=head_where),
                            {"limit": HEAD_ROWS, "queue": queue, "waiting_states": waiting})
        dead_rows: list[dict[str, Any]] = []
        if d.dead_letter_table:
            dlq = self._dead_letter_table(conn)
            dead_where = self._filter(dlq, queue if dlq.queue_type is not None else None)
            statement = sql.SQL(JOBTABLE_SQL["dead_head"]).format(**dlq.parts, filter=dead_where)
            dead_rows = [dict(r["row"]) for r in conn.execute(statement, {"limit": HEAD_ROWS, "queue": queue})]
        elif d.dead_states or (d.attempts_column and (d.max_attempts_column or d.max_attempts)):
            fragment = (sql.SQL(JOBTABLE_SQL["dead_state_is"]).format(**table.parts, state_type=table.state_type)
                        if d.dead_states else sql.SQL(JOBTABLE_SQL["exhausted"]).format(**table.parts))
            dead_where = sql.SQL(JOBTABLE_SQL["both"]).format(first=where, second=fragment)
            statement = sql.SQL(JOBTABLE_SQL["dead_head"]).format(**table.parts, filter=dead_where)
            params = {"limit": HEAD_ROWS, "queue": queue, "dead_states": list(d.dead_states)}
            dead_rows = [dict(r["row"]) for r in conn.execute(statement, params)]
        return QueueDetails(head=[dict(r["row"]) for r in head], dead=dead_rows)


def _credit(d: DeclaredQueue, state: str, counts: dict[str, Any], read: dict[str, int], oldest: float | None) -> None:
    """Add what was read of one state to a queue's figures, as the state and the row say."""
    if state in d.dead_states:
        counts["dead"] += read["scanned"]
    elif state in d.in_flight_states:
        counts["in_flight"] += read["scanned"]
    elif state in d.delayed_states:
        counts["delayed"] += read["scanned"]
    else:
        counts["in_flight"] += read["held"]
        counts["delayed"] += read["later"]
        counts["dead"] += read["exhausted"]
        counts["ready"] += read["scanned"] - read["held"] - read["later"] - read["exhausted"]
        if oldest is not None:
            counts["oldest"] = max(counts["oldest"] or 0.0, oldest)


def _split(guess: int, sample: dict[str, Any] | None) -> dict[str, int]:
    """An estimated count, split in the proportions of a sample of its rows (none: all ready)."""
    if sample is None or not int(sample["scanned"]):
        return {"scanned": guess, "held": 0, "later": 0, "exhausted": 0}
    share = guess / int(sample["scanned"])
    return {"scanned": guess, **{k: round(int(sample[k]) * share) for k in ("held", "later", "exhausted")}}


def _enough(sample: dict[str, Any] | None) -> dict[str, Any] | None:
    """A sample large enough to split by (MIN_SPLIT_ROWS rows), else None."""
    return sample if sample is not None and int(sample["scanned"]) >= MIN_SPLIT_ROWS else None


def _pooled(rows: Any) -> dict[str, Any] | None:
    """The counts of several queues' reads added up (None when there were none)."""
    rows = list(rows)
    if not rows:
        return None
    pooled: dict[str, Any] = {k: sum(int(r[k]) for r in rows) for k in ("scanned", "held", "later", "exhausted")}
    pooled["oldest_due_age_s"] = None
    return pooled


def _too_dear(plan: dict[str, Any], cap: int) -> bool:
    """Whether a bounded read (state_plan) of a large table would cost more than reading `cap`
    rows through an index should: it scans the table, or the planner expects more than
    READ_COST_PER_ROW cost units a row (a row fetched through an index costs about one; finding a
    rare state's rows among another state's, through an index that holds both, costs one per row
    of the other state, so many times more)."""
    return _scans_table(_plan_root(plan)) or _plan_cost(plan) > READ_COST_PER_ROW * cap


def _plan_root(plan: dict[str, Any]) -> dict[str, Any]:
    """The top node of an EXPLAIN (FORMAT JSON) result row."""
    document = plan["QUERY PLAN"]
    if isinstance(document, str):
        document = json.loads(document)
    return dict(document[0]["Plan"])


def _plan_cost(plan: dict[str, Any]) -> float:
    return float(_plan_root(plan)["Total Cost"])


def _expected_rows(plan: dict[str, Any]) -> int:
    """The rows the planner expects a state to have: the Plan Rows under a state_plan's LIMIT."""
    top = _plan_root(plan)
    while top.get("Node Type") != "Limit" and top.get("Plans"):
        top = top["Plans"][0]
    children = top.get("Plans") or [top]
    return int(children[0]["Plan Rows"])


def _scans_table(node: dict[str, Any]) -> bool:
    """Whether a plan reads a table sequentially anywhere (its cost then grows with the table,
    whatever the LIMIT: the planner prorates it as if the state's rows were spread evenly)."""
    stack = [node]
    while stack:
        node = stack.pop()
        if node.get("Node Type") == "Seq Scan":
            return True
        stack.extend(node.get("Plans", []))
    return False


def plan_rows(plan: dict[str, Any]) -> int:
    """`Plan Rows` of an EXPLAIN (FORMAT JSON) result row."""
    return int(_plan_root(plan)["Plan Rows"])


def describe(exc: psycopg.Error | LookupError) -> str:
    return describe_error(exc) if isinstance(exc, psycopg.Error) else str(exc.args[0])
