"""The Leases panel: each lease's holder, fencing token and TTL, counted down between samples."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, ClassVar

from rich.text import Text

from probes.model import Snapshot

from ... import format as fmt
from ..keyed_table import Column, KeyedTable
from .base import UNKNOWN_KEY, Panel, unknown_row


def ttl_cell(state: str, left: float | None) -> Text:
    """A lease's TTL as the TTL column shows it: the time left while held, and `expired` once it
    has run out (or the lease says so): never a negative figure, which beside a holder and a token
    reads as a lease still held when the State column is left out for width."""
    if state == "free":
        return Text("-", style="dim")  # nobody holds it: no time left to count
    if state == "expired" or (left is not None and left <= 0):
        return Text("expired", style="bold red")
    return Text(fmt.seconds(left))


class LeasesPanel(Panel):
    FILLS_ROW = True  # the width Rings and Compaction leave (share_row)
    COLUMNS: ClassVar[list[Column]] = [
        # The holder before the state (which the TTL implies): a takeover is a new holder and token.
        Column("name", "Lease", 0, text=True, min_width=8), Column("state", "State", 4, yields_to_names=True),
        Column("holder", "Holder", 3, text=True),
        Column("token", "Token", 2), Column("expires", "TTL", 1),
    ]

    FILTER_FIELDS: ClassVar[dict[str, Callable[[Any], object]]] = {
        "name": lambda lease: lease.name, "holder": lambda lease: lease.holder, "state": lambda lease: lease.state}
    FILTER_WORDS = ("name", "holder")

    def __init__(self) -> None:
        super().__init__("Leases", id="leases")
        self._lease_snapshot: Snapshot | None = None
        self._received = 0.0
        # Per host: the latest sample's time and when it arrived (monotonic), so that a tab shown
        # again counts down from its sample's arrival, not from the moment it is shown.
        self._arrivals: dict[str, tuple[datetime, float]] = {}
        # A replay's recorded clock: the countdown runs on it (paused, stepped, at x8); live, it
        # runs from when the sample arrived, on this machine's monotonic clock.
        self.clock: Callable[[], datetime] | None = None

    def record(self, snapshot: Snapshot) -> None:
        """Note when a sample arrived (once per sample), shown or not."""
        host = snapshot.host
        known = self._arrivals.get(host)
        if known is None or known[0] != snapshot.taken_at:
            self._arrivals[host] = (snapshot.taken_at, time.monotonic())

    def compose(self):
        yield KeyedTable(self.COLUMNS, id="leases-table", names_first=True)  # its width shared in its row (share_row)

    def on_mount(self) -> None:
        # The countdown runs locally between samples: no query per second.
        self._countdown = self.set_interval(1.0, self._tick)

    def show(self, snapshot: Snapshot) -> None:
        self.record(snapshot)
        taken_at, received = self._arrivals[snapshot.host]
        self._received = received if taken_at == snapshot.taken_at else time.monotonic()
        self._lease_snapshot = snapshot
        self._tick()
        self.fit_width_to_content()
        # Counted from this sample: with samples every second the countdown never needs a
        # repaint of its own between them (one repaint a second, not two).
        self._countdown.reset()

    def _tick(self) -> None:
        if self._lease_snapshot is None:
            return
        if self.clock is not None:
            elapsed = max(0.0, (self.clock() - self._lease_snapshot.taken_at).total_seconds())
        else:
            elapsed = time.monotonic() - self._received
        rows: dict[str, tuple[object, ...]] = {}
        for lease in self._lease_snapshot.leases:
            if not self.passes(lease):
                continue
            left = None if lease.expires_in_s is None else lease.expires_in_s - elapsed
            state = lease.state if not (lease.state == "held" and left is not None and left <= 0) else "expired"
            style = {"held": "green", "expired": "bold red", "free": "dim"}.get(state, "")  # a recording may say anything
            rows[lease.name] = (
                fmt.inert(lease.name), fmt.plain(state, style=style), fmt.inert(lease.holder or "-"), fmt.count(lease.token),
                ttl_cell(state, left),
            )
        unknown = self._lease_snapshot.unknown_list("leases")
        if unknown is not None:
            rows[UNKNOWN_KEY] = unknown_row(unknown, len(self.COLUMNS))
        self.query_one(KeyedTable).sync(rows)
