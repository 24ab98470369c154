"""Recordings that are damaged, of the wrong shape or not recordings at all: `snapshot --from`
and `replay` take what they can with one warning line, or refuse with one error line (exit 2),
never a traceback; and a recording stays valid gzip, holding every snapshot written before, when
the disk fills under it (a real full tmpfs, or a real file size limit)."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import textwrap
import time
import zlib
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dbcore.errors import UsageError
from probes.model import ShapeError, Snapshot, utc_text
from probes.recording import Damage, Recorder, Recording, read_lines
from tui.cli import main
from tui.report import render
from tui.sample import sample_snapshot

from .conftest import BAD_INPUTS, REPO


def _hosted(snapshot: Snapshot, host: str, seconds: float = 0.0) -> Snapshot:
    return replace(snapshot, taken_at=snapshot.taken_at + timedelta(seconds=seconds), extra={**snapshot.extra, "host": host})


BASE = [_hosted(sample_snapshot(step=n), "a", n * 10) for n in range(4)]  # 12:00:00, :10, :20, :30 UTC


def _enc(document: object) -> bytes:
    return (json.dumps(document, separators=(",", ":")) + "\n").encode()


def _doc(k: int) -> dict:
    return json.loads(_enc(BASE[k].to_json()))


def _write(path: Path, lines: list[bytes]) -> Path:
    """A recording as `queuetop record` writes it: a gzip member per line."""
    path.write_bytes(b"".join(gzip.compress(line, mtime=0) for line in lines))
    return path


def _with(k: int, change) -> bytes:
    document = _doc(k)
    change(document)
    return _enc(document)


def _set(key, value):
    return lambda d: d.__setitem__(key, value)


def _queue(key, value):
    return lambda d: d["queues"][0].__setitem__(key, value)


def _deep(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


# Lines that are no snapshot, each at the time of BASE[2] where it has one.
BAD: dict[str, object] = {
    "queues null": _set("queues", None),
    "queues a string": _set("queues", "q1,q2"),
    "queues an object": _set("queues", {"name": "q1"}),
    "depth a string": _queue("depth", "12"),
    "depth NaN": _queue("depth", math.nan),
    "depth a float": _queue("depth", 1.5),
    "depth huge": _queue("depth", 10**400),
    "depth true": _queue("depth", True),
    "server missing": lambda d: d.pop("server"),
    "a queue's name missing": lambda d: d["queues"][0].pop("name"),
    "probes a list": _set("probes", []),
    "connections a string": _set("connections", "none"),
    "blocked_by a string": lambda d: d["blocked"][0].__setitem__("blocked_by", "12"),
    "a vacuum time malformed": _queue("last_vacuum_at", "last tuesday"),
    "taken_at malformed": _set("taken_at", "2026-13-45T99:00:00Z"),
    "taken_at a number": _set("taken_at", 5),
    "host a number": _set("host", 5),
    "connected a string": _set("connected", "yes"),
    "a lone surrogate": _queue("name", "\ud800"),
    "extra nested 40 deep": _set("deep", json.loads(_deep(40))),
    "a JSON array": b"[1,2,3]\n",
    "a number": b"42\n",
    "null": b"null\n",
    "an empty line": b"\n",
    "not JSON": None,  # the line cut in the middle
    "not UTF-8": None,
    "5,000 nested arrays": _deep(5000) + b"\n",
    "5,000 nested arrays in a snapshot": None,
}


def _bad_line(name: str, k: int = 2) -> bytes:
    change = BAD[name]
    if isinstance(change, bytes):
        return change
    if name == "not JSON":
        return _enc(BASE[k].to_json())[:300] + b"\n"
    if name == "not UTF-8":
        return _enc(BASE[k].to_json()).replace(b'"reference"', b'"\xff\xfe"', 1)
    if name == "5,000 nested arrays in a snapshot":
        line = _enc(BASE[k].to_json())
        return line[:-2] + b',"deep":' + _deep(5000) + b"}\n"
    assert callable(change)
    return _with(k, change)


# Odd but of the model's shape: read as they are.
ACCEPTED: dict[str, object] = {
    "depth negative": _queue("depth", -5),
    "depth 2**100": _queue("depth", 2**100),
    "an age NaN": _queue("oldest_ready_age_s", math.nan),
    "an age infinite": _queue("oldest_ready_age_s", math.inf),
    "an unknown key": _set("added_later", {"a": [1, {"b": None}]}),
}


def _cli(*argv: str, capsys) -> tuple[int, str, list[str]]:
    """The real entry point, in this process: exit code, stdout, stderr's lines."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err.splitlines()


