"""The probes' SQL Server statements (probes/sql/mssql/), checked without a server: none can
run on this machine, so nothing here claims that a statement ran; a live suite has to.

- every section parses with sqlfluff's `tsql` dialect (placeholders bound as T-SQL variables,
  `{table}` as a bracketed name); those it cannot parse are listed with the reason and must
  still fail, and only at the statement listed;
- each file has PostgreSQL's sections (less PG_ONLY, plus MSSQL_ONLY, each with its reason),
  with the same parameters and `{fields}`, and the same result columns in the same order (the
  Python side reads rows by column name);
- every statement is read-only, takes no lock beyond a short shared read, reads a queue's rows
  only through a bounded TOP window that skips held rows, and leaves the probe's own session out;
- every system view is one of an allow-list (with the permission it needs), the ghost-record
  DMV is read only in `ghost_records`, and the index DMVs are never called with a NULL object id
  (which would read every table of the database);
- no PostgreSQL syntax slipped in.

Every check is shown to fail on a wrong example.
"""

from __future__ import annotations

import re

import pytest
from sqlfluff.core import Linter

from dbcore import pgversions, sqlfiles

from .tsql import (
    DML,
    Parse,
    bind_variables,
    code_only,
    column_name,
    depth_zero,
    enclosing_parentheses,
    fails_only_at,
    split_top_level,
    sql_fields,
    tsql_linter,
)

FILES = (
    "server.sql", "queues.sql", "rings.sql", "leases.sql", "locks.sql", "connections.sql", "compaction.sql", "details.sql",
    "sources/reference.sql", "sources/outbox.sql", "sources/inbox.sql",
)
PG = {name: sqlfiles.load("probes", "postgresql", name) for name in FILES}
MSSQL = {name: sqlfiles.load("probes", "mssql", name) for name in FILES}
# Every section, keyed "file:section".
PG_SECTIONS = {f"{name}:{section}": text for name, queries in PG.items() for section, text in queries.items()}
MSSQL_SECTIONS = {f"{name}:{section}": text for name, queries in MSSQL.items() for section, text in queries.items()}

# PostgreSQL probe files with no SQL Server file at all, each with the reason: on SQL Server that
# probe runs no statement and says why in its note (its figures are null: unknown, not none).
PG_ONLY_FILES = {
    "pgbouncer.sql": (
        "PgBouncer's admin console (SHOW POOLS, SHOW DATABASES), read when a --pgbouncer DSN is given: a pooler of "
        "PostgreSQL's protocol, with no counterpart in front of SQL Server."
    ),
    "replication.sql": (
        "The replication probe reads PostgreSQL's standbys (pg_stat_replication) and replication slots "
        "(pg_replication_slots). SQL Server has no slots; its counterpart of a standby, an Always On availability group "
        "replica (sys.dm_hadr_database_replica_states: log send and redo queues), needs VIEW SERVER STATE and could not "
        "be tested here (no SQL Server runs here): MssqlProbes.replication returns null with a note, and `snapshot "
        "--json` says `replication: null` there."
    ),
    "server_stats.sql": (
        "The server_stats probe sums pg_stat_database's counters (transactions, rows inserted, updated, deleted, temp "
        "bytes, blocks, deadlocks) and reads the WAL position and pg_database_size. SQL Server's performance counters "
        "(sys.dm_os_performance_counters: Transactions/sec, Log Bytes Flushed/sec, Number of Deadlocks/sec) count "
        "other things, have no rows per operation, need VIEW SERVER STATE, and could not be tested here: "
        "MssqlProbes.server_stats returns null with a note, and `snapshot --json` says `server_stats: null` there."
    ),
}

# What the Python side fills `{field}`s with: bracket-quoted identifiers.
FIELDS = {"table": "[queuetop].[q_example]"}

# PostgreSQL sections left out on SQL Server, each with the reason. The Python side must not
# call them on SQL Server.
PG_ONLY = {
    "locks.sql:picture": (
        "PostgreSQL's locks probe is one statement, one round trip (issue 30: three cost 1.2x pg_activity's blocking "
        "query): its waiters with pg_blocking_pids, the blockers' sessions, the prepared transactions and their locks, "
        "and the advisory locks, the lists as JSON on the first row. A prepared transaction's waiter is blocked by pid 0 "
        "without saying which, so the Python side matches their locks against the waiter's target and mode. SQL "
        "Server keeps its three statements (waiting, sessions, applocks): folding them with FOR JSON could not be "
        "measured on a real server here, and its orphaned distributed transaction is named by the lock manager itself "
        "(blocking_session_id -2, request_owner_guid), so `waiting` lists the sessions each one blocks."
    ),
    "locks.sql:row_lockers": (
        "Every locker of a row several PostgreSQL transactions share (a multixact), read from the row's xmax with "
        "pg_get_multixact_members: pg_blocking_pids names one of them at a time. SQL Server's lock manager lists every "
        "holder of a row's KEY or RID lock in sys.dm_tran_locks itself, which its `waiting` statement reads."
    ),
    "locks.sql:relation_names": "Relations of another PostgreSQL database named there: SQL Server's object names are read "
                                "with OBJECT_NAME(object_id, database_id) in the statement itself.",
    "locks.sql:table_names": "The schema and name of a table whose shared row row_xmax reads (PostgreSQL only, as row_lockers).",
    "locks.sql:row_xmax": "A row's xmax, a multixact when several PostgreSQL transactions lock it (PostgreSQL only, as row_lockers).",
    "queues.sql:relids": (
        "The OIDs of queue tables whose figures failed before their table was resolved, by name with to_regclass "
        "(which takes no lock: a table held ACCESS EXCLUSIVE is still found). SQL Server's sources find a table's "
        "object id when they detect it; whether a Sch-M lock stops that is not known here (no SQL Server runs here)."
    ),
    "locks.sql:sessions_of": (
        "The sessions of blockers PostgreSQL's picture did not find holding what their waiters wait for (a parallel "
        "worker's leader on 12, which has no leader_pid): SQL Server's `sessions` statement reads every blocker by the "
        "session ids its `waiting` rows name."
    ),
    "server.sql:recovery": (
        "Whether PostgreSQL is a hot standby, and its replay's lag and pause (pg_is_in_recovery, the WAL receive and "
        "replay positions). SQL Server's counterpart, an Always On readable secondary, is told by "
        "sys.fn_hadr_is_primary_replica or sys.dm_hadr_database_replica_states, which need VIEW SERVER STATE and could "
        "not be tested here (no SQL Server runs here): MssqlProbes.recovery says primary and runs no statement."
    ),
    "connections.sql:xmin_horizon": (
        "PostgreSQL's horizon has holders SQL Server lacks (a transaction id without a snapshot, prepared transactions, "
        "replication slots); SQL Server's is the oldest snapshot transaction, already in the connections statement's "
        "xmin_age, which MssqlProbes.xmin_horizon_holder reads."
    ),
}

