"""queuetop's benchmarks: `queuetop bench engine | probes | sources | peers`.

They drive the engine (queues/) and the probes (probes/) against a real database and report what
they cost; their SQL is in bench/sql/<dialect>/. Nothing here imports textual or tui/ (the
dashboard's own benchmark, `bench tui`, lives with it in tui/bench.py); the command line in
tui/commands/bench.py runs them. `tests/test_layering.py` enforces it.
"""
