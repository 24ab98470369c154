"""Recording (R: every host's snapshots to a file, starting with what the flight recorder kept in
memory) and replaying one (queuetop replay FILE: step, go to a time, play and pause, change the
speed). No widget and no app here: the app routes its keys to these and shows what they return."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path

from platformdirs import user_data_dir
from textual.binding import Binding, BindingType
from textual.notifications import SeverityLevel

from dbcore.errors import QueuetopError, UsageError
from probes.flight import FlightRecorder, size_text, span_text
from probes.model import Snapshot
from probes.recorder import encode_member
from probes.recording import Recorder, ReplayClock

from .. import format as fmt
from ..screens.dialogs import PromptScreen

RECORD_BINDINGS: list[BindingType] = [
    # The help says the config's bounds and what is kept now (record_description).
    Binding("R", "record", "Record to a file, starting with the last 15 min kept in memory (again: stop)", id="record",
            show=False),
    # A recording (queuetop replay): step through its instants, go to a time.
    Binding("full_stop", "step(1)", "Step", id="replay.step", key_display="."),
    Binding("comma", "step(-1)", "Step back", id="replay.back", key_display=",", show=False),
    Binding("t", "seek", "Go to time", id="replay.seek"),
]

Notice = tuple[str, SeverityLevel]


def record_description(flight: FlightRecorder | None) -> str:
    """The help's line for R: the flight recorder's bounds, and what it holds now (fewer minutes
    than asked where the memory bound is reached first)."""
    if flight is None:
        return "Record to a file (again: stop)"
    if not flight.enabled:
        return f"Record to a file from now: {flight.describe()} (again: stop)"
    kept = flight.kept()
    # To the minute under one (the help's picture is the same however fast the test runs).
    span = span_text(kept.span_s) if kept.span_s >= 60 else "under a minute"
    now = f"now {span}, {kept.snapshots:,} snapshot(s), {size_text(kept.bytes)}"
    if (bound := flight.bound_note()) is not None:
        now += f": {bound} at this size"
    return f"Record to a file, starting with {flight.describe()} ({now}) (again: stop)"


class LiveRecording:
    """R: start or stop recording every host's snapshots (queuetop replay FILE plays them), the
    flight recorder's first: what it kept of the last minutes, oldest first."""

    def __init__(self, directory: Path | None = None, flight: FlightRecorder | None = None) -> None:
        self.directory = directory  # where R records to (default: the user's data dir)
        self.recorder: Recorder | None = None
        self.flight = flight  # None in a replay: a recording is not kept again
        # A snapshot is kept and written in one step, and R takes the history and starts the file
        # in one step: no snapshot is lost or written twice between the two.
        self._lock = threading.Lock()

    def toggle(self) -> Notice:
        with self._lock:
            if self.recorder is not None:
                recorder, self.recorder = self.recorder, None
                recorder.close()
                return (f"recording stopped: {recorder.snapshots} snapshot(s) in {recorder.path} "
                        f"(queuetop replay {recorder.path})", "information")
            directory = self.directory or Path(user_data_dir("queuetop")) / "recordings"
            try:
                directory.mkdir(parents=True, exist_ok=True)
                recorder = Recorder(directory / f"queuetop-{datetime.now(UTC):%Y%m%d-%H%M%S}.jsonl.gz")
            except (OSError, QueuetopError) as exc:
                return f"cannot record: {fmt.one_line(str(exc), 150)}", "error"
            flight = self.flight
            if flight is None or not flight.enabled:
                self.recorder = recorder
                return f"recording to {recorder.path} from now (no history kept in memory); R stops", "information"
            members, kept = flight.taken()
            try:
                for member in members:  # written as they were kept: nothing compressed again
                    recorder.write_member(member)
            except OSError as exc:  # a full disk: the file holds what fitted, and nothing follows
                return (f"cannot record: {recorder.snapshots} of {kept.snapshots} kept snapshot(s) saved in "
                        f"{recorder.path}: {exc.strerror or exc}", "error")
            self.recorder = recorder
        history = f"{span_text(kept.span_s)} kept before now ({kept.snapshots:,} snapshot(s), {size_text(kept.bytes)})" \
            if kept.snapshots else "nothing kept before now yet"
        if (bound := flight.bound_note()) is not None:
            history += f"; {bound}"
        return f"recording to {recorder.path}: {history}; R stops", "information"

    def write(self, snapshot: Snapshot) -> str | None:
        """Keep a snapshot in the flight recorder and record it if R runs (from a sampler's
        thread: compressed here, once for both); what to say if the recording stopped."""
        flight = self.flight
        keeping = flight is not None and flight.enabled
        if self.recorder is None and not keeping:
            return None  # nothing asks for it: not even encoded
        member = encode_member(snapshot)  # outside the lock: the hosts' threads compress side by side
        with self._lock:
            if keeping:
                assert flight is not None
                flight.keep(member)
            recorder = self.recorder
            if recorder is None:
                return None
            try:
                recorder.write_member(member)
            except OSError as exc:  # a full disk: say so once (the recorder closed itself), the dashboard goes on
                self.recorder = None
                return f"recording stopped after {recorder.snapshots} snapshot(s) in {recorder.path}: {exc.strerror or exc}"
        return None

    def close(self) -> None:
        with self._lock:
            if self.recorder is not None:
                self.recorder.close()


def toggle_play(clock: ReplayClock) -> None:
    """p on a recording: play or pause it (its snapshots still arrive when stepped)."""
    if clock.playing:
        clock.pause()
    else:
        clock.resume()


def seek_prompt(clock: ReplayClock) -> PromptScreen:
    """t: ask for a time of the recording (the answer goes to `seek`)."""
    recording = clock.recording
    return PromptScreen(
        f"Go to a time of the recording ({fmt.utc(recording.start)} to {fmt.utc(recording.end)})",
        "HH:MM[:SS] (UTC), ISO-8601, or +SECONDS from the start", fmt.utc(clock.now())[11:19])


def seek(clock: ReplayClock, text: str) -> str | None:
    """Go to the time `text` names; what is wrong with it, if anything."""
    try:
        when = clock.recording.instant(text)
    except UsageError as exc:
        return str(exc)
    clock.seek(when)
    return None
