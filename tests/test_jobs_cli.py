"""`queuetop jobs` (issue 46, points 5 and 6): the command line's contract around the libraries'
actions — exit 2 under --read-only, for an unknown queue, for an action the library does not have,
for a source with no job console, without --yes and no terminal; the JSON it prints; and the audit
file (the user's alone: time, OS user, host, DSN masked, queue, filter, count, ids). The effects are
read back from the database; each library's own proofs are in tests/test_jobs_<library>.py."""

from __future__ import annotations

import json
import os
import stat

import pytest

from queues.table_queue import TableQueue

pytestmark = pytest.mark.matrix


def dead_letters(db, name: str, n: int) -> TableQueue:
    with db.connect() as conn:
        queue = TableQueue.create(conn, name)
        queue.enqueue_batch(conn, [json.dumps({"n": i, "to": f"user{i}@example.com"}) for i in range(n)])
        for message in queue.claim(conn, visibility_s=30, batch=n):
            assert queue.dead_letter_claimed(conn, message, f"boom {message.id}")
    return queue


def counts(db, queue: TableQueue) -> tuple[int, int]:
    with db.connect() as conn:
        c = queue.counts(conn)
        return c.dead, c.ready


@pytest.fixture
def audit_file(tmp_path):
    return tmp_path / "state" / "audit.jsonl"


def run(cli, audit_file, *args):
    return cli(*args, env={"QUEUETOP_AUDIT": str(audit_file)})


