"""pg-boss's job console (jobs/pgboss.py), versions 10 and 9, against the real library: jobs made,
failed and worked by pg-boss itself (npm, driven by tests/peers/pgboss_jobs.mjs), each action
proved by what pg-boss's own worker then does, or by its own getJobById.

- Lists agree with ground truth on its tables (fetchNextJob's meaning of each state) and with the
  snapshot's figures of each queue; keyset pages visit every job once, both ways; kind/match/text
  search; a list no index leads reads at most `scan_rows` jobs and says where it stopped.
- job(): the error pg-boss kept (a failed handler's Error), attempts, an archived job (as getJobById
  finds it); the schema version decides 9 or 10, given or read at run time.
- retry (v10 retryJobs; v9 resumeJobs): the failed job is run by pg-boss's worker; run-now: a job
  scheduled an hour ahead is in the worker's first batch, its twin is not; cancel: the worker runs
  the jobs around it, never it, and an active job cancelled stays cancelled when pg-boss's complete
  and fail come for it; delete (v10): gone from getJobById; a job that changed state since it was
  listed is skipped and counted. pg-boss 9's missing delete, and pause, are refused with why.
- pg-boss sends no notification (its workers poll): its sources hold no LISTEN/NOTIFY.
"""

from __future__ import annotations

import json
import os
import queue as queues
import re
import subprocess
import tempfile
import threading
import uuid

import pytest

from jobs.bulk import act_on_ids, run_bulk, write_session
from jobs.model import ActionRefused, JobFilter
from jobs.pgboss import LIBRARY, PgBoss9Jobs, PgBossJobs
from jobs.registry import library_for
from probes.sampler import run_cycle

from .conftest import REPO, end_process, run_cli, wait_until
from .jobpages import every_page, ids_of, read

pytestmark = pytest.mark.matrix

MAJORS = pytest.mark.parametrize("major", ["10", "9"], ids=["pg-boss-10", "pg-boss-9"])

# fetchNextJob's meaning of each state, by version (written out here, apart from the module's SQL).
TRUTH = {
    "10": """
SELECT j.id::text AS id,
       CASE WHEN j.state IN ('completed', 'cancelled') THEN 'done'
            WHEN j.state = 'failed' THEN 'dead'
            WHEN j.state = 'active' THEN 'in_flight'
            WHEN j.start_after > now() THEN 'delayed'
            WHEN j.policy = 'singleton' AND EXISTS (SELECT 1 FROM pgboss.job a WHERE a.name = j.name AND a.state = 'active'
                                                    AND a.policy = 'singleton'
                                                    AND COALESCE(a.singleton_key, '') = COALESCE(j.singleton_key, '')) THEN 'blocked'
            ELSE 'ready' END AS state
FROM pgboss.job j WHERE j.name = %(queue)s ORDER BY j.id""",
    "9": """
SELECT j.id::text AS id,
       CASE WHEN j.state IN ('completed', 'cancelled') THEN 'done'
            WHEN j.state IN ('failed', 'expired') THEN 'dead'
            WHEN j.state = 'active' THEN 'in_flight'
            WHEN j.startafter > now() THEN 'delayed'
            ELSE 'ready' END AS state
FROM pgboss.job j WHERE j.name = %(queue)s ORDER BY j.id""",
}
STATES = ("ready", "delayed", "blocked", "in_flight", "dead", "done")


def truth(db, major: str, name: str) -> dict[str, list[str]]:
    with db.connect() as conn:
        rows = conn.execute(TRUTH[major], {"queue": name}).fetchall()
    out: dict[str, list[str]] = {s: [r[0] for r in rows if r[1] == s] for s in STATES}
    out["delayed"] = sorted(out["delayed"] + out["blocked"])  # the snapshot's delayed holds the blocked
    out["all"] = [r[0] for r in rows]
    return out


