"""`queuetop engine ...`: the reference queue engine driven from the command line (init,
enqueue, work, compact, rings, leases; its scenarios are in scenario.py)."""

from __future__ import annotations

import argparse
import sys

from dbcore.errors import OperationFailed, UsageError
from queues import lease as leases
from queues import ring as rings
from queues import schema

from . import scenario
from .bodies import batches, bodies_from_args, body_options
from .context import Context, emit
from .options import BIGINT_MAX, MAX_SECONDS, ArgumentParser, float_between, int_between, leaf, positive_count, positive_float


def cmd_engine_init(ctx: Context) -> int:
    with ctx.session("init") as session:
        version = schema.install(session)
    emit({"schema_version": version, "database": ctx.target.masked})
    return 0


def cmd_engine_enqueue(ctx: Context) -> int:
    from dbcore.names import check_name
    from queues.table_queue import TableQueue, default_bodies

    args = ctx.args
    check_name("queue", args.queue)
    bodies = bodies_from_args(args)  # validated before anything is written
    with ctx.engine_session("enqueue") as conn:
        total = 0
        # One transaction, the queue's creation in it: a failure half-way leaves nothing, not
        # even a new empty queue. Bodies are made batch by batch: a large --count does not
        # build them all in memory.
        with conn.transaction():
            queue = TableQueue.create(conn, args.queue)
            for chunk in batches(default_bodies(args.count) if bodies is None else bodies, args.batch):
                if len(chunk) == 1:
                    queue.enqueue(conn, chunk[0])
                    total += 1
                else:
                    total += queue.enqueue_batch(conn, chunk)
    emit({"queue": args.queue, "enqueued": total})
    return 0


def cmd_engine_work(ctx: Context) -> int:
    from dbcore.names import check_name
    from queues.handlers import parse_handler
    from queues.processes import run_pool
    from queues.worker import WorkOptions

    args = ctx.args
    check_name("queue", args.queue)  # before it goes into a connection's application_name
    try:
        parse_handler(args.handler)  # each process parses it again: a bad spec fails here, once
    except UsageError as exc:
        raise UsageError(f"--handler: {exc}") from None
    options = WorkOptions(
        workers=args.workers,
        processes=args.processes,
        mode=args.mode,
        max_attempts=args.max_attempts,
        visibility_s=args.visibility,
        batch=args.batch,
        until_empty=args.until_empty,
        duration_s=args.duration,
        poll_interval_s=args.poll_interval,
        retry_delay_s=args.retry_delay,
        prefetch=args.prefetch,
    ).validate()
    with ctx.engine_session("work"):
        pass  # fail fast (exit 2) on a missing schema before threads start
    summary = run_pool(ctx.target, args.queue, args.handler, options)
    emit(summary.as_dict())
    if args.until_empty and summary.dead:
        # The queue is empty, but not because every message was processed: a script that drains
        # a queue must not take dead letters for success. The summary line is printed all the same.
        raise OperationFailed(f"{summary.dead:,} message(s) of queue {args.queue!r} went to the dead-letter table in this run "
                              "(queuetop.dead_letters holds each with its last error)")
    return 0


def cmd_engine_compact(ctx: Context) -> int:
    from queues.compactor import compact

    group = ctx.args.group
    with ctx.engine_session("compact") as conn:
        result = compact(conn, group)
    emit(result.as_dict())
    return 0


def cmd_ring_create(ctx: Context) -> int:
    args = ctx.args
    with ctx.engine_session("ring") as conn:
        state = rings.create(conn, args.name, args.capacity)
    emit({"ring": state.name, "capacity": state.capacity, "used": state.used})
    return 0


def cmd_ring_put(ctx: Context) -> int:
    from dbcore.errors import RingFull
    from dbcore.names import check_name
    from queues.table_queue import default_bodies

    args = ctx.args
    check_name("ring", args.name)
    source = bodies_from_args(args)  # validated before anything is written
    stdin_bodies = source if isinstance(source, list) else None
    count = len(stdin_bodies) if stdin_bodies is not None else args.count
    with ctx.engine_session("ring") as conn:
        # More than the ring has cells can never fit: refused before any body is built.
        capacity = rings.describe(conn, args.name).capacity
        if count > capacity:
            raise RingFull(f"ring {args.name!r} has {capacity:,} cells: {count:,} message(s) can never fit; refused, nothing written")
        bodies = stdin_bodies if stdin_bodies is not None else list(default_bodies(count) if source is None else source)
        if any("\n" in body or "\r" in body for body in bodies):
            # `ring take` prints one body per line, exactly as put: a body must fit on one line.
            raise UsageError("a ring body must be a single line of JSON (ring take prints one body per line)")
        first = rings.put(conn, args.name, bodies)
    emit({"ring": args.name, "put": len(bodies), "first_seq": first})
    return 0


def cmd_ring_take(ctx: Context) -> int:
    args = ctx.args
    with ctx.engine_session("ring") as conn:
        items = rings.take(conn, args.name, args.count)
    for item in items:
        sys.stdout.write(item.body + "\n")
    sys.stdout.flush()
    return 0


def cmd_lease_acquire(ctx: Context) -> int:
    args = ctx.args
    with ctx.engine_session("lease") as conn:
        token = leases.acquire(conn, args.name, args.holder, args.ttl)
    print(token, flush=True)
    return 0