def test_list_show_and_bulk_retry_with_the_audit_file(db, cli, audit_file):
    queue = dead_letters(db, "cli-dead", 5)
    listed = run(cli, audit_file, "jobs", "list", "cli-dead", "--dsn", db.dsn, "--state", "dead", "--json")
    assert listed.returncode == 0, listed.stderr
    page = json.loads(listed.stdout)
    assert page["queue"] == "cli-dead" and page["source"] == "reference"
    assert len(page["jobs"]) == 5 and {j["state"] for j in page["jobs"]} == {"dead"}
    first = page["jobs"][0]
    shown = run(cli, audit_file, "jobs", "show", "cli-dead", first["id"], "--dsn", db.dsn, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["job"]["last_error"].startswith("boom")
    # Paged: two at a time, every job once.
    seen, after = [], []
    while True:
        more = run(cli, audit_file, "jobs", "list", "cli-dead", "--dsn", db.dsn, "--state", "dead", "--limit", "2", "--json", *after)
        got = json.loads(more.stdout)
        seen += [j["id"] for j in got["jobs"]]
        if got["after"] is None:
            break
        after = ["--after", got["after"]]
    assert sorted(seen) == sorted(j["id"] for j in page["jobs"])
    # Search by the arguments: JSON containment.
    found = run(cli, audit_file, "jobs", "list", "cli-dead", "--dsn", db.dsn, "--state", "dead", "--match", '{"n": 3}', "--json")
    assert [j["args"]["n"] for j in json.loads(found.stdout)["jobs"]] == [3]
    assert not audit_file.exists()  # reading writes nothing to the audit
    done = run(cli, audit_file, "jobs", "retry", "cli-dead", "--dsn", db.dsn, "--state", "dead", "--all", "--yes", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"queue": "cli-dead", "source": "reference", "action": "retry", "matched": 5,
                                       "changed": 5, "skipped": 0}
    assert counts(db, queue) == (0, 5)
    mode = stat.S_IMODE(os.stat(audit_file).st_mode)
    assert mode == 0o600 and stat.S_IMODE(os.stat(audit_file.parent).st_mode) == 0o700
    records = [json.loads(line) for line in audit_file.read_text().splitlines()]
    assert [r["event"] for r in records][-1] == "done"
    batch_ids = [i for r in records if r["event"] == "batch" for i in r["ids"]]
    assert sorted(batch_ids) == sorted(j["id"] for j in page["jobs"])
    last = records[-1]
    assert (last["queue"], last["action"], last["changed"], last["filter"]["state"]) == ("cli-dead", "retry", 5, "dead")
    assert last["os_user"] and last["host"] and last["dsn"] and "at" in last


def test_refusals_exit_2_and_change_nothing(db, cli, audit_file):
    queue = dead_letters(db, "cli-refused", 2)
    ids = [j["id"] for j in json.loads(run(cli, audit_file, "jobs", "list", "cli-refused", "--dsn", db.dsn, "--json").stdout)["jobs"]]
    assert len(ids) == 2
    cases = [
        (["retry", "cli-refused", ids[0], "--read-only", "--yes"], "--read-only"),
        (["retry", "no-such-queue", "1", "--yes"], "unknown queue 'no-such-queue'"),
        (["retry", "cli-refused", "--state", "dead", "--all"], "no terminal"),  # no --yes, no terminal
        (["retry", "cli-refused", "--all", "--yes"], "--all needs --state"),
        (["retry", "cli-refused", "--state", "dead", "--match", "{nope", "--all", "--yes"], "--match: not JSON"),
        (["retry", "cli-refused", "--state", "dead", "--yes"], "give the job ids"),
        (["list", "cli-refused", "--source", "nope"], "unknown source 'nope'"),
    ]
    for args, said in cases:
        result = run(cli, audit_file, "jobs", *args, "--dsn", db.dsn)
        assert result.returncode == 2, (args, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("queuetop: error: ") and said in lines[0], (args, result.stderr)
        assert "Traceback" not in result.stderr
    assert counts(db, queue) == (2, 0)


def test_an_action_the_library_lacks_is_refused_with_why(db, cli, audit_file):
    from jobs.registry import library_for

    reference = library_for("reference")
    assert reference is not None
    dead_letters(db, "cli-lacks", 1)
    lacking = [a for a in ("retry", "run-now", "cancel", "delete") if a not in reference.mirrors]
    if reference.pause_mirrors is None:
        result = run(cli, audit_file, "jobs", "pause", "cli-lacks", "--dsn", db.dsn, "--yes")
        assert result.returncode == 2 and "cannot pause a queue: " in result.stderr
    for action in lacking:
        result = run(cli, audit_file, "jobs", action, "cli-lacks", "1", "--dsn", db.dsn, "--yes")
        assert result.returncode == 2, result.stderr
        assert f"reference has no {action}: {reference.lacks[action]}" in result.stderr
        assert json.loads(audit_file.read_text().splitlines()[-1])["event"] == "refused"
    assert lacking or reference.pause_mirrors is None  # something to refuse was checked


def test_a_source_without_a_job_console_is_refused(db, cli, audit_file, tmp_path):
    with db.connect() as conn:
        conn.execute("CREATE TABLE mails (id bigserial PRIMARY KEY, sent_at timestamptz)")
        conn.execute("INSERT INTO mails (sent_at) SELECT NULL FROM generate_series(1, 3)")
    config = tmp_path / "config.toml"
    config.write_text('[[queues]]\nname = "mails"\ntable = "mails"\norder_by = "id"\n')
    result = run(cli, audit_file, "jobs", "list", "mails", "--dsn", db.dsn, "--config", str(config))
    assert result.returncode == 2 and "a declared table" in result.stderr, result.stderr


def test_every_library_is_built_as_the_dashboard_and_the_command_line_build_it():
    """jobs/resolve.py builds each library's console with the install's schema, its version and the
    config's options for its source (the way `J` and `queuetop jobs` reach it): every module takes them."""
    from jobs.pgboss import PgBoss9Jobs, PgBossJobs
    from jobs.registry import MODULES
    from jobs.resolve import queue_of
    from probes.config import parse_config
    from probes.configmodel import Config

    for source in MODULES:
        queue = queue_of(source, None, "q", config=Config())
        assert (queue.source, queue.library.source, queue.name) == (source, source, "q")
    assert type(queue_of("pg-boss", "pgboss", "q", version="20").library) is PgBoss9Jobs
    assert type(queue_of("pg-boss", "pgboss", "q", version="24").library) is PgBossJobs
    config = parse_config({"sources": {"pgqueuer": {"heartbeat_timeout_s": "90"}}})
    assert queue_of("pgqueuer", "public", "q", config=config).library.heartbeat_timeout_s == 90
    # An install outside the library's home schema: the snapshot names its queues `<schema>.<queue>`.
    assert queue_of("river", "other", "other.emails").name == "emails"
    assert queue_of("river", "public", "public.emails").name == "public.emails"  # the home schema's: its name as it is
    home_other = parse_config({"sources": {"river": {"schema": "other"}}})
    assert queue_of("river", "other", "other.emails", config=home_other).name == "other.emails"
