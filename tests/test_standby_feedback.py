"""A real hot standby's hot_standby_feedback holding the primary's xmin horizon (issue 43, point 4's
data): the standby is made with pg_basebackup from the test server (pgserver's own binaries),
started with hot_standby_feedback on, and a long REPEATABLE READ transaction on it keeps its
snapshot; the primary's walsender then carries that xmin (backend_xmin, no transaction of its
own). The probe must name the standby, as pg_stat_replication names it, with where it connects
from and the horizon's age in time, not "a walsender with no transaction age"; the server's own
VACUUM says the horizon is held there.

tests/test_xmin_horizon.py covers the same primary-side rows with a replication connection that
sends feedback messages itself (and with a slot) on every major; this one runs a real standby,
on the embedded server only (its binaries make the standby).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import psycopg

from probes.postgres import PostgresProbes, open_probe_connection
from tui.report import render
from tui.sample import sample_snapshot

from .conftest import Server, wait_until
from .test_xmin_horizon import XID_MASK, next_xid, removable_cutoff

STANDBY_NAME = "qt-replica"


@contextmanager
def real_standby(server: Server, directory: Path, name: str = STANDBY_NAME) -> Iterator[str]:
    """A hot standby of the test server, streaming from it with hot_standby_feedback on; yields
    its socket directory. Stopped (immediately) and removed at the end."""
    import pgserver

    user = "pgserver" if os.geteuid() == 0 else None  # as the test server runs (PostgreSQL refuses root)
    data = directory / "standby"
    data.mkdir(mode=0o700)
    if user is not None:
        directory.chmod(0o755)  # pytest's temporary directory, to the server's user as pgserver's own
        shutil.chown(data, user, user)
    pgserver.pg_basebackup(["-D", str(data), "-d", f"host={server.socket_dir} user=postgres application_name={name}",
                            "-X", "stream", "-R", "-c", "fast"], user=user, timeout=120)
    for leftover in data.glob(".s.PGSQL.*"):  # the primary's socket lock, copied with its data directory
        leftover.unlink()
    with open(data / "postgresql.auto.conf", "a") as conf:
        conf.write("hot_standby_feedback = on\nwal_receiver_status_interval = 1\n")
    pgserver.pg_ctl(["-w", "-o", f"-h '' -k {data}", "-l", str(data / "standby.log"), "start"], pgdata=data, user=user,
                    timeout=90)
    try:
        yield str(data)
    finally:
        pgserver.pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=data, user=user, timeout=60)
        shutil.rmtree(data, ignore_errors=True)


def test_a_real_standbys_feedback_is_named_as_the_xmin_holder_with_its_name_client_and_age(db, pg_server, tmp_path):
    with db.connect() as admin:
        admin.execute("CREATE TABLE standby_t (id int)")
        with real_standby(pg_server, tmp_path) as socket_dir:
            walsender = wait_until(lambda: admin.execute("SELECT pid FROM pg_stat_replication WHERE application_name = %s",
                                                         (STANDBY_NAME,)).fetchone(), timeout=60, what="the standby streaming")
            assert isinstance(walsender, tuple)
            pid = walsender[0]
            probes = PostgresProbes()  # a dashboard's probes: kept across cycles
            with open_probe_connection(db.target) as conn:
                probes.server(conn)
                started = time.monotonic()
                probes.connections(conn)  # the first reading of the clock, before the standby holds anything
                # A report on the standby: a REPEATABLE READ transaction that keeps its snapshot.
                standby_db = f"postgresql://postgres@/{db.name}?host={socket_dir}"
                wait_until(lambda: _can_connect(standby_db), timeout=60, what="the test database replayed on the standby")
                with psycopg.connect(standby_db, autocommit=True, application_name="qt-standby-report") as report:
                    report.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                    held = report.execute("SELECT txid_snapshot_xmin(txid_current_snapshot())").fetchone()[0]
                    # Its feedback reaches the primary: the walsender carries the standby's xmin.
                    wait_until(lambda: admin.execute("SELECT backend_xmin::text::bigint FROM pg_stat_activity WHERE pid = %s",
                                                     (pid,)).fetchone()[0] == held & XID_MASK,
                               timeout=30, what="the standby's feedback on the primary")
                    for _ in range(3):
                        next_xid(admin)  # the primary goes on writing
                        probes.connections(conn)
                    assert removable_cutoff(admin, "standby_t") == held & XID_MASK  # the server's own truth
                    c = probes.connections(conn)
                    ended = time.monotonic()
                    report.execute("ROLLBACK")
            assert (c.xmin_holder_kind, c.xmin_holder_pid, c.xmin_holder_name, c.xmin_holder_application,
                    c.xmin_holder_client) == ("standby", pid, STANDBY_NAME, STANDBY_NAME, "local")
            assert c.xmin_holder_age_xids is not None and c.xmin_holder_age_xids >= 3
            assert c.xmin_holder_age_s is not None and 0 <= c.xmin_holder_age_s <= ended - started
            said = render(replace(sample_snapshot(), connections=c))
            assert f"xmin held by: standby feedback from '{STANDBY_NAME}' at local (walsender pid {pid})" in said


def _can_connect(uri: str) -> bool:
    try:
        with psycopg.connect(uri, connect_timeout=2):
            return True
    except psycopg.OperationalError:
        return False

