"""Secrets in text that no parser has read: a command line (what `ps` shows), a DSN that libpq
or SQLAlchemy cannot read, argparse's messages that quote the command line.

Standard library only: the console script (tui/entry.py) masks its command line with this before
psycopg, SQLAlchemy and Textual are imported. Without a parser there is no telling where a
password ends, so this hides more when in doubt: a URI's userinfo from its first `:` to the
text's last `@`, and everything after a key that may name a secret (`password=`, `sslpassword=`,
ODBC's `PWD=`, a misspelt `pasword=`, percent-encoded or not) to the end of the text.
dbcore/dsn.py masks a DSN its parser could read more precisely, with this as its fallback.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from urllib.parse import unquote, unquote_plus

MASK = "***"

# Keys whose value is a secret, in the keys a parser has read: libpq's `password`, `sslpassword`,
# `oauth_client_secret`, `scram_client_key`, `scram_server_key` (dbcore/dsn.py adds
# whichever keywords the loaded libpq itself marks as secret); SQLAlchemy's query `password`;
# ODBC's `PWD` (`Password` for FreeTDS, `KeyStoreSecret` for Microsoft's driver). Not secrets:
# paths to one (`sslkey`, `passfile`): they are shown, as a reader of the error needs them.
_SECRET_KEY = re.compile(r"passw|pwd|secret|token|scram_\w*key", re.IGNORECASE)
# In text no parser read, any key that may name a secret, misspelt ones included (pasword,
# passwrod, pw): `key=` (or `key %3D`, as a URI query may encode it), the value to the end.
_MAYBE_SECRET = re.compile(r"\w*(?:pas|pw|psw|secret|token|key|cred)\w*(?:\s|\+|%20)*(?:=|%3D|%253D)", re.IGNORECASE)
_SCHEME = re.compile(r"(?<![A-Za-z0-9+.\-])[A-Za-z][A-Za-z0-9+.\-]*:/+")  # also in --dsn=postgresql://...


def is_secret_key(name: str) -> bool:
    """Whether a parsed key (libpq keyword, URL query key, ODBC attribute) names a secret."""
    return _SECRET_KEY.search(name) is not None


def secret_spans(text: str) -> list[tuple[int, int]]:
    """Where `text` may hold a secret, as (start, end) index pairs, sorted and not overlapping."""
    spans: list[tuple[int, int]] = []
    scheme = _SCHEME.search(text)
    start = scheme.end() if scheme else 0
    at = text.rfind("@")
    colon = text.find(":", start)
    if 0 <= colon < at:  # user:password@ as a person reads it, whatever a parser would make of it
        spans.append((colon + 1, at))
    for variant in _decoded(text):
        # Decoding only shortens: where a secret starts in the decoded text, it starts at or
        # after that index in `text`, so hiding from there hides at least all of it.
        match = _MAYBE_SECRET.search(variant)
        if match:
            spans.append((min(match.end(), len(text)), len(text)))
    merged: list[tuple[int, int]] = []
    for begin, end in sorted(spans):
        if merged and begin <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((begin, end))
    return merged


def _decoded(text: str) -> Iterator[str]:
    yield text
    once = unquote(text)
    yield once
    yield unquote(once)  # encoded twice, as a URL inside a URL's query is
    yield unquote_plus(text)


def mask_raw(text: str) -> str:
    """`text` with everything that may be a secret replaced by ***."""
    shown, last = [], 0
    for begin, end in secret_spans(text):
        shown += [text[last:begin], MASK]
        last = end
    return "".join([*shown, text[last:]])


def suspected_secrets(text: str) -> list[str]:
    """The pieces of `text` that may be secrets, as typed and decoded (for scrubbing a message)."""
    found: set[str] = set()
    for begin, end in secret_spans(text):
        piece = text[begin:end]
        found.update(form for form in (piece, unquote(piece), unquote_plus(piece)) if form)
    return sorted(found, key=len, reverse=True)


def mask_arguments(message: str, argv: Sequence[str]) -> str:
    """A message that may quote the command line (argparse's "unrecognized arguments: ...",
    "invalid choice: '...'"), with every argument that may hold a secret masked. Should a piece
    of a secret still be there in a form not foreseen, the message is not shown at all."""
    risky = sorted({arg for arg in argv if mask_raw(arg) != arg}, key=len, reverse=True)
    for arg in risky:
        shown = mask_raw(arg)
        message = message.replace(repr(arg), repr(shown)).replace(arg, shown)
    for arg in risky:
        for piece in suspected_secrets(arg):
            if len(piece) >= 4 and (piece in message or repr(piece)[1:-1] in message):
                return "invalid arguments (not shown: one of them may hold a password)"
    return message
