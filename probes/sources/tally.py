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
  exact as of the oldest chunk's reading (its `age_s`), and flagged as an estimate.
- Chunks not read yet (a table larger than the first cycle's reading, until the first pass has
  come round) are estimated from a sample taken in that first cycle: SAMPLE_RUNS runs of
  RUN_PAGES pages at random among them (stratified by chunk: every unread chunk can be drawn,
  each page as likely as any other), counted like the chunks. The unread pages' rows are the
  sample's rows per page times their pages (a ratio estimate), and `spread` gives each figure's
  error bound from the runs' scatter (Z standard errors, and never less than what a sample that
  met none of a kind's rows leaves possible): a figure is shown, flagged, only where that bound is
  within 5 % of it; else it is absent and said to be counting (jobtable.py).

Outside a probe cycle (a source sampled alone) a table reads TABLE_PAGES a call. Without TID
range scans (PostgreSQL 12 and 13), a pass is one statement over the whole table, made when the
credit since the last pass covers it. A view has no pages: it is read whole. The tables' pages
come from one catalog statement a cycle for all of them (CycleCatalog).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
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
RUN_PAGES = 8  # a sample run's pages
SAMPLE_RUNS = 128  # runs sampled from the pages not read in a table's first cycle (8 MB at most)
MIN_RUNS = 16  # fewer runs than this left among the unread pages: no estimate from them
Z = 3.0  # standard errors in an estimate's error bound (99.7 % of a normal error)
TOLERANCE = 0.05  # an estimate is shown only within this of the count (else it is being counted)
HOT_S = 30.0  # a chunk jobs moved to is read every cycle for this long
SETTLE_S = 1.0  # a window of recorded times ends this long before the server's clock (here and in flows.py)
HOT_CHUNKS = 2  # ... at most this many of them a cycle (4 MB), the latest moved first
CLASSES = ("ready", "in_flight", "delayed", "blocked", "dead")
FLAGS = ("n", "held", "exhausted", "later", "blocked")  # what a count row says of its rows (tally in jobtable.sql)

Key = tuple[str | None, str | None]  # (group, state)
Flags = tuple[int, int, int, int, int]  # FLAGS, in order
# The tally's statement for some page ranges (chunk, lo, hi), or None: the whole relation; and
# where each chunk's window of recorded times starts (server epoch; None: no window).
Statement = Callable[[list[tuple[int, int, int]] | None, Mapping[int, float | None] | None], sql.Composed]


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
    until: float | None = None  # where its window of recorded times ended (server epoch): the next one starts there
    oldest: dict[str | None, float] = field(default_factory=dict)  # group -> oldest due time (server epoch)


@dataclass
class Run:
    """A sample run: RUN_PAGES pages (in every partition) of a chunk not read yet, and its counts."""

    index: int  # the chunk index it lies in
    pages: int  # its pages, all partitions together
    counts: dict[Key, Flags] = field(default_factory=dict)


@dataclass
class Unread:
    """The pages of a table not read yet, and the sample runs that lie among them (none: there is
    no sample, and what they hold is not known)."""

    pages: int
    runs: list[Run]

    @property
    def sampled_pages(self) -> int:
        return sum(r.pages for r in self.runs)


@dataclass
class TallyView:
    """What the tally knows now: flag counts by (group, state); `fresh` when every chunk was
    read in this cycle; `age_s` the age of the oldest chunk's count (None: some never read, and
    estimated from the sample). `unread`: the pages never read and the sample of them (None when
    every chunk has been read)."""

    counts: dict[Key, tuple[float, ...]]
    oldest: dict[str | None, float]
    fresh: bool
    age_s: float | None
    server_offset: float  # server epoch - time.time(), from the last reading
    unread: Unread | None = None
    # The rows created, finished and failed for good (where the table records when) in the
    # windows of the chunks read this cycle, by group; `window_s`: how long the windows were,
    # where every chunk was read this cycle (fresh: the figures are each group's traffic since the
    # last cycle), else None (each chunk's since its own last reading: a partial count).
    flows: dict[str | None, tuple[int, int, int]] = field(default_factory=dict)
    window_s: float | None = None


Classify = Callable[[Key, tuple[float, ...]], dict[Any, float]]


