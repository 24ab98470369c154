"""Cancel and terminate act on the session the operator chose and no other (issue 43, point 5): a
session is its pid and when its backend started, and the statement that signals checks both
(queues/admin.py, queues.sql's cancel_backend and terminate_backend). The server proves each
effect: a backend refused is still there and answers; one terminated is gone from
pg_stat_activity; a cancelled query raised QueryCanceled in its own session, which lives on."""

from __future__ import annotations

import threading
from datetime import timedelta

import psycopg
import pytest

from probes.details import session_details
from probes.postgres import open_probe_connection
from queues.admin import signal_backend

from .conftest import wait_until


def started_at(admin: psycopg.Connection, pid: int):
    row = admin.execute("SELECT backend_start FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
    return row[0] if row else None


def alive(admin: psycopg.Connection, pid: int) -> bool:
    return admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()[0] == 1


@pytest.mark.parametrize("terminate", [True, False], ids=["terminate", "cancel"])
def test_a_stale_identity_is_refused_in_the_statement_and_the_backend_lives_on(db, terminate):
    """The pid is a live backend's, but not the one chosen (its start differs, as a later backend's
    would after the chosen one ended and the pid was reused): nothing is signalled."""
    with db.connect() as admin, db.connect(application_name="qt-not-chosen") as other:
        pid = other.info.backend_pid
        started = started_at(admin, pid)
        assert started is not None
        if not terminate:  # something to cancel, were the check not made
            runner = threading.Thread(target=lambda: _sleep_and_report(other, errors), daemon=True)
            errors: list[BaseException] = []
            runner.start()
            wait_until(lambda: admin.execute("SELECT state = 'active' AND query LIKE '%%pg_sleep%%' FROM pg_stat_activity "
                                             "WHERE pid = %s", (pid,)).fetchone()[0], what="the query running")
        stale = started - timedelta(seconds=3)  # the session the operator saw, which has ended
        outcome = signal_backend(db.target, pid, terminate=terminate, started=stale)
        assert not outcome and outcome.why == "another backend" and outcome.started == started
        assert alive(admin, pid) and started_at(admin, pid) == started
        if terminate:
            assert other.execute("SELECT 42").fetchone() == (42,)  # its session answers
        else:
            # Its query runs on: cancelled, it would have ended at once with QueryCanceled.
            assert admin.execute("SELECT state FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone() == ("active",)
            assert errors == []
            admin.execute("SELECT pg_cancel_backend(%s)", (pid,))  # the test's own clean-up
            runner.join(10)


def _sleep_and_report(conn: psycopg.Connection, errors: list[BaseException]) -> None:
    try:
        conn.execute("SELECT pg_sleep(30)")
    except psycopg.Error as exc:
        errors.append(exc)


def test_terminate_on_the_chosen_session_ends_it(db):
    with db.connect() as admin:
        victim = db.connect(application_name="qt-chosen", autocommit=False)
        victim.execute("SELECT txid_current()")  # idle in transaction
        pid = victim.info.backend_pid
        outcome = signal_backend(db.target, pid, terminate=True, started=started_at(admin, pid))
        assert outcome and outcome.why is None
        wait_until(lambda: not alive(admin, pid), what="the chosen session gone from pg_stat_activity")
        # Gone: a second try says so, and signals nothing.
        again = signal_backend(db.target, pid, terminate=True, started=outcome.started)
        assert not again and again.why == "gone"
        victim.close()


def test_cancel_on_the_chosen_session_cancels_its_query_and_keeps_the_session(db):
    with db.connect() as admin, db.connect(application_name="qt-chosen-query") as victim:
        pid = victim.info.backend_pid
        errors: list[BaseException] = []
        runner = threading.Thread(target=lambda: _sleep_and_report(victim, errors), daemon=True)
        runner.start()
        wait_until(lambda: admin.execute("SELECT state = 'active' AND query LIKE '%%pg_sleep%%' FROM pg_stat_activity "
                                         "WHERE pid = %s", (pid,)).fetchone()[0], what="the query running")
        outcome = signal_backend(db.target, pid, terminate=False, started=started_at(admin, pid))
        assert outcome
        runner.join(10)
        assert len(errors) == 1 and isinstance(errors[0], psycopg.errors.QueryCanceled)
        assert alive(admin, pid) and victim.execute("SELECT 1").fetchone() == (1,)


def test_without_a_known_start_the_pid_alone_is_signalled(db):
    """A session whose start privileges hid from the probe (or a recording's from before): the pid
    alone, as before."""
    with db.connect() as admin:
        victim = db.connect(application_name="qt-pid-alone")
        pid = victim.info.backend_pid
        assert signal_backend(db.target, pid, terminate=True)
        wait_until(lambda: not alive(admin, pid), what="the session gone")
        victim.close()


def test_details_are_the_chosen_sessions_or_none(db):
    """Enter's details read the session by its identity: a stale one has none (it ended), never
    the backend that has its pid now."""
    with db.connect() as admin, db.connect(application_name="qt-detailed") as other, open_probe_connection(db.target) as conn:
        pid = other.info.backend_pid
        started = started_at(admin, pid)
        found = session_details(conn, pid, started)
        assert found["session"] is not None and found["session"]["application_name"] == "qt-detailed"
        stale = session_details(conn, pid, started - timedelta(seconds=1))
        assert stale == {"session": None, "locks": []}
        assert session_details(conn, pid)["session"] is not None  # the pid alone