# SQL Server sections with no PostgreSQL peer, each with the reason.
MSSQL_ONLY = {
    "queues.sql:ghost_records": (
        "PostgreSQL's n_dead_tup is a cheap counter; SQL Server's dead rows are ghost records, which only "
        "sys.dm_db_index_physical_stats counts, by reading pages: table_stats returns NULL and this statement is for "
        "on-demand or slow-schedule use"
    ),
    "connections.sql:version_store": (
        "the xmin horizon's cost on SQL Server: the version store's size (tempdb's, and the database's own with "
        "accelerated database recovery) and the oldest snapshot transaction that holds it back; PostgreSQL shows the "
        "horizon's cost as dead tuples"
    ),
    "locks.sql:waiting": "PostgreSQL reads its waiters in `picture`, one statement (see PG_ONLY)",
    "locks.sql:sessions": "PostgreSQL reads the blockers' sessions in `picture`, one statement (see PG_ONLY)",
    "locks.sql:applocks": "PostgreSQL reads its advisory locks in `picture`, one statement (see PG_ONLY)",
    "server.sql:permission_check": (
        "SQL Server's DMVs need VIEW SERVER STATE (2022: VIEW SERVER PERFORMANCE STATE) or VIEW DATABASE STATE, and "
        "without it show the probe's own session only or fail: the probes must be able to say what they cannot see"
    ),
}

# `{fields}` PostgreSQL uses that SQL Server does not need, with the reason. Its version slots
# (dbcore/sql/postgresql/versions.sql: wait_start, leader_pid, ...) are none of SQL Server's
# business either: they pick the text a PostgreSQL major has (sys.dm_os_waiting_tasks always has
# wait_duration_ms; a parallel query's tasks share their session_id).
VERSION_SLOTS = frozenset(pgversions.fragments())
FIELDS_DROPPED: dict[tuple[str, str], str] = {}
# PostgreSQL parameters SQL Server's text of a section has no use for: {(file:section, parameter): why}.
PARAMS_DROPPED: dict[tuple[str, str], str] = {
    ("connections.sql:sessions", "pile_up"): (
        "Past this many lock waiters PostgreSQL's statement stops asking pg_blocking_pids of each (quadratic in a "
        "pile-up) and the locks probe's picture gives their blockers; SQL Server's reads each session's blocker from "
        "sys.dm_exec_requests, a column, at no such cost."
    ),
}

# Sections sqlfluff's tsql grammar cannot parse: {"file:section": (a text of the statement where
# sqlfluff stops, why)}. Each must still fail to parse, and only from that statement on. None so
# far: every section parses with sqlfluff 4.5.
UNPARSABLE: dict[str, tuple[str, str]] = {}

# Columns that carry JSON text on SQL Server where PostgreSQL returns an array or json (SQL Server
# has no arrays): the Python side decodes them.
JSON_COLUMNS = {
    "locks.sql:waiting": ("blocked_by", "held_tables", "prepared"),
    "compaction.sql:compaction": ("top_groups",),
    "connections.sql:sessions": ("blocked_by",),
}

# Columns whose meaning on SQL Server differs from PostgreSQL's (the files say more).
MEANING_DIFFERS = {
    "server.sql:server_info": {
        "version": "SERVERPROPERTY ProductVersion and Edition",
        "version_num": "major * 100000 + build (Azure SQL Database: major 12)",
        "deadlock_timeout_s": "5.0: the lock monitor's interval; SQL Server has no setting",
    },
    "queues.sql:table_stats": {
        "n_tup_ins": "clustered index leaf_insert_count (metadata cache, may restart); NULL without VIEW DATABASE STATE",
        "n_tup_del": "leaf_delete_count + leaf_ghost_count, as n_tup_ins",
        "n_live_tup": "sys.dm_db_partition_stats / sys.partitions row count",
        "n_dead_tup": "always NULL (ghost_records)",
        "last_vacuum": "always NULL",
        "last_autovacuum": "always NULL",
    },
    "sources/reference.sql:head_window": {
        "head_rows": "rows read (held rows skipped) + X key locks of other sessions",
        "in_flight": "claimed rows + X key locks of other sessions (uncommitted inserts too)",
        "last_head_id": "0 when no row was read",
        "max_id": "last_head_id + rows past the window by the row count (ids come from one shared sequence)",
    },
    "sources/outbox.sql:head_window": {
        "in_flight": "X key locks of other sessions: a relay's batch, and uncommitted business inserts",
        "last_head_id": "max_id when no row was read",
        "relid": "OBJECT_ID",
    },
    "locks.sql:waiting": {
        "leader_pid": "always NULL",
        "blocked_by": "one lock-manager blocker per waiting task; -2 (orphaned DTC) becomes 0",
        "lock_type": "resource_type: KEY, RID, PAGE, OBJECT, APPLICATION, XACT, ...",
        "mode": "request_mode: S, U, X, IX, Sch-M, ...",
        "relation": "schema.table, `applock <name>`, or `<db>:hobt <id>`",
        "page": "always NULL", "tuple": "always NULL", "virtualxid": "always NULL",
        "transactionid": "XACT resource_description", "classid": "always NULL", "objid": "always NULL",
        "objsubid": "always NULL", "row_relation_oid": "always NULL", "row_relation": "always NULL",
        "row_page": "always NULL", "row_tuple": "always NULL",
        "held_tables": "XACT waits only",
        "state": "session status; `sleeping, open transaction`",
        "prepared": "orphaned DTC transactions, each with blocked_pids",
    },
    "locks.sql:sessions": {"leader_pid": "always NULL", "state": "`sleeping, open transaction` etc.",
                           "query": "running statement, else the last batch"},
    "connections.sql:connections": {"state": "`running`, `sleeping`, `sleeping, open transaction`, `dormant`",
                                    "backend_type": "`user process`", "xmin_age": "SECONDS of the oldest snapshot transaction"},
    "connections.sql:max_connections": {"reserved": "0"},
    "connections.sql:sessions": {"leader_pid": "always NULL", "usename": "login_name", "application_name": "program_name",
                                 "client": "client_net_address; `local` for shared memory", "backend_type": "`user process`",
                                 "state": "`sleeping, open transaction` etc.", "query_age_s": "since the running request "
                                 "started, else since the last one ended", "wait_event_type": "Lock/Latch/IO/Client/Other",
                                 "wait_event": "wait_type", "blocked_by": "the request's blocking_session_id, -2 as 0"},
    "details.sql:session": {"usename": "login_name", "wait_event_type": "Lock/Latch/IO/Client/Other",
                            "wait_event": "wait_type"},
    "details.sql:session_locks": {"locktype": "resource_type", "relation": "table and resource_description",
                                  "classid": "always NULL", "objid": "always NULL", "objsubid": "always NULL"},
}

