"""What differs between the PostgreSQL majors queuetop supports (12 through 18), in one table:
dbcore/sql/postgresql/versions.sql, a fragment per slot and major.

A statement that differs by version keeps a `{slot}` in its `.sql` file, named after what
differs; `versioned(query, version_num)` fills every slot with the fragment written for that
server (the newest it has) and leaves the statement's other `{fields}` (identifiers) for
`psycopg.sql.SQL.format`. Nothing else in the code branches on a server's version: a new
difference is two sections in versions.sql and a slot in the SQL. The server matrix
(`make test-matrix`) runs the statements on every major.
"""

from __future__ import annotations

import re
from functools import cache

from .errors import UsageError
from .sqlfiles import load

MINIMUM_VERSION_NUM = 120000
MINIMUM_MAJOR = 12
NEWEST_MAJOR = 18  # the newest major the server matrix runs


@cache
def fragments() -> dict[str, tuple[tuple[int, str], ...]]:
    """slot -> ((the first server_version_num that has it, fragment), ..., (0, the fallback)),
    newest first, from dbcore/sql/postgresql/versions.sql."""
    table: dict[str, list[tuple[int, str]]] = {}
    for name, text in load("dbcore", "postgresql", "versions.sql").items():
        slot, _, since = name.rpartition("_")
        table.setdefault(slot, []).append((int(since), str(text)))
    for slot, entries in table.items():
        entries.sort(reverse=True)
        if entries[-1][0] != 0:
            raise ValueError(f"versions.sql: {slot} has no fallback ({slot}_0)")
    return {slot: tuple(entries) for slot, entries in table.items()}


SLOT = re.compile(r"\{([a-z_]+)\}")


def fragment(slot: str, version_num: int) -> str:
    """The text of `slot` for a server of `version_num` (server_version_num: 120022, 180004)."""
    for since, text in fragments()[slot]:
        if version_num >= since:
            return text
    raise AssertionError(f"{slot}: no fragment for {version_num}")  # every slot ends with a 0 entry


@cache  # the probes ask for the same few statements every cycle
def versioned(query: str, version_num: int) -> str:
    """`query` with its version slots filled for a server of `version_num`; other `{fields}` stay."""
    return SLOT.sub(lambda m: fragment(m.group(1), version_num) if m.group(1) in fragments() else m.group(0), query)


class UnsupportedServer(UsageError):
    """A server older than the minimum: one line, exit 2, before anything is written."""


def check_supported(version_num: int) -> None:
    """Refuse a server older than the minimum, in one line (a usage error: exit 2)."""
    if 0 < version_num < MINIMUM_VERSION_NUM:
        # server_version_num is major * 10000 + minor from 10 on; 9.6.24 was 90624.
        name = str(version_num // 10000) if version_num >= 100000 else f"{version_num // 10000}.{version_num // 100 % 100}"
        raise UnsupportedServer(f"PostgreSQL {name} is not supported: queuetop needs {MINIMUM_MAJOR} or later")
