"""Test fixtures: one real embedded PostgreSQL (pgserver) per test session, a template database
with the queuetop schema, and a fresh copy of it for every test that asks for `db`."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from dbcore.database import Target, resolve_target
from queues import schema

warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")

TEMPLATE = "qt_template"
PASSWORD_ROLE = "qt_pw_user"
PASSWORD = "s3cret-Pa55"
REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Server:
    socket_dir: str
    admin_uri: str

    def uri(self, database: str, user: str = "postgres") -> str:
        return f"postgresql://{user}@/{database}?host={self.socket_dir}"


@dataclass(frozen=True)
class Database:
    """A fresh database with the queuetop schema; `dsn` is what the CLI gets via --dsn."""

    name: str
    dsn: str
    server: Server

    @property
    def target(self) -> Target:
        target = resolve_target(self.dsn)
        assert target is not None
        return target

    def connect(self, **kwargs) -> psycopg.Connection:
        kwargs.setdefault("autocommit", True)
        kwargs.setdefault("application_name", "queuetop-tests")
        return psycopg.connect(self.dsn, **kwargs)


def _wait_accepting(uri: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with psycopg.connect(uri, connect_timeout=2):
                return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@pytest.fixture(scope="session", autouse=True)
def _private_embedded_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Never let a test touch the user's own embedded server."""
    os.environ["QUEUETOP_DATA_DIR"] = str(tmp_path_factory.mktemp("embedded") / "pgdata")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--server", default=None, metavar="MAJOR",
        help="run the server-matrix subset (tests marked `matrix`) on a real PostgreSQL of this major "
             "(12-18; tests/servers.py fetches it) instead of the embedded one")
    parser.addoption(
        "--matrix-elsewhere", action="store_true",
        help="leave out what a --server run takes (the matrix subset): `make test` runs it on stock 12-18 "
             "beside this run, so the embedded server need not run it again")


# The majors the large truth oracle (tests marked `oracle`) runs on besides the embedded server: 15
# is Debian's build, with LLVM and its default `jit = on`; the embedded 16 has no JIT. So every
# library's figures are checked at 250k+ rows with JIT on and off.
ORACLE_MAJORS = ("15",)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With --server, only the matrix subset runs (and the large oracle on ORACLE_MAJORS): the
    rest needs the embedded server's own parts."""
    major = config.getoption("--server")
    elsewhere = config.getoption("--matrix-elsewhere")
    if major is None and not elsewhere:
        return
    def in_subset(item: pytest.Item) -> bool:  # SQL Server's runs of a conformance test are not the matrix's
        params = getattr(item, "callspec", None)
        # A long oracle test runs on ORACLE_MAJORS only, in a module of matrix tests too.
        if item.get_closest_marker("oracle") is not None:
            marked = major in ORACLE_MAJORS
        else:
            marked = item.get_closest_marker("matrix") is not None
        return marked and (params is None or params.params.get("engine_db") != "mssql")

    # With --matrix-elsewhere, exactly the complement of a --server run: nothing falls between the two.
    keep = (lambda item: not in_subset(item)) if major is None else in_subset
    config.hook.pytest_deselected(items=[item for item in items if not keep(item)])
    items[:] = [item for item in items if keep(item)]