# The system views and functions the probes may read, with the permission each needs.
_SERVER_STATE = "VIEW SERVER STATE (2022: VIEW SERVER PERFORMANCE STATE; Azure SQL Database: VIEW DATABASE STATE)"
_DATABASE_STATE = "VIEW DATABASE STATE (2022: VIEW DATABASE PERFORMANCE STATE), or CONTROL on the table"
SYSTEM_VIEWS = {
    "dm_os_waiting_tasks": _SERVER_STATE,
    "dm_tran_locks": _SERVER_STATE,
    "dm_exec_sessions": _SERVER_STATE + " to see other sessions; without it, only its own",
    "dm_exec_requests": _SERVER_STATE + " to see other sessions; without it, only its own",
    "dm_exec_connections": _SERVER_STATE,
    "dm_exec_sql_text": _SERVER_STATE,
    "dm_tran_session_transactions": _SERVER_STATE,
    "dm_tran_active_transactions": _SERVER_STATE,
    "dm_tran_active_snapshot_database_transactions": _SERVER_STATE,
    "dm_tran_version_store_space_usage": _SERVER_STATE,
    "dm_tran_persistent_version_store_stats": _SERVER_STATE,
    "dm_db_partition_stats": _DATABASE_STATE + " (and VIEW DEFINITION)",
    "dm_db_index_operational_stats": _DATABASE_STATE,
    "dm_db_index_physical_stats": _DATABASE_STATE,
    "partitions": "catalog view: the rows of objects this login may see",
    "tables": "catalog view: the rows of objects this login may see",
    "schemas": "catalog view: the rows of schemas this login may see",
    "indexes": "catalog view: the rows of objects this login may see",
    "databases": "catalog view: this database and master at least",
}
# DMVs that list sessions: a statement reading one leaves the probe's session out, unless it
# looks up the sessions it is given.
SESSION_VIEWS = {"dm_exec_sessions", "dm_exec_requests", "dm_os_waiting_tasks", "dm_tran_locks",
                 "dm_tran_session_transactions", "dm_tran_active_snapshot_database_transactions"}
SESSION_PARAMETERS = {"pid", "pids"}

# Table hints a probe may use: row-level shared reads that skip what others hold.
PROBE_HINTS = {"ROWLOCK", "READPAST", "READCOMMITTEDLOCK", "INDEX"}
QUERY_HINTS = re.compile(r"^\s*MAXDOP\s+1\s*$", re.IGNORECASE)

# Tables that grow with the queues: read only through TOP (n), or MIN/MAX of an index, and
# always skipping rows another transaction holds (READPAST, with READCOMMITTEDLOCK, which
# READPAST needs under READ_COMMITTED_SNAPSHOT).
DEEP_TABLES = ("{table}", "queuetop.outbox", "queuetop.eo_inbox", "queuetop.dead_letters", "queuetop.task_status_deltas")
DEEP_READ_HINTS = {"READPAST", "READCOMMITTEDLOCK"}

# Anything that writes, changes the session or runs code other than a SELECT.
WRITES = {
    "data or schema change": re.compile(
        r"\b(INSERT|UPDATE|DELETE|MERGE|TRUNCATE|CREATE|ALTER|DROP|GRANT|REVOKE|DENY|WRITETEXT|UPDATETEXT|BULK)\b", re.I),
    "SELECT INTO": re.compile(r"\bINTO\b", re.I),
    "code execution": re.compile(r"\b(EXEC|EXECUTE|sp_executesql|OPENROWSET|OPENQUERY|OPENDATASOURCE)\b|\b(sp|xp)_\w+", re.I),
    "server command": re.compile(r"\b(KILL|DBCC|BACKUP|RESTORE|RECONFIGURE|SHUTDOWN|CHECKPOINT|USE|WAITFOR)\b", re.I),
    "transaction control": re.compile(r"\b(COMMIT|ROLLBACK|SAVE)\b|\bBEGIN\s+(TRAN|TRANSACTION|DISTRIBUTED)\b", re.I),
    "a sequence value": re.compile(r"\bNEXT\s+VALUE\s+FOR\b", re.I),
    "session option": re.compile(r"\bSET\s+(?!@|NOCOUNT\s+(ON|OFF)\b)", re.I),
    "error raised": re.compile(r"\b(RAISERROR|THROW|PRINT)\b", re.I),
}

