"""The `queuetop` command line. The contract (commands, output, exit codes) is PRODUCT.md's."""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import re
import signal
import sys
import threading
import traceback
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dbcore.database import ENV_DSN, Target, connect, has_password, hide_secrets, host_name, mask_dsn, resolve_target, secrets_of
from dbcore.dialect import Session, open_session, translate_error
from dbcore.errors import OperationFailed, QueuetopError, UsageError, first_line
from dbcore.redact import mask_arguments, mask_raw
from dbcore.text import inert_line
from probes.config import Config
from queues import __version__, schema
from queues import lease as leases
from queues import ring as rings

PROG = "queuetop"


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports a usage error as our one-line error (exit 2) instead of a usage dump.

    No abbreviations, here and in every sub-command (allow_abbrev is this class's default, and
    the sub-parsers are of this class): `--ds` taken for `--dsn` is a DSN under a name nothing
    looks for to mask. argparse's messages quote the command line ("unrecognized arguments:
    --ds=postgresql://u:pw@h"): every argument that may hold a secret is masked in them."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**{"allow_abbrev": False, **kwargs})
        self._given: list[str] = []

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        self._given = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> None:  # type: ignore[override]
        # from None: with --debug the traceback would show argparse's own error, unmasked.
        raise UsageError(f"{mask_arguments(message, self._given)} (see `{self.prog} --help`)") from None


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
        if not getattr(self.args, "read_only", False):  # --read-only writes nothing, not even the schema
            with connect(target, application_name="queuetop-cli:init") as conn:
                schema.install(conn)  # the embedded default always carries the schema
        return target

    def targets(self, config: Config | None = None) -> list[tuple[str, Target]]:
        """The databases a watching command (the dashboard, snapshot, export, record) watches, by
        name: every --dsn; else QUEUETOP_DSN; else the config's [[targets]]; else the embedded server."""
        if self._targets is None:
            named: list[tuple[str, Target]] = []
            cautions: list[str] = []  # said once every target resolved: a config error is then its one line alone
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
                        cautions.append(f"config: target {spec.name!r} holds a password; use ~/.pgpass, PGPASSWORD, a "
                                        f"service file or dsn_env instead")
                    named.append((spec.name, target))
                for message in cautions:
                    warn(message)
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
        """`text` about to be printed or logged, with every secret of every DSN this command was
        given (each --dsn, QUEUETOP_DSN, the config's targets once resolved) out of it: a DSN as
        typed becomes its masked form, and each secret (password, sslpassword, ...) ***."""
        raws = {dsn.strip() for dsn in [*self.dsns, os.environ.get(ENV_DSN) or ""] if dsn.strip()}
        resolved = [target for target in [self._target, *(target for _name, target in self._targets or ())] if target is not None]
        for raw in sorted(raws, key=len, reverse=True):
            text = text.replace(raw, mask_dsn(raw))
        return hide_secrets(text, [secret for dsn in raws | {target.conninfo for target in resolved} for secret in secrets_of(dsn)])


def warn(message: str) -> None:
    """One line on stderr that something works but should not be so (the command goes on)."""
    print(f"{PROG}: warning: {inert_line(message)}", file=sys.stderr, flush=True)


def emit(obj: object) -> None:
    print(json.dumps(obj, separators=(", ", ": ")), flush=True)


# -- engine commands ------------------------------------------------------------------------


def cmd_engine_init(ctx: Context) -> int:
    with ctx.session("init") as session:
        version = schema.install(session)
    emit({"schema_version": version, "database": ctx.target.masked})
    return 0


# A body's limits, stated in docs/engine.md. Nesting: Python's json parser recurses once per
# level and PostgreSQL's json parser checks its stack, so a body 100,000 levels deep is an internal
# error on one side or the other; 512 is far past any real document. Size: --stdin reads every
# body before writing one (all or none), so what it holds is bounded too (`< /dev/zero` included).
MAX_BODY_DEPTH = 512
MAX_BODY_BYTES = 16 * 1024 * 1024
MAX_STDIN_BYTES = 256 * 1024 * 1024
_JSON_STRUCTURE = re.compile(r'[\[\]{}"\\]')


