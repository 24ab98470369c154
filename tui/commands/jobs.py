"""`queuetop jobs ...`: any library's jobs from the command line — list, show, and act on them
(retry, run-now, cancel, delete; pause and resume a queue) with the library's own semantics
(jobs/). QUEUE is the queue's name as `snapshot --json` gives it."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from typing import Any

from dbcore.errors import UsageError
from dbcore.text import inert_line
from tui.title import PROG

from .context import Context, emit
from .options import ArgumentParser, int_between, leaf

ACTION_WORDS = {"retry": "retry", "run-now": "run now", "cancel": "cancel", "delete": "delete"}


def _filter(args: argparse.Namespace, ids: tuple[str, ...] = ()) -> Any:
    from jobs.model import JobFilter

    match = None
    if getattr(args, "match", None) is not None:
        try:
            match = json.loads(args.match)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--match: not JSON: {exc.msg} at character {exc.pos + 1}") from None
        if not isinstance(match, (dict, list)):
            raise UsageError("--match: give a JSON object or array (the arguments that jobs must contain)")
    return JobFilter(state=getattr(args, "state", None), kind=getattr(args, "kind", None), match=match,
                     text=getattr(args, "text", None), ids=ids)


def _queue(ctx: Context) -> Any:
    """The queue QUEUE names, found as the snapshot finds it (exit 2 when there is none)."""
    from jobs.resolve import find_queue
    from probes.config import load_config
    from probes.session import open_probe_connection

    config = load_config(getattr(ctx.args, "config", None))
    with open_probe_connection(ctx.target, application_name="queuetop-jobs:find") as conn:
        return find_queue(conn, ctx.args.queue, ctx.args.source, config)


def cmd_jobs_list(ctx: Context) -> int:
    from probes.session import open_probe_connection, probe_transaction

    args = ctx.args
    flt = _filter(args)
    queue = _queue(ctx)
    with open_probe_connection(ctx.target, application_name="queuetop-jobs:list") as conn, probe_transaction(conn):
        page = queue.library.page(conn, queue.name, flt, after=args.after, limit=args.limit, newest_first=args.newest)
    if args.json:
        emit({"queue": queue.shown, "source": queue.source, "filter": flt.to_json(), "jobs": [j.to_json() for j in page.jobs],
              "after": page.after, "note": page.note})
        return 0
    from tui.jobtext import jobs_lines

    for line in jobs_lines(page.jobs):
        print(line)
    if page.note:
        print(f"note: {inert_line(page.note)}")
    if page.after is not None:
        print(f"more: --after {inert_line(page.after)}")
    return 0


def cmd_jobs_show(ctx: Context) -> int:
    from probes.session import open_probe_connection, probe_transaction

    args = ctx.args
    queue = _queue(ctx)
    with open_probe_connection(ctx.target, application_name="queuetop-jobs:show") as conn, probe_transaction(conn):
        job = queue.library.job(conn, queue.name, args.id)
    if job is None:
        raise UsageError(f"queue {queue.shown!r} has no job {args.id!r}")
    if args.json:
        emit({"queue": queue.shown, "source": queue.source, "job": job.to_json(whole=True)})
    else:
        from tui.jobtext import job_lines

        for line in job_lines(job):
            print(line)
    return 0


def _confirm(args: argparse.Namespace, question: str) -> None:
    """Go on with --yes; else ask on a terminal (y to go on); with no terminal, refuse (exit 2)."""
    if args.yes:
        return
    if not sys.stdin.isatty():
        raise UsageError("refused: no terminal to confirm on; give --yes to act without asking")
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    answer = sys.stdin.readline().strip().lower()
    if answer not in ("y", "yes"):
        raise UsageError("not confirmed: nothing done")


def cmd_jobs_act(ctx: Context) -> int:
    from jobs.audit import Audit
    from jobs.bulk import act_on_ids, count_matching, run_bulk
    from jobs.model import ActionRefused

    args = ctx.args
    action = args.action
    ids = tuple(str(i) for i in args.ids)
    if ids and (args.all or args.state or args.match or args.kind or args.text):
        raise UsageError("give job ids, or a filter with --all, not both")
    if not ids and not args.all:
        raise UsageError("give the job ids to act on, or --state S [--match JSON] --all for every job the filter matches")
    if args.all and args.state is None:
        raise UsageError("--all needs --state: which of the queue's jobs (ready, delayed, blocked, in_flight, dead, done)")
    flt = _filter(args, ids)
    queue = _queue(ctx)
    library = type(queue.library)
    audit = Audit(dsn=ctx.target.masked, flt=flt)
    try:
        library.refuse(action)
        if args.state is not None and args.state not in library.states_for(action):
            raise ActionRefused(f"{queue.source} does not {ACTION_WORDS[action]} {args.state} jobs: "
                                f"{action} is for {', '.join(library.states_for(action))} jobs")
    except ActionRefused as exc:
        audit.refused(queue=queue.shown, source=queue.source, action=action, why=str(exc))
        raise
    what = library.mirrors[action]
    if ids:
        question = f"{ACTION_WORDS[action].capitalize()} {len(ids):,} job(s) of {queue.source} queue {queue.shown!r}? ({what})"
    else:
        count, more = count_matching(ctx.target, queue.library, queue.name, flt)
        if count == 0:
            outcome_empty = {"queue": queue.shown, "source": queue.source, "action": action, "matched": 0, "changed": 0, "skipped": 0}
            emit(outcome_empty) if args.json else print(json.dumps(outcome_empty, indent=2))
            return 0
        question = (f"{ACTION_WORDS[action].capitalize()} all {count:,}{'+' if more else ''} {flt.describe()} job(s) of "
                    f"{queue.source} queue {queue.shown!r}? ({what})")
    _confirm(args, question)
    if ids:
        outcome = act_on_ids(ctx.target, queue.library, queue.name, action, list(ids), shown=queue.shown, audit=audit)
    else:
        stop = threading.Event()
        previous = signal.signal(signal.SIGINT, lambda *_: stop.set())  # Ctrl-C: end after the batch in hand
        try:
            outcome = run_bulk(ctx.target, queue.library, queue.name, action, flt, after=args.after, shown=queue.shown,
                               audit=audit, stop=stop, progress=None if args.json else _progress)
        finally:
            signal.signal(signal.SIGINT, previous)
        if not args.json and sys.stderr.isatty():
            print(file=sys.stderr)
    audit.done(outcome)
    if args.json:
        emit(outcome.to_json())
    else:
        print(json.dumps(outcome.to_json(), indent=2))
    if outcome.stopped_after is not None:
        print(f"{PROG}: stopped: resume with --after {inert_line(outcome.stopped_after)}", file=sys.stderr)
        return 130
    return 0


def _progress(outcome: Any) -> None:
    if sys.stderr.isatty():
        print(f"\r{outcome.action}: {outcome.matched:,} matched, {outcome.changed:,} changed, {outcome.skipped:,} skipped",
              end="", file=sys.stderr, flush=True)


def cmd_jobs_pause(ctx: Context) -> int:
    from jobs.audit import Audit
    from jobs.bulk import write_session
    from jobs.model import JobFilter

    args = ctx.args
    queue = _queue(ctx)
    type(queue.library).refuse_pause()
    _confirm(args, f"{args.verb.capitalize()} {queue.source} queue {queue.shown!r}? ({type(queue.library).pause_mirrors})")
    with write_session(ctx.target) as conn, conn.transaction():
        queue.library.pause(conn, queue.name, args.verb == "pause")
    result = {"queue": queue.shown, "source": queue.source, "action": args.verb}
    Audit(dsn=ctx.target.masked, flt=JobFilter()).paused(queue=queue.shown, source=queue.source, paused=args.verb == "pause")
    emit(result) if args.json else print(json.dumps(result, indent=2))
    return 0


def register(commands: argparse._SubParsersAction) -> None:
    from jobs.model import ACTIONS, MAX_PAGE, STATES

    group = commands.add_parser("jobs", help="list, show, retry, run now, cancel or delete any library's jobs",
                                description="Any queue library's jobs: list them by state, search them, show one, and "
                                "act on them with the library's own semantics (docs/jobs.md). QUEUE is the queue's "
                                "name as `queuetop snapshot --json` gives it.")
    sub = group.add_subparsers(title="commands", metavar="COMMAND", parser_class=ArgumentParser, required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("queue", metavar="QUEUE", help="the queue's name as `snapshot --json` gives it")
        p.add_argument("--source", default=None, help="the queue's source, where two sources have a queue of that name")
        p.add_argument("--config", default=argparse.SUPPRESS, help="TOML file (a library's [sources.X] schema)")
        p.add_argument("--json", action="store_true", help="print JSON")

    def filters(p: argparse.ArgumentParser) -> None:
        p.add_argument("--state", choices=STATES, default=None, help="the jobs in this state (queuetop's words)")
        p.add_argument("--kind", default=None, help="the jobs of this kind (task name), exactly")
        p.add_argument("--match", default=None, metavar="JSON", help="the jobs whose arguments contain this JSON")
        p.add_argument("--text", default=None, help="the jobs whose arguments' text holds this (case-insensitive)")

    p = leaf(sub, "list", cmd_jobs_list, "list a queue's jobs, oldest first, a page at a time")
    common(p)
    filters(p)
    p.add_argument("--limit", type=int_between(1, MAX_PAGE), default=50, help=f"jobs a page, 1 to {MAX_PAGE} (default 50)")
    p.add_argument("--after", default=None, metavar="ID", help="the page after this job id (the last one shown)")
    p.add_argument("--newest", action="store_true", help="newest first")
    p = leaf(sub, "show", cmd_jobs_show, "show one job whole: arguments, every error kept, who holds it")
    common(p)
    p.add_argument("id", metavar="ID")
    for action in ACTIONS:
        p = leaf(sub, action, cmd_jobs_act, f"{ACTION_WORDS[action]} jobs: given ids, or every job a filter matches (--all)",
                 writes=True)
        common(p)
        filters(p)
        p.add_argument("ids", metavar="ID", nargs="*", help="the jobs to act on")
        p.add_argument("--all", action="store_true", help="every job the filter matches (needs --state)")
        p.add_argument("--after", default=None, metavar="ID", help="with --all: resume after this job id")
        p.add_argument("--yes", action="store_true", help="do not ask (required without a terminal)")
        p.set_defaults(action=action)
    for verb in ("pause", "resume"):
        p = leaf(sub, verb, cmd_jobs_pause, f"{verb} a queue, where its library has paused queues", writes=True)
        common(p)
        p.add_argument("--yes", action="store_true", help="do not ask (required without a terminal)")
        p.set_defaults(verb=verb)
