"""The queue-source seam: what every kind of queue (the engine's, a declared table, a library's)
must provide to the queues probe and to the dashboard's Enter.

A source is one file in this package (plus its SQL in `probes/sql/postgresql/sources/`):

- `detect(conn)`: is it installed in this database (and which schema version)? None when not.
  A library declares instead the `signature` of its tables and functions: it is then found in
  any schema the role may use, with no config, by one catalog statement for all libraries
  together (`find_installs`), each install (schema) a source instance of its own, and
  `detected(conn, install)` says which version it is.
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

from psycopg import sql

from dbcore.database import DictRow, one
from dbcore.sqlfiles import Queries

if TYPE_CHECKING:
    from ..configmodel import Config
    from ..session import ProbeConnection


SERVER_SQL = Queries("probes", "server.sql")
DETECT_SQL = Queries("probes", "sources/detect.sql")


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


class Identifier(sql.Identifier):
    """sql.Identifier for a name from the catalog that may hold a `%` (a schema named by whoever
    installed a library): psycopg reads every `%` of a statement run with parameters as a
    placeholder, the quoted identifier's too, so such a part is written as a Unicode-escape
    identifier (`U&"sch\\0025ema"`), the same name with no `%` in the statement's text, right with
    or without parameters. Any other part is written as sql.Identifier writes it. Alone, as a
    string, it is the usual quoted name: what a reader sees, and what to_regclass reads."""

    def as_string(self, context: Any = None) -> str:
        return sql.Identifier(*self._obj).as_string(context)

    def as_bytes(self, context: Any = None) -> bytes:
        parts = []
        for name in self._obj:
            quoted = sql.Identifier(name).as_bytes(context)
            if b"%" in quoted:
                quoted = b"U&" + quoted.replace(b"\\", b"\\\\").replace(b"%", b"\\0025")
            parts.append(quoted)
        return b".".join(parts)


@contextmanager
def tables_known(known: dict[str, bool]) -> Iterator[dict[str, bool]]:
    """Answer has_table from `known` meanwhile (what one statement found); what is asked besides
    is checked on its own and added to `known` (the names to check next time)."""
    token = _KNOWN_TABLES.set(known)
    try:
        yield known
    finally:
        _KNOWN_TABLES.reset(token)


@dataclass(frozen=True, slots=True)
class Install:
    """A library found by its signature: the schema it is in, which of its signature's extras are
    there too, and the extensions whose objects live in that schema (name -> version)."""

    source: str
    schema: str
    extras: frozenset[str] = frozenset()
    extensions: tuple[tuple[str, str], ...] = ()
    usable: bool = True  # the role has USAGE on the schema: else nothing of it can be read

    @property
    def out_of_reach(self) -> str:
        """The note for an install in a schema the role may not use: its queues are unknown."""
        schema = sql.Identifier(self.schema).as_string(None)
        return (f"{self.source} in schema {self.schema}: its queues are unknown: this role has no USAGE privilege on "
                f"schema {self.schema} (GRANT USAGE ON SCHEMA {schema} and SELECT on its tables to it)")

    def extension_version(self, name: str) -> str | None:
        return dict(self.extensions).get(name)


def _signature_parameters(classes: Iterable[type[QueueSource]]) -> dict[str, list[Any]]:
    """The libraries' signatures as detect.sql's parallel arrays: one row per alternative of each
    part (`rel`, `rel.column`, `function()`, alternatives split on `|`), the part's number shared."""
    columns: dict[str, list[Any]] = {key: [] for key in
                                     ("sources", "parts", "part_ids", "required", "relations", "columns", "functions")}
    part_id = 0
    for cls in classes:
        for required, parts in ((True, cls.signature), (False, cls.signature_extras)):
            for part in parts:
                part_id += 1
                for option in part.split("|"):
                    relation: str | None = None
                    column: str | None = None
                    function: str | None = None
                    if option.endswith("()"):
                        function = option[:-2]
                    else:
                        relation, _, rest = option.partition(".")
                        column = rest or None
                    for key, value in (("sources", cls.name), ("parts", part), ("part_ids", part_id), ("required", required),
                                       ("relations", relation), ("columns", column), ("functions", function)):
                        columns[key].append(value)
    return columns


