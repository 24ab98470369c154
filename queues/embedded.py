"""The embedded PostgreSQL server (pgserver) used when no DSN is given.

One server per user and host: its data lives under the user's data directory (or --data-dir),
it is started on demand by whichever queuetop process needs it first and left running for the
next one (starting PostgreSQL for every CLI call would cost a second each time);
`queuetop server stop` stops it. pgserver's own inter-process lock makes concurrent starts safe.

A start that takes seconds (the first one creates the data directory; a stopped server starts)
and the database's creation are each wrapped in the caller's `step` (the command line narrates
them on a terminal, tui/progress.py); what is already there is joined silently.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import platformdirs
import psycopg
from psycopg import sql

from dbcore.database import Target
from dbcore.errors import ConnectionFailed

from .schema import ENGINE_SQL

DATABASE = "queuetop"
ENV_DATA_DIR = "QUEUETOP_DATA_DIR"

# What a slow step runs inside: called with what it does ("starting the embedded PostgreSQL
# server..."), it returns a context manager around the step (the CLI's says so on stderr).
Step = Callable[[str], AbstractContextManager[object]]


def _silent(_what: str) -> AbstractContextManager[object]:
    return nullcontext()


def default_data_dir() -> Path:
    env = os.environ.get(ENV_DATA_DIR)
    if env:
        return Path(env).expanduser()
    return Path(platformdirs.user_data_dir("queuetop")) / "pgdata"


def _quiet_pgserver() -> None:
    # pgserver logs every pg_ctl call at INFO and platformdirs warns about XDG_RUNTIME_DIR on
    # headless hosts; neither belongs on an operator's terminal.
    logging.getLogger("pgserver").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")


def _server(data_dir: Path, step: Step = _silent) -> Any:  # pgserver.PostgresServer (pgserver is untyped)
    _quiet_pgserver()
    import pgserver  # imported late: it pulls in psutil and locks, only needed without a DSN

    data_dir = data_dir.expanduser().resolve()
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    # What this start will do, read before pgserver's lock is taken: another queuetop process may
    # start the server meanwhile, and then this one only waits for it, inside the same step.
    status = server_status(data_dir)
    if status["running"]:
        work = _silent("")
    elif not status["initialized"]:
        work = step(f"first run: creating the embedded PostgreSQL server in {_shown(data_dir)}")
    else:
        work = step(f"starting the embedded PostgreSQL server ({_shown(data_dir)})")
    try:
        with work:
            return pgserver.get_server(data_dir, cleanup_mode=None)
    except Exception as exc:  # pgserver raises bare subprocess errors with the log elsewhere
        raise ConnectionFailed(
            f"cannot start the embedded PostgreSQL server in {data_dir}: {exc} (see {data_dir / 'log'})"
        ) from None


def _shown(path: Path) -> str:
    """A path as a user would type it: under their home, with `~`."""
    home = Path.home()
    return f"~/{path.relative_to(home)}" if path.is_relative_to(home) and path != home else str(path)


def embedded_target(data_dir: Path | None = None, *, step: Step = _silent) -> Target:
    """Start (or join) the embedded server and return a target for its `queuetop` database;
    each slow step (creating the data directory, starting the server, creating the database)
    runs inside `step`."""
    server = _server(data_dir or default_data_dir(), step)
    admin_uri = server.get_uri()
    _ensure_database(admin_uri, step)
    uri = server.get_uri(DATABASE)
    label = f"embedded PostgreSQL ({server.pgdata}, database {DATABASE})"
    return Target(dialect="postgresql", conninfo=uri, masked=label, embedded=True)


def _ensure_database(admin_uri: str, step: Step = _silent) -> None:
    with psycopg.connect(admin_uri, autocommit=True, application_name="queuetop-embedded") as conn:
        exists = conn.execute(ENGINE_SQL["database_exists"], {"name": DATABASE}).fetchone()
        if exists:
            return
        with step(f"creating the database {DATABASE}"):
            try:
                conn.execute(sql.SQL(ENGINE_SQL["create_database"]).format(database=sql.Identifier(DATABASE)))
            except psycopg.errors.DuplicateDatabase:
                pass  # another queuetop process created it first


def server_status(data_dir: Path | None = None) -> dict[str, object]:
    """Describe the embedded server without starting it."""
    _quiet_pgserver()
    from pgserver.utils import PostmasterInfo

    pgdata = (data_dir or default_data_dir()).expanduser().resolve()
    info = PostmasterInfo.read_from_pgdata(pgdata) if pgdata.exists() else None
    running = info if info is not None and info.is_running() else None
    return {
        "data_dir": str(pgdata),
        "initialized": (pgdata / "PG_VERSION").exists(),
        "running": running is not None,
        "pid": running.pid if running else None,
        "dsn": running.get_uri(database=DATABASE) if running else None,
    }


def stop_server(data_dir: Path | None = None) -> bool:
    """Stop the embedded server if it runs; True when it was running."""
    status = server_status(data_dir)
    if not status["running"]:
        return False
    from pgserver import pg_ctl  # type: ignore[attr-defined]  # exported, not declared

    user = "pgserver" if os.name == "posix" and os.geteuid() == 0 else None
    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=Path(str(status["data_dir"])), user=user)
    return True
