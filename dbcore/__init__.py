"""What the engine (queues/) and the probes (probes/) both stand on:

- where to connect: a `Target` (target.py), read from a DSN and masked for anything printed
  (dsn.py; redact.py cuts out what may be secret in text no parser reads);
- how: psycopg connections with queuetop's identity (database.py, which also re-exports the
  Target and DSN names), and the dialect seam between PostgreSQL and SQL Server (dialect.py:
  the interface in seam.py, the choice of a dialect in registry.py, the dialects in postgres.py
  and mssql.py), with the lock timeout of the engine's commands and the one line that names
  the holder (lockwait.py), what differs between the PostgreSQL majors supported
  (pgversions.py), what a connection pooler between leaves of a session (pooler.py), and a
  deadline on a server's answer that no statement timeout bounds (deadline.py);
- queuetop's errors and their exit codes (errors.py), names (names.py), text made safe to show
  (text.py), and the loader of the named SQL in each package's `.sql` files (sqlfiles.py).

The packages depend one way only: `dbcore` imports none of queuetop's other packages; `queues`
and `probes` import `dbcore` and never each other; `bench` (the benchmarks) stands on those
three; `tui` (the dashboard and the command line) puts them all together. Within each package
no two modules import each other, at any depth. `tests/test_layering.py` enforces both.
"""
