"""The whole server's figures (the server_stats probe): transactions, rows inserted, updated and
deleted, temp and WAL bytes per second, the cache hit ratio, the size of every database, and the
deadlocks the server broke, each new one a notice.

The server's statistics are cumulative counters (pg_stat_database, a row per database): a rate is
the difference between two reads over the server's clock between them, so the probe keeps the
previous read (`ServerCounters`, one per PostgresProbes). Each database's counters are followed
on their own (by oid): a database created since the previous read counts from 0, one dropped no
longer counts, and one whose counters were reset (stats_reset moved, or a counter went down)
makes the rates it is part of unknown for that interval, never a negative or a made-up 0.

Nothing here imports textual: the dashboard's header line (tui/dashboard/bars.py) and its deadlock
notices (deadlock_notices) are given these samples.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from dbcore.database import DictRow, one
from dbcore.sqlfiles import Queries

from .failures import PROBE_FAILURES, describe_error
from .samples import ServerStats
from .session import ProbeConnection, contained

SERVER_STATS_SQL = Queries("probes", "server_stats.sql")  # PostgreSQL only
# pg_database_size walks every file of a database (a stat() each): read at most this often, the
# last value kept between.
DATABASE_SIZE_EVERY_S = 30.0
# pg_stat_database's counters the figures come from (the deadlocks too: a notice per new one).
COUNTERS = ("xact_commit", "xact_rollback", "tup_inserted", "tup_updated", "tup_deleted", "temp_bytes",
            "blks_hit", "blks_read", "deadlocks")
# Rows written: a standby's statistics count its own work, not the primary's it replays (unknown there).
WRITES = ("tup_inserted", "tup_updated", "tup_deleted")


@dataclass(frozen=True, slots=True)
class _Database:
    name: str | None  # None: the shared catalogs' row (datid 0)
    counters: dict[str, int]
    stats_reset: datetime | None


@dataclass(frozen=True, slots=True)
class _Read:
    """One read of the server's counters."""

    at: datetime
    standby: bool
    wal_bytes: int | None
    databases: dict[int, _Database]


def _read_of(rows: Sequence[DictRow]) -> _Read:
    first = rows[0]
    databases = {int(r["datid"]): _Database(r["database"], {c: int(r[c] or 0) for c in COUNTERS}, r["stats_reset"])
                 for r in rows if r["datid"] is not None}
    wal = first["wal_bytes"]
    return _Read(at=first["read_at"].astimezone(UTC), standby=bool(first["standby"]), wal_bytes=None if wal is None else int(wal),
                 databases=databases)


def _since(previous: _Read, datid: int) -> _Database | None:
    """A database's counters at the previous read, to count its growth from: None where it counts
    from 0 (not there then: created since; or its counters all 0 and never reset, as PostgreSQL 12-14
    show a database the statistics collector has no entry for yet: the entry, once made, has its
    stats_reset set to that moment, which is no reset of counts already seen; one reset before its
    first counts were ever read is then counted from the reset: that interval's figures miss
    what came before the reset, as 12-14 do not tell the two apart)."""
    before = previous.databases.get(datid)
    if before is None or (before.stats_reset is None and not any(before.counters.values())):
        return None
    return before


def _growth(previous: _Read, current: _Read) -> dict[int, dict[str, int] | None]:
    """Each database's growth of every counter between two reads (a new database from 0); None for
    a database whose statistics were reset in between (the interval says nothing of it)."""
    out: dict[int, dict[str, int] | None] = {}
    for datid, database in current.databases.items():
        before = _since(previous, datid)
        if before is not None and before.stats_reset != database.stats_reset:
            out[datid] = None
            continue
        out[datid] = {c: database.counters[c] - (before.counters[c] if before is not None else 0) for c in COUNTERS}
    return out


def _deltas(growth: dict[int, dict[str, int] | None]) -> dict[str, int | None]:
    """Each counter's growth summed over the databases; None for a counter that went down in a
    database, or for every counter where a database's statistics were reset in between (the
    interval's figure is unknown)."""
    out: dict[str, int | None] = {}
    for counter in COUNTERS:
        grown = [None if g is None else g[counter] for g in growth.values()]
        out[counter] = None if any(n is None or n < 0 for n in grown) else sum(n for n in grown if n is not None)
    return out


def _new_deadlocks(growth: dict[int, dict[str, int] | None], current: _Read) -> dict[str, int]:
    """Deadlocks by database that grew between two reads (a database reset in between says nothing)."""
    return {current.databases[datid].name or "(shared catalogs)": g["deadlocks"]
            for datid, g in growth.items() if g is not None and g["deadlocks"] > 0}


