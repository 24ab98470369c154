"""Reading a DSN (SQLAlchemy URLs, libpq URIs and key=value strings) into a `Target`, and
masking its secrets for anything printed: `resolve_target`, `mask_dsn`, `secrets_of`,
`hide_secrets`, `has_password`.

SQLAlchemy's URL parser is used so that `postgresql+psycopg://` URLs work as users expect; a
libpq URI or key=value string is read by libpq's own parser (through psycopg).
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, quote_plus, urlencode

import psycopg
from psycopg import conninfo as pg_conninfo
from psycopg import pq
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from .errors import UsageError, first_line
from .redact import MASK, is_secret_key, mask_raw, suspected_secrets
from .target import Target

ENV_DSN = "QUEUETOP_DSN"

# libpq URI schemes; anything of the form `word+driver://` is a SQLAlchemy URL.
_LIBPQ_SCHEMES = ("postgresql://", "postgres://")
_SQLALCHEMY_URL = re.compile(r"^[A-Za-z][A-Za-z0-9]*(\+[A-Za-z0-9_]+)?://")


def has_password(target: Target) -> bool:
    """Whether the DSN itself carries a secret (rather than ~/.pgpass, PGPASSWORD or a service)."""
    return bool(_secret_values(target.conninfo)) if _readable(target.conninfo) else True


# -- reading a DSN, and what may be shown of it -----------------------------------------------
#
# Nothing said about a DSN quotes a parser's message: libpq's and SQLAlchemy's quote the text
# they could not read, password and all ("unexpected spaces found in "pa ss..."", "invalid
# literal for int() with base 10: 'ss:word...'"). What is shown is the DSN rebuilt from what the
# parser read, with every secret as *** (or, for a DSN no parser could read, the text with all
# that may be secret cut out: dbcore/redact.py), and a reason in queuetop's own words.


class _Unreadable(Exception):
    """A DSN no parser reads as a person would. `why` is queuetop's wording; `name`, a key the
    parser named, is quoted only where the masked DSN shows it as a key (so never a piece of a
    password that a parser took for a key)."""

    def __init__(self, why: str, name: str | None = None) -> None:
        super().__init__(why)
        self.why, self.name = why, name

    def reason(self, masked: str) -> str:
        name = self.name
        shown = bool(name) and not is_secret_key(name or "") and re.search(
            rf"(?:^|[\s?&]){re.escape(name or '')}\s*=", masked) is not None
        return self.why.format(name=f' "{name}"' if shown else "")


# libpq's messages for a string it cannot read (fe-connect.c), each told in our words.
_LIBPQ_REASONS: tuple[tuple[re.Pattern[str], str], ...] = tuple((re.compile(pattern), why) for pattern, why in (
    (r'^missing "=" after', "a word without = (a value holding a space is quoted: key='a b')"),
    (r"^unterminated quoted string", "a quoted value is not closed"),
    (r'^invalid connection option "(?P<name>[^"]*)"', "libpq knows no option{name}"),
    (r"^unexpected spaces found", "a space in a URI is written %20"),
    (r"^invalid percent-encoded token", "a % in a URI begins an escape: % itself is written %25"),
    (r"^forbidden value %00", "%00 is not allowed"),
    (r'matching "\]" in IPv6 host address', "an IPv6 address opened with [ is not closed with ]"),
    (r"^IPv6 host address may not be empty", "an IPv6 address [] is empty"),
    (r"^unexpected character", "a host is followed by something other than :port, / or ?"),
    (r'^extra key/value separator "=" in URI query parameter: "(?P<name>[^"]*)"',
     "an = in the value of a query parameter{name} is written %3D"),
    (r'^missing key/value separator "="', "a query parameter without ="),
    (r'^invalid URI query parameter: "(?P<name>[^"]*)"', "libpq knows no query parameter{name}"),
))
_AT_SIGN = ("an @ other than the one before the host: in a user name, password, database name or query value "
            "write @ as %40 (and / in a user name or password as %2F)")


def _libpq_unreadable(exc: BaseException) -> _Unreadable:
    message = first_line(exc)
    for pattern, why in _LIBPQ_REASONS:
        match = pattern.search(message)
        if match:
            return _Unreadable(why, match.groupdict().get("name"))
    return _Unreadable("libpq cannot read it")


def _check_at_signs(text: str, *, libpq: bool) -> None:
    """Refuse a URI with a raw @ besides the one that ends its userinfo: a password holding one
    is read by both parsers as ending at it, the rest becoming the host, port or database that
    errors then show (`u:pa@ss@h` is host `ss@h` to libpq and SQLAlchemy alike)."""
    rest = text.split("://", 1)[1]
    if libpq:  # libpq's userinfo ends at the first @, unless a / comes first (fe-connect.c)
        end = next((i for i, c in enumerate(rest) if c in "@/"), -1)
        separator = end if end >= 0 and rest[end] == "@" else -1
    else:  # SQLAlchemy's URL pattern (sqlalchemy/engine/url.py), its userinfo part
        match = re.match(r"[^:/]*(?::[^@]*)?@", rest)
        separator = match.end() - 1 if match else -1
    if any(c == "@" and i != separator for i, c in enumerate(rest)):
        raise _Unreadable(_AT_SIGN)


def _read(text: str) -> tuple[dict[str, str], URL | None]:
    """What the parser that will use `text` reads in it: libpq's parameters (and no URL) for a
    libpq URI or key=value string; for a SQLAlchemy URL, the URL (and libpq's parameters for a
    PostgreSQL one, empty for another database). Raises _Unreadable, never the parser's error."""
    if text.startswith(_LIBPQ_SCHEMES) or not _SQLALCHEMY_URL.match(text):
        try:
            params = pg_conninfo.conninfo_to_dict(text)
        except psycopg.Error as exc:
            raise _libpq_unreadable(exc) from None
        except Exception:  # a NUL, a string psycopg will not encode: nothing of it is quoted either
            raise _Unreadable("libpq cannot read it") from None
        if text.startswith(_LIBPQ_SCHEMES):
            _check_at_signs(text, libpq=True)
        return {key: str(value) for key, value in params.items()}, None
    try:
        url = make_url(text)
    except ArgumentError:
        raise _Unreadable("SQLAlchemy cannot read it as a URL") from None
    except ValueError:  # int() of what the URL pattern took for the port
        raise _Unreadable("its port is not a number") from None
    except Exception:
        raise _Unreadable("SQLAlchemy cannot read it as a URL") from None
    _check_at_signs(text, libpq=False)
    if url.get_backend_name() not in ("postgresql", "postgres"):
        return {}, url
    try:
        params = pg_conninfo.conninfo_to_dict(_url_to_conninfo(url))
    except psycopg.Error as exc:  # a query key libpq does not know
        raise _libpq_unreadable(exc) from None
    return {key: str(value) for key, value in params.items()}, url


