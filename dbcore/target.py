"""What a database to connect to is: a `Target`, resolved from what the user typed (a DSN, by
dbcore/dsn.py's `resolve_target`), and the short name a tab or a metric label gives it.

Nothing here parses a DSN for its secrets or opens a connection: the dialects (dbcore/mssql.py,
dbcore/postgres.py) and the DSN reader both stand on this module.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg
from psycopg import conninfo as pg_conninfo
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """A database to connect to, resolved from what the user typed."""

    dialect: str  # "postgresql" | "mssql"
    conninfo: str  # libpq conninfo for PostgreSQL; the SQLAlchemy URL string for others
    masked: str  # printable form, password replaced by ***
    embedded: bool = False
    # What stands between queuetop and the server (dbcore/pooler.py): "auto" (find out), "none"
    # (a direct connection), "session" or "transaction" (a pooler in that mode: --pooler, or a
    # config target's `pooler`).
    pooler: str = "auto"
    # A PgBouncer's admin console in front of it (--pgbouncer, a config target's `pgbouncer`):
    # the pooler probe reads its pools (probes/pooler_console.py). None: no PgBouncer given.
    pgbouncer: Target | None = None

    def __str__(self) -> str:  # never let the raw DSN leak through formatting
        return self.masked

    def __repr__(self) -> str:
        pooler = "" if self.pooler == "auto" else f", pooler={self.pooler!r}"
        return f"Target(dialect={self.dialect!r}, dsn={self.masked!r}, embedded={self.embedded}{pooler})"


def host_name(target: Target, detail: int = 0) -> str:
    """A short name for a target, for a tab or a metric label: `host[:port]/database`, `service
    NAME`, or `embedded`; never a password (built from the parsed DSN's host, port and database).
    A Unix socket's directory is `local`; `detail` says more, to tell apart targets that would
    share a name (host_names): 1, the socket's directory; 2, the port too, default or not; 3, the
    directory and the user (`bob@/tmp/a/queuetop`)."""
    if target.embedded:
        return "embedded"
    try:
        if target.dialect == "postgresql":
            params = pg_conninfo.conninfo_to_dict(target.conninfo)
            host, port, database, user = params.get("host"), params.get("port"), params.get("dbname"), params.get("user")
            if not host and params.get("service"):
                return f"service {params['service']}" + (f"/{database}" if database else "")
            default_port = "5432"
        else:
            url = make_url(target.conninfo)
            host, port, database, user = url.host, url.port, url.database, url.username
            default_port = "1433"
    except (psycopg.Error, ArgumentError, ValueError):
        return target.masked
    host = str(host or os.environ.get("PGHOST") or "localhost").split(",")[0]
    if host.startswith("/"):  # a Unix socket directory
        home = os.path.expanduser("~")
        host = ("~" + host[len(home):] if home != "/" and (host + "/").startswith(home + "/") else host) if detail else "local"
    if not port and detail and target.dialect == "postgresql":
        port = os.environ.get("PGPORT")  # libpq's, where the DSN names none
    port = str(port or default_port).split(",")[0]
    port_text = f":{port}" if port != default_port or detail == 2 else ""
    name = f"{host}{port_text}/{database}" if database else f"{host}{port_text}"
    return f"{user}@{name}" if user and detail >= 3 else name


def host_names(named: Sequence[tuple[str, Target]]) -> list[str]:
    """A name for each of several targets (a tab each), unique: the name given (a config's
    [[targets]] name), else `host_name`; where unnamed targets would share one, each of them says
    what differs, and no more: the socket's directory (`/tmp/a/queuetop` and `/tmp/b/queuetop`,
    not `local/queuetop` twice), then the port, then the user. A name still shared (the same DSN
    twice) gets #2, #3..."""
    names = [given or host_name(target) for given, target in named]
    for name in {name for name in names if names.count(name) > 1}:
        group = [i for i, n in enumerate(names) if n == name and not named[i][0]]
        # The least detail that tells the most of them apart (none: the same DSN twice).
        best = max((len({host_name(named[i][1], detail) for i in group}), -detail) for detail in (1, 2, 3))
        if best[0] > 1:
            for i in group:
                names[i] = host_name(named[i][1], -best[1])
    unique: list[str] = []
    for name in names:
        candidate, n = name, 1
        while candidate in unique:
            n += 1
            candidate = f"{name}#{n}"
        unique.append(candidate)
    return unique
