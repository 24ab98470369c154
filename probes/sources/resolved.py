"""A declared job table looked up in the catalog once: its relation, its columns quoted from the
catalog (nothing configured is ever put into SQL as text), and which indexes lead with what."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from psycopg import sql

from dbcore.sqlfiles import Queries

from ..configmodel import DeclaredQueue, FilterValue
from ..failures import NotAsDeclared
from .base import Identifier, is_relation_name

if TYPE_CHECKING:
    from ..session import ProbeConnection

JOBTABLE_SQL = Queries("probes", "sources/jobtable.sql")
_TIMESTAMPS = ("timestamp", "date")
# One term of an order: a column, then ASC or DESC, then NULLS FIRST or LAST (each optional; the
# words allow-listed here, the column looked up in the catalog).
_ORDER_TERM = re.compile(r"(?P<column>.+?)(?:\s+(?P<direction>ASC|DESC))?(?:\s+NULLS\s+(?P<nulls>FIRST|LAST))?\s*",
                         re.IGNORECASE | re.DOTALL)
_DESC, _NULLS_FIRST = 1, 2  # pg_index.indoption's bits


class OrderTerm(NamedTuple):
    column: str
    descending: bool
    nulls_first: bool

    def reversed(self) -> OrderTerm:
        return OrderTerm(self.column, not self.descending, not self.nulls_first)


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
    indexed: bool  # an index serves the order (led by it, or by the queue column and then it)
    queue_indexed: bool  # queue_column leads an index (the distinct-queue skip scan needs it)
    state_queue_indexed: bool  # an index leads with (state_column, queue_column): a skip scan per state
    order: tuple[OrderTerm, ...] = ()
    # The bound values of parts["rows"] (a declared filter of the table's rows: dead_letter_where).
    rows_params: dict[str, Any] = field(default_factory=dict)


def resolve(conn: ProbeConnection, declared: DeclaredQueue, what: str = "table",
            rows: tuple[tuple[str, tuple[FilterValue, ...]], ...] = (), rows_key: str = "dead_letter_where") -> ResolvedTable:
    """Look the table and every configured column up in the catalog; NotAsDeclared (a LookupError)
    says what is missing, `what` naming the table as the declaration does (`dead_letter_table`).
    `rows`: a filter of the rows that count (column -> values; `rows_key` names it in errors),
    parts["rows"] with its values in `rows_params`. Nothing configured is ever put into SQL as text."""
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
    order = order_terms(declared.order_by, columns)
    for term in order:
        column("order_by", term.column)
    rows_filter, rows_params = _rows_filter(rows, columns, rows_key, f"{what} {declared.table}", declared.table)
    parts: dict[str, sql.Composable] = {
        "table": table,
        "order": _order_sql(order),
        "order_reversed": _order_sql(tuple(term.reversed() for term in order)),
        "rows": rows_filter,
        "age": column("age_column", declared.age_column, _TIMESTAMPS),
        "visible": column("visible_at_column", declared.visible_at_column, _TIMESTAMPS),
        "not_before": column("not_before_column", declared.not_before_column, _TIMESTAMPS),
        "state": column("state_column", declared.state_column),
        "locked": column("in_flight_when_not_null", declared.in_flight_when_not_null),
        "attempts": column("attempts_column", declared.attempts_column),
        "max_attempts": (column("max_attempts_column", declared.max_attempts_column)
                         if declared.max_attempts_column else sql.Literal(declared.max_attempts)),
        "queue_column": column("queue_column", declared.queue_column),
        "created": column("created_column", declared.created_column, _TIMESTAMPS),
        "finished_at": column("finished_column", declared.finished_column, _TIMESTAMPS),
    }
    indexes = [(list(r["columns"]), list(r["options"])) for r in conn.execute(JOBTABLE_SQL["index_keys"], {"relid": row["relid"]})]
    leading = {keys[0] for keys, _ in indexes if keys}
    pairs = {(keys[0], keys[1]) for keys, _ in indexes if len(keys) > 1}
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
        indexed=row["relkind"] == "v" or any(_serves(keys, options, order, declared.queue_column) for keys, options in indexes),
        queue_indexed=declared.queue_column in leading if declared.queue_column else False,
        state_queue_indexed=bool(declared.state_column and declared.queue_column
                                 and (declared.state_column, declared.queue_column) in pairs),
        order=order,
        rows_params=rows_params,
    )


def order_terms(order_by: str | tuple[str, ...], columns: dict[str, Any]) -> tuple[OrderTerm, ...]:
    """The declared order as terms: a column (one of `columns`, the table's: a name that is a
    column is one whole, whatever it ends with), ASC (the default) or DESC, NULLS FIRST or LAST
    (by default as PostgreSQL puts them: last ascending, first descending). A term whose column is
    not there keeps its whole text as the column, for the error to name."""
    out = []
    for text in (order_by,) if isinstance(order_by, str) else order_by:
        match = _ORDER_TERM.fullmatch(text.strip())
        if text in columns or match is None:
            out.append(OrderTerm(text, False, False))
            continue
        descending = (match["direction"] or "").upper() == "DESC"
        nulls_first = (match["nulls"] or ("FIRST" if descending else "LAST")).upper() == "FIRST"
        out.append(OrderTerm(match["column"] if match["column"] in columns else text.strip(), descending, nulls_first))
    return tuple(out)


def _order_sql(order: tuple[OrderTerm, ...]) -> sql.Composable:
    """ORDER BY's list for the terms, every direction and NULLS said (the column quoted)."""
    return sql.SQL(JOBTABLE_SQL["list_separator"] + " ").join(
        sql.SQL(JOBTABLE_SQL["descending"] if term.descending and term.nulls_first
                else JOBTABLE_SQL["descending_nulls_last"] if term.descending
                else JOBTABLE_SQL["ascending_nulls_first"] if term.nulls_first
                else JOBTABLE_SQL["ascending"]).format(column=Identifier(term.column))
        for term in order)


