"""The `queuetop` command line. The contract (commands, output, exit codes) is PRODUCT.md's."""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import signal
import sys
import threading
import traceback
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from dbcore.database import ENV_DSN, MASK, Target, connect, has_password, host_name, resolve_target
from dbcore.dialect import Session, open_session, translate_error
from dbcore.errors import OperationFailed, QueuetopError, UsageError, first_line
from probes.config import Config
from queues import __version__, schema
from queues import lease as leases
from queues import ring as rings

PROG = "queuetop"


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports a usage error as our one-line error (exit 2) instead of a usage dump."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see `{self.prog} --help`)")


# -- connecting -----------------------------------------------------------------------------


class Context:
    """What a command needs to reach the database, resolved once per invocation."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self._target: Target | None = None
        self._targets: list[tuple[str, Target]] | None = None

    @property
    def dsns(self) -> list[str]:
        """Every --dsn given (the option may be repeated)."""
        given = [getattr(self.args, "dsn", None), getattr(self.args, "dsn_after", None)]
        return [dsn for value in given for dsn in ([value] if isinstance(value, str) else list(value or []))]

    @property
    def target(self) -> Target:
        """The one database of a command that acts on one (the engine's): several --dsn is a usage error."""
        if self._target is None:
            if len(self.dsns) > 1:
                raise UsageError("this command acts on one database: give --dsn once")
            target = resolve_target(self.dsns[0] if self.dsns else None)
            if target is None:
                target = self._embedded()
            self._target = target
        return self._target

    def _embedded(self) -> Target:
        from queues.embedded import embedded_target

        data_dir = getattr(self.args, "data_dir", None)
        target = embedded_target(Path(data_dir) if data_dir else None)
        with connect(target, application_name="queuetop-cli:init") as conn:
            schema.install(conn)  # the embedded default always carries the schema
        return target

    def targets(self, config: Config | None = None) -> list[tuple[str, Target]]:
        """The databases a watching command (the dashboard, snapshot, export, record) watches, by
        name: every --dsn; else QUEUETOP_DSN; else the config's [[targets]]; else the embedded server."""
        if self._targets is None:
            named: list[tuple[str, Target]] = []
            if self.dsns:
                for dsn in self.dsns:
                    target = resolve_target(dsn)
                    named.append(("", target) if target is not None else ("", self._embedded()))
            elif config is not None and config.targets and not os.environ.get(ENV_DSN, "").strip():
                for spec in config.targets:
                    target = resolve_target(spec.resolve_dsn())
                    if target is None:
                        raise UsageError(f"target {spec.name!r}: empty DSN")
                    if spec.dsn is not None and has_password(target):
                        warn(f"config: target {spec.name!r} holds a password; use ~/.pgpass, PGPASSWORD, a service "
                             f"file or dsn_env instead")
                    named.append((spec.name, target))
            else:
                named.append(("", self.target))
            # Unnamed targets are named by host and database; a name used twice gets #2, #3...
            names: list[str] = []
            for name, target in named:
                base = name or host_name(target)
                candidate, n = base, 1
                while candidate in names:
                    n += 1
                    candidate = f"{base}#{n}"
                names.append(candidate)
            self._targets = [(name, target) for name, (_given, target) in zip(names, named, strict=True)]
            if len(self._targets) == 1:
                self._target = self._targets[0][1]
        return self._targets

    def session(self, role: str) -> Session:
        """A session in the target's dialect (the commands that reach SQL Server use this)."""
        return open_session(self.target, application_name=f"queuetop-cli:{role}")

    def engine_session(self, role: str) -> Session:
        """A session in the target's dialect on a database that carries the engine's schema."""
        session = self.session(role)
        try:
            schema.require(session, where=self.target.masked)
        except BaseException:
            session.close()
            raise
        return session

    def scrub(self, text: str) -> str:
        """Remove the DSN's password from any text we are about to print."""
        raw = (self.dsns[0] if len(self.dsns) == 1 else "") or os.environ.get(ENV_DSN) or ""
        if self._target is not None and self._target.dialect == "postgresql":
            try:
                password = psycopg.conninfo.conninfo_to_dict(self._target.conninfo).get("password")
            except psycopg.Error:
                password = None
            if password:
                text = text.replace(str(password), MASK)
        if raw and raw in text and self._target is not None:
            text = text.replace(raw, self._target.masked)
        return text


def warn(message: str) -> None:
    """One line on stderr that something works but should not be so (the command goes on)."""
    print(f"{PROG}: warning: {message}", file=sys.stderr, flush=True)


def emit(obj: object) -> None:
    print(json.dumps(obj, separators=(", ", ": ")), flush=True)


# -- engine commands ------------------------------------------------------------------------


def cmd_engine_init(ctx: Context) -> int:
    with ctx.session("init") as session:
        version = schema.install(session)
    emit({"schema_version": version, "database": ctx.target.masked})
    return 0


def _bodies_from_args(args: argparse.Namespace) -> list[str] | Iterator[str] | None:
    """The bodies to write, validated now, before anything is written: every --stdin line is
    read and checked first (a list); --body is checked once and repeated lazily (--count may be
    large); None: the default bodies."""
    from queues.table_queue import parse_json_body

    if args.stdin:
        try:
            bodies = [parse_json_body(line.strip()) for line in sys.stdin if line.strip()]
        except UnicodeDecodeError:
            raise UsageError("malformed JSON body on standard input: not valid UTF-8") from None
        return bodies
    if args.body is not None:
        return itertools.repeat(parse_json_body(args.body), args.count)
    return None


def _batches(items: Iterable[str], size: int) -> Iterator[list[str]]:
    iterator = iter(items)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk


def cmd_engine_enqueue(ctx: Context) -> int:
    from dbcore.names import check_name
    from queues.table_queue import TableQueue, default_bodies

    args = ctx.args
    check_name("queue", args.queue)
    if args.batch < 1:
        raise UsageError("--batch must be at least 1")
    bodies = _bodies_from_args(args)  # validated before anything is written
    with ctx.engine_session("enqueue") as conn:
        total = 0
        # One transaction, the queue's creation in it: a failure half-way leaves nothing, not
        # even a new empty queue. Bodies are made batch by batch: a large --count does not
        # build them all in memory.
        with conn.transaction():
            queue = TableQueue.create(conn, args.queue)
            for chunk in _batches(default_bodies(args.count) if bodies is None else bodies, args.batch):
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
    from queues.worker import WorkerPool, WorkOptions

    args = ctx.args
    check_name("queue", args.queue)  # before it goes into a connection's application_name
    handler = parse_handler(args.handler)
    options = WorkOptions(
        workers=args.workers,
        mode=args.mode,
        max_attempts=args.max_attempts,
        visibility_s=args.visibility,
        batch=args.batch,
        until_empty=args.until_empty,
        duration_s=args.duration,
        poll_interval_s=args.poll_interval,
        retry_delay_s=args.retry_delay,
    ).validate()
    with ctx.engine_session("work"):
        pass  # fail fast (exit 2) on a missing schema before threads start
    pool = WorkerPool(ctx.target, args.queue, handler, options)
    summary = pool.run()
    emit(summary.as_dict())
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
    source = _bodies_from_args(args)  # validated before anything is written
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


# -- other commands -------------------------------------------------------------------------


def _progress(args: argparse.Namespace) -> Callable[[str], None] | None:
    """Benchmarks narrate their rounds on stderr, unless the output is --json."""
    return None if args.json else lambda line: print(line, file=sys.stderr, flush=True)


def _report(args: argparse.Namespace, result: dict) -> int:
    if args.json:
        emit(result)
    else:
        print(json.dumps(result, indent=2))
    return 0


def cmd_bench_engine(ctx: Context) -> int:
    from queues.bench import run_engine_bench

    args = ctx.args
    result = run_engine_bench(
        ctx.target,
        messages=args.messages,
        single_messages=args.single_messages,
        concurrency=args.concurrency,
        batch=args.batch,
        rounds=args.rounds,
        idle_seconds=args.idle_seconds,
        progress=_progress(args),
    )
    return _report(args, result)


def cmd_bench_probes(ctx: Context) -> int:
    from .probe_bench import run_probe_bench

    args = ctx.args
    result = run_probe_bench(
        ctx.target,
        small_depth=args.small_depth,
        large_depth=args.large_depth,
        idle_connections=args.idle_connections,
        cycles=args.cycles,
        pileup=args.pileup,
        progress=_progress(args),
    )
    return _report(args, result)


def cmd_bench_sources(ctx: Context) -> int:
    from .source_bench import run_sources_bench

    args = ctx.args
    result = run_sources_bench(ctx.target, small=args.small, large=args.large, cycles=args.cycles, progress=_progress(args))
    return _report(args, result)


def cmd_bench_peers(ctx: Context) -> int:
    from .peer_bench import run_peers_bench

    args = ctx.args
    result = run_peers_bench(ctx.target, messages=args.messages, concurrency=args.concurrency, batch=args.batch,
                             rounds=args.rounds, progress=_progress(args))
    return _report(args, result)


def cmd_bench_tui(ctx: Context) -> int:
    from tui.bench import run_tui_bench

    args = ctx.args
    result = run_tui_bench(
        sessions=args.sessions, queues=args.queues, snapshots=args.snapshots,
        idle_seconds=args.idle_seconds, warm_up_s=args.warm_up,
    )
    return _report(args, result)


def cmd_server_status(ctx: Context) -> int:
    from queues.embedded import server_status

    data_dir = getattr(ctx.args, "data_dir", None)
    status = server_status(Path(data_dir) if data_dir else None)
    emit(status)
    return 0


def cmd_server_stop(ctx: Context) -> int:
    from queues.embedded import stop_server

    data_dir = getattr(ctx.args, "data_dir", None)
    emit({"stopped": stop_server(Path(data_dir) if data_dir else None)})
    return 0


def cmd_engine_compact(ctx: Context) -> int:
    from queues.compactor import compact

    group = ctx.args.group
    with ctx.engine_session("compact") as conn:
        result = compact(conn, group)
    emit(result.as_dict())
    return 0


def cmd_demo_reset(ctx: Context) -> int:
    from queues.demo import reset

    with ctx.engine_session("reset") as conn:
        report = reset(conn, force=ctx.args.force)
    emit(report.to_json())
    return 0


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
    scenario = ContentionScenario(ctx.target, options, blocked_applications, progress=_progress(args))
    try:
        result = scenario.run()
    except KeyboardInterrupt:
        scenario.stop()
        raise
    _report(args, result)
    return 0 if result["consistent"] and not result["errors"] else 1


def cmd_scenario_exactly_once(ctx: Context) -> int:
    from queues.scenarios.exactly_once import ExactlyOnceScenario

    args = ctx.args
    scenario = ExactlyOnceScenario(
        ctx.target, messages=args.messages, duplicate_rate=args.duplicate_rate, crash_rate=args.crash_rate,
        variant=args.variant, receivers=args.receivers, visibility_s=args.visibility, seed=args.seed,
        keep=args.keep, progress=_progress(args),
    )
    result = scenario.run()
    _report(args, result)
    return 0


def cmd_scenario_relay(ctx: Context) -> int:
    from queues.scenarios.relay import RelayScenario

    args = ctx.args
    scenario = RelayScenario(
        ctx.target, relays=args.relays, messages=args.messages, kill_leader=args.kill_leader, ttl_s=args.ttl,
        batch=args.batch, rate=args.rate, keep=args.keep, progress=_progress(args),
    )
    return _report(args, scenario.run())


def cmd_snapshot(ctx: Context) -> int:
    from concurrent.futures import ThreadPoolExecutor

    from probes.config import load_config

    args = ctx.args
    if args.from_file is not None:
        return _recorded_snapshot(ctx)
    if args.at is not None:
        raise UsageError("--at reads a recording: give --from FILE")
    config = load_config(getattr(args, "config", None))
    targets = ctx.targets(config)
    if len(targets) == 1:  # one database: its failure is the command's (one line, exit 2)
        name, target = targets[0]
        snapshots = [_snapshot_of(target, config, name, args.rates)]
    else:
        # Several: each on its own thread, so that one that is down costs its own timeout only;
        # one that cannot be reached is a disconnected snapshot, as the dashboard shows it.
        with ThreadPoolExecutor(max_workers=len(targets), thread_name_prefix="snapshot") as pool:
            futures = [pool.submit(_snapshot_or_disconnected, target, config, name, args.rates) for name, target in targets]
            snapshots = [future.result() for future in futures]
    _print_snapshots(snapshots, args.json)
    unreachable = [s for s in snapshots if not s.connected]
    for snapshot in unreachable:
        print(f"{PROG}: error: {snapshot.host}: {snapshot.extra.get('connection_error')}", file=sys.stderr)
    return 2 if unreachable else 0


def _recorded_snapshot(ctx: Context) -> int:
    """`snapshot --from FILE --at TIME`: each recorded host as it was at TIME (the latest snapshot
    taken at or before it), as `snapshot` printed it then. No database is touched."""
    from probes.recording import Recording

    args = ctx.args
    if ctx.dsns or args.rates:
        raise UsageError("--from reads a recording: --dsn and --rates do not apply")
    recording = Recording(args.from_file, keep_lines=False)  # one instant: its times, then its lines
    snapshots = recording.at(recording.instant(args.at) if args.at is not None else recording.end)
    _print_snapshots(list(snapshots.values()), args.json)
    return 0


def _print_snapshots(snapshots: list, as_json: bool) -> None:
    """One JSON line each, or the readable report under a line naming its host when there are several."""
    from tui.report import render

    for snapshot in snapshots:
        if as_json:
            emit(snapshot.to_json())
        else:
            if len(snapshots) > 1:
                print(f"== {snapshot.host} ==")
            print(render(snapshot))


def cmd_record(ctx: Context) -> int:
    """Sample every target on its schedule and write each snapshot to FILE (compressed JSON lines,
    rotated by size) until --duration ends or SIGINT/SIGTERM; then one JSON line of what was written."""
    from probes.recording import Recorder

    args = ctx.args
    config, targets, interval = _watched(ctx)
    recorder = Recorder(args.file, max_bytes=int(args.max_size * 1024 * 1024), keep=args.keep)
    stop = threading.Event()
    failures: list[OSError] = []

    def write(snapshot) -> None:  # in each sampler's thread
        try:
            recorder.write(snapshot)
        except OSError as exc:  # a full disk: stop, say so, keep what was written
            failures.append(exc)
            stop.set()

    print(f"{PROG}: recording {', '.join(name for name, _t in targets)} every {interval:g}s into {args.file}",
          file=sys.stderr, flush=True)
    try:
        with _sampling(targets, config, interval, write, stop):
            stop.wait(args.duration)
    finally:
        try:
            recorder.close()
        except OSError as exc:
            failures.append(exc)
    emit({"file": str(args.file), "snapshots": recorder.snapshots, "hosts": [name for name, _t in targets],
          "files": [str(path) for path in recorder.files()]})
    if failures:
        raise OperationFailed(f"recording stopped after {recorder.snapshots} snapshot(s): {failures[0].strerror or failures[0]}")
    return 0


def cmd_replay(ctx: Context) -> int:
    from tui.app import run_replay

    return run_replay(ctx)


def _snapshot_of(target: Target, config: Config, host: str, rates: float):
    import time as _time

    from probes.postgres import open_probe_connection
    from probes.sampler import probes_for, run_cycle

    probes = probes_for(target, config)
    with open_probe_connection(target) as conn:
        snapshot = run_cycle(target, probes=probes, conn=conn, host=host)
        if rates:
            # Rates are differences of cumulative counters: a second cycle after --rates seconds.
            _time.sleep(rates)
            snapshot = run_cycle(target, probes=probes, conn=conn, host=host)
    return snapshot


def _snapshot_or_disconnected(target: Target, config: Config, host: str, rates: float):
    from probes.sampler import unreachable_snapshot

    try:
        return _snapshot_of(target, config, host, rates)
    except QueuetopError as exc:
        return unreachable_snapshot(target, first_line(exc), host)


def cmd_export_prometheus(ctx: Context) -> int:
    """Serve /metrics for every target until SIGINT or SIGTERM: a sampler per host on its own
    schedule, a scrape reading only the cached snapshots."""
    from probes.prometheus import SnapshotCollector, serve

    args = ctx.args
    config, targets, interval = _watched(ctx)
    host, port = args.listen
    collector = SnapshotCollector()
    try:
        server = serve(collector, host, port)
    except OSError as exc:
        raise UsageError(f"cannot listen on {_address(host, port)}: {exc.strerror or exc}") from None
    stop = threading.Event()
    thread = threading.Thread(target=server.serve_forever, name="metrics", daemon=True)
    try:
        with _sampling(targets, config, interval, collector.update, stop):
            thread.start()
            bound_host, bound_port = server.server_address[:2]
            print(f"{PROG}: serving http://{_address(str(bound_host), int(bound_port))}/metrics for "
                  f"{', '.join(name for name, _t in targets)} every {interval:g}s", flush=True)
            stop.wait()
    finally:
        if thread.is_alive():
            server.shutdown()  # waits for serve_forever to return: only when it runs
        server.server_close()
    return 0


def _watched(ctx: Context) -> tuple[Config, list[tuple[str, Target]], float]:
    """What a watching command (record, export) samples: the config, its targets by name, the interval."""
    from probes.config import load_config

    config = load_config(getattr(ctx.args, "config", None))
    return config, ctx.targets(config), config.sampling_interval(ctx.args.interval)


@contextmanager
def _sampling(targets: list[tuple[str, Target]], config: Config, interval: float, sink: Callable[[Any], None],
              stop: threading.Event) -> Iterator[None]:
    """Each target's sampler feeding `sink` for the block's duration; SIGINT and SIGTERM set
    `stop`, which the block waits on. The samplers stop together at its end."""
    from probes.sampler import Sampler, stop_all

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    samplers = [Sampler(target, sink, config, interval_s=interval, host=name) for name, target in targets]
    try:
        for sampler in samplers:
            sampler.start()
        yield
    finally:
        stop_all(samplers)


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _listen(text: str) -> tuple[str, int]:
    """HOST:PORT, [IPv6]:PORT or :PORT (all IPv4 interfaces)."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if "[" in host or "]" in host or any(c.isspace() for c in host):
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    return host or "0.0.0.0", int(port_text)


def cmd_dashboard(ctx: Context) -> int:
    from tui.app import run_dashboard

    return run_dashboard(ctx)


# -- parser ---------------------------------------------------------------------------------


# Bounds that keep every number inside what the engine and PostgreSQL can take (an interval of
# 1e13 seconds, a bigint past 2**63, a count that would build 10**20 bodies): one line, exit 2.
MAX_SECONDS = 366 * 24 * 3600.0
MAX_COUNT = 100_000_000
BIGINT_MAX = 2**63 - 1


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def _positive_float(text: str) -> float:
    """More than 0, at most a year's worth of seconds (or a rate as large)."""
    value = _number(text)
    if not 0 < value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"{text!r} must be more than 0 and at most {MAX_SECONDS:,.0f}")
    return value


