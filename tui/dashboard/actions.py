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

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial

from rich.text import Text
from textual.app import App
from textual.binding import Binding, BindingType
from textual.notifications import SeverityLevel
from textual.widgets import DataTable

from dbcore.dialect import dialect_named
from dbcore.errors import QueuetopError, first_line
from jobs.registry import library_for
from probes.model import Blocker, QueueSample, SessionSample, Snapshot

from .. import format as fmt
from ..filters import session_duration
from ..messages import ActivityEnded
from ..screens.details import DetailsScreen, queue_renderables, session_renderables, verdict_renderable
from ..screens.dialogs import ConfirmScreen, PromptScreen
from ..screens.queue_details import EngineQueueDetails
from ..widgets.panels.base import UNKNOWN_KEY
from .engine_actions import ENGINE_ACTIONS, MissingQueue, run_engine_action
from .hosts import Host, Hosts

ENGINE_BINDINGS: list[BindingType] = [
    Binding(key, f"engine('{binding_id}')", title, id=f"engine.{binding_id}", show=False)
    for binding_id, key, title, _p, _d in ENGINE_ACTIONS
]

# The engine's actions without a prompt that end something: each asks first.
CONFIRM_FIRST = {
    "scenario.stop": "Stop the contention scenario? Its submitters and its compactor stop; what they wrote stays.",
    "relays.stop": "Stop the outbox relays? The outbox fills until relays run again; nothing is lost.",
    "relays.kill": ("Kill the relay leader? Its process is killed abruptly (SIGKILL), as a crash would; another relay "
                    "takes the lease over once it expires, and what the leader had sent but not marked is sent again "
                    "(the receivers' inbox drops the duplicates)."),
}

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

    def queue_details(self, row_key: str, goto: Callable[[Callable[[], object]], None] | None = None,
                      goto_key: str = "v") -> None:
        """A queue's head and dead letters (its row key in the Queues panel is `source:name`).
        `goto(close)`: the verdict's key (`goto_key`) in the details, which goes to what holds
        the queue up (closing the details with `close` when it goes)."""
        backend, snapshot = self.hosts.shown.backend, self.hosts.shown.snapshot
        if backend is None or snapshot is None:
            self.app.notify("no database behind this view", severity="warning")
            return
        source, _, name = row_key.partition(":")
        queue = next((q for q in snapshot.queues if q.source == source and q.name == name), None)
        if queue is None:
            return
        title = f"Queue {name} ({queue.table})"
        host = self.hosts.shown

        def current() -> QueueSample | None:  # the latest sample's: the verdict as it stands at each load
            sample = host.snapshot
            return next((q for q in sample.queues if q.source == source and q.name == name), None) if sample else None

        def hint(sample: QueueSample) -> str | None:  # the verdict's line saying where the key goes, where it goes
            return culprit_of(sample, host.snapshot, name, goto_key).hint if goto is not None else None

        loader = partial(_queue_details, backend, queue.source, queue.name, current, hint)
        screen: DetailsScreen

        def go() -> None:
            if goto is not None:
                goto(screen.dismiss)

        jobs = partial(self.open_jobs, host, source, name) if library_for(source) is not None else None
        if source != "reference":
            screen = DetailsScreen(title, loader, goto=go if goto is not None else None, jobs=jobs)
            self.app.push_screen(screen)
            return
        act = None if self.read_only or host.controls is None else partial(self._dead_letters, host, name)

        def dead() -> int | None:
            sample = host.snapshot
            found = next((q for q in sample.queues if q.source == source and q.name == name), None) if sample else None
            return found.dead if found is not None else None

        screen = EngineQueueDetails(title, loader, queue=name, dead=dead, act=act, goto=go if goto is not None else None,
                                    jobs=jobs)
        self.app.push_screen(screen)

    def open_jobs(self, host: Host, source: str, name: str) -> None:
        """A queue's Jobs screen (J in its details): its jobs by state, searched, acted on with its
        library's own semantics; no action under --read-only."""
        from jobs.resolve import queue_of

        from ..screens.jobs import JobsScreen

        sample = host.snapshot
        queue = next((q for q in sample.queues if q.source == source and q.name == name), None) if sample else None
        if queue is None or host.backend is None:
            self.app.notify(f"queue {name!r} is not in the last sample", severity="warning")
            return

        def counts() -> dict[str, int | None]:
            latest = host.snapshot
            q = next((q for q in latest.queues if q.source == source and q.name == name), None) if latest else None
            if q is None:
                return {}
            return {"ready": q.ready, "delayed": q.delayed, "blocked": q.blocked, "in_flight": q.in_flight, "dead": q.dead}

        try:
            job_queue = queue_of(source, queue.schema, name, config=getattr(host.backend, "config", None))
        except QueuetopError as exc:
            self.app.notify(str(exc), severity="warning", timeout=8)
            return
        self.app.push_screen(JobsScreen(host.backend, job_queue, counts=counts, read_only=self.read_only,
                                        start_state="dead" if queue.dead else "ready"))

    def _dead_letters(self, host: Host, queue: str, what: str, then: Callable[[], None]) -> None:
        """Retry or purge an engine queue's dead letters (confirmed by the details screen)."""

        def work() -> None:
            try:
                if what == "retry":
                    n = host.controls.retry_dead_letters(queue)  # type: ignore[attr-defined]
                    message, severity = f"queue {queue!r}: {n:,} dead letter(s) back in the queue", "information"
                else:
                    n = host.controls.purge_dead_letters(queue)  # type: ignore[attr-defined]
                    message, severity = f"queue {queue!r}: {n:,} dead letter(s) purged", "information"
            except QueuetopError as exc:
                message, severity = str(exc), "error"
            except Exception as exc:
                message, severity = f"{what} failed: {fmt.one_line(str(exc), 120)}", "error"
            self._done(host, message, severity)  # type: ignore[arg-type]
            then()

        self.app.run_worker(work, name="_dead_letters", group="engine", thread=True)

    def session_details(self, pid: int | None, started: datetime | None = None, *, known: bool = False) -> None:
        """A session's whole query, its locks, who blocks it and whom it blocks (Enter on a session
        in the Sessions list or the Locks tree). The session is (pid, `started`: when its backend
        started) where the caller `known`s it (the Sessions list), else the pid's in the last
        sample (the Locks tree's sessions are that sample's): a backend that got the pid since
        shows no details (`the session has ended`), never its own."""
        backend, snapshot = self.hosts.shown.backend, self.hosts.shown.snapshot
        if pid is None:
            return
        if backend is None:
            self.app.notify("no database behind this view", severity="warning")
            return
        if not known and snapshot is not None:
            started = next((s.backend_start for s in snapshot.sessions if s.pid == pid), None)
        blocked_by: tuple[int, ...] = ()
        blocks: list[int] = []
        waiting = None
        if snapshot is not None:
            session = next((s for s in snapshot.sessions if s.pid == pid), None)
            waiting = next((b for b in snapshot.blocked if b.pid == pid), None)
            # The lock tree's blockers when it has the session (every locker of a shared row, which
            # pg_blocking_pids names one at a time), else the sessions list's.
            blocked_by = ((*waiting.blocked_by, *((0,) if waiting.blocked_by_prepared else ())) if waiting is not None
                          else session.blocked_by if session is not None else ())
            blocks = sorted({s.pid for s in snapshot.sessions if pid in s.blocked_by}
                            | {b.pid for b in snapshot.blocked if pid in b.blocked_by})
        details = partial(backend.session_details, pid, started) if started is not None else partial(backend.session_details, pid)
        self.app.push_screen(DetailsScreen(f"Session {pid}", lambda: session_renderables(
            details(), blocked_by=blocked_by, blocks=blocks, waiting=waiting,
            here=snapshot.server.database if snapshot is not None else None)))

    # -- backend signals --------------------------------------------------------------------

    def signal(self, terminate: bool, pid: int | None, where: str | None, started: datetime | None = None, *,
               known: bool = False) -> None:
        """Cancel or terminate the session selected in a panel that shows sessions (`where`: the
        Sessions list, the Locks tree, or Connections, whose session is the xmin holder), after a
        confirmation that names it: pid, user, application, state, durations, its query's first
        line. The session is (pid, `started`, when its backend started) where the caller `known`s
        it (the Sessions list), else the pid's in the last sample: the statement that signals
        checks it is still that backend, and refuses, saying so, if the pid is another's now."""
        verb = "terminate" if terminate else "cancel"
        if self.refuse_if_read_only(f"{verb} backend"):
            return
        host = self.hosts.shown
        snapshot = host.snapshot
        if pid is None:
            c = snapshot.connections if snapshot is not None else None
            if where == "Connections" and c is not None and c.xmin_holder_kind == "standby":
                said = (f"the xmin horizon is held by standby {fmt.inert(c.xmin_holder_name or '-')!r}'s hot_standby_feedback "
                        f"(its walsender, pid {c.xmin_holder_pid}): no session here to end; end the long query on the standby, "
                        "or turn hot_standby_feedback off there")
            else:
                said = {"Connections": "no session holds the xmin horizon back: select one in Sessions or Locks",
                        None: "select a session in the Sessions or Locks panel first"}.get(where, f"select a session in {where} first")
            self.app.notify(said, severity="warning")
            return
        if host.backend is None:
            self.app.notify("no database behind this view", severity="warning")
            return
        if not known and snapshot is not None:
            started = next((s.backend_start for s in snapshot.sessions if s.pid == pid), None)
        session = next((s for s in snapshot.sessions if s.pid == pid and s.backend_start == started), None) \
            if snapshot is not None else None
        root = next((b for b in snapshot.blockers if b.pid == pid), None) if snapshot is not None else None
        state = session.state if session is not None else root.state if root is not None else None
        who = describe_session(pid, session, root)
        if session is not None and session.own:
            who += " It is one of queuetop's own monitoring sessions."
        if where == "Connections" and snapshot is not None and snapshot.connections is not None \
                and snapshot.connections.xmin_holder_pid == pid:
            who += " It holds back the xmin horizon (vacuum cannot clean behind it)."
        dialect = dialect_named(snapshot.server.dialect) if snapshot is not None else None
        if not terminate and (state or "").startswith(("idle in transaction", "sleeping, open transaction")):
            # Cancel stops a running query; an idle transaction runs none, and keeps its locks.
            question = (f"{who} It is {state}: cancel cannot end it (it runs no query) and its locks stay. "
                        f"Terminate it instead? Its transaction is rolled back and its connection closed.")
            terminate = True
        elif not terminate and dialect is not None and not dialect.capabilities.cancel_query:
            question = (f"{who} {dialect.label} cannot cancel another session's statement, only end the session. "
                        f"Terminate it instead? Its transaction is rolled back and its connection closed.")
            terminate = True
        else:
            question = (f"Terminate this backend? {who} Its transaction is rolled back and its connection closed."
                        if terminate else f"Cancel this backend's running query? {who}")
        if terminate:
            question += what_ending_releases(snapshot, pid)

        def decided(yes: bool | None) -> None:
            if yes:
                self.app.run_worker(partial(self._signal_backend, host, pid, terminate, started), name="_signal_backend",
                                    group="admin", thread=True)

        self.app.push_screen(ConfirmScreen(question), decided)

    def _signal_backend(self, host: Host, pid: int, terminate: bool, started: datetime | None = None) -> None:
        """Signal the session the dialog named, (pid, started), and say how it went: a pid that
        is another backend's now is refused by the statement that signals (queues/admin.py)."""
        _kind, message, severity = signal_one(host, pid, terminate, started, "shown")
        self._done(host, message, severity)  # type: ignore[arg-type]

    def signal_tagged(self, terminate: bool, sessions: list[SessionSample], confirmed: Callable[[], object] | None = None) -> None:
        """Cancel or terminate every tagged session (Space in the Sessions list), after one
        confirmation that lists them (pid, user, application, state, age, the query's first line).
        Each is then signalled by its identity (pid, backend start), as the selection rule
        requires: a pid that is another backend's now is refused for that one alone. One notice
        sums it up; the notices log (m) has a line per session. `confirmed()`: once confirmed (the
        tags are cleared: what they chose has been acted on)."""
        verb = "terminate" if terminate else "cancel"
        if self.refuse_if_read_only(f"{verb} backends"):
            return
        host = self.hosts.shown
        if host.backend is None:
            self.app.notify("no database behind this view", severity="warning")
            return
        if not sessions:
            self.app.notify("no session tagged (Space tags the selected one)", severity="warning")
            return
        n = len(sessions)
        resting = sum(1 for s in sessions if (s.state or "").startswith(("idle in transaction", "sleeping, open transaction")))
        if terminate:
            question = (f"Terminate these {n} tagged session(s)? Their transactions are rolled back and their connections "
                        "closed; a pid that is another backend's by then is refused for that one.")
        else:
            question = f"Cancel the running query of these {n} tagged session(s)? A pid that is another backend's by then is refused."
            if resting:
                question += f" {resting} of them idle in a transaction: cancel cannot end those (K terminates)."
        items = [tagged_line(s) for s in sessions]

        def decided(yes: bool | None) -> None:
            if yes:
                if confirmed is not None:
                    confirmed()
                self.app.run_worker(partial(self._signal_tagged, host, terminate, sessions), name="_signal_tagged",
                                    group="admin", thread=True)

        self.app.push_screen(ConfirmScreen(question, items), decided)

    def _signal_tagged(self, host: Host, terminate: bool, sessions: list[SessionSample]) -> None:
        """Signal each tagged session by its identity; a line per session, then the summary."""
        done_word = "terminated" if terminate else "cancelled"
        counts: Counter[str] = Counter()
        for s in sessions:
            kind, line, severity = signal_one(host, s.pid, terminate, s.backend_start, "tagged")
            counts[kind] += 1
            if kind == "done":
                line += f" ({fmt.inert(s.application or '-')})"
            self.app.call_from_thread(self.app.notify, line, severity=severity, timeout=2)
        why = [f"{counts[kind]} {words}" for kind, words in (("ended", "had ended"), ("refused", "refused: another backend's pid now"),
                                                              ("failed", "not signalled")) if counts[kind]]
        summary = f"{done_word} {counts['done']} of {len(sessions)} tagged session(s)" + (f": {', '.join(why)}" if why else "")
        self._done(host, summary + " (m: each)", "information" if counts["done"] == len(sessions) else "warning")

    # -- the engine's commands ----------------------------------------------------------------

    def engine(self, binding_id: str, selected: Callable[[str], str | None]) -> None:
        """An engine action: its prompt (its first word the selected row's queue, ring or lease:
        `selected(kind)`), or, for one without a prompt that ends something, a confirmation."""
        spec = next((a for a in ENGINE_ACTIONS if a[0] == binding_id), None)
        if spec is None:
            return
        _id, _key, title, placeholder, default = spec
        if self.refuse_if_read_only(title):
            return
        host = self.hosts.shown
        if host.snapshot is not None and host.snapshot.connected and host.snapshot.server.standby:
            # Found off when the dashboard opened (tui/app.py), or the server became a standby since.
            where = fmt.one_line(host.snapshot.server.label or "this database", 200)
            self.app.notify(f"engine controls are off: {where} is a standby: read-only", severity="warning")
            return
        if host.controls is None:
            if host.prepare is not None:  # off when last looked at (no schema yet): looked at again now
                self.app.run_worker(partial(self._check_engine, host, binding_id, selected), name="_check_engine",
                                    group="engine-check", exclusive=True, thread=True)
                return
            self.app.notify(host.controls_off or "engine controls need a database", severity="warning")
            return

        if placeholder is None:
            question = CONFIRM_FIRST.get(binding_id)
            if question is None:
                self._run(host, binding_id, "")
                return

            def confirmed(yes: bool | None) -> None:
                if yes:
                    self._run(host, binding_id, "")
                else:
                    self.app.notify(f"{title}: nothing done", timeout=3)

            self.app.push_screen(ConfirmScreen(question), confirmed)
            return

        def submitted(text: str | None) -> None:
            if text:
                self._run(host, binding_id, text)

        self.app.push_screen(PromptScreen(title, placeholder, prefill(host.snapshot, binding_id, default or "", selected)),
                             submitted)

    def _check_engine(self, host: Host, binding_id: str, selected: Callable[[str], str | None]) -> None:
        """In a thread: whether the engine can work on the host now (its schema installed since the
        dashboard started, say); then the key goes on as pressed, or says why it cannot."""
        self.hosts.prepare(self.hosts.all.index(host))

        def then() -> None:
            if host.controls is not None:
                if self.hosts.shown is host:  # still the host the key was pressed on
                    self.engine(binding_id, selected)
            else:
                self.app.notify(host.controls_off or "engine controls need a database", severity="warning")

        self.app.call_from_thread(then)

    def _run(self, host: Host, binding_id: str, text: str, create: bool = False) -> None:
        self.app.run_worker(partial(self._run_engine_action, host, binding_id, text, create), name="_run_engine_action",
                            group="engine", thread=True)

    def _run_engine_action(self, host: Host, binding_id: str, text: str, create: bool) -> None:
        try:
            message = run_engine_action(host.controls, binding_id, text, report=self._report_from_thread, create=create)
            severity = "information"
        except MissingQueue as exc:
            self.app.call_from_thread(self._offer_to_create, host, binding_id, text, exc)
            return
        except QueuetopError as exc:
            message, severity = str(exc), "error"
        except Exception as exc:
            message, severity = f"{binding_id} failed: {fmt.one_line(str(exc), 120)}", "error"
        self._done(host, message, severity)  # type: ignore[arg-type]

    def _offer_to_create(self, host: Host, binding_id: str, text: str, missing: MissingQueue) -> None:
        """A prompt named a queue or a ring that does not exist: ask before creating it, the same
        way for both (a typo must not create an empty one); a ring's capacity is asked with it (a
        ring is never resized)."""
        kind, name, snapshot = missing.kind, missing.name, host.snapshot
        known = ([] if snapshot is None else [r.name for r in snapshot.rings] if kind == "ring"
                 else [q.name for q in snapshot.queues if q.source == "reference"])
        question = (f"{kind.capitalize()} {name!r} does not exist. Create it as a new, empty {kind}?"
                    + (f" The engine's {kind}s: {', '.join(known[:6])}{', ...' if len(known) > 6 else ''}." if known else ""))

        def refused() -> None:
            self.app.notify(f"nothing done: no {kind} {name!r}", severity="warning")

        def decided(yes: bool | None) -> None:
            if yes:
                self._run(host, binding_id, text, create=True)
            else:
                refused()

        if kind != "ring":
            self.app.push_screen(ConfirmScreen(question), decided)
            return
        words = text.split()  # RING [COUNT [CAPACITY]]

        def sized(capacity: str | None) -> None:
            if capacity:
                self._run(host, binding_id, " ".join([words[0], words[1] if len(words) > 1 else "1", capacity]), create=True)
            else:
                refused()

        self.app.push_screen(PromptScreen(f"{question} Its capacity, in cells (a ring is never resized):", "CAPACITY",
                                          words[2] if len(words) > 2 else "100"), sized)

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


