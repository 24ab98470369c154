"""Which library's job console serves a source (the snapshot's `queues[].source`)."""

from __future__ import annotations

import importlib

from .library import JobLibrary

# The snapshot's source name -> the module of this package that acts on its jobs.
MODULES = {
    "reference": "reference",
    "pgmq": "pgmq",
    "procrastinate": "procrastinate",
    "pg-boss": "pgboss",
    "graphile-worker": "graphile_worker",
    "river": "river",
    "pgqueuer": "pgqueuer",
}
# Sources whose jobs the console does not reach, and why (said instead of a Jobs screen).
NOT_REACHED = {
    "table": "a declared table: queuetop knows its figures' columns, not what a job of it is or how its application retries one",
    "outbox": "the engine's outbox: its messages are relayed, not worked; nothing to retry or cancel",
    "inbox": "the engine's inboxes: de-duplication records, not jobs",
    "hangfire": "SQL Server: no SQL Server can run on these machines, so no action on its jobs is offered untested",
    "nservicebus": "SQL Server: no SQL Server can run on these machines, so no action on its jobs is offered untested",
}


def library_for(source: str) -> type[JobLibrary] | None:
    module = MODULES.get(source)
    if module is None:
        return None
    cls: type[JobLibrary] = importlib.import_module(f"{__package__}.{module}").LIBRARY
    return cls


def why_not(source: str) -> str:
    return NOT_REACHED.get(source, f"queuetop has no job console for {source} queues")
