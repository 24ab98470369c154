"""Queue libraries found in any schema, with no config (issue 26, point 3): each library by the
signature of its tables and functions, several installs of one library in one database as several
sources (`<schema>.<queue>` outside its default schema, `schema` on every row), the engine's own
schema and look-alike tables never taken for a library, hostile schema names quoted, and the cost:
one catalog statement per probe cycle for every source together, the instances (and their
caches) kept from cycle to cycle.

Each library is installed and given jobs through its own API (Procrastinate's schema manager and
defer, pg-boss's and Graphile Worker's Node.js APIs); every figure is checked against ground truth
counted in SQL with the library's own definitions."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import tempfile

import pytest
from psycopg import sql

from dbcore.database import resolve_target
from probes.config import Config, parse_config
from probes.details import queue_details
from probes.postgres import PostgresProbes, open_probe_connection
from probes.sampler import run_cycle
from probes.sources.base import Identifier  # a schema's % is no placeholder in it

from .conftest import REPO

pytestmark = pytest.mark.matrix  # the server matrix runs these on every supported major

procrastinate = pytest.importorskip("procrastinate", reason="procrastinate is a test dependency (pip install -e '.[test]')")

# A schema name with everything that breaks text-built SQL: a quote, spaces, a dot, braces,
# non-ASCII letters; and one with a %, which psycopg reads as a placeholder in a statement run with
# parameters, quoted identifier or not.
HOSTILE = 'we"ird sch ema {x}.ü'
PERCENT = 'sch%ema {}'


# -- the libraries, through their own APIs ---------------------------------------------------

def search_path_option(schema: str) -> str:
    """libpq's `options` that put `schema` first on the search path (Procrastinate's only way to
    be told its schema): the name quoted as an identifier, its spaces escaped for libpq."""
    quoted = '"' + schema.replace('"', '""') + '"'
    return "-c search_path=" + quoted.replace("\\", "\\\\").replace(" ", "\\ ")


def procrastinate_install(db, schema: str, *, ready: int, scheduled: int, failed: int) -> None:
    """Procrastinate's schema in `schema` (its schema manager, on a connection whose search_path
    starts there), `ready` jobs deferred to queue "mail", `scheduled` an hour ahead, and `failed`
    jobs run by a real worker that fail for good."""
    with db.connect() as conn:
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
    logging.getLogger("procrastinate").setLevel(logging.CRITICAL)  # the failing task logs its traceback
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(
        conninfo=db.dsn, kwargs={"options": search_path_option(schema)}))

    @app.task(queue="mail", name="send_mail")
    def send_mail() -> None:
        pass

    @app.task(queue="mail", name="bounce")
    def bounce() -> None:
        raise ValueError("mailbox full")

    with app.open():
        app.schema_manager.apply_schema()
        for _ in range(failed):
            bounce.defer()
    if failed:
        app.run_worker(queues=["mail"], wait=False)  # runs the bounces: failed for good
    with app.open():
        for _ in range(ready):
            send_mail.defer()
        for _ in range(scheduled):
            send_mail.configure(schedule_in={"hours": 1}).defer()


def procrastinate_truth(db, schema: str, queue: str) -> dict[str, int]:
    """Procrastinate's fetch (procrastinate_fetch_job_v2), counted over the install's table."""
    with db.connect() as conn:
        ready, delayed, in_flight, dead = conn.execute(sql.SQL(
            """SELECT count(*) FILTER (WHERE status = 'todo' AND (scheduled_at IS NULL OR scheduled_at <= now())),
                      count(*) FILTER (WHERE status = 'todo' AND scheduled_at > now()),
                      count(*) FILTER (WHERE status IN ('doing', 'aborting')),
                      count(*) FILTER (WHERE status = 'failed')
               FROM {} WHERE queue_name = %s""").format(Identifier(schema, "procrastinate_jobs")), (queue,)).fetchone()
    return {"ready": ready, "delayed": delayed, "in_flight": in_flight, "dead": dead, "depth": ready + delayed + in_flight}


# pg-boss 10 and Graphile Worker, each in the schemas given, through their Node.js APIs.
PGBOSS_SCRIPT = """
import { createRequire } from 'node:module'
const require = createRequire(`${process.env.QUEUETOP_NODE_PEERS}/`)
const PgBoss = require('pg-boss')
const connectionString = process.env.QT_DSN
for (const [schema, plan] of Object.entries(JSON.parse(process.env.QT_PLAN))) {
  const boss = new PgBoss({ connectionString, schema, supervise: false, schedule: false })
  boss.on('error', (error) => console.error(error))
  await boss.start()
  await boss.createQueue('mail')
  for (let n = 0; n < plan.ready; n++) await boss.send('mail', { n })
  for (let n = 0; n < plan.later; n++) await boss.send('mail', { n }, { startAfter: 3600 })
  await boss.stop({ graceful: false, wait: true })
}
console.log(JSON.stringify({ ready: true }))
"""

GRAPHILE_SCRIPT = """
import { createRequire } from 'node:module'
const require = createRequire(`${process.env.QUEUETOP_NODE_PEERS}/`)
const { makeWorkerUtils, Logger } = require('graphile-worker')
const connectionString = process.env.QT_DSN
for (const [schema, plan] of Object.entries(JSON.parse(process.env.QT_PLAN))) {
  const utils = await makeWorkerUtils({ connectionString, schema, logger: new Logger(() => () => {}) })
  await utils.migrate()
  for (let n = 0; n < plan.ready; n++) await utils.addJob('thumb', { n })
  for (let n = 0; n < plan.later; n++) await utils.addJob('thumb', { n }, { runAt: new Date(Date.now() + 3600 * 1000) })
  await utils.release()
}
console.log(JSON.stringify({ ready: true }))
"""


def run_node(modules, script: str, db, plan: dict[str, dict[str, int]]) -> None:
    """A script of the library's own API calls, run to its end (it prints {"ready": true})."""
    with tempfile.NamedTemporaryFile("w", suffix=".mjs", dir=REPO / "tests" / "peers", delete=False) as file:
        file.write(script)
    try:
        env = {**os.environ, "QUEUETOP_NODE_PEERS": str(modules), "QT_DSN": db.dsn, "QT_PLAN": json.dumps(plan)}
        done = subprocess.run(["node", file.name], env=env, capture_output=True, text=True, timeout=120)
    finally:
        os.unlink(file.name)
    assert done.returncode == 0 and '"ready":true' in done.stdout, done.stderr[-2000:]


