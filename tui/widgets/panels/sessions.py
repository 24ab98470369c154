"""The Sessions panel: every client session the probe's role sees, as pg_activity lists them (pid,
state, durations, wait, blockers, application, user, database, client, backend type, query),
sorted by any column (`>`), filtered (`/`), idle ones hidden on request (`a`); the server's
background processes and queuetop's own sessions behind a toggle (`A`), never counted as
blocked; the sessions that block others and the one that holds the xmin horizon back are marked.
Enter opens a session's details.

The cursor is on a session, not a line: its identity is (pid, backend start). It stays on that
session while the list re-sorts and rows come and go; when the session ends, its line stays
under the cursor saying `ended` (until the cursor leaves it), rather than the cursor slipping
onto another session. Enter, C and K act on the session under the cursor, by that identity;
Space tags sessions by it too (`*` before the pid), and C and K then act on every tagged one.

Cheap with thousands of sessions: only the rows on screen (and a few either side) are formatted
again each sample; a row out of view keeps its cells until it scrolls back into view."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import datetime
from itertools import chain
from operator import attrgetter
from typing import Any, ClassVar, cast

from rich.text import Text

from probes.locklabels import MODE_WORDS
from probes.model import SessionSample, Snapshot

from ... import format as fmt
from ...filters import session_duration
from ..keyed_table import Column, KeyedTable, RowsShown
from .base import CULPRIT_STATES, SHORT_STATES, Panel, unknown_row

# The states that run nothing (a session waiting for its client): `a` hides them. An idle
# session *in a transaction* is never hidden: it holds locks and the xmin horizon.
IDLE_STATES = frozenset({"idle", "sleeping"})


INF = float("inf")
PID = attrgetter("pid")
BLOCKED_BY = attrgetter("blocked_by")
ENDED = "ended:"  # the key of a line that stands for a session that ended under the cursor
TAG_MARK = "*"  # before a tagged session's pid (Space)


def held_modes(snapshot: Snapshot) -> dict[int, str]:
    """pid → the lock mode it holds that stops others, in the lock tree's words (ACCESS
    EXCLUSIVE): a root blocker's (Blocker.held_mode: on what its waiters want), or, for a session
    nobody waits on yet, the strongest it holds on a queue's table (QueueSample.lockers)."""
    held: dict[int, str] = {}
    for root in snapshot.blockers:
        if root.held_mode:
            held[root.pid] = MODE_WORDS.get(root.held_mode, root.held_mode)
    for queue in snapshot.queues:
        for locker in queue.lockers or ():
            if locker.pid > 0 and not locker.waiting and locker.pid not in held:
                held[locker.pid] = MODE_WORDS.get(locker.mode, locker.mode)
    return held


def listed_by_default(s: SessionSample) -> bool:
    """A client's session (not a server process, not one of queuetop's own): what the list shows
    until `A` shows every backend."""
    return not s.background and not s.own

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


