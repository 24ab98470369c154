"""A snapshot as plain text: `queuetop snapshot` without --json. Every text from the database
(names, applications, queries, error texts) is inert here, as on the dashboard: the report goes
to a terminal as often as to a file. The JSON keeps the original text."""

from __future__ import annotations

from collections.abc import Sequence

from rich.cells import cell_len

from dbcore.text import inert, inert_line
from probes.model import Snapshot

from .format import database_name, lock_target


def _num(value: object, suffix: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.1f}{suffix}"
    if isinstance(value, int):
        return f"{value:,}{suffix}"
    return str(value)


def _table(title: str, header: tuple[str, ...], rows: Sequence[tuple[object, ...]]) -> str:
    """Columns aligned by terminal cells (a wide character takes two); every text cell inert."""
    cells = [header] + [tuple(_num(c) if not isinstance(c, str) else inert(c) for c in row) for row in rows]
    widths = [max(cell_len(row[i]) for row in cells) for i in range(len(header))]
    lines = [title]
    for index, row in enumerate(cells):
        aligned = (_pad(c, w, right=bool(index) and c[:1].isdigit()) for c, w in zip(row, widths, strict=True))
        lines.append(("  " + "  ".join(aligned)).rstrip())
    if not rows:
        lines.append("  (none)")
    return "\n".join(lines)


def _pad(text: str, width: int, *, right: bool) -> str:
    fill = " " * max(0, width - cell_len(text))
    return fill + text if right else text + fill


def _shorten(text: str | None, width: int = 60) -> str:
    return inert_line(text, width) if text else "-"


def render(snapshot: Snapshot) -> str:
    s = snapshot
    head = (
        f"queuetop snapshot  {s.taken_at:%Y-%m-%d %H:%M:%S} UTC  {inert_line(s.server.label or '')}\n"
        f"{database_name(s.server.dialect)} {inert_line(s.server.version or '?')}, database {inert(s.server.database or '?')}, "
        f"probes {s.elapsed_ms:.1f} ms"
    )
    problems = [f"  {inert(name)}: {inert_line(status.error)}" for name, status in s.probes.items() if status.error]
    queues = [
        (
            q.name + (" ~" if q.depth_is_estimate else ""),
            q.source,
            q.depth,
            q.ready,
            q.in_flight,
            q.delayed,
            q.dead,
            q.oldest_ready_age_s,
            q.enqueued_per_s,
            q.dequeued_per_s,
            q.dead_tuples,
        )
        for q in s.queues
    ]
    rings = [(r.name, f"{r.used:,}/{r.capacity:,}", r.refused_total) for r in s.rings]
    leases = [(lease.name, lease.state, lease.holder or "-", lease.token, lease.expires_in_s) for lease in s.leases]
    def prepared_names(gids: Sequence[str]) -> list[str]:
        return [f"prepared {gid!r}" for gid in gids]

    blocked = [
        (str(b.pid), ",".join([*map(str, b.blocked_by), *prepared_names(b.blocked_by_prepared)]) or "-",
         ",".join([*map(str, b.root_blockers), *prepared_names(b.root_prepared)]) or ("cycle" if b.in_cycle else "-"),
         b.wait_s, b.lock_type or "-", b.mode or "-", lock_target(b, s.server.database), _shorten(b.query, 40))
        for b in s.blocked
    ]
    prepared = [(repr(p.gid), p.owner or "-", p.database or "-", p.age_s, p.blocked_count) for p in s.prepared_xacts]
    blockers = [
        (str(b.pid), b.blocked_count, b.state or "-", b.xact_age_s, b.application or "-", _shorten(b.query, 40)) for b in s.blockers
    ]
    parts = [
        head,
        _table(
            "Queues (~ = depth estimated)",
            ("name", "source", "depth", "ready", "in-flight", "delayed", "dead", "oldest s", "in/s", "out/s", "dead tup"),
            queues,
        ),
        _table("Rings", ("name", "used/capacity", "refused"), rings),
        _table("Leases", ("name", "state", "holder", "token", "expires in s"), leases),
        _table("Blocked", ("pid", "blocked by", "roots", "wait s", "lock", "mode", "waits on", "query"), blocked),
        _table("Root blockers", ("pid", "blocks", "state", "xact s", "application", "query"), blockers),
    ]
    if prepared:
        parts.append(_table("Prepared transactions (no session holds them: end each with COMMIT PREPARED or ROLLBACK PREPARED 'gid')",
                            ("gid", "owner", "database", "age s", "blocks"), prepared))
    parts.append(_table(
        "Compaction",
        ("name", "pending deltas", "groups", "last run", "rows folded", "ms"),
        [(x.name, x.pending_deltas, x.groups, f"{x.last_run_at:%H:%M:%S}" if x.last_run_at else "-",
          x.last_rows_folded, x.last_duration_ms) for x in s.compaction],
    ))
    groups = [(str(g.group), _shorten(g.title, 40), g.pending_deltas) for x in s.compaction for g in x.by_group]
    if groups:
        parts.append(_table("Pending deltas by group", ("group", "title", "pending"), groups))
    c = s.connections
    if c is not None:
        states = ", ".join(f"{inert(k)} {v}" for k, v in c.by_state.items()) or "-"
        apps = ", ".join(f"{inert(k) or '(none)'} {v}" for k, v in list(c.by_application.items())[:6]) or "-"
        parts.append(
            f"Connections\n  {c.total}/{c.max}  by state: {states}\n  by application: {apps}\n"
            f"  oldest transaction: {_num(c.oldest_xact_age_s, ' s')} (pid {c.oldest_xact_pid or '-'})"
            f"  xmin held by: pid {c.xmin_holder_pid or '-'} ({inert(c.xmin_holder_application or '-')})"
        )
    if problems:
        parts.append("Probe problems\n" + "\n".join(problems))
    return "\n\n".join(parts)