# PostgreSQL syntax that has no place in a T-SQL file, looked for in code (not comments, not
# string literals), with the placeholders already bound as @variables.
POSTGRESQL_SYNTAX = {
    ":: cast": re.compile(r"::"),
    "pg_ name": re.compile(r"\bpg_\w+", re.I),
    "now()": re.compile(r"\bnow\s*\(\s*\)", re.I),
    "LIMIT": re.compile(r"(?<![@\w])LIMIT\s+[@\d(]", re.I),
    "ILIKE": re.compile(r"\bILIKE\b", re.I),
    "FILTER (WHERE": re.compile(r"\bFILTER\s*\(\s*WHERE\b", re.I),
    "= ANY(": re.compile(r"=\s*ANY\s*\(", re.I),
    "LATERAL": re.compile(r"\bLATERAL\b", re.I),
    "extract(epoch": re.compile(r"\bextract\s*\(\s*epoch\b", re.I),
    "current_setting(": re.compile(r"\bcurrent_setting\s*\(", re.I),
    "json_agg / json_build_object": re.compile(r"\bjson_(agg|build_object)\s*\(", re.I),
    "ON true": re.compile(r"\bON\s+true\b", re.I),
    "AS MATERIALIZED": re.compile(r"\bAS\s+MATERIALIZED\b", re.I),
    "regclass": re.compile(r"\bregclass\b", re.I),
    "array": re.compile(r"\bARRAY\s*\[|\w\[\]", re.I),
}


# -- reading SQL text (after tests/test_mssql_sql.py, the engine's) ------------------------------


def _rendered(text: str) -> str:
    """A query as the Python side sends it: `{fields}` filled, `%%` a percent sign."""
    return text.format(**FIELDS).replace("%%", "%")


def _top_expression(code: str) -> str:
    """The expression of the `TOP (...)` that `code` starts with."""
    start = code.index("(")
    depth = 0
    for end in range(start, len(code)):
        depth += {"(": 1, ")": -1}.get(code[end], 0)
        if depth == 0:
            return code[start + 1 : end]
    return ""


def _select_list(statement: str) -> list[str] | None:
    """The result columns of one statement: the SELECT that is the statement itself, after its
    CTEs; None when it returns no rows (no SELECT, or `SELECT @x = ...`, which assigns)."""
    code = statement.strip()
    main = depth_zero(code, DML)
    if main is None or main.group(1).upper() != "SELECT":
        return None
    position = main.end() + re.match(r"\s*(DISTINCT\s+)?", code[main.end() :], re.IGNORECASE).end()
    if re.match(r"TOP\s*\(", code[position:], re.IGNORECASE):
        position = code.index("(", position) + len(_top_expression(code[position:])) + 2
    stop = depth_zero(code, re.compile(r"(FROM|UNION|WHERE|ORDER|OPTION|FOR)\b|;", re.IGNORECASE), position)
    items = split_top_level(code[position : stop.start() if stop else len(code)])
    return None if items and re.match(r"@\w+\s*=", items[0]) else items


def _ctes(code: str) -> dict[str, str]:
    """{name: body} of the CTEs of a statement (PostgreSQL's `AS MATERIALIZED` too)."""
    found = {}
    for match in re.finditer(r"(?:\bWITH|,)\s*(\w+)\s+AS\s+(?:MATERIALIZED\s+)?\(", code, re.IGNORECASE):
        found[match.group(1).lower()] = enclosing_parentheses(code, match.end())
    return found


def _expand_stars(statement: str, items: list[str]) -> list[str]:
    """`alias.*` replaced by the select list of the CTE the alias stands for."""
    ctes = _ctes(statement)
    aliases = {m.group(2).lower(): m.group(1).lower()
               for m in re.finditer(r"\b(?:FROM|JOIN)\s+(\w+)(?:\s+AS)?\s+(\w+)\b", statement, re.IGNORECASE)}
    out = []
    for item in items:
        star = re.fullmatch(r"(\w+)\.\*", item.strip())
        if star:
            body = ctes.get(aliases.get(star.group(1).lower(), star.group(1).lower()))
            assert body is not None, f"cannot expand {item}"
            out.extend(_expand_stars(body, _select_list(body) or []))
        else:
            out.append(item)
    return out


def _statements_of(text: str) -> list[str]:
    """The statements of a section (code only, placeholders bound), split at top-level `;`, with
    the IF/ELSE/BEGIN/END/WHILE words that lead one taken off."""
    code = bind_variables(code_only(text))
    statements, depth, begin = [], 0, 0
    for i, char in enumerate(code):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == ";" and depth == 0:
            statements.append(code[begin : i + 1])
            begin = i + 1
    statements.append(code[begin:])
    return [re.sub(r"^\s*((IF\b.*?\n|BEGIN|END|ELSE|WHILE\b.*?\n)\s*)*", "", s, flags=re.IGNORECASE | re.DOTALL)
            for s in statements if s.strip()]


def _results(text: str) -> list[list[str | None]]:
    """The result column names of every statement of a section that returns rows."""
    found = []
    for statement in _statements_of(text):
        items = _select_list(statement) if DML.search(statement) else None
        if items is not None:
            found.append([column_name(item) for item in _expand_stars(statement, items)])
    return found


# -- what each check looks for -------------------------------------------------------------------


def _writes(text: str) -> list[str]:
    code = bind_variables(code_only(text))
    return [name for name, pattern in WRITES.items() if pattern.search(code)]


_OPENJSON_WITH = re.compile(r"(OPENJSON\s*\((?:[^()]|\([^()]*\))*\))\s*WITH\s*\((?:[^()]|\([^()]*\))*\)", re.IGNORECASE)
_TABLE_HINTS = re.compile(r"\b(?:FROM|JOIN)\s+([\w.\[\]{}@#]+)(?:\s+AS\s+\w+)?\s+WITH\s*\(((?:[^()]|\([^()]*\))*)\)", re.IGNORECASE)


def _hints(text: str) -> list[tuple[str, set[str]]]:
    """(table, its hints) for every table reference that has hints."""
    code = _OPENJSON_WITH.sub(r"\1", code_only(text))
    return [(m.group(1), {re.match(r"\s*(\w+)", item).group(1).upper() for item in split_top_level(m.group(2))})
            for m in _TABLE_HINTS.finditer(code)]


