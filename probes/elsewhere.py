"""Relation names of other databases: pg_locks shows every database's locks, but a relation's OID
means something only in its own database (here it would name whatever table has that OID here).
A lock in another database that someone waits on is named there: a short-lived connection to
that database (the probe's own parameters, read-only, a 2 s connect timeout), one catalog
statement for the OIDs wanted, closed at once; the names are cached, so a wait that lasts costs
one lookup, not one a cycle.

Bounded: at most MAX_DATABASES databases and MAX_OIDS relations a cycle; a database that cannot
be reached (no CONNECT privilege, ALLOW_CONNECTIONS false, pg_hba) is not tried again for
RETRY_S, and its relations keep the `db:oid N` form, the probe's note saying why.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import psycopg
from psycopg import conninfo as pg_conninfo

from dbcore.database import hide_secrets, secrets_of
from dbcore.sqlfiles import Queries

from .failures import PROBE_FAILURES, describe_error
from .session import ProbeConnection, probe_transaction

# A name is kept this long: a dropped table's OID is reused only after the OID counter wraps
# (4 billion objects), but a table may be renamed.
NAME_TTL_S = 300.0
RETRY_S = 60.0
MAX_DATABASES = 4
MAX_OIDS = 200
MAX_CACHED = 10_000
CONNECT_TIMEOUT_S = 2

LOCKS_SQL = Queries("probes", "locks.sql")  # its relation_names, run in the other database


class RelationsElsewhere:
    """The cache of other databases' relation names, kept by a probe across cycles."""

    def __init__(self) -> None:
        self._names: dict[tuple[str, int], tuple[float, str]] = {}  # (database, oid) -> (expires at, name)
        self._refused: dict[str, tuple[float, str]] = {}  # database -> (retry at, why)
        self.lookups = 0  # connections made (tests and the bench read it)

    def name(self, conn: ProbeConnection, rows: Iterable[dict], here: str | None) -> list[str]:
        """Fill `relation` (and a row wait's `row_relation`) of each waiting row whose lock is in
        another database than `here`, looking up what the cache lacks; returns notes on what could
        not be named."""
        rows = [r for r in rows if r.get("database") not in (None, here)]
        now = time.monotonic()
        wanted: dict[str, set[int]] = {}
        for row in rows:
            for column in ("relation_oid", "row_relation_oid"):
                oid = row.get(column)
                if oid is not None and self._cached(row["database"], int(oid), now) is None:
                    wanted.setdefault(row["database"], set()).add(int(oid))
        notes = []
        for database in sorted(wanted)[:MAX_DATABASES]:
            refused = self._refused.get(database)
            if refused is not None and refused[0] > now:
                notes.append(refused[1])
                continue
            conninfo = _conninfo_for(conn, database)
            try:
                found = self._look_up(conninfo, sorted(wanted[database])[:MAX_OIDS])
            except PROBE_FAILURES as exc:
                said = hide_secrets(describe_error(exc), secrets_of(conninfo))
                why = f"relations of database {database} not named (no lookup there for {RETRY_S:.0f} s): {said}"
                self._refused[database] = (now + RETRY_S, why)
                notes.append(why)
                continue
            self._refused.pop(database, None)
            if len(self._names) + len(found) > MAX_CACHED:
                self._names = {key: entry for key, entry in self._names.items() if entry[0] > now}
            for oid, name in found:
                self._names[(database, oid)] = (now + NAME_TTL_S, name)
        for row in rows:
            if row.get("relation_oid") is not None and row.get("relation") is None:
                row["relation"] = self._cached(row["database"], int(row["relation_oid"]), now)
            if row.get("row_relation_oid") is not None and row.get("row_relation") is None:
                row["row_relation"] = self._cached(row["database"], int(row["row_relation_oid"]), now)
        return notes

    def _cached(self, database: str, oid: int, now: float) -> str | None:
        entry = self._names.get((database, oid))
        return entry[1] if entry is not None and entry[0] > now else None

    def _look_up(self, conninfo: str, oids: list[int]) -> list[tuple[int, str]]:
        """The names of `oids` in the database `conninfo` reaches, on a connection closed at once."""
        self.lookups += 1
        # In a probe transaction, as every probe read: its settings hold there through a pooler too.
        with psycopg.connect(conninfo, autocommit=True) as there, probe_transaction(there):
            return [(int(oid), name) for oid, name in there.execute(LOCKS_SQL["relation_names"], {"oids": oids}).fetchall()]


def _conninfo_for(conn: ProbeConnection, database: str) -> str:
    """The probe session's own parameters (its read-only settings and application_name among
    them) for `database`, with a short connect timeout. info.dsn leaves the password out;
    info.password is the one the session used (a passfile's too)."""
    params = {"dbname": database, "connect_timeout": str(CONNECT_TIMEOUT_S)}
    if conn.info.password:
        params["password"] = conn.info.password
    return pg_conninfo.make_conninfo(conn.info.dsn, **params)
