"""The real `queuetop` command line, black-box in subprocesses: exit codes, one-line errors
without tracebacks, masked passwords, nothing written on failure, the DSN forms, and the output
formats PRODUCT.md promises. Plus unit tests of `mask_dsn`."""

from __future__ import annotations

import json

import psycopg
import pytest
from psycopg import sql

import queues
from dbcore.database import MASK, mask_dsn
from queues import lease, ring
from queues.table_queue import TableQueue

from .conftest import PASSWORD, PASSWORD_ROLE, drop_database

HOSTILE = 'x"; drop table y; --'


def assert_error(result, code: int) -> str:
    """The contract for every failure: exit code, one `queuetop: error:` line, no traceback."""
    assert result.returncode == code, (result.returncode, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("queuetop: error: "), result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    return lines[0]


def db_state(db) -> dict[str, list[str]]:
    """Every row of every table in public and queuetop (tables included), as text.

    rings.refused_total is left out: a refused put counts the refusal by design."""
    with db.connect() as conn:
        tables = conn.execute(
            "SELECT schemaname, tablename FROM pg_tables WHERE schemaname IN ('public', 'queuetop') ORDER BY 1, 2"
        ).fetchall()
        state = {}
        for schema_name, table in tables:
            columns = sql.SQL("(t.id, t.name, t.capacity, t.created_at)::text" if table == "rings" else "t::text")
            query = sql.SQL("SELECT {} FROM {} AS t").format(columns, sql.Identifier(schema_name, table))
            state[f"{schema_name}.{table}"] = sorted(row[0] for row in conn.execute(query))
        return state


def dsn_for(db, user: str, password: str) -> str:
    return f"postgresql://{user}:{password}@/{db.name}?host={db.server.socket_dir}"


# -- malformed input ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body_args, stdin, queues",
    [
        (("--body", '{"a": 1'), None, ("existing", "new")),
        (("--body", "not json"), None, ("new",)),
        (("--stdin",), '{"ok": 1}\n{"bad": \n{"ok": 2}\n', ("existing",)),
    ],
    ids=["truncated", "not-json", "stdin-one-bad-line"],
)
def test_malformed_json_enqueue_writes_nothing(db, cli, body_args, stdin, queues):
    with db.connect() as conn:
        TableQueue.create(conn, "existing").enqueue(conn, '{"n": 1}')
    before = db_state(db)
    for queue in queues:
        result = cli("engine", "enqueue", queue, *body_args, "--dsn", db.dsn, input=stdin)
        assert "malformed JSON" in assert_error(result, 2)
    assert db_state(db) == before  # no new queue, no new message


@pytest.mark.parametrize(
    "body_args, stdin",
    [(("--body", '{"a":  1'), None), (("--stdin",), '"fine"\n{oops}\n')],
    ids=["body", "stdin-one-bad-line"],
)
def test_malformed_json_ring_put_writes_nothing(db, cli, body_args, stdin):
    with db.connect() as conn:
        ring.create(conn, "r", 4)
        ring.put(conn, "r", ['"kept"'])
    before = db_state(db)
    result = cli("engine", "ring", "put", "r", *body_args, "--dsn", db.dsn, input=stdin)
    assert "malformed JSON" in assert_error(result, 2)
    assert db_state(db) == before
    with db.connect() as conn:
        assert ring.describe(conn, "r").refused_total == 0


def test_work_on_unknown_queue_is_a_usage_error(db, cli):
    before = db_state(db)
    result = cli("engine", "work", "nope", "--until-empty", "--dsn", db.dsn)
    assert "unknown queue 'nope'" in assert_error(result, 2)
    assert db_state(db) == before


