"""A connection pooler between queuetop and the server (PgBouncer): what a session may rely on.

A server session is *pinned* to a queuetop connection when nothing between them hands it to
other clients: a direct connection, or a pooler in session mode. Only a pinned session keeps what a
session-level statement leaves behind (SET, PREPARE, LISTEN, psycopg's automatic prepared
statements). Through a pooler in transaction mode each transaction may run on another server
session: a statement prepared on one is unknown on the next (`prepared statement "_pg3_7" does
not exist`, or worse, another client's), and a session-level SET would leak into another client's
transactions. A stock PgBouncer also refuses libpq's `options` start-up parameter (`unsupported
startup parameter: options`), where queuetop used to send its sessions' settings.

`Target.pooler` says which: "none" (a direct connection), "session", "transaction", or "auto"
(the default), where the first connection to a target finds out: libpq's backend pid is the one
the start-up handshake gave (BackendKeyData), which a pooler makes up for each client, while
`pg_backend_pid()` is the server's own; a mismatch means a pooler sits between. In which mode it
cannot tell, so a detected pooler is taken as transaction mode, the one that assumes nothing of
the session (`--pooler session` or `pooler = "session"` gives prepared statements and LISTEN
back).

`settle` is run on every new connection (dbcore/database.py's `connect`, the probes' pool): on a
pinned session it applies the session's settings (sent at start-up already where the target is
known to be direct), on one that is not it applies none (each transaction applies its own: the
probes' `SET LOCAL`, probes/session.py) and turns psycopg's automatic preparation off.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any

import psycopg

from .deadline import WATCHDOG
from .sqlfiles import Queries

POOLER_SQL = Queries("dbcore", "pooler.sql")
POOLER_MODES = ("auto", "none", "session", "transaction")


@dataclass(frozen=True, slots=True)
class Link:
    """What stands between a connection and its server session."""

    pooled: bool  # a pooler sits between: declared (--pooler) or detected
    pinned: bool  # the server session stays this connection's from one transaction to the next
    detected: bool = False  # found by the pid comparison rather than declared
    mode: str = "none"  # none | session | transaction (a detected pooler: transaction)

    @property
    def says(self) -> str:
        """How the link reads in a header or a note."""
        if self.mode == "undetermined":
            return "not known yet"
        if not self.pooled:
            return "direct"
        how = "detected, taken as transaction mode" if self.detected else f"{self.mode} mode"
        return f"through a pooler ({how})"


DIRECT = Link(pooled=False, pinned=True)
# Not found out yet (settle without asking): taken as unpinned until `found` says.
UNDETERMINED = Link(pooled=False, pinned=False, mode="undetermined")
# psycopg's own default: a statement run this many times is prepared.
PREPARE_THRESHOLD = 5
_LINKS: weakref.WeakKeyDictionary[psycopg.Connection[Any], Link] = weakref.WeakKeyDictionary()
# The conninfo of each connection whose link is not found out yet (settle without asking).
_PENDING: weakref.WeakKeyDictionary[psycopg.Connection[Any], str] = weakref.WeakKeyDictionary()
# What "auto" found for a conninfo, once: True a pooler, False direct (the next connections to it
# then send their settings at start-up, as before, at no extra round trip).
_FOUND: dict[str, bool] = {}
_FOUND_LOCK = threading.Lock()


def declared(target: Any) -> Link | None:
    """The link a target's `pooler` declares, or what an earlier connection found; None: not known
    before a connection has asked."""
    mode = getattr(target, "pooler", "auto") or "auto"
    if mode == "none":
        return DIRECT
    if mode == "session":
        return Link(pooled=True, pinned=True, mode="session")
    if mode == "transaction":
        return Link(pooled=True, pinned=False, mode="transaction")
    with _FOUND_LOCK:
        found = _FOUND.get(target.conninfo)
    if found is None:
        return None
    return Link(pooled=True, pinned=False, detected=True, mode="transaction") if found else DIRECT


def startup_options_allowed(target: Any) -> bool:
    """Whether a connection to `target` may send its settings in libpq's `options` start-up
    parameter: only to a server known to be reached directly (a stock PgBouncer refuses it)."""
    link = declared(target)
    return link is not None and not link.pooled


def settle(conn: psycopg.Connection[Any], target: Any, settings: dict[str, str] | None = None,
           *, sent_at_startup: bool = False, ask: bool = True, answer_within_s: float = 10.0) -> Link:
    """Find out (or take as declared) what stands between `conn` and its server session, and set
    the connection up for it: `settings` as session settings on a pinned session (unless they were
    sent at start-up), none on one that is not; no automatic prepared statements there. Returns the
    link, which `link_of(conn)` gives again later.

    Asking the server takes a server connection, which a pooler whose pool is taken gives only
    when one is free: the wait is bounded by `answer_within_s` (dbcore/deadline.py: NoAnswer). With
    `ask` false nothing is asked: a link not known yet is UNDETERMINED (no prepared statements,
    no session settings) until `found` is told the server's pid (the probes read it in their first
    transaction's round trip, probes/session.py)."""
    link = declared(target)
    if link is None and not ask:
        link = UNDETERMINED
        _PENDING[conn] = target.conninfo
    with WATCHDOG.watch(conn, answer_within_s, what=getattr(target, "masked", None)):
        if link is None:
            row = conn.execute(POOLER_SQL["server_pid"], prepare=False).fetchone()
            server_pid = int(row[0] if not isinstance(row, dict) else next(iter(row.values()))) if row else 0
            _PENDING[conn] = target.conninfo
            link = found(conn, server_pid)
        if not link.pinned:
            conn.prepare_threshold = None  # psycopg's automatic PREPARE names a statement on one server session
        elif settings and not sent_at_startup:
            apply_session_settings(conn, settings)
        if not conn.autocommit and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.commit()
    _LINKS[conn] = link
    return link


def found(conn: psycopg.Connection[Any], server_pid: int) -> Link:
    """What `pg_backend_pid()` read on `conn` (`server_pid`), a connection `settle` left
    UNDETERMINED, says of its link against the pid its start-up gave: recorded for its target
    (as "auto" finds it) and for the connection, whose automatic prepared statements come back
    when it turns out direct."""
    conninfo = _PENDING.pop(conn, None)
    pooled = server_pid != conn.info.backend_pid
    if conninfo is not None:
        with _FOUND_LOCK:
            _FOUND[conninfo] = pooled
    link = Link(pooled=True, pinned=False, detected=True, mode="transaction") if pooled else DIRECT
    if _LINKS.get(conn) is UNDETERMINED and link.pinned:
        conn.prepare_threshold = PREPARE_THRESHOLD
    _LINKS[conn] = link
    return link


def apply_session_settings(conn: psycopg.Connection[Any], settings: dict[str, str]) -> None:
    """`settings` for the rest of a pinned session, in one statement (what `options` at start-up would do)."""
    calls = ", ".join("set_config(%s, %s, false)" for _ in settings)
    params = [part for item in settings.items() for part in item]
    conn.execute(f"SELECT {calls}", params, prepare=False)


def link_of(conn: Any) -> Link:
    """What `settle` found for `conn`; a connection it never saw is taken as direct (its settings
    came at start-up)."""
    try:
        return _LINKS.get(conn, DIRECT)
    except TypeError:  # not weak-referenceable: another dialect's session
        return DIRECT
