"""The JSON form of the snapshot model: samples as plain JSON values (`plain`, `jsonable`), and
back, each value checked against the model's type hints (`decoder_for`): what a recording holds
may have been damaged or written by something else, so a value of another shape is a
`ShapeError` naming where and what, never a sample that holds `"depth": "12"`.

probes/model.py's `Snapshot.to_json` and `Snapshot.from_json` are built on this.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING, fields, is_dataclass
from datetime import UTC, datetime
from types import UnionType
from typing import Any, Union, get_args, get_origin, get_type_hints


class ShapeError(ValueError):
    """A snapshot's JSON that is not of the model's shape: where (`queues[3].depth`) and what."""

    def __init__(self, message: str, where: str = "") -> None:
        super().__init__(f"{where}: {message}" if where else message)
        self.message, self.where = message, where

    def within(self, outer: str) -> ShapeError:
        """The same error, seen from the object that holds it."""
        where = outer + ("" if not self.where else self.where if self.where.startswith("[") else "." + self.where)
        return ShapeError(self.message, where)


_FIELDS: dict[type, tuple[str, ...]] = {}


def plain(sample: object) -> dict[str, object]:
    """A sample's fields by name as JSON values, nested samples too (dataclasses.asdict without
    its deep copy, which made to_json cost 14 ms for 120 queues): `jsonable` of the fields, made
    in one pass, and marked as such (`_Json`) so that `jsonable` passes it over whole."""
    cls = type(sample)
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in fields(cls))  # type: ignore[arg-type]
    values = [getattr(sample, name) for name in names]
    return _Json({name: value if type(value) in _SCALARS else _json_value(value) for name, value in zip(names, values, strict=True)})


class _Json(dict):
    """A dict `plain` made: already JSON values, every key a str (`jsonable` returns it as it is)."""

    __slots__ = ()


# Most values are of these exact types (a subclass, an enum, takes the long way): passed over at
# once; with `plain`'s one pass this made the JSON of 5,000 sessions (the flight recorder's, a
# recording's) about half as costly (bench tui).
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _json_value(value: object) -> object:
    """A field's value as `jsonable` would give it, a nested sample as `plain` gives it."""
    if type(value) in _SCALARS:
        return value
    if isinstance(value, tuple):
        return [_json_value(v) for v in value]
    if is_dataclass(value) and not isinstance(value, type):
        return plain(value)
    return jsonable(value)


def jsonable(value: object) -> object:
    kind = type(value)
    if kind in _SCALARS or kind is _Json:
        return value
    if kind is dict:
        return {str(k): v if type(v) in _SCALARS else jsonable(v) for k, v in value.items()}  # type: ignore[attr-defined]
    if kind is list or kind is tuple:
        return [v if type(v) in _SCALARS else jsonable(v) for v in value]  # type: ignore[attr-defined]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, datetime):
        return as_utc(value).isoformat().replace("+00:00", "Z")
    return value


def as_utc(value: datetime) -> datetime:
    """`value` in UTC; a time without zone is taken as UTC (SQL Server's datetime2: queuetop's T-SQL
    reads UTC times; a recording's ISO time without zone)."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def utc_text(value: datetime) -> str:
    """A moment as queuetop names it to people: UTC, to the second."""
    return f"{as_utc(value):%Y-%m-%d %H:%M:%S}Z"


_HINTS: dict[type, dict[str, Any]] = {}


def type_hints_of(cls: type) -> dict[str, Any]:
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = get_type_hints(cls)
    return hints


# An integer beyond this is no figure a database keeps (bigint is 2**63): refused, since a float
# of it (a rate, a ratio, a Prometheus sample) would overflow long before Python's int does.
MAX_INT = 2**128
# How deep a value kept as it is (a key of `extra` the model does not know) may nest: printing or
# re-encoding it recurses.
MAX_EXTRA_DEPTH = 32

Decoder = Callable[[Any], Any]
_DECODERS: dict[Any, Decoder] = {}


def kind_of(value: object) -> str:
    """What a JSON value is, in words, for an error message."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer out of range" if abs(value) > MAX_INT else "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def _wrong(expected: str, value: object) -> ShapeError:
    return ShapeError(f"expected {expected}, got {kind_of(value)}")


