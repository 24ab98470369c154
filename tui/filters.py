"""The dashboard's filter language (`/`, `--filter`, `--min-duration`): terms separated by spaces,
every one of which must hold (AND). Parsed and checked here, without Textual, so that the command
line refuses a bad expression before the dashboard opens, with the same words the dashboard says.

    app:worker  user:ops  db:billing  query:UPDATE  client:10.0  wait:Lock  name:orders
        the field holds the text, in any case (a substring, as a bare word matches)
    state:idle  state:"idle in transaction"  verdict:blocked
        the field is the value, whole, in any case (`state:idle` is not `idle in transaction`:
        an operator asking for idle sessions does not want those holding a transaction open;
        the panels' short form, `idle in xact`, is accepted too)
    pid:1234
        that process, exactly
    dur>5s  dur>=2m  dur<500ms  dur<=1h
        how long it has lasted (ms, s, m, h, d; a bare number is seconds): for a session running
        a query, its query's age; for one idle in a transaction, the transaction's; an idle
        session with no transaction has none, and no `dur` term holds for it (unknown is never 0)
    -app:psql  -idle
        a leading `-` negates the term
    orders  "FOR UPDATE"
        a bare word (quoted: with its spaces) matches when any of the row's text fields holds it,
        as `/` always did; quoting keeps a colon or a leading `-` as text (`"a:b"`, `"-x"`)

A field a panel's rows do not have is refused for that panel (each panel names the fields it
knows: FILTER_FIELDS of tui/widgets/panels/)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from probes.samples import SessionSample

# The kinds of field, by how a term compares: a substring, a whole value, a process id, a duration.
TEXT, EXACT, ID, DURATION = "text", "exact", "id", "duration"

# Every field any panel knows, and its kind; which panel has which: its FILTER_FIELDS.
FIELDS: dict[str, str] = {
    "pid": ID, "app": TEXT, "user": TEXT, "db": TEXT, "state": EXACT, "query": TEXT, "client": TEXT,
    "wait": TEXT, "backend": TEXT, "dur": DURATION, "name": TEXT, "source": TEXT, "kind": TEXT, "table": TEXT,
    "verdict": EXACT, "holder": TEXT,
}
# Longer names a user may type for the same field.
ALIASES = {"application": "app", "database": "db", "duration": "dur", "queue": "name", "process": "pid"}
COMPARISONS = (">=", "<=", ">", "<")
UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?|\.\d+)\s*(ms|s|m|h|d)?", re.IGNORECASE)
# A term: an optional `-`, an optional `field` and operator, then a quoted or a bare value.
_TERM = re.compile(r"""(?P<neg>-(?=\S))?(?:(?P<field>[A-Za-z_]+)(?P<op>>=|<=|>|<|:|=))?"""
                   r"""(?:"(?P<dq>[^"]*)"|'(?P<sq>[^']*)'|(?P<bare>[^\s"']+))""")

_FIELD_ALONE = re.compile(r"[A-Za-z_]+(>=|<=|>|<|:|=)")


class FilterError(ValueError):
    """Why a filter expression is refused: one line, said in the dashboard or on the command line."""


@dataclass(frozen=True, slots=True)
class Term:
    field: str | None  # None: a bare word, matched against every text field of the row
    op: str  # ":" for text, a whole value or a pid; >, >=, < or <= for a duration
    value: str | float | int  # text lowered; a duration in seconds; a pid
    negated: bool = False


@dataclass(frozen=True, slots=True)
class Filter:
    """A parsed expression: its text as typed (what the border shows) and its terms (all must hold)."""

    text: str = ""
    terms: tuple[Term, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.terms)

    @property
    def fields(self) -> frozenset[str]:
        return frozenset(t.field for t in self.terms if t.field is not None)

    def refused_by(self, known: Iterable[str]) -> str | None:
        """Why a panel whose rows have the fields `known` cannot apply it (None: it can)."""
        known = tuple(known)
        missing = sorted(self.fields - set(known))
        if not missing:
            return None
        return f"no field {', '.join(missing)} here; its fields: {', '.join(known)} (and any word)"

    def compile(self, fields: Mapping[str, Callable[[Any], object]], words: Iterable[str]) -> Callable[[Any], bool]:
        """A predicate on a panel's rows: `fields` gets each field's value from a row (a duration
        in seconds, a pid, a text, or a tuple of them: any may match; None: unknown, matches no
        positive term); a bare word looks into the `words` fields. Made once per filter, not per row."""
        if not self.terms:
            return _always
        word_getters = [fields[w] for w in words]
        checks = [_check(term, fields.get(term.field) if term.field else None, word_getters) for term in self.terms]
        if len(checks) == 1:
            return checks[0]
        return lambda row: all(check(row) for check in checks)


EMPTY = Filter()


def _always(_row: object) -> bool:
    return True


def _values(value: object) -> tuple[object, ...]:
    if value is None:
        return ()
    return tuple(v for v in value if v is not None) if isinstance(value, tuple) else (value,)


