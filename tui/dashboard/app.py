"""QueuetopApp: composes the dashboard's parts and routes between them. Its parts, each in its
own module: the hosts and the one shown (hosts.py), the panels' view (view.py), the bars
(bars.py), recording and replay (replay.py), acting on the database (actions.py), the command
palette (commands.py). The app holds the one key table (Textual runs a key only on the focus
chain, and the footer and the help list keys in the table's order), and each key's action is a
line or two that hands it to its part."""

from __future__ import annotations

import gc
import time
from collections import deque
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import ClassVar

from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.css.query import NoMatches
from textual.events import Key
from textual.notifications import SeverityLevel
from textual.widgets import DataTable, Input, Tree

from probes.configmodel import DEFAULT_FLIGHT_MB, DEFAULT_FLIGHT_MINUTES
from probes.flight import FlightRecorder
from probes.model import Snapshot
from probes.recording import Recorder, ReplayClock
from probes.serverstats import deadlock_notices

from .. import format as fmt
from ..filters import EMPTY, Filter, FilterError, parse
from ..messages import ActivityEnded, NoticeFromThread, SnapshotArrived
from ..screens.dialogs import HelpScreen, HostsScreen, NoticesScreen
from ..widgets.panels import ConnectionsPanel, LeasesPanel, LocksPanel, Panel, QueuesPanel, RingsPanel, SessionsPanel
from .actions import Culprit, HostActions, culprit_of, selected_key, selected_queue
from .bars import ContextFooter, HostBar, NoticeBar, ServerBar, StatusBar, StatusFacts
from .commands import EngineCommands
from .export import copy_selected, export_focused
from .hosts import Backend, Host, Hosts, HostSpec, SnapshotSource, host_line
from .keymap import KEYS, KeyContext, bindings_by_id, help_keys
from .replay import LiveRecording, record_description, seek, seek_prompt, toggle_play
from .view import LAYOUT_CSS, PanelsView

GC_YOUNG = 20_000  # allocations between collections of the young generation while the dashboard runs
# The filter box's words (`/`): the panel's fields are said when it opens.
FILTER_PLACEHOLDER = "filter: a word, or field:value (app:worker state:idle dur>5s); Enter applies, Esc clears"


def filter_placeholder(panel: Panel) -> str:
    """The box's words for a panel: its fields (a term on another is refused for it)."""
    fields = " ".join("dur>5s" if name == "dur" else f"{name}:" for name in panel.FILTER_FIELDS)
    return f"{panel.panel_name} filter: a word, or {fields} (-term negates); Enter applies, Esc clears"


