"""The accuracy contract, as a test states it.

For every queue and every figure (ready, in_flight, delayed, dead, blocked, depth):

- the truth is counted twice, just before and just after the snapshot (`before`, `after`); a
  figure that did not move while queuetop looked has one true value, one that moved may be
  anything between the two;
- a truth of at most EXACT_UP_TO rows (both times) must be shown exactly: a value between the
  two counts, so 0 is 0 (no phantom) and 7 is 7;
- a larger one may be an estimate, within TOLERANCE of the range the truth spanned;
- any figure may be absent where queuetop says it is counting it (`counting`: a table larger than
  the first cycle reads, whose sample bounds it no better than that): absent and said so, never
  a guess outside the contract.

`blocked` = due but not claimable now (a lock, a singleton/stately policy, a locked named queue):
it is counted in `delayed`, never in `ready`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

EXACT_UP_TO = 10_000
TOLERANCE = 0.05
FIELDS = ("ready", "in_flight", "delayed", "dead", "blocked")

Truth = Mapping[str, Mapping[str, int]]  # queue -> field -> count (FIELDS; depth is derived)


def with_depth(counts: Mapping[str, int]) -> dict[str, int]:
    out = {field: int(counts.get(field, 0)) for field in FIELDS}
    out["depth"] = out["ready"] + out["in_flight"] + out["delayed"]
    return out


def within(shown: int | None, before: int, after: int) -> bool:
    """Whether one figure keeps the contract."""
    if shown is None:
        return False
    low, high = min(before, after), max(before, after)
    if high <= EXACT_UP_TO:
        return low <= shown <= high
    return low * (1 - TOLERANCE) <= shown <= high * (1 + TOLERANCE)


def breaches(shown: Mapping[str, Any], before: Truth, after: Truth) -> list[str]:
    """Every figure of every queue that breaks the contract, said so that a failure reads as a
    table: `queue.field: shown X, truth B..A`. `shown` maps a queue's name to its row (an object
    with the FIELDS and depth as attributes, or a dict). A queue in the truth but not shown (or
    shown but not in the truth, with anything in it) is a breach too."""
    out: list[str] = []
    names = set(before) | set(after)
    empty = dict.fromkeys(FIELDS, 0)
    for name in sorted(names | set(shown)):
        b = with_depth(before.get(name, empty))
        a = with_depth(after.get(name, empty))
        row = shown.get(name)
        if row is None:
            if any(b.values()) or any(a.values()):
                out.append(f"{name}: not shown, truth {a}")
            continue
        counting = (row.get("counting") if isinstance(row, Mapping) else getattr(row, "counting", None)) or ()
        for field in (*FIELDS, "depth"):
            value = row.get(field) if isinstance(row, Mapping) else getattr(row, field, None)
            if value is None and field in counting:
                continue
            if not within(value, b[field], a[field]):
                out.append(f"{name}.{field}: shown {value}, truth {b[field]}..{a[field]}")
    return out


def verdicts(shown: Mapping[str, Any], truth: Truth) -> dict[str, int]:
    """How many figures of the truth are shown exactly, within TOLERANCE (flagged) or absent
    (counting): the per-library table of the closing note."""
    out = {"exact": 0, "within 5 %": 0, "absent": 0, "wrong": 0}
    for name, counts in truth.items():
        t = with_depth(counts)
        row = shown.get(name)
        for field, value in t.items():
            got = None if row is None else (row.get(field) if isinstance(row, Mapping) else getattr(row, field, None))
            if got is None:
                out["absent"] += 1
            elif got == value:
                out["exact"] += 1
            elif within(got, value, value):
                out["within 5 %"] += 1
            else:
                out["wrong"] += 1
    return out


def error_table(shown: Mapping[str, Any], truth: Truth) -> list[tuple[str, str, int, int | None, float | None]]:
    """(queue, field, truth, shown, relative error) for every figure past EXACT_UP_TO: the
    per-library error table of the closing note."""
    rows = []
    for name, counts in sorted(truth.items()):
        t = with_depth(counts)
        row = shown.get(name)
        for field, value in t.items():
            if value <= EXACT_UP_TO:
                continue
            got = None if row is None else (row.get(field) if isinstance(row, Mapping) else getattr(row, field, None))
            rows.append((name, field, value, got, None if got is None else (got - value) / value))
    return rows


def shown_rows(snapshot: Any, source: str, schema: str) -> dict[str, Any]:
    """The rows queuetop shows for one install of a library (its source, in one schema), by the
    library's own queue name: a queue of an install outside the library's default schema is
    shown as `<schema>.<queue>`, with `schema` set on its row."""
    out: dict[str, Any] = {}
    for q in snapshot.queues:
        if q.source == source and q.schema == schema:
            name = q.name[len(schema) + 1:] if q.name.startswith(f"{schema}.") else q.name
            out[name] = q
    return out


TURN_PAGES = 64  # pages of each table the tally reads a cycle, in counted_in_turns


def counted_in_turns(target: Any) -> Any:
    """The snapshot of the cycle after one whole pass of the tally made TURN_PAGES pages of each
    table at a time (probes/sources/tally.py), as a dashboard's probes count a table larger than
    a cycle's budget: every figure is then the tally's counts kept per chunk (an estimate, with the
    age of its count) or a state read exactly now. With nothing moving, the contract still holds."""
    from probes.postgres import open_probe_connection
    from probes.sampler import probes_for, run_cycle
    from probes.sources.tally import cycle_budget

    probes = probes_for(target)
    with open_probe_connection(target) as conn:
        widest = conn.execute("SELECT coalesce(max(pg_relation_size(oid)), 0) / current_setting('block_size')::bigint AS pages"
                              " FROM pg_class WHERE relkind IN ('r', 'm')").fetchone()
        cycles = int(widest["pages"]) // TURN_PAGES + 2
        with cycle_budget(TURN_PAGES):
            for _ in range(cycles):
                snapshot = run_cycle(target, probes=probes, conn=conn)
    assert any(q.estimated for q in snapshot.queues), "nothing was counted in turns: the tables fit a cycle's budget"
    return snapshot
