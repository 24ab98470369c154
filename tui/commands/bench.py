"""`queuetop bench engine | probes | sources | peers | tui`: the benchmarks, each printing its
figures as JSON (the first four are the bench/ package's; `tui`, the dashboard's, is tui/bench.py)."""

from __future__ import annotations

import argparse

from .context import Context, progress, report
from .options import MAX_COUNT, ArgumentParser, float_between, int_between, ints_between, leaf, positive_count


def cmd_bench_engine(ctx: Context) -> int:
    from bench.engine import run_engine_bench

    args = ctx.args
    result = run_engine_bench(
        ctx.write_target,
        messages=args.messages,
        single_messages=args.single_messages,
        concurrency=args.concurrency,
        batch=args.batch,
        rounds=args.rounds,
        idle_seconds=args.idle_seconds,
        pool=args.pool,
        prefetch=args.prefetch,
        progress=progress(args),
    )
    return report(args, result)


def cmd_bench_probes(ctx: Context) -> int:
    from bench.probes import run_probe_bench

    args = ctx.args
    result = run_probe_bench(
        ctx.write_target,
        small_depth=args.small_depth,
        large_depth=args.large_depth,
        idle_connections=args.idle_connections,
        cycles=args.cycles,
        pileup=args.pileup,
        progress=progress(args),
    )
    return report(args, result)


def cmd_bench_sources(ctx: Context) -> int:
    from bench.sources import run_sources_bench

    args = ctx.args
    result = run_sources_bench(ctx.write_target, small=args.small, large=args.large, cycles=args.cycles, progress=progress(args))
    return report(args, result)


def cmd_bench_peers(ctx: Context) -> int:
    from bench.peers import run_peers_bench

    args = ctx.args
    result = run_peers_bench(ctx.write_target, messages=args.messages, concurrency=args.concurrency, batch=args.batch,
                             rounds=args.rounds, progress=progress(args))
    return report(args, result)


def cmd_bench_tui(ctx: Context) -> int:
    from tui.bench import run_tui_bench

    args = ctx.args
    result = run_tui_bench(
        sessions=args.sessions, queues=args.queues, snapshots=args.snapshots,
        idle_seconds=args.idle_seconds, warm_up_s=args.warm_up, pileup=args.pileup, chain=args.chain,
    )
    return report(args, result)


