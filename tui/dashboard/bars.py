"""The dashboard's one-line bars: the hosts (a tab each), the status line, the latest notice, and
the footer (the keys of the focused panel). Each is given what to say (data down) and fits it to
its own width, again when it is resized: none of them asks the app for anything."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from rich.cells import cell_len
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.timer import Timer
from textual.widgets import Footer, Static
from textual.widgets._footer import FooterKey

from probes.model import ServerInfo, Snapshot, as_utc
from probes.recording import ReplayClock, first_recorded_at

from .. import format as fmt
from ..serverline import server_line
from .hosts import Host, hosts_text, server_stopped
from .keymap import DETAILS, FOOTER_LABELS, KeyContext, footer_ids, footer_rank, panel_of

# How long the latest notice takes the footer's place, by severity (all stay in the `m` log).
NOTICE_SECONDS = {"information": 6.0, "warning": 10.0, "error": 15.0}


class _FittedLine(Static):
    """A line fitted to the bar's width, repainted only when its text changes (or when forced)."""

    _text = ""

    def _width(self) -> int:
        return (self.size.width - 2) if self.size.width > 2 else (self.app.size.width - 2)

    def _paint(self, text: Text, force: bool = False) -> None:
        if force or text.plain != self._text:  # repaint only what changed
            self._text = text.plain
            self.update(text, layout=False)  # one fixed line


class HostBar(_FittedLine):
    """The hosts, one part each: its number (the key that shows it), its name, and its worst news:
    DOWN, blocked sessions, the oldest ready message's age. The shown one is highlighted."""

    DEFAULT_CSS = """
    HostBar { height: 1; padding: 0 1; background: $boost; }
    """

    _hosts: Sequence[Host] = ()
    _current = 0

    def show(self, hosts: Sequence[Host], current: int) -> None:
        self._hosts, self._current = hosts, current
        self._paint(hosts_text(hosts, current, self._width()))

    def on_resize(self) -> None:
        if len(self._hosts) > 1:
            self.show(self._hosts, self._current)


@dataclass(frozen=True, kw_only=True)
class StatusFacts:
    """What the status line says: the shown host's latest snapshot, and the dashboard's state."""

    snapshot: Snapshot | None
    last_good_at: datetime | None
    host_name: str | None  # named only when there are several
    replay: ReplayClock | None
    paused: bool
    recording: bool
    read_only: bool
    interval_s: float


class StatusBar(_FittedLine):
    DEFAULT_CSS = """
    StatusBar { height: 1; background: $primary-background; color: $text; padding: 0 1; }
    """

    _facts: StatusFacts | None = None

    def show(self, facts: StatusFacts, force: bool = False) -> None:
        self._facts = facts
        self._paint(fmt.fit_by_priority(status_parts(facts), max(self._width(), 20)), force)

    def on_resize(self) -> None:
        if self._facts is not None:
            self.show(self._facts, force=True)  # refit to the new width

    def follow_clock(self, every_s: float) -> None:
        """A replay: say the clock's position every `every_s` seconds, as it moves between
        snapshots (the line reads the clock each time it is fitted; the other facts change only
        when the app shows new ones). The bar's own timer, not the app's: Textual stops a
        widget's timers before it removes the widget, where a timer on the app went on ticking
        while the app shut down and the screen's widgets were removed (issue 28: NoMatches
        'StatusBar', about 1 test run in 11)."""
        self.set_interval(every_s, self._clock_moved)

    def _clock_moved(self) -> None:
        if self._facts is not None:
            self.show(self._facts)


