"""What the watching commands (record, export) share: the targets they sample, and their
samplers running until SIGINT or SIGTERM."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from dbcore.database import Target
from probes.config import Config

from .context import Context


def watched(ctx: Context) -> tuple[Config, list[tuple[str, Target]], float]:
    """What a watching command (record, export) samples: the config, its targets by name, the interval."""
    from probes.config import load_config

    config = load_config(getattr(ctx.args, "config", None))
    return config, ctx.targets(config), config.sampling_interval(ctx.args.interval)


@contextmanager
def sampling(targets: list[tuple[str, Target]], config: Config, interval: float, sink: Callable[[Any], None],
             stop: threading.Event) -> Iterator[None]:
    """Each target's sampler feeding `sink` for the block's duration; SIGINT and SIGTERM set
    `stop`, which the block waits on. The samplers stop together at its end."""
    from probes.sampler import Sampler, stop_all

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    samplers = [Sampler(target, sink, config, interval_s=interval, host=name) for name, target in targets]
    try:
        for sampler in samplers:
            sampler.start()
        yield
    finally:
        stop_all(samplers)
