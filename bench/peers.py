"""`queuetop bench peers`: the reference engine's dequeue throughput beside PGMQ's and
Procrastinate's own dequeue paths, on the same server, at the same concurrency and depth, in
interleaved rounds.

- queuetop: its real worker pool (claim + ack, `noop` handler), one message and a batch per claim;
- PGMQ: `pgmq.read` then `pgmq.delete` (one message; a batch), and `pgmq.pop` (a batch);
- Procrastinate: `procrastinate_fetch_job_v2` then `procrastinate_finish_job_v1` (one job at a
  time: its worker fetches one).

The peers' statements run from Python threads through psycopg with server-side prepared
statements, as the engine's do; each thread has its own session. Works in the database of
`bench sources` (created and dropped).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from functools import partial
from importlib import resources
from typing import Any

from dbcore.database import Target, connect, one
from dbcore.errors import UsageError
from dbcore.sqlfiles import Queries

from .engine import EngineBench, run_clients
from .sources import bench_database

PEERS_SQL = Queries("bench", "peers.sql")


def run_peers_bench(target: Target, *, messages: int = 20_000, concurrency: Sequence[int] = (2, 8), batch: int = 100,
                    rounds: int = 3, progress: Callable[[str], None] | None = None) -> dict[str, object]:
    concurrencies = list(dict.fromkeys(concurrency))
    most = max(concurrencies, default=0)
    if not concurrencies or messages < most * batch or rounds < 1:
        raise UsageError(f"need --messages >= concurrency x batch ({most * batch}), --rounds >= 1")
    say = progress or (lambda _line: None)
    try:
        pgmq_sql = resources.files("pgmq").joinpath("sql", "pgmq.sql").read_text(encoding="utf-8")
        procrastinate_sql = resources.files("procrastinate").joinpath("sql", "schema.sql").read_text(encoding="utf-8")
    except ModuleNotFoundError as exc:
        raise UsageError(f"bench peers needs the test extras (pip install -e '.[test]'): {exc}") from None
    rates: dict[int, dict[str, list[float]]] = {clients: {} for clients in concurrencies}
    with bench_database(target) as bench:
        with connect(bench, application_name="queuetop-bench") as conn:
            conn.execute(pgmq_sql)
            conn.execute(PEERS_SQL["pgmq_create"])
            conn.execute(procrastinate_sql)
        engines = {clients: EngineBench(bench, messages=messages, single_messages=messages, concurrency=clients, batch=batch,
                                        progress=None) for clients in concurrencies}
        try:
            for round_no in range(rounds):
                for clients, engine in engines.items():
                    runs: dict[str, Callable[[], float]] = {
                        "queuetop claim+ack, single": partial(engine.queuetop_dequeue, 1),
                        "queuetop claim+ack, batch": partial(engine.queuetop_dequeue, batch),
                        "pgmq read+delete, single": partial(_pgmq, bench, messages, clients, 1, pop=False),
                        "pgmq read+delete, batch": partial(_pgmq, bench, messages, clients, batch, pop=False),
                        "pgmq pop, batch": partial(_pgmq, bench, messages, clients, batch, pop=True),
                        "procrastinate fetch+finish, single": partial(_procrastinate, bench, messages, clients),
                    }
                    order = list(runs.items()) if round_no % 2 == 0 else list(reversed(runs.items()))
                    for name, run in order:
                        rate = run()
                        rates[clients].setdefault(name, []).append(rate)
                        say(f"round {round_no + 1}/{rounds} concurrency {clients} {name}: {rate:,.0f} msgs/s")
        finally:
            for engine in engines.values():
                engine.close()
    by_concurrency: dict[str, object] = {}
    for clients, measured in rates.items():
        medians = {name: round(statistics.median(values), 1) for name, values in measured.items()}
        by_concurrency[str(clients)] = {
            "msgs_per_s_p50": medians,
            "rounds_msgs_per_s": {k: [round(x) for x in v] for k, v in measured.items()},
            "ratios": {
                "single: queuetop / pgmq read+delete": _ratio(medians, "queuetop claim+ack, single", "pgmq read+delete, single"),
                "single: queuetop / procrastinate": _ratio(medians, "queuetop claim+ack, single", "procrastinate fetch+finish, single"),
                "batch: queuetop / pgmq read+delete": _ratio(medians, "queuetop claim+ack, batch", "pgmq read+delete, batch"),
                "batch: queuetop / pgmq pop": _ratio(medians, "queuetop claim+ack, batch", "pgmq pop, batch"),
            },
        }
    return {"benchmark": "peers", "messages": messages, "concurrency": concurrencies, "batch": batch, "rounds": rounds,
            "by_concurrency": by_concurrency}


def _ratio(medians: dict[str, float], ours: str, theirs: str) -> float | None:
    return round(medians[ours] / medians[theirs], 3) if medians.get(theirs) else None


def _threads(bench: Target, concurrency: int, work: Callable[[Any], int], expected: int) -> float:
    """`concurrency` sessions each running `work(conn)` until it returns; messages/s overall."""
    done, elapsed = run_clients(bench, concurrency, "queuetop-bench-peer", work)
    if sum(done) != expected:
        raise RuntimeError(f"the peer processed {sum(done)} of {expected} messages")
    return expected / elapsed


def _pgmq(bench: Target, messages: int, concurrency: int, batch: int, *, pop: bool) -> float:
    with connect(bench, application_name="queuetop-bench") as conn:
        conn.execute(PEERS_SQL["pgmq_empty"])
        conn.execute(PEERS_SQL["pgmq_fill"], {"n": messages})

    def work(conn: Any) -> int:
        count = 0
        while True:
            if pop:
                ids = [r[0] for r in conn.execute(PEERS_SQL["pgmq_pop"], {"qty": batch}, prepare=True)]
            else:
                ids = [r[0] for r in conn.execute(PEERS_SQL["pgmq_read"], {"qty": batch}, prepare=True)]
                if ids:
                    conn.execute(PEERS_SQL["pgmq_delete"], {"ids": ids}, prepare=True).fetchall()
            if not ids:
                return count
            count += len(ids)

    return _threads(bench, concurrency, work, messages)


def _procrastinate(bench: Target, messages: int, concurrency: int) -> float:
    with connect(bench, application_name="queuetop-bench") as conn:
        conn.execute(PEERS_SQL["procrastinate_empty"])
        conn.execute(PEERS_SQL["procrastinate_fill"], {"n": messages})

    def work(conn: Any) -> int:
        worker = one(conn.execute(PEERS_SQL["procrastinate_register"]))[0]
        count = 0
        while True:
            job = one(conn.execute(PEERS_SQL["procrastinate_fetch"], {"worker": worker}, prepare=True))[0]
            if job is None:
                return count
            conn.execute(PEERS_SQL["procrastinate_finish"], {"id": job}, prepare=True).fetchall()
            count += 1

    return _threads(bench, concurrency, work, messages)
