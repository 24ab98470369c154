"""No error can carry a secret (issue 24, point 3): whatever form a DSN is in and whatever its
password holds, nothing queuetop prints, logs or shows to `ps` holds any of its secrets.

Each password is made of distinctive markers (`Qs0012k0`) joined by hostile pieces (a raw
space, `%zz`, `[::1`, `@`, quotes, ...): a parser that splits a password at a hostile piece
leaves a marker on at least one side, so "no marker anywhere" means no piece of it leaked, in
any encoding (percent-encoding and quoting leave the markers as they are). The real command
line runs against an address that refuses at once (127.0.0.1, port 1), in-process for most,
in real processes for a sample (their /proc/PID/cmdline read while they run); the embedded
server's password role gives the server's own refusals.
"""

from __future__ import annotations

import contextlib
import functools
import io
import itertools
import json
import logging
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest
import setproctitle
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import URL

from dbcore.database import MASK, has_password, mask_dsn, resolve_target, secrets_of
from dbcore.errors import UsageError
from dbcore.redact import mask_arguments, mask_raw
from tui import cli
from tui.entry import hide_arguments

from .conftest import BAD_INPUTS, PASSWORD, PASSWORD_ROLE, REPO

_ids = itertools.count(1)


@dataclass(frozen=True)
class Secret:
    """A password and the markers in it: none of them may ever be shown."""

    text: str
    markers: tuple[str, ...]

    @classmethod
    def around(cls, *pieces: str) -> Secret:
        """Markers with `pieces` between them: Qs0001k0 piece Qs0001k1 piece Qs0001k2."""
        serial = next(_ids)
        markers = tuple(f"Qs{serial:04d}k{index}" for index in range(len(pieces) + 1))
        text = markers[0] + "".join(piece + marker for piece, marker in zip(pieces, markers[1:], strict=True))
        return cls(text, markers)


def _kv_quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _odbc_braced(value: str) -> str:
    return "{" + value.replace("}", "}}") + "}"


def _enc(value: str) -> str:
    return quote(value, safe="")


# Every form a DSN with a secret may take, as typed (percent-encoded or quoted as the form
# wants) and raw (a password pasted into it as it is), and forms whose other parts are broken so
# that the parser fails with the password in the text. Port 1 of 127.0.0.1 refuses at once.
FORMS: dict[str, Callable[[str], str]] = {
    "uri-userinfo": lambda s: f"postgresql://u:{_enc(s)}@127.0.0.1:1/x",
    "uri-userinfo-raw": lambda s: f"postgresql://u:{s}@127.0.0.1:1/x",
    "uri-password-param": lambda s: f"postgresql://u@127.0.0.1:1/x?password={_enc(s)}",
    "uri-password-param-raw": lambda s: f"postgresql://u@127.0.0.1:1/x?password={s}",
    "uri-sslpassword-param": lambda s: f"postgresql://u@127.0.0.1:1/x?sslmode=disable&sslpassword={_enc(s)}",
    "uri-sslpassword-param-raw": lambda s: f"postgresql://u@127.0.0.1:1/x?sslpassword={s}",
    "uri-unclosed-ipv6": lambda s: f"postgresql://u:{_enc(s)}@[::1/x",
    "uri-unknown-param": lambda s: f"postgresql://u:{_enc(s)}@127.0.0.1:1/x?bogus=1",
    "kv-password-quoted": lambda s: f"host=127.0.0.1 port=1 user=u password={_kv_quote(s)}",
    "kv-password-unquoted": lambda s: f"host=127.0.0.1 port=1 user=u password={s}",
    "kv-sslpassword-quoted": lambda s: f"host=127.0.0.1 port=1 sslpassword={_kv_quote(s)} user=u",
    "kv-sslpassword-unquoted": lambda s: f"host=127.0.0.1 port=1 user=u sslpassword={s}",
    "kv-password-then-junk": lambda s: f"host=127.0.0.1 password={_kv_quote(s)} junk",
    "sqlalchemy": lambda s: URL.create("postgresql+psycopg", username="u", password=s, host="127.0.0.1", port=1,
                                       database="x").render_as_string(hide_password=False),
    "sqlalchemy-raw": lambda s: f"postgresql+psycopg://u:{s}@127.0.0.1:1/x",
    "sqlalchemy-bad-port": lambda s: f"postgresql+psycopg://u:{_enc(s)}@127.0.0.1:port/x",
    "sqlalchemy-password-param": lambda s: f"postgresql+psycopg://u@127.0.0.1:1/x?password={_enc(s)}",
    "sqlalchemy-sslpassword-param": lambda s: f"postgresql+psycopg://u@127.0.0.1:1/x?sslpassword={_enc(s)}",
    "mssql-url": lambda s: URL.create("mssql+pyodbc", username="u", password=s, host="127.0.0.1", port=1, database="x",
                                      query={"driver": "FreeTDS", "connect_timeout": "1"}).render_as_string(hide_password=False),
    "mssql-pwd-param": lambda s: f"mssql+pyodbc://u@127.0.0.1:1/x?driver=FreeTDS&connect_timeout=1&PWD={_enc(s)}",
    "mssql-odbc-connect": lambda s: "mssql+pyodbc:///?connect_timeout=1&odbc_connect=" + quote_plus(
        f"DRIVER={{FreeTDS}};SERVER=127.0.0.1;PORT=1;UID=u;PWD={_odbc_braced(s)};TDS_Version=7.4"),
    "mssql-odbc-connect-raw": lambda s: "mssql+pyodbc:///?connect_timeout=1&odbc_connect=" + quote_plus(
        f"DRIVER={{FreeTDS}};SERVER=127.0.0.1;PORT=1;UID=u;PWD={s}"),
}

