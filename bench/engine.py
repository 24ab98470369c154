"""`queuetop bench engine`: the engine's throughput against pgbench running the very same SQL.

pgbench (shipped with the embedded server) gets the statements from queries.sql with the
`%(name)s` placeholders turned into pgbench `:name` variables, nothing else changed; it runs
them with the same number of clients, on the same server, from the same queue depth, in rounds
interleaved with queuetop's own runs. queuetop's side is the real worker pool (claim mode, noop
handler) and the real enqueue path, so the ratio is the cost of the engine's client side.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import psycopg

from dbcore.database import Target, connect, for_child_process, one
from dbcore.errors import UsageError
from dbcore.pooler import link_of
from dbcore.sqlfiles import PLACEHOLDER, Queries
from queues import schema
from queues.handlers import parse_handler
from queues.processes import SPAWN, ProcessPool
from queues.table_queue import TableQueue
from queues.worker import WorkerPool, WorkOptions

BENCH_QUEUE = "bench.engine"
VISIBILITY_S = 30.0
T = TypeVar("T")
BENCH_SQL = Queries("bench", "engine.sql")


def find_pgbench() -> str:
    try:
        from pgserver._commands import POSTGRES_BIN_PATH

        candidate = POSTGRES_BIN_PATH / "pgbench"
        if candidate.exists():
            return str(candidate)
    except ImportError:  # pragma: no cover - pgserver is a dependency
        pass
    found = shutil.which("pgbench")
    if not found:
        raise RuntimeError("pgbench not found (it ships with pgserver)")
    return found


def to_pgbench(statement: str, *, gset: bool = False) -> str:
    """The engine's statement as a pgbench command: same text, `:name` variables."""
    text = PLACEHOLDER.sub(r":\1", statement.strip()).rstrip(";").rstrip()
    return text + (" \\gset\n" if gset else ";\n")


def _pg_array_literal(values: list[str]) -> str:
    escaped = (v.replace("\\", "\\\\").replace('"', '\\"') for v in values)
    return "{" + ",".join(f'"{v}"' for v in escaped) + "}"


