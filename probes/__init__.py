"""Read-only samplers of database state (the snapshot model and scheduler arrive with them).

Nothing here imports textual or tui/.
"""
