"""The live dashboard (Textual).

Data flow, one direction each way:
- probe → snapshot → message → widget: the sampler (or any `SnapshotSource`) calls the sink from
  its thread; the sink posts `SnapshotArrived` (a newer one replaces an older one still queued);
  the app hands the snapshot to each panel, which updates its rows in place.
- UI action → engine command → database: a key or palette command opens a prompt or a
  confirmation; the action runs in a thread worker (`EngineControls`, or one admin statement) and
  reports back with a notification. The event loop never waits on the database.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import ClassVar, Protocol

from platformdirs import user_data_dir
from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.notifications import SeverityLevel
from textual.timer import Timer
from textual.widgets import DataTable, Footer, Input, Static, Tree

from dbcore.dialect import dialect_named
from dbcore.errors import QueuetopError, UsageError
from probes.model import QueueSample, Snapshot
from probes.recording import Recorder, ReplayClock, first_recorded_at
from probes.sampler import stop_all
from probes.sources import QueueDetails

from . import format as fmt
from .messages import ActivityEnded, NoticeFromThread, SnapshotArrived
from .screens.details import DetailsScreen, queue_renderables, session_renderables
from .screens.dialogs import ConfirmScreen, HelpScreen, HostsScreen, NoticesScreen, PromptScreen
from .widgets.panels import CompactionPanel, ConnectionsPanel, LeasesPanel, LocksPanel, Panel, QueuesPanel, RingsPanel

PANELS = (QueuesPanel, RingsPanel, LeasesPanel, CompactionPanel, LocksPanel, ConnectionsPanel)

INTERVALS = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)


class SnapshotSource(Protocol):
    interval_s: float

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def pause(self) -> None: ...
    def resume(self) -> None: ...
    def refresh_now(self) -> None: ...
    def set_interval(self, seconds: float) -> None: ...


class Backend(Protocol):
    """What the dashboard may do to the database; None when it has none (replays, tests)."""

    def queue_details(self, source: str, name: str) -> QueueDetails: ...
    def session_details(self, pid: int) -> dict: ...
    def signal_backend(self, pid: int, terminate: bool) -> bool: ...


# Engine actions: (binding id, key, title, prompt placeholder, default value); no placeholder: no prompt.
ENGINE_ACTIONS = [
    ("producer.start", "n", "Start a producer", "QUEUE RATE_PER_S", "orders 50"),
    ("producer.stop", "N", "Stop a producer", "QUEUE", "orders"),
    ("consumers.start", "w", "Start consumers", "QUEUE WORKERS HANDLER MODE(claim|hold-transaction)", "orders 2 noop claim"),
    ("consumers.stop", "W", "Stop consumers", "QUEUE", "orders"),
    ("burst", "b", "Burst-enqueue", "QUEUE COUNT", "orders 1000"),
    ("ring.put", "g", "Put on a ring", "RING COUNT", "audit 5"),
    ("ring.take", "G", "Take from a ring", "RING COUNT", "audit 5"),
    ("lease.take", "l", "Take a lease", "NAME HOLDER TTL_S", "relay operator 30"),
    ("lease.release", "L", "Release a lease", "NAME HOLDER", "relay operator"),
    ("blocker", "i", "Inject a blocker", "QUEUE SECONDS [row]", "orders 10"),
    ("compact", "o", "Compact now", "GROUP (a task id) or all", "all"),
    ("scenario.start", "s", "Start the contention scenario", "MODE(naive|compacted) SUBMITTERS [SECONDS]", "naive 16 60"),
    ("scenario.stop", "S", "Stop the contention scenario", None, None),
    ("relays.start", "y", "Start outbox relays", "RELAYS RATE_PER_S", "3 20"),
    ("relays.stop", "Y", "Stop the outbox relays", None, None),
    ("relays.kill", "x", "Kill the relay leader", None, None),
]


@dataclass(kw_only=True)
class HostSpec:
    """A database the dashboard watches: what to sample it with, and what can act on it."""

    name: str
    source_factory: Callable[[Callable[[Snapshot], None]], SnapshotSource]
    backend: Backend | None = None
    controls: object = None
    demo: object = None
    controls_off: str | None = None
    # Finds the host's engine controls in a thread once the dashboard runs (several hosts: a host
    # that is down must not hold up the others): returns (controls, why there are none).
    prepare: Callable[[], tuple[object, str | None]] | None = None


@dataclass(kw_only=True)
class Host(HostSpec):
    """One tab: a HostSpec with its running source, its latest snapshot, and the last one taken
    while connected (`prepare` may fill in its controls once the dashboard runs)."""

    source: SnapshotSource
    snapshot: Snapshot | None = None
    shown: Snapshot | None = None  # the latest connected snapshot: the figures kept on screen while disconnected
    last_good_at: datetime | None = None
    arrivals: int = 0


class HostBar(Static):
    """The hosts, one part each: its number (the key that shows it), its name, and its worst news:
    DOWN, blocked sessions, the oldest ready message's age. The shown one is highlighted."""

    DEFAULT_CSS = """
    HostBar { height: 1; padding: 0 1; background: $boost; }
    """

    def on_resize(self) -> None:
        app = self.app
        if isinstance(app, QueuetopApp):
            app.render_hosts()


class StatusBar(Static):
    DEFAULT_CSS = """
    StatusBar { height: 1; background: $primary-background; color: $text; padding: 0 1; }
    """

    def on_resize(self) -> None:
        app = self.app
        if isinstance(app, QueuetopApp):
            app.render_status(force=True)  # refit to the new width


class NoticeBar(Static):
    """The latest notice, on the footer's line for a few seconds (a toast would cover the Leases and
    Compaction panels, where the effect of an action shows); `m` lists them all."""

    DEFAULT_CSS = """
    NoticeBar { dock: bottom; height: 1; padding: 0 1; display: none; text-wrap: nowrap; text-overflow: ellipsis;
                background: $primary-background; }
    NoticeBar.warning { background: $warning 40%; }
    NoticeBar.error { background: $error 60%; }
    """


# How long the latest notice takes the footer's place, by severity (all stay in the `m` log).
NOTICE_SECONDS = {"information": 6.0, "warning": 10.0, "error": 15.0}


