"""Exact counts of a job table, made a page range at a time and kept between passes.

A job table's figures are the counts of its rows by group (queue), state and class (ready, in
flight, delayed, blocked, dead: jobtable.py `_classes`). Counting them all at once would cost as
much as the table is large; the planner's statistics cost nothing but are wrong exactly when it
matters (they take queue and state to be independent, and never say 0). So the tally reads the
table in chunks of CHUNK_PAGES pages by TID range scans and keeps each chunk's counts until it
reads that chunk again:

- a table's first cycle reads up to FIRST_TABLE_PAGES (128 MB), so that one `queuetop snapshot`
  is exact on tables of about a million narrow rows;
- a table of at most SMALL_TABLE_PAGES (1 MB) is read whole every cycle: exact, now;
- a larger one is read in turns, from where the last cycle stopped, within the probes' time for
  the tallies (CYCLE_TALLY_MS a cycle, shared evenly by the tables as credit: the cost grows with
  the number of tables, never with their depth). Each figure is the sum of the chunks' counts,
  exact as of the oldest chunk's reading (its `age_s`), and flagged as an estimate. Chunks not
  read yet (the first passes over a table larger than the first cycle's reading) are
  extrapolated from the pages read, flagged with no age.

Outside a probe cycle (a source sampled alone) a table reads TABLE_PAGES a call. Without TID
range scans (PostgreSQL 12 and 13), a pass is one statement over the whole table, made when the
credit since the last pass covers it. A view has no pages: it is read whole. The tables' pages
come from one catalog statement a cycle for all of them (CycleCatalog).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from psycopg import sql

if TYPE_CHECKING:
    from ..session import ProbeConnection
    from .resolved import ResolvedTable

CHUNK_PAGES = 256  # 2 MB of an 8 kB-page table: the unit a tally's counts are kept by
TABLE_PAGES = 256  # pages of one table read per probe cycle (2 MB: ~10-40k job rows)
FIRST_TABLE_PAGES = 16_384  # ... in the table's first cycle (128 MB): one snapshot exact on ~1M narrow rows
SMALL_TABLE_PAGES = 128  # a table of at most this (1 MB) is read whole every cycle, outside the time budget
TID_RANGE_SCAN = 140_000  # the first server_version_num with TID range scans
CLASSES = ("ready", "in_flight", "delayed", "blocked", "dead")
FLAGS = ("n", "held", "exhausted", "later", "blocked")  # what a count row says of its rows (tally in jobtable.sql)

Key = tuple[str | None, str | None]  # (group, state)
Flags = tuple[int, int, int, int, int]  # FLAGS, in order
Statement = Callable[[list[tuple[int, int, int]] | None], sql.Composed]  # ranges (chunk, lo, hi), or None: whole


def add(a: tuple[float, ...], b: tuple[float, ...]) -> tuple[float, ...]:
    return tuple(x + y for x, y in zip(a, b, strict=True))


def flags_of(row: Any) -> Flags:
    return (int(row["n"]), int(row["held"]), int(row["exhausted"]), int(row["later"]), int(row["blocked"]))


CYCLE_TALLY_MS = 15.0  # the probe's time for the tallies of all tables, per cycle (after each table's first)
MS_PER_PAGE_GUESS = 0.1  # a page's cost before a table's own is measured (~100 rows at 1 us)

_BUDGET: ContextVar[int | None] = ContextVar("tally_budget", default=None)


@dataclass
class TimeBudget:
    """One probe cycle's time for the tallies, shared out evenly: each table is credited its share
    and reads a chunk of pages when its credit pays for one, so a cycle costs about `ms` however
    many tables there are and however deep."""

    ms: float
    tables: int  # tables that took part in the last cycle: how many shares
    seen: int = 0


_TIME: ContextVar[TimeBudget | None] = ContextVar("tally_time", default=None)


@dataclass(frozen=True)
class RelationFacts:
    """What the catalog says of a table now (jobtable.sql `relation_facts`): the pages of each of
    its relations with storage (itself, or each partition), its rows as its statistics count them,
    and a key that changes when what the planner's estimates depend on changes."""

    pages: dict[int, int]
    live: int
    stats_key: str


