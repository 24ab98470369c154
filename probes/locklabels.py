"""Lock labels as a DBA would write them: what a waiter wants ("to update a row of t (0,1)"),
the statement's command, the row lock's strength, what a lock is on, an advisory lock's key as
the application passed it (the lock tree, locks.py, puts them on each waiter)."""

from __future__ import annotations

import re
from functools import lru_cache

MODE_WORDS = {
    "AccessShareLock": "ACCESS SHARE", "RowShareLock": "ROW SHARE", "RowExclusiveLock": "ROW EXCLUSIVE",
    "ShareUpdateExclusiveLock": "SHARE UPDATE EXCLUSIVE", "ShareLock": "SHARE", "ShareRowExclusiveLock": "SHARE ROW EXCLUSIVE",
    "ExclusiveLock": "EXCLUSIVE", "AccessExclusiveLock": "ACCESS EXCLUSIVE",
}
# A row lock's strength, by the mode of the tuple lock taken for it (heapam.c, tupleLockExtraInfo).
ROW_STRENGTH = {"AccessShareLock": "FOR KEY SHARE", "RowShareLock": "FOR SHARE", "ExclusiveLock": "FOR NO KEY UPDATE",
                "AccessExclusiveLock": "FOR UPDATE"}
# The row lock strengths, weakest first, and which each conflicts with (the documentation's
# "Conflicting Row-Level Locks"); pg_get_multixact_members's words for what each member holds.
ROW_STRENGTHS = ("FOR KEY SHARE", "FOR SHARE", "FOR NO KEY UPDATE", "FOR UPDATE")
_ROW_CONFLICTS = {"FOR KEY SHARE": {"FOR UPDATE"}, "FOR SHARE": {"FOR NO KEY UPDATE", "FOR UPDATE"},
                  "FOR NO KEY UPDATE": {"FOR SHARE", "FOR NO KEY UPDATE", "FOR UPDATE"}, "FOR UPDATE": set(ROW_STRENGTHS)}
MULTIXACT_MODES = {"keysh": "FOR KEY SHARE", "sh": "FOR SHARE", "fornokeyupd": "FOR NO KEY UPDATE", "nokeyupd": "FOR NO KEY UPDATE",
                   "forupd": "FOR UPDATE", "upd": "FOR UPDATE"}


def row_strength(tuple_lock_mode: str | None) -> str | None:
    return ROW_STRENGTH.get(tuple_lock_mode or "")


def row_locks_conflict(held: str | None, wanted: str | None) -> bool:
    """Whether a row lock of strength `held` makes one of strength `wanted` wait (either unknown: yes)."""
    return held is None or wanted is None or held in _ROW_CONFLICTS[wanted]


# The commands a statement's first words may name (an allow-list: nothing else of a query's text is
# repeated), and those named by their first two words or more.
_COMMANDS = frozenset({
    "SELECT", "INSERT", "UPDATE", "DELETE", "MERGE", "TRUNCATE", "LOCK", "ALTER", "CREATE", "DROP", "VACUUM", "ANALYZE",
    "CLUSTER", "REINDEX", "REFRESH", "COPY", "COMMENT", "GRANT", "REVOKE", "CALL", "DO", "WITH", "EXPLAIN", "TABLE", "VALUES",
})
_OBJECTS = frozenset({"TABLE", "INDEX", "SEQUENCE", "VIEW", "MATERIALIZED", "TYPE", "SCHEMA", "FUNCTION", "DATABASE",
                      "TRIGGER", "EXTENSION", "DOMAIN", "POLICY", "PUBLICATION", "SUBSCRIPTION", "ROLE", "CONCURRENTLY", "FULL"})
_SKIPPED = frozenset({"UNIQUE", "OR", "REPLACE", "TEMP", "TEMPORARY", "UNLOGGED", "IF", "NOT", "EXISTS", "ONLY"})
_COMMENTS = re.compile(r"--[^\n]*|/\*.*?\*/", re.S)
_WORDS = re.compile(r"[A-Za-z]+")


@lru_cache(maxsize=4096)  # the waiters of a pile-up run the same few statements, cycle after cycle
def statement_of(query: str | None) -> str | None:
    """The command a statement runs, in capitals, as a DBA names it: UPDATE, TRUNCATE, ALTER TABLE,
    CREATE INDEX CONCURRENTLY, LOCK TABLE; the data-changing one of a WITH. None for a query not
    seen (another role's) or not recognised."""
    if not query:
        return None
    words = [w.upper() for w in _WORDS.findall(_COMMENTS.sub(" ", query[:2000]))[:64]]
    while words and words[0] in ("EXPLAIN", "ANALYZE", "VERBOSE") and len(words) > 1 and words[1] in _COMMANDS | {"ANALYZE", "VERBOSE"}:
        words = words[1:]
    if not words or words[0] not in _COMMANDS:
        return None
    first = words[0]
    if first == "WITH":
        return next((w for w in words if w in ("UPDATE", "DELETE", "INSERT", "MERGE")), "SELECT")
    if first in ("TABLE", "VALUES"):
        return "SELECT"
    if first in ("ALTER", "CREATE", "DROP", "LOCK", "REFRESH", "REINDEX", "VACUUM", "COMMENT"):
        named = [first]
        for word in words[1:6]:
            if word in _SKIPPED:
                continue
            if word not in _OBJECTS:
                break
            named.append(word)
            if word not in ("MATERIALIZED", "INDEX", "TABLE"):  # INDEX and TABLE may be followed by CONCURRENTLY
                break
        if first == "LOCK" and len(named) == 1:
            named.append("TABLE")  # LOCK [TABLE] name
        return " ".join(named)
    return first


