"""DSN resolution: every accepted form becomes the right libpq conninfo, masked when shown."""

from __future__ import annotations

import pytest
from psycopg.conninfo import conninfo_to_dict

from dbcore.database import resolve_target
from dbcore.errors import UsageError


def test_no_dsn_means_embedded(monkeypatch):
    monkeypatch.delenv("QUEUETOP_DSN", raising=False)
    assert resolve_target(None) is None
    assert resolve_target("  ") is None


def test_environment_variable_is_used(monkeypatch):
    monkeypatch.setenv("QUEUETOP_DSN", "host=/tmp dbname=x")
    target = resolve_target(None)
    assert conninfo_to_dict(target.conninfo) == {"host": "/tmp", "dbname": "x"}


def test_sqlalchemy_url_becomes_conninfo_with_query_parameters():
    target = resolve_target("postgresql+psycopg://ops:p%40ss@db1:6432/app?sslmode=require&application_name=x")
    assert conninfo_to_dict(target.conninfo) == {
        "host": "db1", "port": "6432", "user": "ops", "password": "p@ss", "dbname": "app",
        "sslmode": "require", "application_name": "x",
    }
    assert "p@ss" not in target.masked and "p%40ss" not in target.masked and "***" in target.masked
    assert "p@ss" not in repr(target) and "p@ss" not in str(target)


def test_sqlalchemy_url_with_unix_socket_host():
    target = resolve_target("postgresql+psycopg://postgres@/app?host=/var/run/postgresql")
    assert conninfo_to_dict(target.conninfo) == {"host": "/var/run/postgresql", "user": "postgres", "dbname": "app"}


@pytest.mark.parametrize(
    "dsn",
    ["postgresql://u:pw@h/db?host=/sock", "postgres://u:pw@h:5/db", "host=/sock dbname=db user=u password=pw"],
)
def test_libpq_forms_pass_through_unchanged(dsn):
    target = resolve_target(dsn)
    assert target.conninfo == dsn and target.dialect == "postgresql"
    assert "pw" not in target.masked.replace("***", "")


@pytest.mark.parametrize("dsn", ["host=x port", "mysql+pymysql://u@h/db", "not a dsn at all = ="])
def test_invalid_or_unsupported_dsn_is_a_usage_error(dsn):
    with pytest.raises(UsageError):
        resolve_target(dsn)
