"""SQL Server's driver layer, for real: pyodbc with unixODBC's FreeTDS driver (`.ci/run` installs
both), through SQLAlchemy, against local listeners. No SQL Server runs here, so these are the
error paths a user meets first: a closed port, a host that does not resolve, a listener that
accepts and never answers, a driver that is not installed, a URL that names none. Each is one
`queuetop: error:` line, exit 2, the password masked, within the login timeout."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

pyodbc = pytest.importorskip("pyodbc", reason="the mssql extra (pyodbc) is not installed: pip install -e '.[mssql]'")

if "FreeTDS" not in pyodbc.drivers():
    pytest.skip("unixODBC has no FreeTDS driver registered: apt-get install unixodbc tdsodbc", allow_module_level=True)

PASSWORD = "pa?ss#w/rd"  # URL-quoted below: ? # / are the characters that used to leak
QUOTED = "pa%3Fss%23w%2Frd"


def _url(host_port: str, *query: str) -> str:
    return f"mssql+pyodbc://sa:{QUOTED}@{host_port}/master?" + "&".join(("driver=FreeTDS", "TDS_Version=7.4", *query))


def _fails_cleanly(cli, dsn: str, *, within: float, args: tuple[str, ...] = ("engine", "init")) -> str:
    started = time.monotonic()
    result = cli(*args, "--dsn", dsn, timeout=within + 30)
    elapsed = time.monotonic() - started
    assert result.returncode == 2, result
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("queuetop: error: "), result.stderr
    assert PASSWORD not in result.stderr + result.stdout and QUOTED not in result.stderr + result.stdout
    assert "sa:***@" in lines[0]
    assert elapsed < within, f"took {elapsed:.1f}s"
    return lines[0]


@pytest.fixture
def silent_listener() -> Iterator[int]:
    """A TCP port whose connections the kernel accepts and nobody ever answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


def test_a_closed_port_is_refused_at_once(cli):
    with socket.socket() as probe:  # a port that was free a moment ago, so nobody listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    line = _fails_cleanly(cli, _url(f"127.0.0.1:{port}"), within=10)
    assert "cannot connect to mssql+pyodbc://sa:***@127.0.0.1" in line
    assert "Unable to connect" in line and "SQLSTATE 08" in line


def test_an_unresolvable_host_is_refused_at_once(cli):
    line = _fails_cleanly(cli, _url("no-such-host.invalid:1433"), within=10)
    assert "no-such-host.invalid" in line and "SQLSTATE 08" in line


def test_a_listener_that_never_answers_ends_at_the_login_timeout_the_url_sets(cli, silent_listener):
    started = time.monotonic()
    line = _fails_cleanly(cli, _url(f"127.0.0.1:{silent_listener}", "connect_timeout=2"), within=8)
    assert time.monotonic() - started >= 2  # it did wait for the server, the timeout it was given
    assert "Timeout expired" in line and "SQLSTATE HYT00" in line


def test_without_a_timeout_in_the_url_the_default_login_timeout_still_ends_the_wait(cli, silent_listener):
    """Without a login timeout pyodbc would wait forever on such a listener (measured)."""
    line = _fails_cleanly(cli, _url(f"127.0.0.1:{silent_listener}"), within=18)
    assert "Timeout expired" in line


def test_a_driver_that_is_not_installed_is_named(cli):
    line = _fails_cleanly(cli, f"mssql+pyodbc://sa:{QUOTED}@127.0.0.1:1/master?driver=No+Such+Driver", within=10)
    assert "Can't open lib 'No Such Driver'" in line


def test_a_url_without_an_odbc_driver_says_how_to_name_one(cli):
    line = _fails_cleanly(cli, f"mssql+pyodbc://sa:{QUOTED}@127.0.0.1:1/master", within=10)
    assert "?driver=ODBC+Driver+18+for+SQL+Server" in line


@pytest.mark.parametrize("url", ["mssql+pymssql://sa:{p}@h/db", "mssql+pyodbc://sa:{p}@h/db?driver=FreeTDS&connect_timeout=0",
                                 "mssql+pyodbc://sa:{p}@h/db?driver=FreeTDS&connect_timeout=soon"])
def test_urls_queuetop_cannot_use_are_usage_errors(cli, url):
    _fails_cleanly(cli, url.format(p=QUOTED), within=10)


@pytest.mark.parametrize("args", [("engine", "lease", "acquire", "relay", "--holder", "a", "--ttl", "5"),
                                  ("engine", "ring", "create", "r", "--capacity", "3"), ("engine", "enqueue", "q"),
                                  ("engine", "work", "q", "--until-empty"), ("engine", "compact"), ("snapshot", "--json"),
                                  ("demo", "reset", "--force"), ()])
def test_the_engine_commands_on_the_seam_reach_the_driver(cli, args):
    """These commands open their session through the dialect seam: what stops them is the driver's own refusal.
    `()` is the dashboard, whose engine controls check the schema through the seam before it opens."""
    line = _fails_cleanly(cli, _url("127.0.0.1:1"), within=10, args=args)
    assert "Unable to connect" in line


def test_a_command_not_yet_on_the_seam_says_so_in_one_line(cli):
    line = _fails_cleanly(cli, _url("127.0.0.1:1"), within=10, args=("bench", "engine", "--json"))
    assert "does not reach SQL Server yet" in line


