"""The samples' quick constructor (probes/samples.py's quick_init): the same object, signature
and frozenness as the dataclass's own __init__ gives."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from probes.samples import BlockedSession, SessionSample, quick_init


def _plain_twin(cls: type) -> type:
    """The same fields, made by dataclasses alone (its own __init__)."""
    fields = [(f.name, f.type, f) for f in dataclasses.fields(cls)]
    return dataclasses.make_dataclass(f"Plain{cls.__name__}", [(n, t, dataclasses.field(default=f.default)) if
                                                                f.default is not dataclasses.MISSING else (n, t)
                                                                for n, t, f in fields],
                                      frozen=True, slots=True, kw_only=True)


@pytest.mark.parametrize("cls", [BlockedSession, SessionSample])
def test_the_quick_init_takes_what_the_dataclass_takes_and_sets_every_field(cls):
    plain = _plain_twin(cls)
    assert inspect.signature(cls) == inspect.signature(plain)
    every = {f.name: (f"value of {f.name}",) for f in dataclasses.fields(cls)}
    made = cls(**every)
    assert dataclasses.asdict(made) == dataclasses.asdict(plain(**every))
    required = {f.name: n for n, f in enumerate(dataclasses.fields(cls)) if f.default is dataclasses.MISSING}
    least = cls(**required)
    assert dataclasses.asdict(least) == dataclasses.asdict(plain(**required))  # the defaults where nothing is given
    assert least == cls(**required) and hash(least) == hash(cls(**required))
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.pid = 1
    with pytest.raises(TypeError):
        cls(**{name: value for name, value in required.items() if name != "pid"})
    with pytest.raises(TypeError):
        cls(**required, unknown=1)


def test_what_the_quick_init_cannot_keep_is_refused():
    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class WithFactory:
        items: list = dataclasses.field(default_factory=list)

    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class Checked:
        n: int

        def __post_init__(self) -> None:
            assert self.n > 0

    @dataclasses.dataclass(frozen=True, slots=True)
    class Positional:
        n: int

    for cls in (WithFactory, Checked, Positional):
        with pytest.raises(TypeError, match="quick_init"):
            quick_init(cls)
