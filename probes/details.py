"""Details on demand (the dashboard's Enter): bounded reads on a probe session."""

from __future__ import annotations

import psycopg
from psycopg import sql

from dbcore.sqlfiles import load

HEAD_ROWS = 20


def _q() -> dict[str, str]:
    return load("probes", "postgresql", "details.sql")


def queue_details(conn: psycopg.Connection, name: str, kind: str, table: str) -> dict[str, list[dict]]:
    """Head messages and dead letters of a reference queue, the head of the outbox or of an
    endpoint's inbox, or the head rows of a declared table.
    `table` is only used to find the relation in the catalog, never put into SQL as text."""
    row = conn.execute(
        "SELECT n.nspname AS s, c.relname AS t FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.oid = to_regclass(%s::text)",
        (table,),
    ).fetchone()
    if kind == "outbox":
        return {"head": conn.execute(_q()["outbox_head"], {"limit": HEAD_ROWS}).fetchall(), "dead": []}
    if kind == "inbox":
        return {"head": conn.execute(_q()["inbox_head"], {"endpoint": name, "limit": HEAD_ROWS}).fetchall(), "dead": []}
    if row is None:
        return {"head": [], "dead": []}
    ident = sql.Identifier(row["s"], row["t"])
    if kind == "reference":
        head = conn.execute(sql.SQL(_q()["queue_head"]).format(table=ident), {"limit": HEAD_ROWS}).fetchall()
        dead = conn.execute(_q()["queue_dead_letters"], {"queue": name, "limit": HEAD_ROWS}).fetchall()
        return {"head": head, "dead": dead}
    return {"head": [], "dead": []}


def session_details(conn: psycopg.Connection, pid: int) -> dict[str, object]:
    session = conn.execute(_q()["session"], {"pid": pid}).fetchone()
    locks = conn.execute(_q()["session_locks"], {"pid": pid}).fetchall()
    return {"session": session, "locks": locks}