def _serves(keys: list[str | None], options: list[int], order: tuple[OrderTerm, ...], queue_column: str | None) -> bool:
    """Whether an index (its key columns and their indoption) reads rows in `order`, or in its
    exact reverse (a backward scan): led by the order's columns, or by the queue column and then
    them (the head is one queue's)."""
    for skip in (0, 1) if queue_column is not None and keys and keys[0] == queue_column else (0,):
        found = [OrderTerm(name, bool(option & _DESC), bool(option & _NULLS_FIRST))
                 for name, option in zip(keys[skip:skip + len(order)], options[skip:skip + len(order)], strict=True)
                 if name is not None]  # (an expression is no column of the order)
        if found == list(order) or found == [term.reversed() for term in order]:
            return True
    return False


_KINDS = {"N": (int, "whole numbers"), "B": (bool, "true or false")}


def _rows_filter(rows: tuple[tuple[str, tuple[FilterValue, ...]], ...], columns: dict[str, Any], key: str, where: str,
                 table: str) -> tuple[sql.Composable, dict[str, Any]]:
    """A declared filter (`rows`: column -> its values) as a condition over the table's row: each
    column quoted from the catalog, its values bound as a parameter (`rows_<n>`) cast to its type.
    A column not there, or values of a kind the column cannot hold, is NotAsDeclared."""
    conditions: list[sql.Composable] = []
    params: dict[str, Any] = {}
    for n, (name, values) in enumerate(rows):
        if name not in columns:
            raise NotAsDeclared(f"{key} column {name!r} not in {where}")
        info = columns[name]
        kind, says = _KINDS.get(info["category"], (str, "strings"))
        if not all(isinstance(v, kind) and (kind is bool or not isinstance(v, bool)) for v in values):
            raise NotAsDeclared(f"{key} column {name!r} of {table} is {info['type']}: give it {says}")
        params[f"rows_{n}"] = list(values)
        conditions.append(sql.SQL(JOBTABLE_SQL["column_is_any"]).format(
            column=Identifier(name), values=sql.Placeholder(f"rows_{n}"),
            type=Identifier(info["type_schema"], info["type_name"])))
    if not conditions:
        return sql.SQL(JOBTABLE_SQL["every_row"]), params
    condition = conditions[0]
    for other in conditions[1:]:
        condition = sql.SQL(JOBTABLE_SQL["both"]).format(first=condition, second=other)
    return condition, params