def status_parts(facts: StatusFacts) -> list[tuple[str, str, int]]:
    """One line's parts, by priority: the state (LIVE, PAUSED or DISCONNECTED, never two of them)
    and why first, then the rest, each part whole or left out."""
    s = facts.snapshot
    connected = s is None or s.connected
    last_good_at = facts.last_good_at
    parts: list[tuple[str, str, int]] = [("queuetop ", "bold", 7)]
    if facts.host_name is not None:
        parts.append((f"{facts.host_name} ", "bold", 0))
    if facts.replay is not None:
        clock = facts.replay
        recording = clock.recording
        parts.append((f"REPLAY {'▶' if clock.playing else '⏸'} ", "bold magenta", 0))
        parts.append((fmt.utc(clock.now()), "bold", 0))
        parts.append((f" x{clock.speed:g}", "", 1))
        parts.append((f" │ {fmt.seconds((clock.now() - recording.start).total_seconds())} of "
                      f"{fmt.seconds((recording.end - recording.start).total_seconds())}", "", 2))
    elif facts.paused:
        parts.append(("PAUSED", "bold yellow", 0))
    elif connected:
        parts.append(("LIVE", "bold green", 0))
    if s is not None and connected and s.server.standby:
        parts.extend(standby_parts(s.server))
    if not connected:
        assert s is not None
        lead = " " if facts.paused else ""
        if server_stopped(s):  # said plainly, not as an errno's words ("No such file or directory")
            parts.append((f"{lead}SERVER STOPPED", "bold white on red", 0))
            if s.server.label:  # the masked DSN
                parts.append((f" nothing answers at {fmt.one_line(s.server.label, 200)}", "bold", 1))
        else:
            reason = fmt.one_line(str(s.extra.get("connection_error") or "database unreachable"), 200)
            parts.append((f"{lead}DISCONNECTED", "bold white on red", 0))
            parts.append((f" {reason}", "bold", 0))
        parts.append((" │ retrying", "", 2))
        if last_good_at is not None:
            parts.append((f" │ figures of {last_good_at:%H:%M:%S}", "yellow", 1))
    if facts.recording:
        parts.append((" │ REC", "bold red", 0))
    if facts.read_only and facts.replay is None:
        parts.append((" │ READ-ONLY", "bold cyan", 1))
    if facts.replay is None:
        parts.append((f" │ every {facts.interval_s:g}s", "", 3))
    first = first_recorded_at(s) if s is not None else None
    if first is not None:
        parts.append((" │ not recorded yet", "bold yellow", 0))
        parts.append((f" (from {first})", "yellow", 1))  # the time whole or not at all
    elif s is not None:
        noted = [name for name, p in s.probes.items() if p.error or p.notes]
        if noted and connected:
            parts.append((f" │ notes: {', '.join(noted)}", "yellow", 2))
        server = s.server
        parts.append((f" │ {fmt.database_name(server.dialect)} {server.version or '?'} db {server.database or '?'}", "", 4))
        parts.append((f" │ probes {s.elapsed_ms:.1f} ms", "", 5))
        if server.label and not server_stopped(s):  # (a stopped server's is said above)
            parts.append((f" │ {server.label}", "dim", 6))
    return parts


def standby_parts(server: ServerInfo) -> list[tuple[str, str, int]]:
    """A hot standby, beside the state: STANDBY and a paused replay (always shown), the replay's lag
    in time, then in WAL bytes, then what the figures are as of: the commit time (UTC) of the last
    transaction replayed, when replay is behind or paused (caught up, they are as of now)."""
    parts = [(" │ STANDBY", "bold magenta", 0)]
    if server.replay_paused:
        parts.append((" replay paused", "bold yellow", 0))
    behind = bool(server.replay_paused or server.replay_lag_s or server.replay_lag_bytes)
    if server.replay_lag_s is not None:
        parts.append((f" lag {fmt.seconds(server.replay_lag_s)}", "bold yellow" if behind else "", 1))
    if server.replay_lag_bytes is not None:
        parts.append((f" {fmt.byte_size(server.replay_lag_bytes)}", "", 2))
    if server.replayed_at is not None and behind:
        parts.append((f" │ as of {as_utc(server.replayed_at):%H:%M:%S} (replay)", "yellow", 2))
    return parts


class ServerBar(_FittedLine):
    """The header line: the shown host's server figures (transactions, rows, temp and WAL bytes per
    second, cache hit ratio, size, deadlocks: the server_stats probe), as its snapshot has them (a
    replay's as recorded), fitted to the width: each figure whole or left out, the least useful
    first (server_parts)."""

    DEFAULT_CSS = """
    ServerBar { height: 1; padding: 0 1; }
    """

    _snapshot: Snapshot | None = None

    def show(self, snapshot: Snapshot | None, force: bool = False) -> None:
        self._snapshot = snapshot
        self._paint(server_line(snapshot, max(self._width(), 20)), force)

    def on_resize(self) -> None:
        self.show(self._snapshot, force=True)


