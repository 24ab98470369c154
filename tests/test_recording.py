"""Record and replay: `queuetop record` writes what the probes saw as compressed JSON lines,
`snapshot --from FILE --at TIME` prints a recorded instant, and `queuetop replay` opens the
dashboard on the recording with no database. A real workload is recorded for 10 s, replayed
headless with Pilot, sought and stepped through, and compared against the recording; the Leases
countdown runs on the recorded clock."""

from __future__ import annotations

import gzip
import itertools
import json
import os
import signal
import stat
import subprocess
import sys
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from textual.widgets import Input, Tree

from dbcore.errors import UsageError
from probes.model import LeaseSample, Snapshot, utc_text
from probes.recording import Recorder, Recording, recording_files
from queues.table_queue import TableQueue
from tui.app import replay_app
from tui.dashboard import HostBar, StatusBar
from tui.sample import sample_snapshot
from tui.screens.dialogs import PromptScreen
from tui.widgets.panels import ConnectionsPanel, LocksPanel

from .conftest import REPO, wait_until
from .test_tui import panel_rows, queue_rows, sample_app, settle


def _hosted(snapshot: Snapshot, host: str, seconds: float = 0.0) -> Snapshot:
    return replace(snapshot, taken_at=snapshot.taken_at + timedelta(seconds=seconds), extra={**snapshot.extra, "host": host})


# -- the file ----------------------------------------------------------------------------------


def test_a_recording_reads_back_exactly_what_was_written_per_host(tmp_path):
    path = tmp_path / "r.jsonl.gz"
    recorder = Recorder(path)
    written = [_hosted(sample_snapshot(step=n), host, n * 2 + (0.5 if host == "b" else 0)) for n in range(5) for host in "ab"]
    for snapshot in written:
        recorder.write(snapshot)
    recorder.close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # a snapshot carries queries
    recording = Recording(path)
    assert recording.hosts == ["a", "b"] and not recording.truncated
    for host in "ab":
        track = recording.tracks[host]
        assert [track.snapshot(i) for i in range(len(track.times))] == [s for s in written if s.extra["host"] == host]
        # A replay holds every line, deflated: a long recording must not take its JSON's size in memory.
        held, whole = sum(map(len, track.lines)), sum(len(track.line(i)) for i in range(len(track.times)))
        assert held * 3 < whole
    assert recording.start == written[0].taken_at and recording.end == written[-1].taken_at
    # What is in force at a time: each host's latest at or before it.
    at = recording.at(written[4].taken_at + timedelta(seconds=0.1))
    assert at == {"a": written[4], "b": written[3]}
    # Read for its times only (snapshot --from), the same instant comes from a second pass.
    light = Recording(path, keep_lines=False)
    assert not any(track.lines for track in light.tracks.values())
    assert light.at(written[4].taken_at + timedelta(seconds=0.1)) == at


def test_a_size_limit_rotates_keeping_as_many_as_asked(tmp_path):
    path = tmp_path / "r.jsonl.gz"
    snapshots = [_hosted(sample_snapshot(step=n, queues=40), "a", n) for n in range(60)]
    recorder = Recorder(path, max_bytes=6_000, keep=3)
    for snapshot in snapshots:
        recorder.write(snapshot)
    recorder.close()
    files = recording_files(path)
    assert files == [path.with_name("r.jsonl.gz.3"), path.with_name("r.jsonl.gz.2"), path.with_name("r.jsonl.gz.1"), path]
    assert all(f.stat().st_size < 6_000 + 8_000 for f in files)  # rotated once past the limit
    recording = Recording(path)
    kept = recording.tracks["a"].times
    assert kept == [s.taken_at for s in snapshots[-len(kept):]]  # the newest, in order, none missing
    assert len(kept) < len(snapshots)  # the oldest rotated away (keep=3)