@pytest.mark.parametrize(
    "args",
    [
        ("engine", "enqueue", HOSTILE),
        ("engine", "enqueue", "robert'); DROP TABLE y;--", "--body", "1"),
        ("engine", "work", HOSTILE, "--until-empty"),
        ("engine", "ring", "create", HOSTILE, "--capacity", "2"),
        ("engine", "ring", "put", HOSTILE),
        ("engine", "lease", "acquire", HOSTILE, "--holder", "h", "--ttl", "5"),
    ],
    ids=["enqueue", "enqueue-quote", "work", "ring-create", "ring-put", "lease-acquire"],
)
def test_hostile_names_are_refused_and_change_nothing(db, cli, args):
    with db.connect() as conn:
        conn.execute("CREATE TABLE y (id int)")
        conn.execute("INSERT INTO y VALUES (1)")
    before = db_state(db)
    result = cli(*args, "--dsn", db.dsn)
    assert "invalid" in assert_error(result, 2)
    assert db_state(db) == before  # y still there with its row; queuetop.queues etc. empty
    with db.connect() as conn:
        assert conn.execute("SELECT count(*) FROM queuetop.queues").fetchone()[0] == 0


def test_hostile_holder_is_stored_verbatim_as_a_value(db, cli):
    with db.connect() as conn:
        conn.execute("CREATE TABLE y (id int)")
    holder = "a'); DROP TABLE y; --"
    result = cli("engine", "lease", "acquire", "relay", "--holder", holder, "--ttl", "30", "--dsn", db.dsn)
    assert (result.returncode, result.stdout) == (0, "1\n"), result.stderr
    with db.connect() as conn:
        assert lease.describe(conn, "relay").holder == holder
        assert conn.execute("SELECT to_regclass('public.y') IS NOT NULL").fetchone()[0]


# -- connection problems and passwords ------------------------------------------------------


def test_unreachable_server_is_exit_2_with_password_masked(cli):
    result = cli("engine", "init", "--dsn", "postgresql://u:topsecret@127.0.0.1:1/x")
    line = assert_error(result, 2)
    assert "topsecret" not in result.stdout + result.stderr
    assert MASK in line and "127.0.0.1" in line


@pytest.mark.parametrize("form", ["uri", "sqlalchemy", "keyvalue", "uri-query"])
def test_wrong_password_is_exit_2_with_password_masked(db, cli, form):
    sock, name = db.server.socket_dir, db.name
    secret = "wrong-pw-123"
    dsn = {
        "uri": f"postgresql://{PASSWORD_ROLE}:{secret}@/{name}?host={sock}",
        "sqlalchemy": f"postgresql+psycopg://{PASSWORD_ROLE}:{secret}@/{name}?host={sock}",
        "keyvalue": f"host={sock} dbname={name} user={PASSWORD_ROLE} password='{secret} x'",
        "uri-query": f"postgresql://{PASSWORD_ROLE}@/{name}?host={sock}&password={secret}",
    }[form]
    before = db_state(db)
    result = cli("engine", "enqueue", "q", "--dsn", dsn)
    line = assert_error(result, 2)
    assert "password authentication failed" in line
    assert secret not in result.stdout + result.stderr
    assert MASK in line
    assert db_state(db) == before


@pytest.fixture
def own_database(db):
    """An empty database owned by the password role, so it may install the schema itself."""
    name = f"{db.name}_pw"
    with psycopg.connect(db.server.admin_uri, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE DATABASE {} OWNER {} TEMPLATE template0").format(
                sql.Identifier(name), sql.Identifier(PASSWORD_ROLE)
            )
        )
    yield name
    with psycopg.connect(db.server.admin_uri, autocommit=True) as conn:
        drop_database(conn, name)


def test_right_password_works_and_is_never_printed(db, cli, own_database):
    dsn = f"postgresql://{PASSWORD_ROLE}:{PASSWORD}@/{own_database}?host={db.server.socket_dir}"
    init = cli("engine", "init", "--dsn", dsn)
    assert init.returncode == 0, init.stderr
    (line,) = init.json_lines()
    assert line["schema_version"] == "1"
    assert PASSWORD not in init.stdout + init.stderr and MASK in line["database"]
    enqueue = cli("engine", "enqueue", "q", "--count", "2", "--dsn", dsn)
    assert (enqueue.returncode, enqueue.json_lines()) == (0, [{"queue": "q", "enqueued": 2}]), enqueue.stderr
    admin_dsn = f"postgresql://postgres@/{own_database}?host={db.server.socket_dir}"
    with psycopg.connect(admin_dsn) as conn:
        owner = conn.execute("SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'queuetop'").fetchone()
        assert owner == (PASSWORD_ROLE,)  # really installed as the password role
        assert conn.execute("SELECT count(*) FROM queuetop.q_q").fetchone()[0] == 2