def register(commands: argparse._SubParsersAction) -> None:
    bench = commands.add_parser("bench", help="benchmarks (print JSON)")
    bench_sub = bench.add_subparsers(title="benchmarks", metavar="NAME", required=True, parser_class=ArgumentParser)
    p = leaf(bench_sub, "engine", cmd_bench_engine, "queuetop's dequeue/enqueue against pgbench running the same SQL",
             writes=True)
    p.add_argument("--json", action="store_true", help="print one JSON line")
    p.add_argument("--messages", type=positive_count, default=100_000, help="messages per measured batch run (default 100000)")
    p.add_argument("--single-messages", type=positive_count, default=10_000,
                   help="messages per measured single-message run (default 10000)")
    p.add_argument("--concurrency", type=ints_between(1, 256), default=[2, 8],
                   help="clients on both sides, 1 to 256, or several, comma-separated, each measured in the same rounds "
                        "(default 2,8)")
    p.add_argument("--batch", type=int_between(1, 10_000), default=100, help="batch size for the batch runs, 1 to 10000 (default 100)")
    p.add_argument("--rounds", type=int_between(1, 100), default=3, help="interleaved rounds, 1 to 100; medians are reported (default 3)")
    p.add_argument("--idle-seconds", type=float_between(0.1, 3600), default=10.0,
                   help="how long to watch an idle queue, 0.1 to 3600 (default 10)")
    p.add_argument("--pool", choices=("threads", "processes"), default="threads",
                   help="queuetop's dequeue side: one process of worker threads (default), or a process per worker "
                        "(engine work --processes, as pgbench -j gives each client its own thread)")
    p.add_argument("--prefetch", action="store_true",
                   help="queuetop's workers claim ahead (engine work --prefetch): the server claims while the worker handles")

    p = leaf(bench_sub, "probes", cmd_bench_probes,
             "a full probe cycle's cost at a small and a large queue depth, and the locks probe's under a pile-up",
             writes=True)
    p.add_argument("--json", action="store_true", help="print one JSON line")
    p.add_argument("--small-depth", type=int_between(10, MAX_COUNT), default=1_000, help="messages in the small run (default 1000)")
    p.add_argument("--large-depth", type=int_between(10, MAX_COUNT), default=1_000_000, help="messages in the large run (default 1000000)")
    p.add_argument("--idle-connections", type=int_between(0, 1000), default=50,
                   help="idle sessions held open meanwhile, 0 to 1000 (default 50)")
    p.add_argument("--cycles", type=int_between(1, 10_000), default=50,
                   help="timed cycles per depth, 1 to 10000; p50/p95 reported (default 50)")
    p.add_argument("--pileup", type=int_between(0, 5000), default=16,
                   help="pgbench sessions waiting on one held row while the locks probe is timed, 0 to 5000 (the server's "
                        "max_connections must leave room for them); 0 skips it (default 16)")

    p = leaf(bench_sub, "sources", cmd_bench_sources,
             "the queue libraries' probe cost at a small and a large size, against their own monitoring calls",
             writes=True)
    p.add_argument("--json", action="store_true", help="print one JSON line")
    p.add_argument("--small", type=int_between(100, MAX_COUNT), default=1_000, help="jobs per library in the small run (default 1000)")
    p.add_argument("--large", type=int_between(100, MAX_COUNT), default=1_000_000,
                   help="jobs per library in the large run (default 1000000)")
    p.add_argument("--cycles", type=int_between(1, 10_000), default=20,
                   help="timed cycles per size, 1 to 10000; p50 reported (default 20)")

    p = leaf(bench_sub, "peers", cmd_bench_peers,
             "the engine's dequeue throughput beside PGMQ's and Procrastinate's own, same server and concurrency",
             writes=True)
    p.add_argument("--json", action="store_true", help="print one JSON line")
    p.add_argument("--messages", type=positive_count, default=20_000, help="messages per run (default 20000)")
    p.add_argument("--concurrency", type=ints_between(1, 256), default=[2, 8],
                   help="consuming sessions, 1 to 256, or several, comma-separated (default 2,8)")
    p.add_argument("--batch", type=int_between(1, 10_000), default=100,
                   help="messages per claim in the batch runs, 1 to 10000 (default 100)")
    p.add_argument("--rounds", type=int_between(1, 100), default=3, help="interleaved rounds, 1 to 100; medians reported (default 3)")

    p = leaf(bench_sub, "tui", cmd_bench_tui, "the dashboard's cost per snapshot and when idle (synthetic data, no database)")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    p.add_argument("--sessions", type=int_between(1, 10_000), default=500,
                   help="client sessions in each snapshot, most blocked; 1 to 10000 (default 500)")
    p.add_argument("--queues", type=int_between(1, 1000), default=50, help="queues in each snapshot, 1 to 1000 (default 50)")
    p.add_argument("--snapshots", type=int_between(1, 1000), default=60, help="snapshots applied and timed, 1 to 1000 (default 60)")
    p.add_argument("--idle-seconds", type=float_between(0.1, 3600), default=10.0,
                   help="how long to measure idle CPU, 0.1 to 3600 (default 10)")
    p.add_argument("--warm-up", type=float_between(0, 3600), default=15.0,
                   help="seconds before measuring idle CPU, 0 to 3600 (default 15)")
    p.add_argument("--pileup", type=int_between(0, 10_000), default=2000,
                   help="sessions waiting on one row in the pile-up case, 0 to 10000; 0 skips it (default 2000)")
    p.add_argument("--chain", type=int_between(0, 1000), default=50,
                   help="the pile-up case's chain of sessions each waiting for the one before, 0 to 1000 (default 50)")
