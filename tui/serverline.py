"""The server's figures as one line (the server_stats probe's: transactions, rows, temp and WAL
bytes per second, cache hit ratio, size, deadlocks): the dashboard's header line
(tui/dashboard/bars.py ServerBar) and the text snapshot's (tui/report.py). No textual here."""

from __future__ import annotations

from rich.text import Text

from probes.model import ServerStats, Snapshot

from . import format as fmt


def server_line(snapshot: Snapshot | None, width: int) -> Text:
    """The header line of `snapshot`'s server figures at `width` cells (server_parts, fitted)."""
    return fmt.fit_by_priority(server_parts(snapshot), width)


def server_parts(snapshot: Snapshot | None) -> list[tuple[str, str, int]]:
    """The header line's parts, by priority (fmt.fit_by_priority: each whole or left out): the
    transactions per second and the deadlocks first, then the cache hit ratio and WAL, the rows,
    temp bytes, the size, and the rollbacks beside the transactions last. An unknown figure is
    "-" (the first read has no rates yet; a standby has no rows written), never a 0; figures the
    probe could not read say so and why."""
    if snapshot is None:
        return [("server: waiting for the first sample…", "dim", 0)]
    stats = snapshot.server_stats
    if stats is None:
        status = snapshot.probes.get("server_stats")
        if status is None:  # a recording made before the server's figures were read
            return [("server figures: not in this snapshot", "dim", 0)]
        if status.error is None:  # not read, by design (SQL Server): the note says why
            return [("server figures not read", "dim", 0), (f": {fmt.one_line(status.notes, 200)}" if status.notes else "", "dim", 1)]
        return [("server figures unknown", "bold yellow", 0), (f": {fmt.one_line(status.error, 200)}", "yellow", 1)]
    return stats_parts(stats)


def stats_parts(stats: ServerStats) -> list[tuple[str, str, int]]:
    """server_parts of figures that were read."""
    commits, rollbacks = stats.xact_commit_per_s, stats.xact_rollback_per_s
    tps = commits + rollbacks if commits is not None and rollbacks is not None else None
    deadlocks = "-" if stats.deadlocks_total is None else f"{stats.deadlocks_total:,}"
    return [
        (f"tps {fmt.rate(tps)}", "bold", 1),
        (f" (rb {fmt.rate(rollbacks)})", "", 8),
        # the rows together: one of the three alone would read as the only one moving
        (f" ins {fmt.rate(stats.tup_inserted_per_s)}/s upd {fmt.rate(stats.tup_updated_per_s)}/s "
         f"del {fmt.rate(stats.tup_deleted_per_s)}/s", "", 4),
        (f" temp {_bytes_per_s(stats.temp_bytes_per_s)}", "", 6),
        (f" WAL {_bytes_per_s(stats.wal_bytes_per_s)}" + (" replayed" if stats.wal_position == "replay" else ""), "", 3),
        (f" hit {_ratio(stats.cache_hit_ratio)}", "", 3),
        (f" size {fmt.byte_size(stats.database_size_bytes)}", "", 7),
        (f" deadlocks {deadlocks}", "bold red" if stats.deadlocks_new else "", 2),
    ]


def _bytes_per_s(value: float | None) -> str:
    return "-" if value is None else f"{fmt.byte_size(round(value))}/s"


def _ratio(value: float | None) -> str:
    """A hit ratio as a percentage, rounded down (99.96 % is 99.9 %, not a perfect 100.0 %)."""
    if value is None:
        return "-"
    return "100%" if value >= 1 else f"{int(value * 1000) / 10:.1f}%"
