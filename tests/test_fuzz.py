"""Bad input, generated (issue 15): hypothesis drives the real command line (in this process, for
speed) with hostile names, bodies and numbers. Whatever it tries: the exit code is one of the
contract's, a failure is one `queuetop: error:` line with no traceback, and a refused command
leaves the database exactly as it was."""

from __future__ import annotations

import io
import json
import os
from contextlib import redirect_stderr, redirect_stdout

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queues import ring
from queues.table_queue import TableQueue
from tui.cli import main

from .conftest import BAD_INPUTS
from .test_cli_errors import db_state

# Positional names: one starting with "-" is read as an option (`--debug` rightly prints a
# traceback), which is argparse's business, not a name's.
NAMES = st.one_of(
    st.sampled_from(["q", "fuzz.q", "r", "", "a" * 48, "a" * 49, "abc\n", " q", "q;drop", "ünï", "q\x00"]),
    st.text(min_size=0, max_size=50).filter(lambda name: not name.startswith("-")),
)
NUMBERS = st.one_of(
    st.sampled_from(["0", "1", "-1", "3", "1e20", "nan", "inf", "-inf", "99999999999999999999", str(2**63), "0x10", "", "1.5",
                     "1e308", "-1e308", "1e-300", "0.05"]),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
)
# Bodies nested to the limit (512), past it, objects, never closed, and brackets that are only text.
BODIES = st.one_of(
    st.sampled_from(["NaN", "[NaN]", "Infinity", '{"a": 1', "null", '{"a": 1}', '"x"', "", "\ud800", '"\\u0000"', "[" * 600,
                     "[" * 512 + "]" * 512, "[" * 513 + "]" * 513, "[" * 1000 + "]" * 1000, '{"a":' * 600 + "1" + "}" * 600,
                     '"' + "[" * 600 + '"', '["\\"' + "[" * 600 + '"]']),
    st.text(max_size=40),
)
# Work options: out of range, not finite, or harmless. No valid crash:P above 0 (it would kill this
# process), no long sleep, no retry delay (a retried message would keep --until-empty waiting).
HANDLERS = st.sampled_from(["noop", "fail:2", "x:y", "os:getcwd", "", "sleep:nan", "sleep:inf", "sleep:-inf", "sleep:1e308",
                            "sleep:-1", "sleep:3601", "sleep:0", "sleep:0.001", "fail:nan", "fail:-0.1", "fail:1", "fail:0.5",
                            "crash:-1", "crash:1.5", "crash:nan", "crash:inf", "crash:0", "noop,sleep:nan", "sleep:", "sleep:x"])
WORK_OPTIONS = st.sampled_from([
    "--workers=0", "--workers=2", "--workers=257", "--workers=nan", "--max-attempts=0", "--max-attempts=1",
    "--max-attempts=2", "--max-attempts=1001", "--max-attempts=inf", "--max-attempts=-1", "--batch=0", "--batch=10",
    "--batch=10001", "--batch=1e308", "--retry-delay=0", "--retry-delay=nan", "--retry-delay=-1", "--retry-delay=3601",
    "--retry-delay=1e308", "--poll-interval=0", "--poll-interval=0.5", "--poll-interval=inf", "--poll-interval=-1e308",
    "--duration=nan", "--duration=-1", "--duration=1e308"])


