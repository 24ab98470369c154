"""The dashboard's database side for details and backend signals (each call in a worker thread)."""

from __future__ import annotations

from datetime import datetime

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

    def signal_backend(self, pid: int, terminate: bool, started: datetime | None = None) -> Signalled:
        return signal_backend(self.target, pid, terminate=terminate, started=started)
