"""The job console on PGMQ (jobs/pgmq.py), against the real library: its SQL as the PyPI client
ships it (PGMQ 1.13), messages sent, read, archived through its own Python client and SQL
functions, a consumer that reads the queue in a loop (pgmq.read_with_poll) as PGMQ's workers do.
Every list agrees with ground truth taken in SQL and with the snapshot; every action is proved by
PGMQ afterwards (what its reads return, what its set_vt finds)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from importlib import resources
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from dbcore.errors import UsageError
from jobs.model import ActionRefused, JobFilter
from jobs.pgmq import PgmqJobs
from jobs.registry import library_for
from probes.sampler import run_cycle
from probes.session import open_probe_connection, probe_transaction

from .conftest import wait_until
from .jobpages import act as act_on
from .jobpages import every_page, jobs_and_notes
from .oracle.pgmq import build_small, truth

pytestmark = pytest.mark.matrix  # the server matrix runs these on every supported major

pgmq = pytest.importorskip("pgmq", reason="the pgmq client is a test dependency (pip install -e '.[test]')")

LIB = PgmqJobs("pgmq")

# Ground truth of each state's msg_ids, from PGMQ's definitions (tests/oracle/pgmq.py's TRUTH).
TRUTH_IDS = """
WITH heads AS (
    SELECT DISTINCT ON (headers->>'x-pgmq-group') headers->>'x-pgmq-group' AS grp, vt
    FROM pgmq.{q} WHERE headers->>'x-pgmq-group' IS NOT NULL
    ORDER BY headers->>'x-pgmq-group', msg_id
), m AS (
    SELECT q.msg_id, q.vt <= now() AS visible, q.read_ct, coalesce(h.vt > now(), false) AS behind
    FROM pgmq.{q} q LEFT JOIN heads h ON h.grp = q.headers->>'x-pgmq-group'
)
SELECT 'ready', msg_id FROM m WHERE visible AND NOT behind
UNION ALL SELECT 'blocked', msg_id FROM m WHERE visible AND behind
UNION ALL SELECT 'in_flight', msg_id FROM m WHERE NOT visible AND read_ct > 0
UNION ALL SELECT 'delayed', msg_id FROM m WHERE (NOT visible AND read_ct = 0) OR (visible AND behind)
UNION ALL SELECT 'dead', msg_id FROM pgmq.{a}
"""


@pytest.fixture
def mq(db) -> Iterator[Any]:
    """PGMQ installed in the test database from the client's own SQL, and its client."""
    script = resources.files("pgmq").joinpath("sql", "pgmq.sql").read_text(encoding="utf-8")
    with db.connect() as conn:
        conn.execute(script)
    pool = ConnectionPool(db.dsn, min_size=1, max_size=2, kwargs={"autocommit": True}, open=True)
    client = pgmq.SyncPGMQueue(pool=pool, init_extension=False)
    yield client
    client.close()
    pool.close()


class Consumer:
    """A PGMQ worker: a loop on its own client reading `queue` (pgmq.read_with_poll, a
    30 s visibility), recording each message's body, then deleting it (done)."""

    def __init__(self, dsn: str, queue: str) -> None:
        self.pool = ConnectionPool(dsn, min_size=1, max_size=1, kwargs={"autocommit": True}, open=True)
        self.client = pgmq.SyncPGMQueue(pool=self.pool, init_extension=False)
        self.queue = queue
        self.seen: list[dict[str, Any]] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="pgmq-consumer", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                for message in self.client.read_with_poll(self.queue, vt=30, qty=10, max_poll_seconds=1, poll_interval_ms=20):
                    self.seen.append(message.message)
                    self.client.delete(self.queue, message.msg_id)
        except BaseException as exc:  # said by close()
            self.error = exc

    def bodies(self) -> list[Any]:
        return list(self.seen)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        self.client.close()
        self.pool.close()
        assert self.error is None, self.error


def page(db, queue: str, flt: JobFilter, **kwargs: Any) -> Any:
    with open_probe_connection(db.target) as conn, probe_transaction(conn):
        return LIB.page(conn, queue, flt, **kwargs)


def every(db, queue: str, flt: JobFilter, *, limit: int = 2, newest_first: bool = False) -> tuple[list[Any], list[str]]:
    """Every job `flt` lists, page after page (keyset), and the pages' notes."""
    return jobs_and_notes(every_page(db.target, LIB, queue, flt, limit=limit, newest_first=newest_first))


def act(db, queue: str, action: str, ids: list[Any], expect: str | None = None) -> list[str]:
    return act_on(db, LIB, queue, action, ids, expect)


