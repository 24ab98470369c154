"""What the job console reads and does, in any library's terms: a job, a filter, a page of jobs,
the outcome of an action."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from dbcore.errors import UsageError

# queuetop's states, as the snapshot counts them (PRODUCT.md): ready = claimable now; delayed =
# scheduled for later or backing off; blocked = due but not claimable now (a part of delayed);
# in_flight = being worked; dead = failed for good / archived. `done` (finished: succeeded,
# cancelled) is in none of the snapshot's figures, but the console can list it where the library
# keeps finished jobs.
STATES = ("ready", "delayed", "blocked", "in_flight", "dead", "done")
ACTIONS = ("retry", "run-now", "cancel", "delete")
# Rows one page shows at most; rows a search that no index leads reads at most per page.
MAX_PAGE = 1000
SCAN_ROWS = 20_000


class ActionRefused(UsageError):
    """An action the library does not have (or not on this job's state): exit 2, with why."""


@dataclass(frozen=True, slots=True)
class JobFilter:
    """Which jobs: by queuetop state, by kind (task name, exact), by arguments (`match`: JSON the
    arguments contain; `text`: a substring of their JSON text, case-insensitive), or by ids."""

    state: str | None = None
    kind: str | None = None
    match: Any = None
    text: str | None = None
    ids: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.state is not None and self.state not in STATES:
            raise UsageError(f"unknown state {self.state!r}: one of {', '.join(STATES)}")

    @property
    def match_json(self) -> str | None:
        return None if self.match is None else json.dumps(self.match)

    @property
    def text_pattern(self) -> str | None:
        """`text` as an ILIKE pattern (its own % and _ escaped)."""
        if not self.text:
            return None
        escaped = self.text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        return f"%{escaped}%"

    @property
    def searches(self) -> bool:
        return self.match is not None or bool(self.text)

    def describe(self) -> str:
        parts = [f"state={self.state}" if self.state else "", f"kind={self.kind}" if self.kind else "",
                 f"match={self.match_json}" if self.match is not None else "", f"text={self.text!r}" if self.text else "",
                 f"ids={','.join(self.ids)}" if self.ids else ""]
        return " ".join(p for p in parts if p) or "all"

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "kind": self.kind, "match": self.match, "text": self.text, "ids": list(self.ids)}


@dataclass(frozen=True, slots=True)
class Job:
    """One job as the console shows it. `state` is queuetop's, `status` the library's own word
    (River's `retryable`, pg-boss's `retry`, ...). `args` is the job's arguments (payload) as the
    library keeps them; `errors` the errors it kept (oldest first); `held_by` the worker or session
    holding it where the library says. `extra`: the library's other columns (shown by `show`)."""

    id: str
    queue: str
    state: str
    status: str
    kind: str | None = None
    attempts: int | None = None
    max_attempts: int | None = None
    created_at: datetime | None = None
    scheduled_at: datetime | None = None
    age_s: float | None = None
    last_error: str | None = None
    args: Any = None
    errors: list[Any] = field(default_factory=list)
    held_by: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self, *, whole: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id, "queue": self.queue, "state": self.state, "status": self.status, "kind": self.kind,
            "attempts": self.attempts, "max_attempts": self.max_attempts,
            "created_at": _iso(self.created_at), "scheduled_at": _iso(self.scheduled_at), "age_s": self.age_s,
            "last_error": self.last_error, "args": _jsonable(self.args), "held_by": self.held_by,
        }
        if whole:
            out["errors"] = _jsonable(self.errors)
            out["extra"] = _jsonable(self.extra)
        return out


@dataclass(frozen=True, slots=True)
class Page:
    """A page of jobs in keyset order, and where the next one starts (`after`; None: the last
    page). `note`: what the page did not look at (a search no index leads, bounded in rows)."""

    jobs: list[Job]
    after: str | None
    note: str | None = None


@dataclass(slots=True)
class Outcome:
    """What an action did: jobs that matched, that it changed, that it skipped (changed state since
    they were listed, or held by a worker where the library's own action leaves those alone)."""

    queue: str
    source: str
    action: str
    matched: int = 0
    changed: int = 0
    skipped: int = 0
    ids: list[str] = field(default_factory=list)  # the jobs changed
    stopped_after: str | None = None  # a bulk action stopped before its end: resume after this id

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"queue": self.queue, "source": self.source, "action": self.action,
                               "matched": self.matched, "changed": self.changed, "skipped": self.skipped}
        if self.stopped_after is not None:
            out["stopped_after"] = self.stopped_after
        return out


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _jsonable(value: Any) -> Any:
    """`value` as JSON can carry it, nested values too: a time as ISO-8601, anything else unknown as text."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool, type(None))):
        return value
    return str(value)