def _check(term: Term, get: Callable[[Any], object] | None, words: list[Callable[[Any], object]]) -> Callable[[Any], bool]:
    needle: Any = term.value
    if term.field is None:
        def holds(row: Any) -> bool:
            return any(needle in str(v).lower() for get_word in words for v in _values(get_word(row)))
    else:
        assert get is not None, term.field
        kind = FIELDS[term.field]
        if kind == TEXT:
            def holds(row: Any) -> bool:
                return any(needle in str(v).lower() for v in _values(get(row)))
        elif kind == EXACT:
            def holds(row: Any) -> bool:
                return any(needle == str(v).lower() for v in _values(get(row)))
        elif kind == ID:
            def holds(row: Any) -> bool:
                return any(v == needle for v in _values(get(row)))
        else:
            compare = {">": float.__gt__, ">=": float.__ge__, "<": float.__lt__, "<=": float.__le__}[term.op]
            limit = float(needle)

            def holds(row: Any) -> bool:
                return any(compare(float(v), limit) for v in _values(get(row)))  # type: ignore[arg-type]
    if term.negated:
        return lambda row: not holds(row)
    return holds


def parse_duration(text: str) -> float:
    """`5s`, `2m`, `500ms`, `1.5h`, `30` (seconds) as seconds; FilterError if it is none."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise FilterError(f"{text!r} is not a duration (e.g. 500ms, 5s, 2m, 1h)")
    seconds = float(match.group(1)) * UNITS[(match.group(2) or "s").lower()]
    if not math.isfinite(seconds) or seconds > 366 * 86400:
        raise FilterError(f"{text!r} is not a duration of at most a year")
    return seconds


def parse(text: str) -> Filter:
    """The expression typed, parsed; FilterError (one line) if any term is wrong."""
    text = text.strip()
    terms: list[Term] = []
    shown: list[str] = []
    at = 0
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at >= len(text):
            break
        match = _TERM.match(text, at)
        if match is None or (match.end() < len(text) and not text[match.end()].isspace()):
            rest = text[at:].split()[0]  # text[at] is no space: a word starts there
            if rest.count('"') % 2 or rest.count("'") % 2:
                raise FilterError(f"{rest!r}: a quote is not closed")
            raise FilterError(f"{rest!r}: a quoted value must end its term (e.g. query:\"FOR UPDATE\")")
        shown.append(match.group(0))
        terms.append(_term(match))
        at = match.end()
    return Filter(" ".join(shown), tuple(terms))


def _term(match: re.Match[str]) -> Term:
    negated = match.group("neg") is not None
    value = next(v for v in (match.group("dq"), match.group("sq"), match.group("bare")) if v is not None)
    name, op = match.group("field"), match.group("op")
    if name is None:
        if match.group("bare") is not None and _FIELD_ALONE.fullmatch(value):
            raise FilterError(f"{value!r}: the field needs a value (e.g. app:worker, dur>5s)")
        if not value:
            raise FilterError('"": an empty word matches everything; leave it out')
        return Term(None, ":", value.lower(), negated)
    field = ALIASES.get(name.lower(), name.lower())
    term = match.group(0)
    if field not in FIELDS:
        raise FilterError(f"{term!r}: no field {name!r}; the fields are {', '.join(FIELDS)} "
                          f"(quote it to look for the text: \"{name}{op}{value}\")")
    kind = FIELDS[field]
    if kind == DURATION:
        if op not in COMPARISONS:
            raise FilterError(f"{term!r}: {field} compares: {field}>5s, {field}>=2m, {field}<1s, {field}<=500ms")
        try:
            return Term(field, op, parse_duration(value), negated)
        except FilterError as exc:
            raise FilterError(f"{term!r}: {exc}") from None
    if op not in (":", "="):
        raise FilterError(f"{term!r}: {field} takes {field}:VALUE (only dur compares with > and <)")
    if not value:
        raise FilterError(f"{term!r}: {field}: needs a value")
    if kind == ID:
        if not value.isdigit() or len(value) > 10:
            raise FilterError(f"{term!r}: a pid is a whole number")
        return Term(field, ":", int(value), negated)
    return Term(field, ":", value.lower(), negated)


def min_duration_term(seconds: float) -> str:
    """`--min-duration S` as the term it stands for (`dur>=S`), in the filter's words."""
    return f"dur>={seconds:g}s"


def with_min_duration(expression: str | None, seconds: float | None) -> Filter:
    """The Sessions panel's filter from `--filter` and `--min-duration` (both, AND), parsed."""
    parts = [p for p in (expression or "", min_duration_term(seconds) if seconds is not None else "") if p.strip()]
    return parse(" ".join(parts))


# -- sessions: what their fields are, for the Sessions panel, the Locks tree and --min-duration --

# Not running a query: waiting for the client, with or without a transaction open.
_RESTING = frozenset({"idle", "sleeping", "idle in transaction", "idle in transaction (aborted)",
                      "sleeping, open transaction"})


def session_duration(s: SessionSample) -> float | None:
    """How long a session has been at what it does, for `dur` and `--min-duration`: its query's
    age while it runs one; idle in a transaction, the transaction's age (what holds locks and the
    xmin horizon); idle with no transaction, none (it does nothing, for however long)."""
    if s.state in _RESTING:
        return s.xact_age_s
    return s.query_age_s if s.query_age_s is not None else s.xact_age_s
