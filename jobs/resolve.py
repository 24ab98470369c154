"""Which queue a name means: the queue's name as `snapshot --json` gives it (`<schema>.<queue>` for
a library's install outside its home schema), found the way the queues probe finds it (every
source, every install: probes/sources/__init__.py's SourceSet), with the library whose jobs the
console acts on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dbcore.errors import UsageError, first_line
from probes.configmodel import Config
from probes.session import contained, probe_transaction
from probes.sources import SourceSet

from .library import JobLibrary
from .model import ActionRefused
from .registry import library_for, why_not


@dataclass(frozen=True, slots=True)
class JobQueue:
    """A queue the console acts on: its name as the snapshot shows it (`shown`), as its library
    names it (`name`), its source and the library's job console for its install."""

    shown: str
    name: str
    source: str
    library: JobLibrary


def queue_of(source: str, schema: str | None, shown: str, version: str | None = None, config: Config | None = None) -> JobQueue:
    """The queue a snapshot's row names (the dashboard's: its source, schema and name known).
    ActionRefused when queuetop has no job console for that source."""
    cls = library_for(source)
    if cls is None:
        raise ActionRefused(f"{shown}: {why_not(source)}")
    config = config or Config()
    schema = schema or cls.default_schema
    prefix = f"{schema}."
    name = shown[len(prefix):] if shown.startswith(prefix) and _prefixed(source, schema, config) else shown
    options = config.source_options.get(source, {})
    return JobQueue(shown=shown, name=name, source=source, library=cls(schema, version, options=options))


def _prefixed(source: str, schema: str, config: Config) -> bool:
    """Whether the snapshot names this install's queues `<schema>.<queue>` (an install outside the
    library's home schema: the config's, else its default)."""
    from probes.sources import source_classes

    cls = source_classes().get(source)
    return cls is not None and bool(cls.signature) and schema != cls.home_schema_in(config)


def find_queue(conn: Any, shown: str, source: str | None = None, config: Config | None = None) -> JobQueue:
    """The queue named `shown` (of `source`, when given) in the database `conn` reaches (a probe
    session): UsageError when there is none (or several, without `source`), ActionRefused when
    its source has no job console."""
    config = config or Config()
    sources = SourceSet(config)
    if source is not None and source not in sources.by_name:
        raise UsageError(f"unknown source {source!r}: one of {', '.join(sources.by_name)}")
    found: list[tuple[str, str | None, str, str | None]] = []  # (source, schema, bare name, version)
    unread: list[str] = []
    with probe_transaction(conn), sources.cycle(conn) as present:
        for src, install in present:
            if source is not None and src.name != source:
                continue
            prefix = src.queue_prefix
            if not shown.startswith(prefix):
                continue
            try:
                with contained(conn):
                    detection = src.detect(conn) if install is None else src.detected(conn, install)
                    if detection is None:
                        continue
                    names = {f.name for f in src.sample(conn, detection)}
            except Exception as exc:  # a source that cannot be read here: said if the queue is not found elsewhere
                unread.append(f"{src.label}: {first_line(exc)}")
                continue
            bare = shown[len(prefix):]
            if bare in names:
                found.append((src.name, src.schema if src.signature else detection.schema, bare, detection.version))
    if not found:
        where = f" of source {source!r}" if source else ""
        also = f" (not read: {'; '.join(unread)})" if unread else ""
        raise UsageError(f"unknown queue {shown!r}{where}: `queuetop snapshot --json` lists the queues by name{also}")
    if len(found) > 1:
        raise UsageError(f"queue {shown!r} is in several sources ({', '.join(f[0] for f in found)}): give --source")
    name, schema, bare, version = found[0]
    cls = library_for(name)
    if cls is None:
        raise ActionRefused(f"queue {shown!r}: {why_not(name)}")
    return JobQueue(shown=shown, name=bare, source=name, library=cls(schema or cls.default_schema, version,
                                                                    options=config.source_options.get(name, {})))