class Boss:
    """tests/peers/pgboss_jobs.mjs: pg-boss's own API in a node process, its jobs built, then
    commands (`ask`) answered line by line; the batches its worker is handed land in `batches`."""

    def __init__(self, modules, dsn: str, major: str, *extra: str) -> None:
        self.major = major
        self.stderr = tempfile.TemporaryFile(mode="w+")
        env = {**os.environ, "QUEUETOP_NODE_PEERS": str(modules)}
        self.proc = subprocess.Popen(["node", str(REPO / "tests" / "peers" / "pgboss_jobs.mjs"), dsn, major, *extra],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True, env=env)
        self.replies: queues.Queue[dict] = queues.Queue()
        self.batches: list[list[str]] = []
        self.seq = 0
        threading.Thread(target=self._read, daemon=True).start()
        ready = self._reply(60)
        assert ready.get("ready"), ready
        self.ids: dict[str, str] = ready["ids"]

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            message = json.loads(line)
            if "batch" in message:
                self.batches.append(message["batch"])
            else:
                self.replies.put(message)
        self.replies.put({"exited": self.proc.wait()})

    def _reply(self, timeout: float) -> dict:
        try:
            message = self.replies.get(timeout=timeout)
        except queues.Empty:
            message = {"exited": None}
        if "exited" in message:
            self.stderr.seek(0)
            raise AssertionError(f"pgboss_jobs.mjs answered nothing: {self.stderr.read()[-3000:]}")
        return message

    def ask(self, op: str, **args) -> dict:
        self.seq += 1
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, "seq": self.seq, **args}) + "\n")
        self.proc.stdin.flush()
        reply = self._reply(30)
        assert reply.get("seq") == self.seq and "error" not in reply, reply
        return reply

    def states(self, queue: str, *tags_or_ids: str) -> dict[str, str | None]:
        """getJobById's state of each job (by tag or id), keyed as asked."""
        ids = [self.ids.get(t, t) for t in tags_or_ids]
        got = self.ask("get", queue=queue, ids=ids)["jobs"]
        return {t: got[i] for t, i in zip(tags_or_ids, ids, strict=True)}

    def close(self) -> None:
        try:
            end_process(self.proc)
        finally:
            self.stderr.close()


def start(request, db, node_peers, major: str, *extra: str) -> Boss:
    with db.connect() as conn:
        if conn.info.server_version < 130000:  # gen_random_uuid() is core from 13; pg-boss's docs ask for pgcrypto before
            conn.execute("CREATE EXTENSION IF NOT EXISTS pgcrypto")
    boss = Boss(node_peers, db.dsn, major, *extra)
    request.addfinalizer(boss.close)
    return boss


def version_of(db) -> str:
    with db.connect() as conn:
        return str(conn.execute("SELECT max(version) FROM pgboss.version").fetchone()[0])