def _check_body(text: str) -> str:
    """A body within its limits, then valid JSON as PostgreSQL's json type takes it (the text is
    kept exactly as given)."""
    from queues.table_queue import parse_json_body

    if len(text) > MAX_BODY_BYTES // 4 and len(text.encode("utf-8", "surrogatepass")) > MAX_BODY_BYTES:
        raise UsageError(f"JSON body of more than {MAX_BODY_BYTES // 2**20} MiB: refused, nothing written")
    if text.count("[") + text.count("{") > MAX_BODY_DEPTH:  # only then can it be too deep
        depth, in_string, escaped_at = 0, False, -1
        for match in _JSON_STRUCTURE.finditer(text):  # brackets inside strings do not nest
            char, at = match.group(), match.start()
            if at == escaped_at:
                continue
            if in_string:
                if char == "\\":
                    escaped_at = at + 1
                elif char == '"':
                    in_string = False
            elif char == '"':
                in_string = True
            elif char in "[{":
                depth += 1
                if depth > MAX_BODY_DEPTH:
                    raise UsageError(f"JSON body nested deeper than {MAX_BODY_DEPTH} levels: refused, nothing written")
            elif char in "]}":
                depth -= 1
    return parse_json_body(text)


def _stdin_bodies() -> list[str]:
    """Every --stdin line that is not blank, each checked, read a bounded line at a time."""
    stream = getattr(sys.stdin, "buffer", sys.stdin)  # bytes, where it has them
    bodies: list[str] = []
    total = number = 0
    while raw := stream.readline(MAX_BODY_BYTES + 2):  # room for the body's \r\n
        number += 1
        total += len(raw)
        if total > MAX_STDIN_BYTES or len(bodies) >= MAX_COUNT:
            raise UsageError(f"standard input holds more than {MAX_STDIN_BYTES // 2**20} MiB or {MAX_COUNT:,} bodies: "
                             "refused, nothing written")
        try:
            line = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        except UnicodeDecodeError:
            raise UsageError(f"malformed JSON body on standard input line {number}: not valid UTF-8") from None
        body = line.strip()
        if body:
            try:
                bodies.append(_check_body(body))
            except UsageError as exc:
                raise UsageError(f"standard input line {number}: {exc}") from None
    return bodies


def _bodies_from_args(args: argparse.Namespace) -> list[str] | Iterator[str] | None:
    """The bodies to write, validated now, before anything is written: every --stdin line is
    read and checked first (a list); --body is checked once and repeated lazily (--count may be
    large); None: the default bodies."""
    if args.stdin:
        return _stdin_bodies()
    if args.body is not None:
        return itertools.repeat(_check_body(args.body), args.count)
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
    try:
        handler = parse_handler(args.handler)
    except UsageError as exc:
        raise UsageError(f"--handler: {exc}") from None
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
    if args.until_empty and summary.dead:
        # The queue is empty, but not because every message was processed: a script that drains
        # a queue must not take dead letters for success. The summary line is printed all the same.
        raise OperationFailed(f"{summary.dead:,} message(s) of queue {args.queue!r} went to the dead-letter table in this run "
                              "(queuetop.dead_letters holds each with its last error)")
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
        reason = ctx.scrub(str(snapshot.extra.get("connection_error")))
        print(f"{PROG}: error: {inert_line(snapshot.host)}: {inert_line(reason)}", file=sys.stderr)
    return 2 if unreachable else 0


def _recorded_snapshot(ctx: Context) -> int:
    """`snapshot --from FILE --at TIME`: each recorded host as it was at TIME (the latest snapshot
    taken at or before it), as `snapshot` printed it then. No database is touched."""
    from probes.recording import Recording, read_warnings

    args = ctx.args
    if ctx.dsns or args.rates:
        raise UsageError("--from reads a recording: --dsn and --rates do not apply")
    with read_warnings(warn):  # what was skipped as damaged: one warning line; no snapshot at all: exit 2
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
                print(f"== {inert_line(snapshot.host)} ==")
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
    """The dashboard on a recording. What reading it skipped as damaged is one warning line on
    the terminal before the dashboard opens; while it runs, warnings go to the log file (on the
    terminal they would scribble over the dashboard)."""
    from probes.recording import read_warnings
    from tui import app

    log_to_file = getattr(app, "_log_to_file", None)
    if log_to_file is not None:
        log_to_file()
    with read_warnings(warn):
        return app.run_replay(ctx)


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


def _shown(value: float) -> str:
    """A bound as the error states it: 3,600, 0.1."""
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:g}"


