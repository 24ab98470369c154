"""The dashboard's database side for details and backend signals (each call in a worker thread)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from dbcore.database import Target
from probes.config import Config
from probes.details import queue_details, session_details
from probes.postgres import open_probe_connection
from probes.session import probe_transaction
from probes.sources import QueueDetails
from queues.admin import Signalled, signal_backend


class DatabaseBackend:
    def __init__(self, target: Target, config: Config | None = None) -> None:
        self.target = target
        self.config = config or Config()

    def queue_details(self, source: str, name: str) -> QueueDetails:
        with open_probe_connection(self.target, application_name="queuetop-probe:details") as conn, \
                probe_transaction(conn, where=self.target.masked):
            return queue_details(conn, source, name, self.config)

    def session_details(self, pid: int, started: datetime | None = None) -> dict:
        with open_probe_connection(self.target, application_name="queuetop-probe:details") as conn, \
                probe_transaction(conn, where=self.target.masked):
            return session_details(conn, pid, started)

    # -- the job console (jobs/): each call in a worker thread ------------------------------

    def jobs_page(self, queue: Any, flt: Any, *, after: str | None, limit: int, newest_first: bool) -> Any:
        with open_probe_connection(self.target, application_name="queuetop-jobs:list") as conn, \
                probe_transaction(conn, where=self.target.masked):
            return queue.library.page(conn, queue.name, flt, after=after, limit=limit, newest_first=newest_first)

    def job(self, queue: Any, job_id: str) -> Any:
        with open_probe_connection(self.target, application_name="queuetop-jobs:show") as conn, \
                probe_transaction(conn, where=self.target.masked):
            return queue.library.job(conn, queue.name, job_id)

    def jobs_count(self, queue: Any, flt: Any) -> tuple[int, bool]:
        from jobs.bulk import count_matching

        return count_matching(self.target, queue.library, queue.name, flt)

    def jobs_act(self, queue: Any, action: str, ids: list[str], *, expect: str | None) -> Any:
        from jobs.audit import Audit
        from jobs.bulk import act_on_ids
        from jobs.model import JobFilter

        audit = Audit(dsn=self.target.masked, flt=JobFilter(state=expect, ids=tuple(ids)))
        outcome = act_on_ids(self.target, queue.library, queue.name, action, ids, expect=expect, shown=queue.shown, audit=audit)
        audit.done(outcome)
        return outcome

    def jobs_bulk(self, queue: Any, action: str, flt: Any, *, stop: Any, progress: Any) -> Any:
        from jobs.audit import Audit
        from jobs.bulk import run_bulk

        audit = Audit(dsn=self.target.masked, flt=flt)
        outcome = run_bulk(self.target, queue.library, queue.name, action, flt, stop=stop, progress=progress,
                           shown=queue.shown, audit=audit)
        audit.done(outcome)
        return outcome

    def jobs_pause(self, queue: Any, paused: bool) -> None:
        from jobs.audit import Audit
        from jobs.bulk import write_session
        from jobs.model import JobFilter

        with write_session(self.target) as conn, conn.transaction():
            queue.library.pause(conn, queue.name, paused)
        Audit(dsn=self.target.masked, flt=JobFilter()).paused(queue=queue.shown, source=queue.source, paused=paused)

    def signal_backend(self, pid: int, terminate: bool, started: datetime | None = None) -> Signalled:
        return signal_backend(self.target, pid, terminate=terminate, started=started)
