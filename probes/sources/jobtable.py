"""Any job table, counted right or honestly estimated at a cost that does not grow with depth.

A `DeclaredQueue` (the config's `[[queues]]`, also what the library adapters are made of)
says which columns mean what. Each row of a queue is then, in this order:

- done (`done_states`): not counted at all;
- dead: in `dead_states`, or its attempts reached their maximum (and it is not being worked);
- in flight: in `in_flight_states`, or `in_flight_when_not_null` is set, or `visible_at` is
  ahead and the row was attempted (claimed until then), or an open transaction holds it;
- delayed: in `delayed_states`, or `not_before` is ahead, or `visible_at` is ahead on a row
  never attempted (sent with a delay);
- blocked: due, but the library's fetch skips it now (its `blocked` rule: a lock, a policy, a
  locked named queue); counted in delayed too, never in ready;
- ready: the rest of the `ready_states` (all of them, with no state list).

The counts are exact counts by the tally (tally.py): read whole every cycle where the table is
within the cycle's budget of pages, else a chunk of pages at a time, kept between passes (an
estimate, flagged, with the age of its count). Between two passes, a state the tally puts near
or under `cap` rows is read now through its index, at most `cap` + 1 rows: exact now.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from psycopg import sql

from dbcore.database import one
from dbcore.sqlfiles import Queries

from ..configmodel import DeclaredQueue, FilterValue
from ..failures import PROBE_FAILURES, NotAsDeclared, describe_failure
from ..session import contained
from .base import Flow, QueueDetails, QueueFigures
from .counting import bounds_of, mark_counting
from .flows import SETTLE_S, Departures, tally_flow
from .plans import Estimates, too_dear
from .queuenames import MAX_QUEUES, QueueNames
from .resolved import ResolvedTable, resolve
from .tally import (
    CHUNK_PAGES,
    CLASSES,
    Key,
    RelationFacts,
    Statement,
    Tally,
    TallyView,
    facts_of,
    flags_of,
)

if TYPE_CHECKING:
    from ..session import ProbeConnection

JOBTABLE_SQL = Queries("probes", "sources/jobtable.sql")
log = logging.getLogger("queuetop.probes")
COUNT_CAP = 10_000  # a figure of at most this many rows is exact: a state's bounded read takes one more
HEAD_ROWS = 20


class JobTable:
    """Samples the queue(s) of one declared table; keeps the catalog lookups and the tally
    between samples. `blocked`: the library's rule for a due job its fetch skips now (a boolean
    over the row `j`); `group`: what a row's group is, if not the queue column (text); `rows`: a
    filter of the rows that count at all (a dead-letter table's `dead_letter_where`);
    `queue_names`: whether the queues of a shared table are read from it (queuenames.py), or all
    given by the caller (a library's own list)."""

    def __init__(self, declared: DeclaredQueue, *, cap: int = COUNT_CAP, index_note: bool = True,
                 blocked: sql.Composable | None = None, group: sql.Composable | None = None,
                 chunk_pages: int = CHUNK_PAGES, constant_class: str | None = None,
                 held_by_transactions: bool = True, rows: tuple[tuple[str, tuple[FilterValue, ...]], ...] = (),
                 queue_names: bool = True) -> None:
        self.declared = declared
        self.cap = cap
        self.index_note = index_note  # a library's order is its own business: no note for it
        self.blocked = blocked
        self.group = group
        self._resolved: ResolvedTable | None = None
        self._other_states: list[str] | None = None
        self.estimates = Estimates()
        self.tally = Tally(chunk_pages)
        self.constant_class = constant_class  # every row is of this class (a dead-letter table: dead)
        self.rows = rows
        self.queue_names = QueueNames() if queue_names else None
        # Whether a row an open transaction holds (its xmax running) is in flight: a declared
        # table's consumers may work a job inside the transaction that locked it. A library marks
        # its claims in the row; a lock of its own fetch, for the instant of a statement (or one
        # that fails and rolls back), is not a job being worked.
        self.held_by_transactions = held_by_transactions
        self._dead_letter_jobs_table: JobTable | None = None
        # The error bounds of the last sample's counts where they take in pages never read (_bounds).
        self.last_bounds: dict[Any, float] | None = None
        self._sampled_at: float | None = None  # monotonic, the last sample's (the rates' span)
        self._departures = Departures()  # what left, from arrivals and the rows' growth (no finished column)
        self._rows_before: dict[str | None, int | None] = {}
        self._cached_parts: dict[str, sql.Composable] | None = None
        self._reads: dict[tuple[str | None, ...], bytes] = {}  # the states read exactly -> their statement
        self._read_oldest: dict[str | None, dict[str | None, float]] = {}  # state -> group -> oldest due (exact reads)

    def set_blocked(self, blocked: sql.Composable | None) -> None:
        """The library's blocked rule, where it depends on what is installed (River's queue
        registry): the statements made with the old one are made again."""
        if blocked != self.blocked:
            self.blocked = blocked
            self._cached_parts = None
            self._reads.clear()
            self.estimates.plans.clear()

    def resolved(self, conn: ProbeConnection) -> ResolvedTable:
        if self._resolved is None:
            self._resolved = resolve(conn, self.declared, rows=self.rows)
        return self._resolved

    # -- sampling ------------------------------------------------------------------------

    def sample(self, conn: ProbeConnection, queues: list[str] | None = None) -> list[QueueFigures]:
        """One QueueFigures per queue: the configured `queue`, every queue of a shared table
        (queuenames.py: every queue it holds a row of, finished ones too, where an index leads to
        them) and every one a library's registry names (`queues`), or the whole table. Whatever
        fails (the table, its dead-letter table or a column not there, no privilege, a statement
        refused or timed out, a fault of queuetop's own) fails this table's queues alone: each
        unknown, its error saying what, while the other tables and sources go on."""
        d = self.declared
        wanted: list[str | None] | None
        if d.queue_column is None and self.group is None:
            wanted = [None]
        elif d.queue is not None:
            wanted = [d.queue]
        else:
            wanted = list(queues) if queues is not None else None
        try:
            with contained(conn):  # a statement that fails leaves the probe's transaction usable for the next table
                return self._sample(conn, wanted)
        except Exception as exc:
            if not isinstance(exc, (*PROBE_FAILURES, NotAsDeclared)):
                log.debug("sampling %s failed", d.table, exc_info=True)
            return self._unknown(wanted, describe_failure(exc))

    def _unknown(self, wanted: list[str | None] | None, error: str) -> list[QueueFigures]:
        """The queues of this table, every figure unknown, and why."""
        table = self._resolved.qualified if self._resolved is not None else self.declared.table
        return [QueueFigures(name=self._name(q) or table, table=table, error=error) for q in wanted or [None]]

    def _sample(self, conn: ProbeConnection, wanted: list[str | None] | None) -> list[QueueFigures]:
        d = self.declared
        table = self.resolved(conn)
        if not table.can_select:
            return self._unknown(wanted, f"no SELECT privilege on {table.qualified}")
        facts = self.facts(conn)
        view = self.tally.advance(conn, table, self._tally_statement(conn, table), self._params(), facts.pages)
        self._read_oldest = {}
        exact = {} if view.fresh else self._exact_reads(conn, table, view)
        self.last_bounds = self._bounds(view, exact)
        dead_letters = self._dead_letters_by_queue(conn) if d.dead_letter_table else None
        out, notes = self._assemble(conn, table, view, exact, wanted, dead_letters)
        for figures in out:
            self._add_notes(figures, table, facts.live)
            figures.notes.extend(notes)
        return out

    def counts(self, conn: ProbeConnection) -> tuple[dict[str | None, dict[str, float]], dict[str, float | None], TallyView]:
        """The raw counts by group and class (for a source that makes its own rows of them, as
        Graphile Worker's tasks and named queues), which classes are estimates, and the view."""
        table = self.resolved(conn)
        view = self.tally.advance(conn, table, self._tally_statement(conn, table), self._params(), self.facts(conn).pages)
        exact = {} if view.fresh else self._exact_reads(conn, table, view)
        by_group, estimated = self._by_group(conn, table, view, exact)
        self.last_bounds = self._bounds(view, exact)
        return by_group, estimated, view

    def _params(self) -> dict[str, Any]:
        d = self.declared
        rows = self._resolved.rows_params if self._resolved is not None else {}
        return {"listed_states": [*d.dead_states, *d.in_flight_states, *d.delayed_states], "done_states": list(d.done_states),
                "finished_states": [*d.done_states, *d.dead_states], "dead_states": list(d.dead_states), "settle": SETTLE_S,
                **rows}

    def _parts(self, conn: ProbeConnection, table: ResolvedTable) -> dict[str, sql.Composable]:
        """The {fields} of the tally and the bounded reads (made once; again when the blocked
        rule changes)."""
        if self._cached_parts is not None:
            return self._cached_parts
        view = table.relkind == "v"
        parts = dict(table.parts)
        parts["state_type"] = table.state_type if table.state_type is not None else sql.SQL("text")
        parts["blocked"] = self.blocked if self.blocked is not None else sql.Literal(None)
        parts["group"] = self.group if self.group is not None else table.parts["queue_column"]
        # A view has no xmax; a library marks its claims in the row (held_by_transactions).
        parts["running"] = (sql.SQL(JOBTABLE_SQL["running"]) if self.held_by_transactions and table.relkind != "v"
                            else sql.SQL("false"))
        parts["listed"] = sql.SQL(JOBTABLE_SQL["listed"]).format(**parts)
        # A row the declared filter leaves out counts as a finished one: in no figure.
        parts["not_done"] = sql.SQL(JOBTABLE_SQL["both"]).format(first=sql.SQL(JOBTABLE_SQL["not_done"]).format(**parts),
                                                                 second=table.parts["rows"])
        constant = self.constant_class is not None  # every row is of one class: no flag to compute
        parts["held"] = sql.SQL("false") if constant else sql.SQL(JOBTABLE_SQL["held"]).format(**parts)
        parts["exhausted"] = sql.SQL("false") if constant else sql.SQL(JOBTABLE_SQL["exhausted"]).format(**parts)
        parts["later"] = sql.SQL("false") if constant else sql.SQL(JOBTABLE_SQL["later"]).format(**parts)
        parts["blocked_row"] = sql.SQL("false") if constant else sql.SQL(JOBTABLE_SQL["blocked_row"]).format(**parts)
        parts["rel"] = sql.SQL("0::oid") if view else sql.SQL("j.tableoid")
        parts["failed_row"] = sql.SQL(JOBTABLE_SQL["failed_row"]).format(**parts) if self.declared.dead_states else sql.SQL("false")
        parts["not_done_or_dead"] = sql.SQL(JOBTABLE_SQL["not_finished"]).format(**parts)
        self._cached_parts = parts
        return parts

    def _tally_statement(self, conn: ProbeConnection, table: ResolvedTable) -> Statement:
        """The tally's statement for some page ranges, (chunk, first page, page past the last),
        or (None) for the whole relation."""
        parts = self._parts(conn, table)
        rows = sql.SQL(JOBTABLE_SQL["tally_rows"])

        d = self.declared

        def windows(since: float | None) -> dict[str, sql.Composable]:
            """The fragments of a range's window (from `since`): the rows created and finished in it."""
            off = sql.SQL("false")
            if since is None:
                return {"arrived": off, "finished": off}
            start = sql.Literal(since)
            return {"arrived": sql.SQL(JOBTABLE_SQL["arrived_in_window"]).format(**parts, since=start)
                    if d.created_column else off,
                    "finished": sql.SQL(JOBTABLE_SQL["finished_in_window"]).format(**parts, since=start)
                    if d.finished_column else off}

        def statement(ranges: list[tuple[int, int, int]] | None, since: Mapping[int, float | None] | None = None) -> sql.Composed:
            since = since or {}
            if ranges is None:
                branches: sql.Composable = rows.format(**parts, **windows(since.get(0)), chunk=sql.Literal(0),
                                                       range=sql.SQL(JOBTABLE_SQL["whole_relation"]))
            else:
                page_range = sql.SQL(JOBTABLE_SQL["page_range"])
                branches = sql.SQL(JOBTABLE_SQL["union_all"]).join(
                    rows.format(**parts, **windows(since.get(chunk)), chunk=sql.Literal(chunk),
                                range=page_range.format(lo=sql.Literal(f"({lo},0)"), hi=sql.Literal(f"({hi},0)")))
                    for chunk, lo, hi in ranges)
            return sql.SQL(JOBTABLE_SQL["tally"]).format(branches=branches)

        return statement

    def facts(self, conn: ProbeConnection) -> RelationFacts:
        """What the catalog says of the table now (its pages, its live rows as its statistics
        count them; this cycle's, asked once for every table); the planner's estimates kept from
        earlier samples are dropped when its statistics, size or indexes have changed."""
        facts = facts_of(conn, self.resolved(conn).relid, JOBTABLE_SQL["relation_facts"])
        self.estimates.refresh(facts.stats_key)
        return facts

    def _exact_reads(self, conn: ProbeConnection, table: ResolvedTable,
                     view: TallyView) -> dict[str | None, dict[Key, tuple[float, ...]]]:
        """Between two passes of the tally: each state the tally puts at most 1.5 x `cap` rows in
        (all queues together), read now through an index that leads to it, at most `cap` + 1
        rows; one read short of its limit is exact now and replaces the tally's counts of that
        state. A read that would scan the table, or meet other states' rows on its way, is not
        made (EXPLAIN, cached while the table's statistics stay as they were)."""
        d = self.declared
        states: list[str | None] = list(self._states(conn, table)) if d.state_column else [None]
        per_state: dict[str | None, float] = {}
        for (_group, state), flags in view.counts.items():
            per_state[state] = per_state.get(state, 0) + flags[0]
        limit = self.cap + 1
        wanted = [s for s in states if per_state.get(s, 0) <= 1.5 * self.cap]
        parts = self._parts(conn, table)
        readable = []
        for state in wanted:
            def plan(state: str | None = state) -> Any:
                branch = self._branch(parts, table, 0, state)
                return one(conn.execute(sql.SQL(JOBTABLE_SQL["state_plan"]).format(read=branch),
                                        {"state_0": state, "limit_0": limit, **self._params()}))
            if not too_dear(self.estimates.remember(("state_plan", repr((state, limit))), plan), limit):
                readable.append(state)
        if not readable:
            return {}
        key = tuple(readable)
        if key not in self._reads:  # composed once for each set of states read
            if len(self._reads) >= 32:
                self._reads.clear()
            branches = sql.SQL(JOBTABLE_SQL["union_all"]).join(self._branch(parts, table, i, s) for i, s in enumerate(readable))
            self._reads[key] = sql.SQL(JOBTABLE_SQL["states_read"]).format(branches=branches).as_bytes(conn)
        statement = self._reads[key]
        values: dict[str, Any] = {**self._params()}
        for i, state in enumerate(readable):
            values[f"state_{i}"] = state
            values[f"limit_{i}"] = limit
        read: dict[str | None, dict[Key, tuple[float, ...]]] = {state: {} for state in readable}
        self._read_oldest = {}
        totals = dict.fromkeys(range(len(readable)), 0)
        for row in conn.execute(statement, values):
            state = readable[row["state_index"]]
            read[state][(row["grp"], row["state"])] = flags_of(row)
            totals[row["state_index"]] += int(row["n"])
            if row["oldest"] is not None:
                self._read_oldest.setdefault(state, {})[row["grp"]] = row["oldest"]
        return {state: read[state] for i, state in enumerate(readable) if totals[i] < limit}

    def _branch(self, parts: dict[str, sql.Composable], table: ResolvedTable, index: int, state: str | None) -> sql.Composed:
        state_is = (sql.SQL(JOBTABLE_SQL["state_is"]).format(**parts, state_value=sql.Placeholder(f"state_{index}"))
                    if state is not None else sql.SQL(JOBTABLE_SQL["every_row"]))
        d = self.declared
        if state is not None and state in (*d.dead_states, *d.in_flight_states, *d.delayed_states):
            # A state that says its class by itself: only its rows' queue is read, which an index
            # on (state, queue) answers alone (an index-only scan, no row fetched).
            off = sql.SQL("false")
            parts = {**parts, "held": off, "exhausted": off, "later": off, "blocked_row": off, "age": sql.Literal(None)}
        return sql.SQL(JOBTABLE_SQL["state_branch"]).format(**parts, index=sql.Literal(index), state_is=state_is,
                                                            filter=table.parts["rows"], limit=sql.Placeholder(f"limit_{index}"))

    def _by_group(self, conn: ProbeConnection, table: ResolvedTable, view: TallyView,
                  exact: dict[str | None, dict[Key, tuple[float, ...]]]
                  ) -> tuple[dict[str | None, dict[str, float]], dict[str, float | None]]:
        """Counts by group and class: the tally's, but for the states read exactly now. The
        classes that are estimates (those a state not read exactly can be in), with the age of
        the tally's counts."""
        by_group: dict[str | None, dict[str, float]] = {}
        for (group, state), flags in [*((k, v) for k, v in view.counts.items() if k[1] not in exact),
                                     *((k, v) for read in exact.values() for k, v in read.items())]:
            counts = by_group.setdefault(group, dict.fromkeys(CLASSES, 0.0))
            for cls, n in self._classes(state, flags).items():
                counts[cls] += n
        estimated: dict[str, float | None] = {}
        if not view.fresh:
            d = self.declared
            states: list[str | None] = list(self._states(conn, table)) if d.state_column else [None]
            for state in states:
                if state in exact:
                    continue
                classes = (("dead",) if state in d.dead_states else ("in_flight",) if state in d.in_flight_states
                           else ("delayed",) if state in d.delayed_states else self._row_classes())
                for cls in classes:
                    estimated[cls] = view.age_s
        return by_group, estimated

    def _flow(self, view: TallyView, group: str | None, figures: QueueFigures, span: float | None) -> Flow | None:
        """The queue's traffic since the last sample, from the table's recorded times (flows.tally_flow)."""
        return tally_flow(self.declared, view, group, figures, span, self._departures, self._rows_before)

    def _bounds(self, view: TallyView, exact: dict[str | None, dict[Key, tuple[float, ...]]]) -> dict[Any, float] | None:
        """The error bound of each (group, class)'s count (counting.bounds_of), the states read exactly now aside."""
        return bounds_of(view, set(exact), self._classes)

    def mark_counting(self, figures: QueueFigures, groups: list[str | None]) -> None:
        """Figures the sample cannot bound within the contract, absent and counting (counting.mark_counting)."""
        mark_counting(figures, groups, self.last_bounds, self.cap)

    def _classes(self, state: str | None, flags: tuple[float, ...]) -> dict[str, float]:
        """The rows of one state, counted with their flags (FLAGS: all, held, out of attempts, due
        later, blocked), by class: a listed state's all in its class; another's as its flags say."""
        d = self.declared
        n, held, exhausted, later, blocked = flags
        if self.constant_class is not None:
            return {self.constant_class: n}
        if state in d.dead_states:
            return {"dead": n}
        if state in d.in_flight_states:
            return {"in_flight": n}
        if state in d.delayed_states:
            return {"delayed": n}
        return {"in_flight": held, "dead": exhausted, "delayed": later, "blocked": blocked,
                "ready": n - held - exhausted - later - blocked}

    def _row_classes(self) -> tuple[str, ...]:
        """The classes a row of a ready state can be in, by what the row says (a row held by an
        open transaction is counted in flight too, but only as of its count: not a reason to
        call every in-flight figure an estimate)."""
        d = self.declared
        if self.constant_class is not None:
            return (self.constant_class,)
        classes = ["ready"]
        if d.in_flight_when_not_null or d.visible_at_column:
            classes.append("in_flight")
        if d.not_before_column or d.visible_at_column:
            classes.append("delayed")
        if self.blocked is not None:
            classes.append("blocked")
        if d.attempts_column and (d.max_attempts_column or d.max_attempts):
            classes.append("dead")
        return tuple(classes)

    def _assemble(self, conn: ProbeConnection, table: ResolvedTable, view: TallyView,
                  exact: dict[str | None, dict[Key, tuple[float, ...]]], wanted: list[str | None] | None,
                  dead_letters: tuple[dict[str | None, int], float | None, bool] | None
                  ) -> tuple[list[QueueFigures], list[str]]:
        d = self.declared
        by_group, estimated = self._by_group(conn, table, view, exact)
        notes: list[str] = []
        groups: list[str | None]
        if d.queue is not None or (wanted is not None and None in wanted):
            groups = list(wanted or [None])
        elif self.queue_names is not None and d.queue_column is not None:
            groups, notes = self.queue_names.listed(conn, table, self.estimates, d.queue_column, by_group, wanted)
        else:  # the caller's list, and the queues of the rows counted
            groups = list(wanted or [])
            if queues_from_rows := sorted(g for g in by_group if g is not None and g not in groups):
                groups.extend(queues_from_rows[:max(0, MAX_QUEUES - len(groups))])
        shared = d.queue_column is not None or self.group is not None
        keeps_rows = bool(d.done_states or d.dead_states or d.max_attempts or d.max_attempts_column)
        server_now = time.time() + view.server_offset
        now = time.monotonic()
        span = now - self._sampled_at if self._sampled_at is not None else None
        self._sampled_at = now
        out = []
        for group in groups:
            counts = by_group.get(group if group is not None or shared else None, dict.fromkeys(CLASSES, 0.0))
            if group is None and not shared:
                counts = by_group.get(None, dict.fromkeys(CLASSES, 0.0))
            figures = QueueFigures(name=self._name(group), table=table.qualified,
                                   relid=table.relid if table.relkind != "v" else None,
                                   rates_from=None if shared else "arrivals" if keeps_rows else "deletes")
            figures.ready, figures.in_flight = round(counts["ready"]), round(counts["in_flight"])
            figures.blocked = round(counts["blocked"])
            figures.delayed = round(counts["delayed"]) + figures.blocked
            figures.dead = round(counts["dead"])
            fields = dict(estimated)
            if "blocked" in fields:
                fields.setdefault("delayed", fields["blocked"])
            if dead_letters is not None:
                by_queue, age, estimate = dead_letters
                figures.dead += by_queue.get(group if None not in by_queue else None, 0)
                if estimate:
                    fields["dead"] = age if "dead" not in fields else _older(fields["dead"], age)
            figures.estimated = {k: v for k, v in fields.items() if k in ("ready", "in_flight", "delayed", "dead", "blocked")}
            figures.depth = figures.ready + figures.in_flight + figures.delayed
            figures.depth_is_estimate = any(k in figures.estimated for k in ("ready", "in_flight", "delayed", "blocked"))
            self.mark_counting(figures, [group if group is not None or shared else None])
            figures.flow = self._flow(view, group if group is not None or shared else None, figures, span)
            # The oldest due job: of the states read now where they were, else the tally's.
            candidates = [by_state[group] for by_state in self._read_oldest.values() if group in by_state]
            if "ready" in estimated and group in view.oldest:
                candidates.append(view.oldest[group])
            elif not exact and group in view.oldest:
                candidates.append(view.oldest[group])
            oldest = min(candidates) if candidates else None
            figures.oldest_ready_age_s = max(0.0, server_now - oldest) if figures.ready and oldest is not None else None
            out.append(figures)
        return out, notes

    def _dead_letters_by_queue(self, conn: ProbeConnection) -> tuple[dict[str | None, int], float | None, bool]:
        """The dead-letter table's rows by queue (None: all of them, a table with no queue
        column), the age of their count and whether it is an estimate."""
        jobs = self._dead_letter_jobs(conn)
        dead_letters = jobs.resolved(conn)
        if not dead_letters.can_select:
            raise NotAsDeclared(f"no SELECT privilege on dead_letter_table {dead_letters.qualified}")
        by_group, estimated, _view = jobs.counts(conn)
        counts = {group: round(c["dead"]) for group, c in by_group.items()}
        if jobs.resolved(conn).queue_type is None:
            counts = {None: sum(counts.values())}
        return counts, estimated.get("dead"), "dead" in estimated

    def _add_notes(self, figures: QueueFigures, table: ResolvedTable, live: int | None) -> None:
        if table.rls_active:
            figures.notes.append(f"row-level security hides rows from this role: {figures.depth or 0:,} visible"
                                 f" of ~{live or 0:,} live in {table.qualified}")
        if not table.indexed and self.index_note:
            order = self.declared.order_by
            figures.notes.append((f"no index leads with order_by column {order!r}" if isinstance(order, str) else
                                  f"no index leads with order_by {list(order)!r} (or its reverse)")
                                 + f" of {table.qualified}: its head (Enter) is sorted from the whole queue; create one")

    def _distinct(self, conn: ProbeConnection, table: ResolvedTable, key: str) -> list[str]:
        statement = sql.SQL(JOBTABLE_SQL["distinct_values"]).format(table=table.parts["table"], column=table.parts[key])
        return [r["value"] for r in conn.execute(statement, {"max_values": MAX_QUEUES})]

    def _states(self, conn: ProbeConnection, table: ResolvedTable) -> list[str]:
        """Every state that is counted: the ready ones, in flight, delayed, dead (never the done)."""
        d = self.declared
        return [*self._ready_states(conn, table), *d.in_flight_states, *d.delayed_states, *d.dead_states]

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

    def _dead_letter_table(self, conn: ProbeConnection) -> ResolvedTable:
        return self._dead_letter_jobs(conn).resolved(conn)

    def _dead_letter_jobs(self, conn: ProbeConnection) -> JobTable:
        """The dead-letter table, counted as a job table whose every row is dead (by queue, where
        it has the queue column)."""
        d = self.declared
        assert d.dead_letter_table is not None
        if self._dead_letter_jobs_table is None:
            for queue_column in (d.queue_column, None):
                jobs = JobTable(DeclaredQueue(name=d.name, table=d.dead_letter_table, order_by=d.order_by,
                                              queue_column=queue_column), cap=self.cap, constant_class="dead",
                                chunk_pages=self.tally.chunk_pages, rows=d.dead_letter_where, queue_names=False)
                try:
                    jobs._resolved = resolve(conn, jobs.declared, "dead_letter_table", rows=d.dead_letter_where)
                except NotAsDeclared:  # no queue column there: the whole table is this queue's
                    if queue_column is None:
                        raise
                    continue
                self._dead_letter_jobs_table = jobs
                break
        assert self._dead_letter_jobs_table is not None
        return self._dead_letter_jobs_table

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
            dlq = self._dead_letter_table(conn)  # its rows (of this queue), those the declared filter takes
            dead_where = sql.SQL(JOBTABLE_SQL["both"]).format(
                first=self._filter(dlq, queue if dlq.queue_type is not None else None), second=dlq.parts["rows"])
            statement = sql.SQL(JOBTABLE_SQL["dead_head"]).format(**dlq.parts, filter=dead_where)
            params = {"limit": HEAD_ROWS, "queue": queue, **dlq.rows_params}
            dead_rows = [dict(r["row"]) for r in conn.execute(statement, params)]
        elif d.dead_states or (d.attempts_column and (d.max_attempts_column or d.max_attempts)):
            fragment = (sql.SQL(JOBTABLE_SQL["dead_state_is"]).format(**table.parts, state_type=table.state_type)
                        if d.dead_states else sql.SQL(JOBTABLE_SQL["exhausted"]).format(**table.parts))
            dead_where = sql.SQL(JOBTABLE_SQL["both"]).format(first=where, second=fragment)
            statement = sql.SQL(JOBTABLE_SQL["dead_head"]).format(**table.parts, filter=dead_where)
            params = {"limit": HEAD_ROWS, "queue": queue, "dead_states": list(d.dead_states)}
            dead_rows = [dict(r["row"]) for r in conn.execute(statement, params)]
        return QueueDetails(head=[dict(r["row"]) for r in head], dead=dead_rows)


def _older(a: float | None, b: float | None) -> float | None:
    """The older of two counts' ages (None, never counted, is the oldest)."""
    return None if a is None or b is None else max(a, b)