def pgboss_truth(db, schema: str, queue: str) -> dict[str, int]:
    """pg-boss 10's fetch (state < 'active' AND start_after < now()), over the install's table."""
    with db.connect() as conn:
        ready, delayed, in_flight, dead = conn.execute(sql.SQL(
            """SELECT count(*) FILTER (WHERE state < 'active' AND start_after < now()),
                      count(*) FILTER (WHERE state < 'active' AND start_after >= now()),
                      count(*) FILTER (WHERE state = 'active'),
                      count(*) FILTER (WHERE state = 'failed')
               FROM {} WHERE name = %s""").format(Identifier(schema, "job")), (queue,)).fetchone()
    return {"ready": ready, "delayed": delayed, "in_flight": in_flight, "dead": dead, "depth": ready + delayed + in_flight}


def graphile_truth(db, schema: str, task: str) -> dict[str, int]:
    """Graphile Worker's get_job, over the install's table."""
    with db.connect() as conn:
        ready, delayed, in_flight, dead = conn.execute(sql.SQL(
            """SELECT count(*) FILTER (WHERE j.locked_at IS NULL AND j.attempts < j.max_attempts AND j.run_at <= now()),
                      count(*) FILTER (WHERE j.locked_at IS NULL AND j.attempts < j.max_attempts AND j.run_at > now()),
                      count(*) FILTER (WHERE j.locked_at IS NOT NULL),
                      count(*) FILTER (WHERE j.locked_at IS NULL AND j.attempts >= j.max_attempts)
               FROM {} j JOIN {} t ON t.id = j.task_id WHERE t.identifier = %s""").format(
            Identifier(schema, "_private_jobs"), Identifier(schema, "_private_tasks")), (task,)).fetchone()
    return {"ready": ready, "delayed": delayed, "in_flight": in_flight, "dead": dead, "depth": ready + delayed + in_flight}


def pgcrypto_before_13(db) -> None:
    with db.connect() as conn:
        if conn.info.server_version < 130000:  # gen_random_uuid() is core from 13; pg-boss asks for pgcrypto before
            conn.execute("CREATE EXTENSION IF NOT EXISTS pgcrypto")


def figures(q) -> dict[str, int]:
    return {"ready": q.ready, "delayed": q.delayed, "in_flight": q.in_flight, "dead": q.dead, "depth": q.depth}


def rows_of(snap, source: str) -> dict[str, object]:
    return {q.name: q for q in snap.queues if q.source == source}


# -- found in any schema ---------------------------------------------------------------------