def pytest_report_header(config: pytest.Config) -> str:
    major = config.getoption("--server")
    return f"server: PostgreSQL {major} (tests/servers.py), the matrix subset" if major else "server: the embedded PostgreSQL (pgserver)"


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[Server]:
    major = pytestconfig.getoption("--server")
    if major is not None:
        yield from _matrix_server(major, tmp_path_factory)
        return
    import logging

    import pgserver

    logging.getLogger("pgserver").setLevel(logging.WARNING)
    pgdata = tmp_path_factory.mktemp("pg") / "data"
    server = pgserver.get_server(pgdata, cleanup_mode="delete")
    admin_uri = server.get_uri()
    socket_dir = str(server.get_postmaster_info().socket_dir)
    with psycopg.connect(admin_uri, autocommit=True) as conn:
        # Room for concurrency tests and prepared transactions; a password-only role for the wrong-password test.
        conn.execute("ALTER SYSTEM SET max_connections = 300")  # a 200-waiter pile-up beside the probes (test_pileup.py)
        conn.execute("ALTER SYSTEM SET max_prepared_transactions = 20")  # the prepared-transaction lock tests
        conn.execute("ALTER SYSTEM SET wal_level = logical")  # a logical slot (test_decoding) in tests/test_replication.py
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(PASSWORD_ROLE), sql.Literal(PASSWORD))
        )
    hba = Path(pgdata) / "pg_hba.conf"
    rules = hba.read_text()
    hba.write_text(f"local all {PASSWORD_ROLE} scram-sha-256\n" + rules)
    # max_connections, max_prepared_transactions and wal_level need a restart; pgserver's pg_ctl helper runs as the right OS user.
    user = "pgserver" if os.geteuid() == 0 else None
    # restart reuses the options pgserver started it with (socket only, no TCP).
    pgserver.pg_ctl(["-w", "-m", "fast", "-l", str(Path(pgdata) / "log"), "restart"], pgdata=Path(pgdata), user=user, timeout=60)
    _wait_accepting(admin_uri)
    yield _with_template(Server(socket_dir=socket_dir, admin_uri=admin_uri))
    server.cleanup()


