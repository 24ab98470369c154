"""The dashboard's one-line bars: the hosts (a tab each), the status line, and the latest notice.
Each is given what to say (data down) and fits it to its own width, again when it is resized:
none of them asks the app for anything."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from rich.text import Text
from textual.timer import Timer
from textual.widgets import Footer, Static

from probes.model import Snapshot
from probes.recording import ReplayClock, first_recorded_at

from .. import format as fmt
from .hosts import Host, hosts_text

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
    if not connected:
        assert s is not None
        reason = fmt.one_line(str(s.extra.get("connection_error") or "database unreachable"), 200)
        parts.append((" DISCONNECTED" if facts.paused else "DISCONNECTED", "bold white on red", 0))
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
        if server.label:
            parts.append((f" │ {server.label}", "dim", 6))
    return parts


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

    def show(self, at: str, severity: str, text: str, timeout: float | None = None) -> None:
        """Show a notice in the footer's place for `timeout` seconds (by default, by its severity).
        The app shows none while it shuts down (its notify says why)."""
        footer = self.screen.query_one(Footer)
        self.set_classes(severity if severity in ("warning", "error") else "")
        self.update(Text.assemble((f"{at} ", "dim"), text, ("  · m: all notices", "dim")))
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