@MAJORS
def test_lists_agree_with_its_tables_and_the_snapshot_and_show_its_errors(request, db, node_peers, major):
    boss = start(request, db, node_peers, major, "archive")
    version = version_of(db)
    lib = library_for("pg-boss")("pgboss", version)  # as the console makes it: the probe's Detection.version
    assert type(lib) is (PgBossJobs if major == "10" else PgBoss9Jobs)
    assert version == ("20" if major == "9" else "24")
    found_later = LIBRARY("pgboss")  # no version given: its version table read at the first statement
    snap = {q.name: q for q in run_cycle(db.target).queues if q.source == "pg-boss"}
    for name in ("mail", "solo", "bulk"):
        want = truth(db, major, name)
        figures = snap[name]
        for state in STATES:
            listed = ids_of(every_page(db.target, lib, name, JobFilter(state=state), limit=1000))
            assert listed == want[state], (name, state)
            assert ids_of(every_page(db.target, found_later, name, JobFilter(state=state), limit=1000)) == listed
        for state, figure in (("ready", figures.ready), ("delayed", figures.delayed), ("in_flight", figures.in_flight),
                              ("dead", figures.dead)):
            assert len(want[state]) == figure, (name, state)
        assert ids_of(every_page(db.target, lib, name, JobFilter(), limit=1000)) == want["all"]
    # And as `queuetop jobs list` finds the queue (by its snapshot name) and lists it.
    listed = run_cli("jobs", "list", "mail", "--state", "dead", "--json", "--dsn", db.dsn)
    assert listed.returncode == 0, listed.stderr
    assert [j["id"] for j in json.loads(listed.stdout)["jobs"]] == truth(db, major, "mail")["dead"]
    ids = boss.ids
    mail = truth(db, major, "mail")
    # The workload's shape, so that each state above was a real check.
    assert set(mail["dead"]) == {ids["F1"], ids["F2"]} and mail["in_flight"] == [ids["A1"]]
    assert set(mail["delayed"]) == {ids[t] for t in ("R1", "L1", "L2", "L3")}
    assert set(mail["ready"]) == {ids[t] for t in ("W1", "W2", "W3")}
    assert set(mail["done"]) == {ids[t] for t in ("D1", "D2", "D3")}  # the archived one has left the job table
    solo = truth(db, major, "solo")
    if major == "10":  # a singleton queue: S2 is due but held back while S1 is active
        assert solo["blocked"] == [ids["S2"]] and figures_of(snap, "solo") == (0, 1, 1, 1)
    else:  # v9 holds it back only for workers passing enforceSingletonQueueActiveLimit (config, not database)
        assert solo["ready"] == [ids["S2"]] and figures_of(snap, "solo") == (1, 0, 0, 1)
        [page] = every_page(db.target, lib, "solo", JobFilter(state="blocked"), limit=10)
        assert page.jobs == [] and "enforceSingletonQueueActiveLimit" in (page.note or "")
    assert ids["gone"] not in ids_of(every_page(db.target, lib, "mail", JobFilter(), limit=1000))

    def show(conn):
        return {tag: lib.job(conn, "mail", ids[tag]) for tag in ("F1", "R1", "A1", "D1", "gone")}

    jobs = read(db.target, show)
    failed = jobs["F1"]
    assert (failed.state, failed.status, failed.kind, failed.attempts, failed.max_attempts) == ("dead", "failed", "mail", 1, 1)
    # The error as pg-boss kept it: the Error its fail() was given, serialized.
    [error] = failed.errors
    assert error["message"] == "smtp timeout F1" and error["name"] == "Error" and "stack" in error
    assert failed.last_error == "smtp timeout F1" and failed.held_by is None and failed.args == {"to": "f1@example.com", "tag": "F1"}
    assert "output" not in failed.extra and "output" in jobs["D1"].extra  # an error in errors, a result in extra
    backing_off = jobs["R1"]
    assert (backing_off.state, backing_off.status, backing_off.attempts, backing_off.max_attempts) == ("delayed", "retry", 1, 4)
    assert backing_off.last_error == "try later" and backing_off.extra["retry_delay"] == 600
    assert (jobs["A1"].state, jobs["A1"].status, jobs["A1"].errors) == ("in_flight", "active", [])
    assert (jobs["D1"].state, jobs["D1"].status, jobs["D1"].last_error, jobs["D1"].errors) == ("done", "completed", None, [])
    gone = jobs["gone"]  # found as getJobById finds it (v9 always, v10 with includeArchive): out of the queue, done
    assert (gone.state, gone.status, gone.extra["archived_on"] is not None) == ("done", "completed", True)
    assert read(db.target, lambda conn: lib.job(conn, "mail", str(uuid.uuid4()))) is None
    assert read(db.target, lambda conn: lib.job(conn, "mail", "not-a-uuid")) is None
    assert read(db.target, lambda conn: lib.job(conn, "solo", ids["F1"])) is None  # another queue's job


def figures_of(snap, name: str) -> tuple[int | None, ...]:
    q = snap[name]
    return (q.ready, q.delayed, q.blocked, q.in_flight)