def _hint_problems(text: str) -> list[str]:
    """Hints a probe must not use, and WITH (...) lists that are neither table hints nor
    OPENJSON's column list (which could hide a hint from this check)."""
    code = _OPENJSON_WITH.sub(r"\1", code_only(text))
    problems = [f"{table}: {sorted(hints - PROBE_HINTS)}" for table, hints in _hints(text) if hints - PROBE_HINTS]
    if len(re.findall(r"\bWITH\s*\(", code, re.IGNORECASE)) != len(_TABLE_HINTS.findall(code)):
        problems.append("a WITH (...) list that is not a table's")
    for option in re.findall(r"\bOPTION\s*\(((?:[^()]|\([^()]*\))*)\)", code, re.IGNORECASE):
        problems += [f"OPTION {item}" for item in split_top_level(option) if not QUERY_HINTS.match(item)]
    return problems


def _system_views(text: str) -> set[str]:
    code = code_only(text)
    return {name.lower() for name in re.findall(r"\bsys\s*\.\s*(\w+)", code, re.IGNORECASE)}


def _view_problems(text: str) -> list[str]:
    code = code_only(text)
    problems = sorted(_system_views(text) - set(SYSTEM_VIEWS))
    problems += [f"unqualified {m}" for m in re.findall(r"(?<![.\w])dm_\w+", code, re.IGNORECASE)]
    problems += [f"other database {m}" for m in re.findall(r"\b(?:master|msdb|model|tempdb)\s*\.", code, re.IGNORECASE)]
    problems += ["INFORMATION_SCHEMA"] if re.search(r"\bINFORMATION_SCHEMA\b", code, re.IGNORECASE) else []
    return problems


def _postgresql_syntax(text: str) -> list[str]:
    code = code_only(bind_variables(text))
    return [name for name, pattern in POSTGRESQL_SYNTAX.items() if pattern.search(code)]


def _select_before(code: str, position: int) -> str | None:
    """The select list of the SELECT that owns the FROM at `position` (same parentheses)."""
    depth = 0
    for i in range(position - 1, -1, -1):
        if code[i] == ")":
            depth += 1
        elif code[i] == "(":
            if depth == 0:
                return None
            depth -= 1
        elif depth == 0 and re.match(r"SELECT\b", code[i:], re.IGNORECASE):
            if i == 0 or not (code[i - 1].isalnum() or code[i - 1] == "_"):
                return code[i + len("SELECT") : position]
    return None


def _unbounded_reads(text: str) -> list[str]:
    """Reads of a deep table that neither stop at a TOP (n) nor only take MIN/MAX of an index,
    or that would wait for a row another transaction holds."""
    code = bind_variables(code_only(text))
    problems = []
    for table in DEEP_TABLES:
        for match in re.finditer(rf"\b(FROM|JOIN)\s+{re.escape(table)}(?![\w.])", code, re.IGNORECASE):
            if match.group(1).upper() == "JOIN":
                problems.append(f"{table} joined")
                continue
            columns = _select_before(code, match.start())
            if columns is None:
                problems.append(f"{table}: no SELECT")
                continue
            aggregates = re.sub(r"\b(MIN|MAX)\s*\(\s*[\w.]+\s*\)|\bAS\s+\w+", "", columns, flags=re.IGNORECASE)
            if not re.match(r"\s*(DISTINCT\s+)?TOP\s*\(", columns, re.IGNORECASE) and not re.fullmatch(r"[\s\d+\-*/(),]*", aggregates):
                problems.append(f"{table}: not bounded: SELECT {columns.strip()[:60]}")
            hints = _TABLE_HINTS.match(code, match.start())
            if hints is None or not DEEP_READ_HINTS <= {h.split("(")[0].strip().upper() for h in split_top_level(hints.group(2))}:
                problems.append(f"{table}: without {sorted(DEEP_READ_HINTS)}")
    return problems


def _unguarded_index_dmvs(text: str) -> list[str]:
    """Calls of the index DMVs whose object id is not a variable checked beforehand: a NULL (or
    0) object id makes them read every table of the database."""
    code = bind_variables(code_only(text))
    problems = []
    for match in re.finditer(r"\bdm_db_index_(physical|operational)_stats\s*\(\s*DB_ID\(\)\s*,\s*([^,]+),", code, re.IGNORECASE):
        argument = match.group(2).strip()
        guarded = re.fullmatch(r"@\w+", argument) and re.search(
            rf"\bIF\s+{re.escape(argument)}\s+(IS\s+NOT\s+NULL|>\s*0)\b", code[: match.start()], re.IGNORECASE)
        if not guarded:
            problems.append(match.group(0))
    return problems


def _own_session_kept(key: str, text: str) -> bool:
    """Whether a section reads a session DMV without leaving the probe's own session out."""
    params = set(sqlfiles.PLACEHOLDER.findall(text))
    reads_sessions = bool(_system_views(text) & SESSION_VIEWS)
    return reads_sessions and not (params & SESSION_PARAMETERS) and not re.search(r"<>\s*@@SPID\b", code_only(text))


_CONVERTED = re.compile(r"(CONVERT\s*\(\s*\w+\s*(\(\s*(\d+|max)\s*\))?\s*,\s*|OPENJSON\s*\(\s*)$", re.IGNORECASE)


def _unconverted_parameters(text: str) -> list[str]:
    """Placeholders not converted to an explicit type (the driver would pick one)."""
    code = code_only(text)
    return [m.group(0) for m in sqlfiles.PLACEHOLDER.finditer(code) if not _CONVERTED.search(code[: m.start()])]


def _select_star(text: str) -> bool:
    code = code_only(text)
    return bool(re.search(r"\bSELECT\s+(DISTINCT\s+)?(TOP\s*\([^)]*\)\s*)?\*|\b\w+\.\*", code, re.IGNORECASE))


# -- parsing with sqlfluff -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def linter() -> Linter:
    return tsql_linter([*PG_SECTIONS.values(), *MSSQL_SECTIONS.values()])


@pytest.fixture(scope="module")
def parsed(linter: Linter) -> dict[str, Parse]:
    return {key: Parse(linter, _rendered(text)) for key, text in MSSQL_SECTIONS.items()}


