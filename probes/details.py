"""Details on demand (the dashboard's Enter): bounded reads on a probe session."""

from __future__ import annotations

from psycopg import sql

from dbcore.database import one
from dbcore.sqlfiles import Queries

from .postgres import ProbeConnection

HEAD_ROWS = 20
DETAILS_SQL = Queries("probes", "details.sql")


def queue_details(conn: ProbeConnection, name: str, kind: str, table: str,
                  order_by: str | None = None) -> dict[str, list[dict]]:
    """Head messages and dead letters of a reference queue, the head of the outbox or of an
    endpoint's inbox, or the head rows of a declared table (in its `order_by` order).
    `table` and `order_by` are only looked up in the catalog, never put into SQL as text."""
    if kind == "outbox":
        return {"head": conn.execute(DETAILS_SQL["outbox_head"], {"limit": HEAD_ROWS}).fetchall(), "dead": []}
    if kind == "inbox":
        return {"head": conn.execute(DETAILS_SQL["inbox_head"], {"endpoint": name, "limit": HEAD_ROWS}).fetchall(), "dead": []}
    row = conn.execute(DETAILS_SQL["relation"], {"table": table}).fetchone()
    if row is None:
        return {"head": [], "dead": []}
    ident = sql.Identifier(row["schema_name"], row["table_name"])
    if kind == "reference":
        head = conn.execute(sql.SQL(DETAILS_SQL["queue_head"]).format(table=ident), {"limit": HEAD_ROWS}).fetchall()
        dead = conn.execute(DETAILS_SQL["queue_dead_letters"], {"queue": name, "limit": HEAD_ROWS}).fetchall()
        return {"head": head, "dead": dead}
    if kind == "table" and order_by:
        present = one(conn.execute(DETAILS_SQL["column_present"], {"relid": row["relid"], "column": order_by}))
        if not present["present"]:
            raise LookupError(f"order_by column {order_by!r} not in {table}")
        statement = sql.SQL(DETAILS_SQL["table_head"]).format(table=ident, order=sql.Identifier(order_by))
        rows = conn.execute(statement, {"limit": HEAD_ROWS}).fetchall()
        return {"head": [dict(r["row"]) for r in rows], "dead": []}
    return {"head": [], "dead": []}


def session_details(conn: ProbeConnection, pid: int) -> dict[str, object]:
    session = conn.execute(DETAILS_SQL["session"], {"pid": pid}).fetchone()
    locks = conn.execute(DETAILS_SQL["session_locks"], {"pid": pid}).fetchall()
    return {"session": session, "locks": locks}