@MAJORS
def test_keyset_pages_searches_and_the_bounded_scan(request, db, node_peers, major):
    start(request, db, node_peers, major)
    lib = LIBRARY("pgboss", version_of(db))
    bulk = truth(db, major, "bulk")["all"]
    assert len(bulk) == 60 and bulk == sorted(bulk)  # uuid order is the text order of their canonical form
    for flt in (JobFilter(), JobFilter(state="ready")):
        pages = every_page(db.target, lib, "bulk", flt, limit=7)
        assert ids_of(pages) == bulk and len(pages) == 9
        assert ids_of(every_page(db.target, lib, "bulk", flt, limit=7, newest_first=True)) == bulk[::-1]
    with db.connect() as conn:
        rows = dict(conn.execute("SELECT id::text, data FROM pgboss.job WHERE name = 'bulk'").fetchall())
    vip = sorted(i for i, d in rows.items() if d["tag"] == "vip")
    ones = sorted(i for i, d in rows.items() if d["to"].startswith("user1"))
    assert len(vip) == 20 and len(ones) == 11  # user1, user10..user19
    assert ids_of(every_page(db.target, lib, "bulk", JobFilter(match={"tag": "vip"}), limit=50)) == vip
    assert ids_of(every_page(db.target, lib, "bulk", JobFilter(text="USER1"), limit=50)) == ones
    assert ids_of(every_page(db.target, lib, "bulk", JobFilter(text="%"), limit=50)) == []  # ILIKE's own % is escaped
    assert ids_of(every_page(db.target, lib, "bulk", JobFilter(kind="bulk"), limit=100)) == bulk
    assert ids_of(every_page(db.target, lib, "bulk", JobFilter(kind="mail"), limit=100)) == []
    some = [bulk[3], bulk[40], str(uuid.uuid4()), "nope"]
    assert ids_of(every_page(db.target, lib, "bulk", JobFilter(ids=tuple(some)), limit=10)) == [bulk[3], bulk[40]]
    # A search no index leads reads at most scan_rows jobs a page, says so, and goes on from there.
    lib.scan_rows = 25
    pages = every_page(db.target, lib, "bulk", JobFilter(match={"tag": "vip"}), limit=50)
    assert ids_of(pages) == vip
    first = pages[0]
    assert first.note and first.note.startswith("searched 25 jobs") and first.note.endswith("go on from there for more")
    assert ("pg-boss 9 has no index on (name, id)" in first.note) == (major == "9")
    if major == "10":  # the window is the queue's own 25 jobs: it ends at the 25th
        assert first.after == bulk[24] and [j.id for j in first.jobs] == [i for i in vip if i <= bulk[24]]
        assert every_page(db.target, lib, "bulk", JobFilter(state="ready"), limit=50)[0].note is None  # led by an index
    newest = every_page(db.target, lib, "bulk", JobFilter(match={"tag": "vip"}), limit=50, newest_first=True)
    assert ids_of(newest) == vip[::-1] and newest[0].note
    # in flight / dead / done: no index of pg-boss's leads them; walked, bounded, the same jobs.
    for state in ("in_flight", "dead", "done"):
        assert ids_of(every_page(db.target, lib, "mail", JobFilter(state=state), limit=50)) == truth(db, major, "mail")[state]


