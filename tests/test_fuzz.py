"""Bad input, generated (issue 15): hypothesis drives the real command line (in this process, for
speed) with hostile names, bodies and numbers. Whatever it tries: the exit code is one of the
contract's, a failure is one `queuetop: error:` line with no traceback, and a refused command
leaves the database exactly as it was."""

from __future__ import annotations

import io
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
    st.sampled_from(["0", "1", "-1", "3", "1e20", "nan", "inf", "-inf", "99999999999999999999", str(2**63), "0x10", "", "1.5"]),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
)
BODIES = st.one_of(
    st.sampled_from(["NaN", "[NaN]", "Infinity", '{"a": 1', "null", '{"a": 1}', '"x"', "", "\ud800", '"\\u0000"', "[" * 600]),
    st.text(max_size=40),
)


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
        st.tuples(st.just("work"), NAMES, NUMBERS, st.sampled_from(["noop", "fail:2", "x:y", "os:getcwd", ""])).map(
            lambda t: ["engine", "work", t[1], "--until-empty", f"--visibility={t[2]}", f"--handler={t[3]}"]),
        # --rates sleeps that long between its two samples: only values that are refused, or short.
        st.tuples(st.just("snapshot"), st.sampled_from(["-1", "nan", "1e20", "x", "0", "0.1", str(2**63)])).map(
            lambda t: ["snapshot", "--json", f"--rates={t[1]}"]),
    )


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


# The same 80 in CI as here; QT_FUZZ_EXAMPLES=2000 for a deeper run.
@settings(max_examples=int(os.environ.get("QT_FUZZ_EXAMPLES") or 80), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(argv=commands())
def test_any_command_line_keeps_the_contract(db, argv):
    with db.connect() as conn:  # something for the commands to find: a queue, a full ring, a lease
        TableQueue.create(conn, "q")
        if not conn.execute("SELECT 1 FROM queuetop.rings WHERE name = 'r'").fetchone():
            ring.create(conn, "r", 3)
            ring.put(conn, "r", ['"a"', '"b"', '"c"'])
    before = db_state(db)
    code, _out, err = run([*argv, "--dsn", db.dsn])
    assert code in (0, 1, 2, 3, 4), (argv, code, err)
    if code != 0:
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("queuetop: error: "), (argv, err)
        assert "Traceback" not in err
        assert code != 1 or "database error" not in err, (argv, err)  # bad input is caught before the database is
        assert db_state(db) == before, argv  # a refused command writes nothing
    BAD_INPUTS["tried"] += 1
    BAD_INPUTS["refused cleanly" if code != 0 else "accepted"] += 1
