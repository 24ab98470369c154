"""A declared job table looked up in the catalog once: its relation, its columns quoted from the
catalog (nothing configured is ever put into SQL as text), and which indexes lead with what."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from psycopg import sql

from dbcore.sqlfiles import Queries

from ..configmodel import DeclaredQueue
from ..failures import NotAsDeclared
from .base import Identifier, is_relation_name

if TYPE_CHECKING:
    from ..session import ProbeConnection

JOBTABLE_SQL = Queries("probes", "sources/jobtable.sql")
_TIMESTAMPS = ("timestamp", "date")


@dataclass(frozen=True, slots=True)
class ResolvedTable:
    """A declared table, resolved through the catalog once (names quoted from the catalog)."""

    relid: int
    qualified: str
    relkind: str  # r table, p partitioned parent, v view, m materialized view
    can_select: bool
    rls_active: bool
    parts: dict[str, sql.Composable]  # the {fields} of jobtable.sql
    state_type: sql.Composable | None
    state_type_name: str | None  # the state column's type, for enum labels
    queue_type: sql.Composable | None
    indexed: bool  # order_by leads an index
    queue_indexed: bool  # queue_column leads an index (the distinct-queue skip scan needs it)
    state_queue_indexed: bool  # an index leads with (state_column, queue_column): a skip scan per state


def resolve(conn: ProbeConnection, declared: DeclaredQueue, what: str = "table") -> ResolvedTable:
    """Look the table and every configured column up in the catalog; NotAsDeclared (a LookupError)
    says what is missing, `what` naming the table as the declaration does (`dead_letter_table`).
    Nothing configured is ever put into SQL as text."""
    # Not a relation's name at all: not found, without asking (to_regclass raises on it before 16).
    row = conn.execute(JOBTABLE_SQL["resolve"], {"table": declared.table}).fetchone() if is_relation_name(declared.table) else None
    if row is None:
        raise NotAsDeclared(f"{what} {declared.table!r} not found (or not a table or view)")
    columns = {r["name"]: r for r in conn.execute(JOBTABLE_SQL["columns"], {"relid": row["relid"]})}

    def column(key: str, value: str | None, types: tuple[str, ...] = ()) -> sql.Composable:
        if value is None:
            return sql.Literal(None)
        if value not in columns:
            raise NotAsDeclared(f"{key} column {value!r} not in {what} {declared.table}")
        if types and not str(columns[value]["type"]).startswith(types):
            raise NotAsDeclared(f"{key} column {value!r} of {declared.table} is {columns[value]['type']}, not a timestamp")
        return Identifier(value)

    def type_of(value: str | None) -> sql.Composable | None:
        if value is None:
            return None
        return Identifier(columns[value]["type_schema"], columns[value]["type_name"])

    table = Identifier(row["schema_name"], row["table_name"])
    parts: dict[str, sql.Composable] = {
        "table": table,
        "order": column("order_by", declared.order_by),
        "age": column("age_column", declared.age_column, _TIMESTAMPS),
        "visible": column("visible_at_column", declared.visible_at_column, _TIMESTAMPS),
        "not_before": column("not_before_column", declared.not_before_column, _TIMESTAMPS),
        "state": column("state_column", declared.state_column),
        "locked": column("in_flight_when_not_null", declared.in_flight_when_not_null),
        "attempts": column("attempts_column", declared.attempts_column),
        "max_attempts": (column("max_attempts_column", declared.max_attempts_column)
                         if declared.max_attempts_column else sql.Literal(declared.max_attempts)),
        "queue_column": column("queue_column", declared.queue_column),
    }
    pairs = [(r["name"], r["second"]) for r in conn.execute(JOBTABLE_SQL["leading_index_columns"], {"relid": row["relid"]})]
    leading = {first for first, _ in pairs}
    return ResolvedTable(
        relid=row["relid"],
        qualified=table.as_string(conn),
        relkind=row["relkind"],
        can_select=row["can_select"],
        rls_active=bool(row["rls_active"]),
        parts=parts,
        state_type=type_of(declared.state_column),
        state_type_name=(Identifier(columns[declared.state_column]["type_schema"], columns[declared.state_column]["type_name"])
                         .as_string(conn) if declared.state_column and columns[declared.state_column]["typtype"] == "e" else None),
        queue_type=type_of(declared.queue_column),
        indexed=declared.order_by in leading or row["relkind"] == "v",
        queue_indexed=declared.queue_column in leading if declared.queue_column else False,
        state_queue_indexed=bool(declared.state_column and declared.queue_column
                                 and (declared.state_column, declared.queue_column) in pairs),
    )