def _readable(text: str) -> bool:
    try:
        _read(text.strip())
    except _Unreadable:
        return False
    return True


@functools.cache
def _libpq_secret_keywords() -> frozenset[str]:
    """The keywords the loaded libpq itself marks as secret ('*' in PQconndefaults: password,
    sslpassword, oauth_client_secret in libpq 18)."""
    try:
        return frozenset(option.keyword.decode() for option in pq.Conninfo.get_defaults() if option.dispchar == b"*")
    except Exception:  # an old libpq, a stub: the names alone decide
        return frozenset()


def _is_secret(key: str) -> bool:
    return key in _libpq_secret_keywords() or is_secret_key(key)


def _odbc(text: str) -> tuple[str, list[str]]:
    """An ODBC connection string (`odbc_connect=`), masked, and its secrets. A secret value in
    braces (PWD={a;b}) ends at its closing brace; one without ends, for the driver, at the next
    `;`, but a person may have meant more (PWD=a;b): all after it is hidden too. So is all after
    a brace never closed."""
    shown: list[str] = []
    secrets: list[str] = []
    index = 0
    while index < len(text):
        equals = text.find("=", index)
        if equals < 0:
            shown.append(text[index:])
            break
        key, start = text[index:equals], equals + 1
        close = start
        braced = text[start:].lstrip().startswith("{")
        if braced:  # {a;b}, a } inside written }}
            close = text.index("{", start) + 1
            while (close := text.find("}", close)) >= 0 and text[close + 1:close + 2] == "}":
                close += 2
            if close < 0:
                rest = text[start:]
                return ";".join([*shown, f"{key}={MASK}"]), [rest, *rest.split(";"), *suspected_secrets(rest)]
        end = text.find(";", close)
        end = len(text) if end < 0 else end
        value = text[start:end]
        if not _is_secret(key.strip()):
            shown.append(f"{key}={value}")
        elif braced:
            shown.append(f"{key}={MASK}")
            inner = value.strip()
            secrets += [value, inner[1:inner.rfind("}")].replace("}}", "}")]
        else:
            rest = text[start:]
            return ";".join([*shown, f"{key}={MASK}"]), [value, rest, *rest.split(";")]
        index = end + 1
    return ";".join(shown), secrets


def _secret_values(text: str) -> list[str]:
    """The secrets a parser reads in a DSN: every secret parameter of libpq's, a URL's password
    and secret query values, the secret attributes of an ODBC connection string."""
    params, url = _read(text.strip())
    values = [value for key, value in params.items() if _is_secret(key)]
    if url is not None:
        values.append(url.password or "")
        for key, value in url.query.items():
            for item in (value,) if isinstance(value, str) else value:
                if _is_secret(key):
                    values.append(item)
                elif key.lower() == "odbc_connect":
                    values += _odbc(item)[1]
    return [value for value in values if value]


