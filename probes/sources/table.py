"""Job tables declared in the config (`[[queues]]`): any table, view or partitioned parent whose
columns the entry describes (probes/sources/jobtable.py has the rules)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Detection, QueueDetails, QueueFigures, QueueSource
from .jobtable import JobTable

if TYPE_CHECKING:
    from ..configmodel import Config
    from ..session import ProbeConnection


class DeclaredTables(QueueSource):
    name = "table"
    kind = "table"
    order = 40

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self.tables = {declared.name: JobTable(declared) for declared in config.queues}

    def detect(self, conn: ProbeConnection) -> Detection | None:
        return Detection() if self.tables else None

    def sample(self, conn: ProbeConnection, detection: Detection) -> list[QueueFigures]:
        return [figures for table in self.tables.values() for figures in table.sample(conn)]

    def details(self, conn: ProbeConnection, name: str) -> QueueDetails:
        declared_name, _, queue = name.partition(":")
        table = self.tables.get(declared_name)
        if table is None:
            return QueueDetails()
        return table.details(conn, queue or table.declared.queue)


SOURCE = DeclaredTables