def test_procrastinate_in_a_custom_schema_is_found_with_no_config(db):
    procrastinate_install(db, "jobs", ready=3, scheduled=2, failed=1)
    snap = run_cycle(db.target)  # no config at all
    rows = rows_of(snap, "procrastinate")
    assert set(rows) == {"jobs.mail"}  # outside its default schema (public): named by its schema
    q = rows["jobs.mail"]
    assert q.schema == "jobs" and q.table == '"jobs"."procrastinate_jobs"' and q.error is None
    assert figures(q) == procrastinate_truth(db, "jobs", "mail") == {"ready": 3, "delayed": 2, "in_flight": 0, "dead": 1,
                                                                      "depth": 5}
    assert snap.probes["queues"].error is None
    # The snapshot's JSON says which install each queue is of.
    [entry] = [e for e in snap.to_json()["queues"] if e["source"] == "procrastinate"]
    assert (entry["name"], entry["schema"]) == ("jobs.mail", "jobs")
    # Enter finds the install from the name.
    with open_probe_connection(db.target) as conn:
        details = queue_details(conn, "procrastinate", "jobs.mail")
    assert len(details.head) == 5 and {row["status"] for row in details.head} == {"todo"}
    assert [row["task_name"] for row in details.dead] == ["bounce"]


def test_two_procrastinate_installs_in_one_database_are_two_sets_of_queues(db):
    procrastinate_install(db, "public", ready=4, scheduled=1, failed=0)
    procrastinate_install(db, "jobs", ready=2, scheduled=0, failed=2)
    snap = run_cycle(db.target)
    rows = rows_of(snap, "procrastinate")
    assert set(rows) == {"mail", "jobs.mail"}  # the default schema's queue keeps its bare name
    assert (rows["mail"].schema, rows["jobs.mail"].schema) == ("public", "jobs")
    assert figures(rows["mail"]) == procrastinate_truth(db, "public", "mail") == {"ready": 4, "delayed": 1, "in_flight": 0,
                                                                                "dead": 0, "depth": 5}
    assert figures(rows["jobs.mail"]) == procrastinate_truth(db, "jobs", "mail") == {"ready": 2, "delayed": 0,
                                                                                    "in_flight": 0, "dead": 2, "depth": 2}
    assert snap.probes["queues"].error is None
    with open_probe_connection(db.target) as conn:
        public = queue_details(conn, "procrastinate", "mail")
        jobs = queue_details(conn, "procrastinate", "jobs.mail")
        by_schema = queue_details(conn, "procrastinate", "jobs.mail", schema="jobs")
    assert (len(public.head), len(public.dead)) == (5, 0)
    assert (len(jobs.head), len(jobs.dead)) == (2, 2) and len(by_schema.dead) == 2
    # `[sources.procrastinate] schema = X`: the library is looked for in X only, its queues named bare.
    only_jobs = rows_of(run_cycle(db.target, parse_config({"sources": {"procrastinate": {"schema": "jobs"}}})), "procrastinate")
    assert set(only_jobs) == {"mail"} and only_jobs["mail"].schema == "jobs" and only_jobs["mail"].dead == 2
    # Disabled: in every schema.
    assert rows_of(run_cycle(db.target, parse_config({"sources": {"disable": ["procrastinate"]}})), "procrastinate") == {}


def test_pgboss_10_in_two_schemas_is_two_installs(db, node_peers):
    pgcrypto_before_13(db)
    run_node(node_peers, PGBOSS_SCRIPT, db, {"pgboss": {"ready": 3, "later": 1}, "boss2": {"ready": 2, "later": 2}})
    snap = run_cycle(db.target)
    rows = rows_of(snap, "pg-boss")
    assert set(rows) == {"mail", "boss2.mail"}
    assert (rows["mail"].schema, rows["boss2.mail"].schema) == ("pgboss", "boss2")
    assert figures(rows["mail"]) == pgboss_truth(db, "pgboss", "mail") == {"ready": 3, "delayed": 1, "in_flight": 0,
                                                                         "dead": 0, "depth": 4}
    assert figures(rows["boss2.mail"]) == pgboss_truth(db, "boss2", "mail") == {"ready": 2, "delayed": 2, "in_flight": 0,
                                                                              "dead": 0, "depth": 4}
    assert all(q.error is None for q in rows.values()) and snap.probes["queues"].error is None
    with open_probe_connection(db.target) as conn:
        assert len(queue_details(conn, "pg-boss", "boss2.mail").head) == 4


