"""Debian's PgBouncer (the `pgbouncer` package, 1.18 on bookworm), started by the tests in front of
the test server, on a Unix socket of its own, in session or transaction mode.

Its ini is the stock one's settings but for where it listens and what it serves: no
`ignore_startup_parameters` (a stock PgBouncer refuses libpq's `options`), no
`max_prepared_statements` (1.18 has none: a named prepared statement does not survive a
transaction), the stock reset query. Users are `trust`ed from an auth file; `qt_pooler_stats` may
read the admin console (`stats_users`), as an operator's monitoring role would.

When `pgbouncer` is not installed (`.ci/run` installs it), `require_pgbouncer` fails the test rather
than skipping it: CI must never pass a pooler test it did not run.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg

STATS_USER = "qt_pooler_stats"
PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
_ports = iter(range(16432, 17432))


@dataclass(frozen=True)
class PgBouncer:
    socket_dir: str
    port: int
    mode: str  # session | transaction
    pool_size: int
    log: Path

    def uri(self, database: str, user: str = "postgres") -> str:
        """A libpq URI through the pooler to `database` (the pooler's database of the same name)."""
        return f"postgresql://{user}@/{database}?host={self.socket_dir}&port={self.port}"

    @property
    def admin_uri(self) -> str:
        """The admin console (the pooler's `pgbouncer` database), as the stats user."""
        return self.uri("pgbouncer", STATS_USER)

    def show(self, what: str) -> list[dict[str, object]]:
        """`SHOW <what>` on the admin console (simple query protocol: the console knows no other)."""
        with psycopg.connect(self.admin_uri, autocommit=True) as conn:
            cur = psycopg.ClientCursor(conn)
            cur.execute(f"SHOW {what}")
            names = [d.name for d in cur.description or ()]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def require_pgbouncer() -> None:
    assert os.path.exists(PGBOUNCER), "Debian's pgbouncer is not installed (.ci/run installs it: apt-get install pgbouncer)"


@contextmanager
def running_pgbouncer(server_socket_dir: str, directory: Path, *, mode: str, pool_size: int = 20,
                      query_wait_timeout: int = 120) -> Iterator[PgBouncer]:
    """PgBouncer in `mode` in front of the server at `server_socket_dir`, every database of it
    served under its own name; stopped at the end."""
    require_pgbouncer()
    directory.mkdir(parents=True, exist_ok=True)
    port = next(_ports)
    while (directory / f".s.PGSQL.{port}").exists():
        port = next(_ports)
    auth = directory / "userlist.txt"
    auth.write_text(f'"postgres" ""\n"{STATS_USER}" ""\n"qt_pw_user" ""\n')
    log = directory / "pgbouncer.log"
    ini = directory / "pgbouncer.ini"
    ini.write_text(
        "[databases]\n"
        f"* = host={server_socket_dir}\n"
        "[pgbouncer]\n"
        f"logfile = {log}\n"
        f"pidfile = {directory / 'pgbouncer.pid'}\n"
        "listen_addr =\n"
        f"listen_port = {port}\n"
        f"unix_socket_dir = {directory}\n"
        "auth_type = trust\n"
        f"auth_file = {auth}\n"
        f"pool_mode = {mode}\n"
        f"default_pool_size = {pool_size}\n"
        "max_client_conn = 500\n"
        f"query_wait_timeout = {query_wait_timeout}\n"
        f"stats_users = {STATS_USER}\n"
        "admin_users = postgres\n"
    )
    preexec = None
    if os.geteuid() == 0:  # PgBouncer refuses to run as root: as the test server's own user
        import pwd

        entry = pwd.getpwnam("pgserver")
        os.chown(directory, entry.pw_uid, entry.pw_gid)
        for path in (auth, ini):
            os.chown(path, entry.pw_uid, entry.pw_gid)

        def preexec() -> None:
            os.setgid(entry.pw_gid)
            os.setuid(entry.pw_uid)
    # Its stderr to a file, never a pipe: PgBouncer logs every login there too, and a pipe nobody
    # reads fills up (64 KiB, some 600 connections) and then blocks the pooler in its write.
    errors = directory / "stderr.log"
    with open(errors, "wb") as stderr:
        process = subprocess.Popen([PGBOUNCER, str(ini)], preexec_fn=preexec, stdout=subprocess.DEVNULL,
                                   stderr=stderr, start_new_session=True)
    bouncer = PgBouncer(socket_dir=str(directory), port=port, mode=mode, pool_size=pool_size, log=log)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                bouncer.show("VERSION")
                break
            except psycopg.OperationalError:
                if process.poll() is not None or time.monotonic() > deadline:
                    err = errors.read_text(errors="replace")[-2000:]
                    tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                    raise AssertionError(f"pgbouncer did not start (exit {process.poll()}): {err}{tail}") from None
                time.sleep(0.05)
        yield bouncer
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)  # a fast shutdown: clients are dropped
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
