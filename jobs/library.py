"""The seam every library's job console implements (one module per library in this package).

A `JobLibrary` reads a queue's jobs (`page`, `job`, `count`) on a probe session (read-only, in a
probe transaction the caller opens), and acts on them (`act`, `pause`) in a short transaction the
caller opens on a write session (bulk.py: lock timeout, statement timeout, one batch of ids).
Every action is the library's own: its SQL function where it has one, else the statements its
client API runs, with the notifications that wake its workers; `mirrors` names which, for
docs/jobs.md and the confirmation; an action the library does not have is in `lacks`, with why.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from dbcore.database import DictRow

from .model import ACTIONS, ActionRefused, Job, JobFilter, Page

# Which jobs each action is for, in queuetop's states, unless a library says otherwise.
ACTS_ON: dict[str, tuple[str, ...]] = {
    "retry": ("dead",),
    "run-now": ("delayed", "blocked"),
    "cancel": ("ready", "delayed", "blocked"),
    "delete": ("ready", "delayed", "blocked", "dead", "done"),
}


class JobLibrary:
    """One library's jobs. `source` is the snapshot's `queues[].source`; `schema` the install."""

    source: ClassVar[str]
    # action -> what it runs, in the library's words (its function, or its client's method and the
    # statement that method runs); an action missing here is in `lacks`.
    mirrors: ClassVar[dict[str, str]] = {}
    # action -> why the library does not have it (refused, exit 2).
    lacks: ClassVar[dict[str, str]] = {}
    # action -> the queuetop states it applies to (ACTS_ON, unless the library differs).
    acts_on: ClassVar[dict[str, tuple[str, ...]]] = {}
    # Pausing a queue: what it runs, or (None) why the library has no such thing (`pause_lacks`).
    pause_mirrors: ClassVar[str | None] = None
    pause_lacks: ClassVar[str] = "the library has no notion of a paused queue"
    # The schema of an install the snapshot names none for (a source that is not found by signature).
    default_schema: ClassVar[str] = "public"
    # What a search by arguments is led by (an index), or None: bounded in rows (SCAN_ROWS a page).
    args_index: ClassVar[str | None] = None

    def __init__(self, schema: str, version: str | None = None, *, options: Mapping[str, Any] | None = None) -> None:
        """`options`: the source's own options from the config (`[sources.<name>]`, as the probe reads them)."""
        self.schema = schema
        self.version = version
        self.options = dict(options or {})

    # -- what the console may do ---------------------------------------------------------------

    @classmethod
    def states_for(cls, action: str) -> tuple[str, ...]:
        return cls.acts_on.get(action, ACTS_ON[action])

    @classmethod
    def refuse(cls, action: str) -> None:
        """Raise ActionRefused when the library does not have `action` (with why)."""
        if action not in ACTIONS:
            raise ActionRefused(f"unknown action {action!r}: one of {', '.join(ACTIONS)}")
        if action not in cls.mirrors:
            why = cls.lacks.get(action, "the library has no such action")
            raise ActionRefused(f"{cls.source} has no {action}: {why}")

    @classmethod
    def refuse_pause(cls) -> None:
        if cls.pause_mirrors is None:
            raise ActionRefused(f"{cls.source} cannot pause a queue: {cls.pause_lacks}")

    # -- reads (a probe session, in a probe transaction) ----------------------------------------

    def page(self, conn: Any, queue: str, flt: JobFilter, *, after: str | None = None, limit: int = 50,
             newest_first: bool = False) -> Page:
        """Jobs of `queue` that `flt` matches, in id order (oldest first, or newest), after the
        keyset position `after` (a job id): at most `limit`. A search no index leads reads at most
        SCAN_ROWS rows for the page and says so in the page's note (its `after` goes on from there)."""
        raise NotImplementedError

    def job(self, conn: Any, queue: str, job_id: str) -> Job | None:
        """One job, whole (its arguments, every error the library kept, who holds it)."""
        raise NotImplementedError

    # -- writes (a write session, in the caller's short transaction) ----------------------------

    def act(self, conn: Any, queue: str, action: str, ids: list[str], expect: str | None) -> list[str]:
        """Do `action` to the jobs `ids` of `queue`, each only if it is still in a state the action
        applies to (and, `expect` given, still in that queuetop state: compare-and-set), and not
        held by a worker unless the library's own action does that. The ids changed."""
        raise NotImplementedError

    def pause(self, conn: Any, queue: str, paused: bool) -> None:
        """Pause (or resume) the queue, as the library does it."""
        raise NotImplementedError


# The keyset bounds of a bigint id (PostgreSQL's), each outside every id.
LOWEST, HIGHEST = -(2**63), 2**63 - 1


def as_text_id(row: DictRow, key: str = "id") -> str:
    return str(row[key])


def bigint_id(value: str | None) -> int | None:
    """A job id as a bigint id column holds it, or None: no job has that id (not a whole number,
    or outside a bigint's range, which the server would refuse rather than find nothing)."""
    text = str(value).strip() if value is not None else ""
    if not text.isascii() or not text.lstrip("-").isdigit() or text.count("-") > 1:
        return None
    number = int(text)
    return number if LOWEST < number < HIGHEST else None


def int_ids(ids: list[str] | tuple[str, ...]) -> list[int]:
    """The ids that can be a bigint id column's; any other matches no job."""
    return [number for number in map(bigint_id, ids) if number is not None]


def merge(branches: list[tuple[list[dict[str, Any]], int | None]], limit: int, newest_first: bool,
          key: str) -> tuple[list[dict[str, Any]], int | None, int | None]:
    """Rows of several keyset-ordered branches, each (its rows: at most limit + 1 of them; its
    scan edge, when it read only part of its relation): the first `limit` rows in keyset order,
    where the next page starts (None: nothing after), and the edge the page stopped at when a
    bounded branch cut it short (None when not)."""
    edges = [edge for _, edge in branches if edge is not None]
    cut = (max(edges) if newest_first else min(edges)) if edges else None
    rows = [r for found, _ in branches for r in found
            if cut is None or (r[key] >= cut if newest_first else r[key] <= cut)]
    rows.sort(key=lambda r: r[key], reverse=newest_first)
    if len(rows) > limit:
        return rows[:limit], rows[limit - 1][key], None
    return rows, cut, cut