def stats_between(previous: _Read | None, current: _Read, size: int | None, size_at: datetime | None) -> ServerStats:
    """The figures of `current`, its rates over the interval since `previous` (None: the first
    read, no rates)."""
    totals = {c: sum(d.counters[c] for d in current.databases.values()) for c in COUNTERS}
    standby = current.standby
    interval = (current.at - previous.at).total_seconds() if previous is not None else None
    rates: dict[str, float | None] = dict.fromkeys((*COUNTERS, "wal_bytes"))
    ratio = None
    new: dict[str, int] = {}
    if previous is not None and interval is not None and interval > 0:
        growth = _growth(previous, current)  # one pass over the databases, for the rates and the deadlocks
        deltas = _deltas(growth)
        rates.update({c: None if d is None else d / interval for c, d in deltas.items()})
        if previous.wal_bytes is not None and current.wal_bytes is not None and previous.standby == standby \
                and current.wal_bytes >= previous.wal_bytes:
            rates["wal_bytes"] = (current.wal_bytes - previous.wal_bytes) / interval
        hit, read = deltas["blks_hit"], deltas["blks_read"]
        ratio = hit / (hit + read) if hit is not None and read is not None and hit + read > 0 else None
        new = _new_deadlocks(growth, current)
    if standby:
        for counter in WRITES:
            rates[counter] = None
    return ServerStats(
        read_at=current.at, interval_s=interval if interval is not None and interval > 0 else None,
        xact_commit_per_s=rates["xact_commit"], xact_rollback_per_s=rates["xact_rollback"],
        tup_inserted_per_s=rates["tup_inserted"], tup_updated_per_s=rates["tup_updated"], tup_deleted_per_s=rates["tup_deleted"],
        temp_bytes_per_s=rates["temp_bytes"], wal_bytes_per_s=rates["wal_bytes"], cache_hit_ratio=ratio,
        database_size_bytes=size, database_size_read_at=size_at, deadlocks_total=totals["deadlocks"],
        wal_position="replay" if standby else "insert",
        deadlocks_by_database={d.name or "(shared catalogs)": d.counters["deadlocks"]
                               for d in current.databases.values() if d.counters["deadlocks"]},
        deadlocks_new=new,
        xact_commit_total=totals["xact_commit"], xact_rollback_total=totals["xact_rollback"],
        tup_inserted_total=None if standby else totals["tup_inserted"],
        tup_updated_total=None if standby else totals["tup_updated"],
        tup_deleted_total=None if standby else totals["tup_deleted"],
        temp_bytes_total=totals["temp_bytes"], wal_bytes_total=current.wal_bytes,
        blks_hit_total=totals["blks_hit"], blks_read_total=totals["blks_read"],
    )


class ServerCounters:
    """The server_stats probe's memory between cycles: the previous read of the counters, and the
    databases' size as last read (and when: monotonic, for the next read's turn)."""

    def __init__(self) -> None:
        self._previous: _Read | None = None
        self._size: int | None = None
        self._size_at: datetime | None = None
        self._size_due = 0.0  # monotonic time of the size's next read
        self._size_note: str | None = None  # why the size is unknown, said every cycle until it is read again

    def read(self, conn: ProbeConnection, notes: list[str]) -> ServerStats:
        """One read: the counters (one statement, a row per database), and every
        DATABASE_SIZE_EVERY_S the databases' size (a statement of its own, which may fail alone:
        the size unknown, said in `notes`, the other figures stand)."""
        rows = conn.execute(SERVER_STATS_SQL["counters"]).fetchall()
        current = _read_of(rows)
        now = time.monotonic()
        if now >= self._size_due:
            self._size_due = now + DATABASE_SIZE_EVERY_S
            self._size, self._size_at, self._size_note = None, current.at, None
            try:
                with contained(conn):
                    found = one(conn.execute(SERVER_STATS_SQL["database_size"]))
                if found["unreadable"]:
                    self._size_note = (f"database size unknown: {found['unreadable']} database(s) this role may not connect "
                                       "to (grant pg_read_all_stats, or pg_monitor, to read them all)")
                else:
                    self._size = None if found["bytes"] is None else int(found["bytes"])
            except PROBE_FAILURES as exc:
                self._size_note = f"database size unknown: {describe_error(exc)}"
        if self._size_note is not None:
            notes.append(self._size_note)
        stats = stats_between(self._previous, current, self._size, self._size_at if self._size is not None else None)
        self._previous = current
        return stats


def deadlock_notices(stats: ServerStats | None, host: str | None = None) -> list[str]:
    """The dashboard's notices of the deadlocks new in a read (ServerStats.deadlocks_new), one per
    database: when (between the previous read and this one, on the server's clock, UTC) and where;
    `host`: its name, when there are several. The server broke each one (it cancels one of the
    transactions of the cycle): this is its only trace on screen."""
    if stats is None or not stats.deadlocks_new:
        return []
    end = stats.read_at.astimezone(UTC)
    since = datetime.fromtimestamp(end.timestamp() - (stats.interval_s or 0.0), UTC)
    said = []
    for database, n in sorted(stats.deadlocks_new.items()):
        what = "a deadlock" if n == 1 else f"{n:,} deadlocks"
        them = "it" if n == 1 else "them"
        total = stats.deadlocks_by_database.get(database)
        overall = f"; {total:,} in {database} since its statistics were reset" if total is not None else ""
        said.append(f"{f'{host}: ' if host else ''}{what} in database {database} between {since:%H:%M:%S} and "
                    f"{end:%H:%M:%S} UTC (the server broke {them}{overall})")
    return said
