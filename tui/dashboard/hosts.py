"""The databases the dashboard watches, a tab each: what a host is, the list of them and the one
shown, their keys, and what the host bar and the Hosts screen (H) say of each. No widget here:
the app owns a `Hosts` and hands it to the bars and the actions."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any, ClassVar, Protocol

from rich.text import Text
from textual.binding import Binding, BindingType

from probes.model import QueueSample, Snapshot
from probes.recording import first_recorded_at
from probes.sampler import stop_all
from probes.sources import QueueDetails

from .. import format as fmt

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
    # A session is (pid, started): when its backend started; None: the pid alone.
    def session_details(self, pid: int, started: datetime | None = None) -> dict: ...
    # Truthy when signalled (queues.admin.Signalled: else `why` it was not).
    def signal_backend(self, pid: int, terminate: bool, started: datetime | None = None) -> Any: ...



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


# Several databases (--dsn repeated, or the config's [[targets]]): a tab each.
HOST_BINDINGS: list[BindingType] = [
    Binding("right_square_bracket", "host(-1)", "Next host", id="host.next", key_display="]"),
    Binding("left_square_bracket", "host(-2)", "Previous host", id="host.previous", key_display="[", show=False),
    Binding("H", "hosts", "Hosts", id="hosts", show=False),
    *[Binding(str(n), f"host({n - 1})", f"Host {n}", id=f"host.{n}", show=False) for n in range(1, 10)],
]


class Hosts:
    """Every host, in its tab's order, and the one shown. Each host's source is built here with a
    sink that names the host (`sink(index, snapshot)`, called from the source's thread)."""

    SWITCHES: ClassVar[dict[int, int]] = {-1: 1, -2: -1}  # host(-1): the next; host(-2): the previous

    def __init__(self, specs: Sequence[HostSpec], sink: Callable[[int, Snapshot], None]) -> None:
        self.all = [Host(**vars(spec), source=spec.source_factory(partial(sink, index))) for index, spec in enumerate(specs)]
        self.current = 0  # the host shown

    def __len__(self) -> int:
        return len(self.all)

    def __iter__(self) -> Iterator[Host]:
        return iter(self.all)

    @property
    def shown(self) -> Host:
        return self.all[self.current]

    def select(self, index: int) -> bool:
        """Show host `index` (from 0), or the next (-1) or previous (-2); False if nothing changes."""
        if len(self.all) < 2:
            return False
        if index in self.SWITCHES:
            index = (self.current + self.SWITCHES[index]) % len(self.all)
        if not 0 <= index < len(self.all) or index == self.current:
            return False
        self.current = index
        return True

    def pause(self, paused: bool) -> None:
        """Pause every host's sampling, or resume it with a sample at once."""
        for host in self.all:
            if paused:
                host.source.pause()
            else:
                host.source.resume()
                host.source.refresh_now()

    def refresh(self) -> None:
        for host in self.all:
            host.source.refresh_now()

    def step_interval(self, step: int) -> float:
        """Every host sampled at the next longer (+1) or shorter (-1) of INTERVALS; returns it."""
        current = self.shown.source.interval_s
        index = min(range(len(INTERVALS)), key=lambda i: abs(INTERVALS[i] - current))
        new = INTERVALS[max(0, min(len(INTERVALS) - 1, index + step))]
        for host in self.all:
            host.source.set_interval(new)
        return new

    def prepare(self, index: int) -> None:
        """Find host `index`'s engine controls (in a thread: a host that is down must not hold up the others)."""
        host = self.all[index]
        assert host.prepare is not None
        try:
            controls, off = host.prepare()
        except Exception as exc:  # the host is down, or refuses: its panels still show what the probes see
            controls, off = None, f"engine controls are off: {fmt.one_line(str(exc), 200)}"
        host.controls, host.controls_off = controls, off

    def stop(self) -> None:
        # Each host's sampler waits for its running probes and closes its pool: all at once, so
        # that several hosts that are down do not add up their timeouts at quit.
        stop_all(host.source for host in self.all)
        for host in self.all:
            if host.demo is not None:
                host.demo.stop()  # type: ignore[attr-defined]
            elif host.controls is not None and hasattr(host.controls, "stop_all"):
                host.controls.stop_all()

    @staticmethod
    def keep(host: Host, snapshot: Snapshot) -> None:
        host.snapshot = snapshot
        host.arrivals += 1
        if snapshot.connected:
            host.shown, host.last_good_at = snapshot, snapshot.taken_at


# What a connection attempt is told when no server runs where the target points: its socket file
# is missing (`queuetop server stop`, or the wrong directory), or nothing listens on its port.
NOT_RUNNING = ("No such file or directory", "Connection refused")


def server_stopped(snapshot: Snapshot) -> bool:
    """True when the host is down because no server runs there (rather than refusing this role,
    timing out, ...): the bars say so plainly instead of an errno's words."""
    reason = str(snapshot.extra.get("connection_error") or "")
    return not snapshot.connected and any(cause in reason for cause in NOT_RUNNING)


def worst_queue(snapshot: Snapshot) -> QueueSample | None:
    """The queue whose oldest claimable message is oldest (None when no queue has one)."""
    aged = [q for q in snapshot.queues if q.oldest_ready_age_s is not None]
    return max(aged, key=lambda q: q.oldest_ready_age_s or 0.0) if aged else None


def hosts_text(hosts: Sequence[Host], current: int, width: int) -> Text:
    """The host bar: each host's number, name and worst news, the shown one highlighted; each
    part whole or left out (the hosts' numbers and names first)."""
    parts: list[tuple[str, str, int]] = []
    for index, host in enumerate(hosts):
        base = "reverse bold" if index == current else "bold"
        parts.append((" " if index else "", "", 0))
        parts.append((f"{index + 1} {host.name}", base, 0))
        s = host.snapshot
        if s is None:
            parts.append((" …", "dim", 2))
        elif first_recorded_at(s) is not None:
            parts.append((" not yet", "dim", 2))  # a replay before this host's recording begins
        elif not s.connected:
            parts.append((" STOPPED" if server_stopped(s) else " DOWN", "bold white on red", 0))
        else:
            blocked = len(s.blocked)
            locks_unknown = s.unknown_list("blocked") is not None  # never "ok" for what was not seen
            worst = worst_queue(s)
            if blocked:
                parts.append((f" {blocked} blocked", "bold red", 1))
            elif locks_unknown:
                parts.append((" locks unknown", "bold yellow", 1))
            if worst is not None and worst.oldest_ready_age_s is not None:
                age = worst.oldest_ready_age_s
                parts.append((f" {fmt.seconds(age)}", "yellow" if age >= 60 else "", 3))
            elif not blocked and not locks_unknown and s.unknown_list("queues") is None:
                parts.append((" ok", "green", 3))
        parts.append((" │" if index < len(hosts) - 1 else "", "dim", 0))
    return fmt.fit_by_priority(parts, max(width, 20))


def host_line(index: int, host: Host) -> tuple[str, ...]:
    """A line of the Hosts screen (H): what the host bar says of the host, and more."""
    s = host.snapshot
    if s is None:
        return (str(index + 1), host.name, "…", "", "", "", "", "", "", "waiting for its first sample")
    first = first_recorded_at(s)
    if first is not None:
        return (str(index + 1), host.name, "-", "", "", "", "", "", "", f"not recorded before {first}")
    sampled = f"{s.taken_at:%H:%M:%S}"
    if not s.connected:
        since = f"; its figures are of {host.last_good_at:%H:%M:%S}" if host.last_good_at else ""
        if server_stopped(s):
            return (str(index + 1), host.name, "STOPPED", "", "", "", "", "", sampled,
                    f"the server is not running: nothing answers at {s.server.label or host.name}{since}")
        return (str(index + 1), host.name, "DOWN", "", "", "", "", "", sampled,
                f"{fmt.one_line(str(s.extra.get('connection_error')), 300)}{since}")
    worst = worst_queue(s)
    c = s.connections
    sessions = fmt.sessions(c.total, c.max) if c is not None else ""
    notes = [f"{name}: {fmt.one_line(said, 200)}" for name, p in s.probes.items() for said in (p.error, p.notes) if said]
    # What the locks probe could not read is unknown, not 0 (its reason is in the notes).
    blocked, roots = ("unknown", "unknown") if s.unknown_list("blocked") else (f"{len(s.blocked):,}", f"{len(s.blockers):,}")
    return (str(index + 1), host.name, "LIVE", worst.name if worst else "", fmt.seconds(worst.oldest_ready_age_s) if worst else "",
            blocked, roots, sessions, sampled, "; ".join(notes))
