"""Every promise of the command line holds (issue 24): --read-only refuses every command that
writes, before it connects; every number is finite and within a stated range; bodies and config
files are checked by shape, depth and size, special files refused unread; QUEUETOP_CONFIG is read;
`engine work --until-empty` does not call dead letters a success. Mostly in this process (the
real `main`, as the fuzz test drives it), for speed; the FIFO, /dev/zero and the env var black-box."""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout

import pytest

from queues import lease, ring
from queues.table_queue import TableQueue
from tui.cli import build_parser, main
from tui.commands.bodies import MAX_BODY_DEPTH

from .conftest import REPO
from .test_cli_errors import db_state


def run(argv: list[str], *, stdin: bytes | None = None, monkeypatch: pytest.MonkeyPatch | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    if stdin is not None:
        assert monkeypatch is not None
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8"))
    with redirect_stdout(out), redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def one_error(code: int, out: str, err: str, expected_code: int = 2) -> str:
    """The contract's failure: the code, one `queuetop: error:` line, nothing on stdout."""
    assert code == expected_code, (code, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("queuetop: error: "), err
    assert "Traceback" not in err and out == ""
    return lines[0]


def leaves(parser: argparse.ArgumentParser | None = None, path: tuple[str, ...] = ()):
    """Every command: (its words, its parser)."""
    parser = parser or build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from leaves(sub, (*path, name))
    if path and parser.get_default("func") is not None:
        yield path, parser


# -- --read-only ----------------------------------------------------------------------------

WRITES = {
    "engine init", "engine enqueue", "engine work", "engine compact", "engine scenario contention",
    "engine scenario exactly-once", "engine scenario relay", "engine scenario diagnose", "engine ring create", "engine ring put",
    "engine ring take", "engine lease acquire", "engine lease renew", "engine lease release", "demo reset",
    "bench engine", "bench probes", "bench sources", "bench peers",
    "jobs retry", "jobs run-now", "jobs cancel", "jobs delete", "jobs pause", "jobs resume",
}
READS = {"snapshot", "record", "replay", "export prometheus", "bench tui", "server status", "server stop", "jobs list", "jobs show"}

# The least each write command needs to get past argparse: what --read-only must then refuse.
MINIMAL = {
    "engine enqueue": ["q", "--count", "3"], "engine work": ["q", "--until-empty"],
    "engine scenario contention": ["--mode", "naive"], "engine scenario diagnose": ["--cause", "healthy"],
    "engine ring create": ["r2", "--capacity", "3"],
    "engine ring put": ["r"], "engine ring take": ["r", "--count", "3"],
    "engine lease acquire": ["l", "--holder", "other", "--ttl", "30"],
    "engine lease renew": ["l", "--holder", "h", "--ttl", "30"], "engine lease release": ["l", "--holder", "h"],
    "demo reset": ["--force"],
    "jobs retry": ["q", "1", "--yes"], "jobs run-now": ["q", "1", "--yes"], "jobs cancel": ["q", "--state", "ready", "--all", "--yes"],
    "jobs delete": ["q", "1", "--yes"], "jobs pause": ["q", "--yes"], "jobs resume": ["q", "--yes"],
}


def test_every_command_is_declared_a_writer_or_a_reader():
    """A new command must say whether it writes (_leaf(..., writes=True)): this fails until it does."""
    declared = {" ".join(path): parser.get_default("writes") for path, parser in leaves()}
    assert {name for name, writes in declared.items() if writes} == WRITES
    assert {name for name, writes in declared.items() if not writes} == READS


@pytest.mark.parametrize("where", ["before", "after"])
def test_read_only_refuses_every_write_command_and_writes_nothing(db, where):
    with db.connect() as conn:
        TableQueue.create(conn, "q").enqueue_batch(conn, ['{"n": 1}', '{"n": 2}'])
        ring.create(conn, "r", 3)
        ring.put(conn, "r", ['"a"'])
        lease.acquire(conn, "l", "h", 60)
    before = db_state(db)
    for command in sorted(WRITES):
        words = [*command.split(), *MINIMAL.get(command, [])]
        argv = (["--read-only", *words] if where == "before" else [*words, "--read-only"]) + ["--dsn", db.dsn]
        line = one_error(*run(argv))
        assert line == f"queuetop: error: --read-only: {command!r} writes to the database; refused, nothing written"
        assert db_state(db) == before, command
    # What only reads still runs under --read-only.
    code, out, err = run(["--read-only", "snapshot", "--json", "--dsn", db.dsn])
    assert code == 0, err
    assert json.loads(out)["version"] == 1
    assert db_state(db) == before


def test_read_only_black_box(db, cli):
    before = db_state(db)
    result = cli("--read-only", "engine", "init", "--dsn", db.dsn)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == "queuetop: error: --read-only: 'engine init' writes to the database; refused, nothing written\n"
    assert db_state(db) == before


# -- numbers --------------------------------------------------------------------------------

# The parsers of tui/cli.py that bound a number, by the names argparse knows them by.
BOUNDED = ("number", "whole number", "list of whole numbers", "_positive_float")
# Valid values for the options a command requires, so that the option under test is what fails.
REQUIRED = {"--capacity": "3", "--holder": "h", "--ttl": "5", "--mode": "naive", "--cause": "healthy"}


def numeric_options():
    for path, parser in leaves():
        for action in parser._actions:
            if action.type is not None and action.option_strings and action.type.__name__ in BOUNDED:
                yield " ".join(path), parser, action.option_strings[0]


NUMERIC = list(numeric_options())


def test_no_option_takes_an_unchecked_number():
    """Every option that has a type has one of the bounded parsers (int and float accept 1e308, nan)."""
    for path, parser in leaves():
        for action in parser._actions:
            if action.type is not None:
                assert action.type.__name__ in (*BOUNDED, "_listen"), (path, action.option_strings)
    assert len(NUMERIC) >= 60


@pytest.mark.parametrize("value", ["nan", "-inf", "1e308", "99999999999999999999999"])
def test_every_numeric_option_refuses_what_is_not_finite_and_in_range(value):
    """Before any database is reached (no --dsn needed): one line naming the option and its range."""
    for command, parser, option in NUMERIC:
        argv = [*command.split()]
        for action in parser._actions:  # positionals and required options, valid
            if not action.option_strings and action.dest not in ("help",) and action.nargs is None:
                argv.append("x")
            elif action.required and action.option_strings[0] != option:
                argv += [action.option_strings[0], REQUIRED[action.option_strings[0]]]
        if value.startswith("-") and option == "--token":
            continue  # `--token=-inf`: the redaction hides the whole message (a word like a secret's); reported
        # `--option -inf` reads as another option: negative values go in the `=` form.
        given = [f"{option}={value}"] if value.startswith("-") or not value else [option, value]
        line = one_error(*run([*argv, *given]))
        assert f"argument {option}: " in line, (command, option, line)
        assert re.search(r"must be (between \S+ and \S+|more than 0 and at most \S+)|is not a", line), (command, option, line)


@pytest.mark.parametrize("args, says", [
    (["engine", "work", "q", "--max-attempts", "0"], "argument --max-attempts: '0' must be between 1 and 1,000"),
    (["engine", "work", "q", "--max-attempts", "1001"], "argument --max-attempts: '1001' must be between 1 and 1,000"),
    (["engine", "work", "q", "--workers", "257"], "argument --workers: '257' must be between 1 and 256"),
    (["engine", "work", "q", "--batch", "0"], "argument --batch: '0' must be between 1 and 10,000"),
    (["engine", "work", "q", "--poll-interval", "0"], "argument --poll-interval: '0' must be between 0.01 and 3,600"),
    (["engine", "work", "q", "--retry-delay", "1e308"], "argument --retry-delay: '1e308' must be between 0 and 3,600"),
    (["engine", "work", "q", "--visibility", "0.05"], "argument --visibility: '0.05' must be between 0.1 and"),
    (["engine", "enqueue", "q", "--batch", "0"], "argument --batch: '0' must be between 1 and 10,000"),
    (["engine", "lease", "acquire", "l", "--holder", "h", "--ttl", "inf"], "argument --ttl: 'inf' is not a finite number"),
    (["engine", "scenario", "exactly-once", "--duplicate-rate", "1.5"], "argument --duplicate-rate: '1.5' must be between 0 and 1"),
    (["bench", "engine", "--concurrency", str(2**62)], "argument --concurrency: '4611686018427387904' must be between 1 and 256"),
    (["bench", "engine", "--concurrency", "2,0"], "argument --concurrency: '0' must be between 1 and 256"),
    (["bench", "engine", "--concurrency", "2,2"], "argument --concurrency: '2,2' names a number twice"),
    (["bench", "peers", "--concurrency", "2,x"], "argument --concurrency: 'x' is not a whole number"),
    (["bench", "tui", "--sessions", "0"], "argument --sessions: '0' must be between 1 and 10,000"),
    (["replay", "f", "--speed", "1e-300"], "argument --speed: '1e-300' must be between 0.01 and 1,000"),
    (["record", "f", "--max-size", "0"], "argument --max-size: '0' must be between 0.01 and 1,000,000"),
    (["--interval", "0.01"], "argument --interval: '0.01' must be between 0.1 and 3,600"),
    (["snapshot", "--rates", "3601"], "argument --rates: '3601' must be between 0 and 3,600"),
])
def test_ranges_are_stated(args, says):
    assert says in one_error(*run(args))


HANDLERS = [
    ("sleep:nan", "seconds from 0 to 3,600"), ("sleep:inf", "seconds from 0 to 3,600"),
    ("sleep:1e308", "seconds from 0 to 3,600"), ("sleep:-1", "seconds from 0 to 3,600"),
    ("sleep:3601", "seconds from 0 to 3,600"), ("sleep:x", "'x' is not a number"),
    ("fail:2", "a probability from 0 to 1"), ("fail:nan", "a probability from 0 to 1"),
    ("fail:-0.1", "a probability from 0 to 1"), ("crash:-1", "a probability from 0 to 1"),
    ("crash:inf", "a probability from 0 to 1"), ("noop,sleep:nan", "seconds from 0 to 3,600"),
]


def test_handler_parameters_are_finite_and_in_range(db):
    with db.connect() as conn:
        TableQueue.create(conn, "q").enqueue_batch(conn, ['{"n": 1}', '{"n": 2}'])
    before = db_state(db)
    for handler, says in HANDLERS:
        line = one_error(*run(["engine", "work", "q", "--until-empty", f"--handler={handler}", "--max-attempts=1",
                               "--dsn", db.dsn]))
        assert line.startswith(f"queuetop: error: --handler: invalid handler {handler.split(',')[-1]!r}: "), line
        assert says in line, line
    assert db_state(db) == before  # nothing processed, nothing dead-lettered


def test_until_empty_with_dead_letters_exits_1_and_only_for_this_run(db):
    with db.connect() as conn:
        queue = TableQueue.create(conn, "jobs")
        queue.enqueue_batch(conn, ['{"n": 1}', '{"n": 2}', '{"n": 3}'])
    code, out, err = run(["engine", "work", "jobs", "--until-empty", "--handler", "fail:1", "--max-attempts", "1",
                          "--dsn", db.dsn])
    assert code == 1, err
    assert json.loads(out) == {"processed": 0, "retried": 0, "dead": 3, "stale_acks": 0}  # the summary, still
    assert err.splitlines() == ["queuetop: error: 3 message(s) of queue 'jobs' went to the dead-letter table in this run "
                                "(queuetop.dead_letters holds each with its last error)"]
    with db.connect() as conn:
        assert conn.execute("SELECT count(*) FROM queuetop.dead_letters").fetchone()[0] == 3
        queue.enqueue_batch(conn, ['{"n": 4}'])
    # The dead letters of an earlier run are not this run's failure.
    code, out, err = run(["engine", "work", "jobs", "--until-empty", "--dsn", db.dsn])
    assert (code, err) == (0, "")
    assert json.loads(out)["processed"] == 1


# -- bodies ---------------------------------------------------------------------------------


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_a_body_nested_too_deep_is_refused_and_nothing_written(db):
    with db.connect() as conn:
        ring.create(conn, "r", 3)
    before = db_state(db)
    # One level too deep; 1,000 arrays (PostgreSQL takes them; Python's parser recursed past its limit: exit 1);
    # objects; never closed.
    for body in (nested(MAX_BODY_DEPTH + 1), nested(1000), '{"a":' * 600 + "1" + "}" * 600, "[" * 100_000):
        for argv in (["engine", "enqueue", "fresh", f"--body={body}"], ["engine", "ring", "put", "r", f"--body={body}"]):
            line = one_error(*run([*argv, "--dsn", db.dsn]))
            assert line == f"queuetop: error: JSON body nested deeper than {MAX_BODY_DEPTH} levels: refused, nothing written"
    assert db_state(db) == before


def test_nesting_is_counted_outside_strings_only(db):
    deep_text = json.dumps("[" * 600 + '\\"[{' * 200)  # brackets and escaped quotes inside one string
    bodies = [nested(MAX_BODY_DEPTH), deep_text, json.dumps({"k": "]" * 700 + "[" * 700})]
    for body in bodies:
        code, _out, err = run(["engine", "enqueue", "ok", f"--body={body}", "--dsn", db.dsn])
        assert (code, err) == (0, ""), body[:80]
    with db.connect() as conn:
        stored = [row[0] for row in conn.execute("SELECT body::text FROM queuetop.q_ok ORDER BY id")]
    assert stored == bodies  # exactly as given


def test_stdin_bodies_are_checked_by_line_depth_and_size(db, monkeypatch):
    with db.connect() as conn:
        TableQueue.create(conn, "q").enqueue(conn, '{"n": 0}')
    before = db_state(db)
    deep = ("1\n" + nested(MAX_BODY_DEPTH + 1) + "\n").encode()
    line = one_error(*run(["engine", "enqueue", "q", "--stdin", "--dsn", db.dsn], stdin=deep, monkeypatch=monkeypatch))
    assert line == f"queuetop: error: standard input line 2: JSON body nested deeper than {MAX_BODY_DEPTH} levels: refused, nothing written"
    large = b'"' + b"x" * (16 * 1024 * 1024) + b'"\n'
    line = one_error(*run(["engine", "enqueue", "q", "--stdin", "--dsn", db.dsn], stdin=large, monkeypatch=monkeypatch))
    assert line == "queuetop: error: standard input line 1: JSON body of more than 16 MiB: refused, nothing written"
    latin1 = b'{"ok": 1}\n"caf\xe9"\n'
    line = one_error(*run(["engine", "enqueue", "q", "--stdin", "--dsn", db.dsn], stdin=latin1, monkeypatch=monkeypatch))
    assert line == "queuetop: error: malformed JSON body on standard input line 2: not valid UTF-8"
    assert db_state(db) == before


def test_stdin_from_dev_zero_is_refused_without_reading_it_all(db):
    before = db_state(db)
    with open("/dev/zero", "rb") as zero:
        proc = subprocess.run([sys.executable, "-m", "tui", "engine", "enqueue", "q", "--stdin", "--dsn", db.dsn],
                              stdin=zero, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert "JSON body of more than 16 MiB" in one_error(proc.returncode, proc.stdout, proc.stderr)
    assert db_state(db) == before


# -- config files ---------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["option", "env"])
def test_special_files_as_config_are_refused_without_hanging(tmp_path, cli, how):
    """A FIFO with no writer would block open() and read() forever; /dev/zero never ends: black-box,
    with a timeout. A directory: in this process."""
    fifo = tmp_path / "config.fifo"
    os.mkfifo(fifo)
    for path in (fifo, "/dev/zero", tmp_path):
        args = ("snapshot", "--json", "--config", str(path)) if how == "option" else ("snapshot", "--json")
        env = {"QUEUETOP_CONFIG": str(path)} if how == "env" else {}
        if path == tmp_path:
            with pytest.MonkeyPatch.context() as patch:
                for key, value in env.items():
                    patch.setenv(key, value)
                line = one_error(*run([*args, "--dsn", "postgresql://u@127.0.0.1:1/x"]))
        else:
            result = cli(*args, "--dsn", "postgresql://u@127.0.0.1:1/x", env=env, timeout=30)
            line = one_error(result.returncode, result.stdout, result.stderr)
        says = "is a directory: name a TOML file" if path == tmp_path else "is not a regular file"
        assert f"config file {str(path)!r}" in line and says in line, line
        assert ("(named by $QUEUETOP_CONFIG)" in line) == (how == "env")


def write(tmp_path, name: str, data: bytes | str):
    path = tmp_path / name
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


@pytest.mark.parametrize("content, says", [
    ("x = " + nested(5000), "arrays or inline tables nested too deeply"),
    ("x = " + "{a = " * 5000 + "1" + "}" * 5000, "arrays or inline tables nested too deeply"),
    (b"[probes]\ninterval = 2 # caf\xe9\n", "not UTF-8 text"),
    ("[probes\n", "malformed config"),
    ('"a\\nb" = 1\n', r"unknown section(s) 'a\nb'"),
    ('[[queues]]\nname = "q"\ntable = "t"\norder_by = "id"\n"x\\ny" = 1\n', r"unknown key(s) 'x\ny'"),
    ('[keys]\n"pa\\nuse" = "x"\n', "[keys] maps binding ids to keys"),
], ids=["5000-arrays", "5000-inline-tables", "latin-1", "truncated", "newline-in-section", "newline-in-key", "newline-in-binding"])
def test_a_malformed_config_is_one_line(tmp_path, content, says):
    path = write(tmp_path, "config.toml", content)
    line = one_error(*run(["snapshot", "--config", str(path), "--dsn", "postgresql://u@127.0.0.1:1/x"]))
    assert says in line


def test_a_huge_config_is_refused_unread(tmp_path):
    path = tmp_path / "huge.toml"
    with open(path, "wb") as f:
        f.truncate(2 * 1024 * 1024)  # sparse: nothing to read, but too large to be a config
    line = one_error(*run(["snapshot", "--config", str(path), "--dsn", "postgresql://u@127.0.0.1:1/x"]))
    assert "is larger than 1,024 KiB" in line


JOBS_CONFIG = '[[queues]]\nname = "jobs"\ntable = "public.jobs"\norder_by = "id"\nage_column = "created_at"\n'


def make_jobs(db) -> None:
    with db.connect() as conn:
        conn.execute("CREATE TABLE jobs (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now())")
        conn.execute("INSERT INTO jobs SELECT FROM generate_series(1, 7)")


def test_queuetop_config_is_read(db, cli, tmp_path):
    make_jobs(db)
    path = write(tmp_path, "env.toml", JOBS_CONFIG)
    with_env = cli("snapshot", "--json", "--dsn", db.dsn, env={"QUEUETOP_CONFIG": str(path)})
    assert with_env.returncode == 0, with_env.stderr
    (jobs,) = [q for q in json.loads(with_env.stdout)["queues"] if q["name"] == "jobs"]
    assert (jobs["source"], jobs["depth"]) == ("table", 7)
    without = cli("snapshot", "--json", "--dsn", db.dsn, env={"QUEUETOP_CONFIG": ""})
    assert without.returncode == 0 and not [q for q in json.loads(without.stdout)["queues"] if q["name"] == "jobs"]


def test_config_option_beats_queuetop_config(db, monkeypatch, tmp_path):
    make_jobs(db)
    monkeypatch.setenv("QUEUETOP_CONFIG", str(tmp_path / "missing.toml"))
    line = one_error(*run(["snapshot", "--json", "--dsn", db.dsn]))
    assert line == f"queuetop: error: config file {str(tmp_path / 'missing.toml')!r} (named by $QUEUETOP_CONFIG) not found"
    path = write(tmp_path, "given.toml", JOBS_CONFIG)
    code, out, err = run(["snapshot", "--json", "--config", str(path), "--dsn", db.dsn])
    assert code == 0, err
    assert [q["depth"] for q in json.loads(out)["queues"] if q["name"] == "jobs"] == [7]


@pytest.mark.parametrize("targets, says", [
    ('[[targets]]\nname = "a"\ndsn = "postgresql://u:pw@127.0.0.1:1/x"\n[[targets]]\nname = "b"\ndsn_env = "QT_UNSET_DSN"\n',
     "target 'b': $QT_UNSET_DSN is not set"),
    ('[[targets]]\nname = "a"\ndsn = "garbage\\n==="\n', "target 'a': dsn must be one line, without control characters"),
    ('[[targets]]\nname = "a"\nservice = "x\\ny"\n', "target 'a': service must be one line, without control characters"),
    ('[[targets]]\nname = "a"\ndsn_env = "QT_TWO_LINE_DSN"\n', "target 'a': $QT_TWO_LINE_DSN must be one line"),
], ids=["password-warning-then-error", "newline-in-dsn", "newline-in-service", "newline-in-env"])
def test_a_targets_error_is_one_line(tmp_path, monkeypatch, targets, says):
    monkeypatch.delenv("QT_UNSET_DSN", raising=False)
    monkeypatch.delenv("QUEUETOP_DSN", raising=False)
    monkeypatch.setenv("QT_TWO_LINE_DSN", "host=x\ndbname=y")
    path = write(tmp_path, "targets.toml", targets)
    line = one_error(*run(["snapshot", "--config", str(path)]))
    assert says in line


def test_read_only_does_not_even_install_the_schema_on_the_embedded_server(tmp_path, cli):
    """Without --dsn the embedded server is started, and normally given the engine's schema."""
    import psycopg

    from queues.embedded import embedded_target, stop_server

    data_dir = tmp_path / "pgdata"

    def schema_present() -> bool:
        with psycopg.connect(embedded_target(data_dir).conninfo, autocommit=True) as conn:
            return conn.execute("SELECT to_regnamespace('queuetop') IS NOT NULL").fetchone()[0]

    try:
        read_only = cli("--read-only", "snapshot", "--json", "--data-dir", str(data_dir), timeout=120)
        assert read_only.returncode == 0, read_only.stderr
        assert not schema_present()
        plain = cli("snapshot", "--json", "--data-dir", str(data_dir), timeout=120)
        assert plain.returncode == 0, plain.stderr
        assert schema_present()
    finally:
        stop_server(data_dir)