def wants_of(row: dict, relation: str | None, ctid: str | None, query: str | None) -> str | None:
    """What a waiting statement wants, from its own point of view, for "wants ...": "to update a row
    of p6 (0,1)", "ACCESS EXCLUSIVE on t10 to TRUNCATE", "advisory lock 42". Two sessions that
    want the same thing read the same, whichever internal lock each waits on (the first waiter of
    a row waits on the locker's transaction id, the next ones on the row's tuple lock)."""
    lock_type, mode = row.get("lock_type"), row.get("mode")
    statement = statement_of(query)
    to = f" to {statement}" if statement else ""
    if lock_type in ("transactionid", "tuple"):
        strength = row_strength(row.get("row_mode") if lock_type == "transactionid" else mode)
        if relation is None:
            if lock_type == "transactionid" and row.get("transactionid"):
                return f"transaction {row['transactionid']} to end" + (f" ({statement})" if statement else "")
            return None
        where = f"a row of {relation}" + (f" {ctid}" if ctid else "")
        if strength in ("FOR NO KEY UPDATE", "FOR UPDATE") and statement in ("UPDATE", "DELETE", "MERGE"):
            return f"to {(statement or '').lower()} {where}"
        if strength:
            return f"to lock {where} {strength}" + (to if statement not in (None, "SELECT") else "")
        if statement == "INSERT":  # no row lock: a duplicate of a key another open transaction wrote
            return f"to insert into {relation} a key another transaction wrote"
        return f"{where}{to}"
    if lock_type == "advisory":
        key = (relation or "").removeprefix("advisory ")
        return f"advisory lock {key}" + (" (shared)" if mode == "ShareLock" else "")
    if lock_type == "safe snapshot":  # no lock: a READ ONLY DEFERRABLE transaction's start
        return "a safe snapshot (SERIALIZABLE READ ONLY DEFERRABLE)"
    if lock_type == "virtualxid":
        return f"transaction {row.get('virtualxid') or '?'} to end" + (f" ({statement})" if statement else "")
    words = MODE_WORDS.get(mode or "", mode or "a lock")
    if lock_type == "relation":
        return f"{words} on {relation or '?'}{to}"
    return f"{words} on {lock_type or '?'}" + (f" of {relation}" if relation else "") + to


def lock_target(row: dict) -> tuple[str | None, str | None]:
    """(relation, row ctid) a waiter waits on, as an operator would name them.

    A row wait is a wait for the other transaction's id (lock type transactionid, no relation):
    the table and row come from the tuple lock the waiter holds, or else from the one table it
    holds a row-level lock on. A relation of another database is `db:oid N`: its OID means
    nothing here. An advisory lock is its key as the application passed it."""
    lock_type = row.get("lock_type")
    if lock_type == "advisory":
        return advisory_key(row), None
    if lock_type == "transactionid":
        if row.get("row_relation_oid") is not None:
            name = row.get("row_relation") or f"{row.get('database') or '?'}:oid {row['row_relation_oid']}"
            return name, f"({row['row_page']},{row['row_tuple']})"
        tables = row.get("held_tables") or []
        return (tables[0] if len(tables) == 1 else None), None
    if row.get("relation_oid") is not None:
        name = row.get("relation") or f"{row.get('database') or 'db ' + str(row.get('database_oid'))}:oid {row['relation_oid']}"
        ctid = f"({row['page']},{row['tuple']})" if lock_type == "tuple" and row.get("page") is not None else None
        return name, ctid
    return row.get("relation"), None


def advisory_key(row: dict) -> str | None:
    """The key as the application passed it. pg_advisory_lock(bigint) is stored as classid (high
    32 bits) and objid (low 32 bits), objsubid 1; the two-int4 form as classid, objid, objsubid 2.
    Both are stored unsigned: -5 would read 18446744073709551611."""
    if row.get("lock_type") != "advisory" or row.get("classid") is None:
        return None
    high, low = int(row["classid"]), int(row["objid"])
    if row.get("objsubid") == 1:
        key = (high << 32) | low
        return f"advisory {key - (1 << 64) if key >= 1 << 63 else key}"
    return f"advisory ({_int4(high)}, {_int4(low)})"


def _int4(value: int) -> int:
    return value - (1 << 32) if value >= 1 << 31 else value


def visible_text(value: str | None) -> str | None:
    # pg_stat_activity's placeholder for what this role may not see.
    return None if value in (None, "<insufficient privilege>") else value