def _killed_copy(path: Path, count: int) -> bytes:
    """The bytes of a recording by an earlier version (one gzip member, fully flushed after each
    line) whose recorder was killed after `count` snapshots: no trailer."""
    import io
    import zlib

    raw = io.BytesIO()
    writer = gzip.GzipFile(fileobj=raw, mode="wb", mtime=0)
    for n in range(count):
        writer.write((json.dumps(_hosted(sample_snapshot(step=n), "a", n).to_json(), separators=(",", ":")) + "\n").encode())
        writer.flush(zlib.Z_FULL_FLUSH)
    path.write_bytes(raw.getvalue())
    return raw.getvalue()


def test_recording_again_into_a_file_cut_short_keeps_both(tmp_path):
    path = tmp_path / "r.jsonl.gz"
    cut = _killed_copy(tmp_path / "first.gz", 3)
    path.write_bytes(cut)
    recorder = Recorder(path)  # the earlier recording becomes r.jsonl.gz.1
    for n in range(3, 5):
        recorder.write(_hosted(sample_snapshot(step=n), "a", n))
    recorder.close()
    assert recording_files(path) == [path.with_name("r.jsonl.gz.1"), path]
    recording = Recording(path)
    assert len(recording.tracks["a"].times) == 5 and recording.truncated


def test_a_member_cut_short_followed_by_another_is_read_past(tmp_path):
    """What appending used to make: a member without its end, then a whole one."""
    path = tmp_path / "r.jsonl.gz"
    whole = tmp_path / "whole.gz"
    recorder = Recorder(whole)
    for n in range(10, 13):
        recorder.write(_hosted(sample_snapshot(step=n), "a", n))
    recorder.close()
    path.write_bytes(_killed_copy(tmp_path / "first.gz", 3) + whole.read_bytes())
    recording = Recording(path)
    times = recording.tracks["a"].times
    assert len(times) == 6 and recording.truncated
    assert recording.tracks["a"].snapshot(5) == _hosted(sample_snapshot(step=12), "a", 12)


def test_a_symbolic_link_is_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    path = tmp_path / "r.jsonl.gz"
    path.symlink_to(victim)
    with pytest.raises(UsageError, match="is a symbolic link"):
        Recorder(path)
    assert victim.read_text() == "precious\n" and path.is_symlink()