def test_missing_privileges_is_a_clear_one_line_error(db, cli):
    """The password role may log in but has no rights on the schema (owned by postgres).

    PRODUCT.md lists missing privileges among the bad inputs that get a clear error and lose
    nothing, without pinning the code between 1 (run time) and 2 (configuration)."""
    before = db_state(db)
    result = cli("engine", "enqueue", "q", "--dsn", dsn_for(db, PASSWORD_ROLE, PASSWORD))
    assert result.returncode in (1, 2)
    line = assert_error(result, result.returncode)
    assert "permission denied" in line
    assert PASSWORD not in result.stdout + result.stderr
    assert db_state(db) == before


def test_multi_host_uri_is_a_connection_error_not_an_internal_error(cli):
    """libpq accepts several host:port pairs in a URI; none of these hosts listens."""
    result = cli("engine", "init", "--dsn", "postgresql://u:topsecret@127.0.0.1:1,127.0.0.1:2/x")
    line = assert_error(result, 2)
    assert "internal error" not in line
    assert "topsecret" not in result.stdout + result.stderr


def test_backslash_escaped_password_is_not_partly_shown(db, cli):
    # libpq reads `password=wrong\ pw-leak` as the password "wrong pw-leak".
    dsn = f"host={db.server.socket_dir} dbname={db.name} user={PASSWORD_ROLE} password=wrong\\ pw-leak"
    result = cli("engine", "init", "--dsn", dsn)
    assert "password authentication failed" in assert_error(result, 2)
    assert "pw-leak" not in result.stdout + result.stderr


# -- refusals: ring full, lease held --------------------------------------------------------


def test_ring_full_is_exit_3_with_nothing_written(db, cli):
    with db.connect() as conn:
        ring.create(conn, "r", 3)
        ring.put(conn, "r", ['"a"', '"b"'])
    before = db_state(db)
    result = cli("engine", "ring", "put", "r", "--count", "2", "--body", '{"x": 1}', "--dsn", db.dsn)
    assert "full" in assert_error(result, 3)
    assert db_state(db) == before
    with db.connect() as conn:
        state = ring.describe(conn, "r")
        assert state.used == 2 and state.refused_total > 0
    # One message still fits; then the ring is full for a single put too.
    assert cli("engine", "ring", "put", "r", "--dsn", db.dsn).returncode == 0
    assert_error(cli("engine", "ring", "put", "r", "--dsn", db.dsn), 3)


def test_unknown_ring_is_a_usage_error(db, cli):
    before = db_state(db)
    for action in ("put", "take"):
        result = cli("engine", "ring", action, "missing", "--dsn", db.dsn)
        assert "unknown ring 'missing'" in assert_error(result, 2)
    assert db_state(db) == before


def test_lease_held_by_another_is_exit_4(db, cli):
    with db.connect() as conn:
        lease.acquire(conn, "relay", "a", 60)
    before = db_state(db)
    for args in (
        ("acquire", "relay", "--holder", "b", "--ttl", "10"),
        ("renew", "relay", "--holder", "b", "--ttl", "10"),
        ("release", "relay", "--holder", "b"),
        ("renew", "relay", "--holder", "a", "--ttl", "10", "--token", "7"),  # stale token
        ("release", "relay", "--holder", "a", "--token", "7"),
    ):
        result = cli("engine", "lease", *args, "--dsn", db.dsn)
        assert_error(result, 4)
    assert db_state(db) == before


