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


# -- issue 24: errors about a DSN are ours, never a parser's --------------------------------

from dbcore.database import MASK as SHOWN_MASK  # noqa: E402


@pytest.mark.parametrize(
    "dsn, reason",
    [
        ("postgresql://u:Zq1 Zq2@h/db", "a space in a URI is written %20"),
        ("postgresql://u:Zq1%zzZq2@h/db", "a % in a URI begins an escape"),
        ("postgresql://u:Zq1@[::1/db", "an IPv6 address opened with [ is not closed with ]"),
        ("host=h password='Zq1", "a quoted value is not closed"),
        ("host=h password=Zq1 Zq2", "a word without ="),
        ("host=h password=Zq1 Zq2=x", "libpq knows no option"),  # not "Zq2": it is a piece of the password
        ("host=h bogus=1 password=Zq1", 'libpq knows no option "bogus"'),  # shown before the password: named
        ("postgresql://u:Zq1@h/db?bogus=1", 'libpq knows no query parameter "bogus"'),
        ("postgresql+psycopg://u:Zq1@h/db?bogus=1", 'libpq knows no option "bogus"'),
        ("postgresql+psycopg://u:Zq1@Zq2:Zq3Zq4Zq5Zq6Zq7Zq8Zq9Zq0@h/db", "its port is not a number"),
        ("postgresql+psycopg://u:Zq1@[::1/db", "its port is not a number"),
    ],
)
def test_an_invalid_dsn_is_told_in_our_words_with_the_dsn_masked(dsn, reason):
    with pytest.raises(UsageError) as raised:
        resolve_target(dsn)
    message = str(raised.value)
    assert message.startswith(f"invalid DSN {mask_dsn(dsn)}: ") and reason in message, message
    assert "Zq" not in message and SHOWN_MASK in message


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://u:Zq1@Zq2@h/db",  # libpq and SQLAlchemy: password "Zq1", host "Zq2@h"
        "postgresql://u:Zq1/Zq2@h/db",  # libpq: host "u", port "Zq1"
        "postgresql+psycopg://u:Zq1@Zq2@h/db",
        "postgresql://u:Zq1@h/db?application_name=me@home",  # unambiguous to libpq, not to a reader: %40
    ],
)
def test_a_raw_at_sign_besides_the_one_before_the_host_is_refused(dsn):
    with pytest.raises(UsageError, match="%40") as raised:
        resolve_target(dsn)
    assert "Zq" not in str(raised.value)


def test_an_encoded_at_sign_is_read_as_typed():
    target = resolve_target("postgresql://u:Zq1%40Zq2@h/db?application_name=me%40home")
    assert conninfo_to_dict(target.conninfo)["password"] == "Zq1@Zq2" and "Zq" not in target.masked


@pytest.mark.parametrize(
    "dsn, hidden",
    [
        ("host=h sslpassword=hunter22 dbname=app", "hunter22"),
        ("postgresql://u@h/app?sslpassword=hunter22&sslmode=require", "hunter22"),
        ("postgresql+psycopg://u@h/app?sslpassword=hunter22", "hunter22"),
        ("host=h oauth_client_secret=hunter22", "hunter22"),
        ("mssql+pyodbc://u@h/db?driver=FreeTDS&PWD=hunter22", "hunter22"),
        ("mssql+pyodbc:///?odbc_connect=DRIVER%3D%7BFreeTDS%7D%3BSERVER%3Dh%3BPWD%3D%7Bhun%3Bter22%7D", "ter22"),
    ],
)
def test_every_secret_key_is_masked_not_only_password(dsn, hidden):
    target = resolve_target(dsn)
    assert hidden not in target.masked and SHOWN_MASK in target.masked
