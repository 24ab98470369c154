"""What every library's truth oracle does the same way: build its workloads in a database of their
own (dropped after), and take a snapshot between two countings of the truth."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar

import psycopg

from ..conftest import Database, Server, drop_database, make_database
from .contract import Truth, counted_in_turns


class Closes(Protocol):
    def close(self) -> None: ...


W = TypeVar("W", bound=Closes)


@contextmanager
def built_in_a_database(pg_server: Server, prefix: str, *builders: Callable[[str], W],
                        prepare: Callable[[psycopg.Connection], None] | None = None) -> Iterator[tuple[Database, list[W]]]:
    """A fresh database, `prepare`d, with what each builder (given its DSN) builds in it, in order;
    afterwards every workload built is closed (one that failed midway too) and the database dropped."""
    database = make_database(pg_server, prefix=prefix)
    built: list[W] = []
    try:
        if prepare is not None:
            with database.connect() as conn:
                prepare(conn)
        for build in builders:
            built.append(build(database.dsn))
        yield database, built
    finally:
        for workload in built:
            workload.close()
        with psycopg.connect(pg_server.admin_uri, autocommit=True) as admin:
            drop_database(admin, database.name)


def observed(database: Database, truth: Callable[[psycopg.Connection], Truth], in_turns: bool = False) -> tuple[Any, Truth, Truth]:
    """One probe cycle with no config (or, `in_turns`, the cycle after the tally's whole pass in
    turns), between two countings of the truth: (snapshot, before, after)."""
    from probes.sampler import run_cycle

    with database.connect() as conn:
        before = truth(conn)
    snap = counted_in_turns(database.target) if in_turns else run_cycle(database.target)
    with database.connect() as conn:
        after = truth(conn)
    return snap, before, after
