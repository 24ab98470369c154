"""The dashboard's widgets: the panels (panels/, one module per panel, on a shared base) and the
keyed table they update in place, row by row (keyed_table.py)."""
