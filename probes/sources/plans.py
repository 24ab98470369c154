"""What the planner says of a job table's bounded reads (EXPLAIN), kept while the table's
statistics stay as they were, and the rules by which such a read is too dear to make."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

ESTIMATES_MAX_AGE_S = 60.0
READ_COST_PER_ROW = 5.0  # a state is read when the planner expects it to cost at most this a row


class Estimates:
    """The planner's answers (EXPLAIN) about one relation, kept while what they depend on - its
    statistics and its indexes (the `stats_key` of relation_facts) - stays as it was, and for at most
    ESTIMATES_MAX_AGE_S (between two ANALYZEs the planner also scales by the table's current
    size; a view's statistics are its tables', which it has no key for).
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

    def remember(self, key: tuple[str, str], compute: Callable[[], Any]) -> Any:
        """What `compute` returned for `key` under the current stats key, computed once."""
        self.refresh(self.key)  # expired by age
        if key not in self.plans:
            self.plans[key] = compute()
        return self.plans[key]


def too_dear(plan: dict[str, Any], cap: int) -> bool:
    """Whether a bounded read (state_plan) of a large table would cost more than reading `cap`
    rows through an index should: it scans the table, or the planner expects more than
    READ_COST_PER_ROW cost units a row (a row fetched through an index costs about one; finding a
    rare state's rows among another state's, through an index that holds both, costs one per row
    of the other state, so many times more), or a scan of it filters rows out after fetching them
    (an index that holds other states too: pg-boss's `(name, start_after) WHERE state < 'active'`
    read for its few `retry` jobs meets every `created` one first, whatever the planner expects)."""
    return _scans_table(_plan_root(plan)) or _filters_rows(_plan_root(plan)) or _plan_cost(plan) > READ_COST_PER_ROW * cap


def _filters_rows(node: dict[str, Any]) -> bool:
    """Whether a scan anywhere in a plan drops rows it fetched (a `Filter` on a scan node)."""
    stack = [node]
    while stack:
        node = stack.pop()
        if "Scan" in str(node.get("Node Type", "")) and node.get("Filter"):
            return True
        stack.extend(node.get("Plans", []))
    return False


def _plan_root(plan: dict[str, Any]) -> dict[str, Any]:
    """The top node of an EXPLAIN (FORMAT JSON) result row."""
    document = plan["QUERY PLAN"]
    if isinstance(document, str):
        document = json.loads(document)
    return dict(document[0]["Plan"])


def _plan_cost(plan: dict[str, Any]) -> float:
    return float(_plan_root(plan)["Total Cost"])


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