def signal_one(host: Host, pid: int, terminate: bool, started: datetime | None, chosen: str) -> tuple[str, str, str]:
    """Cancel or terminate one session by its identity (pid, `started`: when its backend started),
    in a worker thread: (done | ended | refused | failed, what to say, its severity). A pid that is
    another backend's now is refused by the statement that signals (queues/admin.py). `chosen`:
    how the operator chose it (the session `shown`, `tagged`)."""
    verb = "terminate" if terminate else "cancel"
    try:
        if host.backend is None:
            raise RuntimeError("no database behind this view")
        done = host.backend.signal_backend(pid, terminate, started) if started is not None \
            else host.backend.signal_backend(pid, terminate)
        why = getattr(done, "why", None)
        if done:
            return "done", f"{'terminated' if terminate else 'cancelled'} backend {pid}", "information"
        if why == "gone":
            return "ended", f"backend {pid} was not signalled: it has ended", "warning"
        if why == "another backend":
            return "refused", (f"refused to {verb} {pid}: that pid belongs to another backend now (started "
                               f"{_clock(getattr(done, 'started', None))}, the session {chosen} started {_clock(started)}): "
                               "the session you chose has ended; nothing done"), "error"
        if why == "start hidden":
            return "refused", (f"refused to {verb} {pid}: this role may not see when its backend started, so it cannot "
                               f"tell it is the session {chosen} (grant pg_read_all_stats); nothing done"), "error"
        return "failed", f"backend {pid} was not signalled (not allowed, or it ended meanwhile)", "warning"
    except Exception as exc:
        return "failed", f"could not signal {pid}: {fmt.one_line(str(exc), 100)}", "error"


