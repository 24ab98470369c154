"""SQL Server's compile layer: what SQLAlchemy makes of queuetop's T-SQL before pyodbc sends it.
No server is involved; the mssql+pyodbc dialect compiles every statement exactly as a live
session would (MssqlDialect.bind, then `text()`), so a placeholder that would not bind, or a
colon in a literal read as one, fails here."""

from __future__ import annotations

import ast

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects.mssql import pyodbc as mssql_pyodbc

from dbcore import sqlfiles
from dbcore.mssql import MssqlDialect

from .conftest import REPO

DIALECT = MssqlDialect()
ENGINE = sqlfiles.load("queues", "mssql", "queries.sql")
PROBE_FILES = sorted(p.relative_to(REPO / "probes" / "sql" / "mssql").as_posix()
                     for p in (REPO / "probes" / "sql" / "mssql").rglob("*.sql"))
PROBES = {f"{file}:{name}": text for file in PROBE_FILES for name, text in sqlfiles.load("probes", "mssql", file).items()}


def _compiled(statement: str) -> sa.engine.Compiled:
    # pyodbc's own paramstyle (qmark), as the live engine compiles with it.
    return sa.text(DIALECT.bind(statement)).compile(dialect=mssql_pyodbc.dialect(paramstyle="qmark"))


@pytest.mark.parametrize("name", sorted(ENGINE))
def test_every_engine_statement_binds_its_parameters_as_pyodbc_markers(name):
    statement = ENGINE[name].replace("{table}", "[queuetop].[q_x]").replace("{channel_payload}", "N'x'")
    compiled = _compiled(statement)
    names = sqlfiles.PLACEHOLDER.findall(statement)
    # pyodbc's paramstyle is qmark: one ? per use of a placeholder, in order, each bound by name.
    assert list(compiled.positiontup or []) == names, name
    assert str(compiled).count("?") >= len(names)
    assert "%(" not in str(compiled) and "%%" not in str(compiled)


@pytest.mark.parametrize("name", sorted(PROBES))
def test_every_probe_statement_binds_its_parameters_as_pyodbc_markers(name):
    statement = PROBES[name].format(table="[queuetop].[q_x]")  # the probes fill {table} with str.format
    compiled = _compiled(statement)
    assert list(compiled.positiontup or []) == sqlfiles.PLACEHOLDER.findall(statement), name
    assert "%(" not in str(compiled)


def test_the_probe_files_are_all_here():
    assert {"locks.sql", "connections.sql", "queues.sql", "server.sql", "sources/reference.sql"} <= set(PROBE_FILES)
    assert len(PROBES) >= 25


def test_colons_in_literals_are_not_taken_for_parameters():
    compiled = _compiled("SELECT CONVERT(time, '12:30:00') AS t, N'a::b' AS s, x FROM t WHERE id = %(id)s AND n LIKE 'a%%'")
    assert list(compiled.positiontup or []) == ["id"]
    assert "'12:30:00'" in str(compiled) and "N'a::b'" in str(compiled) and "LIKE 'a%'" in str(compiled)


def test_with_for_update_skip_locked_is_the_trap_the_design_note_describes():
    """SQLAlchemy compiles `with_for_update(skip_locked=True)` to no lock hint at all on SQL
    Server: a dequeue written that way would hand one row to every consumer. queuetop's
    dequeues are T-SQL with explicit hints (tests/test_mssql_sql.py checks them), and no
    module builds one with SQLAlchemy."""
    table = sa.table("q", sa.column("id"))
    compiled = str(sa.select(table).with_for_update(skip_locked=True).compile(dialect=mssql_pyodbc.dialect()))
    assert "READPAST" not in compiled.upper() and "UPDLOCK" not in compiled.upper()
    for path in sorted(p for package in ("dbcore", "queues", "probes", "bench", "tui") for p in (REPO / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            assert not (isinstance(node, ast.Attribute) and node.attr == "with_for_update"), path
