"""Graphile Worker, the real library (npm), driven through its own API by a Node.js script: a job
failed for good, one backing off, scheduled and ready jobs, a named queue locked by a running
job with another waiting behind it. queuetop finds it with no config; every figure matches
ground truth in SQL; its row-level security is said, not shown as an empty queue."""

from __future__ import annotations

import os
import subprocess

import pytest
from psycopg import sql

from probes.details import queue_details
from probes.postgres import open_probe_connection
from probes.sampler import run_cycle

from .conftest import PASSWORD, PASSWORD_ROLE, NodeWorkload

pytestmark = pytest.mark.matrix  # the server matrix runs these on every supported major

TRUTH = """
SELECT count(*) FILTER (WHERE j.locked_at IS NULL AND j.attempts < j.max_attempts AND j.run_at <= now()
                          AND coalesce(q.locked_at IS NULL, true)),
       count(*) FILTER (WHERE j.locked_at IS NULL AND j.attempts < j.max_attempts
                          AND (j.run_at > now() OR q.locked_at IS NOT NULL)),
       count(*) FILTER (WHERE j.locked_at IS NOT NULL),
       count(*) FILTER (WHERE j.locked_at IS NULL AND j.attempts >= j.max_attempts)
FROM graphile_worker._private_jobs j
JOIN graphile_worker._private_tasks t ON t.id = j.task_id
LEFT JOIN graphile_worker._private_job_queues q ON q.id = j.job_queue_id
WHERE {where} = %s
"""


def ground_truth(db, kind: str, name: str) -> dict[str, int]:
    """Graphile Worker's get_job, counted over the whole table."""
    where = "t.identifier" if kind == "task" else "q.queue_name"
    with db.connect() as conn:
        ready, delayed, in_flight, dead = conn.execute(TRUTH.format(where=where), (name,)).fetchone()
    return {"ready": ready, "delayed": delayed, "in_flight": in_flight, "dead": dead, "depth": ready + delayed + in_flight}


@pytest.fixture
def workload(db, node_peers):
    running = NodeWorkload(node_peers, "graphile_workload.mjs", db.dsn)
    yield running
    running.close()


def rows_of(snap) -> dict[str, object]:
    return {q.name: q for q in snap.queues if q.source == "graphile-worker"}


def test_graphile_tasks_and_named_queues_with_every_figure_right(db, workload):
    keys = [("task", "send_email"), ("task", "build_report"), ("queue", "reports")]
    before = {k: ground_truth(db, *k) for k in keys}
    snap = run_cycle(db.target)
    after = {k: ground_truth(db, *k) for k in keys}
    assert before == after
    rows = rows_of(snap)
    assert set(rows) == {"task:send_email", "task:build_report", "queue:reports"}
    for kind, name in keys:
        q, g = rows[f"{kind}:{name}"], after[(kind, name)]
        assert (q.ready, q.delayed, q.in_flight, q.dead, q.depth) == (g["ready"], g["delayed"], g["in_flight"], g["dead"], g["depth"])
        assert q.error is None and q.depth_is_estimate is False
    # Graphile Worker's meaning: scheduled and backing off are delayed, the exhausted one dead.
    assert (rows["task:send_email"].ready, rows["task:send_email"].delayed, rows["task:send_email"].dead) == (3, 3, 1)
    # One report runs and holds its named queue; the other is not claimable: it waits behind it.
    assert (rows["queue:reports"].in_flight, rows["queue:reports"].ready, rows["queue:reports"].delayed) == (1, 0, 1)
    # A locked named queue is how Graphile works, not a failure: a note, never the probe's error.
    assert "named queue locked by" in snap.probes["queues"].notes and snap.probes["queues"].error is None


def test_graphile_details_show_waiting_jobs_and_the_last_error(db, workload):
    with open_probe_connection(db.target) as conn:
        details = queue_details(conn, "graphile-worker", "task:send_email")
    assert len(details.head) == 6  # the 3 ready, 2 scheduled and the one backing off
    [failed] = details.dead
    assert "smtp said no to bounce@example.com" in failed["last_error"]