def _queue_details(backend, source: str, name: str, current: Callable[[], QueueSample | None] | None = None,
                   hint: Callable[[QueueSample], str | None] | None = None) -> list:
    """The verdict on the queue (as the latest sample has it) at the top, with where its key goes
    (`hint`), then its rows. A queue whose figures are unknown says why first (its declaration names
    a table or column that is not there, a privilege is missing), unless its verdict says it, and its
    rows where they can be read."""
    queue = current() if current is not None else None
    said = queue is not None and queue.diagnosis is not None and queue.error is not None and queue.error in queue.diagnosis.reason
    unknown = ([Text(f"unknown: {fmt.one_line(queue.error, 400)}", style="bold red")]
               if queue is not None and queue.error and queue.depth is None and not said else [])
    try:
        out = queue_renderables(backend.queue_details(source, name))
    except Exception as exc:
        if queue is None or not queue.error:
            raise  # the details screen says it could not load them
        # The server's first line: a lock timeout's LINE n and caret are the probe's SQL, not the operator's.
        out = [Text(f"its rows could not be read: {fmt.one_line(first_line(exc), 200)}", style="red")]
    if queue is None or queue.diagnosis is None:
        return [*unknown, *out]
    return [*unknown, verdict_renderable(queue, hint(queue) if hint is not None else None), *out]