def relation_facts(conn: ProbeConnection, relids: list[int], statement: str) -> dict[int, RelationFacts]:
    """The facts of each relation in `relids`, in one statement (an unknown one: no pages)."""
    rows: dict[int, list[Any]] = {relid: [] for relid in relids}
    for row in conn.execute(statement, {"relids": relids}):
        rows.setdefault(int(row["relid"]), []).append(row)
    facts = {}
    for relid, rels in rows.items():
        stored = [r for r in rels if r["pages"] is not None]
        facts[relid] = RelationFacts(
            pages={int(r["rel"]): int(r["pages"]) for r in stored},
            live=int(sum(r["reltuples"] if r["reltuples"] >= 0 else r["n_live_tup"] for r in stored)),
            stats_key=",".join(f"{r['rel']}:{r['reltuples']}:{r['relpages']}" for r in stored)
            + "/" + str(sum(int(r["indexes"]) for r in rels)))
    return facts


class CycleCatalog:
    """One probe cycle's catalog facts: asked for every table the last cycle asked about, in one
    statement, at the first question (a table new this cycle costs one more)."""

    def __init__(self, expected: set[int]) -> None:
        self.expected = expected
        self.asked: set[int] = set()
        self.facts: dict[int, RelationFacts] | None = None

    def get(self, conn: ProbeConnection, relid: int, statement: str) -> RelationFacts:
        self.asked.add(relid)
        if self.facts is None:
            self.facts = relation_facts(conn, sorted(self.expected | {relid}), statement)
        if relid not in self.facts:
            self.facts.update(relation_facts(conn, [relid], statement))
        return self.facts[relid]


_CATALOG: ContextVar[CycleCatalog | None] = ContextVar("tally_catalog", default=None)


def facts_of(conn: ProbeConnection, relid: int, statement: str) -> RelationFacts:
    """A table's facts: this cycle's (asked once for all its tables), or asked now alone."""
    catalog = _CATALOG.get()
    if catalog is not None:
        return catalog.get(conn, relid, statement)
    return relation_facts(conn, [relid], statement)[relid]


class CycleTallies:
    """The tallies' time budget across cycles, and the tables whose catalog facts each cycle asks
    for at once (the probes keep one)."""

    def __init__(self, ms: float = CYCLE_TALLY_MS) -> None:
        self.ms = ms
        self.tables = 1
        self.relids: set[int] = set()

    @contextmanager
    def cycle(self) -> Iterator[TimeBudget]:
        budget = TimeBudget(self.ms, self.tables)
        catalog = CycleCatalog(self.relids)
        token, catalog_token = _TIME.set(budget), _CATALOG.set(catalog)
        try:
            yield budget
        finally:
            _TIME.reset(token)
            _CATALOG.reset(catalog_token)
            self.tables = max(1, budget.seen)
            self.relids = catalog.asked


@contextmanager
def cycle_budget(pages: int) -> Iterator[None]:
    """Let each table's tally read `pages` pages in this cycle (its first one too), instead of
    TABLE_PAGES (FIRST_TABLE_PAGES the first time)."""
    token = _BUDGET.set(pages)
    try:
        yield
    finally:
        _BUDGET.reset(token)


@dataclass
class Chunk:
    at: float  # time.monotonic() of its reading
    counts: dict[Key, Flags] = field(default_factory=dict)
    oldest: dict[str | None, float] = field(default_factory=dict)  # group -> oldest due time (server epoch)


@dataclass
class TallyView:
    """What the tally knows now: flag counts by (group, state); `fresh` when every chunk was
    read in this cycle; `age_s` the age of the oldest chunk's count (None: some never read, and
    extrapolated)."""

    counts: dict[Key, tuple[float, ...]]
    oldest: dict[str | None, float]
    fresh: bool
    age_s: float | None
    server_offset: float  # server epoch - time.time(), from the last reading