def _non_negative_float(text: str) -> float:
    """0 or more, at most a year's worth of seconds."""
    value = _number(text)
    if not 0 <= value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"{text!r} must be between 0 and {MAX_SECONDS:,.0f}")
    return value


def _int_between(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text!r} must be between {low:,} and {high:,}")
        return value

    parse.__name__ = "whole number"  # what argparse names in its own messages
    return parse


_count = _int_between(1, MAX_COUNT)
_bigint = _int_between(0, BIGINT_MAX)


def _connection_options(parser: argparse.ArgumentParser, *, top: bool = False) -> None:
    # Leaf parsers use SUPPRESS so that an option given before the sub-command is not reset.
    default = None if top else argparse.SUPPRESS
    # Repeatable, before the sub-command and after it: the two lists are one (Context.dsns), rather
    # than the sub-command's replacing what was given before it.
    parser.add_argument("--dsn", default=default, action="append", dest="dsn" if top else "dsn_after",
                        help="database to use: SQLAlchemy URL, libpq URI or key=value string (default: "
                        f"${ENV_DSN}, "
                        "else the config's [[targets]], else the embedded server); repeat it to watch several "
                        "(the dashboard, snapshot, export and record)")
    parser.add_argument("--data-dir", default=default, help="data directory of the embedded server (default: the user's data dir)")
    parser.add_argument("--debug", action="store_true", default=False if top else argparse.SUPPRESS, help="show tracebacks")