def test_the_dashboards_sampler_on_an_unreachable_sql_server_says_why():
    """The dashboard's sampler (probes on a schedule) reaches SQL Server through the seam too:
    against a closed port its snapshots say disconnected, in the driver's words, password masked."""
    from dbcore.database import resolve_target
    from probes.sampler import Sampler

    from .conftest import wait_until

    snapshots = []
    sampler = Sampler(resolve_target(_url("127.0.0.1:1")), snapshots.append, interval_s=0.2)
    sampler.start()
    try:
        snap = wait_until(lambda: snapshots and snapshots[-1], timeout=20, what="a snapshot")
    finally:
        sampler.stop()
    assert snap.extra["connected"] is False and snap.server.dialect == "mssql"
    assert snap.extra["connection_error"].startswith("Unable to connect"), snap.extra
    assert snap.probes["locks"].error == f"cannot reach the database: {snap.extra['connection_error']}"
    assert PASSWORD not in repr(snap) and QUOTED not in repr(snap)


# -- a session whose statement fails, for real ------------------------------------------------------
# tests/tds.py speaks enough TDS for pyodbc and FreeTDS to log in and run statements: these fail
# through the real driver, as a SQL Server's would, and SQLAlchemy reacts to each as it does to a
# SQL Server's (a timeout and a lost link invalidate the connection).


@pytest.fixture
def tds() -> Iterator[object]:
    from .tds import tds_listener

    with tds_listener() as listener:
        yield listener


def _probe_session(tds):
    from dbcore.database import resolve_target
    from probes.postgres import open_probe_connection

    return open_probe_connection(resolve_target(tds.url()))


PROBE_SETUP = "SET LOCK_TIMEOUT 100;"  # from dbcore/sql/mssql/probe_session.sql


@pytest.mark.parametrize(("statement", "error", "connection_lost"), [
    ("fail", "database error: Invalid object name 'fail'. (SQLSTATE 42S02)", False),
    ("hang", "statement timeout: Timeout expired (SQLSTATE HYT00)", True),  # pyodbc's query timeout, 2 s
    ("drop", "database connection failed: Unexpected EOF from the server (SQLSTATE 01000)", True),
], ids=["error", "timeout", "dropped"])
def test_a_probe_session_goes_on_after_a_statement_fails_for_real(tds, statement, error, connection_lost):
    """The issue's case: after a failed statement the next raised SQLAlchemy's PendingRollbackError
    (the timeout and the lost link invalidate the connection), and `snapshot` died. Now the
    failure is rolled back, a lost connection replaced by a new one set up as the first was."""
    session = _probe_session(tds)
    try:
        assert session.execute("SELECT 1").fetchall() == [{"value": "1"}]
        with pytest.raises(Exception) as raised:
            session.execute(f"SELECT '{statement}'")
        assert str(raised.value) == error
        assert session.execute("SELECT 1").fetchall() == [{"value": "1"}]  # and the one after it
    finally:
        session.close()
    ran_on = [n for n, batches in enumerate(tds.batches) if "SELECT 1" in batches]
    failed_on = [n for n, batches in enumerate(tds.batches) if f"SELECT '{statement}'" in batches]
    assert len(failed_on) == 1 and ran_on
    if connection_lost:  # the statement after it ran on another connection, set up as the probes' are
        assert ran_on[-1] != failed_on[0]
        assert any(PROBE_SETUP in batch for batch in tds.batches[ran_on[-1]])
    else:  # the same connection went on
        assert ran_on[-1] == failed_on[0]


def test_the_probe_runner_goes_on_to_the_next_probe_after_one_times_out(tds):
    """run_probe, as `snapshot` runs each probe in turn on one session: the probe that timed out
    reports its failure, and the next probe reports its rows."""
    from probes.sampler import run_probe

    class Probes:
        def __init__(self) -> None:
            self.notes: dict[str, str] = {}
            self.errors: dict[str, str] = {}
            self.unread: dict[str, tuple[str, ...]] = {}

        def slow(self, conn):
            return conn.execute("SELECT 'hang'").fetchall()

        def quick(self, conn):
            return conn.execute("SELECT 1").fetchall()

    session = _probe_session(tds)
    try:
        probes = Probes()
        slow, quick = (run_probe(probes, name, session) for name in ("slow", "quick"))
    finally:
        session.close()
    assert slow[1] is None and slow[0].error == "skipped: statement timeout (2000 ms) reached"
    assert quick[0].error is None and quick[1] == [{"value": "1"}]


def test_the_command_lines_engine_sessions_wait_at_most_their_lock_timeout(tds, monkeypatch):
    """SQL Server's side of the lock timeout: each connection of an engine command's session gets
    SET LOCK_TIMEOUT (QUEUETOP_LOCK_TIMEOUT, 5 s by default); other sessions keep the server's."""
    from dbcore.database import resolve_target
    from dbcore.dialect import open_session

    target = resolve_target(tds.url())
    monkeypatch.setenv("QUEUETOP_LOCK_TIMEOUT", "2.5")
    with open_session(target, application_name="queuetop-cli:enqueue") as session:
        session.execute("SELECT 1")
    with open_session(target, application_name="queuetop-work:claim:q") as session:
        session.execute("SELECT 1")
    setups = [[b.strip().splitlines()[-1] for b in batches if "LOCK_TIMEOUT" in b] for batches in tds.batches]
    assert setups == [["SET LOCK_TIMEOUT 2500;"], []], tds.batches