def _iso(k: int) -> str:
    return BASE[k].taken_at.isoformat()


# -- a line of the wrong shape ------------------------------------------------------------------


@pytest.mark.parametrize("name", list(BAD))
def test_a_bad_line_is_skipped_with_one_warning_and_the_rest_is_read(name, tmp_path, capsys):
    BAD_INPUTS["recording lines tried"] += 1
    bad = _bad_line(name)
    path = _write(tmp_path / "r.gz", [_enc(BASE[0].to_json()), _enc(BASE[1].to_json()), bad, _enc(BASE[2 + 1].to_json())])
    # `snapshot --from` at the bad line's time: the snapshot before it, and one warning line.
    code, out, err = _cli("snapshot", "--from", str(path), "--at", _iso(2), "--json", capsys=capsys)
    assert code == 0, err
    assert [json.loads(line) for line in out.splitlines()] == [json.loads(_enc(BASE[1].to_json()))]
    assert len(err) == 1 and err[0].startswith("queuetop: warning: "), err
    assert ": 1 " in err[0] and ("line 3 of" in err[0] or f"host a at {utc_text(BASE[2].taken_at)}: " in err[0]), err[0]
    # The rest of the recording is read.
    code, out, err = _cli("snapshot", "--from", str(path), "--json", capsys=capsys)
    assert code == 0 and Snapshot.from_json(json.loads(out)) == BASE[3]
    # The loader replay uses: whole snapshots only, the bad line passed over.
    recording = Recording(path)
    assert recording.hosts == ["a"] and recording.at(BASE[2].taken_at) == {"a": BASE[1]}
    assert recording.at(BASE[3].taken_at) == {"a": BASE[3]}
    BAD_INPUTS["recording lines handled cleanly"] += 1


@pytest.mark.parametrize("name", list(BAD))
def test_a_file_of_bad_lines_only_is_one_error_line(name, tmp_path, capsys):
    path = _write(tmp_path / "r.gz", [_bad_line(name, 0), _bad_line(name, 1)])
    code, out, err = _cli("snapshot", "--from", str(path), capsys=capsys)
    assert code == 2 and not out
    assert len(err) == 1 and err[0].startswith("queuetop: error: ") and "no readable snapshot" in err[0], err
    with pytest.raises(UsageError, match="no readable snapshot"):
        Recording(path)


@pytest.mark.parametrize("name", ["queues null", "depth a string", "not UTF-8", "5,000 nested arrays in a snapshot"])
def test_a_bad_first_line_is_skipped(name, tmp_path, capsys):
    path = _write(tmp_path / "r.gz", [_bad_line(name, 0)] + [_enc(s.to_json()) for s in BASE[1:]])
    recording = Recording(path)
    assert recording.start == BASE[1].taken_at and recording.damage.lines == 1
    code, out, err = _cli("snapshot", "--from", str(path), "--at", _iso(1), "--json", capsys=capsys)
    assert code == 0 and Snapshot.from_json(json.loads(out)) == BASE[1]
    assert len(err) == 1 and "line 1 of" in err[0], err


@pytest.mark.parametrize("name", list(ACCEPTED))
def test_odd_values_of_the_right_shape_are_read_as_they_are(name, tmp_path, capsys):
    change = ACCEPTED[name]
    assert callable(change)
    line = _with(2, change)
    path = _write(tmp_path / "r.gz", [_enc(BASE[0].to_json()), line])
    code, out, err = _cli("snapshot", "--from", str(path), "--at", _iso(2), "--json", capsys=capsys)
    assert code == 0 and not err, err
    assert Snapshot.from_json(json.loads(out)) == Snapshot.from_json(json.loads(line)) != BASE[2]
    code, out, err = _cli("snapshot", "--from", str(path), "--at", _iso(2), capsys=capsys)  # the readable report
    assert code == 0 and not err and BASE[2].queues[0].name in out


