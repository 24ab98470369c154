"""The named-query loader, and that the engine's SQL files hold every query the code uses."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dbcore import sqlfiles

from .conftest import REPO


def test_sections_are_split_by_name_and_comments_dropped():
    text = "-- file comment\n-- name: first\n-- why\nSELECT 1;\n\n-- name: second\nSELECT 2\nFROM t;\n"
    assert sqlfiles.parse_sections(text) == {"first": "SELECT 1;", "second": "SELECT 2\nFROM t;"}


def test_duplicate_and_empty_sections_are_rejected():
    with pytest.raises(ValueError, match="twice"):
        sqlfiles.parse_sections("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;\n")
    with pytest.raises(ValueError, match="empty"):
        sqlfiles.parse_sections("-- name: a\n-- only a comment\n")


def test_every_query_named_in_the_code_exists():
    queries = sqlfiles.load("queues", "postgresql", "queries.sql")
    used = set()
    for path in (REPO / "queues").rglob("*.py"):
        text = path.read_text()
        used.update(re.findall(r'queries\(\)\["(\w+)"\]', text))
        used.update(re.findall(r'(?:statement|_bound|_sql)\("(\w+)"\)', text))
    assert used, "the scan found no query names"
    assert sorted(used - set(queries)) == []


def test_dialect_directories_define_the_same_query_names():
    root = Path(REPO / "queues" / "sql")
    dialects = {d.name: sqlfiles.load("queues", d.name, "queries.sql") for d in root.iterdir() if (d / "queries.sql").exists()}
    assert "postgresql" in dialects
    names = {name: set(q) for name, q in dialects.items()}
    reference = names["postgresql"]
    assert {name: sorted(reference ^ found) for name, found in names.items() if found != reference} == {}


def test_queue_queries_have_no_stray_braces():
    # `{table}` is the only format field; any other brace would break psycopg.sql formatting.
    for name, text in sqlfiles.load("queues", "postgresql", "queries.sql").items():
        fields = set(re.findall(r"\{(\w*)\}", text))
        assert fields <= {"table", "channel_payload"}, (name, fields)
