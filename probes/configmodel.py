"""What the user's configuration holds, once read: the `Config`, its declared job tables
(`DeclaredQueue`) and named databases (`TargetSpec`), frozen.

Reading and checking the TOML file is probes/config.py's (which re-exports these); the queue
sources (probes/sources/) take a Config and stand on this module alone, so that the reader can
ask them which sources and options exist.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeAlias

from dbcore.errors import UsageError

# A character no value printed in one line may hold (an error quotes a DSN or a name from the file).
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
DEFAULT_INTERVAL_S = 2.0
DEFAULT_WINDOW = 1000
# The dashboard's flight recorder (probes/flight.py): the last minutes kept in memory, at most so
# many megabytes of compressed snapshots; R saves them. 0 turns it off.
DEFAULT_FLIGHT_MINUTES = 15.0
DEFAULT_FLIGHT_MB = 50.0
# A value a declared filter may compare a column with (bound as a parameter, never SQL text).
FilterValue: TypeAlias = str | int | bool


@dataclass(frozen=True, slots=True, kw_only=True)
class DeclaredQueue:
    """A job table and what its columns mean (see probes/sources/jobtable.py for the rules)."""

    name: str
    table: str  # a table, a partitioned parent or a view
    # The dequeue order (should lead an index): a column, or columns each optionally followed by
    # ASC or DESC and NULLS FIRST or NULLS LAST (("priority DESC", "id")).
    order_by: str | tuple[str, ...]
    age_column: str | None = None  # enqueue (or due) time: the oldest ready age
    queue_column: str | None = None  # a shared table: one queue per distinct value ...
    queue: str | None = None  # ... or only this one
    visible_at_column: str | None = None  # ahead: claimed until then (in flight), or sent with a delay
    not_before_column: str | None = None  # ahead: scheduled or backing off (delayed)
    state_column: str | None = None
    ready_states: tuple[str, ...] = ()  # empty: every state not listed below
    in_flight_states: tuple[str, ...] = ()
    delayed_states: tuple[str, ...] = ()  # e.g. scheduled, retryable: not claimable until something moves them
    done_states: tuple[str, ...] = ()  # finished rows kept in the table: in no count
    dead_states: tuple[str, ...] = ()
    in_flight_when_not_null: str | None = None  # e.g. locked_at
    attempts_column: str | None = None
    max_attempts_column: str | None = None  # dead when attempts reach it ...
    max_attempts: int | None = None  # ... or this
    dead_letter_table: str | None = None  # its rows (of this queue, if it has the queue column) are dead ...
    # ... those whose columns hold one of these values, every column (column, values) given.
    dead_letter_where: tuple[tuple[str, tuple[FilterValue, ...]], ...] = ()
    # When a row was created, and when it finished (done or dead): the queue's rates, per queue
    # even where queues share the table (counted by the tally, tally.py).
    created_column: str | None = None
    finished_column: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TargetSpec:
    """A database the config names: `dsn` as written, or read from `dsn_env` when used (so that a
    password need never be in the file), or a libpq `service`."""

    name: str
    dsn: str | None = None
    dsn_env: str | None = None
    service: str | None = None
    pgbouncer: str | None = None  # the DSN of its PgBouncer's admin console (the pooler probe)
    pooler: str = "auto"  # what stands between: auto | none | session | transaction (dbcore/pooler.py)

    def resolve_dsn(self) -> str:
        if self.dsn_env is not None:
            value = os.environ.get(self.dsn_env, "").strip()
            if not value:
                raise UsageError(f"target {self.name!r}: ${self.dsn_env} is not set")
            if CONTROL.search(value):
                raise UsageError(f"target {self.name!r}: ${self.dsn_env} must be one line, without control characters")
            return value
        if self.service is not None:
            return f"service={self.service}"
        assert self.dsn is not None
        return self.dsn


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    interval_s: float = DEFAULT_INTERVAL_S
    window: int = DEFAULT_WINDOW
    queues: tuple[DeclaredQueue, ...] = field(default_factory=tuple)
    keys: dict[str, str] = field(default_factory=dict)  # dashboard binding id -> key(s)
    disabled_sources: frozenset[str] = frozenset()  # [sources] disable = ["pgmq", ...]
    source_options: dict[str, dict[str, object]] = field(default_factory=dict)  # [sources.<name>]
    targets: tuple[TargetSpec, ...] = ()  # [[targets]]: the databases to watch when no --dsn is given
    flight_minutes: float = DEFAULT_FLIGHT_MINUTES  # [dashboard]: the flight recorder's bounds
    flight_mb: float = DEFAULT_FLIGHT_MB
    path: Path | None = None

    def sampling_interval(self, given: float | None) -> float:
        """Seconds between samples: `given` (--interval), else the config's; 0.1 to 3600."""
        interval = given or self.interval_s
        if not 0.1 <= interval <= 3600:
            raise UsageError("--interval must be between 0.1 and 3600 seconds")
        return interval
