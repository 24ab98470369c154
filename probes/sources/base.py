"""The queue-source seam: what every kind of queue (the engine's, a declared table, a library's)
must provide to the queues probe and to the dashboard's Enter.

A source is one file in this package (plus its SQL in `probes/sql/postgresql/sources/`):

- `detect(conn)`: is it installed in this database (and which schema version)? None when not.
- `sample(conn, detection)`: one `QueueFigures` per real queue, at a cost that does not grow
  with the depth of any queue.
- `details(conn, name)`: the head rows and the failed/dead rows, with the library's own error
  text, for Enter.

Sources are read-only like every probe: they run on the probe session (read-only, autocommit,
statement and lock timeouts).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from dbcore.database import DictRow, one
from dbcore.sqlfiles import Queries

if TYPE_CHECKING:
    from ..config import Config
    from ..postgres import ProbeConnection


SERVER_SQL = Queries("probes", "server.sql")


_KNOWN_TABLES: ContextVar[dict[str, bool] | None] = ContextVar("known_tables", default=None)

# A relation's name as to_regclass() reads it: at most three dot-separated parts, each an
# unquoted identifier or a double-quoted one ("" stands for a quote). Before PostgreSQL 16,
# to_regclass raises on any other text (16 returns NULL), and one such name in the statement that
# checks every source's tables would fail them all: a name that is not one is simply not there,
# and is never sent.
_IDENTIFIER = r'(?:[A-Za-z_\u0080-\U0010ffff][A-Za-z0-9_$\u0080-\U0010ffff]*|"(?:[^"\x00]|"")+")'
_RELATION_NAME = re.compile(rf"\s*{_IDENTIFIER}\s*(?:\.\s*{_IDENTIFIER}\s*){{0,2}}")


def is_relation_name(name: str) -> bool:
    return _RELATION_NAME.fullmatch(name) is not None


def has_table(conn: ProbeConnection, name: str) -> bool:
    """Whether a relation of that (schema-qualified) name exists: the usual detect(). Within
    `tables_checked_together`, answered from its one statement where it can be."""
    known = _KNOWN_TABLES.get()
    if known is not None and name in known:
        return known[name]
    present = is_relation_name(name) and bool(one(conn.execute(SERVER_SQL["table_present"], {"table": name}))["present"])
    if known is not None:
        known[name] = present
    return present


@contextmanager
def tables_checked_together(conn: ProbeConnection, names: Iterable[str]) -> Iterator[dict[str, bool]]:
    """Check `names` (what the sources asked the last time) in one statement, and answer
    has_table from it meanwhile; what is asked besides is checked on its own and added to the
    dict yielded (the names to check next time)."""
    names = sorted(names)
    valid = [name for name in names if is_relation_name(name)]
    known = dict.fromkeys(names, False)
    if valid:
        known.update({r["name"]: bool(r["present"]) for r in conn.execute(SERVER_SQL["tables_present"], {"tables": valid})})
    token = _KNOWN_TABLES.set(known)
    try:
        yield known
    finally:
        _KNOWN_TABLES.reset(token)


@dataclass(frozen=True, slots=True)
class Detection:
    """A source found in the database."""

    version: str | None = None  # the library's schema version, where it records one
    schema: str | None = None  # where its tables are


@dataclass(slots=True)
class QueueFigures:
    """What a source measured for one queue; the probe adds rates and table statistics."""

    name: str
    table: str  # the relation the queue lives in, quoted as SQL (for the reader, and details)
    relid: int | None = None  # its OID, for pg_stat_user_tables (None: a view, or shared stats)
    depth: int | None = None
    ready: int | None = None
    in_flight: int | None = None
    delayed: int | None = None
    dead: int | None = None
    oldest_ready_age_s: float | None = None
    depth_is_estimate: bool = False
    # How the rates come from the table's cumulative counters (pg_stat_user_tables):
    # "deletes"  - one queue per table, a finished message is deleted: in = inserts, out = deletes;
    # "arrivals" - one queue per table, finished rows may stay: in = inserts, out = in - growth of
    #              depth (needs exact depths);
    # None       - the table is shared with other queues: its counters are not this queue's.
    rates_from: str | None = None
    error: str | None = None
    notes: list[str] = field(default_factory=list)  # what the operator should know (RLS, indexes)


@dataclass(frozen=True, slots=True)
class QueueDetails:
    """Enter on a queue: its head (oldest first) and its failed or dead rows (newest first)."""

    head: list[DictRow] = field(default_factory=list)
    dead: list[DictRow] = field(default_factory=list)


class QueueSource:
    """Base of every source. Subclasses set `name` (the snapshot's `queues[].source`) and
    `kind` (`queues[].kind`), and implement the three methods."""

    name: ClassVar[str]
    kind: ClassVar[str] = "table"
    order: ClassVar[int] = 50  # where its rows come in the snapshot (lower first)
    options: ClassVar[tuple[str, ...]] = ()  # what `[sources.<name>]` may set (e.g. schema)
    default_schema: ClassVar[str] = "public"  # where the library keeps its tables unless told otherwise
    # The databases whose dialect has this source's SQL (probes/sql/<dialect>/sources/): the
    # PostgreSQL libraries are PostgreSQL's only; the engine's own sources are in both.
    dialects: ClassVar[tuple[str, ...]] = ("postgresql",)

    def __init__(self, config: Config) -> None:
        self.config = config

    def detect(self, conn: ProbeConnection) -> Detection | None:
        raise NotImplementedError

    def sample(self, conn: ProbeConnection, detection: Detection) -> list[QueueFigures]:
        raise NotImplementedError

    def details(self, conn: ProbeConnection, name: str) -> QueueDetails:
        raise NotImplementedError

    @property
    def schema(self) -> str:
        """The library's schema: `[sources.<name>] schema = ...`, else its default."""
        return str(self.option("schema", self.default_schema))

    def option(self, key: str, default: Any = None) -> Any:
        """This source's own option from the config (`[sources.<name>]`)."""
        return self.config.source_options.get(self.name, {}).get(key, default)
