"""`queuetop engine scenario ...`: stories played against the database (contention,
exactly-once, relay, diagnose), each printing one JSON line."""

from __future__ import annotations

import argparse
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from dbcore.database import Target
from dbcore.errors import UsageError

from .context import Context, progress, report
from .options import ArgumentParser, bigint, float_between, int_between, leaf

if TYPE_CHECKING:
    from probes.model import Diagnosis
    from queues.scenarios.diagnose import DiagnoseScenario, SessionReader


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
    scenario = ContentionScenario(ctx.write_target, options, blocked_applications, progress=progress(args))
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
        ctx.write_target, messages=args.messages, duplicate_rate=args.duplicate_rate, crash_rate=args.crash_rate,
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
        ctx.write_target, relays=args.relays, messages=args.messages, kill_leader=args.kill_leader, ttl_s=args.ttl,
        batch=args.batch, rate=args.rate, keep=args.keep, progress=progress(args),
    )
    return report(args, scenario.run())


# -- diagnose (issue 29) ---------------------------------------------------------------------

DIAGNOSE_TIMEOUT_S = {"blocked": 60.0, "no-consumers": 60.0, "failing": 60.0, "saturated": 90.0, "bloat": 120.0}
DIAGNOSE_DURATION_S = 30.0  # --cause healthy


def evidence_wait_s(cause: str) -> float:
    """How long after the condition appears the verdict's rule (probes/diagnosis.py) may first
    name it, at the least: the xmin horizon counts as held once the holder's transaction is
    HORIZON_HELD_S old (the bloat scenario starts its holder first, so a little less is left), a
    backlog is saturated once it grew SATURATED_MIN_S, messages fail over a window of at least
    MIN_WINDOW_S; blocked (a lock held MIN_WAIT_S) and no-consumers are said from one sample."""
    from probes.diagnosis import HORIZON_HELD_S, MIN_WINDOW_S, SATURATED_MIN_S

    return {"bloat": HORIZON_HELD_S, "saturated": SATURATED_MIN_S, "failing": MIN_WINDOW_S}.get(cause, 0.0)


def evidence_due_s(scenario: DiagnoseScenario) -> float:
    """Seconds from the condition's establishment (`established_at`) to when its evidence is due:
    for bloat, when the holder's transaction turns HORIZON_HELD_S old; for saturated,
    SATURATED_MIN_S of growth; for failing, a window of MIN_WINDOW_S; for the others at once."""
    assert scenario.established_at is not None
    if scenario.cause == "bloat" and scenario.horizon_since is not None:
        return max(0.0, scenario.horizon_since + evidence_wait_s("bloat") - scenario.established_at)
    return evidence_wait_s(scenario.cause)


def names_expected(diagnosis: Diagnosis | None, code: str, expected: tuple[int, ...]) -> bool:
    """The verdict has the cause's code and names every expected session, the root blocker (or the
    xmin holder) first where there is one. (It may name more: see `watch`'s unexpected_pids.)"""
    if diagnosis is None or diagnosis.code != code or not set(expected) <= set(diagnosis.pids):
        return False
    return code not in ("blocked", "bloat") or diagnosis.pids[:1] == expected[:1]


@contextmanager
def database_sessions(target: Target) -> Iterator[SessionReader]:
    """The scenario's reader of its database's sessions (queues/scenarios/diagnose.py takes it, as
    the contention scenario takes its lock sampler): the sessions probe's, on a probe session."""
    from probes.postgres import APPLICATION_NAME
    from probes.sampler import probes_for
    from probes.session import open_probe_connection, probe_transaction
    from queues.scenarios.diagnose import SeenSession

    probes = probes_for(target)
    with open_probe_connection(target, application_name=f"{APPLICATION_NAME}:scenario") as conn:
        with probe_transaction(conn, where=target.masked):
            here = probes.server(conn).database

        def read() -> list[SeenSession]:
            with probe_transaction(conn, where=target.masked):
                sessions, _total = probes.sessions(conn)
            return [SeenSession(pid=s.pid, application=s.application, blocked_by=s.blocked_by) for s in sessions if s.database == here]

        yield read


