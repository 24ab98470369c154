"""Named SQL queries kept in `.sql` files per dialect, in the manner of Procrastinate.

A file holds sections, each opened by a line `-- name: <query_name>`; the text up to the next
such line is the query. Queries use psycopg's named placeholders `%(name)s`; identifiers that
vary (a queue's table) are written `{name}` and filled with `psycopg.sql.Identifier` only.

Code reaches a file's queries through one module-level `Queries` object per file, subscripted
with a literal name (`ENGINE_SQL["claim_one"]`), or through a function whose parameter is
annotated `QueryName` and is called with a literal. That is what lets `tests/test_sqlfiles.py`
find every use of every query, and no SQL is written in Python at all.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import TypeAlias

_SECTION = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
# psycopg's named placeholder, the one bind style of the `.sql` files.
PLACEHOLDER = re.compile(r"%\((\w+)\)s")
DEFAULT_DIALECT = "postgresql"

QueryName: TypeAlias = str
"""A section name of a `.sql` file. Annotate a parameter with it when the function forwards
the name to a `Queries` lookup, so that the SQL-file test follows the call."""


def parse_sections(text: str) -> dict[str, str]:
    """Split a SQL file into {name: query}. Text before the first marker is a file comment."""
    queries: dict[str, str] = {}
    matches = list(_SECTION.finditer(text))
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
        name = match.group(1)
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice")
        body = _strip_comment_lines(text[match.end() : end])
        if not body:
            raise ValueError(f"query {name!r} is empty")
        queries[name] = body
    return queries


def _strip_comment_lines(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if not line.lstrip().startswith("--")]
    return "\n".join(lines).strip()


class NamedQuery(str):
    """A query's text in the default dialect (PostgreSQL: what psycopg sends as it is), which
    also knows its file and name, so that a session of another dialect runs its own text of the
    same query (`in_dialect`). Built once per file, when the file is first read."""

    package: str
    filename: str
    name: str

    def __new__(cls, text: str, package: str, filename: str, name: str) -> NamedQuery:
        query = super().__new__(cls, text)
        query.package, query.filename, query.name = package, filename, name
        return query

    def in_dialect(self, dialect: str) -> str:
        """This query's text in `dialect`'s file of the same name."""
        if dialect == DEFAULT_DIALECT:
            return str(self)
        try:
            return load(self.package, dialect, self.filename)[self.name]
        except (KeyError, FileNotFoundError):
            raise KeyError(f"query {self.name!r} has no {dialect} text in {self.package}/sql/{dialect}/{self.filename}") from None


@cache
def load(package: str, dialect: str, filename: str) -> dict[str, NamedQuery]:
    """The named queries of `<package>/sql/<dialect>/<filename>` (as `NamedQuery` objects), each
    `{field}` that names one of the dialect's fragments filled with it (other fields stay)."""
    sections = parse_sections(read_script(package, dialect, filename))
    shared = fragments(dialect)
    return {name: NamedQuery(_FIELD.sub(lambda m: shared.get(m.group(1), m.group(0)), text), package, filename, name)
            for name, text in sections.items()}


_FIELD = re.compile(r"\{([a-z_]+)\}")


@cache
def fragments(dialect: str) -> dict[str, str]:
    """The expressions that several of a dialect's statements write, each once:
    `dbcore/sql/<dialect>/fragments.sql`, by name (none when the dialect has no such file)."""
    found = resources.files("dbcore").joinpath("sql", dialect, FRAGMENTS)
    return parse_sections(found.read_text(encoding="utf-8")) if found.is_file() else {}


FRAGMENTS = "fragments.sql"


def read_script(package: str, dialect: str, filename: str) -> str:
    """A whole SQL file, for scripts such as the schema that run as one unit."""
    return resources.files(package).joinpath("sql", dialect, filename).read_text(encoding="utf-8")


class Queries:
    """The named queries of one `.sql` file of a package (`Queries("probes", "locks.sql")`).
    The file is read on first use and kept; a lookup is a dictionary access."""

    __slots__ = ("dialect", "filename", "package")

    def __init__(self, package: str, filename: str, dialect: str = DEFAULT_DIALECT) -> None:
        self.package = package
        self.filename = filename
        self.dialect = dialect

    def __getitem__(self, name: QueryName) -> NamedQuery:
        try:
            return load(self.package, self.dialect, self.filename)[name]
        except KeyError:
            raise KeyError(f"no query {name!r} in {self}") from None

    def names(self) -> frozenset[str]:
        return frozenset(load(self.package, self.dialect, self.filename))

    def __str__(self) -> str:
        return f"{self.package}/sql/{self.dialect}/{self.filename}"

    def __repr__(self) -> str:
        return f"Queries({self.package!r}, {self.filename!r}, dialect={self.dialect!r})"


def number_placeholders(statement: str) -> tuple[str, tuple[str, ...]]:
    """`%(name)s` → `$n`, the same name always getting the same number."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    return PLACEHOLDER.sub(number, statement), tuple(names)