# -- --debug ----------------------------------------------------------------------------------


def test_debug_shows_a_traceback_and_the_default_does_not(db, cli):
    args = ("engine", "ring", "take", "missing", "--dsn", db.dsn)
    plain = cli(*args)
    line = assert_error(plain, 2)
    for debug_args in ((*args, "--debug"), ("--debug", *args)):  # after or before the command
        debug = cli(*debug_args)
        assert debug.returncode == 2
        assert "Traceback (most recent call last)" in debug.stderr
        assert debug.stderr.splitlines()[-1] == line


# -- DSN forms --------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["libpq-uri", "sqlalchemy-url", "key-value", "env", "dsn-before-command", "dsn-beats-env"])
def test_dsn_forms_all_work_for_init_and_enqueue(db, cli, form):
    sock, name = db.server.socket_dir, db.name
    uri = f"postgresql://postgres@/{name}?host={sock}"
    dsn = {
        "libpq-uri": uri,
        "sqlalchemy-url": f"postgresql+psycopg://postgres@/{name}?host={sock}",
        "key-value": f"host={sock} dbname={name} user=postgres",
    }.get(form, uri)
    env = None
    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ("--dsn", dsn)
    if form == "env":
        env, after = {"QUEUETOP_DSN": dsn}, ()
    elif form == "dsn-before-command":
        before, after = ("--dsn", dsn), ()
    elif form == "dsn-beats-env":
        env = {"QUEUETOP_DSN": "postgresql://u:topsecret@127.0.0.1:1/x"}
    init = cli(*before, "engine", "init", *after, env=env)
    assert init.returncode == 0, init.stderr
    assert init.json_lines()[0]["schema_version"] == "1"
    enqueue = cli(*before, "engine", "enqueue", "q", "--count", "3", *after, env=env)
    assert (enqueue.returncode, enqueue.json_lines()) == (0, [{"queue": "q", "enqueued": 3}]), enqueue.stderr
    with db.connect() as conn:
        assert conn.execute("SELECT count(*) FROM queuetop.q_q").fetchone()[0] == 3


# -- output formats ---------------------------------------------------------------------------


def test_ring_take_prints_each_body_exactly_as_put_in_order(db, cli):
    bodies = ['{"a":  1}', '[1,   2 ,3]', '"s p a c e"', '{"k" : "\\u00e9", "z":{ }}', "42", "null"]
    assert cli("engine", "ring", "create", "r", "--capacity", "4", "--dsn", db.dsn).returncode == 0
    first = cli("engine", "ring", "put", "r", "--stdin", "--dsn", db.dsn, input="\n".join(bodies[:3]) + "\n")
    assert (first.returncode, first.json_lines()) == (0, [{"ring": "r", "put": 3, "first_seq": 0}]), first.stderr
    taken = cli("engine", "ring", "take", "r", "--count", "2", "--dsn", db.dsn)
    assert (taken.returncode, taken.stdout) == (0, "".join(b + "\n" for b in bodies[:2]))
    for body in bodies[3:]:  # wraps round the 4 cells
        assert cli("engine", "ring", "put", "r", "--body", body, "--dsn", db.dsn).returncode == 0
    rest = cli("engine", "ring", "take", "r", "--count", "10", "--dsn", db.dsn)
    assert (rest.returncode, rest.stdout.splitlines()) == (0, bodies[2:])
    empty = cli("engine", "ring", "take", "r", "--dsn", db.dsn)
    assert (empty.returncode, empty.stdout, empty.stderr) == (0, "", "")


def test_lease_acquire_and_renew_print_the_token_alone(db, cli):
    def lease_cmd(*args):
        return cli("engine", "lease", *args, "--dsn", db.dsn)

    acquired = lease_cmd("acquire", "relay", "--holder", "a", "--ttl", "30")
    assert (acquired.returncode, acquired.stdout) == (0, "1\n"), acquired.stderr
    renewed = lease_cmd("renew", "relay", "--holder", "a", "--ttl", "30", "--token", "1")
    assert (renewed.returncode, renewed.stdout) == (0, "1\n"), renewed.stderr
    released = lease_cmd("release", "relay", "--holder", "a")
    assert released.returncode == 0 and released.json_lines()[0]["released"] is True
    again = lease_cmd("acquire", "relay", "--holder", "b", "--ttl", "30")
    assert (again.returncode, again.stdout) == (0, "2\n"), again.stderr


