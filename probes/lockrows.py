"""The locks probe's rows (locks.sql's `picture`: one statement, rows of five kinds) made into
what the lock tree is built from: each waiter with what its kind of wait needs from the granted
locks, the blockers' sessions, the prepared transactions and the advisory locks."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from operator import itemgetter
from typing import Any

from .locklabels import advisory_key
from .locks import TARGET_COLUMNS, target_of
from .model import AppLock


def may_be_shared(row: dict, waiters: set[int]) -> bool:
    """Whether the row a waiter waits for may be locked by several transactions (a multixact), from
    the ROW SHARE and ROW EXCLUSIVE locks on its table (locks.sql's row_lock, only when anyone holds
    ROW SHARE there; in this database only). A multixact holds at least one SELECT ... FOR locker
    (ROW SHARE): another session than the one waited for, waiting for nothing, holds ROW SHARE; or
    the one waited for holds ROW SHARE and another ROW EXCLUSIVE (an UPDATE beside FOR KEY SHARE)."""
    table_locks = row.get("row_table_locks")
    if not table_locks or row.get("row_relation") is None or row.get("lock_type") != "transactionid":
        return False
    owners = set(row["blocked_by"])  # a transaction id's wait: its owner
    idle = {pid: mode for pid, mode in table_locks if pid not in waiters and pid != row["pid"]}
    share = {pid for pid, mode in table_locks if mode == "RowShareLock"}
    if any(mode == "RowShareLock" and pid not in owners for pid, mode in idle.items()):
        return True
    return bool(owners & share) and any(pid not in owners for pid in idle)


def picture_parts(rows: Iterable[dict]) -> tuple[list[dict], dict[int, dict], list[dict], list[dict], tuple[AppLock, ...]]:
    """locks.sql's `picture`, by kind: (the waiters, each with what its kind of wait needs from the
    granted locks; the blockers' sessions by pid; the granted locks; the prepared transactions,
    the oldest first; the advisory locks, the waits first). A waiter for a transaction id gets its
    row (`row_relation_oid`, `row_page`, `row_tuple`, `row_relation`, `row_mode`: its tuple lock)
    and, when anyone holds ROW SHARE on that table, `row_table_locks` ((pid, mode) of each ROW SHARE
    and ROW EXCLUSIVE lock there), or else `held_tables` (the tables it holds a row-level lock on);
    a waiter for anything but a row or a transaction gets `holders` ((pid, mode) of each granted
    lock on what it waits for)."""
    waiting_rows: list[dict] = []
    others: dict[int, dict] = {}
    granted: list[dict] = []
    advisory: list[dict] = []
    prepared: list[dict] = []
    for row in rows:
        kind = row["kind"]
        if kind == "w":
            if row["blocked_by"]:  # a wait that ended between pg_locks and pg_blocking_pids has none
                waiting_rows.append(row)
        elif kind == "s":
            others[row["pid"]] = row
        elif kind == "l":
            granted.append(row)
        elif kind == "a":
            advisory.append(row)
        else:
            prepared.append({"gid": row["gid"], "owner": row["owner"], "database": row["database"], "xid": row["transactionid"],
                             "age_s": row["xact_age_s"]})
    of_pid: dict[int | None, list[dict]] = {}
    on_target: dict[tuple, list[dict]] = {}
    for lock in granted:
        of_pid.setdefault(lock["pid"], []).append(lock)
        on_target.setdefault(_target(lock), []).append(lock)
    for row in waiting_rows:
        row["row_relation_oid"] = row["row_page"] = row["row_tuple"] = row["row_relation"] = row["row_mode"] = None
        row["row_table_locks"] = row["held_tables"] = row["holders"] = None
        lock_type = row["lock_type"]
        if lock_type == "transactionid":
            mine = of_pid.get(row["pid"], ())
            tuples = [g for g in mine if g["lock_type"] == "tuple"]
            if tuples:
                held = min(tuples, key=lambda g: (g["relation_oid"], g["page"], g["tuple"]))
                row["row_relation_oid"], row["row_page"], row["row_tuple"] = held["relation_oid"], held["page"], held["tuple"]
                row["row_relation"], row["row_mode"] = held["relation"], held["mode"]
                table = [(g["pid"], g["mode"]) for g in on_target.get(_table_target(held), ())
                         if g["pid"] is not None and g["mode"] in ("RowShareLock", "RowExclusiveLock")]
                if any(mode == "RowShareLock" for _pid, mode in table):
                    row["row_table_locks"] = table
            else:  # an INSERT waiting on a unique key: the tables it writes, once each (no index)
                row["held_tables"] = sorted({g["relation"] for g in mine if g["lock_type"] == "relation" and g["relkind"] in ("r", "p")
                                             and g["mode"] in ("RowExclusiveLock", "RowShareLock") and g["relation"]}) or None
        elif lock_type not in ("tuple", "virtualxid"):
            row["holders"] = [(g["pid"], g["mode"]) for g in on_target.get(_target(row), ()) if g["pid"] not in (None, row["pid"])]
    prepared.sort(key=lambda p: (-(p["age_s"] or 0.0), p["gid"]))
    app_locks = sorted(app_locks_of({**r, "resource": (advisory_key(r) or "").removeprefix("advisory ") or None, "principal": None,
                                     "owner_type": None} for r in advisory),
                       key=lambda lock: (lock.granted, lock.resource or "", lock.pid))
    return waiting_rows, others, granted, prepared, tuple(app_locks)


# target_of() for the picture's rows, which have every column.
_target = itemgetter(*TARGET_COLUMNS)


def _table_target(tuple_lock: dict) -> tuple:
    """target_of() the table a tuple lock's row is in."""
    return target_of({"lock_type": "relation", "database_oid": tuple_lock["database_oid"], "relation_oid": tuple_lock["relation_oid"]})


def app_locks_of(rows: Iterable[Mapping[str, Any]]) -> tuple[AppLock, ...]:
    """Application locks held or waited for (advisory locks; sp_getapplock's on SQL Server)."""
    return tuple(
        AppLock(pid=r["pid"], resource=r["resource"], mode=r["mode"], granted=bool(r["granted"]), wait_s=r["wait_s"],
                application=r["application_name"], database=r["database"], owner_type=r["owner_type"],
                principal=r["principal"])
        for r in rows
    )