def find_installs(conn: ProbeConnection, classes: Iterable[type[QueueSource]],
                  tables: Iterable[str] = ()) -> tuple[list[Install], dict[str, bool]]:
    """Every install of the libraries among `classes` (the sources with a signature) in any schema
    (one the role may not use too, marked not `usable`), and whether each relation named in
    `tables` is there (has_table's question), in one catalog statement. Without a library to look
    for (SQL Server's sources), the tables alone, in one statement (none when there are none).
    Installs come in `classes`' order, then by schema name."""
    libraries = [cls for cls in classes if cls.signature]
    names = sorted(set(tables))
    valid = [name for name in names if is_relation_name(name)]
    known = dict.fromkeys(names, False)
    installs: list[Install] = []
    if libraries:
        rows = conn.execute(DETECT_SQL["installs"], {**_signature_parameters(libraries), "tables": valid}).fetchall()
        for row in rows:
            if row["source"] is None:
                known[row["relation"]] = bool(row["present"])
            else:
                installs.append(Install(source=row["source"], schema=row["schema"], extras=frozenset(row["extras"] or ()),
                                        extensions=tuple(sorted((row["extensions"] or {}).items())),
                                        usable=bool(row["usable"])))
        rank = {cls.name: index for index, cls in enumerate(libraries)}
        installs.sort(key=lambda i: (rank[i.source], i.schema))
    elif valid:
        known.update({r["name"]: bool(r["present"]) for r in conn.execute(SERVER_SQL["tables_present"], {"tables": valid})})
    return installs, known


@dataclass(frozen=True, slots=True)
class Detection:
    """A source found in the database."""

    version: str | None = None  # the library's schema version, where it records one
    schema: str | None = None  # where its tables are


@dataclass(frozen=True)
class Flow:
    """A queue's traffic between two reads, `span_s` seconds apart (monotonic): jobs that
    arrived, left (done, failed for good, cancelled: out of the queue) and failed for good.
    None: not known. `estimated`: the counts that are a share of jobs whose queue is not known
    (Graphile Worker's jobs that came and went between two reads)."""

    enqueued: int | None
    dequeued: int | None
    failed: int | None
    span_s: float
    estimated: tuple[str, ...] = ()


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
    # Due but not claimable now (a lock, a singleton/stately policy, a locked named queue): a
    # part of `delayed`, never of `ready`. None: the source has no such thing.
    blocked: int | None = None
    oldest_ready_age_s: float | None = None
    depth_is_estimate: bool = False
    # The figures that are estimates (past the exact-count cap), each with the age in seconds of
    # the exact count it comes from (None: never counted, extrapolated).
    estimated: dict[str, float | None] = field(default_factory=dict)
    # The figures not known yet, being counted (None): a table larger than the first cycle's
    # reading whose sample bounds them no better than 5 % (tally.py) until the tally has read it.
    counting: list[str] = field(default_factory=list)
    schema: str | None = None  # the schema of the library's install this queue belongs to
    # How the rates come from the table's cumulative counters (pg_stat_user_tables):
    # "deletes"  - one queue per table, a finished message is deleted: in = inserts, out = deletes;
    # "arrivals" - one queue per table, finished rows may stay: in = inserts, out = in - growth of
    #              depth (needs exact depths);
    # None       - the table is shared with other queues: its counters are not this queue's.
    rates_from: str | None = None
    # The queue's traffic since the source's last read, from the library's own records
    # (flows.py): the rates come from it, not from the table's statistics.
    flow: Flow | None = None
    error: str | None = None
    notes: list[str] = field(default_factory=list)  # what the operator should know (RLS, indexes)