# -- from a queue's verdict to what holds it up (v) -------------------------------------------


@dataclass(frozen=True, slots=True)
class Culprit:
    """Where the verdict's key goes: a panel ("locks", "sessions") and the session's pid there;
    or nowhere (`panel` None), and `said` says
    why, and what would end the holder where no session holds it (a prepared transaction, a
    replication slot). `hint`: the details' line for the key, where it goes."""

    panel: str | None
    pid: int | None
    said: str
    hint: str | None = None
    severity: SeverityLevel = "information"


def sql_literal(text: str) -> str:
    """A name (a gid, a slot's name) as an SQL string literal, for the statement a notice suggests."""
    return "'" + text.replace("'", "''") + "'"


def culprit_of(queue: QueueSample | None, snapshot: Snapshot | None, name: str | None, key: str = "v") -> Culprit:
    """Where `key` on a queue goes, from its verdict and the same sample's lock tree and sessions:
    `blocked`, to the first root blocker the tree shows (diagnosis.pids lists the roots first), or,
    where nobody waits on it yet (a migration's LOCK TABLE on the queue's table, idle in its
    transaction), to that session in Sessions; `bloat` behind a session, to that session (the xmin
    holder), or to the root blocker it waits behind, in Locks. Anything else, a holder with no
    session (a prepared transaction, a replication slot, a standby's feedback), a session no longer
    in the sample: no jump, and why (never an error)."""
    said_name = repr(name) if name else "the selected queue"
    if name is None:
        return Culprit(None, None, f"select a queue in the Queues panel first: {key} goes to what holds it up", severity="warning")
    if queue is None or snapshot is None:
        return Culprit(None, None, f"queue {said_name} is not in the last sample: nothing to go to", severity="warning")
    d = queue.diagnosis
    if d is None:
        return Culprit(None, None, f"queue {said_name} has no verdict (it is judged over a few samples; a recording from "
                       "before verdicts has none): nothing to go to")
    word = fmt.verdict_word(d.code)
    objects = [o for o in d.objects if isinstance(o, str)]
    gids = [o.removeprefix("prepared:") for o in objects if o.startswith("prepared:")]
    slots = [o.removeprefix("slot:") for o in objects if o.startswith("slot:")]
    if d.code == "blocked":
        roots = {b.pid for b in snapshot.blockers}
        pids = [p for p in d.pids if p > 0]  # 0: a prepared transaction, as pg_blocking_pids says it
        root = next((p for p in pids if p in roots), None)
        if root is None:  # a wait cycle has no root: its member the verdict names first
            cycle = {b.pid for b in snapshot.blocked if b.in_cycle}
            root = next((p for p in pids if p in cycle), None)
        if root is not None:
            return Culprit("locks", root, f"{said_name}: root blocker {root} selected",
                           hint=f"{key}: go to the root blocker")
        # Nobody waits on it (yet): the session that holds the queue's table locked, the root the
        # verdict names first, is in Sessions (not a session that waits: that is no root).
        locker = pids[0] if pids else None
        if locker is not None and any(s.pid == locker for s in snapshot.sessions) \
                and not any(b.pid == locker for b in snapshot.blocked):
            return Culprit("sessions", locker, f"{said_name}: session {locker}, which holds its table locked, selected",
                           hint=f"{key}: go to the session that locks its table")
        if gids:
            gid = gids[0]
            return Culprit(None, None, f"queue {said_name} is blocked by prepared transaction {gid!r}, which no session holds: "
                           f"nothing to cancel or terminate; ROLLBACK PREPARED {sql_literal(gid)} ends it (or COMMIT "
                           "PREPARED), run by its owner or a superuser", severity="warning")
        if pids:
            return Culprit(None, None, f"queue {said_name}: its root blocker {pids[0]} is no longer in the lock tree (it "
                           "ended or let go since the verdict): nothing to go to", severity="warning")
        return Culprit(None, None, f"queue {said_name} is blocked, but the verdict names no session: nothing to go to",
                       severity="warning")
    if d.code == "bloat":
        if d.pids:
            holder = d.pids[-1]  # the root blocker it waits behind first, where it waits
            root = d.pids[0] if len(d.pids) > 1 else None
            if root is not None and any(b.pid == root for b in snapshot.blockers):
                return Culprit("locks", root, f"{said_name}: root blocker {root} selected: it holds up {holder}, the "
                               "xmin holder", hint=f"{key}: go to the root blocker behind the xmin holder")
            if any(s.pid == holder for s in snapshot.sessions):
                return Culprit("sessions", holder, f"{said_name}: xmin holder {holder} selected",
                               hint=f"{key}: go to the xmin holder")
            unknown = snapshot.unknown_list("sessions")
            if unknown is not None:
                return Culprit(None, None, f"queue {said_name} bloats behind the xmin horizon of session {holder}, but the "
                               f"sessions are unknown ({fmt.one_line(unknown, 80)}): nothing to go to", severity="warning")
            return Culprit(None, None, f"queue {said_name}: its xmin holder {holder} is no longer in the sessions (it "
                           "ended since the verdict): nothing to go to", severity="warning")
        if gids:
            gid = gids[0]
            return Culprit(None, None, f"queue {said_name} bloats behind prepared transaction {gid!r}, which holds the xmin "
                           f"horizon and no session holds it: ROLLBACK PREPARED {sql_literal(gid)} ends it (or COMMIT "
                           "PREPARED), run by its owner or a superuser", severity="warning")
        standbys = [o.removeprefix("standby:") for o in objects if o.startswith("standby:")]
        if standbys:
            return Culprit(None, None, f"queue {said_name} bloats behind the hot_standby_feedback of standby "
                           f"{standbys[0]!r}, which holds the xmin horizon: no session here to end; end the long query on "
                           "the standby, or set hot_standby_feedback off there (its queries may then be cancelled)",
                           severity="warning")
        if slots:
            slot = slots[0]
            return Culprit(None, None, f"queue {said_name} bloats behind replication slot {slot!r}, which holds the xmin "
                           "horizon (a standby's feedback, or a slot nobody reads): no session to end; let its consumer "
                           f"catch up, or, if it is unused, SELECT pg_drop_replication_slot({sql_literal(slot)})",
                           severity="warning")
        return Culprit(None, None, f"queue {said_name} bloats with autovacuum behind, and no session holds the horizon: "
                       "nothing to go to (VACUUM its table)")
    why = {
        "healthy": "it keeps up",
        "no-consumers": "nobody works its table, so no session holds it up (start consumers)",
        "starved": "its consumers wait in the PgBouncer pool for a server connection, so no session here holds it up "
                   "(the Pooler panel: the pool's server connections are all in use; find what holds them, or raise its pool_size)",
        "failing": "its handlers fail; no session holds it up (Enter shows the dead letters' errors)",
        "saturated": "its consumers are busy and none waits for a lock (more consumers would help)",
        "not-judged": f"not judged ({fmt.one_line(d.reason, 160)})",
    }.get(d.code, "its verdict names no session")
    state = "has nobody on it" if d.code == "no-consumers" else f"is {word}"
    return Culprit(None, None, f"queue {said_name} {state}: {why}; nothing to go to")


