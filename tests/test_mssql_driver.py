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
