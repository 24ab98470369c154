"""What a database to connect to is: a `Target`, resolved from what the user typed (a DSN, by
dbcore/dsn.py's `resolve_target`), and the short name a tab or a metric label gives it.

Nothing here parses a DSN for its secrets or opens a connection: the dialects (dbcore/mssql.py,
dbcore/postgres.py) and the DSN reader both stand on this module.
"""

from __future__ import annotations

import os
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

    def __str__(self) -> str:  # never let the raw DSN leak through formatting
        return self.masked

    def __repr__(self) -> str:
        return f"Target(dialect={self.dialect!r}, dsn={self.masked!r}, embedded={self.embedded})"


def host_name(target: Target) -> str:
    """A short name for a target, for a tab or a metric label: `host[:port]/database`, `service
    NAME`, or `embedded`; never a password (built from the parsed DSN's host, port and database)."""
    if target.embedded:
        return "embedded"
    try:
        if target.dialect == "postgresql":
            params = pg_conninfo.conninfo_to_dict(target.conninfo)
            host, port, database = params.get("host"), params.get("port"), params.get("dbname")
            if not host and params.get("service"):
                return f"service {params['service']}" + (f"/{database}" if database else "")
            default_port = "5432"
        else:
            url = make_url(target.conninfo)
            host, port, database = url.host, url.port, url.database
            default_port = "1433"
    except (psycopg.Error, ArgumentError, ValueError):
        return target.masked
    host = str(host or os.environ.get("PGHOST") or "localhost").split(",")[0]
    if host.startswith("/"):
        host = "local"  # a Unix socket directory
    port_text = f":{port}" if port and str(port).split(",")[0] != default_port else ""
    return f"{host}{port_text}/{database}" if database else f"{host}{port_text}"
