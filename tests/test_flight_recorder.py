"""The flight recorder (issue 47, point 5): the dashboard keeps the last minutes of every host's
snapshots in memory, compressed, within an age and a memory bound (both in the config and the
help); R saves them, then what follows, into one file whose replay starts before R was pressed.
And `record --retain`, a time window on disk."""

from __future__ import annotations

import gzip
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from dbcore.errors import UsageError
from probes.config import load_config, parse_config
from probes.flight import MB, FlightRecorder, span_text
from probes.recorder import RETAIN_SEGMENTS, encode_member
from probes.recording import Recording, parse_line, recording_files
from tui.app import replay_app
from tui.dashboard.replay import LiveRecording, record_description
from tui.sample import sample_snapshot
from tui.screens.dialogs import HelpScreen

from .conftest import REPO, wait_until
from .test_tui import sample_app, settle


def _hosted(snapshot, host: str, seconds: float = 0.0):
    return replace(snapshot, taken_at=snapshot.taken_at + timedelta(seconds=seconds), extra={**snapshot.extra, "host": host})


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _member(n: int, size: int = 300) -> bytes:
    return n.to_bytes(4, "big") + bytes(size - 4)


def _numbers(flight: FlightRecorder) -> list[int]:
    members, _kept = flight.taken()
    return [int.from_bytes(m[:4], "big") for m in members]


def test_the_memory_bound_drops_the_oldest_exactly():
    clock = Clock()
    flight = FlightRecorder(minutes=15, mb=1024 / MB, clock=clock)  # 1,024 bytes
    assert flight.max_bytes == 1024
    for n in range(3):
        flight.keep(_member(n))
    assert _numbers(flight) == [0, 1, 2] and flight.kept().bytes == 900 and not flight.bytes_bound_hit
    flight.keep(_member(3))  # 1,200 bytes: the oldest goes, and only it
    assert _numbers(flight) == [1, 2, 3] and flight.kept().bytes == 900
    assert flight.evicted_by_bytes == 1 and flight.bytes_bound_hit
    flight.keep(_member(4, size=1000))  # 1,600: three go to make room for it
    assert _numbers(flight) == [4] and flight.kept().bytes == 1000
    flight.keep(_member(5, size=2000))  # larger than the bound by itself: nothing is kept
    assert _numbers(flight) == [] and flight.kept() .bytes == 0


def test_the_age_bound_drops_what_is_older_than_the_window_exactly():
    clock = Clock()
    flight = FlightRecorder(minutes=1, mb=50, clock=clock)
    for n in range(8):  # at 0, 10, ..., 70 s
        flight.keep(_member(n))
        clock.now += 10
    clock.now -= 10  # now: when the last was kept (70 s)
    assert _numbers(flight) == [1, 2, 3, 4, 5, 6, 7]  # 0 s is older than 60 s; 10 s is exactly 60 s old: kept
    kept = flight.kept()
    assert (kept.snapshots, kept.bytes, kept.span_s) == (7, 2100, 60.0)
    clock.now += 0.5
    assert _numbers(flight) == [2, 3, 4, 5, 6, 7]  # time alone drops them, no new snapshot needed
    clock.now += 3600
    assert flight.kept() == type(kept)(snapshots=0, bytes=0, span_s=0.0)
    assert flight.evicted_by_bytes == 0


def test_zero_turns_it_off():
    for flight in (FlightRecorder(minutes=0), FlightRecorder(mb=0)):
        assert not flight.enabled and flight.add(sample_snapshot()) is None and flight.kept().snapshots == 0
        assert "no history is kept" in record_description(flight)


def test_a_member_is_the_recording_s_own_line():
    snapshot = _hosted(sample_snapshot(step=3), "a")
    flight = FlightRecorder()
    member = flight.add(snapshot)
    assert member is not None and flight.taken()[0] == [member]
    assert member == encode_member(snapshot)  # what the Recorder writes, byte for byte
    assert parse_line(gzip.decompress(member)) == snapshot