class EngineCommands(Provider):
    """The command palette: every action, listed as soon as Ctrl-P opens and searchable by name."""

    def _commands(self) -> list[tuple[str, Callable[[], object], str]]:
        app = self.app
        assert isinstance(app, QueuetopApp)
        key = app.key_for
        commands: list[tuple[str, Callable[[], object], str]] = [
            (title, partial(app.action_engine, binding_id), f"engine · key {key(f'engine.{binding_id}')}")
            for binding_id, _key, title, _placeholder, _default in ENGINE_ACTIONS
        ]
        commands += [
            ("Pause / resume", app.action_toggle_pause, f"key {key('pause')}"),
            ("Refresh now", app.action_refresh_now, f"key {key('refresh')}"),
            ("Cancel the selected backend", partial(app.action_signal, False), f"key {key('backend.cancel')}"),
            ("Terminate the selected backend", partial(app.action_signal, True), f"key {key('backend.terminate')}"),
            ("Zoom the focused panel", app.action_zoom, f"key {key('zoom')}"),
            ("Notices", app.action_notices, f"key {key('notices')}"),
            ("Sort the focused panel (Queues or Connections)", app.action_sort, f"key {key('sort')}"),
            ("Help", app.action_help, f"key {key('help')}"),
            ("Stop everything the dashboard started", app.action_stop_all, "no key"),
            ("Reset the demo (remove what the demo and the prompts made)", app.action_reset_demo, "no key"),
        ]
        return commands

    async def discover(self) -> Hits:
        for title, action, help_text in self._commands():
            yield DiscoveryHit(title, action, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, action, help_text in self._commands():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), action, help=help_text)