def _float_between(low: float, high: float) -> Callable[[str], float]:
    """A finite number from low to high, both included."""
    def parse(text: str) -> float:
        value = _number(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text!r} must be between {_shown(low)} and {_shown(high)}")
        return value

    parse.__name__ = "number"  # what argparse names in its own messages
    return parse


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
    if not top:  # the top level's own --read-only is the dashboard's too; given after the command, the same flag
        parser.add_argument("--read-only", action="store_true", default=argparse.SUPPRESS,
                            help="refuse every command that writes to the database (exit 2, nothing written)")


def _leaf(sub: argparse._SubParsersAction, name: str, func: Callable[[Context], int], help_text: str, *,
          writes: bool = False) -> argparse.ArgumentParser:
    """A command. `writes`: it changes the database, so --read-only refuses it before it connects;
    declared here, where the command is, so that no write command can forget the check."""
    parser = sub.add_parser(name, help=help_text, description=help_text)
    _connection_options(parser)
    if writes:
        command = parser.prog.removeprefix(f"{PROG} ")

        def refuse_when_read_only(ctx: Context) -> int:
            if getattr(ctx.args, "read_only", False):
                raise UsageError(f"--read-only: {command!r} writes to the database; refused, nothing written")
            return func(ctx)

        parser.set_defaults(func=refuse_when_read_only, writes=True)
    else:
        parser.set_defaults(func=func, writes=False)
    return parser