class EngineBench:
    def __init__(self, target: Target, *, messages: int, single_messages: int, concurrency: int, batch: int,
                 progress: Callable[[str], None] | None, pool: str = "threads", prefetch: bool = False):
        self.target = target
        self.messages = messages
        self.single_messages = single_messages
        self.concurrency = concurrency
        self.batch = batch
        self.pool = pool  # "threads": one process; "processes": one per worker (queues/processes.py)
        self.prefetch = prefetch
        self.progress = progress or (lambda _line: None)
        self.pgbench = find_pgbench()
        self.workdir = Path(tempfile.mkdtemp(prefix="queuetop-bench-"))
        self.conn = connect(target, application_name="queuetop-bench")
        # pgbench prepares as queuetop does: by name where the server session is the connection's,
        # unnamed (-M extended) through a pooler that does not pin it, where queuetop does the same.
        self.pgbench_protocol = "prepared" if link_of(self.conn).pinned else "extended"
        schema.install(self.conn)
        self.queue = TableQueue.create(self.conn, BENCH_QUEUE)

    def close(self) -> None:
        self.conn.close()
        shutil.rmtree(self.workdir, ignore_errors=True)

    # -- set-up -----------------------------------------------------------------------------

    def reset(self, depth: int) -> None:
        self.conn.execute(self.queue.statement("truncate_queue"))
        if depth:
            self.conn.execute(self.queue.statement("fill_queue"), {"count": depth})
        self.conn.execute(self.queue.statement("vacuum_queue"))

    def _run_pgbench(self, script: str, transactions_per_client: int, defines: dict[str, str] | None = None) -> float:
        path = self.workdir / "script.sql"
        path.write_text(script)
        cmd = [
            self.pgbench, "-n", "-M", self.pgbench_protocol, "-f", str(path),
            "-c", str(self.concurrency), "-j", str(self.concurrency),
            "-t", str(transactions_per_client),
        ]
        for key, value in (defines or {}).items():
            cmd += ["-D", f"{key}={value}"]
        conninfo, env = for_child_process(self.target)
        cmd.append(conninfo)
        env["PGAPPNAME"] = "queuetop-bench-pgbench"
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
        match = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", proc.stdout)
        failed = re.search(r"number of failed transactions: [1-9]", proc.stdout)
        if proc.returncode != 0 or match is None or failed:
            raise RuntimeError(f"pgbench failed: {proc.stderr.strip() or proc.stdout.strip()}")
        return float(match.group(1))

    # -- dequeue ----------------------------------------------------------------------------

    def _count(self, batch: int) -> int:
        return self.messages if batch > 1 else self.single_messages

    def queuetop_dequeue(self, batch: int) -> float:
        messages = self._count(batch)
        self.reset(messages)
        # The clock starts once every worker is connected and has prepared its statements, as
        # pgbench's rate is "without initial connection time" and the peers' clients connect first.
        options = WorkOptions(workers=self.concurrency, batch=batch, until_empty=True, visibility_s=VISIBILITY_S,
                              processes=self.concurrency if self.pool == "processes" else 1, prefetch=self.prefetch)
        barrier: Any
        if options.processes > 1:
            barrier = SPAWN.Barrier(self.concurrency + 1)  # every worker of every process, and the clock
            pool: WorkerPool | ProcessPool = ProcessPool(self.target, BENCH_QUEUE, "noop", options, start_barrier=barrier)
        else:
            barrier = threading.Barrier(self.concurrency + 1)
            pool = WorkerPool(self.target, BENCH_QUEUE, parse_handler("noop"), options, start_barrier=barrier)
        started: list[float] = []

        def clock() -> None:
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait(timeout=60)
            started.append(time.perf_counter())

        timer = threading.Thread(target=clock, daemon=True)
        timer.start()
        summary = pool.run()
        ended = time.perf_counter()
        if isinstance(pool, ProcessPool) and pool.last_done is not None:
            ended = pool.last_done  # the work's end, not the interpreters' exits after it
        timer.join()
        elapsed = ended - started[0]
        if summary.processed != messages:
            raise RuntimeError(f"queuetop processed {summary.processed} of {messages} messages")
        return messages / elapsed

    def pgbench_dequeue(self, batch: int) -> float:
        messages = self._count(batch)
        per_client = messages // (self.concurrency * batch)
        # Slack so that no client ever finds the queue empty (\gset needs a row).
        self.reset(messages + self.concurrency * batch * 4)
        header = "\\set token random(1, 9223372036854775806)\n\\set visibility_s 30\n"
        if batch == 1:
            script = header + to_pgbench(self.queue.statement("claim_one"), gset=True) + to_pgbench(self.queue.statement("ack_one"))
        else:
            script = (
                header + f"\\set batch {batch}\n"
                + to_pgbench(self.queue.statement("claim_batch"), gset=True)
                + to_pgbench(self.queue.statement("ack_batch"))
            )
        tps = self._run_pgbench(script, per_client)
        remaining = self.queue.counts(self.conn).depth
        expected = self.concurrency * batch * 4 + messages - per_client * self.concurrency * batch
        if remaining != expected:
            raise RuntimeError(f"pgbench left {remaining} messages, expected {expected}")
        return tps * batch

    # -- enqueue ----------------------------------------------------------------------------

    def queuetop_enqueue(self, batch: int) -> float:
        self.reset(0)
        per_client = self._count(batch) // (self.concurrency * batch)
        bodies = [json.dumps({"n": n}) for n in range(batch)]

        def client(conn: psycopg.Connection) -> None:
            for _ in range(per_client):
                if batch == 1:
                    self.queue.enqueue(conn, bodies[0])
                else:
                    self.queue.enqueue_batch(conn, bodies)

        _, elapsed = run_clients(self.target, self.concurrency, "queuetop-bench-enqueue", client)
        return per_client * self.concurrency * batch / elapsed

    def pgbench_enqueue(self, batch: int) -> float:
        self.reset(0)
        per_client = self._count(batch) // (self.concurrency * batch)
        bodies = [json.dumps({"n": n}) for n in range(batch)]
        if batch == 1:
            script, defines = to_pgbench(self.queue.statement("enqueue"), gset=True), {"body": bodies[0]}
        else:
            script, defines = to_pgbench(self.queue.statement("enqueue_batch")), {"bodies": _pg_array_literal(bodies)}
        return self._run_pgbench(script, per_client, defines) * batch

    # -- idle -------------------------------------------------------------------------------

    def idle_queries_per_s(self, seconds: float, workers: int = 4) -> tuple[float, float]:
        """(claims the pool sent per second, scans of the queue table per second) while idle."""
        self.reset(0)
        pool = WorkerPool(self.target, BENCH_QUEUE, parse_handler("noop"), WorkOptions(workers=workers))
        pool.start()
        try:
            deadline = time.monotonic() + 10
            while self._sessions_idle(workers + 1) is False and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(1.5)  # statistics reach the server up to a second late: skip start-up claims
            before, polls_before, t0 = self._queue_scans(), pool.polls, time.monotonic()
            time.sleep(seconds)
            after, polls_after, t1 = self._queue_scans(), pool.polls, time.monotonic()
        finally:
            pool.stop()
            pool.join(10)
        return (polls_after - polls_before) / (t1 - t0), (after - before) / (t1 - t0)

    def _sessions_idle(self, expected: int) -> bool:
        row = one(self.conn.execute(BENCH_SQL["idle_sessions"], {"pattern": f"queuetop-%:claim:{BENCH_QUEUE}"}))
        return row[0] >= expected

    def _queue_scans(self) -> int:
        """Statements that touched the queue table (each claim scans it once). Database-wide
        commit counts are no good here: stats from the runs before arrive late."""
        self.conn.execute(BENCH_SQL["clear_stats_snapshot"])
        return queue_scans(self.conn, self.queue)


