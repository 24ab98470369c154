"""Named SQL queries kept in `.sql` files per dialect, in the manner of Procrastinate.

A file holds sections, each opened by a line `-- name: <query_name>`; the text up to the next
such line is the query. Queries use psycopg's named placeholders `%(name)s`; identifiers that
vary (a queue's table) are written `{name}` and filled with `psycopg.sql.Identifier` only.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_SECTION = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


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


@cache
def load(package: str, dialect: str, filename: str) -> dict[str, str]:
    """The named queries of `<package>/sql/<dialect>/<filename>`."""
    text = resources.files(package).joinpath("sql", dialect, filename).read_text(encoding="utf-8")
    return parse_sections(text)


def read_script(package: str, dialect: str, filename: str) -> str:
    """A whole SQL file, for scripts such as the schema that run as one unit."""
    return resources.files(package).joinpath("sql", dialect, filename).read_text(encoding="utf-8")
