"""The command line's engine commands behind a lock another session holds: they give up after
their lock timeout (QUEUETOP_LOCK_TIMEOUT, default 5 s) with one line naming the holder (pid,
application_name, state, how long its transaction has been open), exit 1, nothing written; and a
statement timeout is said as one, not as a lost connection (issue 24, point 10).

Each holder is a real session of its own, in an open transaction, doing nothing (as a person's
forgotten psql would); the commands are the real `queuetop` entry point."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest

from dbcore.dialect import open_session
from queues import lease, ring
from queues.table_queue import TableQueue

HOLDER = "qt-forgotten-psql"
FAST = {"QUEUETOP_LOCK_TIMEOUT": "1"}


@contextmanager
def holding(db, *statements: str) -> Iterator[int]:
    """A session that runs `statements` in a transaction and then does nothing until the block
    ends (then it rolls back); yields its backend pid."""
    with db.connect(autocommit=False, application_name=HOLDER) as conn:
        for statement in statements:
            conn.execute(statement)
        try:
            yield conn.info.backend_pid
        finally:
            conn.rollback()


def _one_line(result) -> str:
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("queuetop: error: "), result.stderr
    return lines[0]


def _names_the_holder(line: str, pid: int) -> None:
    assert f"held by pid {pid} (application_name '{HOLDER}', idle in transaction, transaction open " in line, line


def test_an_enqueue_behind_a_table_lock_gives_up_naming_the_holder(db, cli):
    with db.connect() as conn:
        TableQueue.create(conn, "jobs")
    with holding(db, "LOCK TABLE queuetop.q_jobs IN ACCESS EXCLUSIVE MODE") as pid:
        started = time.monotonic()
        result = cli("engine", "enqueue", "jobs", "--count", "3", "--dsn", db.dsn, env=FAST, timeout=60)
        elapsed = time.monotonic() - started
    assert result.returncode == 1, result
    line = _one_line(result)
    assert line.startswith("queuetop: error: lock timeout: waited 1s (QUEUETOP_LOCK_TIMEOUT) for a RowExclusiveLock on "
                           "queuetop.q_jobs, held by pid "), line
    _names_the_holder(line, pid)
    assert elapsed < 15, f"took {elapsed:.1f}s"  # the 1 s timeout, not the holder's whole transaction
    with db.connect() as conn:
        assert conn.execute("SELECT count(*) FROM queuetop.q_jobs").fetchone() == (0,)  # nothing written


@pytest.mark.parametrize(("command", "lock", "what"), [
    (("engine", "lease", "renew", "relay", "--holder", "a", "--ttl", "60"),
     "SELECT * FROM queuetop.leases WHERE name = 'relay' FOR UPDATE", "a row of queuetop.leases"),
    (("engine", "ring", "put", "r", "--body", '{"n": 1}'),
     "SELECT * FROM queuetop.ring_tails WHERE ring_id = (SELECT id FROM queuetop.rings WHERE name = 'r') FOR UPDATE",
     "a row of queuetop.ring_tails"),  # a put takes the ring's tail
    (("engine", "init",), "SELECT pg_advisory_xact_lock(1903519093)", "an advisory lock"),  # the schema's init lock
], ids=["lease-renew", "ring-put", "init"])
def test_the_engine_commands_give_up_behind_a_row_or_advisory_lock(db, cli, command, lock, what):
    with db.connect() as conn:
        lease.acquire(conn, "relay", "a", 60)
        ring.create(conn, "r", 4)
    with holding(db, lock) as pid:
        result = cli(*command, "--dsn", db.dsn, env=FAST, timeout=60)
    assert result.returncode == 1, result
    line = _one_line(result)
    assert f"lock timeout: waited 1s (QUEUETOP_LOCK_TIMEOUT) for {what}, held by pid {pid}" in line, line
    _names_the_holder(line, pid)


def test_the_commands_wait_5_s_by_default_and_other_sessions_keep_the_servers_setting(db, monkeypatch):
    monkeypatch.delenv("QUEUETOP_LOCK_TIMEOUT", raising=False)
    with open_session(db.target, application_name="queuetop-cli:enqueue") as conn:
        assert conn.execute("SHOW lock_timeout").fetchone() == ("5s",)
    with open_session(db.target, application_name="queuetop-work:claim:jobs") as conn:  # a worker pool's: its own rules
        assert conn.execute("SHOW lock_timeout").fetchone() == ("0",)
    monkeypatch.setenv("QUEUETOP_LOCK_TIMEOUT", "0.25")
    with open_session(db.target, application_name="queuetop-cli:enqueue") as conn:
        assert conn.execute("SHOW lock_timeout").fetchone() == ("250ms",)


def test_a_lock_timeout_the_dsn_or_role_sets_is_kept_unless_queuetop_lock_timeout_is_given(db, monkeypatch):
    from dbcore.database import resolve_target

    monkeypatch.delenv("QUEUETOP_LOCK_TIMEOUT", raising=False)
    target = resolve_target(db.dsn + "&options=-c%20lock_timeout%3D1234")
    with open_session(target, application_name="queuetop-cli:enqueue") as conn:
        assert conn.execute("SHOW lock_timeout").fetchone() == ("1234ms",)
    with db.connect() as admin:
        admin.execute(f"ALTER ROLE postgres IN DATABASE {db.name} SET lock_timeout = '3s'")
    with open_session(db.target, application_name="queuetop-cli:enqueue") as conn:
        assert conn.execute("SHOW lock_timeout").fetchone() == ("3s",)
    monkeypatch.setenv("QUEUETOP_LOCK_TIMEOUT", "2")
    with open_session(target, application_name="queuetop-cli:enqueue") as conn:
        assert conn.execute("SHOW lock_timeout").fetchone() == ("2s",)


def test_the_timeout_the_dsn_sets_is_the_one_the_error_names(db, cli):
    with db.connect() as conn:
        TableQueue.create(conn, "jobs")
    with holding(db, "LOCK TABLE queuetop.q_jobs IN ACCESS EXCLUSIVE MODE") as pid:
        result = cli("engine", "enqueue", "jobs", "--dsn", db.dsn + "&options=-c%20lock_timeout%3D700", timeout=60)
    assert result.returncode == 1, result
    line = _one_line(result)
    assert "waited 700ms (lock_timeout set by the DSN's options or PGOPTIONS)" in line, line
    _names_the_holder(line, pid)


@pytest.mark.parametrize("value", ["soon", "-1", "nan", "1e9"])
def test_an_invalid_queuetop_lock_timeout_is_a_usage_error(db, cli, value):
    result = cli("engine", "enqueue", "jobs", "--dsn", db.dsn, env={"QUEUETOP_LOCK_TIMEOUT": value})
    assert result.returncode == 2, result
    assert "QUEUETOP_LOCK_TIMEOUT must be a number of seconds from 0 to 86400" in _one_line(result)


def test_a_statement_timeout_is_said_as_one_with_the_setting_not_as_a_lost_connection(db, cli):
    """The issue's case: statement_timeout in the DSN used to read "database connection failed"
    (exit 2). A held lock makes the statement outlast its 200 ms for sure (the lock timeout off)."""
    with db.connect() as conn:
        TableQueue.create(conn, "jobs")
    with holding(db, "LOCK TABLE queuetop.q_jobs IN ACCESS EXCLUSIVE MODE"):
        result = cli("engine", "enqueue", "jobs", "--dsn", db.dsn + "&options=-c%20statement_timeout%3D200",
                     env={"QUEUETOP_LOCK_TIMEOUT": "0"}, timeout=60)
    assert result.returncode == 1, result
    line = _one_line(result)
    assert line == ("queuetop: error: statement timeout: canceling statement due to statement timeout "
                    "(statement_timeout=200 in the DSN's options: raise it)"), line


def test_a_lost_connection_is_still_a_connection_failure(db):
    """The other side of the SQLSTATE split: a session terminated by the server is exit 2."""
    from dbcore.dialect import translate_error

    with db.connect() as victim, db.connect() as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (victim.info.backend_pid,))
        with pytest.raises(psycopg.OperationalError) as raised:
            victim.execute("SELECT 1")
    error = translate_error(raised.value)
    assert error is not None and error.exit_code == 2 and str(error).startswith("database connection failed: ")