# The passwords that broke masking before (issue 24), and their kin.
HOSTILE: dict[str, tuple[str, ...]] = {
    "space": (" ",),
    "bad-escape": ("%zz",),
    "unclosed-ipv6": ("[::1",),
    "hash": ("#",),
    "at": ("@",),
    "at-then-colon": ("@", ":"),
    "colon": (":",),
    "slash": ("/",),
    "question": ("?",),
    "quotes": ("'", '"'),
    "backslash": ("\\",),
    "unicode": ("é✓€",),
    "query-like": ("&x=",),
    "equals": ("=",),
    "percent-20": ("%20",),
    "odbc-braces": ("};", "{"),
    "semicolon": (";",),
    "key-like": (" password=",),
    "uri-like": ("@127.0.0.1:1/x?",),
    "tab-newline": ("\t", "\n"),
    "long": ("@", ":", "/", "-", "-", "-", "-", "-", "-", "-"),  # 60+ characters: SQLAlchemy's int() of a "port"
}
COMMANDS = (("snapshot", "--json"), ("engine", "init"), ("snapshot",))


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str
    logs: str
    title: str


@pytest.fixture
def queuetop(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Run]]:
    """The real command line, in this process: its exit code, output, log records and title.
    One parser for all the runs of a test (argparse's gettext makes building it cost more than
    a run; parsing leaves it as it was)."""
    title = setproctitle.getproctitle()
    caplog.set_level(logging.DEBUG)
    monkeypatch.setattr(cli, "build_parser", functools.cache(cli.build_parser))

    def run(*args: str) -> Run:
        caplog.clear()
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(list(args))
        shown = setproctitle.getproctitle()
        setproctitle.setproctitle(title)  # pytest's own title back
        return Run(code, out.getvalue(), err.getvalue(), caplog.text, shown)

    yield run
    setproctitle.setproctitle(title)


def check_no_leak(secret: Secret, where: dict[str, str], context: str) -> None:
    """Assert no piece of `secret` in any of `where` (name -> text); count the checks."""
    forms = {*secret.markers, secret.text, _enc(secret.text), quote_plus(secret.text)}
    leaks = [(name, form) for name, text in where.items() for form in forms if form in text]
    BAD_INPUTS["leak checks"] += len(where) * len(forms)
    BAD_INPUTS["leaks"] += len(leaks)
    assert not leaks, f"{context}: {leaks} in {where}"