def test_a_later_version_refuses_the_file_and_a_line_of_one_is_skipped(tmp_path, capsys):
    path = _write(tmp_path / "r.gz", [_with(0, _set("version", 2)), _enc(BASE[1].to_json())])
    code, _out, err = _cli("snapshot", "--from", str(path), capsys=capsys)
    assert code == 2 and len(err) == 1 and "snapshot version 2: this queuetop reads version 1" in err[0]
    path = _write(tmp_path / "r.gz", [_enc(BASE[0].to_json()), _with(1, _set("version", 2)), _enc(BASE[2].to_json())])
    code, out, err = _cli("snapshot", "--from", str(path), "--at", _iso(1), "--json", capsys=capsys)
    assert code == 0 and Snapshot.from_json(json.loads(out)) == BASE[0]
    assert len(err) == 1 and "line 2 of" in err[0] and "snapshot version 2 among version 1" in err[0], err


# -- what is no recording -----------------------------------------------------------------------


def test_what_is_no_recording_is_one_error_line(tmp_path, capsys):
    cases = {
        "empty": tmp_path / "empty.gz",
        "not gzip": tmp_path / "plain.txt",
        "gzip of no snapshot": tmp_path / "other.gz",
        "a directory": tmp_path / "dir",
        "a device": Path("/dev/zero"),
        "a link to a device": tmp_path / "zero.gz",
        "missing": tmp_path / "missing.gz",
    }
    cases["empty"].write_bytes(b"")
    cases["not gzip"].write_bytes(b"hello\n")
    cases["gzip of no snapshot"].write_bytes(gzip.compress(b'{"a": 1}\n'))
    cases["a directory"].mkdir()
    cases["a link to a device"].symlink_to("/dev/zero")
    for name, path in cases.items():
        for argv in (["snapshot", "--from", str(path)], ["snapshot", "--from", str(path), "--at", "+0", "--json"]):
            started = time.monotonic()
            code, out, err = _cli(*argv, capsys=capsys)
            assert code == 2 and not out and time.monotonic() - started < 10, (name, err)
            assert len(err) == 1 and err[0].startswith("queuetop: error: ") and "Traceback" not in err[0], (name, err)


def test_replay_and_snapshot_refuse_a_fifo_a_device_a_directory_without_hanging(tmp_path):
    """The real command, in a process of its own (a FIFO opened for reading blocks without a writer)."""
    fifo = tmp_path / "fifo.gz"
    os.mkfifo(fifo)
    bad = _write(tmp_path / "bad.gz", [_bad_line("queues null", 0), _deep(5000) + b"\n"])
    script = textwrap.dedent(f"""
        import contextlib, io, json, sys
        from tui.cli import main
        results = []
        for argv in {[["replay", str(p)] for p in (fifo, "/dev/zero", tmp_path, bad)]
                     + [["snapshot", "--from", str(fifo), "--json"]]!r}:
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                code = main(argv)
            results.append((argv, code, err.getvalue()))
        print(json.dumps(results))
    """)
    # The replay's log file (warnings while the dashboard runs) goes under the test's directory.
    env = {**{k: v for k, v in os.environ.items() if k != "QUEUETOP_DSN"}, "XDG_STATE_HOME": str(tmp_path / "state")}
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    for argv, code, err in json.loads(result.stdout):
        lines = err.splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith("queuetop: error: "), (argv, err)
    # And once through `python -m tui` itself: a FIFO, exit 2, one line, no traceback.
    result = subprocess.run([sys.executable, "-m", "tui", "replay", str(fifo)], cwd=REPO, capture_output=True, text=True,
                            timeout=60, env=env)
    assert result.returncode == 2 and result.stderr.splitlines() == [
        f"queuetop: error: {fifo} is a FIFO: a recording is a file `queuetop record` wrote"]


