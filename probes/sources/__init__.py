"""Queue sources: one module per kind of queue, found here by name. A module that defines
`SOURCE = <a QueueSource subclass>` is a source; adding a library means adding one such module
(and its SQL), nothing else."""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING

from .base import Detection, QueueDetails, QueueFigures, QueueSource

if TYPE_CHECKING:
    from ..config import Config

__all__ = ["Detection", "QueueDetails", "QueueFigures", "QueueSource", "source_classes", "sources_for"]

_NOT_SOURCES = {"base", "jobtable"}


def source_classes() -> dict[str, type[QueueSource]]:
    """Every source this installation knows, by name, in the order their rows are shown."""
    found: list[type[QueueSource]] = []
    for module in pkgutil.iter_modules(__path__):
        if module.name in _NOT_SOURCES:
            continue
        cls = getattr(importlib.import_module(f"{__name__}.{module.name}"), "SOURCE", None)
        if cls is not None:
            found.append(cls)
    return {cls.name: cls for cls in sorted(found, key=lambda c: (c.order, c.name))}


def sources_for(config: Config, dialect: str = "postgresql") -> list[QueueSource]:
    """The sources to sample in a database of `dialect`: all of those that have its SQL, but
    those the config disables."""
    return [cls(config) for name, cls in source_classes().items()
            if name not in config.disabled_sources and dialect in cls.dialects]
