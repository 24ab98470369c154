"""Which figures of a job table are shown and which are being counted, where the tally's counts take
in pages never read yet (a table larger than the first cycle's reading: tally.py's sample).

A figure is shown only where its error bound is within TOLERANCE of it and it is certainly past the
exact-count cap (below which a figure must be exact); otherwise it is absent, and listed in the
row's `counting`: never a scaled guess."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .tally import TOLERANCE, Key, TallyView, spread

if TYPE_CHECKING:
    from .base import QueueFigures

WAITING = ("ready", "in_flight", "delayed", "blocked")  # the classes a depth adds up


def bounds_of(view: TallyView, exact: set[str | None],
              classes: Callable[[str | None, tuple[float, ...]], dict[str, float]]) -> dict[Any, float] | None:
    """The error bound of each (group, class)'s count where the tally's include an estimate of
    pages never read yet (tally.spread; "depth" for the four waiting classes together), None where
    they include none. The states read exactly now (`exact`) carry none; `classes` says which class
    a state's rows are in by their flags (JobTable._classes)."""
    if view.unread is None:
        return None

    def classify(key: Key, flags: tuple[float, ...]) -> dict[Any, float]:
        group, state = key
        if state in exact:
            return {}
        by = classes(state, flags)
        out: dict[Any, float] = {(group, cls): n for cls, n in by.items()}
        out[(group, "depth")] = sum(by.get(cls, 0.0) for cls in WAITING)
        return out

    return spread(view.unread, classify)


def mark_counting(figures: QueueFigures, groups: list[str | None], bounds: dict[Any, float] | None, cap: int) -> None:
    """Each figure of a row (`groups`: the tally's groups it adds up) whose count takes in pages
    never read yet, bounded no better than TOLERANCE of it or not certainly past `cap`: absent, and
    said to be counting."""
    if bounds is None:
        return
    floor = bounds.get("*", float("inf"))  # a group no sample run met

    def bound(cls: str) -> float:
        return sum(bounds.get((group, cls), floor) for group in groups)

    wide = {name: bound(name) if name in figures.estimated else 0.0 for name in ("ready", "in_flight", "blocked", "dead")}
    wide["depth"] = bound("depth") if figures.depth_is_estimate else 0.0
    wide["delayed"] = (bound("delayed") if "delayed" in figures.estimated else 0.0) + wide["blocked"]
    for name, h in wide.items():
        value = getattr(figures, name)
        if h and value is not None and not (h <= TOLERANCE * value and value - h >= cap):
            setattr(figures, name, None)
            figures.counting.append(name)