def test_work_until_empty_prints_one_summary_line(db, cli):
    with db.connect() as conn:
        queue = TableQueue.create(conn, "jobs")
        queue.enqueue_batch(conn, [json.dumps({"n": n}) for n in range(3)])
    ok = cli("engine", "work", "jobs", "--until-empty", "--dsn", db.dsn)
    assert ok.returncode == 0, ok.stderr
    (summary,) = ok.json_lines()
    assert {k: summary[k] for k in ("processed", "retried", "dead")} == {"processed": 3, "retried": 0, "dead": 0}

    with db.connect() as conn:
        queue.enqueue_batch(conn, ['{"f": 1}', '{"f": 2}'])
    failing = cli(
        "engine", "work", "jobs", "--until-empty", "--handler", "fail:1", "--max-attempts", "2", "--dsn", db.dsn
    )
    # Emptied, but not by processing: exit 1, the summary line printed all the same, one error line.
    assert failing.returncode == 1, failing.stderr
    (summary,) = failing.json_lines()
    assert {k: summary[k] for k in ("processed", "retried", "dead")} == {"processed": 0, "retried": 2, "dead": 2}
    assert failing.stderr.splitlines() == [
        "queuetop: error: 2 message(s) of queue 'jobs' went to the dead-letter table in this run "
        "(queuetop.dead_letters holds each with its last error)"]
    with db.connect() as conn:
        assert queue.counts(conn).depth == 0
        assert conn.execute("SELECT count(*) FROM queuetop.dead_letters").fetchone()[0] == 2


def test_version(cli):
    result = cli("--version")
    assert (result.returncode, result.stdout, result.stderr) == (0, f"queuetop {queues.__version__}\n", "")


# -- mask_dsn ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dsn, secret, kept",
    [
        ("postgresql://u:topsecret@db.example:5432/app", "topsecret", ["u", "db.example", "5432", "/app"]),
        ("postgres://u:topsecret@db.example/app", "topsecret", ["db.example", "/app"]),
        ("postgresql+psycopg://u:topsecret@db.example/app", "topsecret", ["postgresql+psycopg://", "db.example"]),
        ("postgresql://u:top%40secret@db.example/app", "top%40secret", ["db.example"]),
        ("postgresql://u@db.example/app?password=topsecret&sslmode=require", "topsecret", ["sslmode=require"]),
        ("postgresql://u@db.example/app?sslmode=require&password=topsecret", "topsecret", ["sslmode=require"]),
        ("postgresql+psycopg://u@/app?host=/run/pg&password=topsecret", "topsecret", ["app"]),
        ("host=db.example password='quoted value' dbname=app", "quoted value", ["host=db.example", "dbname=app"]),
        ("host=db.example password = 'quoted value' dbname=app", "quoted value", ["dbname=app"]),
        ("host=db.example password='it\\'s secret' dbname=app", "secret", ["dbname=app"]),
        ("host=db.example password=topsecret dbname=app", "topsecret", ["host=db.example", "dbname=app"]),
        ("user=u password=topsecret", "topsecret", ["user=u"]),
    ],
)
def test_mask_dsn_hides_the_password(dsn, secret, kept):
    masked = mask_dsn(dsn)
    assert secret not in masked
    assert MASK in masked
    for part in kept:
        assert part in masked


@pytest.mark.parametrize(
    "dsn", ["postgresql://u@db.example/app", "host=db.example dbname=app user=u", "postgresql+psycopg://u@/app?host=/run/pg"]
)
def test_mask_dsn_without_password_adds_no_mask(dsn):
    assert MASK not in mask_dsn(dsn)