def _clock(at: datetime | None) -> str:
    """A backend's start as a dialog says it: the UTC date and time to the microsecond (two
    backends of one pid differ there), or `unknown`."""
    if at is None:
        return "unknown"
    if at.tzinfo is None:  # SQL Server's login_time: the server's local time
        return at.strftime("%Y-%m-%d %H:%M:%S.%f")
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f UTC")


def describe_session(pid: int, session: SessionSample | None, root: Blocker | None = None) -> str:
    """A session as a confirmation names it: pid, user, application, state, how long its
    transaction and query have lasted, and its query's first line (all inert: the database's text)."""
    if session is None and root is None:
        return f"Backend {pid} (not in the last sample: it may have ended)."
    if session is not None:
        parts = [f"Backend {pid}", f"user {session.user or '-'}", f"application {session.application or '-'}",
                 f"state {session.state or '-'}"]
        if session.backend_start is not None:
            parts.append(f"started {_clock(session.backend_start)}")
        if session.xact_age_s is not None:
            parts.append(f"transaction open {fmt.seconds(session.xact_age_s)}")
        if session.query_age_s is not None:
            parts.append(f"{'query running' if session.state == 'active' else 'in this state'} {fmt.seconds(session.query_age_s)}")
        query = session.query
    else:
        assert root is not None
        parts = [f"Backend {pid}", f"application {root.application or '-'}", f"state {root.state or '-'}"]
        if root.xact_age_s is not None:
            parts.append(f"transaction open {fmt.seconds(root.xact_age_s)}")
        query = root.query
    return fmt.inert(", ".join(parts) + ". Query: " + _query_line(query, 200) + ".")