def _leaf(sub: argparse._SubParsersAction, name: str, func: Callable[[Context], int], help_text: str) -> argparse.ArgumentParser:
    parser = sub.add_parser(name, help=help_text, description=help_text)
    _connection_options(parser)
    parser.set_defaults(func=func)
    return parser


def _body_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--count", type=_count, default=1, help=f"number of messages (default 1, at most {MAX_COUNT:,})")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--body", help="JSON body, stored exactly as given (default: {\"n\": i})")
    group.add_argument("--stdin", action="store_true", help="read one JSON body per line from standard input")


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog=PROG, description="A terminal dashboard for database-backed queues and locks.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    _connection_options(parser, top=True)
    parser.add_argument("--interval", type=_positive_float, default=2.0, help="dashboard refresh interval in seconds")
    parser.add_argument("--read-only", action="store_true", help="disable every action that changes the database")
    parser.add_argument("--no-demo", action="store_true", help="do not start the demo workload on the embedded server")
    parser.add_argument("--config", default=None, help="TOML file declaring your own queue tables (default: the user's config dir)")
    parser.set_defaults(func=cmd_dashboard)
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", parser_class=ArgumentParser)

    p = _leaf(commands, "snapshot", cmd_snapshot, "run every probe once and print what they saw")
    p.add_argument("--json", action="store_true", help="print the snapshot as one JSON object (version 1)")
    p.add_argument("--config", default=argparse.SUPPRESS, help="TOML file declaring your own queue tables")
    p.add_argument("--rates", type=_non_negative_float, default=0.0, metavar="SECONDS",
                   help="sample twice, SECONDS apart, so that enqueue/dequeue rates are known (default: once, rates null)")
    p.add_argument("--from", dest="from_file", default=None, metavar="FILE",
                   help="print a recorded instant instead (queuetop record): no database is touched")
    p.add_argument("--at", default=None, metavar="TIME",
                   help="with --from: ISO-8601 (UTC unless it says), HH:MM[:SS] (UTC) or +SECONDS from the start "
                   "(default: the recording's last instant)")

    p = _leaf(commands, "record", cmd_record, "write every target's snapshots to FILE as compressed JSON lines")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--duration", type=_positive_float, default=None, metavar="SECONDS",
                   help="stop after this long (default: until Ctrl-C or SIGTERM)")
    p.add_argument("--interval", type=_positive_float, default=None, metavar="SECONDS",
                   help="seconds between samples (default: the config's probes.interval, 2)")
    p.add_argument("--max-size", type=_positive_float, default=64.0, metavar="MB",
                   help="rotate FILE when it passes this size: FILE.1, FILE.2, ... (default 64)")
    p.add_argument("--keep", type=_int_between(0, 1000), default=5, help="rotated files to keep (default 5)")
    p.add_argument("--config", default=argparse.SUPPRESS, help="TOML file declaring your queue tables and [[targets]]")

    p = _leaf(commands, "replay", cmd_replay, "the dashboard on a recording (queuetop record): no database")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--at", default=None, metavar="TIME", help="start at this time (as snapshot --at; default: the start)")
    p.add_argument("--speed", type=_positive_float, default=1.0, help="times real time (default 1)")
    p.add_argument("--paused", action="store_true", help="open paused (p plays)")

    engine = commands.add_parser("engine", help="drive the reference queue engine")
    engine_sub = engine.add_subparsers(title="engine commands", metavar="ACTION", required=True, parser_class=ArgumentParser)

    _leaf(engine_sub, "init", cmd_engine_init, "install or upgrade the queuetop schema (idempotent)")

    p = _leaf(engine_sub, "enqueue", cmd_engine_enqueue, "add messages to a queue (created on first use)")
    p.add_argument("queue")
    _body_options(p)
    p.add_argument("--batch", type=_bigint, default=100, help="messages per INSERT statement (default 100; all in one transaction)")

    p = _leaf(engine_sub, "work", cmd_engine_work, "consume a queue with a pool of workers")
    p.add_argument("queue")
    p.add_argument("--workers", type=_bigint, default=1, help="maximum degree of parallelism (default 1)")
    p.add_argument("--handler", default="noop", help="noop | sleep:S | fail:P | crash:P | a,b | module:function (default noop)")
    p.add_argument("--until-empty", action="store_true", help="stop when the queue holds no ready or in-flight message")
    p.add_argument("--duration", type=_positive_float, default=None, help="stop after this many seconds")
    p.add_argument("--max-attempts", type=_bigint, default=5, help="attempts before a message is dead-lettered (default 5)")
    p.add_argument("--visibility", type=_positive_float, default=30.0,
                   help="claim mode: seconds a claimed message stays hidden (default 30)")
    p.add_argument("--mode", choices=("claim", "hold-transaction"), default="claim", help="processing mode (default claim)")
    p.add_argument("--batch", type=_bigint, default=1, help="messages claimed per round trip (default 1)")
    p.add_argument("--poll-interval", type=_positive_float, default=5.0, help="seconds between fallback polls of an idle queue (default 5)")
    p.add_argument("--retry-delay", type=_non_negative_float, default=0.0, help="back-off before a retry, doubling per attempt (default 0)")

    p = _leaf(engine_sub, "compact", cmd_engine_compact, "fold pending status deltas into aggregates now (prints a JSON summary)")
    p.add_argument("--group", type=_int_between(1, BIGINT_MAX), default=None, metavar="KEY", help="only this group (task id)")

    scenario = engine_sub.add_parser("scenario", help="stories played against the database (print one JSON line)")
    scenario_sub = scenario.add_subparsers(title="scenarios", metavar="NAME", required=True, parser_class=ArgumentParser)
    p = _leaf(scenario_sub, "contention", cmd_scenario_contention,
              "hot aggregate rows (naive) against insert-only deltas and a compactor (compacted)")
    p.add_argument("--mode", choices=("naive", "compacted"), required=True, help="naive: hot rows; compacted: deltas")
    p.add_argument("--submitters", type=_bigint, default=16, help="concurrent answering sessions (default 16)")
    p.add_argument("--duration", type=_positive_float, default=20.0, help="seconds to run (default 20)")
    p.add_argument("--no-compactor", action="store_true", help="compacted mode without the compacting agent")
    p.add_argument("--tasks", type=_bigint, default=4, help="tasks answered in parallel (default 4)")
    p.add_argument("--users", type=_bigint, default=100_000, help="users the tasks reach before the clock starts (default 100000)")
    p.add_argument("--resubmit-every", type=_positive_float, default=2.0, help="seconds between (re)submissions (default 2)")
    p.add_argument("--submission-seconds", type=_positive_float, default=1.0,
                   help="how long a (re)submission transaction stays open (default 1)")
    p.add_argument("--submission-users", type=_bigint, default=2000, help="new users per (re)submission (default 2000)")
    p.add_argument("--submission-batches", type=_bigint, default=10, help="batches per (re)submission (default 10)")
    p.add_argument("--compact-every", type=_positive_float, default=0.5, help="compactor interval in seconds (default 0.5)")
    p.add_argument("--sample-every", type=_positive_float, default=0.1, help="seconds between lock samples (default 0.1)")
    p.add_argument("--keep", action="store_true", help="leave the scenario's tasks and rows in the database")
    p.add_argument("--json", action="store_true", help="print one JSON line (progress on stderr otherwise)")

    p = _leaf(scenario_sub, "exactly-once", cmd_scenario_exactly_once,
              "messages through an inbox/outbox endpoint with duplicate deliveries and receiver crashes")
    p.add_argument("--messages", type=_bigint, default=1000, help="messages sent (default 1000)")
    p.add_argument("--duplicate-rate", type=_non_negative_float, default=0.2, help="share of messages signalled twice (default 0.2)")
    p.add_argument("--crash-rate", type=_non_negative_float, default=0.02,
                   help="chance that a delivery kills its receiving process at a random step (default 0.02)")
    p.add_argument("--variant", choices=("claims", "naive"), default="claims",
                   help="claims: inbox/outbox with claims; naive: check the inbox, then process (default claims)")
    p.add_argument("--receivers", type=_bigint, default=4, help="receiving processes (default 4)")
    p.add_argument("--visibility", type=_positive_float, default=1.0, help="seconds before a crashed delivery comes back (default 1)")
    p.add_argument("--seed", type=_bigint, default=None, help="random seed (default: a random one, printed)")
    p.add_argument("--keep", action="store_true", help="leave the scenario's rows and signal queue in place")
    p.add_argument("--json", action="store_true", help="print one JSON line")

    p = _leaf(scenario_sub, "relay", cmd_scenario_relay, "outbox relays scaled out by a lease, optionally killing the leader")
    p.add_argument("--relays", type=_bigint, default=3, help="relay processes (default 3)")
    p.add_argument("--messages", type=_bigint, default=10_000, help="outbox messages written (default 10000)")
    p.add_argument("--kill-leader", action="store_true", help="SIGKILL the lease holder a third of the way through")
    p.add_argument("--ttl", type=_positive_float, default=2.0, help="the relay lease's TTL in seconds (default 2)")
    p.add_argument("--batch", type=_bigint, default=100, help="outbox rows per relay transaction (default 100)")
    p.add_argument("--rate", type=_positive_float, default=2000.0, help="messages written per second (default 2000)")
    p.add_argument("--keep", action="store_true", help="leave the scenario's queues in place")
    p.add_argument("--json", action="store_true", help="print one JSON line")

    ring = engine_sub.add_parser("ring", help="ring buffer queues")
    ring_sub = ring.add_subparsers(title="ring commands", metavar="ACTION", required=True, parser_class=ArgumentParser)
    p = _leaf(ring_sub, "create", cmd_ring_create, "create a ring of fixed capacity")
    p.add_argument("name")
    p.add_argument("--capacity", type=_int_between(1, 10_000_000), required=True)
    p = _leaf(ring_sub, "put", cmd_ring_put, "put messages (all or none; exit 3 when full)")
    p.add_argument("name")
    _body_options(p)
    p = _leaf(ring_sub, "take", cmd_ring_take, "take messages in order, printing each body on its own line")
    p.add_argument("name")
    p.add_argument("--count", type=_count, default=1, help="at most this many (default 1)")

    lease = engine_sub.add_parser("lease", help="leases with fencing tokens")
    lease_sub = lease.add_subparsers(title="lease commands", metavar="ACTION", required=True, parser_class=ArgumentParser)
    for name, func, text, with_ttl in (
        ("acquire", cmd_lease_acquire, "take a lease; prints the fencing token (exit 4 if held by another)", True),
        ("renew", cmd_lease_renew, "extend a lease you hold; prints the fencing token", True),
        ("release", cmd_lease_release, "release a lease you hold", False),
    ):
        p = _leaf(lease_sub, name, func, text)
        p.add_argument("name")
        p.add_argument("--holder", required=True)
        if with_ttl:
            p.add_argument("--ttl", type=_positive_float, required=True, help="seconds until the lease expires")
        if name != "acquire":
            p.add_argument("--token", type=_int_between(1, BIGINT_MAX), default=None,
                           help="only if the lease is still held under this fencing token")

    export = commands.add_parser("export", help="serve the probes' figures to a monitoring system")
    export_sub = export.add_subparsers(title="exporters", metavar="FORMAT", required=True, parser_class=ArgumentParser)
    p = _leaf(export_sub, "prometheus", cmd_export_prometheus,
              "serve /metrics for Prometheus: every target sampled on its own schedule, scrapes read the cached snapshots")
    p.add_argument("--listen", type=_listen, default=("127.0.0.1", 9187), metavar="HOST:PORT",
                   help="address to serve on (default 127.0.0.1:9187; :9187 for every interface; port 0: any free port)")
    p.add_argument("--interval", type=_positive_float, default=None, metavar="SECONDS",
                   help="seconds between samples (default: the config's probes.interval, 2)")
    p.add_argument("--config", default=argparse.SUPPRESS, help="TOML file declaring your queue tables and [[targets]]")

    demo = commands.add_parser("demo", help="the demo workload of the embedded server")
    demo_sub = demo.add_subparsers(title="demo commands", metavar="ACTION", required=True, parser_class=ArgumentParser)
    p = _leaf(demo_sub, "reset", cmd_demo_reset,
              "remove what the demo and the dashboard's prompts made (demo.* queues with their dead letters, rings, "
              "leases and tasks; the outbox relays' queues and lease; queues and leases created from prompts); "
              "prints a JSON summary")
    p.add_argument("--force", action="store_true", help="reset even while the engine's sessions are connected")

    bench = commands.add_parser("bench", help="benchmarks (print JSON)")
    bench_sub = bench.add_subparsers(title="benchmarks", metavar="NAME", required=True, parser_class=ArgumentParser)
    p = _leaf(bench_sub, "engine", cmd_bench_engine, "queuetop's dequeue/enqueue against pgbench running the same SQL")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    p.add_argument("--messages", type=_bigint, default=100_000, help="messages per measured batch run (default 100000)")
    p.add_argument("--single-messages", type=_bigint, default=10_000, help="messages per measured single-message run (default 10000)")
    p.add_argument("--concurrency", type=_bigint, default=2, help="clients on both sides (default 2)")
    p.add_argument("--batch", type=_bigint, default=100, help="batch size for the batch runs (default 100)")
    p.add_argument("--rounds", type=_bigint, default=3, help="interleaved rounds; medians are reported (default 3)")
    p.add_argument("--idle-seconds", type=_positive_float, default=10.0, help="how long to watch an idle queue (default 10)")

    p = _leaf(bench_sub, "probes", cmd_bench_probes,
              "a full probe cycle's cost at a small and a large queue depth, and the locks probe's under a pile-up")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    p.add_argument("--small-depth", type=_bigint, default=1_000, help="messages in the small run (default 1000)")
    p.add_argument("--large-depth", type=_bigint, default=1_000_000, help="messages in the large run (default 1000000)")
    p.add_argument("--idle-connections", type=_bigint, default=50, help="idle sessions held open meanwhile (default 50)")
    p.add_argument("--cycles", type=_bigint, default=50, help="timed cycles per depth; p50/p95 reported (default 50)")
    p.add_argument("--pileup", type=_bigint, default=16,
                   help="pgbench sessions waiting on one held row while the locks probe is timed; 0 skips it (default 16)")

    p = _leaf(bench_sub, "sources", cmd_bench_sources,
              "the queue libraries' probe cost at a small and a large size, against their own monitoring calls")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    p.add_argument("--small", type=_bigint, default=1_000, help="jobs per library in the small run (default 1000)")
    p.add_argument("--large", type=_bigint, default=1_000_000, help="jobs per library in the large run (default 1000000)")
    p.add_argument("--cycles", type=_bigint, default=20, help="timed cycles per size; p50 reported (default 20)")

    p = _leaf(bench_sub, "peers", cmd_bench_peers,
              "the engine's dequeue throughput beside PGMQ's and Procrastinate's own, same server and concurrency")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    p.add_argument("--messages", type=_bigint, default=20_000, help="messages per run (default 20000)")
    p.add_argument("--concurrency", type=_bigint, default=2, help="consuming sessions (default 2)")
    p.add_argument("--batch", type=_bigint, default=100, help="messages per claim in the batch runs (default 100)")
    p.add_argument("--rounds", type=_bigint, default=3, help="interleaved rounds; medians reported (default 3)")

    p = _leaf(bench_sub, "tui", cmd_bench_tui, "the dashboard's cost per snapshot and when idle (synthetic data, no database)")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    p.add_argument("--sessions", type=_bigint, default=500, help="client sessions in each snapshot, most blocked (default 500)")
    p.add_argument("--queues", type=_bigint, default=50, help="queues in each snapshot (default 50)")
    p.add_argument("--snapshots", type=_bigint, default=60, help="snapshots applied and timed (default 60)")
    p.add_argument("--idle-seconds", type=_positive_float, default=10.0, help="how long to measure idle CPU (default 10)")
    p.add_argument("--warm-up", type=_positive_float, default=15.0, help="seconds before measuring idle CPU (default 15)")

    server = commands.add_parser("server", help="the embedded PostgreSQL server")
    server_sub = server.add_subparsers(title="server commands", metavar="ACTION", required=True, parser_class=ArgumentParser)
    _leaf(server_sub, "status", cmd_server_status, "show whether the embedded server runs, and where")
    _leaf(server_sub, "stop", cmd_server_stop, "stop the embedded server")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="queuetop: %(levelname)s: %(message)s")
    # platformdirs warns, over two lines, on a host without a login session (SSH without systemd,
    # CI) whenever pgserver is imported: nothing an operator can act on, and an error must be one line.
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    _mask_process_title(argv)
    ctx: Context | None = None
    try:
        args = build_parser().parse_args(argv)
        ctx = Context(args)
        return args.func(ctx)
    except QueuetopError as exc:
        return _fail(ctx, str(exc), exc.exit_code, debug)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # Output piped into `head` and friends: not an error worth a traceback.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except Exception as exc:
        # A driver's error: a lost connection (exit 2), a missing privilege (a configuration
        # problem, exit 2), anything else the database refused (exit 1). See the dialects' translate().
        error = translate_error(exc, ctx._target if ctx is not None else None)
        if error is not None:
            return _fail(ctx, str(error), error.exit_code, debug)
        return _fail(ctx, f"internal error: {type(exc).__name__}: {first_line(exc)} (rerun with --debug for details)", 1, debug)


def _mask_process_title(argv: list[str]) -> None:
    """`ps` shows a process's command line for its whole life: with `--dsn` holding a password,
    rewrite the title with the DSN masked (setproctitle overwrites the memory ps reads)."""
    from dbcore.database import mask_dsn

    shown, changed = [], False
    for index, arg in enumerate(argv):
        value = arg
        if index and argv[index - 1] == "--dsn":
            value = mask_dsn(arg)
        elif arg.startswith("--dsn="):
            value = "--dsn=" + mask_dsn(arg[len("--dsn="):])
        changed = changed or value != arg
        shown.append(value)
    if changed:
        try:
            import setproctitle
        except ImportError:  # a dependency: only a broken install lacks it
            return
        setproctitle.setproctitle(" ".join([PROG, *shown]))


def _fail(ctx: Context | None, message: str, code: int, debug: bool) -> int:
    if debug:
        traceback.print_exc()
    if ctx is not None:
        message = ctx.scrub(message)
    print(f"{PROG}: error: {message}", file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