class QueuetopApp(App[None]):
    TITLE = "queuetop"
    AUTO_FOCUS = "#queues-table"
    CSS = LAYOUT_CSS
    BINDINGS: ClassVar[list[BindingType]] = KEYS
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
        flight_minutes: float = DEFAULT_FLIGHT_MINUTES,
        flight_mb: float = DEFAULT_FLIGHT_MB,
        sessions_filter: Filter = EMPTY,
    ) -> None:
        super().__init__()
        self.replay = replay  # a recording's clock: the dashboard replays it, with no database
        # R, and the flight recorder it saves first (off in a replay: a recording is not kept again).
        flight = FlightRecorder(minutes=flight_minutes, mb=flight_mb) if replay is None else None
        self.live_recording = LiveRecording(record_dir, flight)
        specs = list(hosts)
        if not specs:
            assert source_factory is not None, "a source, or hosts"
            specs = [HostSpec(name="", source_factory=source_factory, backend=backend, controls=controls, demo=demo,
                              controls_off=controls_off)]
        self._hosts = Hosts(specs, self._sink)
        self.read_only = read_only
        self.host_actions = HostActions(self, self._hosts, read_only=read_only)
        self.paused = False
        self._sessions_filter = sessions_filter  # --filter, --min-duration: the Sessions panel's at start
        self._filter_panel: Panel | None = None  # the panel `/` is editing the filter of
        self.apply_ms: list[float] = []  # time to apply each snapshot (bench tui)
        self._keymap = keymap or {}
        self.notices: deque[tuple[str, str, str]] = deque(maxlen=1000)  # (HH:MM:SS, severity, text), the `m` log

    # -- the host shown, and the state tests and tools read -------------------------------

    @property
    def hosts(self) -> list[Host]:
        return self._hosts.all

    @property
    def current(self) -> int:
        return self._hosts.current

    @property
    def host(self) -> Host:
        return self._hosts.shown

    @property
    def source(self) -> SnapshotSource:
        return self.host.source

    @property
    def snapshot(self) -> Snapshot | None:
        return self.host.snapshot

    @property
    def recorder(self) -> Recorder | None:
        return self.live_recording.recorder

    _host_line = staticmethod(host_line)  # a line of the Hosts screen (H)

    # -- layout and lifetime --------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield StatusBar("queuetop: waiting for the first sample…", id="status")
        if len(self.hosts) > 1:
            yield HostBar("", id="hosts")
        yield ServerBar("", id="server")  # the shown host's server figures (the header line)
        yield PanelsView.build()
        yield Input(placeholder=FILTER_PLACEHOLDER, id="filter")
        yield NoticeBar(id="notice")
        yield ContextFooter(self.key_context)

    def on_mount(self) -> None:
        # Each sample makes and drops tens of thousands of small objects (5,000 sessions' rows and
        # cells): at the default threshold (700 allocations) the young generation was collected
        # about 7 times a second and the middle one every 2 s, 0.3 % of a core in `bench tui`. A
        # larger young generation: most of a sample's objects are freed by their counts first.
        self._gc_threshold = gc.get_threshold()
        gc.set_threshold(max(GC_YOUNG, self._gc_threshold[0]), *self._gc_threshold[1:])
        if self._keymap:
            self.set_keymap(self._keymap)
        if self._sessions_filter:  # checked against the Sessions panel's fields before it opened (tui/app.py)
            self.query_one(SessionsPanel).set_filter(self._sessions_filter)
        if self.host.demo is not None:
            self.run_worker(self._start_demo, thread=True, name="demo")
        for index, host in enumerate(self.hosts):
            host.source.start()
            if host.prepare is not None:
                self.run_worker(partial(self._hosts.prepare, index), thread=True, name=f"prepare {host.name}")
        self.render_status()
        self.render_hosts()
        if self.replay is not None:
            self.query_one(LeasesPanel).clock = self.replay.now  # the countdown runs on the recorded clock
            self.query_one(StatusBar).follow_clock(0.25)  # the position moves between snapshots

    def _start_demo(self) -> None:
        try:
            self.host.demo.start()  # type: ignore[attr-defined]
        except Exception as exc:
            self.call_from_thread(self.notify, f"demo did not start: {fmt.one_line(str(exc), 120)}", severity="error")

    def on_unmount(self) -> None:
        if hasattr(self, "_gc_threshold"):
            gc.set_threshold(*self._gc_threshold)
        self.live_recording.close()
        self._hosts.stop()

    # -- snapshots ------------------------------------------------------------------------

    def _sink(self, host: int, snapshot: Snapshot) -> None:
        """Called from the host's sampler's thread (which also writes it to a recording, if one runs)."""
        stopped = self.live_recording.write(snapshot)
        if stopped is not None:
            self.post_message(NoticeFromThread(stopped, "error"))
        try:
            self.post_message(SnapshotArrived(snapshot, host))
        except Exception:  # the app is shutting down
            pass

    def on_snapshot_arrived(self, message: SnapshotArrived) -> None:
        # Each deadlock the server broke since the host's previous read: a notice, from every host
        # (named when there are several), paused or not; its only trace on screen otherwise.
        for said in deadlock_notices(message.snapshot.server_stats, self.hosts[message.host].name if len(self.hosts) > 1 else None):
            self.notify(said, severity="warning", timeout=15)
        if self.paused or self._shutting_down():
            return
        if message.host != self.current:  # another tab's: kept for when it is shown, and summarised
            Hosts.keep(self.hosts[message.host], message.snapshot)
            if message.snapshot.connected:  # its trends and countdowns go on while not shown
                self.query_one(PanelsView).record(message.snapshot)
            self.render_hosts()
            return
        self.apply_snapshot(message.snapshot)
        self.render_hosts()

    def _shutting_down(self) -> bool:
        """True once the app has begun to shut down, when a message from a thread (a sampler's last
        snapshot, a notice) may still be handled but the screen's widgets are being removed (CI saw
        a snapshot arrive so at the end of a Pilot test). The app's handlers run until the app's
        own message loop ends, after its screens are gone, and Textual says nothing to them in
        between: `is_running` is False from the start of shutdown (and only then, once the app
        handles messages). Each handler checks it first, and draws nothing on its way out; none
        of them awaits, so the widgets cannot go while one runs. (Also True before the app runs.)"""
        return not self.is_running

    def apply_snapshot(self, snapshot: Snapshot) -> None:
        started = time.perf_counter()
        host = self.host
        Hosts.keep(host, snapshot)
        # Disconnected: keep the last figures on screen; the status bar says they are stale.
        self.query_one(PanelsView).show(host.shown or snapshot)
        self.render_status()
        self.apply_ms.append((time.perf_counter() - started) * 1000)

    def refresh_panels(self) -> None:
        """Show the current host's figures (another host shown, a new filter): the last taken
        while connected, else the latest."""
        shown = self.host.shown or self.host.snapshot
        if shown is not None:
            self.query_one(PanelsView).show(shown)

    def render_hosts(self) -> None:
        if len(self.hosts) > 1:
            for bar in self.query(HostBar):
                bar.show(self.hosts, self.current)

    def render_status(self, force: bool = False) -> None:
        facts = StatusFacts(snapshot=self.snapshot, last_good_at=self.host.last_good_at,
                            host_name=self.host.name if len(self.hosts) > 1 else None, replay=self.replay,
                            paused=self.paused, recording=self.recorder is not None, read_only=self.read_only,
                            interval_s=self.source.interval_s if self.replay is None else 0.0)
        self.query_one(StatusBar).show(facts, force)
        self.query_one(ServerBar).show(self.host.shown or self.snapshot, force)

    # -- notices --------------------------------------------------------------------------

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information", timeout: float | None = None,
               markup: bool = True) -> None:
        """Every notice goes to the log (`m`) and, for a few seconds, to the footer's line; none
        covers a panel. Messages are plain text, inert and on one line: an error's text may hold
        brackets, and a notice may quote a name or an error from the database."""
        text = fmt.inert_line(f"{title}: {message}" if title else message)
        at = time.strftime("%H:%M:%S")
        self.notices.append((at, severity, text))
        # A notice from a thread (call_from_thread) can come while the app shuts down; one before
        # the app runs has no screen yet: the log has them.
        if self._shutting_down() or not self.screen_stack:
            return
        # On the main screen, even while a dialog is open over it.
        self.screen_stack[0].query_one(NoticeBar).show(at, severity, text, timeout)

    def on_notice_from_thread(self, message: NoticeFromThread) -> None:
        self.notify(message.text, severity=message.severity)  # type: ignore[arg-type]
        if not self._shutting_down():
            self.render_status()

    def on_activity_ended(self, message: ActivityEnded) -> None:
        self.notify(message.text, timeout=15)
        self.source.refresh_now()

    def action_notices(self) -> None:
        for bar in self.screen_stack[0].query(NoticeBar):
            bar.hide()
        self.push_screen(NoticesScreen(list(self.notices)))

    # -- keys -----------------------------------------------------------------------------

    @classmethod
    def bindings_by_id(cls) -> dict[str, Binding]:
        """Every binding, by the id the config's [keys] table remaps it by."""
        return bindings_by_id()

    def key_for(self, binding_id: str) -> str:
        """The key that runs a binding, as the config's [keys] table may have remapped it."""
        binding = self.bindings_by_id().get(binding_id)
        return "?" if binding is None else self._keymap.get(binding_id, binding.key_display or binding.key)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # False refuses a key (and hides it from the footer), where it could do nothing at all; a
        # key that applies only elsewhere still answers, saying why. What the footer and the help
        # show is keymap.applies' choice (key_context).
        if action in ("host", "hosts"):
            return len(self.hosts) > 1  # one database: no host keys
        if action in ("step", "seek"):
            return self.replay is not None
        if action == "record":
            return self.replay is None  # a replay is not recorded again
        return True

    def action_help(self) -> None:
        """The keys that apply now (several hosts: the host keys; a replay: its keys; ...)."""
        keys = help_keys(self.key_for, self.key_context(), self.host.controls_off)
        record = record_description(self.live_recording.flight)  # R: the flight recorder's bounds, what it holds now
        keys = [(key, record if binding_id == "record" else said, binding_id) for key, said, binding_id in keys]
        self.push_screen(HelpScreen(keys))

    def action_host(self, index: int) -> None:
        """Show host `index` (its number in the host bar, from 0), or the next (-1) or previous (-2)."""
        if self._hosts.select(index):
            self.refresh_panels()
            self.render_status(force=True)
            self.render_hosts()

    def action_hosts(self) -> None:
        """A line per host: what the host bar says of each, and more."""
        self.push_screen(HostsScreen([host_line(i, h) for i, h in enumerate(self.hosts)], self.current))

    def action_toggle_pause(self) -> None:
        if self.replay is not None:  # play / pause the recording: its snapshots still arrive when stepped
            toggle_play(self.replay)
        else:
            self.paused = not self.paused
            self._hosts.pause(self.paused)
        self.render_status()

    def action_refresh_now(self) -> None:
        if self.replay is not None:
            return
        if self.paused:
            taken = f" of {self.snapshot.taken_at:%H:%M:%S} UTC" if self.snapshot is not None else ""
            self.notify(f"paused: the panels keep the sample{taken}; p resumes", severity="warning", timeout=4)
            return
        self._hosts.refresh()

    def action_interval(self, step: int) -> None:
        if self.replay is not None:  # + and - change the speed of a recording
            speed = self.replay.faster(step)
            self.render_status()
            self.notify(f"replay at x{speed:g}", timeout=2)
            return
        new = self._hosts.step_interval(step)
        self.render_status()
        self.notify(f"refresh every {new:g}s", timeout=2)

    def action_step(self, direction: int) -> None:
        if self.replay is not None:
            self.replay.step(direction, self.host.name)
            self.render_status()

    def action_seek(self) -> None:
        if self.replay is not None:
            self.push_screen(seek_prompt(self.replay), partial(self._seek, self.replay))

    def _seek(self, clock: ReplayClock, text: str | None) -> None:
        if not text:
            return
        wrong = seek(clock, text)
        if wrong is not None:
            self.notify(wrong, severity="error")
            return
        self.render_status()

    def action_record(self) -> None:
        """Start or stop recording every host's snapshots (queuetop replay FILE plays them)."""
        if self.replay is None:
            said, severity = self.live_recording.toggle()
            self.notify(said, severity=severity)
            if severity != "error":
                self.render_status()

    def action_copy(self) -> None:
        """y: the selected session's whole query (Sessions, Locks), or the row's name, to the clipboard."""
        said = copy_selected(self, self.query_one(PanelsView).focused_panel(), self.host.shown or self.host.snapshot,
                             self.host.backend)
        if said is not None:  # else: the whole query is being read, and its notice comes when it is copied
            self.notify(said[0], severity=said[1], timeout=6)

    def action_export(self) -> None:
        """e: the focused panel's rows as CSV, the file named in a notice."""
        said, severity = export_focused(self.query_one(PanelsView).focused_panel(), self.host.shown or self.host.snapshot)
        self.notify(said, severity=severity, timeout=10)

    def key_context(self) -> KeyContext:
        """What decides which keys apply now: the footer and the help show only those."""
        host = self.host
        return KeyContext(hosts=len(self.hosts), replay=self.replay is not None, engine=host.controls is not None,
                          backend=host.backend is not None, read_only=self.read_only,
                          culprit=self._culprit(self._selected_queue_key()).panel is not None)

    def action_cursor_down(self) -> None:
        """j: down in the focused table or tree, as ↓ (a scrolling box scrolls)."""
        self._move_cursor("down")

    def action_cursor_up(self) -> None:
        """k: up in the focused table or tree, as ↑."""
        self._move_cursor("up")

    def _move_cursor(self, way: str) -> None:
        focused = self.focused
        move = getattr(focused, f"action_cursor_{way}", None) or getattr(focused, f"action_scroll_{way}", None)
        if move is not None:
            move()

    # -- the panels -----------------------------------------------------------------------

    def action_zoom(self) -> None:
        self.query_one(PanelsView).zoom()

    def action_sort(self) -> None:
        """The next order of the focused panel (Queues where the focused one does not sort). Said
        on the panel's border, not as a notice (one a press flooded the log); only where the
        border has no room for it (80 columns, hidden columns listed), on the footer's line for
        a moment, not logged."""
        view = self.query_one(PanelsView)
        said = view.sort(self.snapshot)
        panel = view.focused_panel()
        if panel is None or len(panel.SORTS) < 2:
            panel = self.query_one(QueuesPanel)
        order = said.partition(" sorted by ")[2]
        if order and f"sorted by {order}" not in str(panel.border_subtitle):
            self.query_one(NoticeBar).show(time.strftime("%H:%M:%S"), "information", said, 2, logged=False)

    def action_filter(self) -> None:
        """`/`: edit the focused panel's own filter (Queues' when none has focus), prefilled with
        the one it has; the box names the panel and its fields."""
        panel = self._filter_panel = self.query_one(PanelsView).filter_target()
        box = self.query_one("#filter", Input)
        box.placeholder = filter_placeholder(panel)
        box.value = panel.filter.text
        box.cursor_position = len(box.value)
        box.add_class("visible")
        box.focus()

    @on(Input.Submitted, "#filter")
    def _apply_filter(self, event: Input.Submitted) -> None:
        """Enter in the box: the panel's filter is what it says (empty: none). A wrong term is
        refused with its reason, the box kept open on it and the panel's filter as it was."""
        panel = self._filter_panel or self.query_one(PanelsView).filter_target()
        try:
            flt = parse(event.value)
        except FilterError as exc:
            self.notify(f"{panel.panel_name} filter not changed: {exc}", severity="error", timeout=8)
            return
        refused = panel.set_filter(flt)
        if refused is not None:
            self.notify(f"filter not changed: {refused}", severity="error", timeout=8)
            return
        self._close_filter_box(panel)
        self.refresh_panels()

    def _close_filter_box(self, panel: Panel) -> None:
        box = self.query_one("#filter", Input)
        box.value = ""
        box.remove_class("visible")
        self._filter_panel = None
        target = next((w for w in panel.query("*") if w.focusable), None)
        (target or self.query_one(QueuesPanel).query_one(DataTable)).focus()

    def on_key(self, event: Key) -> None:
        box = self.query_one("#filter", Input)
        if event.key == "escape" and self.screen.maximized is not None and self.screen is self.screen_stack[0]:
            self.screen.minimize()
            event.stop()
            return
        if event.key == "escape" and box.has_focus:  # the panel being edited: no filter
            editing = self._filter_panel or self.query_one(PanelsView).filter_target()
            self._clear_filter(editing)
            self._close_filter_box(editing)
            return
        if event.key != "escape" or self.screen is not self.screen_stack[0]:
            return
        focused = self.query_one(PanelsView).focused_panel()
        if focused is not None and focused.filter:
            self._clear_filter(focused)  # Esc on a filtered panel clears its filter, as Esc in the box does

    def _clear_filter(self, panel: Panel) -> None:
        panel.set_filter(EMPTY)
        self.refresh_panels()

    @on(DataTable.RowSelected, "#queues-table")
    def _queue_details(self, event: DataTable.RowSelected) -> None:
        row_key = event.row_key.value or ""
        self.host_actions.queue_details(row_key, goto=partial(self.goto_culprit, row_key),
                                        goto_key=self.key_for("verdict.goto"))

    # -- from a queue's verdict to what holds it up (v) -----------------------------------------

    def _selected_queue_key(self) -> str | None:
        """The Queues panel's selected row (`source:name`), if any (none before the panels are there)."""
        try:
            return selected_key(self.screen_stack[0].query_one("#queues-table", DataTable)) if self.screen_stack else None
        except NoMatches:
            return None

    def _culprit(self, row_key: str | None) -> Culprit:
        """Where the verdict's key goes from the queue `row_key`, as the panels' sample has it."""
        snapshot = self.host.shown or self.host.snapshot
        source, _, name = (row_key or "").partition(":")
        queue = next((q for q in snapshot.queues if q.source == source and q.name == name), None) \
            if snapshot is not None and row_key else None
        return culprit_of(queue, snapshot, name or None, self.key_for("verdict.goto"))

    def action_goto_culprit(self) -> None:
        """v: from the selected queue's verdict to what holds it up."""
        self.goto_culprit(self._selected_queue_key())

    def goto_culprit(self, row_key: str | None, close: Callable[[], object] | None = None) -> None:
        """From queue `row_key`'s verdict to the session that holds it up, with the cursor on it
        where C and K act: the root blocker in Locks, the xmin holder in Sessions. The zoom is
        undone, and the filter (or the hiding of idle sessions) where it hides the session; the
        queue's details (`close`) are closed. Where there is no session to go to, a notice says
        why, and what ends the holder where it can be said (a prepared transaction, a slot)."""
        culprit = self._culprit(row_key)
        pid = culprit.pid
        if culprit.panel is None or pid is None:
            self.notify(culprit.said, severity=culprit.severity, timeout=10)
            return
        if close is not None:
            close()
        main = self.screen_stack[0]
        panel: LocksPanel | SessionsPanel = main.query_one(LocksPanel) if culprit.panel == "locks" else main.query_one(SessionsPanel)
        if main.maximized is not None and main.maximized is not panel:
            main.minimize()
        undone = []
        found = panel.select_pid(pid)
        if not found and panel.filter:
            self._clear_filter(panel)
            undone.append(f"the {panel.panel_name} filter cleared")
            found = panel.select_pid(pid)
        if not found and isinstance(panel, SessionsPanel) and panel.hide_idle:
            panel.toggle_idle()
            undone.append("idle sessions shown")
            found = panel.select_pid(pid)
        if not found:
            where = "Locks tree" if isinstance(panel, LocksPanel) else "Sessions list"
            self.notify(f"session {pid} is no longer in the {where} (it ended since the sample): nothing to go to",
                        severity="warning")
            return
        acts = ""
        if self.host.backend is not None and not self.read_only:
            acts = f" ({self.key_for('backend.cancel')} cancels, {self.key_for('backend.terminate')} terminates)"
        self.notify(culprit.said + (f", {' and '.join(undone)}" if undone else "") + acts, timeout=8)

    @on(Tree.NodeSelected, "#locks-tree")
    def _session_details(self, event: Tree.NodeSelected) -> None:
        self.host_actions.session_details(event.node.data)

    @on(DataTable.RowSelected, "#sessions-table")
    def _sessions_row_details(self, event: DataTable.RowSelected) -> None:
        """Enter on a session: the details of that session (its pid and backend start), never of
        another backend that got its pid since; on the line of one that ended, that it ended."""
        panel = self.query_one(SessionsPanel)
        key = event.row_key.value or ""
        session = panel.session_of_key(key)
        if session is not None:
            self.host_actions.session_details(session.pid, started=session.backend_start, known=True)
        elif panel.ended_pid is not None:
            self.notify(f"session {panel.ended_pid} ended: no details", severity="warning")

    def action_sessions_idle(self) -> None:
        """Hide the idle sessions in the Sessions panel, or show them again (its border says so)."""
        self.query_one(SessionsPanel).toggle_idle()

    def action_sessions_all(self) -> None:
        """Show every backend in the Sessions panel (the server's processes, queuetop's own
        sessions), or the clients' sessions alone again (its border says which)."""
        shown = self.query_one(SessionsPanel).toggle_all()
        self.notify("Sessions: every backend, the server's processes and queuetop's own sessions too" if shown
                    else "Sessions: clients' sessions only (the server's processes and queuetop's own hidden)", timeout=3)

    # -- acting on the database (actions.py) ------------------------------------------------

    def action_tag(self) -> None:
        """Space in the Sessions list: tag the selected session, or untag it (its border counts them)."""
        focused = self.query_one(PanelsView).focused_panel()
        if not isinstance(focused, SessionsPanel):
            self.notify("Space tags a session in the Sessions panel (Tab to it)", severity="warning", timeout=4)
            return
        if focused.toggle_tag() is None:
            self.notify("no session under the cursor to tag", severity="warning", timeout=4)

    def action_untag(self) -> None:
        """Untag every session."""
        count = self.query_one(SessionsPanel).clear_tags()
        self.notify(f"{count} session(s) untagged" if count else "no session is tagged", timeout=3)

    def action_signal(self, terminate: bool) -> None:
        """Cancel or terminate the session selected in the focused panel that shows sessions; in
        the Sessions list with sessions tagged, every tagged one (one confirmation lists them)."""
        focused = self.query_one(PanelsView).focused_panel()
        if isinstance(focused, SessionsPanel) and focused.tags:
            self.host_actions.signal_tagged(terminate, focused.tagged_sessions(), confirmed=focused.clear_tags)
            return
        if isinstance(focused, SessionsPanel):
            if focused.ended_pid is not None:
                verb = "terminate" if terminate else "cancel"
                self.notify(f"session {focused.ended_pid} ended: nothing to {verb} (move the cursor to another session)",
                            severity="warning")
                return
            identity = focused.selected_identity
            if identity is not None:
                self.host_actions.signal(terminate, identity[0], "Sessions", started=identity[1], known=True)
                return
            pid, where = None, "Sessions"
        elif isinstance(focused, LocksPanel):
            pid, where = focused.selected_pid, "Locks"
        elif isinstance(focused, ConnectionsPanel):
            c = self.snapshot.connections if self.snapshot is not None else None
            pid, where = (c.xmin_holder_pid if c is not None and c.xmin_holder_kind in (None, "session") else None), "Connections"
        else:
            pid, where = None, None
        self.host_actions.signal(terminate, pid, where)

    def action_engine(self, binding_id: str) -> None:
        self.host_actions.engine(binding_id, self._selected_name)

    def _selected_name(self, kind: str) -> str | None:
        """The queue, ring or lease selected in its panel, for a prompt's first word: the Queues
        panel's selection always (the engine's queues are what the keys act on); a ring's or a
        lease's only while its panel has the focus."""
        if kind == "queue":
            return selected_queue(self.query_one(QueuesPanel).query_one(DataTable))
        panel = {"ring": RingsPanel, "lease": LeasesPanel}.get(kind)
        focused = self.query_one(PanelsView).focused_panel()
        if panel is None or not isinstance(focused, panel):
            return None
        return selected_key(focused.query_one(DataTable))

    def action_stop_all(self) -> None:
        self.host_actions.stop_all()

    def action_reset_demo(self) -> None:
        self.host_actions.reset_demo()