class QueuetopApp(App[None]):
    TITLE = "queuetop"
    AUTO_FOCUS = "#queues-table"
    CSS = """
    Screen { layout: vertical; }
    #row-queues { height: 3fr; min-height: 6; }
    #row-locks { height: 2fr; min-height: 6; }
    /* As tall as the longest of Rings, Leases and Compaction needs (every lease in sight when
       relays take over), up to 40 % of the screen; z zooms a panel to full screen. */
    #row-small { height: auto; max-height: 40%; }
    #row-small Panel { height: auto; min-height: 5; }
    #row-small KeyedTable { height: auto; }
    #locks { width: 3fr; }
    #connections { width: 2fr; }
    /* Rings and Compaction as wide as their rows need (set from their content), within these
       bounds; Leases takes the rest. At 80 columns: a ring's name and used/capacity, a lease's
       name, token and TTL, the pending deltas and their group. */
    #rings { width: 24; min-width: 16; max-width: 28%; }
    #compaction { width: 22; min-width: 16; max-width: 30%; }
    #leases { width: 1fr; min-width: 40%; }
    #connections-spark { height: 1; margin: 0 1; }
    #connections-summary { height: 1; padding: 0 1; }
    #filter { dock: bottom; display: none; }
    #filter.visible { display: block; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("question_mark", "help", "Help", id="help", key_display="?"),
        Binding("p", "toggle_pause", "Pause", id="pause"),
        Binding("r", "refresh_now", "Refresh", id="refresh", show=False),
        Binding("plus", "interval(1)", "Slower", id="interval.slower", key_display="+", show=False),
        Binding("minus", "interval(-1)", "Faster", id="interval.faster", key_display="-", show=False),
        Binding("slash", "filter", "Filter", id="filter", key_display="/"),
        Binding("greater_than_sign", "sort", "Sort the focused panel", id="sort", key_display=">", show=False),
        Binding("z", "zoom", "Zoom", id="zoom"),
        Binding("m", "notices", "Notices", id="notices"),
        Binding("c", "signal(False)", "Cancel backend", id="backend.cancel", show=False),
        Binding("k", "signal(True)", "Terminate backend", id="backend.terminate", show=False),
        Binding("q", "quit", "Quit", id="quit"),
        Binding("R", "record", "Record to a file (again: stop)", id="record", show=False),
        # A recording (queuetop replay): step through its instants, go to a time.
        Binding("full_stop", "step(1)", "Step", id="replay.step", key_display="."),
        Binding("comma", "step(-1)", "Step back", id="replay.back", key_display=",", show=False),
        Binding("t", "seek", "Go to time", id="replay.seek"),
        # Several databases (--dsn repeated, or the config's [[targets]]): a tab each.
        Binding("right_square_bracket", "host(-1)", "Next host", id="host.next", key_display="]"),
        Binding("left_square_bracket", "host(-2)", "Previous host", id="host.previous", key_display="[", show=False),
        Binding("H", "hosts", "Hosts", id="hosts", show=False),
        *[Binding(str(n), f"host({n - 1})", f"Host {n}", id=f"host.{n}", show=False) for n in range(1, 10)],
        *[Binding(key, f"engine('{binding_id}')", title, id=f"engine.{binding_id}", show=False)
          for binding_id, key, title, _p, _d in ENGINE_ACTIONS],
    ]
    COMMANDS = App.COMMANDS | {EngineCommands}

    def __init__(
        self,
        source_factory: Callable[[Callable[[Snapshot], None]], SnapshotSource] | None = None,
        *,
        backend: Backend | None = None,
        controls=None,
        demo=None,
        read_only: bool = False,
        keymap: dict[str, str] | None = None,
        controls_off: str | None = None,
        hosts: Sequence[HostSpec] = (),
        replay: ReplayClock | None = None,
        record_dir: Path | None = None,
    ) -> None:
        super().__init__()
        self.replay = replay  # a recording's clock: the dashboard replays it, with no database
        self.record_dir = record_dir  # where R records to (default: the user's data dir)
        self.recorder: Recorder | None = None
        specs = list(hosts)
        if not specs:
            assert source_factory is not None, "a source, or hosts"
            specs = [HostSpec(name="", source_factory=source_factory, backend=backend, controls=controls, demo=demo,
                              controls_off=controls_off)]
        self.hosts = [Host(**vars(spec), source=spec.source_factory(partial(self._sink, index))) for index, spec in enumerate(specs)]
        self.current = 0  # the host shown
        self.read_only = read_only
        self.paused = False
        self.filter_text = ""
        self.apply_ms: list[float] = []  # time to apply each snapshot (bench tui)
        self._keymap = keymap or {}
        self._status_text = ""
        self.notices: deque[tuple[str, str, str]] = deque(maxlen=1000)  # (HH:MM:SS, severity, text), the `m` log
        self._notice_timer: Timer | None = None
        self._hosts_text = ""
        self._applied: tuple[Snapshot, str] | None = None  # what the panels show, and with which filter

    # -- the host shown -------------------------------------------------------------------

    @property
    def host(self) -> Host:
        return self.hosts[self.current]

    @property
    def source(self) -> SnapshotSource:
        return self.host.source

    @property
    def backend(self) -> Backend | None:
        return self.host.backend

    @property
    def controls(self):
        return self.host.controls

    @property
    def demo(self):
        return self.host.demo

    @property
    def controls_off(self) -> str | None:
        return self.host.controls_off

    @property
    def snapshot(self) -> Snapshot | None:
        return self.host.snapshot

    # -- layout ---------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield StatusBar("queuetop: waiting for the first sample…", id="status")
        if len(self.hosts) > 1:
            yield HostBar("", id="hosts")
        with Vertical():
            with Horizontal(id="row-queues"):
                yield QueuesPanel()
            with Horizontal(id="row-locks"):
                yield LocksPanel()
                yield ConnectionsPanel()
            with Horizontal(id="row-small"):
                yield RingsPanel()
                yield LeasesPanel()
                yield CompactionPanel()
        yield Input(placeholder="filter: queue, application or query text (Enter applies, Esc clears)", id="filter")
        yield NoticeBar(id="notice")
        yield Footer()

    def on_mount(self) -> None:
        if self._keymap:
            self.set_keymap(self._keymap)
        if self.demo is not None:
            self.run_worker(self._start_demo, thread=True, name="demo")
        for index, host in enumerate(self.hosts):
            host.source.start()
            if host.prepare is not None:
                self.run_worker(partial(self._prepare_host, index), thread=True, name=f"prepare {host.name}")
        self.render_status()
        self.render_hosts()
        if self.replay is not None:
            self.query_one(LeasesPanel).clock = self.replay.now  # the countdown runs on the recorded clock
            self.set_interval(0.25, self.render_status)  # the position moves between snapshots

    def _prepare_host(self, index: int) -> None:
        host = self.hosts[index]
        assert host.prepare is not None
        try:
            controls, off = host.prepare()
        except Exception as exc:  # the host is down, or refuses: its panels still show what the probes see
            controls, off = None, f"engine controls are off: {fmt.one_line(str(exc), 200)}"
        host.controls, host.controls_off = controls, off

    def _start_demo(self) -> None:
        try:
            self.demo.start()
        except Exception as exc:
            self.call_from_thread(self.notify, f"demo did not start: {fmt.one_line(str(exc), 120)}", severity="error")

    def on_unmount(self) -> None:
        if self.recorder is not None:
            self.recorder.close()
        # Each host's sampler waits for its running probes and closes its pool: all at once, so
        # that several hosts that are down do not add up their timeouts at quit.
        stop_all(host.source for host in self.hosts)
        for host in self.hosts:
            if host.demo is not None:
                host.demo.stop()  # type: ignore[attr-defined]
            elif host.controls is not None and hasattr(host.controls, "stop_all"):
                host.controls.stop_all()

    # -- snapshots ------------------------------------------------------------------------

    def _sink(self, host: int, snapshot: Snapshot) -> None:
        """Called from the host's sampler's thread (which also writes it to a recording, if one runs)."""
        recorder = self.recorder
        if recorder is not None:
            try:
                recorder.write(snapshot)
            except OSError as exc:  # a full disk: say so once (the recorder closed itself), the dashboard goes on
                self.recorder = None
                self.post_message(NoticeFromThread(
                    f"recording stopped after {recorder.snapshots} snapshot(s) in {recorder.path}: {exc.strerror or exc}", "error"))
        try:
            self.post_message(SnapshotArrived(snapshot, host))
        except Exception:  # the app is shutting down
            pass

    def on_snapshot_arrived(self, message: SnapshotArrived) -> None:
        if self.paused:
            return
        try:
            if message.host != self.current:  # another tab's: kept for when it is shown, and summarised
                self._keep(self.hosts[message.host], message.snapshot)
                if message.snapshot.connected:  # its trends and countdowns go on while not shown
                    self.query_one(QueuesPanel).record(message.snapshot)
                    self.query_one(ConnectionsPanel).record(message.snapshot)
                    self.query_one(LeasesPanel).record(message.snapshot)
                self.render_hosts()
                return
            self.apply_snapshot(message.snapshot)
            self.render_hosts()
        except NoMatches:
            # The sampler's last snapshot can arrive while the app shuts down and its panels are
            # already removed (CI saw it once, at the end of a Pilot test): nothing to draw on.
            if self.is_running:  # False from the start of shutdown
                raise

    @staticmethod
    def _keep(host: Host, snapshot: Snapshot) -> None:
        host.snapshot = snapshot
        host.arrivals += 1
        if snapshot.connected:
            host.shown, host.last_good_at = snapshot, snapshot.taken_at

    def apply_snapshot(self, snapshot: Snapshot) -> None:
        started = time.perf_counter()
        host = self.host
        self._keep(host, snapshot)
        # Disconnected: keep the last figures on screen; the status bar says they are stale.
        self._show(host.shown or snapshot)
        self.render_status()
        self.apply_ms.append((time.perf_counter() - started) * 1000)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # False hides a binding (footer, help) and refuses its key; None would show it dimmed.
        if action in ("host", "hosts"):
            return len(self.hosts) > 1  # one database: no host keys
        if action in ("step", "seek"):
            return self.replay is not None
        if action == "record":
            return self.replay is None  # a replay is not recorded again
        return True

    # -- a recording -----------------------------------------------------------------------

    def action_step(self, direction: int) -> None:
        if self.replay is not None:
            self.replay.step(direction, self.host.name)
            self.render_status()

    def action_seek(self) -> None:
        if self.replay is None:
            return
        recording = self.replay.recording

        def chosen(text: str | None) -> None:
            if not text or self.replay is None:
                return
            try:
                when = recording.instant(text)
            except UsageError as exc:
                self.notify(str(exc), severity="error")
                return
            self.replay.seek(when)
            self.render_status()

        self.push_screen(PromptScreen(
            f"Go to a time of the recording ({fmt.utc(recording.start)} to {fmt.utc(recording.end)})",
            "HH:MM[:SS] (UTC), ISO-8601, or +SECONDS from the start", fmt.utc(self.replay.now())[11:19]), chosen)

    def action_record(self) -> None:
        """Start or stop recording every host's snapshots (queuetop replay FILE plays them)."""
        if self.replay is not None:
            return
        if self.recorder is not None:
            recorder, self.recorder = self.recorder, None
            recorder.close()
            self.notify(f"recording stopped: {recorder.snapshots} snapshot(s) in {recorder.path} (queuetop replay {recorder.path})")
            self.render_status()
            return
        directory = self.record_dir or Path(user_data_dir("queuetop")) / "recordings"
        try:
            directory.mkdir(parents=True, exist_ok=True)
            self.recorder = Recorder(directory / f"queuetop-{datetime.now(UTC):%Y%m%d-%H%M%S}.jsonl.gz")
        except (OSError, QueuetopError) as exc:
            self.notify(f"cannot record: {fmt.one_line(str(exc), 150)}", severity="error")
            return
        self.notify(f"recording to {self.recorder.path}; R stops")
        self.render_status()

    def action_host(self, index: int) -> None:
        """Show host `index` (its number in the host bar, from 0), or the next (-1) or previous (-2)."""
        if len(self.hosts) < 2:
            return
        if index == -1:
            index = (self.current + 1) % len(self.hosts)
        elif index == -2:
            index = (self.current - 1) % len(self.hosts)
        if not 0 <= index < len(self.hosts) or index == self.current:
            return
        self.current = index
        self.refresh_panels()
        self.render_status(force=True)
        self.render_hosts()

    def refresh_panels(self) -> None:
        """Show the current host's figures (another host shown, a new filter): the last taken
        while connected, else the latest."""
        shown = self.host.shown or self.host.snapshot
        if shown is not None:
            self._show(shown)

    def _show(self, snapshot: Snapshot) -> None:
        """Hand `snapshot` to every panel, unless they show it already with this filter (a panel
        adds each sample it is given to its history)."""
        if self._applied is not None and self._applied[0] is snapshot and self._applied[1] == self.filter_text:
            return
        self._applied = (snapshot, self.filter_text)
        with self.batch_update():
            for panel in PANELS:
                self.query_one(panel).show(snapshot, self.filter_text)

    def render_hosts(self) -> None:
        """The host bar: each host's number, name and worst news, the shown one highlighted; each
        part whole or left out (the hosts' numbers and names first)."""
        if len(self.hosts) < 2:
            return
        try:
            bar = self.query_one(HostBar)
        except NoMatches:
            return
        parts: list[tuple[str, str, int]] = []
        for index, host in enumerate(self.hosts):
            current = index == self.current
            base = "reverse bold" if current else "bold"
            parts.append((" " if index else "", "", 0))
            parts.append((f"{index + 1} {host.name}", base, 0))
            s = host.snapshot
            if s is None:
                parts.append((" …", "dim", 2))
            elif first_recorded_at(s) is not None:
                parts.append((" not yet", "dim", 2))  # a replay before this host's recording begins
            elif not s.connected:
                parts.append((" DOWN", "bold white on red", 0))
            else:
                blocked = len(s.blocked)
                locks_unknown = s.unknown_list("blocked") is not None  # never "ok" for what was not seen
                worst = _worst_queue(s)
                if blocked:
                    parts.append((f" {blocked} blocked", "bold red", 1))
                elif locks_unknown:
                    parts.append((" locks unknown", "bold yellow", 1))
                if worst is not None and worst.oldest_ready_age_s is not None:
                    age = worst.oldest_ready_age_s
                    parts.append((f" {fmt.seconds(age)}", "yellow" if age >= 60 else "", 3))
                elif not blocked and not locks_unknown and s.unknown_list("queues") is None:
                    parts.append((" ok", "green", 3))
            parts.append((" │" if index < len(self.hosts) - 1 else "", "dim", 0))
        width = (bar.size.width - 2) if bar.size.width > 2 else (self.size.width - 2)
        text = fmt.fit_by_priority(parts, max(width, 20))
        if text.plain != self._hosts_text:
            self._hosts_text = text.plain
            bar.update(text, layout=False)

    def render_status(self, force: bool = False) -> None:
        """One line, fitted: the state (LIVE, PAUSED or DISCONNECTED, never two of them) and why
        first, then what fits of the rest, each part whole or left out."""
        s = self.snapshot
        connected = s is None or s.connected
        last_good_at = self.host.last_good_at
        parts: list[tuple[str, str, int]] = [("queuetop ", "bold", 7)]
        if len(self.hosts) > 1:
            parts.append((f"{self.host.name} ", "bold", 0))
        if self.replay is not None:
            clock = self.replay
            recording = clock.recording
            parts.append((f"REPLAY {'▶' if clock.playing else '⏸'} ", "bold magenta", 0))
            parts.append((fmt.utc(clock.now()), "bold", 0))
            parts.append((f" x{clock.speed:g}", "", 1))
            parts.append((f" │ {fmt.seconds((clock.now() - recording.start).total_seconds())} of "
                          f"{fmt.seconds((recording.end - recording.start).total_seconds())}", "", 2))
        elif self.paused:
            parts.append(("PAUSED", "bold yellow", 0))
        elif connected:
            parts.append(("LIVE", "bold green", 0))
        if not connected:
            assert s is not None
            reason = fmt.one_line(str(s.extra.get("connection_error") or "database unreachable"), 200)
            parts.append((" DISCONNECTED" if self.paused else "DISCONNECTED", "bold white on red", 0))
            parts.append((f" {reason}", "bold", 0))
            parts.append((" │ retrying", "", 2))
            if last_good_at is not None:
                parts.append((f" │ figures of {last_good_at:%H:%M:%S}", "yellow", 1))
        if self.recorder is not None:
            parts.append((" │ REC", "bold red", 0))
        if self.read_only and self.replay is None:
            parts.append((" │ READ-ONLY", "bold cyan", 1))
        if self.replay is None:
            parts.append((f" │ every {self.source.interval_s:g}s", "", 3))
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
        try:
            bar = self.query_one(StatusBar)
        except NoMatches:  # shutting down: a replay's clock timer can fire after the screen is gone
            return
        width = (bar.size.width - 2) if bar.size.width > 2 else (self.size.width - 2)
        status = fmt.fit_by_priority(parts, max(width, 20))
        if force or status.plain != self._status_text:  # repaint only what changed
            self._status_text = status.plain
            bar.update(status, layout=False)  # one fixed line

    # -- notices --------------------------------------------------------------------------

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information", timeout: float | None = None,
               markup: bool = True) -> None:
        """Every notice goes to the log (`m`) and, for a few seconds, to the footer's line; none
        covers a panel. Messages are plain text, inert and on one line: an error's text may hold
        brackets, and a notice may quote a name or an error from the database."""
        text = fmt.inert_line(f"{title}: {message}" if title else message)
        at = time.strftime("%H:%M:%S")
        self.notices.append((at, severity, text))
        try:  # on the main screen, even while a dialog is open over it
            bar = self.screen_stack[0].query_one(NoticeBar)
            footer = self.screen_stack[0].query_one(Footer)
        except (NoMatches, IndexError):  # not composed yet, or shutting down: the log has it
            return
        bar.set_classes(severity if severity in ("warning", "error") else "")
        bar.update(Text.assemble((f"{at} ", "dim"), text, ("  · m: all notices", "dim")))
        bar.display = True
        footer.display = False
        if self._notice_timer is not None:
            self._notice_timer.stop()
        self._notice_timer = self.set_timer(timeout or NOTICE_SECONDS.get(severity, 6.0), self._hide_notice)

    def _hide_notice(self) -> None:
        try:
            main = self.screen_stack[0]
            main.query_one(NoticeBar).display = False
            main.query_one(Footer).display = True
        except (NoMatches, IndexError):  # shutting down
            pass

    def action_hosts(self) -> None:
        """A line per host: what the host bar says of each, and more."""
        self.push_screen(HostsScreen([self._host_line(i, h) for i, h in enumerate(self.hosts)], self.current))

    @staticmethod
    def _host_line(index: int, host: Host) -> tuple[str, ...]:
        s = host.snapshot
        if s is None:
            return (str(index + 1), host.name, "…", "", "", "", "", "", "", "waiting for its first sample")
        first = first_recorded_at(s)
        if first is not None:
            return (str(index + 1), host.name, "-", "", "", "", "", "", "", f"not recorded before {first}")
        sampled = f"{s.taken_at:%H:%M:%S}"
        if not s.connected:
            since = f"; its figures are of {host.last_good_at:%H:%M:%S}" if host.last_good_at else ""
            return (str(index + 1), host.name, "DOWN", "", "", "", "", "", sampled,
                    f"{fmt.one_line(str(s.extra.get('connection_error')), 300)}{since}")
        worst = _worst_queue(s)
        c = s.connections
        sessions = fmt.sessions(c.total, c.max) if c is not None else ""
        notes = [f"{name}: {fmt.one_line(said, 200)}" for name, p in s.probes.items() for said in (p.error, p.notes) if said]
        # What the locks probe could not read is unknown, not 0 (its reason is in the notes).
        blocked, roots = ("unknown", "unknown") if s.unknown_list("blocked") else (f"{len(s.blocked):,}", f"{len(s.blockers):,}")
        return (str(index + 1), host.name, "LIVE", worst.name if worst else "", fmt.seconds(worst.oldest_ready_age_s) if worst else "",
                blocked, roots, sessions, sampled, "; ".join(notes))

    def action_notices(self) -> None:
        self._hide_notice()
        self.push_screen(NoticesScreen(list(self.notices)))

    # -- viewing actions ------------------------------------------------------------------

    @classmethod
    def bindings_by_id(cls) -> dict[str, Binding]:
        """Every binding, by the id the config's [keys] table remaps it by."""
        return {b.id: b for b in cls.BINDINGS if isinstance(b, Binding) and b.id}

    def key_for(self, binding_id: str) -> str:
        """The key that runs a binding, as the config's [keys] table may have remapped it."""
        binding = self.bindings_by_id().get(binding_id)
        return "?" if binding is None else self._keymap.get(binding_id, binding.key_display or binding.key)

    def action_help(self) -> None:
        keys = []
        for binding in self.BINDINGS:
            assert isinstance(binding, Binding)
            keys.append((self.key_for(binding.id or ""), binding.description, binding.id or ""))
        keys.append(("Tab / Shift-Tab", "move between panels", ""))
        keys.append(("Enter", "details: a queue's head and dead letters, a session's query and locks", ""))
        keys.append(("Ctrl-P", "command palette", ""))
        self.push_screen(HelpScreen(keys))

    def action_zoom(self) -> None:
        """The focused panel full screen, or back."""
        screen = self.screen
        if screen.maximized is not None:
            screen.minimize()
            return
        screen.maximize(self._focused_panel() or self.query_one(QueuesPanel), container=False)

    def _focused_panel(self) -> Panel | None:
        focused = self.focused
        return next((w for w in (focused.ancestors_with_self if focused else []) if isinstance(w, Panel)), None)

    def action_toggle_pause(self) -> None:
        if self.replay is not None:  # play / pause the recording: its snapshots still arrive when stepped
            if self.replay.playing:
                self.replay.pause()
            else:
                self.replay.resume()
            self.render_status()
            return
        self.paused = not self.paused
        for host in self.hosts:
            if self.paused:
                host.source.pause()
            else:
                host.source.resume()
                host.source.refresh_now()
        self.render_status()

    def action_refresh_now(self) -> None:
        if self.replay is not None:
            return
        if self.paused:
            taken = f" of {self.snapshot.taken_at:%H:%M:%S} UTC" if self.snapshot is not None else ""
            self.notify(f"paused: the panels keep the sample{taken}; p resumes", severity="warning", timeout=4)
            return
        for host in self.hosts:
            host.source.refresh_now()

    def action_interval(self, step: int) -> None:
        if self.replay is not None:  # + and - change the speed of a recording
            speed = self.replay.faster(step)
            self.render_status()
            self.notify(f"replay at x{speed:g}", timeout=2)
            return
        current = self.source.interval_s
        index = min(range(len(INTERVALS)), key=lambda i: abs(INTERVALS[i] - current))
        new = INTERVALS[max(0, min(len(INTERVALS) - 1, index + step))]
        for host in self.hosts:
            host.source.set_interval(new)
        self.render_status()
        self.notify(f"refresh every {new:g}s", timeout=2)

    def action_sort(self) -> None:
        """Cycle the focused panel's order (Queues when the focused one does not sort)."""
        panel = self._focused_panel()
        if panel is None or len(panel.SORTS) < 2:
            panel = self.query_one(QueuesPanel)
        order = panel.cycle_sort()
        if self.snapshot is not None:
            panel.show(self.snapshot, self.filter_text)
        self.notify(f"{panel.border_title} sorted by {order}", timeout=3)

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("visible")
        box.focus()

    @on(Input.Submitted, "#filter")
    def _apply_filter(self, event: Input.Submitted) -> None:
        self.filter_text = event.value.strip()
        if not self.filter_text:
            event.input.remove_class("visible")
        self.query_one(QueuesPanel).query_one(DataTable).focus()
        self.refresh_panels()

    def on_key(self, event) -> None:
        box = self.query_one("#filter", Input)
        if event.key == "escape" and self.screen.maximized is not None and self.screen is self.screen_stack[0]:
            self.screen.minimize()
            event.stop()
            return
        if event.key == "escape" and (box.has_focus or self.filter_text):
            box.value = ""
            box.remove_class("visible")
            self.filter_text = ""
            self.refresh_panels()
            self.query_one(QueuesPanel).query_one(DataTable).focus()

    @on(DataTable.RowSelected, "#queues-table")
    def _queue_details(self, event: DataTable.RowSelected) -> None:
        if self.backend is None or self.snapshot is None:
            self.notify("no database behind this view", severity="warning")
            return
        key = event.row_key.value or ""
        source, _, name = key.partition(":")
        queue = next((q for q in self.snapshot.queues if q.source == source and q.name == name), None)
        if queue is None:
            return
        backend = self.backend
        self.push_screen(DetailsScreen(
            f"Queue {name} ({queue.table})",
            lambda: queue_renderables(backend.queue_details(queue.source, queue.name)),
        ))

    @on(Tree.NodeSelected, "#locks-tree")
    def _session_details(self, event: Tree.NodeSelected) -> None:
        pid = event.node.data
        if pid is None or self.backend is None:
            return
        backend = self.backend
        self.push_screen(DetailsScreen(f"Session {pid}", lambda: session_renderables(backend.session_details(pid))))

    # -- acting ---------------------------------------------------------------------------

    def _refuse_if_read_only(self, what: str) -> bool:
        if self.read_only:
            self.notify(f"{what} is disabled: queuetop runs with --read-only", severity="warning")
            return True
        return False

    def action_signal(self, terminate: bool) -> None:
        """Cancel or terminate the culprit: the session selected in the Locks tree, or, from the
        Connections panel, the oldest open transaction (the usual holder of the xmin horizon)."""
        verb = "terminate" if terminate else "cancel"
        if self._refuse_if_read_only(f"{verb} backend"):
            return
        who = ""
        if isinstance(self._focused_panel(), ConnectionsPanel):
            c = self.snapshot.connections if self.snapshot is not None else None
            pid = c.oldest_xact_pid if c is not None else None
            if pid is None or c is None:
                self.notify("no open transaction to act on", severity="warning")
                return
            who = f" (the oldest open transaction, {fmt.seconds(c.oldest_xact_age_s)} old" + \
                (", which also holds back the xmin horizon)" if c.xmin_holder_pid == pid else ")")
        else:
            pid = self.query_one(LocksPanel).selected_pid
            if pid is None:
                self.notify("select a session in the Locks panel (or focus Connections for the oldest transaction)",
                            severity="warning")
                return
        if self.backend is None:
            self.notify("no database behind this view", severity="warning")
            return
        state = None
        if self.snapshot is not None:
            root = next((b for b in self.snapshot.blockers if b.pid == pid), None)
            c = self.snapshot.connections
            state = root.state if root is not None else c.oldest_xact_state if c is not None and c.oldest_xact_pid == pid else None
        dialect = dialect_named(self.snapshot.server.dialect) if self.snapshot is not None else None
        if not terminate and (state or "").startswith(("idle in transaction", "sleeping, open transaction")):
            # Cancel stops a running query; an idle transaction runs none, and keeps its locks.
            question = (f"Backend {pid}{who} is {state}: cancel cannot end it (it runs no query) and its "
                        f"locks stay. Terminate it instead? Its transaction is rolled back and its connection closed.")
            terminate = True
        elif not terminate and dialect is not None and not dialect.capabilities.cancel_query:
            question = (f"{dialect.label} cannot cancel another session's statement, only end the session. Terminate "
                        f"backend {pid}{who} instead? Its transaction is rolled back and its connection closed.")
            terminate = True
        else:
            question = (f"Terminate backend {pid}{who}? Its transaction is rolled back and its connection closed."
                        if terminate else f"Cancel the running query of backend {pid}{who}?")
        if terminate:
            question += self._what_ending_releases(pid)

        def decided(yes: bool | None) -> None:
            if yes:
                self._signal_backend(pid, terminate)

        self.push_screen(ConfirmScreen(question), decided)

    def _what_ending_releases(self, pid: int) -> str:
        """What ending a session's transaction would release, from the last sample."""
        if self.snapshot is None:
            return ""
        held = [b for b in self.snapshot.blocked if pid in b.root_blockers]
        if held:
            freed = [b for b in held if b.root_blockers == (pid,) and not b.root_prepared]
            text = f" It holds up {len(held)} session(s); ending it frees {len(freed)} of them"
            return text + (f" ({len(held) - len(freed)} also wait on another root)." if len(freed) < len(held) else ".")
        behind = [b for b in self.snapshot.blocked if pid in b.blocked_by]
        if behind:
            return f" {len(behind)} session(s) wait directly behind it."
        return " No session waits on it."

    @work(thread=True, group="admin")
    def _signal_backend(self, pid: int, terminate: bool) -> None:
        try:
            if self.backend is None:
                raise RuntimeError("no database behind this view")
            done = self.backend.signal_backend(pid, terminate)
            message, severity = (f"{'terminated' if terminate else 'cancelled'} backend {pid}", "information") if done \
                else (f"backend {pid} was not signalled (gone, or not allowed)", "warning")
        except Exception as exc:
            message, severity = f"could not signal {pid}: {fmt.one_line(str(exc), 100)}", "error"
        self.call_from_thread(self.notify, message, severity=severity)
        self.call_from_thread(self.source.refresh_now)

    def action_engine(self, binding_id: str) -> None:
        spec = next((a for a in ENGINE_ACTIONS if a[0] == binding_id), None)
        if spec is None:
            return
        _id, _key, title, placeholder, default = spec
        if self._refuse_if_read_only(title):
            return
        if self.controls is None:
            self.notify(self.controls_off or "engine controls need a database", severity="warning")
            return

        if placeholder is None:
            self._run_engine_action(binding_id, "")
            return

        def submitted(text: str | None) -> None:
            if text:
                self._run_engine_action(binding_id, text)

        self.push_screen(PromptScreen(title, placeholder, self._prefill(binding_id, default or "")), submitted)

    def _prefill(self, binding_id: str, default: str) -> str:
        """A prompt's first word names what exists: the selected queue (or the first of the
        engine's), the first ring, the first lease; the rest of the default stays."""
        words = default.split()
        if not words or self.snapshot is None:
            return default
        kind = binding_id.split(".")[0]
        name = None
        if kind in ("producer", "consumers", "burst", "blocker"):
            engine_queues = [q.name for q in self.snapshot.queues if q.source == "reference"]
            table = self.query_one(QueuesPanel).query_one(DataTable)
            selected = None
            if table.row_count and table.cursor_row is not None:
                key = str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value or "")
                source, _, selected = key.partition(":")
                selected = selected if source == "reference" else None
            name = selected or (engine_queues[0] if engine_queues else None)
        elif kind == "ring" and self.snapshot.rings:
            name = self.snapshot.rings[0].name
        elif kind == "lease" and self.snapshot.leases:
            name = next((lease.name for lease in self.snapshot.leases if lease.name != "outbox-relay"), self.snapshot.leases[0].name)
        # Only a name the prompt can show as it is and take back whole: one word, nothing escaped.
        if name and fmt.inert(name) == name and len(name.split()) == 1:
            return " ".join([name, *words[1:]])
        return default

    def action_stop_all(self) -> None:
        if self.controls is not None:
            self.run_worker(self.controls.stop_all, thread=True)
            self.notify("stopping everything the dashboard started")

    def action_reset_demo(self) -> None:
        if self._refuse_if_read_only("demo reset"):
            return
        if self.controls is None:
            self.notify("the demo reset needs a database", severity="warning")
            return
        question = ("Reset the demo? Everything the dashboard started stops; every demo.* queue (with its dead letters), "
                    "ring, lease and task, the outbox relays' queues and lease, and the queues and leases created from "
                    "prompts are removed; then the demo starts afresh (if it was running).")

        def decided(yes: bool | None) -> None:
            if yes:
                self._reset_demo()

        self.push_screen(ConfirmScreen(question), decided)

    @work(thread=True, group="engine", exclusive=True)
    def _reset_demo(self) -> None:
        from dbcore.dialect import open_session
        from queues.demo import reset

        try:
            if self.demo is not None:
                self.demo.stop()
            else:
                self.controls.stop_all()
            with open_session(self.controls.target, application_name="queuetop-reset") as conn:
                report = reset(conn, wait_s=10.0)
            message, severity = (f"demo reset: removed {len(report.queues)} queue(s) with {report.dead_letters:,} dead letters, "
                                 f"{len(report.rings)} ring(s), {len(report.leases)} lease(s), {len(report.tasks)} task(s)"), "information"
            if self.demo is not None:
                self.demo.start()
        except QueuetopError as exc:
            message, severity = f"demo reset refused: {exc}", "error"
        except Exception as exc:
            message, severity = f"demo reset failed: {fmt.one_line(str(exc), 120)}", "error"
        self.call_from_thread(self.notify, message, severity=severity)
        self.call_from_thread(self.source.refresh_now)

    @work(thread=True, group="engine")
    def _run_engine_action(self, binding_id: str, text: str, create: bool = False) -> None:
        try:
            message = run_engine_action(self.controls, binding_id, text, report=self._report_from_thread, create=create)
            severity = "information"
        except MissingQueue as exc:
            self.call_from_thread(self._offer_to_create, binding_id, text, exc.queue)
            return
        except QueuetopError as exc:
            message, severity = str(exc), "error"
        except Exception as exc:
            message, severity = f"{binding_id} failed: {fmt.one_line(str(exc), 120)}", "error"
        self.call_from_thread(self.notify, message, severity=severity)
        self.call_from_thread(self.source.refresh_now)

    def _offer_to_create(self, binding_id: str, text: str, queue: str) -> None:
        known = [q.name for q in self.snapshot.queues if q.source == "reference"] if self.snapshot is not None else []
        question = (f"Queue {queue!r} does not exist. Create it as a new, empty queue?"
                    + (f" The engine's queues: {', '.join(known[:6])}{', ...' if len(known) > 6 else ''}." if known else ""))

        def decided(yes: bool | None) -> None:
            if yes:
                self._run_engine_action(binding_id, text, create=True)
            else:
                self.notify(f"nothing done: no queue {queue!r}", severity="warning")

        self.push_screen(ConfirmScreen(question), decided)

    def _report_from_thread(self, message: str) -> None:
        self.post_message(ActivityEnded(message))  # thread-safe, and does not wait

    def on_notice_from_thread(self, message: NoticeFromThread) -> None:
        self.notify(message.text, severity=message.severity)  # type: ignore[arg-type]
        self.render_status()

    def on_activity_ended(self, message: ActivityEnded) -> None:
        self.notify(message.text, timeout=15)
        self.source.refresh_now()


