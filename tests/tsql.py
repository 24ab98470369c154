"""Reading T-SQL text in the static tests of SQL Server's SQL (tests/test_mssql_sql.py, the
engine's; test_mssql_probes_sql.py, the probes'; test_mssql_sources_sql.py, the library sources'):
code without comments and literals, placeholders as T-SQL variables, top-level splitting, result
column names, and sqlfluff's `tsql` parse. No server is involved."""

from __future__ import annotations

import re
import string
from collections.abc import Iterable

from sqlfluff.core import FluffConfig, Linter

from dbcore import sqlfiles


def tsql_linter(texts: Iterable[str]) -> Linter:
    """sqlfluff's `tsql` dialect with the placeholder templater, for statements written with
    `%(name)s` placeholders. The templater puts a value in place of each %(name)s: the T-SQL
    variable @name, an expression wherever a parameter can stand (a bare name would be a keyword
    at times: %(key)s)."""
    params = set().union(*(sqlfiles.PLACEHOLDER.findall(text) for text in texts))
    config = FluffConfig(
        configs={
            "core": {"dialect": "tsql", "templater": "placeholder"},
            "templater": {"placeholder": {"param_style": "pyformat", **{name: f"@{name}" for name in params}}},
        },
        ignore_local_config=True,
    )
    return Linter(config=config)


def sql_fields(text: str) -> set[str]:
    """The `{field}`s of a query, as str.format and psycopg.sql.SQL.format read them."""
    return {field for _, field, _, _ in string.Formatter().parse(text) if field is not None}


def code_only(text: str) -> str:
    """`text` without comments, and with every string literal emptied (`N''`), so that what is
    looked for is T-SQL code, not prose or data."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        if text.startswith("--", i):
            i = text.find("\n", i)
            i = n if i < 0 else i
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
        elif text[i] == "'":
            j = i + 1
            while j < n and not (text[j] == "'" and text[j + 1 : j + 2] != "'"):
                j += 2 if text[j] == "'" else 1
            out.append("''")
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def bind_variables(text: str) -> str:
    """Placeholders as the T-SQL variables the parse binds them to."""
    return sqlfiles.PLACEHOLDER.sub(r"@\1", text)


def split_top_level(text: str) -> list[str]:
    items, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return [item.strip() for item in items if item.strip()]


def enclosing_parentheses(code: str, index: int) -> str:
    """The innermost parenthesised text around `index` (a CTE's or a subquery's body)."""
    depth = 0
    for start in range(index - 1, -1, -1):
        if code[start] == ")":
            depth += 1
        elif code[start] == "(":
            if depth == 0:
                break
            depth -= 1
    else:
        return ""
    depth = 0
    for end in range(start, len(code)):
        depth += {"(": 1, ")": -1}.get(code[end], 0)
        if depth == 0:
            return code[start + 1 : end]
    return ""


DML = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE|MERGE)\b", re.IGNORECASE)


def depth_zero(code: str, pattern: re.Pattern[str], start: int = 0) -> re.Match[str] | None:
    """The first match of `pattern` outside any parentheses, from `start`."""
    depth = 0
    for i in range(start, len(code)):
        if code[i] == "(":
            depth += 1
        elif code[i] == ")":
            depth -= 1
        elif depth == 0:
            match = pattern.match(code, i)
            # A keyword must start a word; a `;` may follow anything.
            if match and (i == 0 or not code[i].isalnum() or not (code[i - 1].isalnum() or code[i - 1] in "_@")):
                return match
    return None


def column_name(item: str) -> str | None:
    """An item's column name: its alias, or the column it names (`x::text` keeps x's name, as
    PostgreSQL does); None for an expression."""
    alias = re.search(r"\bAS\s+\[?(\w+)\]?\s*$", item, re.IGNORECASE)
    if alias:
        return alias.group(1).lower()
    bare = re.sub(r"(::\w+(\[\])?)+\s*$", "", item.strip())
    column = re.fullmatch(r"(?:\w+\.)?\[?(\w+)\]?", bare)
    return column.group(1).lower() if column and not column.group(1).isdigit() else None


class Parse:
    """What sqlfluff made of one query, section or batch: its problems and where it first gave up."""

    def __init__(self, linter: Linter, text: str) -> None:
        self.text = text
        parsed = linter.parse_string(text)
        self.problems = [violation.desc() for violation in parsed.violations]
        variant = parsed.root_variant()
        self.tree = variant.tree if variant is not None else None
        if self.tree is None:
            self.problems.append("no parse tree")
        starts = [seg.pos_marker.source_slice.start for seg in self.tree.recursive_crawl("unparsable")] if self.tree else []
        self.first_unparsable = min(starts) if starts else None

    @property
    def ok(self) -> bool:
        return not self.problems and self.first_unparsable is None

    @property
    def statements(self) -> int:
        return sum(1 for _ in self.tree.recursive_crawl("statement", recurse_into=False)) if self.tree else 0


def fails_only_at(parse: Parse, marker: str) -> str | None:
    """Why `parse` does not fail exactly at the statement holding `marker`, or None."""
    if parse.ok or parse.first_unparsable is None:
        return "it parses now: take it off the list"
    rest = parse.text[parse.first_unparsable :]
    if marker not in rest:
        return f"sqlfluff gives up after it: {parse.problems}"
    if ";" in code_only(rest[: rest.index(marker)]):
        return f"sqlfluff gives up before its statement: {rest[:80]!r}"
    return None
