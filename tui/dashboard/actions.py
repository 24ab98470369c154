"""What the dashboard does to the shown host's database: details on Enter (a queue's, a
session's), cancel or terminate a backend, the engine's commands (a prompt each), stop what the
dashboard started, reset the demo. Each asks first where it must (a prompt, a confirmation),
refuses under --read-only, and runs off the event loop in a thread worker that says how it went
with a notice.

The app routes the keys here and passes what the screen shows (the focused panel, the selected
session or queue); `HostActions` uses only Textual's `App` services (notify, push_screen,
run_worker, call_from_thread, post_message) and the `Hosts` it is given, never the dashboard's
other parts."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from textual.app import App
from textual.binding import Binding, BindingType
from textual.notifications import SeverityLevel
from textual.widgets import DataTable

from dbcore.dialect import dialect_named
from dbcore.errors import QueuetopError
from probes.model import Snapshot

from .. import format as fmt
from ..messages import ActivityEnded
from ..screens.details import DetailsScreen, queue_renderables, session_renderables
from ..screens.dialogs import ConfirmScreen, PromptScreen
from .engine_actions import ENGINE_ACTIONS, MissingQueue, run_engine_action
from .hosts import Host, Hosts

SIGNAL_BINDINGS: list[BindingType] = [
    Binding("c", "signal(False)", "Cancel backend", id="backend.cancel", show=False),
    Binding("k", "signal(True)", "Terminate backend", id="backend.terminate", show=False),
]
ENGINE_BINDINGS: list[BindingType] = [
    Binding(key, f"engine('{binding_id}')", title, id=f"engine.{binding_id}", show=False)
    for binding_id, key, title, _p, _d in ENGINE_ACTIONS
]

DEMO_RESET_QUESTION = (
    "Reset the demo? Everything the dashboard started stops; every demo.* queue (with its dead letters), "
    "ring, lease and task, the outbox relays' queues and lease, and the queues and leases created from "
    "prompts are removed; then the demo starts afresh (if it was running).")


class HostActions:
    """The shown host's actions, for the keys and the palette; `read_only` refuses those that write."""

    def __init__(self, app: App[None], hosts: Hosts, *, read_only: bool) -> None:
        self.app = app
        self.hosts = hosts
        self.read_only = read_only

    def refuse_if_read_only(self, what: str) -> bool:
        if self.read_only:
            self.app.notify(f"{what} is disabled: queuetop runs with --read-only", severity="warning")
            return True
        return False

    def _done(self, host: Host, message: str, severity: SeverityLevel) -> None:
        """From a worker's thread: say how it went, and sample the host again to show the effect."""
        self.app.call_from_thread(self.app.notify, message, severity=severity)
        self.app.call_from_thread(host.source.refresh_now)

    # -- details (Enter) -------------------------------------------------------------------

    def queue_details(self, row_key: str) -> None:
        """A queue's head and dead letters (its row key in the Queues panel is `source:name`)."""
        backend, snapshot = self.hosts.shown.backend, self.hosts.shown.snapshot
        if backend is None or snapshot is None:
            self.app.notify("no database behind this view", severity="warning")
            return
        source, _, name = row_key.partition(":")
        queue = next((q for q in snapshot.queues if q.source == source and q.name == name), None)
        if queue is not None:
            self.app.push_screen(DetailsScreen(f"Queue {name} ({queue.table})",
                                               lambda: queue_renderables(backend.queue_details(queue.source, queue.name))))

    def session_details(self, pid: int | None) -> None:
        """A session's query and locks (selected in the Locks tree)."""
        backend = self.hosts.shown.backend
        if pid is not None and backend is not None:
            self.app.push_screen(DetailsScreen(f"Session {pid}", lambda: session_renderables(backend.session_details(pid))))

    # -- backend signals --------------------------------------------------------------------

    def signal(self, terminate: bool, *, from_connections: bool, selected_pid: Callable[[], int | None]) -> None:
        """Cancel or terminate the culprit: the session selected in the Locks tree, or, from the
        Connections panel, the oldest open transaction (the usual holder of the xmin horizon)."""
        verb = "terminate" if terminate else "cancel"
        if self.refuse_if_read_only(f"{verb} backend"):
            return
        host = self.hosts.shown
        snapshot = host.snapshot
        who = ""
        if from_connections:
            c = snapshot.connections if snapshot is not None else None
            pid = c.oldest_xact_pid if c is not None else None
            if pid is None or c is None:
                self.app.notify("no open transaction to act on", severity="warning")
                return
            who = f" (the oldest open transaction, {fmt.seconds(c.oldest_xact_age_s)} old" + \
                (", which also holds back the xmin horizon)" if c.xmin_holder_pid == pid else ")")
        else:
            pid = selected_pid()
            if pid is None:
                self.app.notify("select a session in the Locks panel (or focus Connections for the oldest transaction)",
                                severity="warning")
                return
        if host.backend is None:
            self.app.notify("no database behind this view", severity="warning")
            return
        state = None
        if snapshot is not None:
            root = next((b for b in snapshot.blockers if b.pid == pid), None)
            c = snapshot.connections
            state = root.state if root is not None else c.oldest_xact_state if c is not None and c.oldest_xact_pid == pid else None
        dialect = dialect_named(snapshot.server.dialect) if snapshot is not None else None
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
            question += what_ending_releases(snapshot, pid)

        def decided(yes: bool | None) -> None:
            if yes:
                self.app.run_worker(partial(self._signal_backend, host, pid, terminate), name="_signal_backend",
                                    group="admin", thread=True)

        self.app.push_screen(ConfirmScreen(question), decided)

    def _signal_backend(self, host: Host, pid: int, terminate: bool) -> None:
        try:
            if host.backend is None:
                raise RuntimeError("no database behind this view")
            done = host.backend.signal_backend(pid, terminate)
            message, severity = (f"{'terminated' if terminate else 'cancelled'} backend {pid}", "information") if done \
                else (f"backend {pid} was not signalled (gone, or not allowed)", "warning")
        except Exception as exc:
            message, severity = f"could not signal {pid}: {fmt.one_line(str(exc), 100)}", "error"
        self._done(host, message, severity)  # type: ignore[arg-type]

    # -- the engine's commands ----------------------------------------------------------------

    def engine(self, binding_id: str, selected_queue: Callable[[], str | None]) -> None:
        spec = next((a for a in ENGINE_ACTIONS if a[0] == binding_id), None)
        if spec is None:
            return
        _id, _key, title, placeholder, default = spec
        if self.refuse_if_read_only(title):
            return
        host = self.hosts.shown
        if host.controls is None:
            self.app.notify(host.controls_off or "engine controls need a database", severity="warning")
            return

        if placeholder is None:
            self._run(host, binding_id, "")
            return

        def submitted(text: str | None) -> None:
            if text:
                self._run(host, binding_id, text)

        self.app.push_screen(PromptScreen(title, placeholder, prefill(host.snapshot, binding_id, default or "", selected_queue)),
                             submitted)

    def _run(self, host: Host, binding_id: str, text: str, create: bool = False) -> None:
        self.app.run_worker(partial(self._run_engine_action, host, binding_id, text, create), name="_run_engine_action",
                            group="engine", thread=True)

    def _run_engine_action(self, host: Host, binding_id: str, text: str, create: bool) -> None:
        try:
            message = run_engine_action(host.controls, binding_id, text, report=self._report_from_thread, create=create)
            severity = "information"
        except MissingQueue as exc:
            self.app.call_from_thread(self._offer_to_create, host, binding_id, text, exc.queue)
            return
        except QueuetopError as exc:
            message, severity = str(exc), "error"
        except Exception as exc:
            message, severity = f"{binding_id} failed: {fmt.one_line(str(exc), 120)}", "error"
        self._done(host, message, severity)  # type: ignore[arg-type]

    def _offer_to_create(self, host: Host, binding_id: str, text: str, queue: str) -> None:
        known = [q.name for q in host.snapshot.queues if q.source == "reference"] if host.snapshot is not None else []
        question = (f"Queue {queue!r} does not exist. Create it as a new, empty queue?"
                    + (f" The engine's queues: {', '.join(known[:6])}{', ...' if len(known) > 6 else ''}." if known else ""))

        def decided(yes: bool | None) -> None:
            if yes:
                self._run(host, binding_id, text, create=True)
            else:
                self.app.notify(f"nothing done: no queue {queue!r}", severity="warning")

        self.app.push_screen(ConfirmScreen(question), decided)

    def _report_from_thread(self, message: str) -> None:
        self.app.post_message(ActivityEnded(message))  # thread-safe, and does not wait

    # -- everything the dashboard started -------------------------------------------------------

    def stop_all(self) -> None:
        controls = self.hosts.shown.controls
        if controls is not None:
            self.app.run_worker(controls.stop_all, thread=True)  # type: ignore[attr-defined]
            self.app.notify("stopping everything the dashboard started")

    def reset_demo(self) -> None:
        if self.refuse_if_read_only("demo reset"):
            return
        host = self.hosts.shown
        if host.controls is None:
            self.app.notify("the demo reset needs a database", severity="warning")
            return

        def decided(yes: bool | None) -> None:
            if yes:
                self.app.run_worker(partial(self._reset_demo, host), name="_reset_demo", group="engine", exclusive=True,
                                    thread=True)

        self.app.push_screen(ConfirmScreen(DEMO_RESET_QUESTION), decided)

    def _reset_demo(self, host: Host) -> None:
        from dbcore.dialect import open_session
        from queues.demo import reset

        demo, controls = host.demo, host.controls
        try:
            if demo is not None:
                demo.stop()  # type: ignore[attr-defined]
            else:
                controls.stop_all()  # type: ignore[attr-defined]
            with open_session(controls.target, application_name="queuetop-reset") as conn:  # type: ignore[attr-defined]
                report = reset(conn, wait_s=10.0)
            message, severity = (f"demo reset: removed {len(report.queues)} queue(s) with {report.dead_letters:,} dead letters, "
                                 f"{len(report.rings)} ring(s), {len(report.leases)} lease(s), {len(report.tasks)} task(s)"), "information"
            if demo is not None:
                demo.start()  # type: ignore[attr-defined]
        except QueuetopError as exc:
            message, severity = f"demo reset refused: {exc}", "error"
        except Exception as exc:
            message, severity = f"demo reset failed: {fmt.one_line(str(exc), 120)}", "error"
        self._done(host, message, severity)  # type: ignore[arg-type]