def commands():
    return st.one_of(
        st.tuples(st.just("enqueue"), NAMES, NUMBERS, BODIES).map(
            lambda t: ["engine", "enqueue", t[1], f"--count={t[2]}", f"--body={t[3]}"]),
        st.tuples(st.just("put"), NAMES, NUMBERS, BODIES).map(
            lambda t: ["engine", "ring", "put", t[1], f"--count={t[2]}", f"--body={t[3]}"]),
        st.tuples(st.just("create"), NAMES, NUMBERS).map(lambda t: ["engine", "ring", "create", t[1], f"--capacity={t[2]}"]),
        st.tuples(st.just("take"), NAMES, NUMBERS).map(lambda t: ["engine", "ring", "take", t[1], f"--count={t[2]}"]),
        st.tuples(st.just("lease"), st.sampled_from(["acquire", "renew", "release"]), NAMES, NAMES, NUMBERS).map(
            lambda t: ["engine", "lease", t[1], t[2], f"--holder={t[3]}"] + ([f"--ttl={t[4]}"] if t[1] != "release" else [])),
        st.tuples(st.just("compact"), NUMBERS).map(lambda t: ["engine", "compact", f"--group={t[1]}"]),
        st.tuples(st.just("work"), NAMES, NUMBERS, HANDLERS, st.lists(WORK_OPTIONS, max_size=3)).map(
            lambda t: ["engine", "work", t[1], "--until-empty", f"--visibility={t[2]}", f"--handler={t[3]}", *t[4]]),
        st.tuples(st.just("enqueue-batch"), NAMES, NUMBERS).map(lambda t: ["engine", "enqueue", t[1], f"--batch={t[2]}"]),
        # --rates sleeps that long between its two samples: only values that are refused, or short.
        st.tuples(st.just("snapshot"), st.sampled_from(["-1", "nan", "1e20", "x", "0", "0.1", str(2**63), "3601"])).map(
            lambda t: ["snapshot", "--json", f"--rates={t[1]}"]),
        # The other writers, whole, for --read-only (the bench and scenario ones refused before they start).
        st.sampled_from([["engine", "init"], ["demo", "reset", "--force"], ["engine", "scenario", "relay"],
                         ["bench", "engine"], ["bench", "peers"], ["engine", "compact"]]).map(
            lambda argv: [*argv, "--read-only"]),
    )


def with_read_only(argv: list[str], where: str | None) -> list[str]:
    """--read-only before the command, after it, or not at all."""
    if where is None or "--read-only" in argv:
        return argv
    return ["--read-only", *argv] if where == "before" else [*argv, "--read-only"]


def writes(argv: list[str]) -> bool:
    words = [word for word in argv if word != "--read-only"]
    return words[0] in ("engine", "demo", "bench")


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


# The same 80 in CI as here; QT_FUZZ_EXAMPLES=2000 for a deeper run.
@settings(max_examples=int(os.environ.get("QT_FUZZ_EXAMPLES") or 80), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(argv=st.tuples(commands(), st.sampled_from([None, None, "before", "after"])).map(lambda t: with_read_only(*t)))
def test_any_command_line_keeps_the_contract(db, argv):
    with db.connect() as conn:  # something for the commands to find: a queue, a full ring, a lease
        TableQueue.create(conn, "q")
        if not conn.execute("SELECT 1 FROM queuetop.rings WHERE name = 'r'").fetchone():
            ring.create(conn, "r", 3)
            ring.put(conn, "r", ['"a"', '"b"', '"c"'])
    before = db_state(db)
    code, out, err = run([*argv, "--dsn", db.dsn])
    assert code in (0, 1, 2, 3, 4), (argv, code, err)
    if "--read-only" in argv and writes(argv):
        assert code == 2, (argv, code, err)  # refused: by --read-only, or by argparse before it
    # `work --until-empty` that dead-lettered messages: it ran (exit 1, its summary line printed), refused nothing.
    ran = code == 0 or (code == 1 and "went to the dead-letter table in this run" in err and json.loads(out)["dead"] > 0)
    if code != 0:
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("queuetop: error: "), (argv, err)
        assert "Traceback" not in err
        assert code != 1 or "database error" not in err, (argv, err)  # bad input is caught before the database is
        assert "internal error" not in err, (argv, err)
        if not ran:
            assert db_state(db) == before, argv  # a refused command writes nothing
    BAD_INPUTS["tried"] += 1
    BAD_INPUTS["accepted" if ran else "refused cleanly"] += 1
