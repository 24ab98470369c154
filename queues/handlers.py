"""Built-in message handlers for demos and tests, and loading user handlers.

A handler is a callable taking a `Message`; it returns to succeed and raises to fail (the
message is retried, then dead-lettered). Specs:

    noop                  succeed at once
    sleep:SECONDS         take that long (0 to 3600), then succeed
    fail:PROBABILITY      raise with that probability (0 to 1)
    crash:PROBABILITY     kill the whole worker process (SIGKILL) with that probability (0 to 1)
    a,b,...               run several in order, e.g. sleep:0.01,fail:0.1
    package.module:func   a function of yours
"""

from __future__ import annotations

import importlib
import math
import os
import random
import re
import signal
import time
from collections.abc import Callable

from dbcore.errors import UsageError

from .table_queue import Message

Handler = Callable[[Message], None]


class HandlerFailure(Exception):
    """What `fail:P` raises: an ordinary processing error."""


def _noop(_: Message) -> None:
    return None


def _sleep(seconds: float) -> Handler:
    def handler(_: Message) -> None:
        time.sleep(seconds)

    return handler


def _fail(probability: float) -> Handler:
    def handler(message: Message) -> None:
        if random.random() < probability:
            raise HandlerFailure(f"fail:{probability} handler failed message {message.id} on attempt {message.attempts}")

    return handler


def _crash(probability: float) -> Handler:
    def handler(_: Message) -> None:
        if random.random() < probability:
            os.kill(os.getpid(), signal.SIGKILL)

    return handler


MAX_SLEEP_S = 3600.0  # sleep:S: an hour per message is already far past any visibility worth having


def _number(spec: str, text: str, *, probability: bool) -> float:
    """The handler's parameter: a probability from 0 to 1, or seconds from 0 to MAX_SLEEP_S;
    never NaN or infinite (NaN compares false with every bound, so it must be named)."""
    expected = "a probability from 0 to 1" if probability else f"seconds from 0 to {MAX_SLEEP_S:,.0f}"
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"invalid handler {spec!r}: {text!r} is not a number ({expected})") from None
    if not math.isfinite(value) or not 0 <= value <= (1 if probability else MAX_SLEEP_S):
        raise UsageError(f"invalid handler {spec!r}: expected {expected}")
    return value


def parse_handler(spec: str) -> Handler:
    parts = [part.strip() for part in spec.split(",") if part.strip()]
    if not parts:
        raise UsageError("empty handler")
    handlers = [_parse_one(part) for part in parts]
    if len(handlers) == 1:
        return handlers[0]

    def chain(message: Message) -> None:
        for handler in handlers:
            handler(message)

    return chain


def _parse_one(spec: str) -> Handler:
    name, _, arg = spec.partition(":")
    if name == "noop" and not arg:
        return _noop
    if name == "sleep" and arg:
        return _sleep(_number(spec, arg, probability=False))
    if name == "fail" and arg:
        return _fail(_number(spec, arg, probability=True))
    if name == "crash" and arg:
        return _crash(_number(spec, arg, probability=True))
    # module:function, the module plain (`myhandlers`) or dotted (`app.jobs`); the built-in names
    # above are not modules.
    if arg and name not in ("noop", "sleep", "fail", "crash") and re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", name):
        try:
            module = importlib.import_module(name)
            func = getattr(module, arg)
        except (ImportError, AttributeError) as exc:
            raise UsageError(f"cannot load handler {spec!r}: {exc}") from None
        if not callable(func):
            raise UsageError(f"handler {spec!r} is not callable")
        return func
    raise UsageError(f"unknown handler {spec!r} (use noop, sleep:S, fail:P, crash:P or module:function)")