def test_graphile_worker_in_a_custom_schema_is_found_with_no_config(db, node_peers):
    run_node(node_peers, GRAPHILE_SCRIPT, db, {"gw2": {"ready": 3, "later": 2}})
    snap = run_cycle(db.target)
    rows = rows_of(snap, "graphile-worker")
    assert set(rows) == {"gw2.task:thumb"}
    q = rows["gw2.task:thumb"]
    assert q.schema == "gw2" and q.error is None
    assert figures(q) == graphile_truth(db, "gw2", "thumb") == {"ready": 3, "delayed": 2, "in_flight": 0, "dead": 0, "depth": 5}
    with open_probe_connection(db.target) as conn:
        assert len(queue_details(conn, "graphile-worker", "gw2.task:thumb").head) == 5


def test_look_alike_tables_and_the_engines_schema_are_never_a_library(db):
    """pg-boss's table names are generic: a `job` and a `version` of another application, or the
    whole of pg-boss's signature in the engine's own schema, are not pg-boss."""
    with db.connect() as conn:
        conn.execute("CREATE TABLE public.job (id serial PRIMARY KEY, name text, state text, data jsonb)")
        conn.execute("CREATE TABLE public.version (version int PRIMARY KEY)")
        conn.execute("CREATE TABLE public.queue (name text PRIMARY KEY)")
        conn.execute("INSERT INTO public.job (name, state) VALUES ('mail', 'created')")
        # Every part of pg-boss's signature, in the engine's schema.
        for statement in (
            "CREATE TABLE queuetop.job (name text, state text, start_after timestamptz, singleton_key text)",
            "CREATE TABLE queuetop.version (version int, cron_on timestamptz)",
            "CREATE TABLE queuetop.archive (id int)",
            "CREATE TABLE queuetop.schedule (cron text)",
            "CREATE TABLE queuetop.subscription (event text)",
        ):
            conn.execute(statement)
    snap = run_cycle(db.target)
    assert rows_of(snap, "pg-boss") == {}
    assert {q.source for q in snap.queues} <= {"reference", "outbox", "inbox"}
    assert snap.probes["queues"].error is None


@pytest.mark.parametrize("schema", [
    HOSTILE,
    PERCENT,
], ids=["quotes-spaces-dot-braces-unicode", "percent"])
def test_a_hostile_schema_name_is_quoted_everywhere(db, schema):
    procrastinate_install(db, schema, ready=2, scheduled=1, failed=1)
    snap = run_cycle(db.target)
    rows = rows_of(snap, "procrastinate")
    name = f"{schema}.mail"
    assert set(rows) == {name}
    q = rows[name]
    assert q.schema == schema and q.error is None and snap.probes["queues"].error is None
    assert figures(q) == procrastinate_truth(db, schema, "mail") == {"ready": 2, "delayed": 1, "in_flight": 0, "dead": 1,
                                                                     "depth": 3}
    assert q.table == sql.Identifier(schema, "procrastinate_jobs").as_string(None)
    with open_probe_connection(db.target) as conn:
        details = queue_details(conn, "procrastinate", name)
    assert len(details.head) == 3 and [row["task_name"] for row in details.dead] == ["bounce"]
    # Named in the config, looked for there only.
    only = rows_of(run_cycle(db.target, Config(source_options={"procrastinate": {"schema": schema}})), "procrastinate")
    assert set(only) == {"mail"} and only["mail"].ready == 2


def test_a_schema_the_role_may_not_use_is_not_looked_into_and_said(db):
    procrastinate_install(db, "jobs", ready=1, scheduled=0, failed=0)
    procrastinate_install(db, "open", ready=1, scheduled=0, failed=0)
    role = f"qt_usage_{db.name}"
    with db.connect() as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA open, queuetop TO {}").format(sql.Identifier(role)))
        conn.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA open, queuetop TO {}").format(sql.Identifier(role)))
    try:
        limited = resolve_target(db.server.uri(db.name, role))
        assert limited is not None
        snap = run_cycle(limited)
        # "jobs" is there but out of reach (no USAGE): not looked into, no error either; but said
        # (issue 43: a note, not silence), what the role sees beside it being right.
        assert set(rows_of(snap, "procrastinate")) == {"open.mail"}
        assert snap.probes["queues"].error is None
        notes = snap.probes["queues"].notes or ""
        assert "procrastinate in schema jobs: its queues are unknown: this role has no USAGE privilege on schema jobs" in notes
        assert "schema open" not in notes
    finally:
        with db.connect() as conn:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


# -- the cost ----------------------------------------------------------------------------------

