"""SQL Server probes: PostgreSQL's probe logic (probes/postgres.py) on SQL Server's DMVs.

The T-SQL (probes/sql/mssql/) returns the same columns as PostgreSQL's, with SQL Server's meaning
(docs/mssql.md), so the queues, rings, leases, compaction and connections probes are
PostgresProbes' own. What differs is here:

- the sessions (the connections probe's second statement): connections.sql's `sessions` in
  T-SQL, run as it is (PostgreSQL's text is composed with its xmin_horizon statement; SQL
  Server's finds the oldest snapshot transaction itself), with `blocked_by` as JSON text.
- the locks probe: SQL Server has no arrays, so `blocked_by`, `held_tables` and `prepared` come
  as JSON text; the lock manager itself names an orphaned DTC transaction as a blocker (session
  -2, reported as 0 as PostgreSQL reports a prepared transaction), and the T-SQL lists the
  sessions each one blocks, so no lock-compatibility matching is needed in Python.

Nothing here has run against a SQL Server (none can run where queuetop is built): the T-SQL is
checked statically and compiled, and the live suite runs it when QUEUETOP_MSSQL_DSN is set.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from dbcore.database import DictRow, one
from dbcore.errors import MissingPrivilege
from dbcore.sqlfiles import Queries

from .config import Config
from .failures import PROBE_FAILURES, describe_error
from .lockrows import app_locks_of
from .locks import LockPicture
from .model import Connections, QueueSample, Replication, ServerInfo, ServerStats
from .postgres import CONNECTIONS_SQL, PostgresProbes, ProbeConnection, SessionPicture, json_value

# SQL Server's own sections of the probes' files (ghost records; what the login may see; the version store).
MSSQL_QUEUES_SQL = Queries("probes", "queues.sql", dialect="mssql")
MSSQL_SERVER_SQL = Queries("probes", "server.sql", dialect="mssql")
MSSQL_CONNECTIONS_SQL = Queries("probes", "connections.sql", dialect="mssql")
MSSQL_LOCKS_SQL = Queries("probes", "locks.sql", dialect="mssql")
# sys.dm_db_index_physical_stats reads pages (SAMPLED: about 1 % of them, all of a small table):
# each queue table's ghost records are read at most every 10 minutes, and one table per cycle.
GHOST_REFRESH_S = 600.0


class MssqlProbes(PostgresProbes):
    dialect = "mssql"
    SESSIONS_IN_ORDER = False  # its sessions statement orders by transaction, then login: the panel sorts them

    def __init__(self, config: Config | None = None) -> None:
        super().__init__(config)
        self._ghosts: dict[str, tuple[float, int | None]] = {}  # table -> (read at, ghost records)
        self._sees_server_state: bool | None = None  # VIEW SERVER STATE, or its 2022 / Azure SQL equivalents

    def server(self, conn: ProbeConnection, label: str | None = None) -> ServerInfo:
        info = super().server(conn, label)
        self._sees_server_state = bool(one(conn.execute(MSSQL_SERVER_SQL["permission_check"]))["sees_server_state"])
        return info

    def recovery(self, conn: ProbeConnection, server: ServerInfo) -> ServerInfo:
        """A primary, always: an Always On readable secondary is not told apart (its replica state,
        sys.fn_hadr_is_primary_replica or sys.dm_hadr_database_replica_states, needs VIEW SERVER
        STATE, and no SQL Server runs here to test it: docs/mssql.md). No statement is run."""
        self._server = replace(server, role="primary")
        return self._server

    def _require_server_state(self, what: str) -> None:
        """Without VIEW SERVER STATE the session DMVs show this login's own sessions only: an
        empty lock tree would say "nothing blocked" untruthfully, so the probe says why instead."""
        if self._sees_server_state is False:
            raise MissingPrivilege(f"this login lacks VIEW SERVER STATE (SQL Server 2022: VIEW SERVER PERFORMANCE STATE; "
                                   f"Azure SQL Database: VIEW DATABASE STATE): {what} cannot be read")

    def connections(self, conn: ProbeConnection) -> Connections:
        """PostgreSQL's connections probe, where the xmin holder is the session with the oldest
        snapshot transaction (its age is in seconds, not transaction ids: not reported as xids),
        and the version store that transaction keeps from shrinking."""
        self._require_server_state("other sessions and transactions")
        connections = super().connections(conn)
        row = one(conn.execute(MSSQL_CONNECTIONS_SQL["version_store"]))
        sizes = [row["version_store_kb"], row["persistent_version_store_kb"]]
        kb = sum(int(size) for size in sizes if size is not None) if any(size is not None for size in sizes) else None
        return replace(connections, xmin_holder_age_xids=None, version_store_kb=kb)

    def xmin_horizon_holder(self, conn: ProbeConnection, sessions: list[DictRow]) -> DictRow | None:
        """The session with the oldest snapshot transaction, among the connections statement's
        rows but queuetop's own (their xmin_age, in seconds: its age in time): the version store's horizon. SQL Server has no prepared
        transactions or replication slots that hold it."""
        oldest = max((r for r in sessions if r["xmin_age"] is not None), key=lambda r: r["xmin_age"], default=None)
        if oldest is None:
            return None
        return {"kind": "session", "pid": oldest["pid"], "name": None, "application_name": oldest["application_name"],
                "age_xids": oldest["xmin_age"], "age_s": float(oldest["xmin_age"])}

    def replication(self, conn: ProbeConnection) -> Replication | None:
        """Not read on SQL Server (no statement runs): its availability group replicas are not
        PostgreSQL's standbys and slots, and queuetop does not read them yet. Unknown (null), said
        in the probe's note, never an empty list that would read as "no replica"."""
        self.notes["replication"] = "not read on SQL Server (availability group replicas are not shown)"
        return None

    def server_stats(self, conn: ProbeConnection) -> ServerStats | None:
        """Not read on SQL Server (no statement runs): its counterparts, sys.dm_os_performance_counters'
        Transactions/sec, Log Bytes Flushed/sec, Buffer cache hit ratio and Number of Deadlocks/sec,
        count other things (no rows inserted, updated or deleted server-wide), need VIEW SERVER STATE,
        and could not be tested here (no SQL Server runs here). Unknown (null), said in the probe's
        note, never 0s that would read as an idle server."""
        self.notes["server_stats"] = "not read on SQL Server (transactions, rows, WAL and deadlocks are PostgreSQL's statistics)"
        return None

    def sessions(self, conn: ProbeConnection) -> SessionPicture:
        self._require_server_state("other sessions")
        return super().sessions(conn)

    def _sessions_query(self) -> str:
        return CONNECTIONS_SQL["sessions"]  # the session runs SQL Server's text of it

    def _sessions_parameters(self) -> dict[str, object]:
        return {}  # its sessions statement reads each blocker from the DMVs, no pile-up threshold

    def queues(self, conn: ProbeConnection) -> tuple[QueueSample, ...]:
        """PostgreSQL's queue probe, and the dead-tuple analogue, ghost records, on a slow
        schedule: `dead_tuples` carries the clustered index's ghost records as last read."""
        samples = super().queues(conn)
        now = time.monotonic()
        due = [q.table for q in samples if q.table and now - self._ghosts.get(q.table, (-GHOST_REFRESH_S, None))[0] >= GHOST_REFRESH_S]
        if due:
            table = due[0]
            try:
                rows = conn.execute(MSSQL_QUEUES_SQL["ghost_records"], {"table": table}).fetchall()
                clustered = [r for r in rows if r["index_id"] in (0, 1)]  # the heap or the clustered index: the rows themselves
                self._ghosts[table] = (now, sum(r["ghost_record_count"] or 0 for r in clustered) if clustered else None)
            except PROBE_FAILURES as exc:
                self._ghosts[table] = (now, None)
                self.errors["queues"] = "; ".join(filter(None, [self.errors.get("queues"), f"ghost records: {describe_error(exc)}"]))
        return tuple(replace(q, dead_tuples=self._ghosts[q.table][1]) if q.table in self._ghosts else q for q in samples)

    def locks(self, conn: ProbeConnection) -> LockPicture:
        self._require_server_state("blocked sessions")
        rows: list[dict[str, Any]] = []
        for row in conn.execute(MSSQL_LOCKS_SQL["waiting"]).fetchall():
            rows.append({**row, "blocked_by": json_value(row["blocked_by"]) or [], "held_tables": json_value(row["held_tables"]),
                         "prepared": json_value(row["prepared"])})
        prepared = (rows[0]["prepared"] if rows else None) or []
        waiting_rows = [r for r in rows if r["pid"] is not None and r["blocked_by"]]
        by_prepared: dict[int, set[str]] = {}
        for entry in prepared:
            for pid in entry.get("blocked_pids") or ():
                by_prepared.setdefault(pid, set()).add(entry["gid"])
        mentioned = {pid for row in waiting_rows for pid in row["blocked_by"] if pid} - {r["pid"] for r in waiting_rows}
        others = {r["pid"]: r for r in conn.execute(MSSQL_LOCKS_SQL["sessions"], {"pids": sorted(mentioned)})} if mentioned else {}
        return self.lock_trees.build(waiting_rows, others, prepared, by_prepared, app_locks_of(conn.execute(MSSQL_LOCKS_SQL["applocks"])))