def cmd_lease_renew(ctx: Context) -> int:
    args = ctx.args
    with ctx.engine_session("lease") as conn:
        token = leases.renew(conn, args.name, args.holder, args.ttl, args.token)
    print(token, flush=True)
    return 0


def cmd_lease_release(ctx: Context) -> int:
    args = ctx.args
    with ctx.engine_session("lease") as conn:
        token = leases.release(conn, args.name, args.holder, args.token)
    emit({"lease": args.name, "released": True, "token": token})
    return 0


def register(commands: argparse._SubParsersAction) -> None:
    engine = commands.add_parser("engine", help="drive the reference queue engine")
    engine_sub = engine.add_subparsers(title="engine commands", metavar="ACTION", required=True, parser_class=ArgumentParser)

    leaf(engine_sub, "init", cmd_engine_init, "install or upgrade the queuetop schema (idempotent)", writes=True)

    p = leaf(engine_sub, "enqueue", cmd_engine_enqueue, "add messages to a queue (created on first use)", writes=True)
    p.add_argument("queue")
    body_options(p)
    p.add_argument("--batch", type=int_between(1, 10_000), default=100,
                   help="messages per INSERT statement, 1 to 10000 (default 100; all in one transaction)")

    p = leaf(engine_sub, "work", cmd_engine_work, "consume a queue with a pool of workers", writes=True)
    p.add_argument("queue")
    p.add_argument("--workers", type=int_between(1, 256), default=1, help="maximum degree of parallelism, 1 to 256 (default 1)")
    p.add_argument("--processes", type=int_between(1, 256), default=1,
                   help="spread the workers over this many processes, 1 to --workers (default 1: threads in one process; "
                        "more when single-message claims in many threads are bound by Python's interpreter lock)")
    p.add_argument("--handler", default="noop", help="noop | sleep:S | fail:P | crash:P | a,b | module:function (default noop)")
    p.add_argument("--until-empty", action="store_true", help="stop when the queue holds no ready or in-flight message")
    p.add_argument("--duration", type=positive_float, default=None, help="stop after this many seconds")
    # At most 1,000: the retry back-off doubles per attempt, and 2**1024 is past any float.
    p.add_argument("--max-attempts", type=int_between(1, 1000), default=5,
                   help="attempts before a message is dead-lettered, 1 to 1000 (default 5)")
    p.add_argument("--visibility", type=float_between(0.1, MAX_SECONDS), default=30.0,
                   help="claim mode: seconds a claimed message stays hidden, at least 0.1 (default 30)")
    p.add_argument("--mode", choices=("claim", "hold-transaction"), default="claim", help="processing mode (default claim)")
    p.add_argument("--batch", type=int_between(1, 10_000), default=1, help="messages claimed per round trip, 1 to 10000 (default 1)")
    p.add_argument("--poll-interval", type=float_between(0.01, 3600), default=5.0,
                   help="seconds between fallback polls of an idle queue, 0.01 to 3600 (default 5)")
    p.add_argument("--retry-delay", type=float_between(0, 3600), default=0.0,
                   help="back-off before a retry, doubling per attempt up to an hour; 0 to 3600 (default 0)")
    p.add_argument("--prefetch", action="store_true",
                   help="claim mode: claim the next messages while the handler works on those in hand "
                        "(the server's work overlaps the handler's; one more batch held per worker)")

    p = leaf(engine_sub, "compact", cmd_engine_compact, "fold pending status deltas into aggregates now (prints a JSON summary)",
             writes=True)
    p.add_argument("--group", type=int_between(1, BIGINT_MAX), default=None, metavar="KEY", help="only this group (task id)")

    scenario.register(engine_sub)

    ring = engine_sub.add_parser("ring", help="ring buffer queues")
    ring_sub = ring.add_subparsers(title="ring commands", metavar="ACTION", required=True, parser_class=ArgumentParser)
    p = leaf(ring_sub, "create", cmd_ring_create, "create a ring of fixed capacity", writes=True)
    p.add_argument("name")
    p.add_argument("--capacity", type=int_between(1, 10_000_000), required=True)
    p = leaf(ring_sub, "put", cmd_ring_put, "put messages (all or none; exit 3 when full)", writes=True)
    p.add_argument("name")
    body_options(p)
    p = leaf(ring_sub, "take", cmd_ring_take, "take messages in order, printing each body on its own line", writes=True)
    p.add_argument("name")
    p.add_argument("--count", type=positive_count, default=1, help="at most this many (default 1)")

    lease = engine_sub.add_parser("lease", help="leases with fencing tokens")
    lease_sub = lease.add_subparsers(title="lease commands", metavar="ACTION", required=True, parser_class=ArgumentParser)
    for name, func, text, with_ttl in (
        ("acquire", cmd_lease_acquire, "take a lease; prints the fencing token (exit 4 if held by another)", True),
        ("renew", cmd_lease_renew, "extend a lease you hold; prints the fencing token", True),
        ("release", cmd_lease_release, "release a lease you hold", False),
    ):
        p = leaf(lease_sub, name, func, text, writes=True)
        p.add_argument("name")
        p.add_argument("--holder", required=True)
        if with_ttl:
            p.add_argument("--ttl", type=positive_float, required=True, help="seconds until the lease expires")
        if name != "acquire":
            p.add_argument("--token", type=int_between(1, BIGINT_MAX), default=None,
                           help="only if the lease is still held under this fencing token")