def test_mask_dsn_handles_a_multi_host_uri():
    masked = mask_dsn("postgresql://u:topsecret@h1:5432,h2:5433/app")  # valid for libpq
    assert "topsecret" not in masked and MASK in masked


def test_mask_dsn_hides_a_backslash_escaped_unquoted_password():
    dsn = "host=h password=top\\ secret dbname=app"
    assert psycopg.conninfo.conninfo_to_dict(dsn)["password"] == "top secret"  # what libpq reads
    masked = mask_dsn(dsn)
    assert "secret" not in masked and "dbname=app" in masked


def test_multi_line_ring_body_is_refused_before_writing(db, cli):
    assert cli("engine", "ring", "create", "r1", "--capacity", "4", "--dsn", db.dsn).returncode == 0
    result = cli("engine", "ring", "put", "r1", "--body", '{"a":\n 1}', "--dsn", db.dsn)
    assert result.returncode == 2 and "single line" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    with db.connect() as conn:
        assert conn.execute("SELECT count(*) FROM queuetop.ring_cells WHERE is_full").fetchone()[0] == 0


def test_ring_take_count_is_bounded_and_clamped_to_capacity(db, cli):
    assert cli("engine", "ring", "create", "r2", "--capacity", "3", "--dsn", db.dsn).returncode == 0
    assert cli("engine", "ring", "put", "r2", "--count", "3", "--dsn", db.dsn).returncode == 0
    huge = cli("engine", "ring", "take", "r2", "--count", str(2**31), "--dsn", db.dsn)
    assert "must be between 1 and" in assert_error(huge, 2)
    taken = cli("engine", "ring", "take", "r2", "--count", "10000000", "--dsn", db.dsn)
    assert taken.returncode == 0 and taken.stdout.splitlines() == ['{"n": 1}', '{"n": 2}', '{"n": 3}']


# -- issue 15: bad input that got through ----------------------------------------------------


@pytest.mark.parametrize("body", ["NaN", "Infinity", "-Infinity", "[NaN]", '{"x": Infinity}',
                                  b'"caf\xe9"'.decode("utf-8", "surrogateescape")],
                         ids=["nan", "infinity", "-infinity", "nan-in-list", "infinity-in-object", "latin-1-not-utf-8"])
def test_bodies_postgresql_refuses_are_refused_before_the_queue_exists(db, cli, body):
    before = db_state(db)
    result = cli("engine", "enqueue", "fresh", f"--body={body}", "--dsn", db.dsn)  # = : "-Infinity" is no option
    assert "malformed JSON body" in assert_error(result, 2)
    assert db_state(db) == before  # and the queue was not created


@pytest.mark.parametrize("name", ["abc\n", "a" * 48 + "\n", "abc\r\n"], ids=["newline", "48-and-newline", "crlf"])
def test_a_name_with_a_trailing_newline_is_refused(db, cli, name):
    before = db_state(db)
    result = cli("engine", "enqueue", name, "--dsn", db.dsn)
    assert "invalid queue name" in assert_error(result, 2)
    assert db_state(db) == before


@pytest.mark.parametrize("args, says", [
    (("engine", "enqueue", "q", "--count", "99999999999999999999"), "must be between 1 and 100,000,000"),
    (("engine", "enqueue", "q", "--count", "1e20"), "is not a whole number"),
    (("snapshot", "--rates", "-1"), "must be between 0 and"),
    (("engine", "work", "q", "--visibility", "1e13"), "argument --visibility: '1e13' must be between 0.1 and 31,622,400"),
    (("engine", "lease", "renew", "l", "--holder", "h", "--ttl", "5", "--token", str(2**63)), "must be between 1 and"),
    (("engine", "compact", "--group", str(2**63)), "must be between 1 and"),
    (("engine", "work", "q", "--duration", "nan"), "is not a finite number"),
], ids=["count-huge", "count-float", "rates-negative", "visibility-huge", "token-past-bigint", "group-past-bigint", "duration-nan"])
def test_numbers_out_of_range_are_usage_errors(db, cli, args, says):
    before = db_state(db)
    result = cli(*args, "--dsn", db.dsn)
    assert says in assert_error(result, 2)
    assert db_state(db) == before