def assert_one_error(run: Run, context: str) -> None:
    lines = run.stderr.splitlines()
    assert run.code == 2, (context, run.code, run.stderr)
    assert len(lines) == 1 and lines[0].startswith("queuetop: error: "), (context, run.stderr)
    assert run.stdout == "", (context, run.stdout)


def exercise(queuetop: Callable[..., Run], secret: Secret, form: str, command: tuple[str, ...]) -> None:
    """One DSN through everything that shows a DSN: the real command line (its stdout, stderr,
    logs and title), the masked form, the title the console script sets before the slow imports."""
    dsn = FORMS[form](secret.text)
    BAD_INPUTS["secret DSNs tried"] += 1
    run = queuetop(*command, "--dsn", dsn)
    context = f"{form} {secret.text!r}: {' '.join(command)}"
    assert_one_error(run, context)
    shown = {"stdout": run.stdout, "stderr": run.stderr, "logs": run.logs, "process title": run.title,
             "mask_dsn": mask_dsn(dsn), "entry title": mask_raw(dsn), "entry title --dsn=": mask_raw(f"--dsn={dsn}")}
    try:
        target = resolve_target(dsn)
    except UsageError as exc:
        shown["usage error"] = str(exc)
    else:
        assert target is not None and has_password(target)
        shown.update({"Target.masked": target.masked, "repr": repr(target)})
    check_no_leak(secret, shown, context)


@pytest.mark.parametrize("hostile", list(HOSTILE), ids=list(HOSTILE))
def test_no_piece_of_a_hostile_password_is_shown_in_any_form(queuetop, hostile):
    for index, form in enumerate(FORMS):
        secret = Secret.around(*HOSTILE[hostile])
        exercise(queuetop, secret, form, COMMANDS[index % len(COMMANDS)])


PIECES = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")) | st.sampled_from(" \t?#/@:'\"\\%&=+;{}[]"),
                 min_size=1, max_size=8)


@settings(max_examples=100, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow,
                                                                                     HealthCheck.function_scoped_fixture])
@given(pieces=st.lists(PIECES, min_size=1, max_size=3), forms=st.lists(st.sampled_from(sorted(FORMS)), min_size=1,
                                                                        max_size=3, unique=True))
def test_no_piece_of_a_generated_password_is_shown(queuetop, pieces, forms):
    secret = Secret.around(*pieces)
    for form in forms:
        exercise(queuetop, secret, form, COMMANDS[next(_ids) % len(COMMANDS)])


@pytest.mark.parametrize("word", ["error", "connection", "failed", "invalid"])
def test_a_password_that_is_a_word_of_the_message_keeps_the_error_whole(queuetop, word):
    """Masking a password that is also a word of the message must not break the contract."""
    for form in ("uri-userinfo", "kv-password-quoted", "sqlalchemy-raw"):
        run = queuetop("engine", "init", "--dsn", FORMS[form](word))
        assert_one_error(run, form)
        assert run.stderr.startswith("queuetop: error: cannot connect to ")


@pytest.mark.parametrize(
    "key",
    ["password", "sslpassword", "oauth_client_secret", "scram_client_key", "scram_server_key", "PASSWORD"],
)
def test_every_secret_keyword_of_libpq_is_masked(key):
    secret = Secret.around("x")
    for dsn in (f"host=127.0.0.1 {key}={secret.text} dbname=app", f"postgresql://u@127.0.0.1/app?{key}={secret.text}"):
        try:
            target = resolve_target(dsn)
        except UsageError as exc:  # libpq's keywords are lower case: PASSWORD is refused, and not quoted
            shown = {"usage error": str(exc)}
        else:
            assert target is not None
            shown = {"masked": target.masked}
            assert has_password(target) and MASK in target.masked and "app" in target.masked
        check_no_leak(secret, {**shown, "mask_dsn": mask_dsn(dsn), "entry title": mask_raw(dsn)}, dsn)


