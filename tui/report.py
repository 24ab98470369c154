"""A snapshot as plain text: `queuetop snapshot` without --json. Every text from the database
(names, applications, queries, error texts) is inert here, as on the dashboard: the report goes
to a terminal as often as to a file. The JSON keeps the original text."""

from __future__ import annotations

from collections.abc import Sequence

from rich.cells import cell_len

from dbcore.text import inert, inert_line
from probes.model import Connections, QueueSample, ServerInfo, Snapshot, utc_text
from probes.pooler_console import POOLER, pool_name, pools_of

from .format import COUNTING, blocks_text, byte_size, database_name, seconds, wait_phrase
from .serverline import server_parts


def _num(value: object, suffix: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.1f}{suffix}"
    if isinstance(value, int):
        return f"{value:,}{suffix}"
    return str(value)


def _table(title: str, header: tuple[str, ...], rows: Sequence[tuple[object, ...]], unknown: str | None = None) -> str:
    """Columns aligned by terminal cells (a wide character takes two); every text cell inert.
    `unknown`: why the rows could not be read (the probe failed): said instead of the table, never
    an empty one ("(none)"), which would read as calm."""
    if unknown is not None:
        return f"{title}\n  unknown: {inert_line(unknown)}"
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


def _at(client: str | None) -> str:
    return f" at {client}" if client else ""


def horizon_age(c: Connections) -> str | None:
    """The xmin horizon's age in time, as said beside its holder: `4m12s`, `at least 4m12s` (older
    than the probe's history of transaction ids), or None where it is not known."""
    if c.xmin_holder_age_s is None:
        return None
    return ("at least " if c.xmin_holder_age_at_least else "") + seconds(c.xmin_holder_age_s)


def xmin_holder(c: Connections, *, words: str = "long") -> str | None:
    """What holds the xmin horizon back, or None when nothing does: a session's pid (and its
    application), a prepared transaction's gid, "slot 'Y'" (a replication slot), "standby feedback
    from 'X'" (a standby's hot_standby_feedback without a slot); not inert yet (the
    gid and the names are the database's text). `words`: "long" for the text snapshot, "short"
    for the dashboard's summary line (which adds the application itself)."""
    long = words == "long"
    if c.xmin_holder_kind == "prepared":
        return f"{'prepared transaction' if long else 'prepared'} {c.xmin_holder_name!r}"
    if c.xmin_holder_kind == "slot":
        standby = f" (standby {c.xmin_holder_application!r}{_at(c.xmin_holder_client)})" \
            if long and c.xmin_holder_application else ""
        return f"slot {c.xmin_holder_name!r}{standby}"
    if c.xmin_holder_kind == "standby":  # its hot_standby_feedback, through its walsender
        if long:
            return (f"standby feedback from {c.xmin_holder_name!r}{_at(c.xmin_holder_client)} "
                    f"(walsender pid {c.xmin_holder_pid})")
        return f"standby feedback from {c.xmin_holder_name!r}" + (f" {c.xmin_holder_client}" if c.xmin_holder_client else "")
    if c.xmin_holder_pid is None:  # a session's, or a recording's from before the kinds
        return None
    return f"pid {c.xmin_holder_pid}" + (f" ({c.xmin_holder_application or '-'})" if long else "")


def server_stats_line(snapshot: Snapshot) -> str:
    """The server's figures under the header, the dashboard's header line unfitted ("" where the
    snapshot has none and no probe says why: a recording made before they were read)."""
    if snapshot.server_stats is None and "server_stats" not in snapshot.probes:
        return ""
    line = "".join(text for text, _style, _priority in server_parts(snapshot))
    return f"\nserver: {line}" if snapshot.server_stats is not None else f"\n{line}"  # ("server figures unknown: why")


def standby_line(server: ServerInfo) -> str:
    """A hot standby's line under the header ("" on a primary): its replay's lag in time and WAL,
    whether it is paused, and what the figures are as of (the last replayed transaction)."""
    if not server.standby:
        return ""
    lag = "unknown" if server.replay_lag_s is None else seconds(server.replay_lag_s)
    lag += f" ({byte_size(server.replay_lag_bytes)})" if server.replay_lag_bytes is not None else ""
    paused = ", replay PAUSED" if server.replay_paused else ""
    behind = server.replay_paused or server.replay_lag_s or server.replay_lag_bytes  # caught up: as of now
    as_of = f"; figures as of {utc_text(server.replayed_at)} (the last replayed transaction)" \
        if server.replayed_at and behind else ""
    return f"\nSTANDBY (read-only): replay lag {lag}{paused}{as_of}; verdicts need the primary"