# A session's fields for the filter (`/`, --filter, --min-duration: tui/filters.py). The state
# as the server says it and as the list shows it short (`idle in xact`).
SESSION_FIELDS: dict[str, Callable[[SessionSample], object]] = {
    "pid": PID, "app": attrgetter("application"), "user": attrgetter("user"), "db": attrgetter("database"),
    "state": lambda s: (s.state, SHORT_STATES.get(s.state or "")), "query": attrgetter("query"),
    "client": attrgetter("client"), "backend": attrgetter("backend_type"),
    "wait": lambda s: (s.wait_event_type, s.wait_event, "lock" if s.blocked_by else None), "dur": session_duration,
}
SESSION_WORDS = ("pid", "user", "app", "db", "client", "state", "backend", "query")


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

    # PID, State and Application first: they stay beside each other however narrow the panel (the
    # lock tree takes the row's room while sessions are blocked).
    COLUMNS: ClassVar[list[Column]] = [
        Column("pid", "PID", 0),
        Column("state", "State", 0),
        Column("time", "Time", 2),  # how long its query has run (idle: how long it has been idle), pg_activity's TIME+
        Column("xact", "Xact", 3),  # how long its transaction has been open
        Column("role", "Holds up", 1),  # `11, xmin`: the sessions it blocks (as the Locks tree counts them), the xmin horizon
        Column("wait", "Waits for", 4),  # the lock and its blockers, else the wait event
        Column("application", "App", 0, text=True, min_width=6),  # pg_activity's APP
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

    FILTER_FIELDS: ClassVar[dict[str, Callable[[Any], object]]] = SESSION_FIELDS
    FILTER_WORDS = SESSION_WORDS

    def __init__(self) -> None:
        super().__init__("Sessions", id="sessions")
        self.hide_idle = False
        self.show_all = False  # every backend: the server's processes and queuetop's own sessions too (A)
        # The line that stands for the session that ended under the cursor: (its key, the
        # session as last listed, its cells), kept while the cursor stays on it.
        self._ended: tuple[str, SessionSample, tuple[object, ...]] | None = None
        self._snapshot: Snapshot | None = None
        # The sessions tagged (Space), by identity (pid, backend start), as last listed: C and K act
        # on them all; one that ends is untagged (said once).
        self.tags: dict[tuple[int, datetime | None], SessionSample] = {}
        self._rendered: dict[str, tuple[object, tuple[object, ...]]] = {}  # pid → (its facts, its cells)
        self._drawn: dict[str, tuple[object, ...]] = {}  # pid → its cells alone (the same tuples)
        self._synced_keys: list[str] = []  # the rows' keys, in order, as the table was last synced
        self._shown: list[SessionSample] = []  # the rows' sessions, in order
        self._keys: dict[int, str] = {}  # a pid's row key, made once
        self._title = "Sessions"  # with its count; shown whole where the border has room (_fit_title)

    def compose(self):
        yield KeyedTable(self.COLUMNS, id="sessions-table", pinned=2)  # zoomed: PID and State beside every column

    def _fit_title(self) -> None:
        """The title with its count where the border has room for it whole, else `Sessions` alone
        (a count is whole or absent; the rows' count is in the subtitle)."""
        width = self.size.width
        title = self._title if not width or len(self._title) + 4 <= width else "Sessions"  # content width: the border takes 6
        self.show_title(title)

    def on_resize(self) -> None:
        super().on_resize()
        self._fit_title()

    def on_rows_shown(self, message: RowsShown) -> None:
        super().on_rows_shown(message)
        if self._snapshot is not None:  # rows that scrolled into view: drawn from the last sample now
            self.show(self._snapshot)

    @property
    def shown_pids(self) -> list[int]:
        """The pids of the sessions listed, in their order (a line for an ended session is none)."""
        return [s.pid for s in self._shown]

    def toggle_all(self) -> bool:
        """Show every backend (the server's processes, queuetop's own sessions), or the clients'
        sessions alone again; returns whether every backend is shown now."""
        self.show_all = not self.show_all
        if self._snapshot is not None:
            self.show(self._snapshot)
        return self.show_all

    def toggle_idle(self) -> bool:
        """Hide the idle sessions, or show them again; returns whether they are hidden now."""
        self.hide_idle = not self.hide_idle
        self.set_subtitle("idle", *(("idle hidden (a)", "-idle") if self.hide_idle else ()))
        if self._snapshot is not None:
            self.show(self._snapshot)
        return self.hide_idle

    @property
    def selected_pid(self) -> int | None:
        """The pid of the session under the cursor; None on no session (a line saying one ended)."""
        key = self.query_one(KeyedTable).cursor_key() if self._shown else None
        return int(key) if key is not None and key.isdigit() else None

    @property
    def selected_identity(self) -> tuple[int, datetime | None] | None:
        """(pid, backend start) of the session under the cursor, as the list shows it."""
        session = self.session_of_key(self.query_one(KeyedTable).cursor_key())
        return session.identity if session is not None else None

    @property
    def ended_pid(self) -> int | None:
        """The pid of the session that ended under the cursor, while the cursor is on its line."""
        key = self.query_one(KeyedTable).cursor_key()
        ended = self._ended
        return ended[1].pid if ended is not None and key == ended[0] else None

    def session_of_key(self, key: str | None) -> SessionSample | None:
        """The session a row stands for, as listed (None for a line of an ended session)."""
        if key is None or not key.isdigit():
            return None
        pid = int(key)
        return next((s for s in self._shown if s.pid == pid), None)

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
        return self.session_of_key(self.query_one(KeyedTable).cursor_key())

    def show(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot
        table = self.query_one(KeyedTable)
        unknown = snapshot.unknown_list("sessions")
        if unknown is not None or "connections" not in snapshot.probes:
            # Not read: unknown (and why), never an empty list, which would read as "no sessions".
            self._shown = []
            self._ended = None
            self._rendered.clear()
            self._drawn.clear()
            self._synced_keys = []
            self.show_title("Sessions")
            reason = unknown if unknown is not None else "not sampled"
            table.sync({"unknown": unknown_row(reason, len(self.COLUMNS), at=len(self.COLUMNS) - 1)})
            return
        # Client sessions unless every backend is asked for (A): the server's processes and
        # queuetop's own sessions are never counted as blocked, whatever is shown.
        clients = [s for s in snapshot.sessions if listed_by_default(s)]
        # pid → how many sessions it holds up: a root blocker's count is the Locks tree's (directly
        # or behind others), any other blocker's the clients' sessions waiting on it directly.
        blocks: dict[int, int] = Counter(chain.from_iterable(map(BLOCKED_BY, clients)))
        for root in snapshot.blockers:
            blocks[root.pid] = max(root.blocked_count, blocks.get(root.pid, 0))
        locks = {b.pid: b for b in snapshot.blocked}
        # The lock a blocker holds that stops others, where the snapshot says it (the mode held
        # on a queue's table: its verdict's lockers), in the Holds up column.
        held = held_modes(snapshot)
        shown = list(snapshot.sessions) if self.show_all else clients
        self._say_backends(len(snapshot.sessions) - len(clients))
        listed = len(shown)
        if self.hide_idle:
            shown = [s for s in shown if s.state not in IDLE_STATES or s.pid in blocks]
        if self.filter:
            shown = list(filter(self.passes, shown))
        if self.tags:
            self._drop_ended_tags(snapshot)
        sort_sessions(shown, self.sort, in_default_order=snapshot.sessions_in_order)
        key_of = self._keys
        if len(key_of) > 4 * len(shown) + 1000:
            key_of.clear()  # pids come and go: forget the old ones now and then
        pids = list(map(PID, shown))
        keys = list(map(key_of.get, pids))
        if None in keys:
            keys = [key or key_of.setdefault(pid, str(pid)) for key, pid in zip(keys, pids, strict=True)]
        str_keys = cast(list[str], keys)
        ended = self._ended_under_cursor(table, snapshot)
        if ended is not None:  # its line, where it was: the cursor stays on it
            at = min(self._ended_at(table, ended[0]), len(str_keys))
            str_keys = [*str_keys[:at], ended[0], *str_keys[at:]]
            shown_with: list[SessionSample | None] = [*shown[:at], None, *shown[at:]]
        rendered, drawn = self._rendered, self._drawn
        span = table.view_span()
        if span is not None and str_keys == self._synced_keys and ended is None:
            # The same rows in the same order as the table has (the usual sample: every session's
            # ages grew alike): only the rows on screen are formatted and handed over. No pass
            # in Python over the other thousands.
            start, stop = span
            fresh_rows = {}
            for s, key in zip(shown[start:stop], str_keys[start:stop], strict=True):
                cells, changed = self._row_cells(key, s, blocks, locks, held)
                if changed:
                    fresh_rows[key] = cells
            self._shown = shown
            self._set_title(snapshot, listed)
            table.update_rows(fresh_rows)
            return
        in_view = None if span is None else set(str_keys[span[0]: span[1]])
        # A row out of view keeps the cells it has (the same tuple, so the table does not compare
        # it); the rows in view, and any not drawn yet, are formatted again when their facts
        # changed. Mapped and set-differenced in C: 5,000 rows a sample.
        rows: dict[str, tuple[object, ...] | None] = dict(zip(str_keys, map(drawn.get, str_keys), strict=True))
        session_of = dict(zip(str_keys, shown, strict=True)) if ended is None else \
            {key: s for key, s in zip(str_keys, shown_with, strict=True) if s is not None}
        if ended is not None:
            rows[ended[0]] = ended[2]
        if in_view is None:
            fresh = [key for key in str_keys if key in session_of]
        else:
            fresh = list((in_view & session_of.keys()) | (session_of.keys() - drawn.keys()))
        for key in fresh:
            rows[key] = self._row_cells(key, session_of[key], blocks, locks, held)[0]
        if len(rendered) > len(rows):
            for gone in rendered.keys() - rows.keys():
                del rendered[gone]
                drawn.pop(gone, None)
        self._shown = shown
        self._set_title(snapshot, listed)
        table.sync(cast(dict[str, tuple[object, ...]], rows), cursor_to=ended[0] if ended is not None else None)
        self._synced_keys = str_keys

    # -- tags (Space): the sessions C and K act on together ---------------------------------------

    def toggle_tag(self) -> SessionSample | None:
        """Tag the session under the cursor, or untag it; returns it (None: no session there)."""
        session = self.selected_session()
        if session is None:
            return None
        identity = (session.pid, session.backend_start)
        if self.tags.pop(identity, None) is None:
            self.tags[identity] = session
        self._say_tags()
        if self._snapshot is not None:
            self.show(self._snapshot)
        return session

    def clear_tags(self) -> int:
        """Untag every session; returns how many were tagged."""
        count = len(self.tags)
        self.tags.clear()
        self._say_tags()
        if count and self._snapshot is not None:
            self.show(self._snapshot)
        return count

    def tagged_sessions(self) -> list[SessionSample]:
        """The tagged sessions, as the latest sample has them (else as last listed), by pid."""
        latest = {s.identity: s for s in self._snapshot.sessions} if self._snapshot is not None else {}
        return sorted((latest.get(identity, s) for identity, s in self.tags.items()), key=PID)

    def _drop_ended_tags(self, snapshot: Snapshot) -> None:
        """Untag the sessions the sample no longer has (their pid may be another backend's now),
        saying which once: C and K must not reach a session that was not tagged."""
        alive = {s.identity for s in snapshot.sessions}
        ended = [s for identity, s in self.tags.items() if identity not in alive]
        if not ended:
            return
        for s in ended:
            del self.tags[s.identity]
        self._say_tags()
        said = ", ".join(f"{s.pid} ({fmt.inert(s.application or '-')})" for s in ended[:5]) + (", …" if len(ended) > 5 else "")
        self.app.notify(f"tagged session{'s' if len(ended) > 1 else ''} {said} ended: untagged", severity="warning", timeout=5)

    def _say_tags(self) -> None:
        count = len(self.tags)
        key_for = getattr(self.app, "key_for", None)  # the key as the config's [keys] may have remapped it
        untag = key_for("sessions.untag") if key_for is not None else "T"
        self.set_subtitle("tags", *((f"{count} tagged ({untag} untags)", f"{count} tagged", f"{count}*") if count else ()))

    def _say_backends(self, others: int) -> None:
        """The border says what the list leaves out (the server's processes and queuetop's own
        sessions), or that it shows every backend."""
        if self.show_all:
            self.set_subtitle("backends", "every backend (A: clients only)", "all (A)")
        elif others:
            self.set_subtitle("backends", f"+{others:,} server/queuetop backends (A)", f"+{others:,} (A)")
        else:
            self.set_subtitle("backends")

    def _ended_under_cursor(self, table: KeyedTable, snapshot: Snapshot) -> tuple[str, SessionSample, tuple[object, ...]] | None:
        """The line of the session the operator's cursor is on, if it has ended since the last
        sample (no session of the snapshot has its pid and backend start); also the line made
        before, while the cursor stays on it. None when the cursor is on a session that lives (or
        on none the operator chose)."""
        key = table.followed_key()
        if key is None:
            self._ended = None
            return None
        if self._ended is not None and key == self._ended[0]:
            return self._ended  # the cursor stays on the ended session's line
        self._ended = None
        before = self.session_of_key(key)  # as the list showed it last
        if before is None:
            return None
        pid, started = before.identity
        if any(s.pid == pid and s.backend_start == started for s in snapshot.sessions):
            return None  # it lives (if it is not listed, the filter, the idle toggle or A hides it)
        cells: tuple[object, ...] = (
            Text(str(before.pid), style="dim"), Text("ended", style="bold yellow"), "", "", "", "",
            fmt.inert(before.application or ""), fmt.inert(before.user or ""), fmt.inert(before.database or ""),
            fmt.inert(before.client or ""), fmt.inert(before.backend_type or ""),
            Text(f"session {before.pid} ended", style="yellow"))
        self._ended = (f"{ENDED}{before.pid}", before, cells)
        if table.has_focus:
            self.app.notify(f"session {before.pid} ({fmt.inert(before.application or '-')}) ended; the cursor stays on its "
                            "line until it moves", timeout=5)
        return self._ended

    def _ended_at(self, table: KeyedTable, key: str) -> int:
        """Where the ended session's line goes: where the cursor is (its line, or the session's)."""
        return table.cursor_row if table.cursor_row is not None else 0

    def _row_cells(self, key: str, s: SessionSample, blocks: dict[int, int], locks: dict,
                   held: dict[int, str]) -> tuple[tuple[object, ...], bool]:
        """A session's cells, formatted again only when its facts changed; and whether they did."""
        lock = locks.get(s.pid)
        mode = held.get(s.pid)
        tagged = bool(self.tags) and (s.pid, s.backend_start) in self.tags
        facts = (s, blocks.get(s.pid, 0), lock, mode, tagged)
        cached = self._rendered.get(key)
        if cached is not None and cached[0] == facts:
            return cached[1], False
        cells = self._cells(s, facts[1], lock, mode, tagged)
        self._rendered[key] = (facts, cells)
        self._drawn[key] = cells
        return cells, True

    def _set_title(self, snapshot: Snapshot, listed: int) -> None:
        """`Sessions N`: the sessions listed (clients', or every backend's with A), before the
        filter and the idle toggle, which the border says; where the probe capped its list, how
        many backends there were."""
        total = snapshot.sessions_total if snapshot.sessions_total is not None else len(snapshot.sessions)
        title = f"Sessions {listed:,}"
        if len(snapshot.sessions) < total:  # capped by the probe: the oldest transactions are kept
            title += f" ({len(snapshot.sessions):,} of {total:,} backends read)"
        self._title = title
        self._fit_title()

    @staticmethod
    def _cells(s: SessionSample, blocks: int, lock, held: str | None = None, tagged: bool = False) -> tuple[object, ...]:
        culprit = s.state in CULPRIT_STATES
        marks = []
        if blocks:
            marks.append(f"{blocks:,}")
        if held:
            marks.append(held)
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
        if tagged:  # a mark, not a colour alone (NO_COLOR): `*1234`
            pid_cell: object = Text(f"{TAG_MARK}{s.pid}", style=f"{pid_style} reverse".strip())
        else:
            pid_cell = Text(str(s.pid), style=pid_style) if pid_style else str(s.pid)
        return (
            pid_cell,
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
