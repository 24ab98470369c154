"""`queuetop bench sources`: what reading the six queue libraries costs queuetop, at a small and a
large number of jobs per library, next to the libraries' own monitoring calls in the same run.

It works in a database of its own (`queuetop_bench_sources`, created and dropped on the target's
server: the role needs CREATEDB). Each library's schema is installed as the library installs it
(PGMQ's SQL from its PyPI client; Procrastinate's schema manager; River's `river_job` as its Python
client ships it, with the fetching and (state, finalized_at) indexes of River's migrations;
PgQueuer's install SQL from its package; pg-boss's start() and Graphile Worker's migrate() through
Node.js), then filled in bulk with jobs shaped as each library writes them (see
bench/sql/postgresql/sources.sql). A library whose package (or Node.js) is missing is skipped,
and the result says so.

Measured: queuetop's queues probe over the six (p50 of `cycles`), each source's share, and the
libraries' own calls where they have one: PGMQ `metrics_all()`, Procrastinate's
`JobManager.list_queues()` (its API), pg-boss `getQueueSize` per queue (its SQL), PgQueuer's
`Queries.queue_size()` (the statement its query builder makes). Graphile Worker and River offer
none in a language that runs here.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import psycopg
from psycopg import sql

from dbcore.database import Target, connect, for_child_process, one, resolve_target
from dbcore.errors import OperationFailed, UsageError
from dbcore.sqlfiles import Queries
from probes.config import Config
from probes.postgres import PostgresProbes, open_probe_connection
from probes.sources import source_classes

SOURCES_BENCH_SQL = Queries("bench", "sources.sql")
DATABASE = "queuetop_bench_sources"
QUEUES = ("q0", "q1", "q2", "q3")
LIBRARIES = ("pgmq", "procrastinate", "pg-boss", "graphile-worker", "river", "pgqueuer")
NODE_PEERS = Path(__file__).resolve().parent.parent / ".cache" / "node-peers" / "node_modules"
PEER_SCRIPTS = Path(__file__).resolve().parent.parent / "tests" / "peers"


def run_sources_bench(target: Target, *, small: int = 1_000, large: int = 1_000_000, cycles: int = 20,
                      progress: Callable[[str], None] | None = None) -> dict[str, object]:
    if not 100 <= small <= large or cycles < 1:
        raise UsageError("need 100 <= --small <= --large and --cycles >= 1")
    say = progress or (lambda _line: None)
    results: dict[str, Any] = {"benchmark": "sources", "cycles": cycles, "sizes": {}}
    for label, n in (("small", small), ("large", large)):
        with bench_database(target) as bench:
            installed, skipped = _install(bench, say)
            results["skipped"] = skipped
            with connect(bench, application_name="queuetop-bench") as conn:
                for library in installed:
                    say(f"{label}: {n:,} {library} jobs")
                    _fill(conn, library, n)
                conn.execute(SOURCES_BENCH_SQL["analyze"])
            results["sizes"][label] = {"jobs_per_library": n, **_measure(bench, installed, cycles)}
            say(f"{label}: queuetop {results['sizes'][label]['queuetop_ms_p50']:.1f} ms p50, "
                f"libraries' own calls {results['sizes'][label]['libraries_ms_p50_sum']:.1f} ms")
    large_result = results["sizes"]["large"]
    results["libraries"] = [name for name in LIBRARIES if name not in results["skipped"]]
    results["ratio_large"] = (round(large_result["queuetop_ms_p50"] / large_result["libraries_ms_p50_sum"], 3)
                              if large_result["libraries_ms_p50_sum"] else None)
    return results


class bench_database:
    """A fresh database for the run, dropped afterwards."""

    def __init__(self, target: Target) -> None:
        self.target = target

    def __enter__(self) -> Target:
        with connect(self.target, application_name="queuetop-bench") as admin:
            _drop(admin)
            admin.execute(sql.SQL(SOURCES_BENCH_SQL["create_database"]).format(database=sql.Identifier(DATABASE)))
        from psycopg import conninfo

        bench = resolve_target(conninfo.make_conninfo(self.target.conninfo, dbname=DATABASE))
        assert bench is not None  # a non-empty DSN
        return bench

    def __exit__(self, *exc: object) -> None:
        with connect(self.target, application_name="queuetop-bench") as admin:
            _drop(admin)


def _drop(admin: psycopg.Connection[Any]) -> None:
    admin.execute(SOURCES_BENCH_SQL["end_sessions"], {"database": DATABASE})
    admin.execute(sql.SQL(SOURCES_BENCH_SQL["drop_database"]).format(database=sql.Identifier(DATABASE)))


def _install(bench: Target, say: Callable[[str], None]) -> tuple[list[str], dict[str, str]]:
    installed: list[str] = []
    skipped: dict[str, str] = {}
    with connect(bench, application_name="queuetop-bench") as conn:
        try:
            script = resources.files("pgmq").joinpath("sql", "pgmq.sql").read_text(encoding="utf-8")
            conn.execute(script)
            conn.execute(SOURCES_BENCH_SQL["pgmq_create"], {"queue": "bench"})
            installed.append("pgmq")
        except ModuleNotFoundError:
            skipped["pgmq"] = "the pgmq package is not installed (pip install -e '.[test]')"
        try:
            schema = resources.files("procrastinate").joinpath("sql", "schema.sql").read_text(encoding="utf-8")
            conn.execute(schema)
            installed.append("procrastinate")
        except ModuleNotFoundError:
            skipped["procrastinate"] = "the procrastinate package is not installed (pip install -e '.[test]')"
        try:
            from riverqueue.driver import riversqlalchemy

            ddl = resources.files(riversqlalchemy).joinpath("dbsqlc", "river_job.sql").read_text(encoding="utf-8")
            conn.execute(ddl.split("-- name:")[0])
            conn.execute(SOURCES_BENCH_SQL["river_index"])
            installed.append("river")
        except ModuleNotFoundError:
            skipped["river"] = "the riverqueue package is not installed (pip install -e '.[test]')"
        try:
            conn.execute(_pgqueuer_builders()[0].build_install_query())  # what its Queries.install() runs
            installed.append("pgqueuer")
        except ModuleNotFoundError:
            skipped["pgqueuer"] = "the pgqueuer package is not installed (pip install -e '.[test]')"
        # pg-boss calls gen_random_uuid(), core from PostgreSQL 13; before it pgcrypto's, as its documentation says.
        if not one(conn.execute(SOURCES_BENCH_SQL["has_gen_random_uuid"]))[0]:
            conn.execute(SOURCES_BENCH_SQL["create_pgcrypto"])
    if shutil.which("node") and NODE_PEERS.exists():
        say("installing pg-boss and Graphile Worker schemas through Node.js")
        done = subprocess.run(["node", str(PEER_SCRIPTS / "install_schemas.mjs"), _libpq_uri(bench), *QUEUES],
                              capture_output=True, text=True, timeout=300,
                              env={**for_child_process(bench)[1], "QUEUETOP_NODE_PEERS": str(NODE_PEERS)})
        if done.returncode != 0:
            why = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise OperationFailed(f"installing the pg-boss and Graphile Worker schemas failed: {why}")
        installed += ["pg-boss", "graphile-worker"]
    else:
        reason = "Node.js and the peer packages are needed (make test installs them into .cache/node-peers)"
        skipped.update({"pg-boss": reason, "graphile-worker": reason})
    return installed, skipped


def _libpq_uri(target: Target) -> str:
    """A URI that Node.js's pg (pg-connection-string) reads as libpq reads the target, whatever
    form the DSN took (a key=value string, a service, a socket directory with a port, libpq's
    environment): the parameters libpq settled on once connected, a socket directory and its port
    in the query string (`postgresql://user@:5433/db` is no URL to Node). The password is not in
    it: the child gets it in its environment (for_child_process)."""
    with connect(target, application_name="queuetop-bench") as conn:
        host, port, user, dbname = conn.info.host, conn.info.port, conn.info.user, conn.info.dbname
        sslmode = conn.info.get_parameters().get("sslmode")
    query: dict[str, str] = {}
    if host.startswith("/"):
        netloc = f"{quote(user, safe='')}@"
        query.update(host=host, port=str(port))
    else:
        shown = f"[{host}]" if ":" in host else host
        netloc = f"{quote(user, safe='')}@{shown}:{port}"
    if sslmode:
        query["sslmode"] = sslmode
    return f"postgresql://{netloc}/{quote(dbname, safe='')}" + (f"?{urlencode(query, safe='/')}" if query else "")


def _pgqueuer_builders() -> tuple[Any, Any]:
    """PgQueuer's query builders for its default install (no schema, no prefix: the search_path's
    `pgqueuer` tables): its install's and its queue statements'."""
    from pgqueuer.adapters.persistence.qb import QueryBuilderEnvironment, QueryQueueBuilder
    from pgqueuer.domain.settings import DBSettings

    return QueryBuilderEnvironment(DBSettings()), QueryQueueBuilder(DBSettings())


def _fill(conn: Any, library: str, n: int) -> None:
    if library == "pgmq":
        statement = SOURCES_BENCH_SQL["fill_pgmq"]
    elif library == "procrastinate":
        statement = SOURCES_BENCH_SQL["fill_procrastinate"]
    elif library == "pg-boss":
        statement = SOURCES_BENCH_SQL["fill_pgboss"]
    elif library == "graphile-worker":
        statement = SOURCES_BENCH_SQL["fill_graphile"]
    elif library == "pgqueuer":
        statement = SOURCES_BENCH_SQL["fill_pgqueuer"]
    else:
        statement = SOURCES_BENCH_SQL["fill_river"]
    conn.execute(statement, {"n": n})


def _p50(run: Callable[[], object], cycles: int) -> float:
    run()  # warm: parsed, cached
    times = []
    for _ in range(cycles):
        started = time.perf_counter()
        run()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def _measure(bench: Target, installed: list[str], cycles: int) -> dict[str, Any]:
    config = Config()
    probes = PostgresProbes(config)
    by_source = {cls.name: cls(config) for name, cls in source_classes().items() if name in installed}
    out: dict[str, Any] = {}
    with open_probe_connection(bench, application_name="queuetop-bench-probe") as conn:
        probes.server(conn)
        out["queuetop_ms_p50"] = round(_p50(lambda: probes.queues(conn), cycles), 2)
        snapshot = probes.queues(conn)
        out["queues"] = [{"source": q.source, "name": q.name, "depth": q.depth, "ready": q.ready, "in_flight": q.in_flight,
                          "delayed": q.delayed, "dead": q.dead, "depth_is_estimate": q.depth_is_estimate}
                         for q in snapshot]
        per_source = {}
        for name, source in by_source.items():
            detection = source.detect(conn)
            if detection is not None:
                def sample(source: Any = source, detection: Any = detection) -> None:
                    source.sample(conn, detection)
                per_source[name] = round(_p50(sample, cycles), 2)
        out["queuetop_ms_p50_by_source"] = per_source
        own: dict[str, float] = {}
        if "pgmq" in installed:
            def metrics_all() -> None:
                conn.execute(SOURCES_BENCH_SQL["pgmq_metrics_all"]).fetchall()
            own["pgmq metrics_all()"] = round(_p50(metrics_all, cycles), 2)
        if "pg-boss" in installed:
            def queue_sizes() -> None:
                for queue in QUEUES:
                    conn.execute(SOURCES_BENCH_SQL["pgboss_queue_size"], {"queue": queue}).fetchall()
            own["pg-boss getQueueSize x4"] = round(_p50(queue_sizes, cycles), 2)
        if "pgqueuer" in installed:
            queue_size = _pgqueuer_builders()[1].build_queue_size_query()

            def pgqueuer_queue_size() -> None:
                conn.execute(queue_size).fetchall()
            own["pgqueuer queue_size()"] = round(_p50(pgqueuer_queue_size, cycles), 2)
    if "procrastinate" in installed:
        own["procrastinate list_queues()"] = round(_procrastinate_list_queues(bench, cycles), 2)
    out["libraries_ms_p50"] = own
    out["libraries_ms_p50_sum"] = round(sum(own.values()), 2)
    out["within_50_ms"] = out["queuetop_ms_p50"] <= 50
    out["within_half_of_libraries"] = out["queuetop_ms_p50"] <= 0.5 * out["libraries_ms_p50_sum"] if own else None
    return out


def _procrastinate_list_queues(bench: Target, cycles: int) -> float:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=bench.conninfo))
    with app.open():
        return _p50(lambda: list(app.job_manager.list_queues()), cycles)


def report(result: dict[str, object]) -> str:
    return json.dumps(result, indent=2)