def _replication(s: Snapshot) -> str:
    """The standbys and slots, one line each ("" where there are none, as the dashboard hides its
    panel then); unknown, with why, where the probe failed."""
    unknown = s.unknown_list("replication")
    r = s.replication
    if r is None or not (r.standbys or r.slots):
        return _table("Replication", (), [], unknown) if unknown is not None else ""
    rows = [(st.application or "-", "standby",
             (st.state or "hidden") + (f" {st.sync_state}" if st.sync_state not in (None, "async") else ""), st.client or "-",
             seconds(st.replay_lag_s) if st.replay_lag_s is not None else "-", byte_size(st.replay_lag_bytes), "-")
            for st in r.standbys]
    rows += [(slot.name, f"{slot.type} slot", "lost" if slot.wal_status == "lost" else "active" if slot.active else "inactive",
              slot.database or "-", "-", byte_size(slot.retained_wal_bytes),
              _num(slot.xmin_age) if slot.xmin_age is not None else f"{_num(slot.catalog_xmin_age)} (catalog)"
              if slot.catalog_xmin_age is not None else "-") for slot in r.slots]
    table = _table("Replication (WAL: not yet replayed on the standby, or kept for the slot)",
                   ("name", "kind", "state", "client/db", "replay lag", "WAL", "xmin age"), rows)
    return table + (f"\n  unknown: {inert_line(r.standbys_unknown)}" if r.standbys_unknown else "")


def _pooler(s: Snapshot) -> str:
    """The PgBouncer pools of the monitored database, one line each ("" where no PgBouncer was
    given, as the dashboard hides its panel then); unknown, with why, where its console could not
    be read."""
    if POOLER not in s.probes:
        return ""
    title = "Pooler (PgBouncer pools of this database: clients waiting for a server connection, the oldest's wait)"
    unknown = s.unknown_list("pooler")
    pools = pools_of(s.pooler, s.server.database)
    rows = [(pool_name(p), p.cl_waiting, seconds(p.maxwait_s) if p.cl_waiting or p.maxwait_s else "-", p.cl_active,
             f"{p.sv_active:,}/{p.pool_size:,}" if p.pool_size else p.sv_active, p.sv_idle, p.pool_mode or "-") for p in pools]
    return _table(title, ("pool", "waiting", "max wait", "clients", "servers", "idle", "mode"), rows, unknown)


def _counted(q: QueueSample, figure: str) -> object:
    """A queue's figure, or COUNTING where it is not known yet and being counted."""
    value = getattr(q, figure)
    return COUNTING if value is None and figure in q.counting else value