def _body_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--count", type=_count, default=1, help=f"number of messages (default 1, at most {MAX_COUNT:,})")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--body", help="JSON body, stored exactly as given (default: {\"n\": i}); at most "
                       f"{MAX_BODY_DEPTH} levels deep and {MAX_BODY_BYTES // 2**20} MiB")
    group.add_argument("--stdin", action="store_true",
                       help=f"read one JSON body per line from standard input (at most {MAX_STDIN_BYTES // 2**20} MiB in all)")


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog=PROG, description="A terminal dashboard for database-backed queues and locks.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    _connection_options(parser, top=True)
    parser.add_argument("--interval", type=_float_between(0.1, 3600), default=2.0,
                        help="dashboard refresh interval in seconds, 0.1 to 3600 (default 2)")
    parser.add_argument("--read-only", action="store_true", help="disable every action that changes the database")
    parser.add_argument("--no-demo", action="store_true", help="do not start the demo workload on the embedded server")
    parser.add_argument("--config", default=None, help="TOML file declaring your own queue tables (default: the user's config dir)")
    parser.set_defaults(func=cmd_dashboard)
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", parser_class=ArgumentParser)

    p = _leaf(commands, "snapshot", cmd_snapshot, "run every probe once and print what they saw")
    p.add_argument("--json", action="store_true", help="print the snapshot as one JSON object (version 1)")
    p.add_argument("--config", default=argparse.SUPPRESS, help="TOML file declaring your own queue tables")
    p.add_argument("--rates", type=_float_between(0, 3600), default=0.0, metavar="SECONDS",
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
    p.add_argument("--interval", type=_float_between(0.1, 3600), default=None, metavar="SECONDS",
                   help="seconds between samples, 0.1 to 3600 (default: the config's probes.interval, 2)")
    p.add_argument("--max-size", type=_float_between(0.01, 1_000_000), default=64.0, metavar="MB",
                   help="rotate FILE when it passes this size: FILE.1, FILE.2, ...; 0.01 to 1000000 (default 64)")
    p.add_argument("--keep", type=_int_between(0, 1000), default=5, help="rotated files to keep (default 5)")
    p.add_argument("--config", default=argparse.SUPPRESS, help="TOML file declaring your queue tables and [[targets]]")

    p = _leaf(commands, "replay", cmd_replay, "the dashboard on a recording (queuetop record): no database")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--at", default=None, metavar="TIME", help="start at this time (as snapshot --at; default: the start)")
    p.add_argument("--speed", type=_float_between(0.01, 1000), default=1.0, help="times real time, 0.01 to 1000 (default 1)")
    p.add_argument("--paused", action="store_true", help="open paused (p plays)")

    engine = commands.add_parser("engine", help="drive the reference queue engine")
    engine_sub = engine.add_subparsers(title="engine commands", metavar="ACTION", required=True, parser_class=ArgumentParser)

    _leaf(engine_sub, "init", cmd_engine_init, "install or upgrade the queuetop schema (idempotent)", writes=True)

    p = _leaf(engine_sub, "enqueue", cmd_engine_enqueue, "add messages to a queue (created on first use)", writes=True)
    p.add_argument("queue")
    _body_options(p)
    p.add_argument("--batch", type=_int_between(1, 10_000), default=100,
                   help="messages per INSERT statement, 1 to 10000 (default 100; all in one transaction)")

    p = _leaf(engine_sub, "work", cmd_engine_work, "consume a queue with a pool of workers", writes=True)
    p.add_argument("queue")
    p.add_argument("--workers", type=_int_between(1, 256), default=1, help="maximum degree of parallelism, 1 to 256 (default 1)")
    p.add_argument("--handler", default="noop", help="noop | sleep:S | fail:P | crash:P | a,b | module:function (default noop)")
    p.add_argument("--until-empty", action="store_true", help="stop when the queue holds no ready or in-flight message")
    p.add_argument("--duration", type=_positive_float, default=None, help="stop after this many seconds")
    # At most 1,000: the retry back-off doubles per attempt, and 2**1024 is past any float.
    p.add_argument("--max-attempts", type=_int_between(1, 1000), default=5,
                   help="attempts before a message is dead-lettered, 1 to 1000 (default 5)")
    p.add_argument("--visibility", type=_float_between(0.1, MAX_SECONDS), default=30.0,
                   help="claim mode: seconds a claimed message stays hidden, at least 0.1 (default 30)")
    p.add_argument("--mode", choices=("claim", "hold-transaction"), default="claim", help="processing mode (default claim)")
    p.add_argument("--batch", type=_int_between(1, 10_000), default=1, help="messages claimed per round trip, 1 to 10000 (default 1)")
    p.add_argument("--poll-interval", type=_float_between(0.01, 3600), default=5.0,
                   help="seconds between fallback polls of an idle queue, 0.01 to 3600 (default 5)")
    p.add_argument("--retry-delay", type=_float_between(0, 3600), default=0.0,
                   help="back-off before a retry, doubling per attempt up to an hour; 0 to 3600 (default 0)")

    p = _leaf(engine_sub, "compact", cmd_engine_compact, "fold pending status deltas into aggregates now (prints a JSON summary)",
              writes=True)
    p.add_argument("--group", type=_int_between(1, BIGINT_MAX), default=None, metavar="KEY", help="only this group (task id)")

    scenario = engine_sub.add_parser("scenario", help="stories played against the database (print one JSON line)")
    scenario_sub = scenario.add_subparsers(title="scenarios", metavar="NAME", required=True, parser_class=ArgumentParser)
    p = _leaf(scenario_sub, "contention", cmd_scenario_contention,
              "hot aggregate rows (naive) against insert-only deltas and a compactor (compacted)", writes=True)
    p.add_argument("--mode", choices=("naive", "compacted"), required=True, help="naive: hot rows; compacted: deltas")
    p.add_argument("--submitters", type=_int_between(1, 256), default=16, help="concurrent answering sessions, 1 to 256 (default 16)")
    p.add_argument("--duration", type=_float_between(0.01, 86_400), default=20.0, help="seconds to run, up to 86400 (default 20)")
    p.add_argument("--no-compactor", action="store_true", help="compacted mode without the compacting agent")
    p.add_argument("--tasks", type=_int_between(1, 1000), default=4, help="tasks answered in parallel, 1 to 1000 (default 4)")
    p.add_argument("--users", type=_int_between(1, 10_000_000), default=100_000,
                   help="users the tasks reach before the clock starts, --tasks to 10000000 (default 100000)")
    p.add_argument("--resubmit-every", type=_float_between(0.05, 3600), default=2.0,
                   help="seconds between (re)submissions, 0.05 to 3600 (default 2)")
    p.add_argument("--submission-seconds", type=_float_between(0, 600), default=1.0,
                   help="how long a (re)submission transaction stays open, 0 to 600 (default 1)")
    p.add_argument("--submission-users", type=_int_between(1, 1_000_000), default=2000,
                   help="new users per (re)submission, 1 to 1000000 (default 2000)")
    p.add_argument("--submission-batches", type=_int_between(1, 1000), default=10,
                   help="batches per (re)submission, 1 to 1000 (default 10)")
    p.add_argument("--compact-every", type=_float_between(0.05, 3600), default=0.5,
                   help="compactor interval in seconds, 0.05 to 3600 (default 0.5)")
    p.add_argument("--sample-every", type=_float_between(0.01, 60), default=0.1,
                   help="seconds between lock samples, 0.01 to 60 (default 0.1)")
    p.add_argument("--keep", action="store_true", help="leave the scenario's tasks and rows in the database")
    p.add_argument("--json", action="store_true", help="print one JSON line (progress on stderr otherwise)")

    p = _leaf(scenario_sub, "exactly-once", cmd_scenario_exactly_once,
              "messages through an inbox/outbox endpoint with duplicate deliveries and receiver crashes", writes=True)
    p.add_argument("--messages", type=_int_between(1, 10_000_000), default=1000, help="messages sent, 1 to 10000000 (default 1000)")
    p.add_argument("--duplicate-rate", type=_float_between(0, 1), default=0.2,
                   help="share of messages signalled twice, 0 to 1 (default 0.2)")
    p.add_argument("--crash-rate", type=_float_between(0, 0.99), default=0.02,
                   help="chance that a delivery kills its receiving process at a random step, 0 to 0.99 (default 0.02)")
    p.add_argument("--variant", choices=("claims", "naive"), default="claims",
                   help="claims: inbox/outbox with claims; naive: check the inbox, then process (default claims)")
    p.add_argument("--receivers", type=_int_between(1, 64), default=4, help="receiving processes, 1 to 64 (default 4)")
    p.add_argument("--visibility", type=_float_between(0.1, 600), default=1.0,
                   help="seconds before a crashed delivery comes back, 0.1 to 600 (default 1)")
    p.add_argument("--seed", type=_bigint, default=None, help="random seed (default: a random one, printed)")
    p.add_argument("--keep", action="store_true", help="leave the scenario's rows and signal queue in place")
    p.add_argument("--json", action="store_true", help="print one JSON line")

    p = _leaf(scenario_sub, "relay", cmd_scenario_relay, "outbox relays scaled out by a lease, optionally killing the leader",
              writes=True)
    p.add_argument("--relays", type=_int_between(1, 32), default=3, help="relay processes, 1 to 32 (default 3)")
    p.add_argument("--messages", type=_int_between(1, 10_000_000), default=10_000,
                   help="outbox messages written, 1 to 10000000 (default 10000)")
    p.add_argument("--kill-leader", action="store_true", help="SIGKILL the lease holder a third of the way through")
    p.add_argument("--ttl", type=_float_between(0.2, 600), default=2.0, help="the relay lease's TTL in seconds, 0.2 to 600 (default 2)")
    p.add_argument("--batch", type=_int_between(1, 10_000), default=100, help="outbox rows per relay transaction, 1 to 10000 (default 100)")
    p.add_argument("--rate", type=_float_between(1, 1_000_000), default=2000.0,
                   help="messages written per second, 1 to 1000000 (default 2000)")
    p.add_argument("--keep", action="store_true", help="leave the scenario's queues in place")
    p.add_argument("--json", action="store_true", help="print one JSON line")

    ring = engine_sub.add_parser("ring", help="ring buffer queues")
    ring_sub = ring.add_subparsers(title="ring commands", metavar="ACTION", required=True, parser_class=ArgumentParser)
    p = _leaf(ring_sub, "create", cmd_ring_create, "create a ring of fixed capacity", writes=True)
    p.add_argument("name")
    p.add_argument("--capacity", type=_int_between(1, 10_000_000), required=True)
    p = _leaf(ring_sub, "put", cmd_ring_put, "put messages (all or none; exit 3 when full)", writes=True)
    p.add_argument("name")
    _body_options(p)
    p = _leaf(ring_sub, "take", cmd_ring_take, "take messages in order, printing each body on its own line", writes=True)
    p.add_argument("name")
    p.add_argument("--count", type=_count, default=1, help="at most this many (default 1)")

    lease = engine_sub.add_parser("lease", help="leases with fencing tokens")
    lease_sub = lease.add_subparsers(title="lease commands", metavar="ACTION", required=True, parser_class=ArgumentParser)
    for name, func, text, with_ttl in (
        ("acquire", cmd_lease_acquire, "take a lease; prints the fencing token (exit 4 if held by another)", True),
        ("renew", cmd_lease_renew, "extend a lease you hold; prints the fencing token", True),
        ("release", cmd_lease_release, "release a lease you hold", False),
    ):
        p = _leaf(lease_sub, name, func, text, writes=True)
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
    p.add_argument("--interval", type=_float_between(0.1, 3600), default=None, metavar="SECONDS",
                   help="seconds between samples, 0.1 to 3600 (default: the config's probes.interval, 2)")
    p.add_argument("--config", default=argparse.SUPPRESS, help="TOML file declaring your queue tables and [[targets]]")

    demo = commands.add_parser("demo", help="the demo workload of the embedded server")
    demo_sub = demo.add_subparsers(title="demo commands", metavar="ACTION", required=True, parser_class=ArgumentParser)
    p = _leaf(demo_sub, "reset", cmd_demo_reset,
              "remove what the demo and the dashboard's prompts made (demo.* queues with their dead letters, rings, "
              "leases and tasks; the outbox relays' queues and lease; queues and leases created from prompts); "
              "prints a JSON summary", writes=True)
    p.add_argument("--force", action="store_true", help="reset even while the engine's sessions are connected")

    bench = commands.add_parser("bench", help="benchmarks (print JSON)")
    bench_sub = bench.add_subparsers(title="benchmarks", metavar="NAME", required=True, parser_class=ArgumentParser)
    p = _leaf(bench_sub, "engine", cmd_bench_engine, "queuetop's dequeue/enqueue against pgbench running the same SQL",
              writes=True)
    p.add_argument("--json", action="store_true", help="print one JSON line")
    p.add_argument("--messages", type=_count, default=100_000, help="messages per measured batch run (default 100000)")
    p.add_argument("--single-messages", type=_count, default=10_000, help="messages per measured single-message run (default 10000)")
    p.add_argument("--concurrency", type=_int_between(1, 256), default=2, help="clients on both sides, 1 to 256 (default 2)")
    p.add_argument("--batch", type=_int_between(1, 10_000), default=100, help="batch size for the batch runs, 1 to 10000 (default 100)")
    p.add_argument("--rounds", type=_int_between(1, 100), default=3, help="interleaved rounds, 1 to 100; medians are reported (default 3)")
    p.add_argument("--idle-seconds", type=_float_between(0.1, 3600), default=10.0,
                   help="how long to watch an idle queue, 0.1 to 3600 (default 10)")

    p = _leaf(bench_sub, "probes", cmd_bench_probes,
              "a full probe cycle's cost at a small and a large queue depth, and the locks probe's under a pile-up",
              writes=True)
    p.add_argument("--json", action="store_true", help="print one JSON line")
    p.add_argument("--small-depth", type=_int_between(10, MAX_COUNT), default=1_000, help="messages in the small run (default 1000)")
    p.add_argument("--large-depth", type=_int_between(10, MAX_COUNT), default=1_000_000, help="messages in the large run (default 1000000)")
    p.add_argument("--idle-connections", type=_int_between(0, 1000), default=50,
                   help="idle sessions held open meanwhile, 0 to 1000 (default 50)")
    p.add_argument("--cycles", type=_int_between(1, 10_000), default=50,
                   help="timed cycles per depth, 1 to 10000; p50/p95 reported (default 50)")
    p.add_argument("--pileup", type=_int_between(0, 1000), default=16,
                   help="pgbench sessions waiting on one held row while the locks probe is timed; 0 skips it (default 16)")

    p = _leaf(bench_sub, "sources", cmd_bench_sources,
              "the queue libraries' probe cost at a small and a large size, against their own monitoring calls",
              writes=True)
    p.add_argument("--json", action="store_true", help="print one JSON line")
    p.add_argument("--small", type=_int_between(100, MAX_COUNT), default=1_000, help="jobs per library in the small run (default 1000)")
    p.add_argument("--large", type=_int_between(100, MAX_COUNT), default=1_000_000,
                   help="jobs per library in the large run (default 1000000)")
    p.add_argument("--cycles", type=_int_between(1, 10_000), default=20,
                   help="timed cycles per size, 1 to 10000; p50 reported (default 20)")

    p = _leaf(bench_sub, "peers", cmd_bench_peers,
              "the engine's dequeue throughput beside PGMQ's and Procrastinate's own, same server and concurrency",
              writes=True)
    p.add_argument("--json", action="store_true", help="print one JSON line")
    p.add_argument("--messages", type=_count, default=20_000, help="messages per run (default 20000)")
    p.add_argument("--concurrency", type=_int_between(1, 256), default=2, help="consuming sessions, 1 to 256 (default 2)")
    p.add_argument("--batch", type=_int_between(1, 10_000), default=100,
                   help="messages per claim in the batch runs, 1 to 10000 (default 100)")
    p.add_argument("--rounds", type=_int_between(1, 100), default=3, help="interleaved rounds, 1 to 100; medians reported (default 3)")

    p = _leaf(bench_sub, "tui", cmd_bench_tui, "the dashboard's cost per snapshot and when idle (synthetic data, no database)")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    p.add_argument("--sessions", type=_int_between(1, 10_000), default=500,
                   help="client sessions in each snapshot, most blocked; 1 to 10000 (default 500)")
    p.add_argument("--queues", type=_int_between(1, 1000), default=50, help="queues in each snapshot, 1 to 1000 (default 50)")
    p.add_argument("--snapshots", type=_int_between(1, 1000), default=60, help="snapshots applied and timed, 1 to 1000 (default 60)")
    p.add_argument("--idle-seconds", type=_float_between(0.1, 3600), default=10.0,
                   help="how long to measure idle CPU, 0.1 to 3600 (default 10)")
    p.add_argument("--warm-up", type=_float_between(0, 3600), default=15.0,
                   help="seconds before measuring idle CPU, 0 to 3600 (default 15)")

    server = commands.add_parser("server", help="the embedded PostgreSQL server")
    server_sub = server.add_subparsers(title="server commands", metavar="ACTION", required=True, parser_class=ArgumentParser)
    _leaf(server_sub, "status", cmd_server_status, "show whether the embedded server runs, and where")
    _leaf(server_sub, "stop", cmd_server_stop, "stop the embedded server")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    _mask_process_title(argv)  # first: ps shows the command line to every user of the host
    logging.basicConfig(level=logging.WARNING, format="queuetop: %(levelname)s: %(message)s")
    # platformdirs warns, over two lines, on a host without a login session (SSH without systemd,
    # CI) whenever pgserver is imported: nothing an operator can act on, and an error must be one line.
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    debug = "--debug" in argv
    ctx: Context | None = None
    # Every log record (stderr, the dashboard's log file), whoever writes it, without the DSNs' secrets.
    records = logging.getLogRecordFactory()
    logging.setLogRecordFactory(_scrubbed_records(records, lambda text: ctx.scrub(text) if ctx is not None else text))
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
    finally:
        logging.setLogRecordFactory(records)


def _mask_process_title(argv: list[str]) -> None:
    """`ps` shows a process's command line to every user for its whole life: rewrite the title
    with every argument that may hold a secret masked, a --dsn value by its parser (mask_dsn),
    any other by the parser-free mask (dbcore/redact.py: a DSN given where none is expected).
    The console script (tui/entry.py) set a coarser one before the slow imports."""
    from tui.entry import set_title

    shown = []
    for index, arg in enumerate(argv):
        try:
            if index and argv[index - 1] == "--dsn":
                value = mask_dsn(arg)
            elif arg.startswith("--dsn="):
                value = "--dsn=" + mask_dsn(arg[len("--dsn="):])
            else:
                value = mask_raw(arg)
        except Exception:  # the title must never stop the command
            value = mask_raw(arg)
        shown.append(value)
    if shown != argv:
        set_title(shown)


def _scrubbed_records(factory: Callable[..., logging.LogRecord], scrub: Callable[[str], str]) -> Callable[..., logging.LogRecord]:
    """A log record factory: `factory`'s records, their message (and traceback) through `scrub`."""

    def make(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = factory(*args, **kwargs)
        try:
            message = record.getMessage()
            clean = scrub(message)
            if clean != message:
                record.msg, record.args = clean, None
            if record.exc_info and not record.exc_text:
                record.exc_text = scrub(logging.Formatter().formatException(record.exc_info))
        except Exception:  # a record that cannot be formatted: logging reports it as it would have
            pass
        return record

    return make


def _fail(ctx: Context | None, message: str, code: int, debug: bool) -> int:
    scrub = ctx.scrub if ctx is not None else str
    if debug:
        print(scrub(traceback.format_exc()), end="", file=sys.stderr)
    # One line, inert: an error may quote a name or a message another application wrote.
    print(f"{PROG}: error: {inert_line(scrub(message))}", file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