def test_graphile_row_level_security_is_said_not_shown_as_empty(db, workload):
    from dbcore.database import resolve_target

    with db.connect() as conn:
        conn.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(sql.Identifier(db.name), sql.Identifier(PASSWORD_ROLE)))
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA graphile_worker TO {}").format(sql.Identifier(PASSWORD_ROLE)))
        conn.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA graphile_worker TO {}").format(sql.Identifier(PASSWORD_ROLE)))
        conn.execute("ANALYZE graphile_worker._private_jobs")
        live = conn.execute("SELECT reltuples::bigint FROM pg_class WHERE oid = 'graphile_worker._private_jobs'::regclass").fetchone()[0]
    limited = resolve_target(db.dsn.replace("postgres@", f"{PASSWORD_ROLE}:{PASSWORD}@"))
    snap = run_cycle(limited)
    # Its tasks and queues are hidden too: one row for the table, saying why it shows nothing.
    assert {name: q.depth for name, q in rows_of(snap).items()} == {"jobs": 0}
    assert live >= 8
    assert f"row-level security hides rows from this role: 0 visible of ~{live:,} live" in snap.probes["queues"].notes
    assert "row-level security" not in (snap.probes["queues"].error or "")  # a note (the role's other gaps are errors)


# Through Graphile Worker's own API, in a node process of its own: a task "tidy" with a job of
# its own and one in the named queue "nightly", both run by a worker that knows only that task
# (the workload's runner knows only build_report), which deletes each as it completes.
FINISH_NIGHTLY = r"""
import { createRequire } from 'node:module'
const require = createRequire(`${process.env.QUEUETOP_NODE_PEERS}/`)
const { makeWorkerUtils, runOnce, Logger } = require('graphile-worker')
const [connectionString] = process.argv.slice(1)
const logger = new Logger(() => () => {})
const utils = await makeWorkerUtils({ connectionString, logger })
await utils.addJob('tidy', { n: 1 })
await utils.addJob('tidy', { n: 2 }, { queueName: 'nightly' })
// runOnce's workers stop when a fetch finds nothing, which a job of a named queue another of them
// runs makes happen: again until tidy's jobs are all worked off.
const left = async () => (await utils.withPgClient((client) => client.query(
  "SELECT count(*)::int AS n FROM graphile_worker._private_jobs j JOIN graphile_worker._private_tasks t ON t.id = j.task_id"
  + " WHERE t.identifier = 'tidy'"))).rows[0].n
do await runOnce({ connectionString, taskList: { tidy: async () => {} }, logger })
while (await left() > 0)
await utils.release()
console.log(JSON.stringify({ done: true }))
process.exit(0)
"""


def test_graphile_tasks_and_named_queues_whose_jobs_all_finished_are_listed_at_zero(db, workload, node_peers):
    # Graphile Worker deletes a job once it completes: no finished job is left to find a queue by.
    # Its registries keep the task and the named queue (until its cleanup removes those with no
    # job left): both are listed, at 0.
    done = subprocess.run(["node", "--input-type=module", "-e", FINISH_NIGHTLY, db.dsn], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "QUEUETOP_NODE_PEERS": str(node_peers)})
    assert done.returncode == 0 and '"done":true' in done.stdout, done.stderr[-2000:]
    with db.connect() as conn:
        left = conn.execute("SELECT count(*) FROM graphile_worker._private_jobs j JOIN graphile_worker._private_tasks t"
                            " ON t.id = j.task_id WHERE t.identifier = 'tidy'").fetchone()[0]
    assert left == 0
    rows = rows_of(run_cycle(db.target))
    assert {"task:tidy", "queue:nightly"} <= set(rows)
    for name in ("task:tidy", "queue:nightly"):
        q = rows[name]
        assert (q.ready, q.delayed, q.in_flight, q.dead, q.depth, q.error) == (0, 0, 0, 0, 0, None), name
        assert ground_truth(db, *name.split(":")) == {"ready": 0, "delayed": 0, "in_flight": 0, "dead": 0, "depth": 0}