# -- parsing ---------------------------------------------------------------------------------------


def test_every_file_has_sections():
    assert {name: len(queries) for name, queries in MSSQL.items() if not queries} == {}
    assert len(MSSQL_SECTIONS) >= 25


def test_a_parse_that_gives_up_is_detected(linter: Linter):
    for text in ("SELECT id FROM t FOR UPDATE SKIP LOCKED", "SELECT id FROM t WITH (READPASTT)", "SELECT id FROM t WHERE",
                 "SELECT pid FROM x WHERE pid = ANY(@pids::integer[])"):
        assert not Parse(linter, text).ok, text
    good = Parse(linter, "SELECT TOP (1) s.session_id FROM sys.dm_exec_sessions AS s WHERE s.session_id <> @@SPID")
    assert good.ok, good.problems


def test_every_section_parses_as_tsql(parsed: dict[str, Parse]):
    failed = {key: (parse.problems, parse.text[parse.first_unparsable :][:80] if parse.first_unparsable else None)
              for key, parse in parsed.items() if key not in UNPARSABLE and not parse.ok}
    assert failed == {}


def test_each_unparsable_section_still_fails_and_only_there(linter: Linter, parsed: dict[str, Parse]):
    assert all(reason for _, reason in UNPARSABLE.values())
    stale = {key: fails_only_at(parsed[key], marker) for key, (marker, _) in UNPARSABLE.items()}
    assert {key: why for key, why in stale.items() if why} == {}
    # The check itself: a statement sqlfluff cannot parse (WAITFOR (RECEIVE ...)) after one it can.
    text = "SELECT 1 AS one;\nWAITFOR (RECEIVE TOP (1) message_body FROM q), TIMEOUT 10;"
    assert fails_only_at(Parse(linter, text), "WAITFOR") is None
    assert fails_only_at(Parse(linter, "SELECT 1 AS one;"), "SELECT") == "it parses now: take it off the list"


def test_a_batch_of_several_statements_sets_nocount_and_restores_it(parsed: dict[str, Parse]):
    """pyodbc reads the first result of a batch: with row counts on, that could be a count
    rather than the batch's result set. A batch sent without parameters runs at session scope,
    and probe sessions are pooled: the option is restored."""
    batches = {key: parse for key, parse in parsed.items() if parse.statements >= 2}
    wrong = [key for key, parse in batches.items()
             if not (code_only(parse.text).strip().startswith("SET NOCOUNT ON;")
                     and code_only(parse.text).strip().endswith("SET NOCOUNT OFF;"))]
    assert wrong == []
    assert len(batches) >= 5


# -- the two dialects agree ------------------------------------------------------------------------


def test_each_file_has_postgresqls_sections_but_the_listed_ones():
    assert all(reason.strip() for reason in [*PG_ONLY.values(), *MSSQL_ONLY.values()])
    assert set(PG_ONLY) <= set(PG_SECTIONS) and not set(PG_ONLY) & set(MSSQL_SECTIONS)
    assert set(MSSQL_ONLY) <= set(MSSQL_SECTIONS) and not set(MSSQL_ONLY) & set(PG_SECTIONS)
    assert sorted((set(PG_SECTIONS) - set(PG_ONLY)) ^ (set(MSSQL_SECTIONS) - set(MSSQL_ONLY))) == []


def test_the_postgresql_only_files_have_no_sql_server_file_and_a_reason():
    assert all(reason.strip() for reason in PG_ONLY_FILES.values())
    for name in PG_ONLY_FILES:
        assert sqlfiles.load("probes", "postgresql", name), name
        with pytest.raises(FileNotFoundError):
            sqlfiles.load("probes", "mssql", name)
        assert name not in FILES


def test_both_dialects_take_the_same_parameters_and_fields():
    shared = set(PG_SECTIONS) & set(MSSQL_SECTIONS)
    params = {key: (set(sqlfiles.PLACEHOLDER.findall(PG_SECTIONS[key])) - {p for (k, p) in PARAMS_DROPPED if k == key},
                    set(sqlfiles.PLACEHOLDER.findall(MSSQL_SECTIONS[key])))
              for key in shared}
    assert all(key in shared and param in sqlfiles.PLACEHOLDER.findall(PG_SECTIONS[key]) for key, param in PARAMS_DROPPED)
    assert {key: pair for key, pair in params.items() if pair[0] != pair[1]} == {}
    fields = {key: (sql_fields(PG_SECTIONS[key]) - VERSION_SLOTS - {f for (k, f) in FIELDS_DROPPED if k == key},
                    sql_fields(MSSQL_SECTIONS[key]))
              for key in shared}
    assert {key: pair for key, pair in fields.items() if pair[0] != pair[1]} == {}
    assert all((key in shared and field in sql_fields(PG_SECTIONS[key]) and field not in sql_fields(MSSQL_SECTIONS[key]))
               for key, field in FIELDS_DROPPED)
    assert set().union(*(sql_fields(text) for text in MSSQL_SECTIONS.values())) <= set(FIELDS)


def test_both_dialects_return_the_same_columns_in_the_same_order():
    """The Python side reads rows by column name: every shared section returns one result set,
    with PostgreSQL's column names in PostgreSQL's order."""
    differ = {}
    for key in set(PG_SECTIONS) & set(MSSQL_SECTIONS):
        pg, mssql = _results(PG_SECTIONS[key]), _results(MSSQL_SECTIONS[key])
        shapes = {tuple(columns) for columns in mssql}
        if len(pg) != 1 or len(shapes) != 1 or None in pg[0] or list(next(iter(shapes))) != pg[0]:
            differ[key] = (pg, mssql)
    assert differ == {}


def test_the_sql_server_only_sections_return_one_named_result_set():
    shapes = {key: {tuple(columns) for columns in _results(MSSQL_SECTIONS[key])} for key in MSSQL_ONLY}
    assert {key: s for key, s in shapes.items() if len(s) != 1 or None in next(iter(s))} == {}