@MAJORS
def test_each_action_is_pgboss_own_and_its_worker_proves_it(request, db, node_peers, major):
    boss = start(request, db, node_peers, major)
    ids = boss.ids
    lib = LIBRARY("pgboss", version_of(db))

    def act(action, tags, expect=None):
        return act_on_ids(db.target, lib, "mail", action, [ids.get(t, t) for t in tags], expect=expect)

    # Listed delayed, then cancelled by pg-boss's own cancel before run-now comes: skipped, counted.
    listed = read(db.target, lambda conn: lib.page(conn, "mail", JobFilter(state="delayed"), limit=50))
    assert {ids[t] for t in ("L1", "L2", "L3", "R1")} == {j.id for j in listed.jobs}
    assert boss.ask("cancel", queue="mail", id=ids["L2"])["count"] == 1
    outcome = act("run-now", ["L1", "L2"], expect="delayed")
    assert (outcome.matched, outcome.changed, outcome.skipped, outcome.ids) == (2, 1, 1, [ids["L1"]])
    # retry takes the failed job, not a ready one (not in a state retry applies to).
    outcome = act("retry", ["F1", "W3"], expect="dead")
    assert (outcome.changed, outcome.skipped, outcome.ids) == (1, 1, [ids["F1"]])
    # Listed as delayed, now ready (it never was delayed, here): cancel applies to both, but not to
    # a job that is no longer in the state it was listed in.
    outcome = act("cancel", ["W1"], expect="delayed")
    assert (outcome.changed, outcome.skipped) == (0, 1)
    assert act("cancel", ["W1"], expect="ready").ids == [ids["W1"]]
    # An active job: pg-boss's cancel takes it; its complete and fail then change nothing.
    assert act("cancel", ["A1"], expect="in_flight").ids == [ids["A1"]]
    assert boss.ask("complete", queue="mail", id=ids["A1"])["count"] == 0
    assert boss.ask("fail", queue="mail", id=ids["A1"])["count"] == 0
    if major == "10":
        assert act("delete", ["W2", "D1"]).ids == sorted([ids["W2"], ids["D1"]])
        assert boss.states("mail", "W2", "D1") == {"W2": None, "D1": None}  # gone from getJobById
    else:
        with pytest.raises(ActionRefused, match="pg-boss 9 deletes no single job"):
            act("delete", ["W2"])
        # Its version not given: the version table says 9 when it acts, and it refuses the same.
        with write_session(db.target) as conn, conn.transaction(), pytest.raises(ActionRefused, match="deleteJob"):
            LIBRARY("pgboss").act(conn, "mail", "delete", [ids["W2"]], None)
    # A retry that pg-boss's own unique index refuses (v10 job_i3, v9 job_singletonKey: K3 of K1's
    # singleton key waits): its own retry (v9: resume) throws; the console skips K1, retries K2.
    refused = boss.ask("retry", queue="keyed", id=ids["K1"])
    assert "duplicate key" in refused.get("refused", ""), refused
    outcome = act_on_ids(db.target, lib, "keyed", "retry", [ids["K1"], ids["K2"]], expect="dead")
    assert (outcome.changed, outcome.skipped, outcome.ids) == (1, 1, [ids["K2"]])
    assert boss.states("keyed", "K1", "K2", "K3") == {"K1": "failed", "K2": "retry" if major == "10" else "created", "K3": "retry"}
    after_actions = boss.states("mail", "F1", "L1", "L2", "W1", "A1")
    assert after_actions == {"F1": "retry" if major == "10" else "created", "L1": "created", "L2": "cancelled",
                             "W1": "cancelled", "A1": "cancelled"}

    # pg-boss's worker: its first fetch takes every due job of the queue.
    boss.ask("work", queue="mail")
    wait_until(lambda: boss.batches, timeout=20, what="pg-boss's worker to fetch")
    ran = {"F1", "L1", "W3"} | ({"W2"} if major == "9" else set())
    assert set(boss.batches[0]) == {ids[t] for t in ran}
    wait_until(lambda: set(boss.states("mail", *ran).values()) == {"completed"}, timeout=20, what="pg-boss to complete them")
    never = boss.states("mail", "W1", "L2", "L3", "R1", "F2", "A1")
    assert never == {"W1": "cancelled", "L2": "cancelled", "L3": "created", "R1": "retry", "F2": "failed", "A1": "cancelled"}
    assert not {ids[t] for t in never} & {i for batch in boss.batches for i in batch}

    # A bulk retry by state: every failed job, each run again by the worker (still polling).
    outcome = run_bulk(db.target, lib, "mail", "retry", JobFilter(state="dead"))
    assert (outcome.matched, outcome.changed, outcome.skipped, outcome.ids) == (1, 1, 0, [ids["F2"]])
    wait_until(lambda: boss.states("mail", "F2") == {"F2": "completed"}, timeout=20, what="the worker to run the retried job")


@MAJORS
def test_what_pgboss_lacks_is_refused_with_why(major):
    version = "24" if major == "10" else "20"
    lib = LIBRARY("pgboss", version)
    with pytest.raises(ActionRefused, match="pg-boss cannot pause a queue: pg-boss keeps no paused state"):
        lib.pause(None, "mail", True)
    with pytest.raises(ActionRefused, match="unknown action"):
        type(lib).refuse("requeue")
    if major == "9":
        with pytest.raises(ActionRefused, match=r"pg-boss has no delete: pg-boss 9 deletes no single job"):
            type(lib).refuse("delete")
        assert "resume(ids)" in type(lib).mirrors["retry"]
    else:
        for action in ("retry", "run-now", "cancel", "delete"):
            type(lib).refuse(action)
        assert "retry(name, ids)" in type(lib).mirrors["retry"]
    assert type(LIBRARY("pgboss")) is PgBossJobs and type(LIBRARY("pgboss", "odd")) is PgBossJobs


def test_pgboss_sends_and_listens_to_no_notification(node_peers):
    """Its workers poll (fetchNextJob every polling interval): an action has nothing to send."""
    for package in ("pg-boss", "pg-boss-9"):
        source = "\n".join(p.read_text() for p in sorted((node_peers / package / "src").glob("*.js")))
        assert "fetchNextJob" in source and ("pollingInterval" in source or "newJobCheckInterval" in source)
        # No LISTEN/NOTIFY statement, no pg_notify(), no handler of the driver's 'notification' event.
        assert not re.search(r"\bLISTEN\s+\w|\bNOTIFY\s+\w|pg_notify|'notification'", source, re.IGNORECASE), package
