"""The Replication panel: the standbys streaming from the server and its replication slots, one
line each. Shown only when there is something to show: a standby, a slot, or a probe that could
not read them (unknown, and why); a server that replicates to nobody does not give up a line of
the screen to say so (`snapshot --json` says it: empty lists)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from rich.text import Text

from probes.model import ReplicationSlot, Snapshot, Standby

from ... import format as fmt
from ..keyed_table import Column, KeyedTable
from .base import UNKNOWN_KEY, Panel, unknown_row

GIB = 1024**3
# Figures an operator must look at: a standby this far behind, a slot keeping this much WAL
# (the alert rules' thresholds, docs/prometheus-alerts.yml).
LAG_WARN_S = 300.0
WAL_WARN_BYTES = GIB


def standby_state(s: Standby) -> Text:
    """A standby's state as the server says it, and how it is synchronous where it is (`streaming
    sync`); `hidden` where the probe's role may not see it (no pg_read_all_stats)."""
    if s.state is None:
        return Text("hidden", style="yellow")
    sync = f" {s.sync_state}" if s.sync_state and s.sync_state != "async" else ""
    return Text(fmt.inert(s.state + sync), style="" if s.state == "streaming" else "bold yellow")


def slot_state(slot: ReplicationSlot) -> Text:
    """active or inactive (nobody streams from it: it keeps WAL and its horizon for a consumer that
    is gone), and PostgreSQL 13's wal_status where it warns: `lost` (invalidated), `unreserved`
    (about to be)."""
    if slot.wal_status == "lost":
        return Text("lost", style="bold red")
    text = Text("active" if slot.active else "inactive", style="" if slot.active else "bold yellow")
    if slot.wal_status == "unreserved":
        text.append(" unreserved", style="bold red")
    return text


def wal_cell(value: int | None, *, warn: bool) -> Text:
    return Text(fmt.byte_size(value), style="bold red" if value is not None and value >= WAL_WARN_BYTES else
                "yellow" if warn and value else "")


def lag_cell(s: Standby) -> Text:
    if s.state is None:
        return Text("?", style="yellow")  # hidden: unknown, not none
    lag = s.replay_lag_s
    return Text(fmt.seconds(lag), style="bold red" if lag is not None and lag >= LAG_WARN_S else "")


def xmin_cell(slot: ReplicationSlot) -> str:
    """The slot's horizon in transactions: its xmin (a standby's feedback: every table's horizon)
    or, logical decoding's, its catalog_xmin (the system catalogs')."""
    if slot.xmin_age is not None:
        return fmt.count(slot.xmin_age)
    if slot.catalog_xmin_age is not None:
        return f"{fmt.count(slot.catalog_xmin_age)} cat"
    return "-"


class ReplicationPanel(Panel):
    # WAL: a standby's not yet replayed there, a slot's kept for it. Lag: how long the standby's
    # replay is behind. Xmin: a slot's horizon, in transactions. The name (a standby's
    # application_name, a slot's name) and its WAL are always shown, the name shortened if need be;
    # where the width runs out the client goes first, then the kind, the horizon, the lag, the
    # state; the border lists what is left out.
    COLUMNS: ClassVar[list[Column]] = [
        Column("name", "Name", 0, text=True, min_width=6), Column("kind", "Kind", 4, yields_to_names=True),
        Column("state", "State", 1), Column("lag", "Lag", 2), Column("wal", "WAL", 0), Column("xmin", "Xmin age", 3),
        Column("where", "Client/db", 6, text=True, min_width=6),
    ]

    # A standby by its application name and client; a slot by its name, database and plugin.
    FILTER_FIELDS: ClassVar[dict[str, Callable[[Any], object]]] = {
        "name": lambda r: getattr(r, "name", None) or getattr(r, "application", None),
        "app": lambda r: getattr(r, "application", None), "client": lambda r: getattr(r, "client", None),
        "db": lambda r: getattr(r, "database", None), "kind": lambda r: (getattr(r, "plugin", None), getattr(r, "type", "standby"))}
    FILTER_WORDS = ("name", "client", "db", "kind")

    def __init__(self) -> None:
        super().__init__("Replication", id="replication")
        self.display = False  # until a snapshot has something to show

    def compose(self):
        yield KeyedTable(self.COLUMNS, id="replication-table", names_first=True)  # its width shared in its row (share_row)

    def show(self, snapshot: Snapshot) -> None:
        replication = snapshot.replication
        unknown = snapshot.unknown_list("replication")
        standbys = replication.standbys if replication is not None else ()
        slots = replication.slots if replication is not None else ()
        # Unknown: said where the panel was, or where the probe alone failed; a database that cannot
        # be reached at all (the header says so) does not bring up a panel it never needed.
        shown = bool(standbys or slots or (unknown and (snapshot.connected or self.display)))
        if self.display != shown:
            self.display = shown
        if not shown:
            return
        rows: dict[str, tuple[object, ...]] = {}
        for s in standbys:
            if not self.passes(s):
                continue
            rows[f"standby:{s.pid}:{s.application}"] = (
                fmt.inert(s.application or "(no name)"), Text("standby", style="dim"), standby_state(s), lag_cell(s),
                wal_cell(s.replay_lag_bytes, warn=False) if s.state is not None else Text("?", style="yellow"), "",
                fmt.inert(s.client or ("?" if s.state is None else "-")))
        for slot in slots:
            if not self.passes(slot):
                continue
            rows[f"slot:{slot.name}"] = (
                fmt.inert(slot.name), Text(fmt.inert(f"{slot.type} slot"), style="dim"), slot_state(slot), "",
                wal_cell(slot.retained_wal_bytes, warn=not slot.active), xmin_cell(slot), fmt.inert(slot.database or ""))
        if unknown is not None:
            rows[UNKNOWN_KEY] = unknown_row(unknown, len(self.COLUMNS))
        hidden = replication.standbys_unknown if replication is not None else None
        self.set_subtitle("unknown", *(("standbys' state and lag hidden: grant pg_monitor", "lag hidden: grant pg_monitor",
                                        "hidden: pg_monitor", "no pg_monitor") if hidden else ()))
        self.query_one(KeyedTable).sync(rows)
        self.fit_width_to_content()
