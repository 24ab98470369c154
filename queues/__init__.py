"""queuetop's reference queue engine: table queues, ring buffers and leases on a real database.

Nothing here imports textual or tui/: the engine is usable (and tested) without the dashboard.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("queuetop")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"
