"""What a role sees, by its privileges (issue 44, point 7: docs/production.md's table is this test's).

Three roles read the same database through `snapshot --json`: a plain role (LOGIN, nothing granted),
one in `pg_monitor`, and one in `pg_monitor` with SELECT on the engine's schema. Beside them the
suite's own role holds an old transaction and a lock another session waits for, and a queue has
ready messages. What each sees is compared with the truth read as the superuser right before and
after: a figure a role may not read is `null` with a note saying why, never a calm figure.
"""

from __future__ import annotations

import json
import threading

import pytest

from queues.table_queue import TableQueue

from .conftest import run_cli, wait_until

ROLES = ("plain", "monitor", "reader")


@pytest.fixture
def roles(db):
    names = {kind: f"qt_{kind}_{db.name}" for kind in ROLES}
    with db.connect() as conn:
        TableQueue.create(conn, "lp-queue")  # before the grant: ON ALL TABLES is the tables there now
        conn.execute(f'CREATE ROLE "{names["plain"]}" LOGIN')
        conn.execute(f'CREATE ROLE "{names["monitor"]}" LOGIN IN ROLE pg_monitor')
        conn.execute(f'CREATE ROLE "{names["reader"]}" LOGIN IN ROLE pg_monitor')
        conn.execute(f'GRANT USAGE ON SCHEMA queuetop TO "{names["reader"]}"')
        conn.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA queuetop TO "{names["reader"]}"')
    yield names
    with db.connect() as conn:
        for name in names.values():
            conn.execute(f'DROP OWNED BY "{name}"')
            conn.execute(f'DROP ROLE IF EXISTS "{name}"')


def _snapshot(db, role: str) -> dict:
    result = run_cli("snapshot", "--json", "--dsn", db.server.uri(db.name, user=role))
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_what_each_role_sees(db, roles):
    assert run_cli("engine", "enqueue", "lp-queue", "--count", "7", "--dsn", db.dsn).returncode == 0
    holder = db.connect(application_name="lp-holder")
    waiter = db.connect(application_name="lp-waiter")
    try:
        holder.execute("BEGIN")
        holder.execute("SELECT txid_current()")
        holder.execute("LOCK TABLE queuetop.leases IN ACCESS EXCLUSIVE MODE")
        waiting = threading.Thread(target=lambda: waiter.execute("SELECT count(*) FROM queuetop.leases"), daemon=True)
        waiting.start()
        with db.connect() as admin:
            wait_until(lambda: admin.execute("SELECT 1 FROM pg_stat_activity WHERE application_name = 'lp-waiter' "
                                             "AND wait_event_type = 'Lock'").fetchone(), what="the waiter waiting")
            before = admin.execute("SELECT extract(epoch FROM now() - xact_start) FROM pg_stat_activity "
                                   "WHERE application_name = 'lp-holder'").fetchone()[0]
        seen = {kind: _snapshot(db, name) for kind, name in roles.items()}
        with db.connect() as admin:
            after = admin.execute("SELECT extract(epoch FROM now() - xact_start) FROM pg_stat_activity "
                                  "WHERE application_name = 'lp-holder'").fetchone()[0]
    finally:
        holder.close()
        waiting.join(10)
        waiter.close()
    holder_pid = {s["pid"] for snap in seen.values() for s in snap["sessions"] or () if s["application"] == "lp-holder"}
    assert len(holder_pid) == 1

    # The lock tree comes from pg_locks, which every role reads: all three see the wait and its root.
    for kind, snap in seen.items():
        waits = [b for b in snap["blocked"] if b["application"] == "lp-waiter"]
        assert waits and waits[0]["root_blocker"] in holder_pid, (kind, snap["blocked"])

    plain, monitor, reader = seen["plain"], seen["monitor"], seen["reader"]
    # Other roles' sessions: hidden from the plain role (state, query, transaction age), said in a note.
    hidden = next(s for s in plain["sessions"] if s["application"] == "lp-holder")
    assert hidden["state"] is None and hidden["xact_age_s"] is None and hidden["query"] in (None, "<insufficient privilege>")
    assert plain["connections"]["oldest_xact_age_s"] is None
    assert "pg_read_all_stats" in (plain["probes"]["connections"]["notes"] or "")
    # pg_monitor (through pg_read_all_stats) sees them whole: the holder's transaction age is the truth.
    for snap in (monitor, reader):
        shown = next(s for s in snap["sessions"] if s["application"] == "lp-holder")
        assert shown["state"] == "idle in transaction" and before - 1 <= shown["xact_age_s"] <= after + 1
        assert before - 1 <= snap["connections"]["oldest_xact_age_s"] <= after + 1

    # The engine's queue: only a role that may read its tables sees it, and the others are told why.
    def queue(snap: dict) -> dict | None:
        return next((q for q in snap["queues"] if q["name"] == "lp-queue"), None)

    for kind in ("plain", "monitor"):
        snap = seen[kind]
        assert snap["queues"] is None or queue(snap) is None
        said = json.dumps(snap["probes"]["queues"])
        assert "queuetop" in said and ("privilege" in said or "not visible" in said), said
    shown = queue(reader)
    assert shown is not None and shown["ready"] == 7 and shown["depth"] == 7


def test_the_job_console_says_which_source_it_could_not_read(db, roles, cli):
    """Issue 46: `queuetop jobs` by a role that may not read the engine's tables: the queue is not
    found, and the one line says which source could not be read and why, not a bare 'unknown'."""
    result = cli("jobs", "list", "lp-queue", "--dsn", db.server.uri(db.name, user=roles["monitor"]))
    assert result.returncode == 2
    line = result.stderr.strip()
    assert line.startswith("queuetop: error: unknown queue 'lp-queue'") and "not read: reference: " in line, line
    assert "permission denied" in line and len(result.stderr.splitlines()) == 1
    listed = cli("jobs", "list", "lp-queue", "--json", "--dsn", db.server.uri(db.name, user=roles["reader"]))
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["jobs"] == []