class NoticeBar(Static):
    """The latest notice, on the footer's line for a few seconds (a toast would cover the Leases and
    Compaction panels, where the effect of an action shows); `m` lists them all."""

    DEFAULT_CSS = """
    NoticeBar { dock: bottom; height: 1; padding: 0 1; display: none; text-wrap: nowrap; text-overflow: ellipsis;
                background: $primary-background; }
    NoticeBar.warning { background: $warning 40%; }
    NoticeBar.error { background: $error 60%; }
    """

    _timer: Timer | None = None

    def show(self, at: str, severity: str, text: str, timeout: float | None = None, *, logged: bool = True) -> None:
        """Show a notice in the footer's place for `timeout` seconds (by default, by its severity).
        The app shows none while it shuts down (its notify says why). `logged`: it is in the `m`
        log too (a sort's new order is not: the panel's border says it)."""
        footer = self.screen.query_one(Footer)
        self.set_classes(severity if severity in ("warning", "error") else "")
        self.update(Text.assemble((f"{at} ", "dim"), text, ("  · m: all notices" if logged else "", "dim")))
        self.display = True
        footer.display = False
        if self._timer is not None:
            self._timer.stop()
        # The bar's own timer, so that it stops with the bar (a timer on the app went on while the
        # app shut down, after the bar was gone); a widget's timers run while a dialog covers its
        # screen, so the notice still goes then.
        self._timer = self.set_timer(timeout or NOTICE_SECONDS.get(severity, 6.0), self.hide)

    def hide(self) -> None:
        """Give the footer its line back."""
        if not self.app.is_running:
            # Shutting down (False from its start): the screen's widgets are removed each on its
            # own, so the footer may be gone while this bar, and its timer, are not yet; nothing is
            # drawn again. Textual has no event for "the screen is being removed" to stop on.
            return
        self.display = False
        self.screen.query_one(Footer).display = True


class ContextFooter(Footer):
    """The footer: the keys that act on the focused panel (keymap.PANEL_KEYS), then the few that
    act everywhere, each only where it applies now (keymap.applies: engine keys when the engine's
    controls are on, host keys with several hosts, ...), as the config's [keys] may have remapped
    them; each whole or left out, the least useful first (keymap.footer_rank), to fit the width.
    Textual's Footer shows every binding whose fixed `show` flag is set; this one chooses by the
    focus and the `context` it is given. It is rebuilt when the focus or the bindings change
    (Textual's bindings signal), when it is resized, and when the context changes (a host shown,
    its engine controls found): that is looked at twice a second, a comparison of a few flags."""

    def __init__(self, context: Callable[[], KeyContext], *, id: str | None = None) -> None:
        # Compact (no padding around the key): the focused panel's keys fit at 80 columns. No
        # Ctrl-P on the right: the help lists it.
        super().__init__(id=id, show_command_palette=False, compact=True)
        self._key_context = context  # (not `_context`: Textual's MessagePump has one)
        self._shown: tuple[str | None, KeyContext, int] | None = None  # what it was built for

    def on_mount(self) -> None:
        super().on_mount()
        self.set_interval(0.5, self._context_moved)

    def _now(self) -> tuple[str | None, KeyContext, int]:
        return panel_of(self.screen.focused), self._key_context(), self.app.size.width

    def _context_moved(self) -> None:
        if not self.is_attached or not self.app.is_running:  # shutting down: nothing drawn again
            return
        if self._shown is not None and self._shown != self._now():
            self.call_after_refresh(self.recompose)

    def on_resize(self) -> None:
        self._context_moved()

    def compose(self) -> ComposeResult:
        self._shown = now = self._now()
        panel, context, width = now
        active: dict[str, tuple[Binding, bool]] = {}  # binding id -> (binding, enabled), its first key only
        for _namespace, binding, enabled, _tooltip in self.screen.active_bindings.values():
            if binding.id and binding.id not in active:
                active[binding.id] = (binding, enabled)
        keys: list[tuple[str, FooterKey]] = []
        for binding_id in footer_ids(panel, context):
            if binding_id == "details":
                key, label = DETAILS
                keys.append((binding_id, FooterKey(key, self.app.get_key_display(Binding(key, "")), label, "", tooltip=label)))
            elif binding_id in active:  # absent: refused here (check_action), or a focused widget's key takes it
                binding, enabled = active[binding_id]
                keys.append((binding_id, FooterKey(binding.key, self.app.get_key_display(binding),
                                                   FOOTER_LABELS.get(binding_id, binding.description), binding.action,
                                                   disabled=not enabled, tooltip=binding.description)))
        # Compact: "k Label" and a space after it.
        room = max(width, 20)
        for binding_id, footer_key in sorted(keys, key=lambda k: footer_rank(k[0], panel)):
            needs = cell_len(footer_key.key_display) + 1 + cell_len(footer_key.description) + 1
            if needs > room:
                keys.remove((binding_id, footer_key))
            else:
                room -= needs
        for _binding_id, footer_key in keys:
            yield footer_key.data_bind(compact=Footer.compact)