@pytest.mark.parametrize("key", ["PWD", "pwd", "Password", "KeyStoreSecret"])
def test_odbc_secrets_are_masked_as_url_keys_and_in_odbc_connect(key):
    secret = Secret.around(";", "}")
    for dsn in (f"mssql+pyodbc://u@h/db?driver=FreeTDS&{key}={_enc(secret.text)}",
                "mssql+pyodbc:///?odbc_connect=" + quote_plus(f"DRIVER={{FreeTDS}};SERVER=h;{key}={_odbc_braced(secret.text)}")):
        target = resolve_target(dsn)
        assert target is not None and has_password(target) and "FreeTDS" in target.masked
        check_no_leak(secret, {"masked": target.masked, "entry title": mask_raw(dsn)}, dsn)
        assert "h" in target.masked  # the rest is shown


def test_a_path_to_a_key_is_shown_and_a_key_is_not():
    """sslkey and passfile name files, not secrets: an error about them must say which."""
    masked = mask_dsn("host=h sslkey=/etc/pg/client.key passfile=/home/u/.pgpass sslpassword=hunter22")
    assert "/etc/pg/client.key" in masked and "/home/u/.pgpass" in masked and "hunter22" not in masked


# -- abbreviations and the command line ------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("--ds", "{dsn}", "snapshot"),
        ("--ds={dsn}", "snapshot"),
        ("snapshot", "--ds", "{dsn}"),
        ("snapshot", "--ds={dsn}"),
        ("engine", "init", "--ds={dsn}"),
        ("engine", "ring", "take", "r", "--ds", "{dsn}"),
        ("--dsn", "host=127.0.0.1", "password={raw}", "snapshot"),  # a password in an argument of its own
        ("snapshot", "--dsn", "host=127.0.0.1", "{dsn}"),
    ],
    ids=["top-ds", "top-ds=", "snapshot-ds", "snapshot-ds=", "engine-init-ds=", "ring-take-ds", "stray-password", "stray-dsn"],
)
def test_dsn_abbreviations_are_refused_without_echoing_the_secret(queuetop, args):
    for form in ("uri-userinfo-raw", "kv-password-quoted", "sqlalchemy", "uri-sslpassword-param"):
        secret = Secret.around(" ", "'")
        dsn = FORMS[form](secret.text)
        given = [arg.format(dsn=dsn, raw=secret.text.replace(" ", "_")) for arg in args]
        run = queuetop(*given)
        assert_one_error(run, f"{form}: {given}")
        assert "unrecognized arguments" in run.stderr or "invalid choice" in run.stderr
        check_no_leak(Secret(secret.text, (*secret.markers, secret.text.replace(" ", "_"))),
                      {"stderr": run.stderr, "stdout": run.stdout, "logs": run.logs, "process title": run.title}, form)


def test_no_option_is_abbreviated_in_any_command():
    parser = cli.build_parser()
    stack = [parser]
    while stack:
        current = stack.pop()
        assert current.allow_abbrev is False, current.prog
        stack += [sub for action in current._actions if isinstance(action.choices, dict) for sub in action.choices.values()]


def test_argparse_messages_quote_no_secret_even_escaped():
    secret = Secret.around("\\", "'")
    dsn = f"postgresql://u:{secret.text}@h/x"
    for message in (f"unrecognized arguments: --ds={dsn}", f"invalid choice: {dsn!r}", f"invalid value: {[dsn]!r}"):
        check_no_leak(secret, {"message": mask_arguments(message, ["--ds=" + dsn, dsn])}, message)


def test_debug_tracebacks_carry_no_secret(queuetop):
    """--debug shows a traceback: it goes through the same scrubbing as the error line."""
    for form, args in (("uri-userinfo-raw", ("engine", "init")), ("kv-sslpassword-quoted", ("snapshot",)),
                       ("sqlalchemy-bad-port", ("snapshot",)), ("uri-userinfo", ("--ds", "{dsn}", "snapshot"))):
        secret = Secret.around(" ", "@")
        dsn = FORMS[form](secret.text)
        given = [arg.format(dsn=dsn) for arg in args] if "{dsn}" in "".join(args) else [*args, "--dsn", dsn]
        run = queuetop("--debug", *given)
        assert run.code == 2 and run.stderr.splitlines()[-1].startswith("queuetop: error: "), run.stderr
        assert "Traceback (most recent call last)" in run.stderr
        check_no_leak(secret, {"stderr": run.stderr, "stdout": run.stdout, "logs": run.logs}, form)