# -- damaged gzip ------------------------------------------------------------------------------


def _recorded(path: Path, count: int = 5) -> list[Snapshot]:
    recorder = Recorder(path)
    written = [_hosted(sample_snapshot(step=n), "a", n) for n in range(count)]
    for snapshot in written:
        recorder.write(snapshot)
    recorder.close()
    return written


def _members(data: bytes) -> list[int]:
    """Where each gzip member of a recording ends."""
    ends, position = [], 0
    while position < len(data):
        inflate = zlib.decompressobj(wbits=31)
        inflate.decompress(data[position:])
        position = len(data) - len(inflate.unused_data)
        ends.append(position)
    return ends


def _read(data: bytes, tmp: Path) -> tuple[list[Snapshot], Damage]:
    path = tmp / "cut.gz"
    path.write_bytes(data)
    damage = Damage()
    return [Snapshot.from_json(json.loads(line)) for line in read_lines(path, damage)], damage


def test_a_recording_cut_anywhere_keeps_every_whole_snapshot_before_the_cut(tmp_path):
    """A crash mid-write: at the first and last 24 bytes of the last snapshot and every fifth byte
    between (its header, its data, its trailer), and at 150 places before it."""
    whole = tmp_path / "whole.gz"
    written = _recorded(whole)
    data = whole.read_bytes()
    ends = _members(data)
    assert len(ends) == len(written) and ends[-1] == len(data)
    last = range(ends[-2], len(data))
    cuts = [*last[:24], *last[24:-24:5], *last[-24:], *random.Random(7).sample(range(1, ends[-2]), 150)]
    for cut in cuts:
        snapshots, damage = _read(data[:cut], tmp_path)
        whole = sum(1 for end in ends if end <= cut)
        # The snapshots of the whole members, and the next one if its line was inflated whole (cut
        # within the 8-byte trailer or the end of the data: what a crash cuts is never wrong).
        assert snapshots == written[:len(snapshots)] and whole <= len(snapshots) <= whole + 1, cut
        assert len(snapshots) == whole or cut >= ends[whole] - 12, cut
        assert bool(damage.incomplete) == (len(snapshots) == whole and cut not in ends), cut  # a snapshot lost
        BAD_INPUTS["recordings cut short"] += 1
    # Through the command: the snapshots before the cut, and a warning that the last is incomplete.
    (tmp_path / "r.gz").write_bytes(data[:ends[-2] + 40])
    result = subprocess.run([sys.executable, "-m", "tui", "snapshot", "--from", str(tmp_path / "r.gz"), "--json"],
                            cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and Snapshot.from_json(json.loads(result.stdout)) == written[-2]
    assert len(result.stderr.splitlines()) == 1 and "incomplete last snapshot" in result.stderr


def test_damaged_bytes_lose_their_snapshot_and_never_give_a_wrong_one(tmp_path):
    """A byte changed anywhere (300 places): every snapshot read is one that was written, in
    order (each member's checksum is checked before its line is given), and few are lost."""
    whole = tmp_path / "whole.gz"
    written = _recorded(whole)
    data = whole.read_bytes()
    rng = random.Random(11)
    for offset in rng.sample(range(len(data)), 300):
        damaged = bytearray(data)
        damaged[offset] ^= 1 << rng.randrange(8)
        try:
            snapshots, _damage = _read(bytes(damaged), tmp_path)
        except UsageError:  # the first member's magic changed: not gzip
            assert offset < 3
            continue
        positions = [written.index(s) for s in snapshots]
        assert positions == sorted(positions) and len(snapshots) >= len(written) - 2, offset
        BAD_INPUTS["recordings damaged"] += 1


def test_a_recording_by_an_earlier_version_and_a_recorder_killed_mid_member_read_back(tmp_path):
    """The old format (one member, flushed per line, no trailer) then today's, in one file."""
    raw = io.BytesIO()
    writer = gzip.GzipFile(fileobj=raw, mode="wb", mtime=0)
    for snapshot in BASE[:2]:
        writer.write(_enc(snapshot.to_json()))
        writer.flush(zlib.Z_FULL_FLUSH)
    path = tmp_path / "mixed.gz"
    path.write_bytes(raw.getvalue() + b"".join(gzip.compress(_enc(s.to_json()), mtime=0) for s in BASE[2:]))
    recording = Recording(path)
    assert [recording.tracks["a"].snapshot(i) for i in range(4)] == BASE and recording.truncated


def test_a_line_without_end_is_bounded(tmp_path, monkeypatch):
    """A gzip member that inflates to more than MAX_LINE without a newline (a bomb of zeros) is
    skipped as one damaged line; reading goes on after it."""
    import probes.recordfile as recording_module

    monkeypatch.setattr(recording_module, "MAX_LINE", 1 << 20)
    path = tmp_path / "bomb.gz"
    path.write_bytes(gzip.compress(_enc(BASE[0].to_json()), mtime=0) + gzip.compress(b"\0" * (3 << 20), mtime=0)
                     + gzip.compress(b"x\n" + _enc(BASE[1].to_json()), mtime=0))
    recording = Recording(path)
    assert [recording.tracks["a"].snapshot(i) for i in range(2)] == BASE[:2]
    assert recording.damage.lines == 1 and "longer than 1 MiB" in recording.damage.first_line


# -- replay ----------------------------------------------------------------------------------------


async def test_replay_passes_over_a_bad_snapshot_for_the_one_before(tmp_path):
    from tui.app import replay_app

    from .test_tui import settle

    path = _write(tmp_path / "r.gz", [_enc(BASE[0].to_json()), _enc(BASE[1].to_json()), _bad_line("depth a string"),
                                      _enc(BASE[3].to_json())])
    recording = Recording(path)
    assert recording.tracks["a"].times == [s.taken_at for s in BASE]  # the bad line's shape is checked when shown
    app = replay_app(recording, playing=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, app, lambda: app.snapshot == BASE[0], "the first instant", 500)
        app.replay.seek(BASE[2].taken_at)
        await settle(pilot, app, lambda: app.replay.unreadable == 1, "the bad snapshot passed over")
        assert app.snapshot == BASE[1]
        await pilot.press("full_stop")
        await settle(pilot, app, lambda: app.snapshot == BASE[3], "the next instant")
        await pilot.press("comma")
        await settle(pilot, app, lambda: app.replay.position == BASE[2].taken_at and app.snapshot == BASE[1], "a step back")
        assert app.replay.unreadable == 2 and app.is_running


# -- a fuzz over mutated lines --------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=8)
SMALL = _hosted(sample_snapshot(step=1, queues=2, sessions=4), "a", 10)


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*prefix, index))


