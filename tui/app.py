"""`queuetop` with no command. The live Textual dashboard is built on the probes (issue 4);
until then this prints a one-shot overview of the reference engine's state, so the command
already answers "what is in my queues right now?"."""

from __future__ import annotations

import sys

from queues import lease as leases
from queues import ring as rings
from queues import schema
from queues.table_queue import TableQueue


def _table(title: str, header: tuple[str, ...], rows: list[tuple[object, ...]]) -> str:
    cells = [tuple(str(c) for c in header)] + [tuple("-" if c is None else str(c) for c in row) for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = [title]
    for index, row in enumerate(cells):
        lines.append("  " + "  ".join(c.rjust(w) if index and c[:1].isdigit() else c.ljust(w) for c, w in zip(row, widths)))
    if not rows:
        lines.append("  (none)")
    return "\n".join(lines)


def overview(conn) -> str:
    queue_rows = []
    for name in TableQueue.list_names(conn):
        counts = TableQueue.open(conn, name).counts(conn)
        queue_rows.append((name, f"{counts.depth:,}", f"{counts.ready:,}", f"{counts.in_flight:,}", f"{counts.dead:,}"))
    ring_rows = []
    for (name,) in conn.execute("SELECT name FROM queuetop.rings ORDER BY name"):
        state = rings.describe(conn, name)
        ring_rows.append((name, f"{state.used:,}/{state.capacity:,}", f"{state.refused_total:,}"))
    lease_rows = []
    for (name,) in conn.execute("SELECT name FROM queuetop.leases ORDER BY name"):
        state = leases.describe(conn, name)
        if state.holder is None:
            status, expires = "free", None
        elif state.expires_in_s is not None and state.expires_in_s <= 0:
            status, expires = "expired", f"{state.expires_in_s:.1f}s"
        else:
            status, expires = "held", f"{state.expires_in_s:.1f}s"
        lease_rows.append((name, status, state.holder, state.token, expires))
    return "\n\n".join(
        [
            _table("Queues", ("name", "depth", "ready", "in-flight", "dead"), queue_rows),
            _table("Rings", ("name", "used/capacity", "refused"), ring_rows),
            _table("Leases", ("name", "state", "holder", "token", "expires in"), lease_rows),
        ]
    )


def run_dashboard(ctx) -> int:
    target = ctx.target  # starts the embedded server when no DSN is given
    with ctx.connect("overview") as conn:
        schema.require(conn, where=target.masked)
        text = overview(conn)
    print(f"queuetop {target.masked}\n\n{text}")
    print(
        "\n(the live dashboard is not built yet: this is a one-shot overview; "
        "`queuetop --help` lists the engine commands)",
        file=sys.stderr,
    )
    return 0