def test_many_threads_keep_every_snapshot_once():
    """Eight sampler threads at once: every member is kept once, and the count and bytes agree."""
    flight = FlightRecorder(minutes=60, mb=1000)
    threads = [threading.Thread(target=lambda t=t: [flight.keep(_member(t * 1000 + n, 100 + t)) for n in range(500)])
               for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    numbers = _numbers(flight)
    assert sorted(numbers) == sorted(t * 1000 + n for t in range(8) for n in range(500))
    for t in range(8):  # each thread's in its own order
        assert [n for n in numbers if n // 1000 == t] == [t * 1000 + n for n in range(500)]
    assert flight.kept().bytes == sum(500 * (100 + t) for t in range(8))


def test_r_while_the_hosts_threads_write_loses_and_doubles_nothing(tmp_path):
    """R taken while four hosts' threads deliver snapshots: every snapshot is in the file once,
    those before R from the flight recorder, those after written as they come."""
    recording = LiveRecording(tmp_path, FlightRecorder(minutes=60, mb=1000))
    base = sample_snapshot()
    started = threading.Barrier(5)

    def host(name: str) -> None:
        started.wait()
        for n in range(40):
            recording.write(_hosted(base, name, n))

    threads = [threading.Thread(target=host, args=(f"h{t}",)) for t in range(4)]
    for thread in threads:
        thread.start()
    started.wait()
    wait_until(lambda: recording.flight.kept().snapshots >= 20, timeout=30, what="some snapshots kept")
    said, severity = recording.toggle()
    assert severity == "information" and "kept before now" in said
    for thread in threads:
        thread.join()
    recording.toggle()
    (path,) = tmp_path.iterdir()
    read = Recording(path)
    assert sorted(read.hosts) == ["h0", "h1", "h2", "h3"]
    for name in read.hosts:
        assert read.tracks[name].times == [base.taken_at + timedelta(seconds=n) for n in range(40)], name


async def test_r_saves_what_was_kept_before_it_and_the_replay_starts_there(tmp_path):
    snapshots = [sample_snapshot(step=n) for n in range(6)]  # a second apart
    app = sample_app(snapshots=snapshots, record_dir=tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, app, lambda: app.snapshot is not None, "the first sample")
        for n in (1, 2):
            await pilot.press("r")
            await settle(pilot, app, lambda n=n: app.snapshot.taken_at == snapshots[n].taken_at, f"sample {n}")
        pressed_at = app.snapshot.taken_at
        await pilot.press("R")
        said = [text for _at, _sev, text in app.notices if text.startswith("recording to ")]
        assert len(said) == 1 and "s kept before now (3 snapshot(s), " in said[0] and said[0].endswith("; R stops"), said
        assert app.recorder is not None and app.recorder.snapshots == 3
        for n in (3, 4):
            await pilot.press("r")
            await settle(pilot, app, lambda n=n: app.snapshot.taken_at == snapshots[n].taken_at, f"sample {n}")
        path = app.recorder.path
        await pilot.press("R")
        assert app.recorder is None
        assert any(text.startswith("recording stopped: 5 snapshot(s)") for _a, _s, text in app.notices)
    recording = Recording(path)
    (host,) = recording.hosts
    assert recording.tracks[host].times == [s.taken_at for s in snapshots[:5]]
    assert recording.start < pressed_at  # the replay starts before R was pressed
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    # Replayed, the flight recorder is off: a recording is not kept again, nor recorded.
    replayed = replay_app(recording, playing=False)
    assert replayed.live_recording.flight is None
    async with replayed.run_test(size=(100, 30)) as pilot:
        await settle(pilot, replayed, lambda: replayed.snapshot is not None, "the replay's first sample")
        assert replayed.snapshot.taken_at == snapshots[0].taken_at
        assert replayed.check_action("record", ()) is False


async def test_the_help_says_the_bounds_and_what_is_kept(tmp_path):
    app = sample_app(record_dir=tmp_path, flight_minutes=10, flight_mb=20)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, app, lambda: app.snapshot is not None, "the first sample")
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        (line,) = [said for _key, said, binding_id in app.screen._keys if binding_id == "record"]
        assert line.startswith("Record to a file, starting with the last 10 min (at most 20 MB) kept in memory "
                               "(now under a minute, 1 snapshot(s), ")
        assert line.endswith("(again: stop)")


def test_the_memory_bound_reached_says_fewer_minutes_are_kept(tmp_path):
    snapshot = sample_snapshot()
    size = len(encode_member(snapshot))
    flight = FlightRecorder(minutes=15, mb=2.5 * size / MB)  # room for two
    recording = LiveRecording(tmp_path, flight)
    for n in range(4):
        recording.write(replace(snapshot, taken_at=snapshot.taken_at + timedelta(seconds=n)))
    assert "bound keeps less than 15 min at this size" in record_description(flight)
    said, _severity = recording.toggle()
    assert "(2 snapshot(s), " in said and "bound keeps less than 15 min; R stops" in said
    recording.toggle()


def test_span_text():
    assert [span_text(s) for s in (0, 59.9, 60, 872, 3725)] == ["0s", "59s", "1m00s", "14m32s", "1h02m"]


# -- the config ---------------------------------------------------------------------------------

def test_the_config_sets_the_bounds():
    config = parse_config({"dashboard": {"flight_minutes": 5, "flight_mb": 12.5}})
    assert (config.flight_minutes, config.flight_mb) == (5.0, 12.5)
    assert (parse_config({}).flight_minutes, parse_config({}).flight_mb) == (15.0, 50.0)
    assert parse_config({"dashboard": {"flight_minutes": 0}}).flight_minutes == 0.0


@pytest.mark.parametrize("table, says", [
    ({"flight_minutes": -1}, "dashboard.flight_minutes must be a number of minutes from 0 (off) to 1440"),
    ({"flight_minutes": 1441}, "dashboard.flight_minutes must be"),
    ({"flight_minutes": True}, "dashboard.flight_minutes must be"),
    ({"flight_mb": "50"}, "dashboard.flight_mb must be a number of megabytes from 0 (off) to 4096"),
    ({"flight_mb": float("nan")}, "dashboard.flight_mb must be"),
    ({"flight_size": 3}, "[dashboard]: unknown key(s) flight_size; the keys are flight_minutes, flight_mb"),
])
def test_bad_bounds_are_refused_in_one_line(table, says):
    with pytest.raises(UsageError) as refused:
        parse_config({"dashboard": table})
    assert says in str(refused.value) and "\n" not in str(refused.value)


def test_a_bad_bound_stops_the_command_with_one_line(cli, tmp_path):
    config = tmp_path / "c.toml"
    config.write_text("[dashboard]\nflight_mb = -3\n")
    with pytest.raises(UsageError):
        load_config(config)
    result = cli("record", str(tmp_path / "r.gz"), "--config", str(config), "--dsn", "postgresql://nowhere.invalid/x")
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "dashboard.flight_mb must be a number of megabytes from 0 (off) to 4096" in result.stderr


# -- bench tui -----------------------------------------------------------------------------------

def test_bench_tui_measures_the_flight_recorder(cli):
    result = cli("bench", "tui", "--json", "--sessions", "40", "--queues", "5", "--snapshots", "3", "--idle-seconds", "0.2",
                 "--warm-up", "0", "--pileup", "0")
    assert result.returncode == 0, result.stderr
    (report,) = result.json_lines()
    one = len(encode_member(sample_snapshot(queues=5, sessions=40, tree_depth=8)))
    assert abs(report["flight_bytes_per_snapshot"] - one) <= one // 10
    assert report["flight_ms_per_snapshot_p50"] > 0 and 0 < report["flight_gzip_ms_p50"] <= report["flight_ms_per_snapshot_p50"]
    assert report["flight_snapshots_15_min_at_2s"] == 450
    assert report["flight_mb_15_min_at_2s"] == round(450 * report["flight_bytes_per_snapshot"] / MB, 2) or \
        abs(report["flight_mb_15_min_at_2s"] - 450 * report["flight_bytes_per_snapshot"] / MB) < 0.02
    # Measured: the members are the memory (each bytes object's header is a few dozen bytes more).
    assert report["flight_mb_15_min_at_2s"] <= report["flight_measured_mb_15_min_at_2s"] <= report["flight_mb_15_min_at_2s"] * 1.1 + 0.1
    assert report["flight_minutes_in_default_mb"] == 15.0  # a small snapshot: 15 min fit in 50 MB


# -- record --retain: a time window on disk ------------------------------------------------------

@pytest.mark.parametrize("value, says", [("5x", "is not a duration"), ("0", "must be between 1s and 366d"),
                                         ("400d", "must be between 1s and 366d"), ("-3m", "is not a duration")])
def test_a_bad_retain_is_one_line(cli, tmp_path, value, says):
    result = cli("record", str(tmp_path / "r.gz"), f"--retain={value}")
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and says in result.stderr, result.stderr
    assert not (tmp_path / "r.gz").exists()


def test_record_retain_keeps_the_window_and_drops_what_is_older(db, tmp_path):
    """A 4 s window, a sample every 0.1 s: once older files have been dropped, what is on disk is
    the last 4 s and at most a segment (0.5 s) more, with every snapshot inside the window."""
    window, segment, interval = 4.0, 4.0 / RETAIN_SEGMENTS, 0.1
    path = tmp_path / "w.jsonl.gz"
    proc = subprocess.Popen([sys.executable, "-m", "tui", "record", str(path), "--dsn", db.dsn, "--interval", str(interval),
                             "--retain", "4s"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={k: v for k, v in os.environ.items() if k != "QUEUETOP_DSN"})
    first: list = []

    def dropped() -> bool:
        """The first snapshot recorded is no longer on disk, and the window is (read back)."""
        times = _times(path)
        if not times:
            return False
        if not first:
            first.append(times[0])
        return times[0] > first[0] and (times[-1] - times[0]).total_seconds() >= window
    try:
        wait_until(dropped, timeout=90, interval=0.2, what="the oldest snapshots dropped, the window on disk")
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    summary = json.loads(out)
    assert summary["retain_s"] == window and summary["files_dropped"] >= 1
    times = _times(path)
    assert summary["snapshots"] > len(times)  # some were dropped ...
    held = (times[-1] - times[0]).total_seconds()
    # ... none older than the window and a segment (and a quarter of one between looks, and a sample's lateness),
    assert held <= window + segment + segment / 4 + 0.5, (held, [str(p) for p in recording_files(path)])
    # ... and the window is all there: it reaches back the whole window, with no hole in it.
    assert held >= window, held
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(times)]
    assert max(gaps) < 1.0, max(gaps)  # a sample every 0.1 s: a busy machine may delay one, never lose a file's worth
    for each in recording_files(path):
        assert oct(each.stat().st_mode & 0o777) == "0o600"


def _times(path: Path) -> list:
    """The recorded instants on disk now (empty while the files change under the read)."""
    try:
        recording = Recording(path)
    except (UsageError, OSError):
        return []
    return [t for host in recording.hosts for t in recording.tracks[host].times]