@dataclass(frozen=True, slots=True)
class QueueDetails:
    """Enter on a queue: its head (oldest first) and its failed or dead rows (newest first)."""

    head: list[DictRow] = field(default_factory=list)
    dead: list[DictRow] = field(default_factory=list)
    # Due jobs the library's fetch skips now, each with the job (or policy) that holds it back.
    blocked: list[DictRow] = field(default_factory=list)


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
    # A library's signature: what must all be found in one schema for an install of it to be
    # there, each part a relation (`procrastinate_jobs`), a relation's column (`job.start_after`)
    # or a function (`add_job()`), a part with alternatives any of which will do
    # (`job.start_after|job.startafter`). Names as generic as `job` need columns beside them that
    # only the library has. Empty: not found by signature (the source implements detect()).
    signature: ClassVar[tuple[str, ...]] = ()
    # Parts of the same kind never required, reported in `Install.extras` when there.
    signature_extras: ClassVar[tuple[str, ...]] = ()

    def __init__(self, config: Config, schema: str | None = None) -> None:
        """`schema`: the install this instance reads (a library found by its signature), None for
        the configured or default one."""
        self.config = config
        self._schema = schema

    def detect(self, conn: ProbeConnection) -> Detection | None:
        """Whether this source is there. A library (one with a signature): whether its install in
        `self.schema` is, by the one catalog statement (the probe cycle asks it for every source at
        once and calls `detected` instead)."""
        if not self.signature:
            raise NotImplementedError
        installs, _ = find_installs(conn, [type(self)])
        install = next((i for i in installs if i.schema == self.schema and i.usable), None)
        return self.detected(conn, install) if install is not None else None

    def detected(self, conn: ProbeConnection, install: Install) -> Detection | None:
        """A library's install, found by its signature: its Detection (the version, where the
        library records one). None: not one after all."""
        return Detection(schema=install.schema)

    @classmethod
    def home_schema_in(cls, config: Config) -> str:
        """Where the library is looked for first, and the one install whose queues keep their bare
        names: `[sources.<name>] schema = ...`, else its default schema."""
        return str(config.source_options.get(cls.name, {}).get("schema", cls.default_schema))

    @classmethod
    def looks_in_every_schema(cls, config: Config) -> bool:
        """A library is looked for in every schema, unless `[sources.<name>] schema = ...` names
        the only one to look in."""
        return "schema" not in config.source_options.get(cls.name, {})

    @property
    def home_schema(self) -> str:
        return self.home_schema_in(self.config)

    @property
    def queue_prefix(self) -> str:
        """What this install's queue names start with: nothing in the home schema, `<schema>.`
        in any other (so that two installs' queues of one name stay two rows, two series)."""
        return "" if not self.signature or self.schema == self.home_schema else f"{self.schema}."

    @property
    def label(self) -> str:
        """The source as an error message names it: with its schema when not the home one."""
        return self.name if not self.queue_prefix else f"{self.name} in schema {self.schema}"

    def qualified(self, figures: list[QueueFigures]) -> list[QueueFigures]:
        """A library install's figures as the snapshot shows them: each with the install's schema,
        named `<schema>.<queue>` outside the home schema."""
        if self.signature:
            prefix = self.queue_prefix
            for f in figures:
                f.schema = self.schema
                f.name = prefix + f.name
        return figures

    def sample(self, conn: ProbeConnection, detection: Detection) -> list[QueueFigures]:
        raise NotImplementedError

    def moved(self, blocks: set[int]) -> None:
        """The pages of its job table that jobs moved to since the last cycle (flows.py, from
        the library's own records): a source whose counts are kept per chunk (tally.py) reads
        those chunks first in the next cycle."""

    def details(self, conn: ProbeConnection, name: str) -> QueueDetails:
        raise NotImplementedError

    @property
    def schema(self) -> str:
        """The library's schema: this instance's install, else `[sources.<name>] schema = ...`,
        else its default."""
        return self._schema if self._schema is not None else self.home_schema

    def option(self, key: str, default: Any = None) -> Any:
        """This source's own option from the config (`[sources.<name>]`)."""
        return self.config.source_options.get(self.name, {}).get(key, default)
