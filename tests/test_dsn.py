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


# -- issue 15: masking with the parsers, property-tested ------------------------------------

from urllib.parse import quote  # noqa: E402

from hypothesis import HealthCheck, assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from sqlalchemy.engine import URL  # noqa: E402

from dbcore.database import mask_dsn  # noqa: E402

# Any printable password, with the characters that broke the pattern-based mask in plenty.
PASSWORDS = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")) | st.sampled_from("?#/@:'\\ %&=+;$"),
                    min_size=1, max_size=24)


def _kv_quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def forms(password: str) -> dict[str, str]:
    """The same login in every DSN form a user may type, the password encoded as each form needs."""
    encoded = quote(password, safe="")
    return {
        "uri": f"postgresql://ops:{encoded}@db1:5432/app?sslmode=require",
        "multi-host-uri": f"postgresql://ops:{encoded}@db1:5432,db2:5433/app?target_session_attrs=read-write",
        "uri-password-param": f"postgresql://ops@db1/app?password={encoded}",
        "key-value": f"host=db1 port=5432 dbname=app user=ops password={_kv_quote(password)}",
        "sqlalchemy": URL.create("postgresql+psycopg", username="ops", password=password, host="db1", port=5432,
                                 database="app").render_as_string(hide_password=False),
        "sqlalchemy-query": f"postgresql+psycopg://ops@db1/app?password={encoded}",
    }


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None, derandomize=True)
@given(PASSWORDS, PASSWORDS)
def test_the_masked_dsn_does_not_depend_on_the_password(first, second):
    """Whatever the password, the shown DSN is the same: nothing of it can be read back."""
    for form, dsn in forms(first).items():
        assert mask_dsn(dsn) == mask_dsn(forms(second)[form]), form
        assert "***" in mask_dsn(dsn), form


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789?#/!$&()*+,;=~", min_size=6, max_size=20))
def test_a_password_typed_raw_in_a_uri_is_never_shown(password):
    # Typed unencoded: libpq reads some of these (pa?ss) and not others (pa/ss reads as a host).
    dsn = f"postgresql://ops:{password}@db1:5432/app"
    assume(password not in "postgresql://ops:***@db1:5432/app" and "@" not in password)
    assert password not in mask_dsn(dsn)