def test_log_records_lose_every_secret(caplog):
    """Whoever logs (the sampler, the worker, a library), main's record factory scrubs the record:
    the message and its traceback, for stderr and the dashboard's log file alike."""
    secret = Secret.around("'", "@")
    dsn = FORMS["kv-sslpassword-quoted"](secret.text)
    ctx = cli.Context(cli.build_parser().parse_args(["snapshot", "--dsn", dsn]))
    previous = logging.getLogRecordFactory()
    logging.setLogRecordFactory(cli._scrubbed_records(previous, ctx.scrub))
    try:
        logging.getLogger("queuetop.sampler").warning("lost the database: %s (%s)", secret.text, dsn)
        try:
            raise RuntimeError(f"failed: {_kv_quote(secret.text)}")
        except RuntimeError:
            logging.getLogger("queuetop.test").exception("with %s", _enc(secret.text))
    finally:
        logging.setLogRecordFactory(previous)
    assert "RuntimeError" in caplog.text and caplog.text.count(MASK) >= 3
    check_no_leak(secret, {"logs": caplog.text}, "logs")


# -- real processes: the title ps shows, from the entry point on ------------------------------


def _queuetop_command() -> list[str]:
    script = Path(sys.executable).with_name("queuetop")  # the console script: tui.entry:main
    return [str(script)] if script.exists() else [sys.executable, "-m", "tui"]


def test_real_processes_show_no_secret_once_the_entry_point_runs():
    """A sample of the command lines above in real processes, their /proc/PID/cmdline read as
    fast as possible while they run. What the interpreter shows before the entry point's first
    line cannot be hidden; from the moment `queuetop ...` is the title, no piece of a secret."""
    cases = [
        (Secret.around(" "), "uri-userinfo-raw", ("snapshot",)),
        (Secret.around("'", "#"), "kv-sslpassword-quoted", ("engine", "init")),
        (Secret.around("@", ";"), "mssql-odbc-connect-raw", ("snapshot", "--json")),
    ]
    started = time.monotonic()
    procs = []
    for secret, form, command in cases:
        args = [*command, "--dsn", FORMS[form](secret.text)] if form != "kv-sslpassword-quoted" else \
            [*command, f"--ds={FORMS[form](secret.text)}"]
        procs.append((secret, form, subprocess.Popen([*_queuetop_command(), *args], cwd=REPO, stdout=subprocess.PIPE,
                                                     stderr=subprocess.PIPE), time.monotonic()))
    reads: dict[int, list[tuple[float, bytes]]] = {proc.pid: [] for _s, _f, proc, _t in procs}
    while any(proc.poll() is None for _s, _f, proc, _t in procs):
        assert time.monotonic() - started < 60, "the processes did not end"
        for _secret, _form, proc, spawned in procs:
            try:
                data = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
            except OSError:
                continue
            if data:
                reads[proc.pid].append((time.monotonic() - spawned, data))
    for secret, form, proc, _spawned in procs:
        out, err = proc.communicate(timeout=10)
        run = Run(proc.returncode, out.decode(), err.decode(), "", "")
        assert_one_error(run, form)
        titled = [(at, data) for at, data in reads[proc.pid] if data.startswith(b"queuetop ")]
        assert titled, (form, reads[proc.pid][-3:])
        first = titled[0][0]
        after = [data for at, data in reads[proc.pid] if at >= first]
        before = [at for at, data in reads[proc.pid] if at < first and any(m.encode() in data for m in secret.markers)]
        BAD_INPUTS["cmdline reads"] += len(reads[proc.pid])
        BAD_INPUTS["cmdline window ms (max)"] = max(BAD_INPUTS["cmdline window ms (max)"], round(1000 * max(before, default=0)))
        check_no_leak(secret, {"stdout": run.stdout, "stderr": run.stderr,
                               **{f"cmdline read {i}": data.decode(errors="replace") for i, data in enumerate(after)}}, form)