def spread(unread: Unread, classify: Classify) -> dict[Any, float]:
    """The error bound of each figure's share from the unread pages: `classify` says what a key's
    flag counts add to which figures (keys it gives nothing to are read exactly elsewhere). A
    ratio estimate's standard error over the runs (pages as the auxiliary), times Z; at least the
    rows a sample that met none of them leaves possible (3 per sampled run's pages, scaled: the
    upper 95 % bound of a count of 0). No runs: every figure is unbounded (inf)."""
    runs = unread.runs
    if unread.pages <= 0:
        return {}
    per_run: list[dict[Any, float]] = []
    figures: set[Any] = set()
    for run in runs:
        y: dict[Any, float] = {}
        for key, flags in run.counts.items():
            for figure, n in classify(key, flags).items():
                y[figure] = y.get(figure, 0.0) + n
        per_run.append(y)
        figures.update(y)
    n = len(runs)
    if n < MIN_RUNS:
        return {"*": float("inf")}
    x = [float(r.pages) for r in runs]
    x_total = sum(x)
    x_mean = x_total / n
    fraction = min(1.0, x_total / unread.pages)
    floor = 3.0 * unread.pages / x_total
    out: dict[Any, float] = {"*": floor}  # a figure no run met: the floor alone
    for figure in figures:
        ys = [run.get(figure, 0.0) for run in per_run]
        ratio = sum(ys) / x_total
        residuals = [yi - ratio * xi for yi, xi in zip(ys, x, strict=True)]
        variance = sum(d * d for d in residuals) / (n - 1)
        se = unread.pages * (((1 - fraction) * variance / n) ** 0.5) / x_mean
        out[figure] = max(Z * se, floor)
    return out


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
        self.runs: list[Run] | None = None  # the sample of the pages the first cycle left unread
        self.last_chunks = 0  # chunk indexes the relation had at the last cycle (those past it are new)
        self.last_pages = 0  # its pages then
        self.hot: dict[int, float] = {}  # chunk index -> until when (monotonic) it is read every cycle
        self.until: float | None = None  # where the last reading's window ended (server epoch)
        self._since_before: float | None = None  # ... before this cycle's reading
        self._uniform = True  # every chunk read this cycle had its window start there
        self.flows: dict[str | None, list[int]] = {}  # this cycle's readings' windows: group -> arrived, finished, failed
        self.window_s: float | None = None

    def moved(self, blocks: set[int]) -> None:
        """Jobs moved to these pages since the last cycle (the library's own records say which:
        flows.py): their chunks are read first in each cycle for HOT_S, so that a burst and its
        drain show within one interval (a job moved again leaves its old chunk; that chunk is
        read again too while it is hot)."""
        until = time.monotonic() + HOT_S
        for block in blocks:
            self.hot[int(block) // self.chunk_pages] = until

    def advance(self, conn: ProbeConnection, table: ResolvedTable, compose: Statement, params: dict[str, Any],
                sizes: dict[int, int]) -> TallyView:
        """Read as much of the relation as this cycle's budget allows (`sizes`: the pages of each
        of its relations now), then say what is known."""
        first = self.cycles == 0
        self.cycles += 1
        self.flows, self.window_s = {}, None
        since_before = self.until  # where the last reading's window ended
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
        self._since_before, self._uniform = since_before, True
        whole_since = {0: self._since(range(1))}
        if table.relkind == "v":
            self._timed(conn, compose(None, whole_since), params, now, whole=True, fresh={(0, 0)}, pages=0, charged=charged)
            return self._view(now, {0: 0}, whole=True)
        if conn.info.server_version < TID_RANGE_SCAN:
            # No page ranges: one chunk, the whole relation, read when the budget of the cycles
            # since the last reading covers it - and the first time, whatever its size (the
            # statement timeout bounds it): never counted would be no figure at all.
            if first or allowance >= sum(sizes.values()):
                self._timed(conn, compose(None, whole_since), params, now, whole=True, fresh={(rel, 0) for rel in sizes},
                            pages=sum(sizes.values()), charged=charged)
            elif budget is None and timed is None:
                self.credit_ms += TABLE_PAGES * self.ms_per_page  # untimed: a whole read once the cycles' pages pay for it
                if self.credit_ms >= sum(sizes.values()) * self.ms_per_page:
                    self._timed(conn, compose(None, whole_since), params, now, whole=True, fresh={(rel, 0) for rel in sizes},
                                pages=sum(sizes.values()), charged=charged)
            return self._view(now, {rel: 0 for rel in sizes}, whole=True)
        widest = max(sizes.values(), default=0)
        n_chunks = max(1, -(-widest // self.chunk_pages))
        # Chunks past the end (the table shrank) are gone.
        for gone in [k for k in self.chunks if k[0] not in sizes or k[1] >= self._chunks_of(sizes[k[0]])]:
            self._drop(gone)
        def cost(index: int) -> int:  # a chunk index costs its pages in every partition that reaches it
            return sum(min(self.chunk_pages, max(0, p - index * self.chunk_pages)) for p in sizes.values())

        # Where the table grew since the last cycle first (outside the allowance and the credit:
        # at most HOT_CHUNKS): a burst's rows go there, and are counted in the cycle they came; the
        # rest in turns.
        tail: list[int] = []
        pages_now = sum(sizes.values())
        if not first and budget is None:
            # (kept hot a while too: a writer's rows may come to those pages after they were read,
            # its transaction committed later)
            for index in ({n_chunks - 1, *range(min(self.last_chunks, n_chunks), n_chunks)}
                          if pages_now > self.last_pages else ()):
                self.hot[index] = now + HOT_S
            # ... and the chunks the jobs that moved are in (the library's records said which), the latest first
            self.hot = {index: until for index, until in self.hot.items() if until > now and index < n_chunks}
            hot = sorted(self.hot, key=lambda index: -self.hot[index])[:HOT_CHUNKS]
            tail = sorted(hot)
        self.last_pages = pages_now
        # Then chunk indexes from the cursor on, as many as the allowance pays for.
        start = self.cursor % n_chunks
        indexes: list[int] = []
        spent = 0
        taken = 0
        for i in range(n_chunks):
            index = (start + i) % n_chunks
            if index in tail:
                taken += 1
                continue
            if spent + cost(index) > allowance and (indexes or not (first or budget is not None or timed is None)):
                break  # (a page budget always reads one chunk; a time budget waits until its credit pays one)
            indexes.append(index)
            spent += cost(index)
            taken += 1
        self.last_chunks = n_chunks
        todo = [*tail, *indexes]
        if not todo:
            return self._view(now, sizes, whole=False)
        ranges = [(i, i * self.chunk_pages, (i + 1) * self.chunk_pages) for i in todo]
        fresh = {(rel, i) for rel, pages in sizes.items() for i in todo if i < self._chunks_of(pages)}
        since = {i: self._since([i]) for i in todo}
        self._uniform = all(start == since_before for start in since.values())
        tail_pages = sum(map(cost, tail))
        self._timed(conn, compose(ranges, since), params, now, whole=False, fresh=fresh, pages=spent + tail_pages,
                    charged=charged)
        if charged and self.cycles > 1:  # (what moved is read outside the credit: it must not starve the pass)
            self.credit_ms += tail_pages * self.ms_per_page
        if indexes:
            self.cursor = (start + taken) % n_chunks
        if self.runs is None and self._unread_pages(sizes):
            runs = SAMPLE_RUNS if budget is None else budget // (4 * RUN_PAGES)
            self.runs = self._sample(conn, compose, params, sizes, runs)
        return self._view(now, sizes, whole=False)

    def _unread_indexes(self, sizes: dict[int, int]) -> dict[int, int]:
        """The chunk indexes not read yet, each with its pages (every partition that reaches it)."""
        out: dict[int, int] = {}
        for rel, pages in sizes.items():
            for index in range(self._chunks_of(pages) if pages else 0):
                if (rel, index) not in self.chunks:
                    out[index] = out.get(index, 0) + min(self.chunk_pages, pages - index * self.chunk_pages)
        return out

    def _unread_pages(self, sizes: dict[int, int]) -> int:
        return sum(self._unread_indexes(sizes).values())

    def _sample(self, conn: ProbeConnection, compose: Statement, params: dict[str, Any], sizes: dict[int, int],
                most: int) -> list[Run]:
        """SAMPLE_RUNS runs of RUN_PAGES pages drawn at random among the pages not read yet, each
        run's slot as likely as any other's, counted in one statement (a TID range each)."""
        unread = self._unread_indexes(sizes)
        widest = max(sizes.values(), default=0)
        slots = [(index, lo) for index in sorted(unread)
                 for lo in range(index * self.chunk_pages, min((index + 1) * self.chunk_pages, widest), RUN_PAGES)]
        if len(slots) < MIN_RUNS:
            return []
        chosen = sorted(random.Random(len(slots)).sample(slots, min(most, len(slots) // 4)))
        if len(chosen) < MIN_RUNS:
            return []
        runs = [Run(index, sum(max(0, min(lo + RUN_PAGES, p) - lo) for p in sizes.values())) for index, lo in chosen]
        ranges = [(i, lo, lo + RUN_PAGES) for i, (_index, lo) in enumerate(chosen)]
        for row in conn.execute(compose(ranges, None), params):
            run = runs[int(row["chunk"])]
            k: Key = (row["grp"], row["state"])
            counts = flags_of(row)
            run.counts[k] = add(run.counts[k], counts) if k in run.counts else counts  # type: ignore[assignment]
        return runs

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

    def _since(self, indexes: Iterable[int]) -> float | None:
        """Where the window of recorded times of a reading of these chunk indexes starts: where
        their last reading's ended (the earliest, over the partitions), or for a chunk never read
        (the table grew), where the table's last reading's did; None the first time."""
        wanted = set(indexes)
        ends = [c.until for (_rel, index), c in self.chunks.items() if index in wanted and c.until is not None]
        return min(ends) if ends else self.until

    def _chunks_of(self, pages: int) -> int:
        return max(1, -(-pages // self.chunk_pages))

    def _read(self, conn: ProbeConnection, statement: sql.Composed, params: dict[str, Any], now: float, *, whole: bool,
              fresh: set[tuple[int, int]]) -> None:
        read = {key: Chunk(now) for key in fresh}
        if whole:  # everything is read: every chunk known is replaced
            self.chunks, self.totals = {}, {}
        until: float | None = None
        for row in conn.execute(statement, params):
            key = (int(row["rel"]), int(row["chunk"]))
            chunk = read.setdefault(key, Chunk(now))
            k: Key = (row["grp"], row["state"])
            counts = flags_of(row)
            if counts[0]:  # (a group's finished rows alone: in its window's counts, in no figure)
                chunk.counts[k] = add(chunk.counts[k], counts) if k in chunk.counts else counts  # type: ignore[assignment]
            if row["oldest"] is not None:
                group = row["grp"]
                chunk.oldest[group] = min(chunk.oldest.get(group, row["oldest"]), row["oldest"])
            if row["arrived"] or row["finished"]:
                moved = self.flows.setdefault(row["grp"], [0, 0, 0])
                moved[0] += int(row["arrived"])
                moved[1] += int(row["finished"])
                moved[2] += int(row["failed"])
            self.server_offset = float(row["server_now"]) - time.time()
            until = float(row["server_until"])
        if until is None:  # no row read: where the window ended, by the server's clock as last known
            until = time.time() + self.server_offset - SETTLE_S
        for chunk in read.values():
            chunk.until = until
        self.until = until
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
        unread: Unread | None = None
        if known < expected:
            # Never read yet: estimated from the sample runs among those pages (a ratio estimate:
            # their rows per page times the pages), with no age; spread() bounds its error.
            indexes = self._unread_indexes(sizes) if not whole else {0: sum(sizes.values())}
            runs = [r for r in self.runs or () if r.index in indexes and r.pages]
            unread = Unread(sum(indexes.values()), runs)
            sampled = unread.sampled_pages
            if len(runs) >= MIN_RUNS and sampled:
                estimate: dict[Key, list[float]] = {}
                for run in runs:
                    for k, n in run.counts.items():
                        total_k = estimate.setdefault(k, [0.0] * len(FLAGS))
                        for i, x in enumerate(n):
                            total_k[i] += x
                factor = unread.pages / sampled
                for k, sums in estimate.items():
                    known_k = counts.get(k, (0,) * len(FLAGS))
                    counts[k] = tuple(a + b * factor for a, b in zip(known_k, sums, strict=True))
            age = None
        flows = {group: (n[0], n[1], n[2]) for group, n in self.flows.items()}
        window = None
        if fresh and self._uniform and self._since_before is not None and self.until is not None:
            window = self.until - self._since_before  # every chunk's window the same: the traffic since the last cycle
        return TallyView(counts=counts, oldest=oldest, fresh=fresh, age_s=age, server_offset=self.server_offset,
                         unread=unread, flows=flows, window_s=window)
