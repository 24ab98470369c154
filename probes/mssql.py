"""SQL Server probes: PostgreSQL's probe logic (probes/postgres.py) on SQL Server's DMVs.

The T-SQL (probes/sql/mssql/) returns the same columns as PostgreSQL's, with SQL Server's meaning
(docs/mssql.md), so the queues, rings, leases, compaction and connections probes are
PostgresProbes' own. What differs is here:

- the locks probe: SQL Server has no arrays, so `blocked_by`, `held_tables` and `prepared` come
  as JSON text; the lock manager itself names an orphaned DTC transaction as a blocker (session
  -2, reported as 0 as PostgreSQL reports a prepared transaction), and the T-SQL lists the
  sessions each one blocks, so no lock-compatibility matching is needed in Python.

Nothing here has run against a SQL Server (none can run where queuetop is built): the T-SQL is
checked statically and compiled, and the live suite runs it when QUEUETOP_MSSQL_DSN is set.
"""

from __future__ import annotations

from typing import Any

from .locks import build_lock_tree
from .postgres import LOCKS_SQL, LockPicture, PostgresProbes, ProbeConnection, json_value


class MssqlProbes(PostgresProbes):
    dialect = "mssql"

    def locks(self, conn: ProbeConnection) -> LockPicture:
        rows: list[dict[str, Any]] = []
        for row in conn.execute(LOCKS_SQL["waiting"]).fetchall():
            rows.append({**row, "blocked_by": json_value(row["blocked_by"]) or [], "held_tables": json_value(row["held_tables"]),
                         "prepared": json_value(row["prepared"])})
        prepared = (rows[0]["prepared"] if rows else None) or []
        waiting_rows = [r for r in rows if r["pid"] is not None and r["blocked_by"]]
        by_prepared: dict[int, set[str]] = {}
        for entry in prepared:
            for pid in entry.get("blocked_pids") or ():
                by_prepared.setdefault(pid, set()).add(entry["gid"])
        mentioned = {pid for row in waiting_rows for pid in row["blocked_by"] if pid} - {r["pid"] for r in waiting_rows}
        others = {r["pid"]: r for r in conn.execute(LOCKS_SQL["sessions"], {"pids": sorted(mentioned)})} if mentioned else {}
        return build_lock_tree(waiting_rows, others, prepared, by_prepared)

