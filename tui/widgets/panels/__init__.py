"""The dashboard's panels, one per module. Each takes a snapshot (and the filter text) in `show()`
and updates its widgets in place; none of them does I/O.

A new panel is a new module here (a `Panel` subclass from `.base`) and a line below; the panel
modules import `.base` (and the Locks panel `.lock_tree`), never each other nor the app."""

from .base import Panel, fit_segments
from .compaction import CompactionPanel
from .connections import ConnectionsPanel
from .leases import LeasesPanel
from .lock_tree import LockTree, blocked_label, blocker_label, prepared_label
from .locks import LocksPanel
from .pooler import PoolerPanel
from .queues import QueuesPanel
from .replication import ReplicationPanel
from .rings import RingsPanel
from .sessions import SessionsPanel

__all__ = [
    "CompactionPanel",
    "ConnectionsPanel",
    "LeasesPanel",
    "LockTree",
    "LocksPanel",
    "Panel",
    "PoolerPanel",
    "QueuesPanel",
    "ReplicationPanel",
    "RingsPanel",
    "SessionsPanel",
    "blocked_label",
    "blocker_label",
    "fit_segments",
    "prepared_label",
]