def what_ending_releases(snapshot: Snapshot | None, pid: int) -> str:
    """What ending a session's transaction would release, from the last sample."""
    if snapshot is None:
        return ""
    held = [b for b in snapshot.blocked if pid in b.root_blockers]
    if held:
        freed = [b for b in held if b.root_blockers == (pid,) and not b.root_prepared]
        text = f" It holds up {len(held)} session(s); ending it frees {len(freed)} of them"
        return text + (f" ({len(held) - len(freed)} also wait on another root)." if len(freed) < len(held) else ".")
    behind = [b for b in snapshot.blocked if pid in b.blocked_by]
    if behind:
        return f" {len(behind)} session(s) wait directly behind it."
    return " No session waits on it."


def selected_queue(table: DataTable) -> str | None:
    """The engine's queue selected in the Queues panel (a row key is `source:name`), if any."""
    if not table.row_count or table.cursor_row is None:
        return None
    key = str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value or "")
    source, _, name = key.partition(":")
    return name if source == "reference" else None


def prefill(snapshot: Snapshot | None, binding_id: str, default: str, selected: Callable[[], str | None]) -> str:
    """A prompt's first word names what exists: the selected queue (or the first of the
    engine's), the first ring, the first lease; the rest of the default stays."""
    words = default.split()
    if not words or snapshot is None:
        return default
    kind = binding_id.split(".")[0]
    name = None
    if kind in ("producer", "consumers", "burst", "blocker"):
        engine_queues = [q.name for q in snapshot.queues if q.source == "reference"]
        name = selected() or (engine_queues[0] if engine_queues else None)
    elif kind == "ring" and snapshot.rings:
        name = snapshot.rings[0].name
    elif kind == "lease" and snapshot.leases:
        name = next((lease.name for lease in snapshot.leases if lease.name != "outbox-relay"), snapshot.leases[0].name)
    # Only a name the prompt can show as it is and take back whole: one word, nothing escaped.
    if name and fmt.inert(name) == name and len(name.split()) == 1:
        return " ".join([name, *words[1:]])
    return default