def queue_scans(conn: psycopg.Connection, queue: TableQueue) -> int:
    row = conn.execute(BENCH_SQL["table_scans"], {"table": queue.qualified_name}).fetchone()
    return int(row[0]) if row else 0


def run_clients(target: Target, concurrency: int, application_name: str,
                work: Callable[[psycopg.Connection], T]) -> tuple[list[T], float]:
    """`concurrency` threads, each with its own session, run `work(conn)` at once (released
    together by a barrier); returns their results and the seconds until the last one ended.
    The first client's error is raised."""
    results: list[T] = []
    errors: list[BaseException] = []
    ready = threading.Barrier(concurrency + 1)

    def client() -> None:
        try:
            with connect(target, application_name=application_name) as conn:
                ready.wait()
                results.append(work(conn))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    ready.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise errors[0]
    return results, elapsed


def _summary(ours: list[float], theirs: list[float]) -> dict[str, object]:
    q, p = statistics.median(ours), statistics.median(theirs)
    return {
        "queuetop_msgs_per_s": round(q, 1),
        "pgbench_msgs_per_s": round(p, 1),
        "ratio": round(q / p, 3) if p else None,
        # Every round, in order, so the spread (disk and scheduler noise) is on record too.
        "queuetop_rounds": [round(x) for x in ours],
        "pgbench_rounds": [round(x) for x in theirs],
    }


