"""Ring buffer queue (pattern 2): a bounded FIFO of fixed cells that refuses writers when full.

All the concurrency lives in two SQL functions (schema.sql): writers serialise on the ring's
tail row and readers on its head row, so committed cells always form the contiguous range
[head, tail): no loss, no duplicate, FIFO across wrap-around, and a writer or reader that rolls
back simply leaves the position for the next one. In steady state only UPDATEs touch the ring
tables (no INSERT, no DELETE, no index churn).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import psycopg

from dbcore.database import one
from dbcore.dialect import Session
from dbcore.errors import DatabaseRefused, RingFull, UsageError
from dbcore.names import check_name

from . import schema

MAX_CAPACITY = 10_000_000


@dataclass(frozen=True, slots=True, kw_only=True)
class RingState:
    name: str
    capacity: int
    used: int
    refused_total: int
    head: int
    tail: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RingItem:
    seq: int
    put_at: datetime
    body: str


def _unknown_ring(exc: Exception, name: str) -> UsageError | None:
    if getattr(exc, "sqlstate", None) == "QT404":
        return UsageError(f"unknown ring {name!r} (create it with `queuetop engine ring create`)")
    return None


def create(conn: Session, name: str, capacity: int) -> RingState:
    """Create a ring of `capacity` cells; re-creating with the same capacity is a no-op."""
    check_name("ring", name)
    if not 1 <= capacity <= MAX_CAPACITY:
        raise UsageError(f"--capacity must be between 1 and {MAX_CAPACITY}")
    conn.execute(schema.ENGINE_SQL["ring_create"], {"name": name, "capacity": capacity})
    state = describe(conn, name)
    if state.capacity != capacity:
        raise UsageError(f"ring {name!r} already exists with capacity {state.capacity}; rings are never resized")
    return state


def describe(conn: Session, name: str) -> RingState:
    row = conn.execute(schema.ENGINE_SQL["ring_describe"], {"name": name}).fetchone()
    if row is None:
        raise UsageError(f"unknown ring {name!r} (create it with `queuetop engine ring create`)")
    return RingState(name=row[0], capacity=row[1], refused_total=row[2], used=row[3], head=row[4], tail=row[5])


def put(conn: Session, name: str, bodies: Sequence[str]) -> int:
    """Put all bodies or none (RingFull, exit 3). Returns the first position written."""
    check_name("ring", name)
    try:
        row = one(conn.execute(schema.ENGINE_SQL["ring_put"], {"name": name, "bodies": list(bodies)}))
    except (psycopg.Error, DatabaseRefused) as exc:  # any dialect's refusal: QT404 is an unknown ring
        raise (_unknown_ring(exc, name) or exc) from None
    if row[0] is None:
        state = describe(conn, name)
        free = max(0, state.capacity - state.used)
        raise RingFull(
            f"ring {name!r} is full: room for {free} of {len(bodies)} message(s) "
            f"({state.used}/{state.capacity} used); refused, nothing written"
        )
    return row[0]


def take(conn: Session, name: str, count: int = 1) -> list[RingItem]:
    """Take up to `count` messages in FIFO order (fewer, or none, if the ring holds fewer)."""
    check_name("ring", name)
    if not 1 <= count <= MAX_CAPACITY:
        raise UsageError(f"--count must be between 1 and {MAX_CAPACITY}")
    try:
        rows = conn.execute(schema.ENGINE_SQL["ring_take"], {"name": name, "count": count}).fetchall()
    except (psycopg.Error, DatabaseRefused) as exc:  # any dialect's refusal: QT404 is an unknown ring
        raise (_unknown_ring(exc, name) or exc) from None
    return [RingItem(seq=r[0], put_at=r[1], body=r[2]) for r in rows]