def _query_line(query: str | None, limit: int) -> str:
    """A query's first non-blank line, on one line of at most `limit` characters; `-` for none."""
    first = next((line.strip() for line in (query or "").splitlines() if line.strip()), "")
    return fmt.one_line(first, limit) if first else "-"


def tagged_line(s: SessionSample) -> str:
    """A tagged session as the confirmation lists it, on one line: pid, user, application,
    state, how long (tui/filters.py's duration), the query's first line."""
    age = session_duration(s)
    return fmt.inert(f"{s.pid}  {s.user or '-'}  {s.application or '-'}  {s.state or '-'}  "
                     f"{fmt.seconds(age) if age is not None else '-'}  {_query_line(s.query, 80)}")


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
    source, _, name = (selected_key(table) or "").partition(":")
    return name if source == "reference" else None


def selected_key(table: DataTable) -> str | None:
    """The key of the row under a table's cursor (a ring's or a lease's is its name), if any."""
    if not table.row_count or table.cursor_row is None:
        return None
    key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
    return None if key is None or key == UNKNOWN_KEY else str(key)


def prefill(snapshot: Snapshot | None, binding_id: str, default: str, selected: Callable[[str], str | None]) -> str:
    """A prompt's first word names what exists: the selected row's queue, ring or lease
    (`selected(kind)`), else the first of the engine's queues, the first ring, the first lease
    but the relays'; the rest of the default stays."""
    words = default.split()
    if not words or snapshot is None:
        return default
    kind = binding_id.split(".")[0]
    name = None
    if kind in ("producer", "consumers", "burst", "blocker"):
        engine_queues = [q.name for q in snapshot.queues if q.source == "reference"]
        name = selected("queue") or (engine_queues[0] if engine_queues else None)
    elif kind == "ring" and snapshot.rings:
        name = selected("ring") or snapshot.rings[0].name
    elif kind == "lease" and snapshot.leases:
        name = selected("lease") or next((lease.name for lease in snapshot.leases if lease.name != "outbox-relay"),
                                         snapshot.leases[0].name)
    # Only a name the prompt can show as it is and take back whole: one word, nothing escaped.
    if name and fmt.inert(name) == name and len(name.split()) == 1:
        return " ".join([name, *words[1:]])
    return default