def _worst_queue(snapshot: Snapshot) -> QueueSample | None:
    """The queue whose oldest claimable message is oldest (None when no queue has one)."""
    aged = [q for q in snapshot.queues if q.oldest_ready_age_s is not None]
    return max(aged, key=lambda q: q.oldest_ready_age_s or 0.0) if aged else None


class MissingQueue(QueuetopError):
    """A prompt named a queue that does not exist: the dashboard asks before creating it (a typo
    must not create an empty queue)."""

    exit_code = 2

    def __init__(self, queue: str) -> None:
        super().__init__(f"queue {queue!r} does not exist")
        self.queue = queue


def run_engine_action(controls, binding_id: str, text: str, report: Callable[[str], None] | None = None,
                      *, create: bool = False) -> str:
    """Parse a prompt's words and run the action; returns what to tell the operator. `report`
    receives what an action running on in the background has to say when it ends. A queue that
    does not exist raises MissingQueue, unless `create` (the operator said yes): then it is
    created and recorded as the dashboard's (`queuetop demo reset` removes it)."""
    from dbcore.errors import UsageError
    from probes.sampler import blocked_applications
    from queues.control import SCENARIO_KEY
    from queues.scenarios.contention import ContentionOptions

    words = text.split()

    def existing(queue: str) -> str:
        if not controls.queue_exists(queue):
            if not create:
                raise MissingQueue(queue)
            controls.ensure_queue(queue, remember=True)
        return queue

    def arg(index: int, convert=str, name: str = "value"):
        try:
            return convert(words[index])
        except (IndexError, ValueError):
            raise UsageError(f"expected {name} as word {index + 1} in {text!r}") from None

    if binding_id == "producer.start":
        queue, rate = arg(0, name="QUEUE"), arg(1, float, "RATE_PER_S")
        controls.start_producer(existing(queue), rate)
        return f"producer on {queue}: {rate:g} messages/s"
    if binding_id == "producer.stop":
        queue = arg(0, name="QUEUE")
        return f"producer on {queue} stopped" if controls.stop(f"producer:{queue}") else f"no producer on {queue}"
    if binding_id == "consumers.start":
        queue = arg(0, name="QUEUE")
        workers = arg(1, int, "WORKERS") if len(words) > 1 else 1
        handler = words[2] if len(words) > 2 else "noop"
        mode = words[3] if len(words) > 3 else "claim"
        controls.start_consumers(existing(queue), workers=workers, handler=handler, mode=mode)
        return f"{workers} consumer(s) on {queue} ({handler}, {mode})"
    if binding_id == "consumers.stop":
        queue = arg(0, name="QUEUE")
        return f"consumers on {queue} stopped" if controls.stop(f"consumers:{queue}") else f"no consumers on {queue}"
    if binding_id == "burst":
        queue, count = arg(0, name="QUEUE"), arg(1, int, "COUNT")
        controls.burst(existing(queue), count)
        return f"enqueued {count:,} on {queue}"
    if binding_id == "ring.put":
        ring, count = arg(0, name="RING"), arg(1, int, "COUNT") if len(words) > 1 else 1
        controls.ring_put(ring, count)
        return f"put {count} on ring {ring}"
    if binding_id == "ring.take":
        ring, count = arg(0, name="RING"), arg(1, int, "COUNT") if len(words) > 1 else 1
        return f"took {controls.ring_take(ring, count)} from ring {ring}"
    if binding_id == "lease.take":
        name, holder, ttl = arg(0, name="NAME"), arg(1, name="HOLDER"), arg(2, float, "TTL_S")
        return f"lease {name} taken by {holder}, fencing token {controls.lease_take(name, holder, ttl, remember=True)}"
    if binding_id == "lease.release":
        name, holder = arg(0, name="NAME"), arg(1, name="HOLDER")
        controls.lease_release(name, holder)
        return f"lease {name} released by {holder}"
    if binding_id == "blocker":
        queue, seconds = arg(0, name="QUEUE"), arg(1, float, "SECONDS")
        row = len(words) > 2 and words[2] == "row"
        controls.inject_blocker(queue, seconds, row=row)
        return f"blocker holds {queue} ({'head row' if row else 'table'}) for {seconds:g}s"
    if binding_id == "compact":
        group = None if not words or words[0] == "all" else arg(0, int, "GROUP (a task id) or all")
        result = controls.compact(group)
        return (f"compacted {result.groups} group(s): {result.rows_deleted:,} delta rows folded into "
                f"{result.aggregates_inserted:,} in {result.duration_ms:.0f} ms")
    if binding_id == "scenario.start":
        mode = arg(0, name="MODE")
        submitters = arg(1, int, "SUBMITTERS") if len(words) > 1 else 16
        seconds = arg(2, float, "SECONDS") if len(words) > 2 else 60.0
        options = ContentionOptions(mode=mode, submitters=submitters, duration_s=seconds)
        controls.start_scenario(options, blocked_applications, on_done=lambda result: report and report(scenario_summary(result)))
        watch = "the Locks panel fill up" if mode == "naive" else "the Compaction panel fold and Locks stay empty"
        return f"contention scenario: {mode}, {submitters} submitters, {seconds:g}s; watch {watch}"
    if binding_id == "relays.start":
        count = arg(0, int, "RELAYS") if words else 3
        rate = arg(1, float, "RATE_PER_S") if len(words) > 1 else 20.0
        controls.start_relays(count, rate)
        return f"{count} outbox relays share the lease outbox-relay; a service writes {rate:g} messages/s"
    if binding_id == "relays.stop":
        return "outbox relays stopped" if controls.stop_relays() else "no outbox relays are running"
    if binding_id == "relays.kill":
        holder, token = controls.kill_relay_leader()
        return f"killed {holder} (token {token}): its lease expires, a standby takes over with token {token + 1}"
    if binding_id == "scenario.stop":
        if controls.stop(SCENARIO_KEY):
            return "contention scenario stopped"
        return "no contention scenario is running"
    raise UsageError(f"unknown action {binding_id}")