def run_engine_bench(
    target: Target,
    *,
    messages: int = 100_000,
    single_messages: int = 10_000,
    concurrency: Sequence[int] = (2, 8),
    batch: int = 100,
    rounds: int = 3,
    idle_seconds: float = 10.0,
    progress: Callable[[str], None] | None = None,
    pool: str = "threads",
    prefetch: bool = False,
) -> dict[str, object]:
    concurrencies = list(dict.fromkeys(concurrency))  # in order, once each
    if not concurrencies:
        raise UsageError("--concurrency needs at least one number of clients")
    most = max(concurrencies)
    if messages < most * batch or single_messages < most:
        raise UsageError(f"--messages must be at least concurrency x batch ({most * batch})")
    benches = {
        clients: EngineBench(target, messages=messages, single_messages=single_messages, concurrency=clients, batch=batch,
                             progress=progress, pool=pool, prefetch=prefetch)
        for clients in concurrencies
    }
    first = benches[concurrencies[0]]
    say = first.progress
    results: dict[int, dict[str, tuple[list[float], list[float]]]] = {
        clients: {name: ([], []) for name in CELLS} for clients in concurrencies
    }
    try:
        server_version = one(first.conn.execute(BENCH_SQL["server_version"]))[0]
        link, protocol = link_of(first.conn).says, first.pgbench_protocol
        for round_no in range(rounds):
            for clients, bench in benches.items():
                plan: dict[str, tuple[Callable[[], float], Callable[[], float]]] = {
                    "dequeue_single": (partial(bench.queuetop_dequeue, 1), partial(bench.pgbench_dequeue, 1)),
                    "dequeue_batch": (partial(bench.queuetop_dequeue, batch), partial(bench.pgbench_dequeue, batch)),
                    "enqueue_single": (partial(bench.queuetop_enqueue, 1), partial(bench.pgbench_enqueue, 1)),
                    "enqueue_batch": (partial(bench.queuetop_enqueue, batch), partial(bench.pgbench_enqueue, batch)),
                }
                for name, (ours, theirs) in plan.items():
                    # Alternate who goes first so that drift (autovacuum, caches) hits both sides.
                    order = [(0, ours), (1, theirs)] if round_no % 2 == 0 else [(1, theirs), (0, ours)]
                    for side, run in order:
                        rate = run()
                        results[clients][name][side].append(rate)
                        say(f"round {round_no + 1}/{rounds} concurrency {clients} {name} "
                            f"{'queuetop' if side == 0 else 'pgbench'}: {rate:,.0f} msgs/s")
        idle, idle_scans = first.idle_queries_per_s(idle_seconds)
        say(f"idle queue, 4 workers: {idle:.2f} claims/s, {idle_scans:.2f} table scans/s")
        first.reset(0)
    finally:
        for bench in benches.values():
            bench.close()
    by_concurrency = {
        str(clients): {name: _summary(ours, theirs) for name, (ours, theirs) in cells.items()}
        for clients, cells in results.items()
    }
    ratios = [ratio for cells in by_concurrency.values() for cell in cells.values() if isinstance(ratio := cell["ratio"], float)]
    out: dict[str, object] = {
        "benchmark": "engine",
        "server_version": server_version,
        "mode": "claim",
        # What stands between (dbcore/pooler.py): direct, or a pooler, where both sides run their
        # statements unnamed (pgbench -M extended) when it does not pin the server session.
        "link": link,
        "pgbench_protocol": protocol,
        # queuetop's dequeue side: "threads" (one process) or "processes" (one per worker, engine work --processes).
        "pool": pool,
        "prefetch": prefetch,  # queuetop's workers claim ahead (engine work --prefetch)
        "concurrency": concurrencies,
        "messages": messages,
        "single_messages": single_messages,
        "batch": batch,
        "rounds": rounds,
        # Each concurrency's four cells: queuetop's and pgbench's medians, their ratio, every round.
        "by_concurrency": by_concurrency,
        "min_ratio": min(ratios) if ratios else None,
    }
    out["idle_queries_per_s"] = round(idle, 2)
    out["idle_table_scans_per_s"] = round(idle_scans, 2)
    out["idle_workers"] = 4
    out["idle_poll_interval_s"] = WorkOptions().poll_interval_s
    return out


CELLS = ("dequeue_single", "dequeue_batch", "enqueue_single", "enqueue_batch")
