"""The Pooler panel: the PgBouncer pools of the monitored database (the pooler probe, on the admin
console `--pgbouncer` or a target's `pgbouncer` names), one row each: clients waiting for a server
connection and how long the first has waited, clients and server connections in use, idle ones.

Shown only where a PgBouncer was given (the snapshot's probes list the pooler probe); elsewhere it
takes no room, and the screens are as they were."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from rich.text import Text

from probes.model import PoolSample, Snapshot
from probes.pooler_console import POOLER, pool_name, pools_of

from ... import format as fmt
from ..keyed_table import Column, KeyedTable
from .base import UNKNOWN_KEY, Panel, unknown_row

WAITING = "bold red"  # clients wait for a server connection: the pool has none left to give
NO_POOL_KEY = "no-pool"


def pooler_given(snapshot: Snapshot) -> bool:
    """Whether the snapshot's host has a PgBouncer given (its pooler probe ran, or failed)."""
    return POOLER in snapshot.probes


class PoolerPanel(Panel):
    # Pool and its waiting clients first: at 80 columns beside Rings, Leases and Compaction they are
    # what stays (the others go, the border says which; z shows them all).
    COLUMNS: ClassVar[list[Column]] = [
        Column("pool", "Pool", 0, text=True, min_width=8), Column("waiting", "Waiting", 1), Column("maxwait", "Max wait", 2),
        Column("active", "Clients", 3), Column("servers", "Servers", 4), Column("idle", "Idle", 5),
        Column("mode", "Mode", 6, yields_to_names=True),
    ]

    FILTER_FIELDS: ClassVar[dict[str, Callable[[Any], object]]] = {
        "db": lambda p: p.database, "user": lambda p: p.user, "name": lambda p: (p.database, p.user)}
    FILTER_WORDS = ("db", "user")

    def __init__(self) -> None:
        super().__init__("Pooler", id="pooler")
        self.display = False  # until a snapshot says a PgBouncer was given

    def compose(self):
        yield KeyedTable(self.COLUMNS, id="pooler-table", names_first=True)  # its width shared in its row (share_row)

    def show(self, snapshot: Snapshot) -> None:
        given = pooler_given(snapshot)
        if self.display != given:
            self.display = given
        if not given:
            return
        rows: dict[str, tuple[object, ...]] = {}
        pools = pools_of(snapshot.pooler, snapshot.server.database)
        for pool in pools:
            if self.passes(pool):
                rows[pool_name(pool)] = _row(pool)
        unknown = snapshot.unknown_list("pooler")
        if unknown is not None:
            rows[UNKNOWN_KEY] = unknown_row(unknown, len(self.COLUMNS))
        elif snapshot.pooler is not None and not pools:
            # Nothing to show is said, never an empty table that reads as calm: no client has come
            # through PgBouncer to this database yet (or it is not one PgBouncer serves).
            others = len(snapshot.pooler.pools)
            said = f"no pool of {snapshot.server.database or 'the database'}" + (f" ({others:,} of other databases)" if others else "")
            cells: list[object] = [""] * len(self.COLUMNS)
            cells[0] = Text(fmt.one_line(said, 120), style="dim")
            rows[NO_POOL_KEY] = tuple(cells)
        self.query_one(KeyedTable).sync(rows)
        self.fit_width_to_content()


def _row(pool: PoolSample) -> tuple[object, ...]:
    """A pool's cells: its name, waiting clients and maxwait highlighted while clients wait;
    every figure whole (counts as PgBouncer gives them)."""
    waiting = pool.cl_waiting > 0
    style = WAITING if waiting else ""
    servers = f"{pool.sv_active:,}/{pool.pool_size:,}" if pool.pool_size else f"{pool.sv_active:,}"
    return (
        fmt.plain(pool_name(pool), style=style),
        Text(f"{pool.cl_waiting:,}", style=style),
        Text(fmt.seconds(pool.maxwait_s) if waiting or pool.maxwait_s else "-", style=style),
        f"{pool.cl_active:,}",
        Text(servers, style="bold yellow" if pool.pool_size and pool.sv_active >= pool.pool_size else ""),
        f"{pool.sv_idle:,}",
        fmt.plain(pool.pool_mode or "-"),
    )
