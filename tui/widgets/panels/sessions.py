"""The Sessions panel: every backend the probe's role sees, as pg_activity lists them (pid, state,
durations, wait, blockers, application, user, database, client, backend type, query), sorted by
any column (`>`), filtered (`/`), idle ones hidden on request (`a`); the sessions that block
others and the one that holds the xmin horizon back are marked. Enter opens a session's details.

Cheap with thousands of sessions: only the rows on screen (and a few either side) are formatted
again each sample; a row out of view keeps its cells until it scrolls back into view."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from itertools import chain
from operator import attrgetter
from typing import Any, ClassVar, cast

from rich.text import Text

from probes.model import SessionSample, Snapshot

from ... import format as fmt
from ..keyed_table import Column, KeyedTable, RowsShown
from .base import CULPRIT_STATES, SHORT_STATES, Panel, matches_filter, unknown_row

# The states that run nothing (a session waiting for its client): `a` hides them. An idle
# session *in a transaction* is never hidden: it holds locks and the xmin horizon.
IDLE_STATES = frozenset({"idle", "sleeping"})


INF = float("inf")
PID = attrgetter("pid")
BLOCKED_BY = attrgetter("blocked_by")

# How each order sorts: its keys, the least significant first, each a scalar (stable sorts one
# after the other: the same order as one tuple key, without a tuple made per session; with
# 5,000 sessions a tuple key was the panel's largest cost). Every order ends on the pid.
XACT_DESC: Callable[[SessionSample], float] = lambda s: -s.xact_age_s if s.xact_age_s is not None else INF  # noqa: E731
QUERY_DESC: Callable[[SessionSample], float] = lambda s: -s.query_age_s if s.query_age_s is not None else INF  # noqa: E731


def _text(field: str) -> Callable[[SessionSample], str]:
    get = attrgetter(field)
    return lambda s: (get(s) or "").lower()


ORDERS: dict[str, tuple[Callable[[SessionSample], Any], ...]] = {
    "xact": (PID, QUERY_DESC, XACT_DESC),
    "time": (PID, QUERY_DESC),
    "pid": (PID,),
    "state": (PID, _text("state")),
    "wait": (PID, _text("wait_event"), _text("wait_event_type"), lambda s: not s.blocked_by),
    "application": (PID, _text("application")),
    "user": (PID, _text("user")),
    "database": (PID, _text("database")),
    "client": (PID, _text("client")),
    "backend": (PID, _text("backend_type")),
    "query": (PID, _text("query")),
}


def sort_sessions(sessions: list[SessionSample], order: str, *, in_default_order: bool = False) -> None:
    """Sort `sessions` in place by the named order (an unknown name: the default).
    `in_default_order`: they come in the default order already (the probe has the database sort
    them, as it must for its cap): nothing to do for that order."""
    if in_default_order and ORDERS.get(order) is ORDERS["xact"]:
        return
    for key in ORDERS.get(order, ORDERS["xact"]):
        sessions.sort(key=key)


class SessionsPanel(Panel):
    """One row per session (its pid the key), in the chosen order."""

    COLUMNS: ClassVar[list[Column]] = [
        Column("pid", "PID", 0),
        Column("state", "State", 0),
        Column("time", "Time", 0),  # how long its query has run (idle: how long it has been idle), pg_activity's TIME+
        Column("xact", "Xact", 3),  # how long its transaction has been open
        Column("role", "Holds up", 1),  # `11, xmin`: the sessions it blocks (as the Locks tree counts them), the xmin horizon
        Column("wait", "Waits for", 4),  # the lock and its blockers, else the wait event
        Column("application", "Application", 2, text=True, min_width=8),
        Column("user", "User", 5, text=True, min_width=8),
        Column("database", "Database", 6, text=True, min_width=8),
        Column("client", "Client", 7, text=True, min_width=8),
        Column("backend", "Backend", 8, text=True, min_width=8),
        Column("query", "Query", 3, text=True, min_width=12),
    ]
    SORTS: ClassVar[tuple[tuple[str, str], ...]] = (
        ("xact", "transaction age ↓"), ("time", "query time ↓"), ("pid", "pid"), ("state", "state"),
        ("wait", "waits"), ("application", "application"), ("user", "user"), ("database", "database"),
        ("client", "client"), ("backend", "backend type"), ("query", "query"),
    )

    def __init__(self) -> None:
        super().__init__("Sessions", id="sessions")
        self.hide_idle = False
        self._snapshot: Snapshot | None = None
        self._filter_text = ""
        self._rendered: dict[str, tuple[object, tuple[object, ...]]] = {}  # pid → (its facts, its cells)
        self._drawn: dict[str, tuple[object, ...]] = {}  # pid → its cells alone (the same tuples)
        self._synced_keys: list[str] = []  # the rows' keys, in order, as the table was last synced
        self._shown: list[SessionSample] = []  # the rows' sessions, in order
        self._keys: dict[int, str] = {}  # a pid's row key, made once
        self._title = "Sessions"  # with its count; shown whole where the border has room (_fit_title)

    def compose(self):
        yield KeyedTable(self.COLUMNS, id="sessions-table")

    def _fit_title(self) -> None:
        """The title with its count where the border has room for it whole, else `Sessions` alone
        (a count is whole or absent; the rows' count is in the subtitle)."""
        width = self.size.width
        title = self._title if not width or len(self._title) + 4 <= width else "Sessions"  # content width: the border takes 6
        if self.border_title != title:
            self.border_title = title

    def on_resize(self) -> None:
        super().on_resize()
        self._fit_title()

    def on_rows_shown(self, message: RowsShown) -> None:
        super().on_rows_shown(message)
        if self._snapshot is not None:  # rows that scrolled into view: drawn from the last sample now
            self.show(self._snapshot, self._filter_text)

    @property
    def shown_pids(self) -> list[int]:
        """The pids of the rows, in their order."""
        return [s.pid for s in self._shown]

    def toggle_idle(self) -> bool:
        """Hide the idle sessions, or show them again; returns whether they are hidden now."""
        self.hide_idle = not self.hide_idle
        self.set_subtitle("idle", *(("idle hidden (a)", "-idle") if self.hide_idle else ()))
        if self._snapshot is not None:
            self.show(self._snapshot, self._filter_text)
        return self.hide_idle

    @property
    def selected_pid(self) -> int | None:
        table = self.query_one(KeyedTable)
        if not table.row_count or table.cursor_row is None or not self._shown:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return int(key) if key is not None and key.isdigit() else None

    def select_pid(self, pid: int) -> bool:
        """Put the cursor on session `pid`'s row (where C, K and Enter act), focused; False when
        the list does not show it (ended, filtered out, an idle one hidden)."""
        table = self.query_one(KeyedTable)
        key = str(pid)
        if key not in table.rows:
            return False
        table.move_cursor(row=table.get_row_index(key))
        table.focus()
        return self.selected_pid == pid

    def selected_session(self) -> SessionSample | None:
        pid = self.selected_pid
        if pid is None or self._snapshot is None:
            return None
        return next((s for s in self._snapshot.sessions if s.pid == pid), None)

    def show(self, snapshot: Snapshot, filter_text: str = "") -> None:
        self._snapshot, self._filter_text = snapshot, filter_text
        table = self.query_one(KeyedTable)
        unknown = snapshot.unknown_list("sessions")
        if unknown is not None or "connections" not in snapshot.probes:
            # Not read: unknown (and why), never an empty list, which would read as "no sessions".
            self._shown = []
            self._rendered.clear()
            self._drawn.clear()
            self._synced_keys = []
            self.border_title = "Sessions"
            reason = unknown if unknown is not None else "not sampled"
            table.sync({"unknown": unknown_row(reason, len(self.COLUMNS), at=len(self.COLUMNS) - 1)})
            return
        # pid → how many sessions it holds up: a root blocker's count is the Locks tree's (directly
        # or behind others), any other blocker's the sessions waiting on it directly.
        blocks: dict[int, int] = Counter(chain.from_iterable(map(BLOCKED_BY, snapshot.sessions)))
        for root in snapshot.blockers:
            blocks[root.pid] = max(root.blocked_count, blocks.get(root.pid, 0))
        locks = {b.pid: b for b in snapshot.blocked}
        shown = list(snapshot.sessions)
        if self.hide_idle:
            shown = [s for s in shown if s.state not in IDLE_STATES or s.pid in blocks]
        if filter_text:
            shown = [s for s in shown if matches_filter(filter_text, s.pid, s.user, s.application, s.database, s.client,
                                                        s.state, s.backend_type, s.query)]
        sort_sessions(shown, self.sort, in_default_order=snapshot.sessions_in_order)
        key_of = self._keys
        if len(key_of) > 4 * len(shown) + 1000:
            key_of.clear()  # pids come and go: forget the old ones now and then
        pids = list(map(PID, shown))
        keys = list(map(key_of.get, pids))
        if None in keys:
            keys = [key or key_of.setdefault(pid, str(pid)) for key, pid in zip(keys, pids, strict=True)]
        str_keys = cast(list[str], keys)
        rendered, drawn = self._rendered, self._drawn
        span = table.view_span()
        if span is not None and str_keys == self._synced_keys:
            # The same rows in the same order as the table has (the usual sample: every session's
            # ages grew alike): only the rows on screen are formatted and handed over. No pass
            # in Python over the other thousands.
            start, stop = span
            fresh_rows = {}
            for s, key in zip(shown[start:stop], str_keys[start:stop], strict=True):
                cells, changed = self._row_cells(key, s, blocks, locks)
                if changed:
                    fresh_rows[key] = cells
            self._shown = shown
            self._set_title(snapshot)
            table.update_rows(fresh_rows)
            return
        in_view = None if span is None else set(str_keys[span[0]: span[1]])
        # A row out of view keeps the cells it has (the same tuple, so the table does not compare
        # it); the rows in view, and any not drawn yet, are formatted again when their facts
        # changed. Mapped and set-differenced in C: 5,000 rows a sample.
        rows: dict[str, tuple[object, ...] | None] = dict(zip(str_keys, map(drawn.get, str_keys), strict=True))
        session_of = dict(zip(str_keys, shown, strict=True))
        if in_view is None:
            fresh = str_keys
        else:
            fresh = list(in_view | (session_of.keys() - drawn.keys()))
        for key in fresh:
            rows[key] = self._row_cells(key, session_of[key], blocks, locks)[0]
        if len(rendered) > len(rows):
            for gone in rendered.keys() - rows.keys():
                del rendered[gone]
                drawn.pop(gone, None)
        self._shown = shown
        self._set_title(snapshot)
        table.sync(cast(dict[str, tuple[object, ...]], rows))  # every row has its cells now
        self._synced_keys = str_keys

    def _row_cells(self, key: str, s: SessionSample, blocks: dict[int, int], locks: dict) -> tuple[tuple[object, ...], bool]:
        """A session's cells, formatted again only when its facts changed; and whether they did."""
        lock = locks.get(s.pid)
        facts = (s, blocks.get(s.pid, 0), lock)
        cached = self._rendered.get(key)
        if cached is not None and cached[0] == facts:
            return cached[1], False
        cells = self._cells(s, facts[1], lock)
        self._rendered[key] = (facts, cells)
        self._drawn[key] = cells
        return cells, True

    def _set_title(self, snapshot: Snapshot) -> None:
        total = snapshot.sessions_total if snapshot.sessions_total is not None else len(snapshot.sessions)
        title = f"Sessions {total:,}"
        if len(snapshot.sessions) < total:  # capped by the probe: the oldest transactions are kept
            title += f" ({len(snapshot.sessions):,} listed)"
        self._title = title
        self._fit_title()

    @staticmethod
    def _cells(s: SessionSample, blocks: int, lock) -> tuple[object, ...]:
        culprit = s.state in CULPRIT_STATES
        marks = []
        if blocks:
            marks.append(f"{blocks:,}")
        if s.xmin_holder:
            marks.append("xmin")
        role = Text(", ".join(marks), style="bold red" if blocks else "bold yellow") if marks else ""
        pid_style = "bold red" if blocks else ("yellow" if s.blocked_by else "")
        if s.blocked_by:
            by = ",".join("prepared" if p == 0 else str(p) for p in s.blocked_by)
            what = f"{lock.lock_type} {lock.mode}" if lock is not None and lock.lock_type else (s.wait_event or "lock")
            if lock is not None and lock.relation:
                what += f" {lock.relation}"
            wait: object = Text(f"{what} ← {by}", style="yellow")
        elif s.wait_event:
            wait = f"{s.wait_event_type}:{s.wait_event}" if s.wait_event_type else s.wait_event
        else:
            wait = ""
        state = s.state or ("-" if s.backend_type == "client backend" else "")
        return (
            Text(str(s.pid), style=pid_style) if pid_style else str(s.pid),
            fmt.plain(SHORT_STATES.get(state, state), style="bold red" if culprit else ""),
            fmt.seconds(s.query_age_s) if s.query_age_s is not None else "",
            fmt.seconds(s.xact_age_s) if s.xact_age_s is not None else "",
            role,
            wait,
            fmt.inert(s.application or ""),
            fmt.inert(s.user or ""),
            fmt.inert(s.database or ""),
            fmt.inert(s.client or ""),
            fmt.inert(s.backend_type or ""),
            fmt.one_line(s.query, 300) if s.query else "",
        )