def mask_dsn(dsn: str) -> str:
    """`dsn` as it may be printed or logged: every secret (password, sslpassword, ...: see
    _is_secret) replaced by ***, whatever form the DSN is in. Every DSN queuetop shows goes
    through here.

    The DSN is read with the parser that will use it (libpq's, through psycopg, for a URI or a
    key=value string; SQLAlchemy's for a URL), not guessed at with a pattern: a password may
    hold `?`, `#`, `/`, quotes or backslashes. A DSN with a secret is shown rebuilt from what
    the parser found; one the parser cannot read, or reads otherwise than a person would (an @
    in a password: _check_at_signs), is shown with everything that could be secret cut out."""
    text = dsn.strip()
    try:
        params, url = _read(text)
    except _Unreadable:
        return mask_raw(text)
    if url is not None:
        return _mask_url(url)
    if not any(_is_secret(key) for key in params):
        return text
    if text.startswith(_LIBPQ_SCHEMES):
        return _libpq_uri(params)
    return pg_conninfo.make_conninfo("", **{key: MASK if _is_secret(key) else value for key, value in params.items()})


def _mask_url(url: URL) -> str:
    """A SQLAlchemy URL with its password, secret query values and an ODBC string's secrets as ***."""
    masked: dict[str, str | tuple[str, ...]] = {}
    for key, value in url.query.items():
        if _is_secret(key):
            masked[key] = MASK
        elif key.lower() == "odbc_connect":
            masked[key] = _odbc(value)[0] if isinstance(value, str) else tuple(_odbc(item)[0] for item in value)
    if masked:
        url = url.update_query_dict(masked)
    return url.render_as_string(hide_password=True).replace("%2A%2A%2A", MASK)


def _libpq_uri(params: dict[str, str]) -> str:
    """A libpq URI rebuilt from its parsed parameters, every secret as ***."""
    hosts = [h for h in params.get("host", "").split(",") if h]
    ports = params["port"].split(",") if params.get("port") else []
    sockets = any(h.startswith("/") for h in hosts)
    netloc = ""
    if hosts and not sockets:
        netloc = ",".join(_uri_host(h) + (f":{port}" if (port := ports[i] if len(ports) > 1 else ports[0] if ports else "") else "")
                          for i, h in enumerate(hosts))
    userinfo = quote(params.get("user", ""), safe="") + (f":{MASK}" if "password" in params else "")
    query = {key: MASK if _is_secret(key) else value for key, value in params.items()
             if key not in ("user", "password", "dbname") and (sockets or key not in ("host", "port"))}
    return (f"postgresql://{userinfo}{'@' if userinfo else ''}{netloc}"
            + (f"/{quote(params['dbname'], safe='')}" if params.get("dbname") else "")
            + (f"?{urlencode(query, safe='/,*')}" if query else ""))


def _uri_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host  # an IPv6 address


def secrets_of(dsn: str) -> list[str]:
    """Every string that must never be shown of `dsn` (as typed, or a Target's conninfo), longest
    first: each secret its parser reads, as typed and in each form it may be printed in
    (percent-encoded, quoted), and all the raw text may hide (dbcore/redact.py)."""
    try:
        values, forms = _secret_values(dsn), set()
    except _Unreadable:  # no parser's word on where its secrets are: all that may be one
        values, forms = [], set(suspected_secrets(dsn.strip()))
    for value in values:
        forms.update((value, quote(value, safe=""), quote(value), quote_plus(value), repr(value)[1:-1],
                      value.replace("\\", "\\\\").replace("'", "\\'")))
    return sorted((form for form in forms if form), key=len, reverse=True)


def hide_secrets(text: str, secrets: Iterable[str]) -> str:
    """`text` with each of `secrets` (secrets_of's) replaced by ***."""
    for secret in sorted(secrets, key=len, reverse=True):
        if secret and secret != MASK:
            text = text.replace(secret, MASK)
    return text


def resolve_target(dsn: str | None) -> Target | None:
    """Turn --dsn / QUEUETOP_DSN into a Target; None means "use the embedded server"."""
    raw = dsn if dsn is not None else os.environ.get(ENV_DSN)
    if raw is None or not raw.strip():
        return None
    raw = raw.strip()
    masked = mask_dsn(raw)
    try:
        url = _read(raw)[1]
    except _Unreadable as exc:
        raise UsageError(f"invalid DSN {masked}: {exc.reason(masked)}") from None
    if url is None:
        # libpq URI or key=value: kept as typed (libpq's PGHOST, PGSERVICE, ~/.pgpass go on
        # working for whatever the string leaves out).
        return Target(dialect="postgresql", conninfo=raw, masked=masked)
    backend = url.get_backend_name()
    if backend in ("postgresql", "postgres"):
        return Target(dialect="postgresql", conninfo=_url_to_conninfo(url), masked=masked)
    if backend == "mssql":
        from .mssql import parse_url

        parse_url(raw, masked)
        return Target(dialect="mssql", conninfo=raw, masked=masked)
    raise UsageError(f"unsupported database {backend!r} in DSN {masked}")


def _url_to_conninfo(url: URL) -> str:
    params: dict[str, Any] = {}
    if url.host:
        params["host"] = url.host
    if url.port:
        params["port"] = url.port
    if url.username:
        params["user"] = url.username
    if url.password is not None:
        params["password"] = url.password
    if url.database:
        params["dbname"] = url.database
    for key, value in url.query.items():
        # SQLAlchemy keeps repeated keys as tuples; libpq wants comma-separated lists (host=a,b).
        params[key] = ",".join(value) if isinstance(value, tuple) else value
    return pg_conninfo.make_conninfo(**params)