class Tally:
    """The chunks of one relation (a table, each partition of a partitioned one, or a view)."""

    def __init__(self, chunk_pages: int = CHUNK_PAGES) -> None:
        self.chunk_pages = chunk_pages
        self.chunks: dict[tuple[int, int], Chunk] = {}
        self.totals: dict[Key, list[int]] = {}  # the chunks' counts summed, kept as chunks come and go
        self.cursor = 0  # the next chunk index to read
        self.cycles = 0
        self.credit_ms = 0.0  # time budget credited and not yet spent (a cycle's share may not pay a chunk)
        self.ms_per_page = MS_PER_PAGE_GUESS  # what reading a page has cost here (moving average)
        self.server_offset = 0.0

    def advance(self, conn: ProbeConnection, table: ResolvedTable, compose: Statement, params: dict[str, Any],
                sizes: dict[int, int]) -> TallyView:
        """Read as much of the relation as this cycle's budget allows (`sizes`: the pages of each
        of its relations now), then say what is known."""
        first = self.cycles == 0
        self.cycles += 1
        budget, timed = _BUDGET.get(), _TIME.get()
        small = sum(sizes.values()) <= SMALL_TABLE_PAGES and table.relkind != "v"
        # Whether this cycle's reading is paid from the credit: not a small table's, read whole every
        # cycle outside the shares.
        charged = not (small and timed is not None and budget is None)
        if budget is not None:
            allowance = budget
        elif first:
            allowance = FIRST_TABLE_PAGES
        elif small and timed is not None:
            allowance = SMALL_TABLE_PAGES  # whole, every cycle, outside the shares: exact now, for little
        elif timed is not None:
            timed.seen += 1
            share = timed.ms / max(1, timed.tables)
            # Saved up to a few cycles' shares, and at least what a chunk costs (else never read).
            self.credit_ms = min(self.credit_ms + share, max(4 * share, 1.5 * self.chunk_pages * self.ms_per_page))
            allowance = int(max(0.0, self.credit_ms) / self.ms_per_page)
        else:
            allowance = TABLE_PAGES
        now = time.monotonic()
        if table.relkind == "v":
            self._timed(conn, compose(None), params, now, whole=True, fresh={(0, 0)}, pages=0, charged=charged)
            return self._view(now, {0: 0}, whole=True)
        if conn.info.server_version < TID_RANGE_SCAN:
            # No page ranges: one chunk, the whole relation, read when the budget of the cycles
            # since the last reading covers it - and the first time, whatever its size (the
            # statement timeout bounds it): never counted would be no figure at all.
            if first or allowance >= sum(sizes.values()):
                self._timed(conn, compose(None), params, now, whole=True, fresh={(rel, 0) for rel in sizes},
                            pages=sum(sizes.values()), charged=charged)
            elif budget is None and timed is None:
                self.credit_ms += TABLE_PAGES * self.ms_per_page  # untimed: a whole read once the cycles' pages pay for it
                if self.credit_ms >= sum(sizes.values()) * self.ms_per_page:
                    self._timed(conn, compose(None), params, now, whole=True, fresh={(rel, 0) for rel in sizes},
                                pages=sum(sizes.values()), charged=charged)
            return self._view(now, {rel: 0 for rel in sizes}, whole=True)
        widest = max(sizes.values(), default=0)
        n_chunks = max(1, -(-widest // self.chunk_pages))
        # Chunks past the end (the table shrank) are gone.
        for gone in [k for k in self.chunks if k[0] not in sizes or k[1] >= self._chunks_of(sizes[k[0]])]:
            self._drop(gone)
        # Chunk indexes from the cursor on, as many as the allowance pays for: a chunk index costs
        # its pages in every partition that reaches it.
        start = self.cursor % n_chunks
        indexes: list[int] = []
        spent = 0
        for i in range(n_chunks):
            index = (start + i) % n_chunks
            cost = sum(min(self.chunk_pages, max(0, p - index * self.chunk_pages)) for p in sizes.values())
            if spent + cost > allowance and (indexes or not (first or budget is not None or timed is None)):
                break  # (a page budget always reads one chunk; a time budget waits until its credit pays one)
            indexes.append(index)
            spent += cost
        todo = len(indexes)
        if not todo:
            return self._view(now, sizes, whole=False)
        ranges = [(i, i * self.chunk_pages, (i + 1) * self.chunk_pages) for i in indexes]
        fresh = {(rel, i) for rel, pages in sizes.items() for i in indexes if i < self._chunks_of(pages)}
        self._timed(conn, compose(ranges), params, now, whole=False, fresh=fresh, pages=spent, charged=charged)
        self.cursor = (start + todo) % n_chunks
        return self._view(now, sizes, whole=False)

    def _timed(self, conn: ProbeConnection, statement: sql.Composed, params: dict[str, Any], now: float, *, whole: bool,
               fresh: set[tuple[int, int]], pages: int, charged: bool) -> None:
        """_read, and what it cost: taken from the credit (when `charged`) and the cycle's budget, and
        learnt per page."""
        started = time.perf_counter()
        self._read(conn, statement, params, now, whole=whole, fresh=fresh)
        elapsed = (time.perf_counter() - started) * 1000
        if pages > 0:
            self.ms_per_page = 0.7 * self.ms_per_page + 0.3 * elapsed / pages
        if self.cycles > 1 and charged:  # the first reading is the snapshot's own, not the cycles' budget
            self.credit_ms -= elapsed

    def _chunks_of(self, pages: int) -> int:
        return max(1, -(-pages // self.chunk_pages))

    def _read(self, conn: ProbeConnection, statement: sql.Composed, params: dict[str, Any], now: float, *, whole: bool,
              fresh: set[tuple[int, int]]) -> None:
        read = {key: Chunk(now) for key in fresh}
        if whole:  # everything is read: every chunk known is replaced
            self.chunks, self.totals = {}, {}
        for row in conn.execute(statement, params):
            key = (int(row["rel"]), int(row["chunk"]))
            chunk = read.setdefault(key, Chunk(now))
            k: Key = (row["grp"], row["state"])
            counts = flags_of(row)
            chunk.counts[k] = add(chunk.counts[k], counts) if k in chunk.counts else counts  # type: ignore[assignment]
            if row["oldest"] is not None:
                group = row["grp"]
                chunk.oldest[group] = min(chunk.oldest.get(group, row["oldest"]), row["oldest"])
            self.server_offset = float(row["server_now"]) - time.time()
        for key, chunk in read.items():
            self._drop(key)
            self.chunks[key] = chunk
            for k, n in chunk.counts.items():
                total = self.totals.setdefault(k, [0] * len(FLAGS))
                for i, x in enumerate(n):
                    total[i] += x

    def _drop(self, key: tuple[int, int]) -> None:
        """Forget a chunk's counts (read again, or past the table's end now)."""
        chunk = self.chunks.pop(key, None)
        if chunk is None:
            return
        for k, n in chunk.counts.items():
            total = self.totals[k]
            for i, x in enumerate(n):
                total[i] -= x
            if total[0] == 0:  # no row of (group, state) left in any chunk
                del self.totals[k]

    def _view(self, now: float, sizes: dict[int, int], *, whole: bool) -> TallyView:
        counts: dict[Key, tuple[float, ...]] = {k: tuple(n) for k, n in self.totals.items()}
        oldest: dict[str | None, float] = {}
        for chunk in self.chunks.values():
            for group, ts in chunk.oldest.items():
                oldest[group] = min(oldest.get(group, ts), ts)
        expected = len(sizes) if whole else sum(self._chunks_of(p) for p in sizes.values())
        known = len(self.chunks)
        fresh = known >= expected and all(c.at == now for c in self.chunks.values())
        age: float | None = max((now - c.at for c in self.chunks.values()), default=0.0)
        if known < expected:
            # Never read yet: what was read, scaled to the whole (an extrapolation, with no age).
            read_pages = sum(min(self.chunk_pages, max(0, sizes.get(rel, 0) - index * self.chunk_pages)) for rel, index in self.chunks)
            total = sum(sizes.values())
            if read_pages and total > read_pages:
                factor = total / read_pages
                counts = {k: tuple(x * factor for x in n) for k, n in counts.items()}
            age = None
        return TallyView(counts=counts, oldest=oldest, fresh=fresh, age_s=age, server_offset=self.server_offset)