def test_the_column_reader_reads_ctes_stars_casts_and_branches():
    assert _results("WITH w AS (SELECT a, b AS c FROM t) SELECT w.*, 1 AS d FROM p LEFT JOIN w ON 1 = 1;") == [["a", "c", "d"]]
    assert _results("WITH x AS MATERIALIZED (SELECT 1), w AS (SELECT l.pid FROM l) SELECT w.*, 2 AS e FROM p LEFT JOIN w w ON true") \
        == [["pid", "e"]]
    assert _results("SELECT client_addr::text, x::float8 AS y, count(*) FROM t") == [["client_addr", "y", None]]
    assert _results("SET NOCOUNT ON;\nDECLARE @n int = (SELECT COUNT(*) FROM t);\nIF @n > 0\n    SELECT @n = 1;\n"
                    "SELECT TOP (@n) a, [database] FROM t ORDER BY a;\nSET NOCOUNT OFF;") == [["a", "database"]]
    assert _results("IF @o IS NOT NULL\n    SELECT a FROM t;\nELSE\n    SELECT b AS a WHERE 1 = 0;") == [["a"], ["a"]]
    assert _results("SELECT (SELECT COUNT_BIG(*) FROM t) AS n, x.y FROM x OPTION (MAXDOP 1);") == [["n", "y"]]


def test_the_documented_differences_name_real_columns():
    for table in (JSON_COLUMNS, MEANING_DIFFERS):
        for key, columns in table.items():
            assert set(columns) <= set(_results(MSSQL_SECTIONS[key])[0]), key


# -- read only, shared reads, bounded cost -------------------------------------------------------


def test_every_statement_is_read_only():
    assert {key: found for key, text in MSSQL_SECTIONS.items() if (found := _writes(text))} == {}


def test_the_read_only_check_catches_writes_and_passes_reads():
    for text in ("UPDATE t SET a = 1", "SELECT a INTO #t FROM b", "EXEC sp_who2", "SELECT 1; EXEC (@sql)",
                 "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE", "SET LOCK_TIMEOUT 0", "BEGIN TRAN", "SELECT NEXT VALUE FOR s",
                 "DELETE FROM t", "KILL 53", "MERGE t USING s ON 1 = 1 WHEN MATCHED THEN DELETE;", "TRUNCATE TABLE t",
                 "SELECT 1 FROM OPENROWSET(BULK 'x', SINGLE_CLOB) AS b", "DECLARE @t TABLE (a int); INSERT INTO @t VALUES (1)"):
        assert _writes(text), text
    for text in ("SELECT 1 -- DELETE FROM t", "SELECT N'DROP TABLE x' AS s", "SET @x = 1", "SET NOCOUNT ON;",
                 "SELECT leaf_delete_count, dm_exec_sessions FROM t", "IF @a > 0\n    SET @b = 1;"):
        assert not _writes(text), text


def test_every_hint_is_a_shared_row_read():
    assert {key: problems for key, text in MSSQL_SECTIONS.items() if (problems := _hint_problems(text))} == {}
    used = {hint for text in MSSQL_SECTIONS.values() for _, hints in _hints(text) for hint in hints}
    assert used == PROBE_HINTS


def test_the_hint_check_catches_locking_hints():
    assert _hint_problems("SELECT TOP (1) id FROM t WITH (ROWLOCK, UPDLOCK, READPAST)") == ["t: ['UPDLOCK']"]
    assert _hint_problems("SELECT id FROM t AS x WITH (TABLOCKX)") == ["t: ['TABLOCKX']"]
    assert _hint_problems("SELECT id FROM t WITH (HOLDLOCK)") == ["t: ['HOLDLOCK']"]
    assert _hint_problems("SELECT id FROM t OPTION (MAXDOP 8)") == ["OPTION MAXDOP 8"]
    assert _hint_problems("SELECT id FROM t (NOLOCK) WITH (NOWAIT)") == ["a WITH (...) list that is not a table's"]
    assert _hint_problems("SELECT c.a FROM OPENJSON(@j) WITH (a int, b bigint) AS c JOIN t AS x WITH (READPAST) ON 1 = 1") == []
    assert _hint_problems("SELECT 1; -- FROM t WITH (XLOCK)") == []


def test_queue_rows_are_read_through_a_bounded_window_that_skips_held_rows():
    assert {key: problems for key, text in MSSQL_SECTIONS.items() if (problems := _unbounded_reads(text))} == {}
    reading = {key for key, text in MSSQL_SECTIONS.items() for table in DEEP_TABLES if table in code_only(text)}
    assert len(reading) >= 8


def test_the_bounded_read_check_catches_scans_and_waits():
    assert _unbounded_reads("SELECT COUNT(*) FROM queuetop.outbox AS o WITH (READPAST, READCOMMITTEDLOCK)") \
        == ["queuetop.outbox: not bounded: SELECT COUNT(*)"]
    assert _unbounded_reads("SELECT TOP (10) id FROM queuetop.outbox ORDER BY id") \
        == ["queuetop.outbox: without ['READCOMMITTEDLOCK', 'READPAST']"]
    assert _unbounded_reads("SELECT a FROM x JOIN {table} AS q ON 1 = 1") == ["{table} joined"]
    assert _unbounded_reads("SELECT (SELECT MAX(d.id) - MIN(d.id) + 1 FROM queuetop.dead_letters AS d WITH (READPAST, "
                            "READCOMMITTEDLOCK)) AS span") == []
    assert _unbounded_reads("SELECT TOP (@n) h.id FROM {table} AS h WITH (ROWLOCK, READPAST, READCOMMITTEDLOCK, INDEX(1))") == []
    assert _unbounded_reads("SELECT a FROM queuetop.outbox_archive") == []  # another table


