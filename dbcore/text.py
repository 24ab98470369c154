"""Text from the database made inert: the one rule for every string other people's applications
wrote (queue names, application names, queries, error texts, library payloads) before it reaches
a terminal, a dialog, a notice, the text snapshot or an exporter's label.

A monitor prints what it did not write. `application_name`, a job's queue name or a blocked
session's query can hold terminal escapes (`ESC ] 2 ; title BEL` sets the window title, `ESC [ 2 J`
clears the screen), carriage returns and backspaces that overwrite other cells, bidi overrides that
reorder what follows, and characters a terminal and Rich disagree on the width of. `inert()` shows
each such character escaped (`\\x1b`, `\\u202e`), so the operator sees that it is there and
nothing acts on it. Markup is the other half: Rich reads `[red]` or `[/]` in a *markup* string, so
text from the database is only ever given to widgets as `rich.text.Text` or a plain cell, never as
markup (tui/ holds to that; its tests feed hostile strings through every panel).

The JSON snapshot and recordings keep the original text: JSON escapes control characters itself,
and a name must stay exact to act on it (enqueue to, inspect, terminate).
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

# Categories shown escaped wherever they are: controls (C0, DEL, C1), format characters (bidi
# overrides and isolates, zero-width spaces and joiners, the BOM, soft hyphen), lone surrogates
# (a terminal's encoder would fail on them), line and paragraph separators, unassigned code points
# (a terminal may draw them one or two cells wide), and private use (no width anyone agrees on).
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
# Combining marks draw on the character before them: at the start of a string, that would be
# whatever the terminal drew in the cell to the left (a border, another column).
_COMBINING_CATEGORIES = frozenset({"Mn", "Me", "Mc"})
# The fast path: printable ASCII bar DEL, the common Latin letters, and the symbols a dashboard
# draws itself (dashes and quotes, '…', arrows, math, box drawing, blocks: '│', '▁▅█', '≤',
# '⏸'), none of them escaped nor combining, so that its own cells need no per-character look-up.
_PLAIN = re.compile(r"[\x20-\x7e\u00a0-\u00ac\u00ae-\u024f\u2010-\u2027\u2030-\u205e\u2190-\u23ff\u2500-\u25ff]*")
# What cutting an inert text may leave of an escape at its end: `\`, `\x1`, `\u20`, `\U000e00`.
_PARTIAL_ESCAPE = re.compile(r"\\(x[0-9a-f]{0,1}|u[0-9a-f]{0,3}|U[0-9a-f]{0,7}|)$")


def _escape(char: str) -> str:
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


@lru_cache(maxsize=4096)
def _inert_slow(text: str) -> str:
    out: list[str] = []
    # A combining mark draws on the character before it: with none (the string's start) or an
    # escape before it (it would draw on the escape's last digit), it is escaped too.
    base = False
    for char in text:
        category = unicodedata.category(char)
        if category in _ESCAPED_CATEGORIES or (category in _COMBINING_CATEGORIES and not base):
            out.append(_escape(char))
            base = False
        else:
            out.append(char)
            base = category not in _COMBINING_CATEGORIES or base
    return "".join(out)


def inert(text: object) -> str:
    """`text` as it may be shown on a terminal: every control, format, separator, surrogate,
    unassigned or private-use character, and a combining mark with nothing to combine with,
    written as a Python-style escape (`\\x1b`, `\\u202e`, `\\U000e0001`). Printable text, wide
    characters and combining marks on a base character stay as they are. None is ''."""
    if text is None:
        return ""
    value = text if isinstance(text, str) else str(text)
    if _PLAIN.fullmatch(value):
        return value
    return _inert_slow(value)


def inert_line(text: object, limit: int | None = None) -> str:
    """`inert(text)` on one line: runs of whitespace (newlines, tabs) folded into one space first,
    so a multi-line query reads as one line; cut to `limit` characters with '…' where it is longer
    (never in the middle of an escape)."""
    value = " ".join(("" if text is None else str(text)).split())
    shown = inert(value)
    if limit is None or len(shown) <= limit:
        return shown
    return drop_partial_escape(shown[: max(limit - 1, 0)]) + "…"


def drop_partial_escape(cut: str) -> str:
    """An inert text cut short, without what the cut left of an escape at its end (`\\x1`,
    `\\u20`): half an escape would read as another character."""
    partial = _PARTIAL_ESCAPE.search(cut)
    return cut[: partial.start()] if partial else cut