SMALL_DOC = json.loads(_enc(SMALL.to_json()))
SMALL_PATHS = [p for p in _paths(SMALL_DOC) if p]


@st.composite
def mutated_lines(draw) -> bytes:
    document = json.loads(json.dumps(SMALL_DOC))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(SMALL_PATHS))
        parent = document
        try:
            for key in path[:-1]:
                parent = parent[key]
            action = draw(st.sampled_from(["replace", "delete"]))
            if action == "delete" and isinstance(parent, dict):
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = draw(JSON_VALUES)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier change took that path away
    line = bytearray(_enc(document))
    for _ in range(draw(st.integers(0, 2))):  # and a byte or two changed, where one is asked for
        if draw(st.booleans()):
            line[draw(st.integers(0, len(line) - 1))] = draw(st.integers(0, 255))
    return bytes(line)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_lines())
def test_fuzz_a_mutated_line_is_read_or_passed_over_never_a_crash(line):
    BAD_INPUTS["recording lines fuzzed"] += 1
    before = _hosted(sample_snapshot(step=0, queues=2, sessions=4), "a", 0)
    with tempfile.TemporaryDirectory() as directory:
        path = _write(Path(directory) / "r.gz", [_enc(before.to_json()), line])
        try:
            recording = Recording(path)
        except UsageError as exc:  # never: the line of another version is the second
            raise AssertionError(exc) from None
        for keep_lines in (True, False):
            reader = recording if keep_lines else Recording(path, keep_lines=False)
            shown = reader.at(SMALL.taken_at)
            assert set(shown) <= {"a"} | set(reader.tracks)
            for snapshot in shown.values():
                render(snapshot)  # what `snapshot --from` prints, and the dashboard's figures come from
                json.dumps(snapshot.to_json())
        try:
            Snapshot.from_json(json.loads(line))
            BAD_INPUTS["recording lines fuzzed: of the model's shape, read"] += 1
        except (ShapeError, ValueError, RecursionError):
            BAD_INPUTS["recording lines fuzzed: passed over"] += 1
    BAD_INPUTS["recording lines fuzzed: handled cleanly"] += 1


