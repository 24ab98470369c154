"""The job console: read and act on any queue library's jobs, with that library's own semantics.

One module per library (`pgmq.py`, `procrastinate.py`, `pgboss.py`, `graphile_worker.py`,
`river.py`, `pgqueuer.py`, `reference.py` for the engine's own queues), each a `JobLibrary`
(library.py) with its SQL in `jobs/sql/postgresql/<module>.sql`. `resolve.py` finds the queue a
name means (the snapshot's name) and its library's install; `bulk.py` runs an action over what a
filter matches in short compare-and-set batches; `audit.py` writes what was done.

Reads run on a probe session (read-only, statement and lock timeouts); every write is one short
transaction of its own with a lock timeout, through the library's own functions where it has them.
`jobs` sees `dbcore` and `probes` (to find queues as the snapshot names them), never `queues`,
`tui` or textual.
"""
