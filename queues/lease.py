"""Leases (pattern 3): a named lock with an expiry on the database clock and a fencing token.

Acquire is one compare-and-swap statement (free or expired -> ours, token + 1); renew and
release succeed only for the current holder (and, when a token is given, only under it).
Whoever acts under a lease passes its token along so that writes can be fenced: a holder that
was paused past its expiry carries a token lower than the new holder's.
"""

from __future__ import annotations

from dataclasses import dataclass

from dbcore.dialect import Session
from dbcore.errors import LeaseHeld, UsageError
from dbcore.names import check_name

from . import schema

MAX_HOLDER_LEN = 200


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseState:
    name: str
    holder: str | None
    token: int
    expires_in_s: float | None


def _check(name: str, holder: str, ttl_s: float | None = None) -> None:
    check_name("lease", name)
    if not holder or len(holder) > MAX_HOLDER_LEN or not holder.isprintable():
        raise UsageError(f"invalid holder {holder!r}: 1-{MAX_HOLDER_LEN} printable characters")
    if ttl_s is not None and not 0 < ttl_s <= 86_400 * 365:
        raise UsageError("--ttl must be a positive number of seconds")


def describe(conn: Session, name: str) -> LeaseState | None:
    row = conn.execute(schema.ENGINE_SQL["lease_describe"], {"name": name}).fetchone()
    if row is None:
        return None
    return LeaseState(name=row[0], holder=row[1], token=row[2], expires_in_s=row[4])


def _held_elsewhere(conn: Session, name: str, holder: str, verb: str) -> LeaseHeld:
    state = describe(conn, name)
    if state is None or state.holder is None:
        return LeaseHeld(f"cannot {verb} lease {name!r}: it is not held by {holder!r} (it is free)")
    if state.holder == holder:
        return LeaseHeld(f"cannot {verb} lease {name!r}: {holder!r} holds it under token {state.token}, not the token given")
    when = "" if state.expires_in_s is None else (
        f", expires in {state.expires_in_s:.1f}s" if state.expires_in_s > 0 else f", expired {-state.expires_in_s:.1f}s ago"
    )
    return LeaseHeld(f"cannot {verb} lease {name!r}: held by {state.holder!r} (token {state.token}{when})")


def acquire(conn: Session, name: str, holder: str, ttl_s: float) -> int:
    """Take the lease; returns the fencing token. LeaseHeld (exit 4) if another holds it."""
    _check(name, holder, ttl_s)
    row = conn.execute(
        schema.ENGINE_SQL["lease_acquire"], {"name": name, "holder": holder, "ttl_s": float(ttl_s)}
    ).fetchone()
    if row is None:
        raise _held_elsewhere(conn, name, holder, "acquire")
    return row[0]


def renew(conn: Session, name: str, holder: str, ttl_s: float, token: int | None = None) -> int:
    _check(name, holder, ttl_s)
    row = conn.execute(
        schema.ENGINE_SQL["lease_renew"], {"name": name, "holder": holder, "ttl_s": float(ttl_s), "token": token}
    ).fetchone()
    if row is None:
        raise _held_elsewhere(conn, name, holder, "renew")
    return row[0]


def release(conn: Session, name: str, holder: str, token: int | None = None) -> int:
    _check(name, holder)
    row = conn.execute(
        schema.ENGINE_SQL["lease_release"], {"name": name, "holder": holder, "token": token}
    ).fetchone()
    if row is None:
        raise _held_elsewhere(conn, name, holder, "release")
    return row[0]
