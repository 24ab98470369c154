"""queuetop's reference queue engine on a real database (PostgreSQL, or SQL Server through
dbcore's dialect seam): the patterns of the design notes, each a module:

- table queues (table_queue.py), consumed by a pool of threads (worker.py) through the claim
  loop's prepared statements (hotpath.py); ring buffers (ring.py); leases (lease.py);
- the transactional outbox and its relay (outbox.py), exactly-once processing over
  at-least-once signals (exactly_once.py), the aggregation compactor (compactor.py);
- the reference schema (schema.py, from sql/<dialect>/), the controls the dashboard drives
  (control.py, admin.py), the demo workload on the embedded server (demo.py, embedded.py),
  handlers (handlers.py), and what a long-running service needs (link.py, lifeline.py);
- the scenarios (scenarios/): stories the engine plays against a real database.

Nothing here imports textual or tui/: the engine is usable (and tested) without the dashboard.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("queuetop")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"
