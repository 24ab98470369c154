"""The first run says what it is doing (issue 28, point 6): on a terminal, each slow step before the
command's work (creating the embedded server, starting it, creating its database, installing the
schema) is one stderr line with its time; a step that does not run says nothing; stdout holds the
command's JSON alone; and where stderr is not a terminal (scripts, these tests' other commands)
nothing is added. The real command, a real embedded server in a fresh data directory."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from queues.embedded import stop_server

from .conftest import REPO

DONE = r"\.\.\. done \(\d+\.\d s\)"


def snapshot(data_dir: Path, *, terminal: bool, env: dict[str, str] | None = None) -> tuple[int, dict, str]:
    """`queuetop snapshot --json` on the embedded server in `data_dir`: its exit code, the JSON on
    stdout and what stderr got, stderr on a pseudo-terminal when `terminal` (stdout a pipe always)."""
    full_env = {key: value for key, value in os.environ.items() if key not in {"QUEUETOP_DSN", "QUEUETOP_PROGRESS"}}
    full_env.update(env or {})
    argv = [sys.executable, "-m", "tui", "snapshot", "--json", "--data-dir", str(data_dir)]
    if not terminal:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=full_env, cwd=REPO)
        return proc.returncode, json.loads(proc.stdout), proc.stderr
    primary, secondary = pty.openpty()
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                chunk = os.read(primary, 4096)
            except OSError:  # EIO: every writer closed the terminal
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=secondary, stdin=subprocess.DEVNULL, env=full_env,
                              cwd=REPO) as proc:
            os.close(secondary)
            out, _ = proc.communicate(timeout=120)
        reader.join(timeout=10)
    finally:
        os.close(primary)
    err = b"".join(chunks).decode().replace("\r\n", "\n")
    return proc.returncode, json.loads(out), err


@pytest.fixture
def data_dir(tmp_path: Path):
    path = tmp_path / "pgdata"
    yield path
    stop_server(path)


def test_the_first_run_says_what_it_does_and_a_warm_one_says_nothing(data_dir):
    code, shot, err = snapshot(data_dir, terminal=True)
    assert code == 0, err
    assert shot["server"]["dialect"] == "postgresql" and "queues" in shot
    lines = err.splitlines()
    assert len(lines) == 3, err
    assert re.fullmatch(rf"queuetop: first run: creating the embedded PostgreSQL server in {re.escape(str(data_dir))}{DONE}",
                        lines[0]), err
    assert re.fullmatch(rf"queuetop: creating the database queuetop{DONE}", lines[1]), err
    assert re.fullmatch(rf"queuetop: installing the queuetop schema{DONE}", lines[2]), err

    # Warm: the server runs, the database and the schema are there: not a word.
    code, _shot, err = snapshot(data_dir, terminal=True)
    assert (code, err) == (0, "")

    # Stopped: it starts again, and says only that.
    assert stop_server(data_dir)
    code, _shot, err = snapshot(data_dir, terminal=True)
    assert code == 0, err
    assert re.fullmatch(rf"queuetop: starting the embedded PostgreSQL server \({re.escape(str(data_dir))}\){DONE}\n", err), err


def test_no_progress_where_stderr_is_not_a_terminal_unless_asked(data_dir):
    code, shot, err = snapshot(data_dir, terminal=False)
    assert (code, err) == (0, "")  # a first start, piped: stderr stays empty, stdout is the JSON alone
    assert shot["server"]["dialect"] == "postgresql"
    assert stop_server(data_dir)
    code, _shot, err = snapshot(data_dir, terminal=False, env={"QUEUETOP_PROGRESS": "1"})
    assert code == 0, err
    assert err.startswith("queuetop: starting the embedded PostgreSQL server") and len(err.splitlines()) == 1, err