def test_the_index_dmvs_never_get_a_null_object_id():
    calls = {key for key, text in MSSQL_SECTIONS.items() if re.search(r"dm_db_index_\w+_stats", code_only(text))}
    assert calls == {"queues.sql:table_stats", "queues.sql:ghost_records"}
    assert {key: problems for key in calls if (problems := _unguarded_index_dmvs(MSSQL_SECTIONS[key]))} == {}
    assert _unguarded_index_dmvs("SELECT 1 FROM sys.dm_db_index_physical_stats(DB_ID(), OBJECT_ID(@t), NULL, NULL, 'SAMPLED')")
    assert _unguarded_index_dmvs("SELECT 1 FROM sys.dm_db_index_physical_stats(DB_ID(), @o, NULL, NULL, 'SAMPLED')")
    assert not _unguarded_index_dmvs("IF @o IS NOT NULL\n SELECT 1 FROM sys.dm_db_index_physical_stats(DB_ID(), @o, NULL, NULL, 'SAMPLED')")


def test_ghost_records_are_read_only_on_demand():
    """sys.dm_db_index_physical_stats reads pages (and takes an IS lock): never on the fast path."""
    found = {key for key, text in MSSQL_SECTIONS.items() if "dm_db_index_physical_stats" in code_only(text)}
    assert found == {"queues.sql:ghost_records"}
    assert "'SAMPLED'" in MSSQL_SECTIONS["queues.sql:ghost_records"]


def test_the_probes_own_session_is_left_out():
    kept = [key for key, text in MSSQL_SECTIONS.items() if _own_session_kept(key, text)]
    assert kept == []
    # Where PostgreSQL leaves out pg_backend_pid(), SQL Server names @@SPID.
    missing = [key for key, text in PG_SECTIONS.items()
               if "pg_backend_pid()" in code_only(text) and key in MSSQL_SECTIONS and "@@SPID" not in code_only(MSSQL_SECTIONS[key])]
    assert missing == []
    assert _own_session_kept("x", "SELECT s.session_id FROM sys.dm_exec_sessions AS s")
    assert not _own_session_kept("x", "SELECT s.session_id FROM sys.dm_exec_sessions AS s WHERE s.session_id = CONVERT(int, %(pid)s)")
    assert not _own_session_kept("x", "SELECT s.session_id FROM sys.dm_exec_sessions AS s WHERE s.session_id <> @@SPID")


# -- what the statements may name ---------------------------------------------------------------


def test_every_system_view_is_allowed():
    assert {key: problems for key, text in MSSQL_SECTIONS.items() if (problems := _view_problems(text))} == {}
    used = set().union(*(_system_views(text) for text in MSSQL_SECTIONS.values()))
    assert used == set(SYSTEM_VIEWS), "an allowed view is no longer used: take it off the list"
    assert all(SYSTEM_VIEWS.values())


def test_the_view_check_catches_other_views():
    assert _view_problems("SELECT 1 AS x FROM sys.dm_os_ring_buffers AS r") == ["dm_os_ring_buffers"]
    assert _view_problems("EXEC sys.sp_who2") == ["sp_who2"]
    assert _view_problems("SELECT 1 AS x FROM dm_exec_sessions") == ["unqualified dm_exec_sessions"]
    assert _view_problems("SELECT name FROM master.sys.databases") == ["other database master."]
    assert _view_problems("SELECT 1 AS x FROM INFORMATION_SCHEMA.TABLES") == ["INFORMATION_SCHEMA"]
    assert _view_problems("SELECT 1 AS x FROM sys.dm_exec_sessions AS s -- sys.dm_os_ring_buffers") == []


def test_no_postgresql_syntax_in_the_sql_server_files():
    assert {key: found for key, text in MSSQL_SECTIONS.items() if (found := _postgresql_syntax(text))} == {}


def test_the_postgresql_syntax_check_finds_it():
    found = set()
    for text in PG_SECTIONS.values():
        found |= set(_postgresql_syntax(text))
    examples = {"ILIKE": "SELECT 1 WHERE a ILIKE 'x'", "array": "SELECT ARRAY[1, 2]",
                "LATERAL": "SELECT 1 FROM t LEFT JOIN LATERAL (SELECT 1) x ON true", "ON true": "SELECT 1 FROM a JOIN b ON true",
                "json_agg / json_build_object": "SELECT json_agg(json_build_object('a', 1))"}
    for name, text in examples.items():
        assert name in _postgresql_syntax(text), name
    assert found | set(examples) == set(POSTGRESQL_SYNTAX)
    assert _postgresql_syntax("SELECT 1 -- FILTER (WHERE x), now(), pg_locks, in a comment") == []
    assert _postgresql_syntax("SELECT N'a::b' AS x, @limit AS y, N'LCK[_]M[_]%' AS z") == []


def test_every_parameter_is_converted_explicitly():
    assert {key: found for key, text in MSSQL_SECTIONS.items() if (found := _unconverted_parameters(text))} == {}
    assert _unconverted_parameters("SELECT a FROM t WHERE b = %(b)s") == ["%(b)s"]
    assert _unconverted_parameters("SELECT a FROM OPENJSON(%(j)s) AS x WHERE b = CONVERT(nvarchar(128), %(b)s)") == []


def test_a_percent_sign_is_doubled():
    stray = {}
    for key, text in MSSQL_SECTIONS.items():
        left = sqlfiles.PLACEHOLDER.sub("", text).replace("%%", "")
        if "%" in left:
            stray[key] = left[max(0, left.index("%") - 20) : left.index("%") + 20]
    assert stray == {}


def test_no_select_star():
    assert [key for key, text in MSSQL_SECTIONS.items() if _select_star(text)] == []
    assert _select_star("SELECT * FROM t") and _select_star("SELECT TOP (1) * FROM t") and _select_star("SELECT w.* FROM w")
    assert not _select_star("SELECT COUNT(*) AS n, COUNT_BIG(*) AS m FROM t")


def test_the_probe_session_setup_parses_and_only_sets_session_options(linter: Linter):
    """dbcore/sql/mssql/probe_session.sql, run when a probe session opens: three SETs, nothing else."""
    text = sqlfiles.read_script("dbcore", "mssql", "probe_session.sql")
    parse = Parse(linter, text)
    assert parse.ok, parse.problems
    statements = [s.strip() for s in code_only(text).split(";") if s.strip()]
    assert statements == ["SET LOCK_TIMEOUT 100", "SET DEADLOCK_PRIORITY LOW", "SET TRANSACTION ISOLATION LEVEL READ COMMITTED"]
