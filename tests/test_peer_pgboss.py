"""pg-boss 10 and 9, the real library (npm), driven through its own API by a Node.js script:
completed, failed, retrying, scheduled, ready and running jobs in two queues, a worker holding
one. queuetop finds it with no config; every figure matches ground truth in SQL."""

from __future__ import annotations

import os
import subprocess

import pytest

from probes.details import queue_details
from probes.postgres import open_probe_connection
from probes.sampler import run_cycle

from .conftest import NodeWorkload, wait_until

pytestmark = pytest.mark.matrix  # the server matrix runs these on every supported major

# Column names as each major version spells them.
COLUMNS = {"10": {"start_after": "start_after"}, "9": {"start_after": "startafter"}}


def ground_truth(db, queue: str, major: str) -> dict[str, int]:
    """pg-boss's own definitions (fetchNextJob: state < 'active' AND start_after < now())."""
    start_after = COLUMNS[major]["start_after"]
    dead = "('failed')" if major == "10" else "('failed', 'expired')"
    with db.connect() as conn:
        ready, delayed, in_flight, dead_count = conn.execute(
            f"""SELECT count(*) FILTER (WHERE state < 'active' AND {start_after} < now()),
                       count(*) FILTER (WHERE state < 'active' AND {start_after} >= now()),
                       count(*) FILTER (WHERE state = 'active'),
                       count(*) FILTER (WHERE state IN {dead})
                FROM pgboss.job WHERE name = %s""",
            (queue,),
        ).fetchone()
    return {"ready": ready, "delayed": delayed, "in_flight": in_flight, "dead": dead_count,
            "depth": ready + delayed + in_flight}


@pytest.fixture(params=["10", "9"], ids=["pg-boss-10", "pg-boss-9"])
def workload(request, db, node_peers):
    with db.connect() as conn:
        if conn.info.server_version < 130000:  # gen_random_uuid() is core from 13; pg-boss's docs ask for pgcrypto before
            conn.execute("CREATE EXTENSION IF NOT EXISTS pgcrypto")
    running = NodeWorkload(node_peers, "pgboss_workload.mjs", db.dsn, request.param)
    running.major = request.param
    yield running
    running.close()


def test_pgboss_queues_are_found_with_no_config_and_every_figure_is_right(db, workload):
    boss = workload.major
    before = {q: ground_truth(db, q, boss) for q in ("mail", "reports")}
    snap = run_cycle(db.target)
    after = {q: ground_truth(db, q, boss) for q in ("mail", "reports")}
    assert before == after
    rows = {q.name: q for q in snap.queues if q.source == "pg-boss"}
    assert set(rows) == {"mail", "reports"}
    for name in ("mail", "reports"):
        q, g = rows[name], after[name]
        assert (q.ready, q.delayed, q.in_flight, q.dead, q.depth) == (g["ready"], g["delayed"], g["in_flight"], g["dead"], g["depth"])
        assert q.error is None and q.depth_is_estimate is False
    # As pg-boss defines them: scheduled and backing-off jobs are delayed (its getQueueSize
    # would count them as queued), the 4 completed are finished and in no count.
    assert (rows["mail"].ready, rows["mail"].delayed, rows["mail"].dead, rows["mail"].depth) == (3, 3, 1, 6)
    assert (rows["reports"].in_flight, rows["reports"].ready) == (1, 1)
    assert rows["mail"].oldest_ready_age_s is not None
    assert snap.probes["queues"].error is None
    if boss == "10":
        # One partition per queue: the queue's counters are its partition's. (pg-boss's pooled
        # sessions report their statistics when they end: stop the workload first.)
        workload.close()
        with db.connect() as conn:
            partition = dict(conn.execute(
                "SELECT q.name, s.n_tup_ins FROM pgboss.queue q JOIN pg_class c ON c.relname = q.partition_name"
                " JOIN pg_stat_user_tables s ON s.relid = c.oid").fetchall())

        def counted():
            with db.connect() as conn:
                partition.update(conn.execute(
                    "SELECT q.name, s.n_tup_ins FROM pgboss.queue q JOIN pg_class c ON c.relname = q.partition_name"
                    " JOIN pg_stat_user_tables s ON s.relid = c.oid").fetchall())
            got = {q.name: q.inserted_total for q in run_cycle(db.target).queues if q.source == "pg-boss"}
            return got if got == partition and min(got.values()) > 0 else None

        wait_until(counted, timeout=15, interval=0.3, what="each queue's counters to be its partition's")


def test_pgboss_details_show_waiting_jobs_and_failures_with_their_output(db, workload):
    with open_probe_connection(db.target) as conn:
        details = queue_details(conn, "pg-boss", "mail")
    assert len(details.head) == 6 and {row["state"] for row in details.head} == {"created", "retry"}
    [failure] = details.dead
    assert "mailbox full" in failure["output"]


# Through pg-boss's own API, in a node process of its own: a queue "nightly" whose jobs all
# finished, two completed by a worker's fetch and complete, one scheduled and then cancelled.
FINISH_NIGHTLY = r"""
import { createRequire } from 'node:module'
const require = createRequire(`${process.env.QUEUETOP_NODE_PEERS}/`)
const [connectionString, major] = process.argv.slice(1)
const PgBoss = require(major === '9' ? 'pg-boss-9' : 'pg-boss')
const v10 = major !== '9'
const boss = new PgBoss({ connectionString, max: 2, supervise: false, schedule: false,
                          ...(v10 ? {} : { noSupervisor: true, noScheduling: true }) })
boss.on('error', (error) => console.error(error))
await boss.start()
if (v10) await boss.createQueue('nightly')
for (let n = 0; n < 2; n++) {
  await boss.send('nightly', { n })
  const got = await boss.fetch('nightly')
  const job = Array.isArray(got) ? got[0] : got
  await (v10 ? boss.complete('nightly', job.id) : boss.complete(job.id))
}
const id = await boss.send('nightly', { n: 2 }, { startAfter: 3600 })
await (v10 ? boss.cancel('nightly', id) : boss.cancel(id))
console.log(JSON.stringify({ done: true }))
process.exit(0)
"""


def test_a_pgboss_queue_whose_jobs_all_finished_is_listed_at_zero(db, workload, node_peers):
    # v10 lists its queue table's queues; v9 the names its job table holds, finished jobs' too
    # (through its own name index): either way a queue of completed and cancelled jobs is there.
    major = workload.major
    done = subprocess.run(["node", "--input-type=module", "-e", FINISH_NIGHTLY, db.dsn, major], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "QUEUETOP_NODE_PEERS": str(node_peers)})
    assert done.returncode == 0 and '"done":true' in done.stdout, done.stderr[-2000:]
    with db.connect() as conn:
        states = dict(conn.execute("SELECT state::text, count(*) FROM pgboss.job WHERE name = 'nightly' GROUP BY state").fetchall())
    assert states == {"completed": 2, "cancelled": 1}
    snap = run_cycle(db.target)
    rows = {q.name: q for q in snap.queues if q.source == "pg-boss"}
    assert set(rows) == {"mail", "reports", "nightly"}
    nightly, truth = rows["nightly"], ground_truth(db, "nightly", major)
    assert (nightly.ready, nightly.delayed, nightly.in_flight, nightly.dead, nightly.depth) == (0, 0, 0, 0, 0)
    assert truth == {"ready": 0, "delayed": 0, "in_flight": 0, "dead": 0, "depth": 0} and nightly.error is None
    assert snap.probes["queues"].error is None and "queue_column" not in (snap.probes["queues"].notes or "")