def scenario_summary(result: dict) -> str:
    verdict = "consistent" if result.get("consistent") else "INCONSISTENT"
    return (f"contention {result['mode']}: {result['answers']:,} answers, {result['answers_per_s']:,.0f}/s, "
            f"at most {result['max_blocked_sessions']} blocked, {result['retries']:,} retries, {verdict}")


MODIFIERS = {"ctrl", "shift", "alt", "meta", "super", "hyper"}


def _key_is_possible(key: str) -> bool:
    """A key Textual can report: modifiers + a named key (escape, f5, space, up, ...) or a
    character (a, greater_than_sign, ...)."""
    from textual.keys import Keys, key_to_character

    *modifiers, base = key.split("+")
    if not base or any(m not in MODIFIERS for m in modifiers):
        return False
    return base in {k.value for k in Keys} or key_to_character(base) is not None


def check_keymap(keymap: dict[str, str]) -> None:
    """The config's [keys] table, refused whole (UsageError, exit 2) unless every binding id
    exists, every key is one a terminal can send, and no key ends up on two bindings (one of
    them would be unreachable)."""
    bindings = QueuetopApp.bindings_by_id()
    unknown = sorted(set(keymap) - set(bindings))
    if unknown:
        raise UsageError(f"config [keys]: unknown binding id(s) {', '.join(unknown)}; the ids are listed by ? in the dashboard")
    for binding_id, keys in keymap.items():
        bad = [k for k in keys.split(",") if not _key_is_possible(k.strip())]
        if bad:
            raise UsageError(f"config [keys]: {binding_id} = {keys!r}: no such key {bad[0].strip()!r} "
                             "(e.g. \"space\", \"ctrl+r\", \"f5\", \"x\")")
    owner: dict[str, str] = {}
    for binding_id, binding in bindings.items():
        for key in (keymap.get(binding_id) or binding.key).split(","):
            key = key.strip()
            if key in owner:
                raise UsageError(f"config [keys]: key {key!r} would run both {owner[key]} and {binding_id}")
            owner[key] = binding_id