def render(snapshot: Snapshot) -> str:
    s = snapshot
    head = (
        f"queuetop snapshot  {s.taken_at:%Y-%m-%d %H:%M:%S} UTC  {inert_line(s.server.label or '')}\n"
        f"{database_name(s.server.dialect)} {inert_line(s.server.version or '?')}, database {inert(s.server.database or '?')}, "
        f"probes {s.elapsed_ms:.1f} ms"
    ) + standby_line(s.server) + server_stats_line(s)
    problems = [f"  {inert(name)}: {inert_line(status.error)}" for name, status in s.probes.items() if status.error]
    notes = [f"  {inert(name)}: {inert_line(status.notes)}" for name, status in s.probes.items() if status.notes]
    queues = [
        (
            q.name + (" ~" if q.depth_is_estimate else ""),
            q.source,
            "unknown" if q.error and q.depth is None else _counted(q, "depth"),
            _counted(q, "ready"),
            _counted(q, "in_flight"),
            _counted(q, "delayed"),
            _counted(q, "dead"),
            q.oldest_ready_age_s,
            q.enqueued_per_s,
            q.dequeued_per_s,
            q.failed_per_s,
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
         b.wait_s, wait_phrase(b, s.server.database), b.lock_type or "-", b.mode or "-",
         str(len(b.worker_pids)) if b.worker_pids else "-", _shorten(b.query, 40))
        for b in s.blocked
    ]
    prepared = [(repr(p.gid), p.owner or "-", p.database or "-", p.age_s, p.blocked_count) for p in s.prepared_xacts]
    blockers = [
        (str(b.pid), blocks_text(b.blocked_count, b.blocked_processes), (b.state or "-") + (f" (cycle {b.cycle})" if b.cycle else ""),
         b.xact_age_s, b.application or "-", _shorten(b.query, 40)) for b in s.blockers
    ]
    cycles = [(str(c.id), " → ".join(map(str, [*c.members, c.members[0]])), ",".join(map(str, c.waiting)) or "-", c.wait_s)
              for c in s.cycles]
    queue_table = _table(
        "Queues (~ = depth estimated)",
        ("name", "source", "depth", "ready", "in-flight", "delayed", "dead", "oldest s", "in/s", "out/s", "failed/s", "dead tup"),
        queues, s.unknown_list("queues"),
    )
    # What is unknown beside the figures that were read: a queue's (its table locked), a source's.
    queue_status = s.probes.get("queues")
    unknown_queues = [f"  {inert_line(q.name)}: unknown: {inert_line(q.error)}" for q in s.queues if q.error and q.depth is None]
    if s.queues and queue_status is not None and queue_status.unread and queue_status.error:
        unknown_queues.append(f"  sources not read ({inert_line(', '.join(queue_status.unread))}): unknown: "
                              f"{inert_line(queue_status.error)}")
    locks_unknown = s.unknown_list("blocked")
    parts = [
        head,
        "\n".join([queue_table, *unknown_queues]),
        _table("Rings", ("name", "used/capacity", "refused"), rings, s.unknown_list("rings")),
        _table("Leases", ("name", "state", "holder", "token", "expires in s"), leases, s.unknown_list("leases")),
        _table("Blocked", ("pid", "blocked by", "roots", "wait s", "wait", "lock", "mode", "workers", "query"), blocked, locks_unknown),
        _table("Root blockers", ("pid", "blocks", "state", "xact s", "application", "query"), blockers, locks_unknown),
    ]
    if cycles:
        parts.append(_table("Wait cycles (deadlocks the server breaks after deadlock_timeout: each member is a root of the rest)",
                            ("cycle", "members, in the order of their waits", "waiting on it", "longest wait s"), cycles))
    if prepared:
        parts.append(_table("Prepared transactions (no session holds them: end each with COMMIT PREPARED or ROLLBACK PREPARED 'gid')",
                            ("gid", "owner", "database", "age s", "blocks"), prepared))
    parts.append(_table(
        "Compaction",
        ("name", "pending deltas", "groups", "last run", "rows folded", "ms"),
        [(x.name, x.pending_deltas, x.groups, f"{x.last_run_at:%H:%M:%S}" if x.last_run_at else "-",
          x.last_rows_folded, x.last_duration_ms) for x in s.compaction],
        s.unknown_list("compaction"),
    ))
    groups = [(str(g.group), _shorten(g.title, 40), g.pending_deltas) for x in s.compaction for g in x.by_group]
    if groups:
        parts.append(_table("Pending deltas by group", ("group", "title", "pending"), groups))
    c = s.connections
    connections_unknown = s.unknown_list("connections")
    if c is not None:
        states = ", ".join(f"{inert(k)} {v}" for k, v in c.by_state.items()) or "-"
        apps = ", ".join(f"{inert(k) or '(none)'} {v}" for k, v in list(c.by_application.items())[:6]) or "-"
        holder = xmin_holder(c)
        age = horizon_age(c)
        held = "-" if holder is None else inert_line(holder) + (
            f", {c.xmin_holder_age_xids:,} xids old" if c.xmin_holder_age_xids is not None else "") + (
            f", {age} old" if age is not None else "")
        if c.xmin_holder_unknown is not None:
            held = f"unknown ({inert_line(c.xmin_holder_unknown)})"
        oldest = (f"unknown ({inert_line(c.oldest_xact_unknown)})" if c.oldest_xact_unknown is not None
                  else f"{_num(c.oldest_xact_age_s, ' s')} (pid {c.oldest_xact_pid or '-'})")
        usable = f" ({c.usable:,} usable)" if c.usable is not None and c.usable != c.max else ""
        near = (f"\n  NEAR THE LIMIT: {c.total:,} of {c.usable:,} usable connections in use ({100 * c.total / c.usable:.0f} %)"
                if c.near_limit and c.usable else "")
        parts.append(
            f"Connections{near}\n  {c.total}/{c.max}{usable}  by state: {states}\n  by application: {apps}\n"
            f"  oldest transaction: {oldest}"
            f"  xmin held by: {held}"
        )
    elif connections_unknown is not None:
        parts.append(f"Connections\n  unknown: {inert_line(connections_unknown)}")
    replication = _replication(s)
    if replication:
        parts.append(replication)
    pooler = _pooler(s)
    if pooler:
        parts.append(pooler)
    if problems:
        parts.append("Probe problems\n" + "\n".join(problems))
    if notes:
        parts.append("Probe notes\n" + "\n".join(notes))
    return "\n\n".join(parts)