# -- a full disk ---------------------------------------------------------------------------------


def _check_whole(path: Path, written: list[bytes]) -> None:
    """`gzip -t` passes, and gzip reads back exactly the snapshots written before the failure."""
    test = subprocess.run(["gzip", "-t", str(path)], capture_output=True, text=True, timeout=30)
    assert test.returncode == 0, test.stderr
    with gzip.open(path) as f:
        assert f.read().splitlines(keepends=True) == written
    recording = Recording(path)
    assert len(recording.tracks["a"].times) == len(written) and not recording.truncated


@contextlib.contextmanager
def _small_tmpfs(tmp_path: Path, size: str = "64k"):
    mount = tmp_path / "full"
    mount.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True, text=True)
    if result.returncode != 0:
        yield None
        return
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


_WRITER = textwrap.dedent("""
    import json, resource, signal, sys
    from dataclasses import replace
    from datetime import timedelta
    from probes.recording import Recorder
    from tui.sample import sample_snapshot
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), int(sys.argv[2])))
    recorder, written = Recorder(sys.argv[1]), []
    for n in range(10_000):
        s = sample_snapshot(step=n, queues=40)
        s = replace(s, taken_at=s.taken_at + timedelta(seconds=n), extra={**s.extra, "host": "a"})
        try:
            recorder.write(s)
        except OSError as exc:
            print(json.dumps({"written": written, "error": exc.strerror}))
            break
        written.append((json.dumps(s.to_json(), separators=(",", ":")) + "\\n"))
""")


def test_a_full_disk_leaves_a_valid_gzip_file_with_every_snapshot_written_before(tmp_path):
    """A real failing write: a 64 KiB tmpfs filled by the recorder (root), and a file size limit
    (RLIMIT_FSIZE, SIGXFSZ ignored) in a process of its own."""
    with _small_tmpfs(tmp_path) as mount:
        if mount is not None:
            path = mount / "r.jsonl.gz"
            recorder, written = Recorder(path), []
            with pytest.raises(OSError) as raised:
                for n in range(10_000):
                    snapshot = _hosted(sample_snapshot(step=n, queues=40), "a", n)
                    recorder.write(snapshot)
                    written.append(_enc(snapshot.to_json()))
            assert raised.value.strerror == "No space left on device" and len(written) >= 3
            assert recorder.snapshots == len(written) and recorder.failed is raised.value
            recorder.write(BASE[0])  # after the failure: nothing more is written
            _check_whole(path, written)
            BAD_INPUTS["full disks (tmpfs)"] += 1
        else:
            BAD_INPUTS["full disks (tmpfs): mount not permitted"] += 1
    path = tmp_path / "limited.jsonl.gz"
    result = subprocess.run([sys.executable, "-c", _WRITER, str(path), "40000"], cwd=REPO, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["error"] == "File too large" and len(report["written"]) >= 3
    assert path.stat().st_size <= 40_000
    _check_whole(path, [line.encode() for line in report["written"]])
    BAD_INPUTS["full disks (RLIMIT_FSIZE)"] += 1


def test_gzip_reads_a_recording_as_it_is_written(tmp_path):
    """Every snapshot a whole gzip member: `gzip -t` passes while the recorder is still open."""
    path = tmp_path / "open.jsonl.gz"
    recorder = Recorder(path)
    written = []
    for snapshot in BASE:
        recorder.write(snapshot)
        written.append(_enc(snapshot.to_json()))
        _check_whole(path, written)
    recorder.close()