def _verdict_json(diagnosis: Diagnosis | None) -> dict[str, Any] | None:
    if diagnosis is None:
        return None
    return {"code": diagnosis.code, "reason": diagnosis.reason, "pids": list(diagnosis.pids), "since_s": diagnosis.since_s}


def watch(target: Target, scenario: DiagnoseScenario, *, interval: float, timeout: float | None = None, hold: float = 0.0,
          duration: float | None = None, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The probe loop on an established scenario: a probe cycle (run_cycle) every `interval`
    seconds, judged by one Diagnoser, until the verdict on the scenario's queue has the cause's
    code and names the expected sessions (then `hold` seconds more), or `timeout` seconds; for
    healthy, `duration` (then `hold`) seconds, every verdict counted. The scenario is not stopped."""
    from probes.diagnosis import Diagnoser
    from probes.sampler import probes_for, run_cycle
    from probes.session import open_probe_connection

    assert scenario.established_at is not None, "start() the scenario first"
    cause, established = scenario.cause, scenario.established_at
    healthy = cause == "healthy"
    expected = scenario.expected_pids()
    due = evidence_due_s(scenario)
    seen: Counter[str] = Counter()
    verdict: Diagnosis | None = None
    last: Diagnosis | None = None
    time_to_verdict: float | None = None
    refreshes = cycles = 0
    misjudged = False
    end = established + ((duration or DIAGNOSE_DURATION_S) + hold if healthy else (timeout or DIAGNOSE_TIMEOUT_S[cause]))
    probes = probes_for(target)
    diagnoser = Diagnoser()
    with open_probe_connection(target) as conn:
        next_at = time.monotonic()
        while True:
            snapshot = run_cycle(target, probes=probes, conn=conn, diagnoser=diagnoser)
            now = time.monotonic()
            cycles += 1
            queue = next((q for q in snapshot.queues if q.name == scenario.queue_name and q.source == "reference"), None)
            diagnosis = queue.diagnosis if queue is not None else None
            seen[diagnosis.code if diagnosis is not None else "unknown"] += 1
            if progress and diagnosis is not None and (last is None or (last.code, last.pids) != (diagnosis.code, diagnosis.pids)):
                progress(f"{now - established:6.1f}s  {diagnosis.code}: {diagnosis.reason}")
            last = diagnosis
            if progress and healthy and cycles % 60 == 0:
                progress(f"{now - established:6.1f}s  verdicts so far: "
                         + ", ".join(f"{code} {count}" for code, count in sorted(seen.items())))
            # healthy: flagged by any other verdict, or none, but not judged on the first sample
            # (one sample judges no rate).
            calm = diagnosis is not None and (diagnosis.code == "healthy" or (cycles == 1 and diagnosis.code == "not-judged"))
            misjudged = misjudged or (healthy and not calm)
            found = (diagnosis is not None and not calm) if healthy else names_expected(diagnosis, cause, expected)
            if verdict is None and found:
                verdict, time_to_verdict, refreshes = diagnosis, now - established, cycles
                if not healthy:
                    end = now + hold
                    if progress:
                        progress(f"verdict {cause} after {time_to_verdict:.1f} s ({refreshes} refreshes)"
                                 + (f"; holding the condition {hold:g} s" if hold else ""))
            if now >= end or scenario.errors():
                break
            while next_at <= now:
                next_at += interval
            time.sleep(max(0.0, min(next_at, end) - now))
    if healthy:
        refreshes = cycles
    errors = scenario.errors()
    # Sessions the verdict names that the scenario did not start (a saturated verdict may name the
    # producer, caught inserting, and the workers' listener: those are the scenario's own).
    unexpected = sorted(set(verdict.pids) - scenario.own_pids()) if verdict is not None and not healthy else []
    ok = not errors and (not misjudged if healthy else verdict is not None and not unexpected)
    result: dict[str, Any] = {
        "scenario": "diagnose",
        "cause": cause,
        "queue": scenario.queue_name,
        "expected": {"code": cause, "pids": list(expected)},
        "verdict": _verdict_json(verdict if verdict is not None else last),
        "unexpected_pids": unexpected,
        "time_to_verdict_s": round(time_to_verdict, 3) if time_to_verdict is not None else None,
        "evidence_due_s": round(due, 3),
        "refreshes": refreshes,
        "interval_s": interval,
        "verdicts_seen": dict(sorted(seen.items())),
        "ok": ok,
    }
    if healthy:
        result["duration_s"] = round(time.monotonic() - established, 3)
    result["workers"] = {**scenario.work_summary(), "pids": list(scenario.worker_pids)}
    result["produced"] = scenario.produced
    result["errors"] = errors
    return result


def check_diagnose_options(args: argparse.Namespace) -> None:
    """What argparse cannot check alone, before anything is reached or written."""
    healthy = args.cause == "healthy"
    if args.duration is not None and not healthy:
        raise UsageError("--duration is for --cause healthy only (the other causes run until their verdict or --timeout)")
    if args.timeout is not None and healthy:
        raise UsageError("--timeout does not apply to --cause healthy (it runs --duration seconds, flagged or not)")
    if not healthy:
        least = evidence_wait_s(args.cause) + 2 * args.interval
        timeout = args.timeout if args.timeout is not None else DIAGNOSE_TIMEOUT_S[args.cause]
        if timeout < least:
            raise UsageError(f"--timeout {timeout:g} is too short for --cause {args.cause}: its verdict may come "
                             f"{evidence_wait_s(args.cause):g} s after the condition plus two refreshes; give at least {least:g}")


def cmd_scenario_diagnose(ctx: Context) -> int:
    from queues.scenarios.diagnose import DiagnoseScenario

    args = ctx.args
    check_diagnose_options(args)
    say = progress(args)
    with database_sessions(ctx.write_target) as sessions:
        scenario = DiagnoseScenario(ctx.target, args.cause, queue=args.queue, sessions=sessions, keep=args.keep, progress=say)
        scenario.validate()  # reads only: nothing is written before the options and the queue are right
        if say and args.cause == "bloat":
            say("bloat is judged once the holder's transaction is 30 s old (the xmin horizon counts as held): "
                "expect the verdict about 30 s after the holder starts")
        try:
            scenario.start()
            result = watch(ctx.target, scenario, interval=args.interval, timeout=args.timeout, hold=args.hold,
                           duration=args.duration, progress=say)
        finally:
            scenario.stop()  # on KeyboardInterrupt too
        if scenario.errors() and not result["errors"]:
            result["errors"], result["ok"] = scenario.errors(), False
    report(args, result)
    return 0 if result["ok"] else 1


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

    p = leaf(scenario_sub, "diagnose", cmd_scenario_diagnose,
             "make one reason a queue backs up, for real, and time the dashboard's verdict on it", writes=True)
    p.add_argument("--cause", choices=("blocked", "no-consumers", "failing", "bloat", "saturated", "healthy"), required=True,
                   help="the condition to make; healthy is the control, a busy queue that keeps up and is never to be flagged")
    p.add_argument("--queue", default=None, help="the fresh queue to make it on (default diagnose-CAUSE; refused if it exists)")
    p.add_argument("--interval", type=float_between(0.1, 60), default=1.0, help="seconds between refreshes, 0.1 to 60 (default 1)")
    p.add_argument("--timeout", type=float_between(1, 86_400), default=None,
                   help="seconds to wait for the verdict, up to 86400 (default 60; saturated 90, bloat 120)")
    p.add_argument("--hold", type=float_between(0, 86_400), default=0.0,
                   help="seconds to keep the condition after the verdict (healthy: after --duration), to watch it "
                   "in the dashboard, up to 86400 (default 0)")
    p.add_argument("--duration", type=float_between(1, 86_400), default=None,
                   help="--cause healthy: seconds to run, 1 to 86400 (default 30)")
    p.add_argument("--keep", action="store_true", help="leave the queue, its messages and its dead letters in place")
    p.add_argument("--json", action="store_true", help="print one JSON line (progress on stderr otherwise)")