def _str(value: Any) -> str:
    if type(value) is not str:
        raise _wrong("a string", value)
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (JSON's "\ud800"): no terminal or file can take it
            raise ShapeError("a string with a lone surrogate") from None
    return value


def _int(value: Any) -> int:
    if type(value) is not int or not -MAX_INT <= value <= MAX_INT:
        raise _wrong("an integer", value)
    return value


def _float(value: Any) -> float:
    if type(value) is float:
        return value
    if type(value) is int and -MAX_INT <= value <= MAX_INT:
        return float(value)
    raise _wrong("a number", value)


def _bool(value: Any) -> bool:
    if type(value) is not bool:
        raise _wrong("true or false", value)
    return value


def _datetime(value: Any) -> datetime:
    if type(value) is not str:
        raise _wrong("an ISO-8601 time", value)
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ShapeError(f"not an ISO-8601 time: {value[:40]!r}") from None


def decoder_for(hint: Any) -> Decoder:
    """A function reading a JSON value as the type `hint` names (dataclasses, tuples, dicts,
    datetimes, optional values), raising ShapeError for a value of another shape."""
    decode = _DECODERS.get(hint)
    if decode is None:
        decode = _DECODERS[hint] = _make_decoder(hint)
    return decode


def _make_decoder(hint: Any) -> Decoder:
    origin = get_origin(hint)
    if origin in (Union, UnionType):
        options = [a for a in get_args(hint) if a is not type(None)]
        if len(options) != 1:
            raise TypeError(f"no decoder for {hint!r}")
        inner = decoder_for(options[0])
        return lambda value: None if value is None else inner(value)
    if origin is tuple:
        item = decoder_for(get_args(hint)[0])

        def decode_tuple(value: Any) -> tuple[Any, ...]:
            if type(value) is not list:
                raise _wrong("an array", value)
            out = []
            for index, element in enumerate(value):
                try:
                    out.append(item(element))
                except ShapeError as exc:
                    raise exc.within(f"[{index}]") from None
            return tuple(out)

        return decode_tuple
    if origin is dict:
        key_hint, item_hint = get_args(hint)
        if key_hint is not str:
            raise TypeError(f"no decoder for {hint!r}")
        if item_hint is object:
            return _extra_map
        item = decoder_for(item_hint)

        def decode_dict(value: Any) -> dict[str, Any]:
            if not isinstance(value, dict):  # (a `_Json`, plain's, too)
                raise _wrong("an object", value)
            out = {}
            for key, element in value.items():
                try:
                    out[_str(key)] = item(element)
                except ShapeError as exc:
                    raise exc.within(f"[{key!r}]") from None
            return out

        return decode_dict
    if isinstance(hint, type) and is_dataclass(hint):
        return _dataclass_decoder(hint)
    simple = {str: _str, int: _int, float: _float, bool: _bool, datetime: _datetime}.get(hint)
    if simple is None:
        raise TypeError(f"no decoder for {hint!r}")
    return simple


def _dataclass_decoder(cls: type) -> Decoder:
    hints = type_hints_of(cls)
    spec = {f.name: (decoder_for(hints[f.name]), f.default is MISSING and f.default_factory is MISSING)
            for f in fields(cls)}

    def decode_sample(value: Any) -> Any:
        if not isinstance(value, dict):  # (a `_Json`, plain's, too)
            raise _wrong("an object", value)
        values = {}
        for name, (decode, required) in spec.items():
            if name not in value:
                if required:
                    raise ShapeError("missing", name)
                continue
            try:
                values[name] = decode(value[name])
            except ShapeError as exc:
                raise exc.within(name) from None
        return cls(**values)  # keys it does not know are left out, as they always were

    return decode_sample


def _extra_map(value: Any) -> dict[str, object]:
    if not isinstance(value, dict):  # (a `_Json`, plain's, too)
        raise _wrong("an object", value)
    for key, element in value.items():
        check_extra(key, element)
    return dict(value)


def check_extra(key: str, value: object) -> None:
    """A key of `extra`, kept as it is: those the model reads (host, connected) of their type,
    strings readable, none nested beyond MAX_EXTRA_DEPTH."""
    try:
        if key == "host":
            _str(value)
        elif key == "connected":
            _bool(value)
        _check_nesting(value, MAX_EXTRA_DEPTH)
    except ShapeError as exc:
        raise exc.within(key) from None


def _check_nesting(value: object, depth: int) -> None:
    if isinstance(value, str):
        _str(value)
    elif isinstance(value, (list, dict)):
        if depth <= 0:
            raise ShapeError(f"nested deeper than {MAX_EXTRA_DEPTH}")
        if isinstance(value, dict):
            for key, element in value.items():
                _str(key)
                _check_nesting(element, depth - 1)
        else:
            for element in value:
                _check_nesting(element, depth - 1)
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
        raise _wrong("an integer", value)