class StatementLog:
    """The statements a probe connection sends, from libpq's own protocol trace (PQtrace, which
    psycopg exposes as `pgconn.trace`): each execution (a Bind, or a simple Query) with its text
    (from the Parse that named it)."""

    def __init__(self, conn) -> None:
        self.conn = conn
        self.file = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
        self.named: dict[str, str] = {}  # prepared statement name ("" unnamed) -> its text

    def __enter__(self) -> StatementLog:
        from psycopg import pq

        self.conn.pgconn.trace(self.file.fileno())
        self.conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        return self

    def __exit__(self, *exc: object) -> None:
        self.conn.pgconn.untrace()

    def executed(self) -> list[str]:
        """The statements executed since the last call, in order."""
        self.file.seek(0)
        text = self.file.read()
        self.file.seek(0)
        self.file.truncate()
        out = []
        # A message: a line "F|B <tab> length <tab> type <tab> ..." up to the next one (a statement's
        # text keeps its line breaks).
        for message in re.split(r"\n(?=[FB]\t\d+\t[A-Za-z]+\t)", text):
            head = re.match(r"F\t\d+\t(Parse|Bind|Query)\t(.*)\Z", message, re.DOTALL)
            if head is None:
                continue
            kind, rest = head.groups()
            if kind == "Parse":
                parsed = re.match(r' "([^"]*)" "(.*)"[^"]*\Z', rest, re.DOTALL)  # then the parameter types
                assert parsed is not None, rest[:200]
                self.named[parsed.group(1)] = parsed.group(2)
            elif kind == "Bind":
                bound = re.match(r' "([^"]*)" "([^"]*)"', rest)
                assert bound is not None, rest[:200]
                out.append(self.named.get(bound.group(2), "?"))
            else:
                query = re.match(r' "(.*)"\s*\Z', rest, re.DOTALL)
                out.append(query.group(1) if query else rest)
        return out


# What a statement that looks for what is installed reads: a name looked up in the catalog (the
# former per-source checks, and a job table's own lookup, which its instance keeps), the
# extensions, the schemas the role may use (the signature statement).
DETECTION_MARKS = ("to_regclass", "to_regproc", "to_regnamespace", "pg_extension", "has_schema_privilege")


def detection_statements(statements: list[str]) -> list[str]:
    return [s for s in statements if any(mark in s for mark in DETECTION_MARKS)]


def test_one_catalog_statement_per_cycle_and_instances_kept_across_cycles(db):
    procrastinate_install(db, "public", ready=2, scheduled=0, failed=0)
    procrastinate_install(db, "jobs", ready=1, scheduled=0, failed=0)
    procrastinate_install(db, "more", ready=1, scheduled=0, failed=0)
    probes = PostgresProbes()
    with open_probe_connection(db.target) as conn:
        probes.server(conn)
        with StatementLog(conn) as log:
            first = probes.queues(conn)
            log.executed()
            instances = {(s.name, s.schema): s for s in probes.sources if s.name == "procrastinate"}
            assert set(instances) == {("procrastinate", "public"), ("procrastinate", "jobs"), ("procrastinate", "more")}
            for _ in range(3):
                again = probes.queues(conn)
                statements = log.executed()
                assert len(statements) > 5  # the trace was read: every source's statements are there
                detecting = detection_statements(statements)
                # Every source's detection: one statement (the libraries' signatures in every schema,
                # the engine's tables with them), whatever the number of installs.
                assert len(detecting) == 1, detecting
                assert "has_schema_privilege" in detecting[0]
                assert {(s.name, s.schema): s for s in probes.sources if s.name == "procrastinate"} == instances
                assert all(instances[key] is source for key, source in
                           {(s.name, s.schema): s for s in probes.sources if s.name == "procrastinate"}.items())
            assert {q.name for q in again} == {q.name for q in first} >= {"mail", "jobs.mail", "more.mail"}
        # An install that goes is dropped, the others kept as they were; a new one gets an instance.
        with db.connect() as admin:
            admin.execute("DROP SCHEMA more CASCADE")
        procrastinate_install(db, "later", ready=1, scheduled=0, failed=0)
        names = {q.name for q in probes.queues(conn) if q.source == "procrastinate"}
        assert names == {"mail", "jobs.mail", "later.mail"}
        now = {(s.name, s.schema): s for s in probes.sources if s.name == "procrastinate"}
        assert now[("procrastinate", "public")] is instances[("procrastinate", "public")]
        assert now[("procrastinate", "jobs")] is instances[("procrastinate", "jobs")]
        assert ("procrastinate", "more") not in now and ("procrastinate", "later") in now