def _matrix_server(major: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A real server of `major` with stock settings (tests/servers.py); the run fails, not skips,
    when it cannot be had: a matrix that silently ran nothing would read as a pass."""
    from .servers import BUILDS, MatrixServer

    if major not in BUILDS:
        raise pytest.UsageError(f"--server {major}: one of {', '.join(BUILDS)}")
    server = MatrixServer(major, tmp_path_factory.mktemp(f"pg{major}"))
    try:
        with psycopg.connect(server.admin_uri, autocommit=True) as conn:  # as on the embedded server (trust here)
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(PASSWORD_ROLE), sql.Literal(PASSWORD)))
        yield _with_template(Server(socket_dir=server.socket_dir, admin_uri=server.admin_uri))
    finally:
        server.cleanup()


def _with_template(server: Server) -> Server:
    """The template database every test's `db` is copied from, with the engine's schema."""
    with psycopg.connect(server.admin_uri, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(TEMPLATE)))
    with psycopg.connect(server.uri(TEMPLATE), autocommit=True) as conn:
        schema.install(conn)
    return server


_counter = itertools.count()

# The fault suite's figures (tests/test_faults.py), one dict per fault and mode, shown at the end of the run,
# with the fuzz test's count of generated command lines (tests/test_fuzz.py).
FAULT_FIGURES: list[dict[str, object]] = []
BAD_INPUTS: Counter[str] = Counter()


def report_fault(fault: str, *, injected: int, survived: int, messages: int = 0, lost: int = 0, duplicated: int = 0,
                 **more: object) -> None:
    """Add one fault's figures to the run's `fault suite` summary."""
    FAULT_FIGURES.append(dict(fault=fault, injected=injected, survived=survived, messages=messages, lost=lost,
                              duplicated=duplicated, **more))


def pytest_terminal_summary(terminalreporter) -> None:
    if not FAULT_FIGURES and not BAD_INPUTS:
        return
    terminalreporter.write_sep("-", "fault suite")
    if BAD_INPUTS["tried"]:
        terminalreporter.write_line(
            f"generated command lines (test_fuzz): tried {BAD_INPUTS['tried']}, refused cleanly {BAD_INPUTS['refused cleanly']}"
            f" (one line, the contract's exit code, nothing written), accepted {BAD_INPUTS['accepted']}")
    if BAD_INPUTS["leak checks"]:  # tests/test_secrets.py
        terminalreporter.write_line(
            f"secrets (test_secrets): DSN forms × passwords tried {BAD_INPUTS['secret DSNs tried']}, leak checks "
            f"{BAD_INPUTS['leak checks']}, leaks {BAD_INPUTS['leaks']}; /proc/PID/cmdline read {BAD_INPUTS['cmdline reads']} "
            f"times, a secret there at most {BAD_INPUTS['cmdline window ms (max)']} ms after exec (before the entry point runs)")
    if BAD_INPUTS["recording lines tried"] or BAD_INPUTS["recording lines fuzzed"]:  # tests/test_recording_faults.py
        terminalreporter.write_line(
            f"recordings (test_recording_faults): bad lines tried {BAD_INPUTS['recording lines tried']}, handled cleanly "
            f"{BAD_INPUTS['recording lines handled cleanly']}; fuzzed lines {BAD_INPUTS['recording lines fuzzed']}, handled "
            f"cleanly {BAD_INPUTS['recording lines fuzzed: handled cleanly']}; files cut short {BAD_INPUTS['recordings cut short']}, "
            f"bytes damaged {BAD_INPUTS['recordings damaged']}; full disks {BAD_INPUTS['full disks (tmpfs)']} tmpfs, "
            f"{BAD_INPUTS['full disks (RLIMIT_FSIZE)']} RLIMIT_FSIZE, each left valid gzip")
    if not FAULT_FIGURES:
        return
    for row in FAULT_FIGURES:
        more = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in row.items()
                         if k not in ("fault", "injected", "survived", "messages", "lost", "duplicated"))
        messages = (f"; messages {row['messages']}, lost {row['lost']}, processed more than once {row['duplicated']}"
                    if row["messages"] else "")
        terminalreporter.write_line(f"{row['fault']}: faults injected {row['injected']}, survived {row['survived']}{messages}"
                                    + (f"; {more}" if more else ""))
    total = {key: sum(int(row[key]) for row in FAULT_FIGURES) for key in ("injected", "survived", "messages", "lost", "duplicated")}
    terminalreporter.write_line(
        f"total: faults injected {total['injected']}, survived {total['survived']}; messages {total['messages']}, "
        f"lost {total['lost']}, processed more than once {total['duplicated']}")


@pytest.fixture
def db(pg_server: Server, request: pytest.FixtureRequest) -> Iterator[Database]:
    database = make_database(pg_server)
    yield database
    with psycopg.connect(pg_server.admin_uri, autocommit=True) as conn:
        drop_database(conn, database.name)


def drop_database(admin: psycopg.Connection, name: str) -> None:
    """DROP DATABASE, ending its sessions first (`WITH (FORCE)` is PostgreSQL 13's; the matrix runs 12).
    A session that connects in between makes the drop fail: ended again, then dropped."""
    for attempt in range(5):
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                      (name,))
        try:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
            return
        except psycopg.errors.ObjectInUse:
            if attempt == 4:
                raise
            time.sleep(0.2)


def make_database(pg_server: Server, prefix: str = "t") -> Database:
    """A fresh database with the schema, from the template (for a fixture of a wider scope than `db`;
    the session's server goes with its databases at the end)."""
    name = f"{prefix}{os.getpid()}_{next(_counter)}"
    with psycopg.connect(pg_server.admin_uri, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(TEMPLATE)))
    return Database(name=name, dsn=pg_server.uri(name), server=pg_server)


MSSQL_ENV = "QUEUETOP_MSSQL_DSN"
# Before each live test on SQL Server: the engine's rows go, the schema stays (the database
# QUEUETOP_MSSQL_DSN names must be a scratch database; the suite installs the schema there).
MSSQL_RESET = """
SET NOCOUNT ON;
DECLARE @drop nvarchar(max) = N'';
SELECT @drop = @drop + N'DROP TABLE queuetop.' + QUOTENAME(t.name) + N';'
FROM sys.tables AS t WHERE t.schema_id = SCHEMA_ID(N'queuetop') AND t.name LIKE N'q[_]%';
EXEC sys.sp_executesql @drop;
DELETE FROM queuetop.queues; DELETE FROM queuetop.dead_letters; DELETE FROM queuetop.rings;
DELETE FROM queuetop.leases; DELETE FROM queuetop.tasks; DELETE FROM queuetop.task_status_deltas;
DELETE FROM queuetop.task_status_naive; DELETE FROM queuetop.compactor_runs; DELETE FROM queuetop.eo_payloads;
DELETE FROM queuetop.eo_inbox; DELETE FROM queuetop.eo_outbox; DELETE FROM queuetop.eo_effects;
DELETE FROM queuetop.outbox; DELETE FROM queuetop.subscriptions;
"""


@dataclass(frozen=True)
class EngineDatabase:
    """A database with the engine's schema in one dialect: the conformance suite's subject.
    `connect()` opens a session through the dialect seam, as the engine's own commands do."""

    dialect: str
    dsn: str
    target: Target

    def connect(self) -> Any:
        from dbcore.dialect import open_session

        return open_session(self.target, application_name="queuetop-tests")


@pytest.fixture(params=["postgresql", "mssql"])
def engine_db(request: pytest.FixtureRequest) -> Iterator[EngineDatabase]:
    """The conformance suite runs each test once per dialect: on PostgreSQL always (a fresh
    database of the embedded server), on SQL Server only when QUEUETOP_MSSQL_DSN names one. No
    SQL Server runs on this machine or in CI, so there those runs are skipped, saying so."""
    request.node.add_marker(pytest.mark.conformance)
    if request.param == "postgresql":
        db = request.getfixturevalue("db")
        yield EngineDatabase("postgresql", db.dsn, db.target)
        return
    dsn = os.environ.get(MSSQL_ENV)
    if not dsn:
        pytest.skip(f"SQL Server live run: no server here; set {MSSQL_ENV}=mssql+pyodbc://… (a scratch database) to run it")
    target = resolve_target(dsn)
    assert target is not None and target.dialect == "mssql", f"{MSSQL_ENV} must be an mssql+pyodbc:// URL"
    database = EngineDatabase("mssql", dsn, target)
    with database.connect() as session:
        schema.install(session)
        session.execute(MSSQL_RESET)
    yield database


@dataclass(frozen=True)
class CliResult:
    returncode: int
    stdout: str
    stderr: str

    def json_lines(self) -> list[dict]:
        return [json.loads(line) for line in self.stdout.splitlines() if line.strip()]


def run_cli(*args: str, input: str | None = None, timeout: float = 120, env: dict[str, str] | None = None) -> CliResult:
    """Run the real `queuetop` entry point in a separate process."""
    full_env = {key: value for key, value in os.environ.items() if key != "QUEUETOP_DSN"}
    full_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-m", "tui", *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        cwd=REPO,
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def cli() -> Callable[..., CliResult]:
    return run_cli


NODE_PEERS = REPO / ".cache" / "node-peers"  # `make test` installs tests/peers/package.json here too


@pytest.fixture(scope="session")
def node_peers() -> Path:
    """The Node.js peer libraries (pg-boss, Graphile Worker) installed from tests/peers' lock
    file; skips only where Node.js itself is absent, installs what is missing otherwise."""
    import fcntl
    import shutil

    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("Node.js and npm are not installed here: the pg-boss and Graphile Worker tests need them")
    source = REPO / "tests" / "peers"
    lock = (source / "package-lock.json").read_text()
    NODE_PEERS.mkdir(parents=True, exist_ok=True)
    stamp = NODE_PEERS / ".installed"
    with open(NODE_PEERS / ".lock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)  # one installer at a time
        if not stamp.exists() or stamp.read_text() != lock:
            for name in ("package.json", "package-lock.json"):
                shutil.copy(source / name, NODE_PEERS / name)
            subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--silent"], cwd=NODE_PEERS, check=True,
                           capture_output=True, timeout=600)
            stamp.write_text(lock)
    return NODE_PEERS / "node_modules"


class NodeWorkload:
    """A node script from tests/peers run against a test database: it builds its workload
    through the library's own API, says {"ready": true}, and holds its workers until close()."""

    def __init__(self, modules: Path, script: str, *args: str) -> None:
        env = {**os.environ, "QUEUETOP_NODE_PEERS": str(modules)}
        self.proc = subprocess.Popen(["node", str(REPO / "tests" / "peers" / script), *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line.strip():
            self.proc.kill()
            _, err = self.proc.communicate(timeout=10)
            raise AssertionError(f"{script} failed before its workload was ready: {err[-2000:]}")
        self.report = json.loads(line)

    def close(self) -> None:
        end_process(self.proc)


def end_process(proc: subprocess.Popen) -> None:
    """A node script's end: its stdin closed (it stops its workers and exits), killed if it has
    not within 30 s."""
    if proc.stdin:
        proc.stdin.close()
    try:
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()


def flush_stats(conn: psycopg.Connection) -> None:
    """Make `conn`'s table statistics visible to other sessions: pg_stat_force_next_flush() from
    PostgreSQL 15; before it a backend sends its counters when it goes idle, at most every 500 ms,
    so a caller polling for them runs this on each poll (each statement is a new chance)."""
    conn.execute("SELECT pg_stat_force_next_flush()" if conn.info.server_version >= 150000 else "SELECT 1")


def wait_until(predicate: Callable[[], object], *, timeout: float = 10.0, interval: float = 0.02, what: str = "condition") -> object:
    """Poll `predicate` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class PrivateServer:
    """A private embedded PostgreSQL that a test may restart, stop and start again (the fault
    suite's; the multi-host dashboard's second server), never the shared one."""

    def __init__(self, pgdata: Path, *, max_connections: int = 40, reserved: int = 3, prefix: str = "faults") -> None:
        import pgserver

        self.pgdata = pgdata
        self._server = pgserver.get_server(pgdata, cleanup_mode="delete")
        self.admin_uri = self._server.get_uri()
        self.socket_dir = str(self._server.get_postmaster_info().socket_dir)
        self._user = "pgserver" if os.geteuid() == 0 else None  # as the conftest's server
        with psycopg.connect(self.admin_uri, autocommit=True) as conn:
            conn.execute(f"ALTER SYSTEM SET max_connections = {max_connections}")
            conn.execute(f"ALTER SYSTEM SET superuser_reserved_connections = {reserved}")
        self.restart("fast")
        self.server = Server(socket_dir=self.socket_dir, admin_uri=self.admin_uri)
        self._databases = 0
        self._prefix = prefix

    def _pg_ctl(self, *args: str) -> None:
        import pgserver

        pgserver.pg_ctl(["-w", *args], pgdata=self.pgdata, user=self._user, timeout=90)

    def restart(self, mode: str = "immediate") -> None:
        """Stop (immediate: no checkpoint, every session cut, crash recovery at start) and start
        again with the options the server was started with (pg_ctl keeps them in postmaster.opts)."""
        self._pg_ctl("-m", mode, "-l", str(self.pgdata / "log"), "restart")
        _wait_accepting(self.admin_uri)

    def stop(self) -> None:
        self._pg_ctl("-m", "immediate", "stop")

    def start(self) -> None:
        self.restart()  # restart of a stopped server starts it, with the saved options

    def database(self) -> Database:
        self._databases += 1
        name = f"{self._prefix}_{os.getpid()}_{self._databases}"
        with psycopg.connect(self.admin_uri, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        uri = self.server.uri(name)
        with psycopg.connect(uri, autocommit=True) as conn:
            schema.install(conn)
        return Database(name=name, dsn=uri, server=self.server)

    def cleanup(self) -> None:
        if not (self.pgdata / "postmaster.pid").exists():
            self.start()  # a test that failed while the server was down: pgserver stops what runs
        self._server.cleanup()


@pytest.fixture(scope="session")
def pgbouncer_session(pg_server: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Debian's PgBouncer in session mode in front of the test server (tests/pgbouncer.py)."""
    from .pgbouncer import STATS_USER, running_pgbouncer

    _ensure_role(pg_server, STATS_USER)
    with running_pgbouncer(pg_server.socket_dir, tmp_path_factory.mktemp("pgb-session"), mode="session") as bouncer:
        yield bouncer


@pytest.fixture(scope="session")
def pgbouncer_transaction(pg_server: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Debian's PgBouncer in transaction mode in front of the test server (tests/pgbouncer.py)."""
    from .pgbouncer import STATS_USER, running_pgbouncer

    _ensure_role(pg_server, STATS_USER)
    with running_pgbouncer(pg_server.socket_dir, tmp_path_factory.mktemp("pgb-transaction"), mode="transaction") as bouncer:
        yield bouncer


@pytest.fixture(params=["session", "transaction"])
def pgbouncer(request: pytest.FixtureRequest) -> Any:
    """PgBouncer in each mode: a test taking it runs once per pool mode."""
    return request.getfixturevalue(f"pgbouncer_{request.param}")


def _ensure_role(server: Server, role: str) -> None:
    with psycopg.connect(server.admin_uri, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone() is None:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
