"""`queuetop engine scenario ...`: stories played against the database (contention,
exactly-once, relay), each printing one JSON line."""

from __future__ import annotations

import argparse

from .context import Context, progress, report
from .options import ArgumentParser, bigint, float_between, int_between, leaf


def cmd_scenario_contention(ctx: Context) -> int:
    from probes.sampler import blocked_applications
    from queues.scenarios.contention import ContentionOptions, ContentionScenario

    args = ctx.args
    options = ContentionOptions(
        mode=args.mode, submitters=args.submitters, duration_s=args.duration, compactor=not args.no_compactor,
        tasks=args.tasks, users=args.users, resubmit_every_s=args.resubmit_every, submission_s=args.submission_seconds,
        submission_users=args.submission_users, submission_batches=args.submission_batches,
        compact_every_s=args.compact_every, sample_every_s=args.sample_every, keep=args.keep,
    ).validate()  # before anything is written
    scenario = ContentionScenario(ctx.target, options, blocked_applications, progress=progress(args))
    try:
        result = scenario.run()
    except KeyboardInterrupt:
        scenario.stop()
        raise
    report(args, result)
    return 0 if result["consistent"] and not result["errors"] else 1


def cmd_scenario_exactly_once(ctx: Context) -> int:
    from queues.scenarios.exactly_once import ExactlyOnceScenario

    args = ctx.args
    scenario = ExactlyOnceScenario(
        ctx.target, messages=args.messages, duplicate_rate=args.duplicate_rate, crash_rate=args.crash_rate,
        variant=args.variant, receivers=args.receivers, visibility_s=args.visibility, seed=args.seed,
        keep=args.keep, progress=progress(args),
    )
    result = scenario.run()
    report(args, result)
    return 0


def cmd_scenario_relay(ctx: Context) -> int:
    from queues.scenarios.relay import RelayScenario

    args = ctx.args
    scenario = RelayScenario(
        ctx.target, relays=args.relays, messages=args.messages, kill_leader=args.kill_leader, ttl_s=args.ttl,
        batch=args.batch, rate=args.rate, keep=args.keep, progress=progress(args),
    )
    return report(args, scenario.run())


def register(engine_sub: argparse._SubParsersAction) -> None:
    """Under `engine`: its sub-commands' parsers are `engine_sub`."""
    scenario = engine_sub.add_parser("scenario", help="stories played against the database (print one JSON line)")
    scenario_sub = scenario.add_subparsers(title="scenarios", metavar="NAME", required=True, parser_class=ArgumentParser)
    p = leaf(scenario_sub, "contention", cmd_scenario_contention,
             "hot aggregate rows (naive) against insert-only deltas and a compactor (compacted)", writes=True)
    p.add_argument("--mode", choices=("naive", "compacted"), required=True, help="naive: hot rows; compacted: deltas")
    p.add_argument("--submitters", type=int_between(1, 256), default=16, help="concurrent answering sessions, 1 to 256 (default 16)")
    p.add_argument("--duration", type=float_between(0.01, 86_400), default=20.0, help="seconds to run, up to 86400 (default 20)")
    p.add_argument("--no-compactor", action="store_true", help="compacted mode without the compacting agent")
    p.add_argument("--tasks", type=int_between(1, 1000), default=4, help="tasks answered in parallel, 1 to 1000 (default 4)")
    p.add_argument("--users", type=int_between(1, 10_000_000), default=100_000,
                   help="users the tasks reach before the clock starts, --tasks to 10000000 (default 100000)")
    p.add_argument("--resubmit-every", type=float_between(0.05, 3600), default=2.0,
                   help="seconds between (re)submissions, 0.05 to 3600 (default 2)")
    p.add_argument("--submission-seconds", type=float_between(0, 600), default=1.0,
                   help="how long a (re)submission transaction stays open, 0 to 600 (default 1)")
    p.add_argument("--submission-users", type=int_between(1, 1_000_000), default=2000,
                   help="new users per (re)submission, 1 to 1000000 (default 2000)")
    p.add_argument("--submission-batches", type=int_between(1, 1000), default=10,
                   help="batches per (re)submission, 1 to 1000 (default 10)")
    p.add_argument("--compact-every", type=float_between(0.05, 3600), default=0.5,
                   help="compactor interval in seconds, 0.05 to 3600 (default 0.5)")
    p.add_argument("--sample-every", type=float_between(0.01, 60), default=0.1,
                   help="seconds between lock samples, 0.01 to 60 (default 0.1)")
    p.add_argument("--keep", action="store_true", help="leave the scenario's tasks and rows in the database")
    p.add_argument("--json", action="store_true", help="print one JSON line (progress on stderr otherwise)")

    p = leaf(scenario_sub, "exactly-once", cmd_scenario_exactly_once,
             "messages through an inbox/outbox endpoint with duplicate deliveries and receiver crashes", writes=True)
    p.add_argument("--messages", type=int_between(1, 10_000_000), default=1000, help="messages sent, 1 to 10000000 (default 1000)")
    p.add_argument("--duplicate-rate", type=float_between(0, 1), default=0.2,
                   help="share of messages signalled twice, 0 to 1 (default 0.2)")
    p.add_argument("--crash-rate", type=float_between(0, 0.99), default=0.02,
                   help="chance that a delivery kills its receiving process at a random step, 0 to 0.99 (default 0.02)")
    p.add_argument("--variant", choices=("claims", "naive"), default="claims",
                   help="claims: inbox/outbox with claims; naive: check the inbox, then process (default claims)")
    p.add_argument("--receivers", type=int_between(1, 64), default=4, help="receiving processes, 1 to 64 (default 4)")
    p.add_argument("--visibility", type=float_between(0.1, 600), default=1.0,
                   help="seconds before a crashed delivery comes back, 0.1 to 600 (default 1)")
    p.add_argument("--seed", type=bigint, default=None, help="random seed (default: a random one, printed)")
    p.add_argument("--keep", action="store_true", help="leave the scenario's rows and signal queue in place")
    p.add_argument("--json", action="store_true", help="print one JSON line")

    p = leaf(scenario_sub, "relay", cmd_scenario_relay, "outbox relays scaled out by a lease, optionally killing the leader",
             writes=True)
    p.add_argument("--relays", type=int_between(1, 32), default=3, help="relay processes, 1 to 32 (default 3)")
    p.add_argument("--messages", type=int_between(1, 10_000_000), default=10_000,
                   help="outbox messages written, 1 to 10000000 (default 10000)")
    p.add_argument("--kill-leader", action="store_true", help="SIGKILL the lease holder a third of the way through")
    p.add_argument("--ttl", type=float_between(0.2, 600), default=2.0, help="the relay lease's TTL in seconds, 0.2 to 600 (default 2)")
    p.add_argument("--batch", type=int_between(1, 10_000), default=100, help="outbox rows per relay transaction, 1 to 10000 (default 100)")
    p.add_argument("--rate", type=float_between(1, 1_000_000), default=2000.0,
                   help="messages written per second, 1 to 1000000 (default 2000)")
    p.add_argument("--keep", action="store_true", help="leave the scenario's queues in place")
    p.add_argument("--json", action="store_true", help="print one JSON line")