# -- the embedded server's own refusals -------------------------------------------------------


def test_a_wrong_password_and_an_sslpassword_are_never_shown(db, queuetop):
    sock, name = db.server.socket_dir, db.name
    wrong, ssl = Secret.around(" ", "@"), Secret.around("'")
    both = Secret(wrong.text + "|" + ssl.text, wrong.markers + ssl.markers)
    dsns = {
        "uri": f"postgresql://{PASSWORD_ROLE}:{_enc(wrong.text)}@/{name}?host={sock}&sslpassword={_enc(ssl.text)}",
        "key-value": f"host={sock} dbname={name} user={PASSWORD_ROLE} password={_kv_quote(wrong.text)} "
                     f"sslpassword={_kv_quote(ssl.text)}",
        "sqlalchemy": URL.create("postgresql+psycopg", username=PASSWORD_ROLE, password=wrong.text, database=name,
                                 query={"host": sock, "sslpassword": ssl.text}).render_as_string(hide_password=False),
    }
    for form, dsn in dsns.items():
        run = queuetop("engine", "init", "--dsn", dsn)
        assert_one_error(run, form)
        assert "password authentication failed" in run.stderr and MASK in run.stderr
        check_no_leak(both, {"stdout": run.stdout, "stderr": run.stderr, "logs": run.logs, "process title": run.title}, form)


def test_the_right_password_with_an_sslpassword_is_never_shown(db, queuetop):
    ssl = Secret.around("#")
    dsn = (f"postgresql://{PASSWORD_ROLE}:{PASSWORD}@/{db.name}?host={db.server.socket_dir}"
           f"&sslpassword={_enc(ssl.text)}")
    run = queuetop("snapshot", "--json", "--dsn", dsn)
    assert run.code == 0, run.stderr
    snapshot = json.loads(run.stdout)
    assert snapshot["server"]["label"].startswith(f"postgresql://{PASSWORD_ROLE}:***@"), snapshot["server"]
    shown = {"stdout": run.stdout, "stderr": run.stderr, "logs": run.logs, "process title": run.title}
    check_no_leak(ssl, shown, "sslpassword")
    check_no_leak(Secret(PASSWORD, (PASSWORD,)), shown, "password")


def test_context_scrub_hides_every_secret_of_every_dsn(monkeypatch):
    first, second, env = Secret.around("@"), Secret.around(" "), Secret.around("'")
    monkeypatch.setenv("QUEUETOP_DSN", FORMS["kv-sslpassword-quoted"](env.text))
    args = cli.build_parser().parse_args(["snapshot", "--dsn", FORMS["uri-userinfo"](first.text),
                                          "--dsn", FORMS["sqlalchemy-password-param"](second.text)])
    ctx = cli.Context(args)
    text = " | ".join([first.text, _enc(second.text), env.text, *ctx.dsns, FORMS["kv-sslpassword-quoted"](env.text)])
    for secret in (first, second, env):
        check_no_leak(secret, {"scrubbed": ctx.scrub(text)}, "scrub")
    assert secrets_of(ctx.dsns[0])


def test_entry_point_masks_before_importing_the_cli(monkeypatch):
    """tui.entry imports nothing slow: the title is set before psycopg and SQLAlchemy load."""
    code = ("import sys; import tui.entry; "
            "print(','.join(m for m in ('psycopg', 'sqlalchemy', 'textual', 'tui.cli') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == ""
    titles: list[str] = []
    monkeypatch.setattr("tui.entry.set_title", titles.append)
    secret = Secret.around("@", " ")
    hide_arguments(["snapshot", "--dsn", FORMS["uri-userinfo-raw"](secret.text), f"--ds={FORMS['kv-password-unquoted'](secret.text)}"])
    (shown,) = titles
    check_no_leak(secret, {"title": " ".join(shown)}, "entry")
    assert shown[:2] == ["snapshot", "--dsn"] and "127.0.0.1" in shown[2]
