"""Queue sources: one module per kind of queue, found here by name. A module that defines
`SOURCE = <a QueueSource subclass>` is a source; adding a library means adding one such module
(and its SQL), nothing else.

The other modules here are what the sources share: the seam every source implements and the
one catalog statement that finds every library's installs (base.py), and the reading of any job
table, counted or honestly estimated (jobtable.py, with what it stands on: the catalog lookup
of a declared table, resolved.py; the planner's word on a read, plans.py; exact counts made a
page range at a time, tally.py). This module finds the sources (`source_classes`) and keeps one
database's of them from one probe cycle to the next (`SourceSet`).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from .base import Detection, Install, QueueDetails, QueueFigures, QueueSource, find_installs, tables_known

if TYPE_CHECKING:
    from ..configmodel import Config
    from ..session import ProbeConnection

__all__ = ["Detection", "Install", "QueueDetails", "QueueFigures", "QueueSource", "SourceSet", "source_classes",
           "sources_for"]

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


def classes_for(config: Config, dialect: str = "postgresql") -> list[type[QueueSource]]:
    """The kinds of source to look for in a database of `dialect`: all of those that have its
    SQL, but those the config disables (a disabled library, in every schema)."""
    return [cls for name, cls in source_classes().items() if name not in config.disabled_sources and dialect in cls.dialects]


def sources_for(config: Config, dialect: str = "postgresql") -> list[QueueSource]:
    """One instance of each source to sample in a database of `dialect` (a library's in its
    configured or default schema; SourceSet finds every install)."""
    return [cls(config) for cls in classes_for(config, dialect)]


class SourceSet:
    """The sources of one monitored database, kept from one probe cycle to the next: one instance
    of each source without a signature (the engine's, the declared tables, SQL Server's), and one
    per install of each library found by its signature, kept while that install is there (an
    instance holds its caches: the job table's catalog lookups, estimates and exact counts)."""

    def __init__(self, config: Config, dialect: str = "postgresql") -> None:
        self.config = config
        self.classes = classes_for(config, dialect)
        self.by_name = {cls.name: cls for cls in self.classes}
        self.fixed = {cls.name: cls(config) for cls in self.classes if not cls.signature}
        self.installed: dict[tuple[str, str], QueueSource] = {}  # (source name, schema) -> instance
        self.tables_asked: set[str] = set()  # what the other sources' detect() asked the last time
        # This cycle's installs in a schema the role may not use: a note each (Install.out_of_reach).
        self.out_of_reach: list[str] = []

    def __iter__(self) -> Iterator[QueueSource]:
        """The sources as of the last cycle, in the order their rows are shown."""
        for cls in self.classes:
            if not cls.signature:
                yield self.fixed[cls.name]
            else:
                yield from (source for (name, _schema), source in self.installed.items() if name == cls.name)

    def wanted(self, install: Install) -> bool:
        """Whether an install found is one to show: `[sources.<name>] schema = X` looks in X only."""
        cls = self.by_name[install.source]
        return cls.looks_in_every_schema(self.config) or install.schema == cls.home_schema_in(self.config)

    @contextmanager
    def cycle(self, conn: ProbeConnection) -> Iterator[list[tuple[QueueSource, Install | None]]]:
        """This cycle's sources, each with its install (None: a source that detects itself), after
        one catalog statement for all of them (every library's signature in every schema, and the
        tables the other sources asked about the last time, answering has_table meanwhile). A
        library's instance is the last cycle's while its install is there; one that went is dropped.
        An install in a schema the role may not use is no source: `out_of_reach` says it is there."""
        installs, known = find_installs(conn, self.classes, self.tables_asked)
        by_source: dict[str, list[Install]] = {}
        self.out_of_reach = [install.out_of_reach for install in installs if not install.usable and self.wanted(install)]
        for install in installs:
            if install.usable and self.wanted(install):
                by_source.setdefault(install.source, []).append(install)
        found: list[tuple[QueueSource, Install | None]] = []
        installed: dict[tuple[str, str], QueueSource] = {}
        for cls in self.classes:
            if not cls.signature:
                found.append((self.fixed[cls.name], None))
                continue
            home = cls.home_schema_in(self.config)
            for install in sorted(by_source.get(cls.name, ()), key=lambda i: (i.schema != home, i.schema)):
                key = (cls.name, install.schema)
                source = installed[key] = self.installed.get(key) or cls(self.config, install.schema)
                found.append((source, install))
        self.installed = installed
        with tables_known(known):
            yield found
        self.tables_asked = set(known)