def truth_ids(db, queue: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {s: set() for s in ("ready", "blocked", "in_flight", "delayed", "dead")}
    with db.connect() as conn:
        for state, msg_id in conn.execute(TRUTH_IDS.format(q=f"q_{queue}", a=f"a_{queue}")).fetchall():
            out[state].add(str(msg_id))
    return out


def test_the_registry_serves_pgmq_with_this_module():
    assert library_for("pgmq") is PgmqJobs


def test_each_states_list_is_pgmqs_own_and_the_snapshots(db):
    """The oracle's small workload (every state in two queues, FIFO groups blocked, a consumer
    holding a message): each state's list is exactly the messages PGMQ's definitions put there,
    and as many as the snapshot counts."""
    workload = build_small(db.dsn)
    try:
        with db.connect() as conn:
            counts = truth(conn)
        snap = {q.name: q for q in run_cycle(db.target).queues if q.source == "pgmq"}
        for queue in ("emails", "orders"):
            ids = truth_ids(db, queue)
            assert counts[queue] == workload.expected[queue]
            for state in ("ready", "blocked", "in_flight", "delayed", "dead"):
                listed, notes = every(db, queue, JobFilter(state=state), limit=3)
                assert notes == []
                assert [j.id for j in listed] == sorted((j.id for j in listed), key=int)  # keyset order
                assert {j.id for j in listed} == ids[state] and len(listed) == len(ids[state]) == counts[queue][state], (queue, state)
                allowed = {"delayed", "blocked"} if state == "delayed" else {state}
                assert {j.state for j in listed} <= allowed and all(j.queue == queue for j in listed)
                if state != "blocked":
                    assert len(listed) == getattr(snap[queue], state), (queue, state)
            assert snap[queue].blocked == len(ids["blocked"]) > 0
            assert every(db, queue, JobFilter(state="done"))[0] == []
            whole, _ = every(db, queue, JobFilter(), limit=4)
            assert len(whole) == len({j.id for j in whole}) == len(ids["ready"] | ids["blocked"] | ids["in_flight"]
                                                               | ids["delayed"] | ids["dead"])
    finally:
        workload.close()


def test_paging_visits_every_message_once_both_ways(db, mq):
    mq.create_queue("paged")
    sent = [mq.send("paged", {"n": n}, delay=(600 if n % 3 == 0 else 0)) for n in range(11)]
    mq.archive("paged", sent[4])
    mq.archive("paged", sent[7])
    oldest, _ = every(db, "paged", JobFilter(), limit=3)
    newest, _ = every(db, "paged", JobFilter(), limit=4, newest_first=True)
    assert [j.id for j in oldest] == [str(i) for i in sent]
    assert [j.id for j in newest] == [str(i) for i in reversed(sent)]
    by_id = {j.id: j for j in oldest}
    assert (by_id[str(sent[4])].state, by_id[str(sent[4])].status) == ("dead", "archived")
    assert (by_id[str(sent[3])].state, by_id[str(sent[3])].status) == ("delayed", "invisible")
    assert (by_id[str(sent[1])].state, by_id[str(sent[1])].status, by_id[str(sent[1])].args) == ("ready", "visible", {"n": 1})
    first = by_id[str(sent[0])]
    assert first.attempts == 0 and first.kind is None and first.created_at is not None and first.age_s is not None
    assert first.scheduled_at is not None and first.scheduled_at > first.created_at  # its vt: sent 10 minutes ahead
    assert page(db, "paged", JobFilter(ids=(str(sent[2]), "nope"))).jobs[0].id == str(sent[2])
    assert page(db, "paged", JobFilter(kind="anything")).jobs == []


def test_search_by_arguments_and_text_and_the_bounded_scan(db, mq):
    mq.create_queue("found")
    ids = [mq.send("found", {"kind": "mail" if n % 2 else "sms", "to": f"User{n}@Example.com"}) for n in range(10)]
    mq.archive("found", ids[3])
    mails, notes = every(db, "found", JobFilter(match={"kind": "mail"}), limit=10)
    assert [j.id for j in mails] == [str(i) for n, i in enumerate(ids) if n % 2] and notes == []
    assert [j.id for j in every(db, "found", JobFilter(text="user7@example"), limit=10)[0]] == [str(ids[7])]
    assert [j.id for j in every(db, "found", JobFilter(state="dead", match={"kind": "mail"}))[0]] == [str(ids[3])]
    # No index leads a search: each page reads at most scan_rows messages of each table, says so,
    # and goes on from where it stopped; every match is still found once.
    bounded = PgmqJobs("pgmq")
    bounded.scan_rows = 3
    with open_probe_connection(db.target) as conn, probe_transaction(conn):
        first = bounded.page(conn, "found", JobFilter(match={"kind": "mail"}), limit=10)
    assert [j.id for j in first.jobs] == [str(ids[1])]
    assert first.after == str(ids[2]) and first.note is not None and "searched 3 messages" in first.note
    found, after = [], None
    for _ in range(20):
        with open_probe_connection(db.target) as conn, probe_transaction(conn):
            got = bounded.page(conn, "found", JobFilter(match={"kind": "mail"}), after=after, limit=10)
        found += [j.id for j in got.jobs]
        after = got.after
        if after is None:
            break
    assert found == [str(i) for n, i in enumerate(ids) if n % 2]


def test_job_shows_the_whole_message(db, mq):
    mq.create_queue("shown")
    read_one = mq.send("shown", {"a": 1}, headers={"x-pgmq-group": "g1"})
    assert mq.read("shown", vt=300).msg_id == read_one
    archived = mq.send("shown", {"b": 2})
    mq.archive("shown", archived)
    with open_probe_connection(db.target) as conn, probe_transaction(conn):
        held = LIB.job(conn, "shown", str(read_one))
        dead = LIB.job(conn, "shown", str(archived))
        assert LIB.job(conn, "shown", "999999") is None and LIB.job(conn, "shown", "x") is None
        with pytest.raises(UsageError, match="no PGMQ queue"):
            LIB.job(conn, "nowhere", "1")
        with pytest.raises(UsageError, match="no PGMQ queue"):  # a name is looked up in pgmq.meta, never made into SQL
            LIB.page(conn, 'shown"; DROP TABLE pgmq.meta; --', JobFilter())
    assert held is not None and dead is not None
    assert (held.state, held.attempts, held.errors, held.held_by, held.last_error) == ("in_flight", 1, [], None, None)
    assert held.extra["headers"] == {"x-pgmq-group": "g1"} and held.extra["last_read_at"] is not None
    assert (dead.state, dead.args) == ("dead", {"b": 2}) and dead.extra["archived_at"] is not None


def test_actions_are_proved_by_pgmq_and_its_consumer(db, mq):
    mq.create_queue("work")
    later = mq.send("work", {"job": "later"}, delay=3600)
    now = mq.send("work", {"job": "run-now"}, delay=3600)
    gone = mq.send("work", {"job": "deleted"}, delay=3600)
    failed = mq.send("work", {"job": "retried"}, headers={"x-pgmq-group": "g"})
    assert mq.read("work", vt=30).msg_id == failed
    assert mq.archive("work", failed)
    consumer = Consumer(db.dsn, "work")
    try:
        assert act(db, "work", "delete", [gone]) == [str(gone)]
        assert act(db, "work", "run-now", [now], expect="delayed") == [str(now)]
        assert act(db, "work", "retry", [failed], expect="dead") == [str(failed)]
        # The consumer reads the run-now message now (it was an hour away) and the retried one
        # (a new message of the same body and headers); never the deleted or the later one.
        wait_until(lambda: len(consumer.bodies()) == 2, timeout=15, what="the consumer reading both")
        assert sorted(b["job"] for b in consumer.bodies()) == ["retried", "run-now"]
        assert mq.set_vt("work", gone, 0) is None  # PGMQ finds no such message
        with db.connect() as conn:
            assert conn.execute("SELECT count(*) FROM pgmq.a_work").fetchone() == (0,)
        assert [j.id for j in page(db, "work", JobFilter()).jobs] == [str(later)]
    finally:
        consumer.close()
    assert sorted(b["job"] for b in consumer.bodies()) == ["retried", "run-now"]


def test_compare_and_set_skips_what_changed_or_a_consumer_holds(db, mq):
    mq.create_queue("cas")
    delayed = mq.send("cas", {"n": 1}, delay=3600)
    listed = page(db, "cas", JobFilter(state="delayed")).jobs
    assert [j.id for j in listed] == [str(delayed)]
    mq.set_vt("cas", delayed, 0)  # made visible by someone else after the listing: ready now
    assert act(db, "cas", "run-now", [delayed], expect="delayed") == []
    assert act(db, "cas", "delete", [delayed], expect="delayed") == []
    held = mq.read("cas", vt=600)  # a consumer has it: in flight
    assert held.msg_id == delayed
    for action in ("run-now", "delete"):
        assert act(db, "cas", action, [delayed]) == []  # not a consumer's message to take
    assert mq.set_vt("cas", delayed, 0).read_ct == 1  # still there, still the consumer's read
    poison = mq.send("cas", {"n": 2})
    mq.archive("cas", poison)
    assert act(db, "cas", "retry", [poison]) == [str(poison)]
    assert act(db, "cas", "retry", [poison]) == []  # retried already: no longer archived
    assert act(db, "cas", "retry", [delayed], expect="ready") == []  # retry is for dead ones only
    assert act(db, "cas", "delete", ["not-an-id"]) == []
    # A FIFO group whose head a consumer has: the one behind it is blocked (listed with the
    # delayed ones); run-now cannot free it (it is visible already), delete can.
    mq.create_queue("fifo")
    head = mq.send("fifo", {"n": 0}, headers={"x-pgmq-group": "g"})
    behind = mq.send("fifo", {"n": 1}, headers={"x-pgmq-group": "g"})
    assert [m.msg_id for m in mq.read_grouped("fifo", vt=600, qty=1)] == [head]
    assert [(j.id, j.state) for j in page(db, "fifo", JobFilter(state="delayed")).jobs] == [(str(behind), "blocked")]
    assert act(db, "fifo", "run-now", [behind], expect="delayed") == []
    assert act(db, "fifo", "delete", [head, behind], expect="delayed") == [str(behind)]  # not the consumer's head
    assert [j.id for j in page(db, "fifo", JobFilter()).jobs] == [str(head)]


def test_refused_actions_say_why(db, mq):
    mq.create_queue("refused")
    with pytest.raises(ActionRefused, match="no cancelled state"):
        act(db, "refused", "cancel", [1])
    with db.connect(row_factory=psycopg.rows.dict_row) as conn, pytest.raises(ActionRefused, match="no paused queue"):
        LIB.pause(conn, "refused", True)
    assert "cancel" not in PgmqJobs.mirrors and PgmqJobs.pause_mirrors is None


def test_the_notification_its_consumers_listen_for(db, mq):
    """With pgmq.enable_notify_insert, PGMQ's insert trigger notifies `pgmq.q_<queue>.INSERT`
    (the channel its client's SyncNotificationListener listens on): a retry's pgmq.send fires it,
    and a run-now (set_vt sends none) sends the same."""
    mq.create_queue("loud")
    mq.enable_notify("loud", throttle_interval_ms=0)
    delayed = mq.send("loud", {"n": 1}, delay=3600)
    poison = mq.send("loud", {"n": 2})
    mq.archive("loud", poison)
    with psycopg.connect(db.dsn, autocommit=True) as listener:
        listener.execute('LISTEN "pgmq.q_loud.INSERT"')
        assert list(listener.notifies(timeout=0.2)) == []
        assert act(db, "loud", "retry", [poison]) == [str(poison)]
        assert [n.channel for n in listener.notifies(timeout=5, stop_after=1)] == ["pgmq.q_loud.INSERT"]
        assert act(db, "loud", "run-now", [delayed]) == [str(delayed)]
        assert [n.channel for n in listener.notifies(timeout=5, stop_after=1)] == ["pgmq.q_loud.INSERT"]
        assert act(db, "loud", "run-now", [delayed]) == []  # nothing changed: nothing sent
        assert list(listener.notifies(timeout=0.3)) == []
    mq.create_queue("quiet")  # without enable_notify_insert PGMQ sends nothing, nor does queuetop
    quiet = mq.send("quiet", {"n": 1}, delay=3600)
    with psycopg.connect(db.dsn, autocommit=True) as listener:
        listener.execute('LISTEN "pgmq.q_quiet.INSERT"')
        assert act(db, "quiet", "run-now", [quiet]) == [str(quiet)]
        assert list(listener.notifies(timeout=0.3)) == []


def test_the_command_line_lists_shows_and_acts(db, mq, cli, tmp_path):
    """`queuetop jobs` on a PGMQ queue, end to end: the list and a job as JSON, a bulk retry of
    the dead ones, cancel refused with why (exit 2)."""
    import json

    env = {"QUEUETOP_AUDIT": str(tmp_path / "audit.jsonl")}
    mq.create_queue("cli_q")
    dead = [mq.send("cli_q", {"n": n}, headers={"h": n}) for n in range(3)]
    mq.archive_batch("cli_q", dead)
    listed = cli("jobs", "list", "cli_q", "--dsn", db.dsn, "--state", "dead", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    page_ = json.loads(listed.stdout)
    assert page_["source"] == "pgmq" and [j["id"] for j in page_["jobs"]] == [str(i) for i in dead]
    shown = cli("jobs", "show", "cli_q", str(dead[0]), "--dsn", db.dsn, "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    job = json.loads(shown.stdout)["job"]
    assert (job["state"], job["args"], job["extra"]["headers"]) == ("dead", {"n": 0}, {"h": 0})
    retried = cli("jobs", "retry", "cli_q", "--dsn", db.dsn, "--state", "dead", "--all", "--yes", "--json", env=env)
    assert retried.returncode == 0, retried.stderr
    assert json.loads(retried.stdout)["changed"] == 3
    assert sorted(m.message["n"] for m in mq.read("cli_q", vt=30, qty=10)) == [0, 1, 2]
    refused = cli("jobs", "cancel", "cli_q", "1", "--dsn", db.dsn, "--yes", env=env)
    assert refused.returncode == 2 and "pgmq has no cancel: PGMQ has no cancelled state" in refused.stderr
