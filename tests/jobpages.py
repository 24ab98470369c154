"""What the job-console tests share: every page of a list as the console reads them (a probe
transaction each), the ids they hold, a read on a probe session, and an action in one transaction."""

from __future__ import annotations

from typing import Any

import psycopg

from jobs.library import JobLibrary
from jobs.model import JobFilter, Page
from probes.session import open_probe_connection, probe_transaction


def every_page(target, lib: JobLibrary, queue: str, flt: JobFilter, *, limit: int, newest_first: bool = False) -> list[Page]:
    pages, after = [], None
    with open_probe_connection(target) as conn:
        for _ in range(100_000):
            with probe_transaction(conn):
                page = lib.page(conn, queue, flt, after=after, limit=limit, newest_first=newest_first)
            pages.append(page)
            after = page.after
            if after is None:
                return pages
    raise AssertionError("paging never ended")


def ids_of(pages: list[Page]) -> list[str]:
    return [job.id for page in pages for job in page.jobs]


def jobs_and_notes(pages: list[Page]) -> tuple[list[Any], list[str]]:
    return [job for page in pages for job in page.jobs], [page.note for page in pages if page.note]


def read(target, fn):
    with open_probe_connection(target) as conn, probe_transaction(conn):
        return fn(conn)


def act(db, lib: JobLibrary, queue: str, action: str, ids: list[Any], expect: str | None = None) -> list[str]:
    """`action` on `ids` in one transaction on a connection of the test's own."""
    with db.connect(row_factory=psycopg.rows.dict_row) as conn, conn.transaction():
        return lib.act(conn, queue, action, [str(i) for i in ids], expect)