def test_a_put_larger_than_the_ring_is_refused_at_once(db, cli):
    with db.connect() as conn:
        ring.create(conn, "tiny", 5)
    before = db_state(db)
    result = cli("engine", "ring", "put", "tiny", "--count", "100000000", "--dsn", db.dsn, timeout=30)
    assert "can never fit" in assert_error(result, 3)
    assert db_state(db) == before


def test_a_handler_in_a_module_without_a_dot(db, cli, tmp_path):
    (tmp_path / "qt_plain_handlers.py").write_text("seen = []\n\ndef handle(message):\n    seen.append(message.id)\n")
    with db.connect() as conn:
        TableQueue.create(conn, "plain").enqueue_batch(conn, ["{}"] * 3)
    result = cli("engine", "work", "plain", "--handler", "qt_plain_handlers:handle", "--until-empty", "--dsn", db.dsn,
                 env={"PYTHONPATH": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1])["processed"] == 3


@pytest.mark.parametrize("config, says", [
    ('[keys]\npaus = "x"\n', "unknown binding id(s) paus"),
    ('[keys]\npause = "spacebar"\n', "no such key 'spacebar'"),
    ('[keys]\npause = "q"\n', "key 'q' would run both"),
    ('[probes]\ninterval = true\n', "probes.interval must be a number"),
], ids=["unknown-id", "impossible-key", "clash", "interval-true"])
def test_a_bad_config_stops_the_dashboard_before_it_starts(db, cli, tmp_path, config, says):
    path = tmp_path / "config.toml"
    path.write_text(config)
    result = cli("--config", str(path), "--dsn", db.dsn, "--read-only", timeout=30)
    assert says in assert_error(result, 2)


def test_a_connect_timeout_in_the_dsn_is_kept():
    from dbcore.database import connection_kwargs

    assert connection_kwargs("queuetop", 10, None, "host=db1 connect_timeout=3")["application_name"] == "queuetop"
    assert "connect_timeout" not in connection_kwargs("queuetop", 10, None, "host=db1 connect_timeout=3")
    assert "connect_timeout" not in connection_kwargs("queuetop", 10, None, "postgresql://ops@db1/app?connect_timeout=3")
    assert connection_kwargs("queuetop", 10, None, "host=db1")["connect_timeout"] == 10


def test_ps_never_shows_the_password_of_a_running_command(db, tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    from .conftest import REPO, wait_until

    with db.connect() as conn:
        TableQueue.create(conn, "ps-q")
    secret = "s3cr3t-in-argv"
    dsn = f"postgresql://postgres:{secret}@/{db.name}?host={db.server.socket_dir}"  # trust auth: the password is unused
    process = subprocess.Popen([sys.executable, "-m", "tui", "engine", "work", "ps-q", "--duration", "20", "--dsn", dsn],
                               cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        cmdline = Path(f"/proc/{process.pid}/cmdline")
        shown = wait_until(lambda: (text := cmdline.read_bytes().replace(b"\0", b" ").decode()) and "***" in text and text,
                           timeout=15, what="the process title rewritten")
        assert secret not in shown and "postgresql://postgres:***@" in shown
    finally:
        process.terminate()
        process.wait(15)


def test_the_log_file_is_readable_by_its_owner_only(tmp_path, monkeypatch):
    import stat

    from tui.app import _log_to_file

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    import logging

    saved = list(logging.getLogger().handlers)
    try:
        _log_to_file()
        [path] = list(tmp_path.rglob("queuetop.log"))
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    finally:
        root = logging.getLogger()
        for handler in list(root.handlers):
            root.removeHandler(handler)
            handler.close()
        for handler in saved:
            root.addHandler(handler)
