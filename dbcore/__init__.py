"""What the engine (queues/) and the probes (probes/) both stand on: where to connect and how
(DSNs, masking, sessions), queuetop's errors and their exit codes, names, and the loader of the
named SQL in each package's `.sql` files.

The packages depend one way only: `dbcore` imports none of queuetop's other packages; `queues`
and `probes` import `dbcore` and never each other; `tui` (the dashboard and the command line)
puts them together. `tests/test_layering.py` enforces it.
"""