def test_a_recorder_killed_mid_run_leaves_a_readable_recording(db, tmp_path):
    path = tmp_path / "killed.jsonl.gz"
    proc = subprocess.Popen([sys.executable, "-m", "tui", "record", str(path), "--dsn", db.dsn, "--interval", "0.2"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: path.exists() and _readable_count(path) >= 3, timeout=30, what="three snapshots written")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    recording = Recording(path)  # no gzip trailer: what was flushed is read, the rest is not an error
    (host,) = recording.hosts
    assert len(recording.tracks[host].times) >= 3
    assert recording.tracks[host].snapshot(0).server.database == db.name


def _readable_count(path: Path) -> int:
    try:
        recording = Recording(path)
    except UsageError:
        return 0
    return sum(len(t.times) for t in recording.tracks.values())


def test_a_file_that_is_not_a_recording_is_one_line(cli, tmp_path):
    for name, content in (("plain.txt", b"hello\n"), ("other.gz", gzip.compress(b'{"a": 1}\n'))):
        (tmp_path / name).write_bytes(content)
        result = cli("snapshot", "--from", str(tmp_path / name), "--json")
        assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
        assert "not a queuetop recording" in result.stderr
    result = cli("snapshot", "--from", str(tmp_path / "missing.gz"))
    assert result.returncode == 2 and result.stderr.startswith("queuetop: error: no recording at ")
    result = cli("replay", str(tmp_path / "missing.gz"))
    assert result.returncode == 2 and result.stderr.startswith("queuetop: error: no recording at ")


def test_times_of_a_recording(tmp_path):
    path = tmp_path / "r.jsonl.gz"
    recorder = Recorder(path)
    for n in range(3):
        recorder.write(_hosted(sample_snapshot(step=0), "a", n * 60))  # 12:00, 12:01, 12:02 UTC
    recorder.close()
    recording = Recording(path)
    start = recording.start
    assert recording.instant("+90") == start + timedelta(seconds=90)
    assert recording.instant("12:01") == start + timedelta(minutes=1)
    assert recording.instant("12:01:30") == start + timedelta(seconds=90)
    assert recording.instant("2026-11-21T12:01:00Z") == recording.instant("2026-11-21 13:01:00+01:00")
    assert recording.instant("2026-11-21T12:01:00") == start + timedelta(minutes=1)  # no zone: UTC
    assert recording.instant("12:01:59.9999999") == start + timedelta(minutes=1, seconds=59.9999999)
    for bad in ("11:59", "12:03", "yesterday", "25:00", "+-3", "+99999999999999", "12:00:60"):
        with pytest.raises(UsageError):
            recording.instant(bad)


# -- record and read back from the command line ----------------------------------------------------


@pytest.fixture(scope="module")
def workload_recording(tmp_path_factory, pg_server):
    """10 s of a real workload, recorded by `queuetop record`: a queue being worked off, a lease."""
    from .conftest import make_database

    db = make_database(pg_server, "recorded")
    with db.connect() as conn:
        queue = TableQueue.create(conn, "rec_jobs")
        queue.enqueue_batch(conn, [json.dumps({"n": n}) for n in range(4000)])
    path = tmp_path_factory.mktemp("rec") / "incident.jsonl.gz"
    worker = subprocess.Popen([sys.executable, "-m", "tui", "engine", "work", "rec_jobs", "--dsn", db.dsn, "--workers", "2",
                               "--handler", "sleep:0.004", "--duration", "60"], cwd=REPO, stdout=subprocess.DEVNULL)
    try:
        result = subprocess.run([sys.executable, "-m", "tui", "record", str(path), "--dsn", db.dsn, "--duration", "10",
                                 "--interval", "0.5"], cwd=REPO, capture_output=True, text=True, timeout=120,
                                env={k: v for k, v in os.environ.items() if k != "QUEUETOP_DSN"})
    finally:
        worker.kill()
        worker.wait(10)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["file"] == str(path) and summary["snapshots"] >= 15 and summary["files"] == [str(path)]
    return path, db


def _depth(snapshot: Snapshot, name: str = "rec_jobs") -> int:
    return next(q.depth for q in snapshot.queues if q.name == name)


def _read(track) -> list[int]:
    """The recorded instants whose queues probe answered: under load one may have failed (its
    statement timeout), and its snapshot says the queues are unknown rather than hold none."""
    return [i for i in range(len(track.times)) if track.snapshot(i).probes["queues"].error is None]


def _shown(snapshot: Snapshot, name: str = "rec_jobs") -> str:
    """The depth as the Queues panel shows it (~ when the probe estimated it)."""
    q = next(q for q in snapshot.queues if q.name == name)
    return ("~" if q.depth_is_estimate else "") + f"{q.depth:,}"


def test_the_recording_saw_the_workload(workload_recording):
    path, _db = workload_recording
    recording = Recording(path)
    (host,) = recording.hosts
    track = recording.tracks[host]
    read = _read(track)
    assert len(read) >= 12, f"the queues probe answered {len(read)} times of {len(track.times)}"
    for i in set(range(len(track.times))) - set(read):  # unknown, and said so: never an empty list passed off as none
        # (its probe unread, or no answer from the server at all: the snapshot says it is out)
        missed = track.snapshot(i)
        assert missed.unknown_list("queues") is not None and missed.to_json()["queues"] is None, missed.probes["queues"]
    depths = [_depth(track.snapshot(i)) for i in read]
    assert depths[0] > depths[-1] and depths == sorted(depths, reverse=True)  # worked off, never refilled
    assert (recording.end - recording.start).total_seconds() >= 8


def test_snapshot_from_a_recording_prints_the_instant_in_force(cli, workload_recording):
    path, _db = workload_recording
    recording = Recording(path)
    (host,) = recording.hosts
    track = recording.tracks[host]
    middle = track.times[len(track.times) // 2]
    result = cli("snapshot", "--from", str(path), "--at", middle.isoformat(), "--json")
    assert result.returncode == 0, result.stderr
    (line,) = result.json_lines()
    assert line == json.loads(track.line(len(track.times) // 2))  # exactly the recorded line
    result = cli("snapshot", "--from", str(path), "--at", "+4", "--json")
    (line,) = result.json_lines()
    assert Snapshot.from_json(line) == recording.at(recording.start + timedelta(seconds=4))[host]
    result = cli("snapshot", "--from", str(path), "--at", "+4")  # the readable report, from the recording
    assert result.returncode == 0 and "rec_jobs" in result.stdout
    result = cli("snapshot", "--from", str(path), "--at", "+999")
    assert result.returncode == 2 and "is not in the recording" in result.stderr
    result = cli("snapshot", "--from", str(path), "--dsn", "host=x")
    assert result.returncode == 2 and "--from reads a recording" in result.stderr
    result = cli("snapshot", "--at", "+1", "--dsn", "host=x")
    assert result.returncode == 2 and "give --from FILE" in result.stderr


async def test_replay_headless_seek_and_step_match_the_recording(workload_recording):
    path, _db = workload_recording
    recording = Recording(path)
    (host,) = recording.hosts
    track = recording.tracks[host]
    app = replay_app(recording, playing=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, app, lambda: app.snapshot == track.snapshot(0), "the first instant", 500)
        read = _read(track)
        if read[0] == 0:
            await settle(pilot, app, lambda: "reference:rec_jobs" in queue_rows(app), "the first instant's queue", 500)
            assert queue_rows(app)["reference:rec_jobs"][1] == _shown(track.snapshot(0))
        assert not app.query(HostBar)  # one recorded host
        assert "REPLAY ⏸" in str(app.query_one(StatusBar).render())

        # Go to a time through the prompt, as an operator would.
        # An instant whose neighbours were read too (the queues probe can fail a round under load).
        target = next(i for i in read[len(read) * 2 // 3:] + read[::-1] if {i - 1, i, i + 1} <= set(read) and i > 0)
        await pilot.press("t")
        assert isinstance(app.screen, PromptScreen)
        app.screen.query_one(Input).value = track.times[target].isoformat()
        await pilot.press("enter")
        expected = track.snapshot(target)
        await settle(pilot, app, lambda: queue_rows(app)["reference:rec_jobs"][1] == _shown(expected), "the sought instant")
        assert app.snapshot == expected

        # Step forward and back, one recorded snapshot at a time.
        await pilot.press("full_stop")
        await settle(pilot, app, lambda: app.snapshot == track.snapshot(target + 1), "the next instant")
        await pilot.press("comma")
        await pilot.press("comma")
        await settle(pilot, app, lambda: app.snapshot == track.snapshot(target - 1), "two back")
        assert queue_rows(app)["reference:rec_jobs"][1] == _shown(track.snapshot(target - 1))

        # A time outside the recording is refused, and nothing moves.
        await pilot.press("t")
        app.screen.query_one(Input).value = "+9999"
        await pilot.press("enter")
        await settle(pilot, app, lambda: any("not in the recording" in text for _a, _s, text in app.notices), "the refusal")
        assert app.snapshot == track.snapshot(target - 1)

        # Played at x8, it reaches the end and stops there.
        await pilot.press("plus", "plus", "plus")
        assert app.replay.speed == 8
        await pilot.press("p")
        await settle(pilot, app, lambda: app.snapshot == track.snapshot(len(track.times) - 1), "the end", 1000)
        await settle(pilot, app, lambda: not app.replay.playing, "stopped at the end")

        # Nothing that writes: no engine controls, no recording of a recording.
        await pilot.press("b")
        assert any("no database" in text or "read-only" in text for _a, _s, text in app.notices)
        assert app.check_action("record", ()) is False


async def test_the_leases_countdown_runs_on_the_recorded_clock(tmp_path):
    """A lease with 60 s left at 12:00:00, and the next snapshot 100 s later: sought to 12:00:20
    it shows 40 s left, and stays there while the replay is paused, however long real time runs."""
    base = sample_snapshot(step=0)
    lease = LeaseSample(name="relay", holder="relay-1", token=7, expires_in_s=60.0, state="held")
    path = tmp_path / "lease.jsonl.gz"
    recorder = Recorder(path)
    recorder.write(_hosted(replace(base, leases=(lease,)), "a"))
    recorder.write(_hosted(replace(base, leases=(replace(lease, expires_in_s=-40.0, state="expired"),)), "a", 100))
    recorder.close()
    recording = Recording(path)
    app = replay_app(recording, playing=False, at=recording.start + timedelta(seconds=20))
    async with app.run_test(size=(100, 30)) as pilot:
        def ttl() -> str:
            return str(panel_rows(app, type(app.query_one("#leases"))).get("relay", ("",) * 5)[4])

        await settle(pilot, app, lambda: ttl() == "40.0s", "40 s left at 12:00:20", 500)
        started = time.monotonic()
        await settle(pilot, app, lambda: time.monotonic() - started > 1.6, "real time passing")  # two countdown ticks
        assert ttl() == "40.0s"  # a countdown on time.monotonic() would read 38.4s
        app.replay.seek(recording.start + timedelta(seconds=59))
        await settle(pilot, app, lambda: ttl() == "1.0s", "1 s left at 12:00:59", 500)
        app.replay.seek(recording.start + timedelta(seconds=61))
        await settle(pilot, app, lambda: ttl() == "expired", "expired, on the recorded clock", 500)  # never a bare -1.0s


async def test_a_host_shows_nothing_before_its_recording_begins(tmp_path):
    """Host b's recording begins 10 s after a's. At the start its tab says so (not a later
    snapshot); sought past its first snapshot it shows it; sought back before, its panels empty
    again instead of keeping the later figures under an earlier time."""
    path = tmp_path / "late.jsonl.gz"
    recorder = Recorder(path)
    for n in range(3):
        recorder.write(_hosted(sample_snapshot(step=n), "a", n * 5))
    late = _hosted(sample_snapshot(step=3), "b", 10)
    recorder.write(late)
    recorder.close()
    recording = Recording(path)
    app = replay_app(recording, playing=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, app, lambda: app.hosts[0].snapshot is not None and app.hosts[1].snapshot is not None, "both tabs")
        assert "2 b not yet" in str(app.query_one(HostBar).render())
        await pilot.press("2")
        status = str(app.query_one(StatusBar).render())
        assert "not recorded yet" in status and "(from " + utc_text(late.taken_at) + ")" in status
        assert queue_rows(app) == {} and panel_rows(app, ConnectionsPanel) == {}
        assert str(app.query_one(LocksPanel).query_one(Tree).root.label) == "locks not sampled"  # not "no blocked sessions"
        app.replay.seek(late.taken_at)
        await settle(pilot, app, lambda: app.snapshot == late, "b's first snapshot", 500)
        assert queue_rows(app) and panel_rows(app, ConnectionsPanel)
        assert "not recorded yet" not in str(app.query_one(StatusBar).render())
        app.replay.seek(recording.start + timedelta(seconds=2))
        await settle(pilot, app, lambda: queue_rows(app) == {}, "b's panels emptied again", 500)
        assert panel_rows(app, ConnectionsPanel) == {} and app.snapshot != late
        assert "not recorded yet" in str(app.query_one(StatusBar).render())
        await pilot.press("1")  # a's tab, at the same time: its snapshot of 0 s
        await settle(pilot, app, lambda: app.snapshot == recording.at(recording.start)["a"], "a's first", 500)


async def test_r_records_what_the_dashboard_receives(tmp_path):
    snapshots = [_hosted(sample_snapshot(step=n), "sample", n) for n in range(3)]
    app = sample_app(snapshots=snapshots, record_dir=tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, app, lambda: app.snapshot is not None, "a sample")
        await pilot.press("R")
        assert app.recorder is not None and "REC" in str(app.query_one(StatusBar).render())
        for _ in range(2):
            await pilot.press("r")  # refresh: the sample source hands out its next snapshot
        await settle(pilot, app, lambda: app.recorder is not None and app.recorder.snapshots >= 3, "the one kept and two recorded")
        path = app.recorder.path
        await pilot.press("R")
        assert app.recorder is None and any(f"queuetop replay {path}" in text for _a, _s, text in app.notices)
    recording = Recording(path)
    track = recording.tracks["sample"]
    # The flight recorder's first (issue 47): the snapshot received before R, then those after it.
    assert [track.snapshot(i) for i in range(len(track.times))] == snapshots[:len(track.times)] and len(track.times) == 3


def test_a_recording_that_cannot_be_written_stops_with_one_line(db, tmp_path):
    """A file size limit (RLIMIT_FSIZE) makes a write fail as a full disk does: the recording
    stops, says so in one line, exits 1, and what was written before stays readable."""
    import resource

    path = tmp_path / "capped.jsonl.gz"

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (6_000, 6_000))

    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "tui", "record", str(path), "--dsn", db.dsn, "--interval", "0.2",
                             "--duration", "60", "--max-size", "1"], cwd=REPO, capture_output=True, text=True,
                            timeout=60, preexec_fn=cap)
    assert result.returncode == 1 and time.monotonic() - started < 45
    errors = [line for line in result.stderr.splitlines() if line.startswith("queuetop: error: ")]
    assert len(errors) == 1 and errors[0].endswith(": File too large"), result.stderr
    written = int(errors[0].split("recording stopped after ")[1].split()[0])
    assert written >= 1 and len(Recording(path).tracks[f"local/{db.name}"].times) == written
    # Cut back to the last whole snapshot: valid gzip, each line a whole snapshot.
    check = subprocess.run(["gzip", "-t", str(path)], capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stderr
    with gzip.open(path) as f:
        assert [json.loads(line)["host"] for line in f] == [f"local/{db.name}"] * written


def test_recording_into_something_that_is_not_a_file_is_refused(cli, db, tmp_path):
    for target in ("/dev/null", str(tmp_path)):
        result = cli("record", target, "--dsn", db.dsn, "--duration", "1")
        assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
    assert Path("/dev/null").is_char_device()


def test_one_snapshot_a_round_of_probes_however_the_scheduler_starts_them(db, tmp_path):
    """Issue 31: `record --duration 12 --interval 5` wrote its last two snapshots 10 ms apart. The
    scheduler starts a round's probes one after another; a fast one that ended before the last
    began made a snapshot, and the round's end another. Now a round is one snapshot."""
    path = tmp_path / "rounds.jsonl.gz"
    result = subprocess.run([sys.executable, "-m", "tui", "record", str(path), "--dsn", db.dsn, "--duration", "4.6",
                             "--interval", "1.5"], cwd=REPO, capture_output=True, text=True, timeout=120,
                            env={k: v for k, v in os.environ.items() if k != "QUEUETOP_DSN"})
    assert result.returncode == 0, result.stderr
    times = Recording(path).tracks[f"local/{db.name}"].times
    gaps = [(later - earlier).total_seconds() for earlier, later in itertools.pairwise(times)]
    assert 3 <= len(times) <= 4 and all(gap >= 0.75 for gap in gaps), gaps
