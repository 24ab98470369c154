"""The pooler probe: a PgBouncer's pools, read on its admin console (`--pgbouncer DSN`, or a config
target's `pgbouncer = "DSN"`).

The console is a database of PgBouncer's own (`pgbouncer`) that answers `SHOW ...` commands and
nothing else, over the simple query protocol only: no SET, no transaction, no prepared statement,
no `options` at start-up. So the probe opens a connection of its own each cycle (never one of the
probe pool's: those are the monitored server's, with their settings), autocommit, sends `SHOW
POOLS` and `SHOW DATABASES` as simple queries (psycopg's ClientCursor), and closes it. The role
must be in PgBouncer's `stats_users` (or `admin_users`): SHOW is all it runs.

A console that does not answer never holds the cycle up: the connection has a connect timeout
(libpq's connect_timeout, CONNECT_TIMEOUT_S unless the DSN sets one), and the two commands a
deadline (DEADLINE_S), after which the socket is shut and the probe reports that it timed out.
Whatever goes wrong is the pooler probe's error (`unknown` with the reason, never an empty list
that reads as calm); the other probes go on.

SHOW POOLS names each pool by the database as PgBouncer names it (an alias of its [databases]
section) and the user; SHOW DATABASES says which server database each alias connects to, so the
pools of the monitored database are known (PoolSample.server_database): the verdicts
(probes/diagnosis.py's `starved`) and the Pooler panel use those. The console's own pool (database
`pgbouncer`) is left out. Matched by the database's name alone: a PgBouncer in front of several
servers that each have a database of that name shows each one's pools as the monitored one's.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from dbcore.database import Target, connection_kwargs, hide_secrets, resolve_target, secrets_of
from dbcore.deadline import WATCHDOG, NoAnswer
from dbcore.errors import UsageError, connection_cause, first_line
from dbcore.sqlfiles import NamedQuery, Queries

from .samples import PoolerSample, PoolSample, ProbeStatus
from .session import APPLICATION_NAME

POOLER = "pooler"  # the probe's name, in a snapshot's `probes`
CONNECT_TIMEOUT_S = 3  # libpq's connect_timeout (its floor is 2), unless the DSN or PGCONNECT_TIMEOUT sets one
CONSOLE_SQL = Queries("probes", "pgbouncer.sql")
DEADLINE_S = 3.0  # SHOW POOLS and SHOW DATABASES, once connected
ADMIN_DATABASE = "pgbouncer"  # the console's own database: its pool is the console's, not a client's
POOL_COLUMNS = ("database", "user", "cl_active", "cl_waiting", "sv_active", "sv_idle", "maxwait")


class ConsoleUnreadable(Exception):
    """Why the console could not be read, in one line (the probe's error)."""


def console_target(dsn: str, where: str = "--pgbouncer") -> Target | None:
    """A PgBouncer admin console's DSN (a libpq URI or key=value string, or a postgresql:// URL)
    as a Target; None for an empty one (no PgBouncer). Its secrets are masked as --dsn's."""
    if not dsn.strip():
        return None
    try:
        target = resolve_target(dsn)
    except UsageError as exc:
        raise UsageError(f"{where}: {exc}") from None
    if target is None:
        return None
    if target.dialect != "postgresql":
        raise UsageError(f"{where}: {target.masked} is not a PgBouncer admin console (a PostgreSQL DSN, e.g. "
                         "postgresql://stats@pooler:6432/pgbouncer)")
    return target


def read_console(console: Target, *, deadline_s: float = DEADLINE_S) -> PoolerSample:
    """The pools the console lists (but its own), each with the server database its alias
    connects to. Raises ConsoleUnreadable saying why it could not."""
    secrets = secrets_of(console.conninfo)
    kwargs = connection_kwargs(f"{APPLICATION_NAME}:pooler", CONNECT_TIMEOUT_S, None, conninfo=console.conninfo)
    try:
        conn = psycopg.connect(console.conninfo, autocommit=True, **kwargs)
    except psycopg.Error as exc:
        cause = hide_secrets(connection_cause(exc), secrets)
        if cause.strip().rstrip(".") == "not allowed":  # PgBouncer's word for a user it does not let in
            cause += f" (the user must be in PgBouncer's stats_users or admin_users to read its {ADMIN_DATABASE!r} database)"
        raise ConsoleUnreadable(f"cannot connect: {cause}") from None
    try:
        try:
            with WATCHDOG.watch(conn, deadline_s, what=console.masked, pooled=False):
                pools = _show(conn, CONSOLE_SQL["pools"])
                databases = _show(conn, CONSOLE_SQL["databases"])
        except NoAnswer:
            raise ConsoleUnreadable(f"no answer within {deadline_s:g} s") from None
        except psycopg.Error as exc:
            said = hide_secrets(first_line(exc), secrets)
            if getattr(exc, "sqlstate", None) is not None:  # an error a server sent: not PgBouncer's console
                raise ConsoleUnreadable(f"not a PgBouncer admin console (it answered SHOW POOLS with: {said}); "
                                        f"give the DSN of PgBouncer's {ADMIN_DATABASE!r} database") from None
            raise ConsoleUnreadable(said) from None
    finally:
        conn.close()
    return PoolerSample(pools=tuple(_pools(pools, databases)))


def run_pooler(console: Target, monitored: Target | None = None) -> tuple[ProbeStatus, PoolerSample | None]:
    """The pooler probe, timed: its failure is its status (unknown, with the reason), never an
    exception, so that the other probes go on. `monitored`: the target whose pools matter (its
    DSN's database is the pool alias it connects through, when it goes through this PgBouncer)."""
    started = time.perf_counter()
    try:
        sample: PoolerSample | None = read_console(console)
        if sample is not None and monitored is not None:
            sample = replace(sample, through=database_named(monitored))
        error = None
    except ConsoleUnreadable as exc:
        sample, error = None, f"PgBouncer console {console.masked}: {exc}"
    except Exception as exc:  # a fault of queuetop's own: said, as any probe's
        sample, error = None, f"PgBouncer console {console.masked}: internal error: {type(exc).__name__}: {first_line(exc)}"
    elapsed = (time.perf_counter() - started) * 1000
    return ProbeStatus(elapsed_ms=elapsed, error=error, unread=("all",) if error else ()), sample


def pools_of(pooler: PoolerSample | None, database: str | None) -> tuple[PoolSample, ...]:
    """The pools whose alias connects to `database` (the monitored one). While the database is
    unknown (no answer through an exhausted pool: when the pools matter most), those of the alias
    the monitored DSN names (`PoolerSample.through`); none when neither is known."""
    if pooler is None:
        return ()
    if database is None:
        return tuple(p for p in pooler.pools if pooler.through is not None and p.database == pooler.through)
    return tuple(p for p in pooler.pools if p.server_database == database)


def database_named(target: Target) -> str | None:
    """The database a PostgreSQL DSN names (libpq's default where it names none: PGDATABASE, else
    the user's name); None when it cannot be read."""
    try:
        params = conninfo_to_dict(target.conninfo)
    except psycopg.Error:
        return None
    name = params.get("dbname") or os.environ.get("PGDATABASE") or params.get("user") or os.environ.get("PGUSER")
    return str(name) if name else None


def pool_name(pool: PoolSample) -> str:
    """A pool as PgBouncer names it: `database/user`."""
    return f"{pool.database}/{pool.user}"


def _show(conn: psycopg.Connection[Any], command: NamedQuery) -> list[dict[str, Any]]:
    """A console command (probes/sql/postgresql/pgbouncer.sql) as a simple query (the console knows
    no other protocol), rows by column."""
    cur = psycopg.ClientCursor(conn)
    cur.execute(command)
    names = [d.name for d in cur.description or ()]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def _int(value: object) -> int:
    return int(value) if isinstance(value, (int, str)) and str(value).strip() else 0


def _pools(pools: list[dict[str, Any]], databases: list[dict[str, Any]]) -> list[PoolSample]:
    missing = [c for c in POOL_COLUMNS if pools and c not in pools[0]]
    if missing:
        raise ConsoleUnreadable(f"the console's list of pools has no {', '.join(missing)} column: not a PgBouncer this queuetop reads")
    aliases = {str(row.get("name")): row for row in databases}
    out = []
    for row in pools:
        database = str(row["database"])
        if database == ADMIN_DATABASE:
            continue
        alias = aliases.get(database)
        size = alias.get("pool_size") if alias is not None else None
        server_database = alias.get("database") if alias is not None else None
        # maxwait is whole seconds, maxwait_us the microseconds beyond them (PgBouncer 1.8+).
        maxwait_s = _int(row["maxwait"]) + _int(row.get("maxwait_us")) / 1e6
        mode = row.get("pool_mode")
        out.append(PoolSample(
            database=database, user=str(row["user"]), cl_active=_int(row["cl_active"]), cl_waiting=_int(row["cl_waiting"]),
            sv_active=_int(row["sv_active"]), sv_idle=_int(row["sv_idle"]), maxwait_s=maxwait_s,
            pool_mode=str(mode) if mode else None, server_database=str(server_database) if server_database else None,
            pool_size=_int(size) if size is not None and str(size).strip() else None))
    return out
