"""Recording (R: every host's snapshots to a file) and replaying one (queuetop replay FILE: step,
go to a time, play and pause, change the speed). No widget and no app here: the app routes its
keys to these and shows what they return."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from platformdirs import user_data_dir
from textual.binding import Binding, BindingType
from textual.notifications import SeverityLevel

from dbcore.errors import QueuetopError, UsageError
from probes.model import Snapshot
from probes.recording import Recorder, ReplayClock

from .. import format as fmt
from ..screens.dialogs import PromptScreen

RECORD_BINDINGS: list[BindingType] = [
    Binding("R", "record", "Record to a file (again: stop)", id="record", show=False),
    # A recording (queuetop replay): step through its instants, go to a time.
    Binding("full_stop", "step(1)", "Step", id="replay.step", key_display="."),
    Binding("comma", "step(-1)", "Step back", id="replay.back", key_display=",", show=False),
    Binding("t", "seek", "Go to time", id="replay.seek"),
]

Notice = tuple[str, SeverityLevel]


class LiveRecording:
    """R: start or stop recording every host's snapshots (queuetop replay FILE plays them)."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory  # where R records to (default: the user's data dir)
        self.recorder: Recorder | None = None

    def toggle(self) -> Notice:
        if self.recorder is not None:
            recorder, self.recorder = self.recorder, None
            recorder.close()
            return (f"recording stopped: {recorder.snapshots} snapshot(s) in {recorder.path} "
                    f"(queuetop replay {recorder.path})", "information")
        directory = self.directory or Path(user_data_dir("queuetop")) / "recordings"
        try:
            directory.mkdir(parents=True, exist_ok=True)
            self.recorder = Recorder(directory / f"queuetop-{datetime.now(UTC):%Y%m%d-%H%M%S}.jsonl.gz")
        except (OSError, QueuetopError) as exc:
            return f"cannot record: {fmt.one_line(str(exc), 150)}", "error"
        return f"recording to {self.recorder.path}; R stops", "information"

    def write(self, snapshot: Snapshot) -> str | None:
        """Record a snapshot (from a sampler's thread); what to say if the recording stopped."""
        recorder = self.recorder
        if recorder is None:
            return None
        try:
            recorder.write(snapshot)
        except OSError as exc:  # a full disk: say so once (the recorder closed itself), the dashboard goes on
            self.recorder = None
            return f"recording stopped after {recorder.snapshots} snapshot(s) in {recorder.path}: {exc.strerror or exc}"
        return None

    def close(self) -> None:
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
