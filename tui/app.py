"""`queuetop` with no command: the live dashboard."""

from __future__ import annotations

import io
import logging
import os
from pathlib import Path

from platformdirs import user_log_dir
from psycopg import errors as psycopg_errors
from rich.console import Console

from dbcore.database import one
from dbcore.deadline import WATCHDOG, NoAnswer
from dbcore.dialect import open_session
from dbcore.errors import MissingPrivilege, QueuetopError, StandbyReadOnly, Unanswered, UsageError, first_line
from dbcore.pgversions import UnsupportedServer
from dbcore.text import inert_line
from probes.config import load_config
from probes.sampler import Sampler
from probes.session import FIRST_ANSWER_S
from queues import schema


def run_dashboard(ctx) -> int:
    from tui.dashboard import QueuetopApp

    args = ctx.args
    config = load_config(getattr(args, "config", None))
    from tui.dashboard import check_keymap

    check_keymap(config.keys)  # before anything starts: a bad [keys] table is one line, exit 2
    sessions_filter = filter_option(args)  # likewise a bad --filter
    interval = config.sampling_interval(args.interval if args.interval != 2.0 else None)  # 2.0: --interval's default
    _log_to_file()
    targets = ctx.targets(config)
    if len(targets) == 1:
        name, target = targets[0]
        hosts = [single_host(name, target, config, interval, read_only=args.read_only, engine=args.engine,
                             demo=not args.no_demo)]
    else:
        hosts = [_host(name, target, config, interval, args.read_only, args.engine) for name, target in targets]
    run_app(QueuetopApp(hosts=hosts, read_only=args.read_only, keymap=config.keys, flight_minutes=config.flight_minutes,
                        flight_mb=config.flight_mb, sessions_filter=sessions_filter), debug=getattr(args, "debug", False))
    return 0


def filter_option(args):
    """The Sessions panel's filter from --filter and --min-duration (tui/filters.py), checked
    against the Sessions panel's fields: UsageError (one line, exit 2) before anything starts."""
    from tui.filters import EMPTY, FilterError, with_min_duration
    from tui.widgets.panels.sessions import SESSION_FIELDS

    expression, seconds = getattr(args, "filter", None), getattr(args, "min_duration", None)
    if expression is None and seconds is None:
        return EMPTY
    try:
        flt = with_min_duration(expression, seconds)
    except FilterError as exc:
        raise UsageError(f"--filter: {exc}") from None
    refused = flt.refused_by(SESSION_FIELDS)
    if refused is not None:
        raise UsageError(f"--filter: Sessions: {refused}")
    return flt


# What an engine key says on a database other than the embedded one, without --engine.
ENGINE_OFF = "engine controls are off on this database: start queuetop with --engine to drive the reference engine here"
OFF = "engine controls are off: "
# The checks before the dashboard opens: reads, on a session of their own (no engine command's
# lock timeout, whose statement at connect no deadline would bound), connected within the probes'
# own connect timeout (the Sampler's pool: 5 s), each statement's answer within the probes'
# first-answer deadline: a pooler with no server connection to give delays the first frame by
# that much at most, and the dashboard then opens and says it waits.
CHECK_APPLICATION = "queuetop-dashboard:check"
CHECK_CONNECT_S = 5
STANDBY = "is a standby: read-only"  # how StandbyReadOnly ends


def single_host(name: str, target, config, interval: float, *, read_only: bool = False, engine: bool = False,
                demo: bool = True):
    """The one database of a dashboard: its engine controls (and the embedded server's demo) are
    found before the dashboard opens, so that a wrong DSN is one line, exit 2, as with them.

    Engine controls are on for the embedded server and, with --engine, for any other database;
    without --engine there, a key says to start with it (and what else is missing). Where they may
    be on but the schema is not usable yet, each engine key checks again when pressed (`prepare`):
    a dashboard started before `queuetop engine init` drives the engine after it."""
    from queues.control import EngineControls
    from queues.demo import Demo

    if read_only:
        _refuse_unsupported(target)
        return _host_spec(name, target, config, interval)
    if not (target.embedded or engine):
        # Someone else's database: the engine and demo keys write to it, so they wait for --engine.
        ready, why = engine_usable(target)
        return _host_spec(name, target, config, interval, controls_off=engine_off(None if ready else why))
    # Created now (no database is touched): the relays' fork server must start while stderr is a real file.
    controls = EngineControls(target)
    ready, why = engine_usable(target)
    if ready:
        return _host_spec(name, target, config, interval, controls=controls,
                          demo=Demo(controls) if target.embedded and demo else None)
    return _host_spec(name, target, config, interval, controls_off=why, prepare=_engine_check(target, controls))


def engine_off(why: str | None) -> str:
    """What an engine key says on a database other than the embedded one, without --engine: to
    start with it, and `why` the controls would be off even then (no schema), if so; on a hot
    standby only that (--engine would change nothing there)."""
    if why is not None and why.endswith(STANDBY):
        return why
    return ENGINE_OFF if why is None else f"{ENGINE_OFF}; and {why.removeprefix(OFF)}"


class DashboardFailed(QueuetopError):
    """The dashboard stopped on an exception it did not handle (a bug): the command fails with one
    line and exit 1, as any other internal error does."""

    exit_code = 1


def run_app(app, *, debug: bool = False) -> None:
    """Run the dashboard; raise DashboardFailed if an unhandled exception ended it.

    Textual catches such an exception, restores the terminal, prints it as a Rich traceback with
    every frame's local variables (a snapshot's queries and names among them) on its error console,
    and returns normally: the command would exit 0. Only with --debug is that traceback printed."""
    if not debug:
        app.error_console = Console(file=io.StringIO())  # what Textual would print on exit: kept out of sight
    app.run()
    if app.return_code:  # Textual's own: 1 after an unhandled exception
        error = getattr(app, "_exception", None)  # the exception itself: private, hence the fallback
        what = f"{type(error).__name__}: {first_line(error)}" if error is not None else f"exit status {app.return_code}"
        raise DashboardFailed(f"internal error: {inert_line(what, 300)} (rerun with --debug for details)") from error


def _host_spec(name: str, target, config, interval: float, **engine):
    """A database in the dashboard: its own sampler and pool, its backend, and `engine` (the
    HostSpec's controls, demo, controls_off, prepare)."""
    from tui.backend import DatabaseBackend
    from tui.dashboard import HostSpec

    return HostSpec(name=name, source_factory=lambda sink: Sampler(target, sink, config, interval_s=interval, host=name),
                    backend=DatabaseBackend(target, config), **engine)


def _host(name: str, target, config, interval: float, read_only: bool, engine: bool = False):
    """One of several databases: its engine controls are checked once the dashboard runs, in a
    thread of their own, so that a host that is down holds up no other."""
    from queues.control import EngineControls

    if read_only:
        return _host_spec(name, target, config, interval)
    if not (target.embedded or engine):
        return _host_spec(name, target, config, interval, controls_off=ENGINE_OFF)
    # Created now (no database is touched): the relays' fork server must start while stderr is a real file.
    return _host_spec(name, target, config, interval, controls_off="engine controls: checking the database…",
                      prepare=_engine_check(target, EngineControls(target)))


def _engine_check(target, controls):
    """A host's `prepare`: its controls if the engine can work there now, else None and why. Run
    once the dashboard runs, and again by an engine key pressed while the controls are off."""

    def prepare() -> tuple[object, str | None]:
        ready, off = engine_usable(target)
        return (controls if ready else None), off

    return prepare


def engine_usable(target) -> tuple[bool, str | None]:
    """Whether the engine's controls can work here: its schema installed (queuetop engine init)
    and usable by this role. A role without privileges still gets the dashboard (every probe
    shows what it can see); the controls are off, and the reason is what a key press says."""
    try:
        # Bounded: a pooler with no server connection to give holds these statements (the
        # dashboard then opens all the same, and says it waits; an engine key checks again).
        with open_session(target, application_name=CHECK_APPLICATION, connect_timeout=CHECK_CONNECT_S) as conn, \
                WATCHDOG.watch(conn, FIRST_ANSWER_S, what=target.masked):
            schema.refuse_standby(conn, where=target.masked)
            if not one(conn.execute(schema.ENGINE_SQL["schema_present"]))[0]:
                return False, (f"{OFF}the queuetop schema is not installed in this database: install it with "
                               "`queuetop engine init`")
            return True, None
    except (psycopg_errors.InsufficientPrivilege, MissingPrivilege) as exc:  # PostgreSQL's, SQL Server's (translated)
        return False, f"engine controls are off: this role may not use the queuetop schema ({first_line(exc)})"
    except UnsupportedServer:
        raise  # no dashboard on a server too old: one line, exit 2
    except (NoAnswer, Unanswered) as exc:  # connected, but nothing answers yet: no reason not to open
        return False, f"{OFF}{first_line(exc)}"
    except StandbyReadOnly as exc:  # cancel and terminate stay: they work on a standby
        return False, f"{OFF}{exc}"
    except UsageError as exc:
        return False, f"engine controls are off: {exc}"


def _refuse_unsupported(target) -> None:
    """A read-only dashboard makes no connection of its own before it opens, but on a server too
    old it must not open at all (one line, exit 2). A database that is down is no reason not to
    open: the dashboard says so and waits for it."""
    try:
        with open_session(target, application_name=CHECK_APPLICATION, connect_timeout=CHECK_CONNECT_S):
            pass
    except UnsupportedServer:
        raise
    except QueuetopError:
        pass


def _log_to_file() -> None:
    """Warnings go to a file: on the terminal they would scribble over the dashboard."""
    directory = Path(user_log_dir("queuetop"))
    directory.mkdir(parents=True, exist_ok=True)
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    path = directory / "queuetop.log"
    # Only its owner may read it (mode 600): a log line may quote a query or an error message.
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
    path.chmod(0o600)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)


def run_replay(ctx) -> int:
    """The dashboard on a recording (queuetop replay FILE)."""
    from probes.recording import Recording
    from tui.dashboard import check_keymap

    args = ctx.args
    config = load_config(getattr(args, "config", None))
    check_keymap(config.keys)
    recording = Recording(args.file)
    app = replay_app(recording, speed=args.speed, playing=not args.paused,
                     at=recording.instant(args.at) if args.at is not None else None, keymap=config.keys)
    run_app(app, debug=getattr(args, "debug", False))
    return 0


def replay_app(recording, *, speed: float = 1.0, playing: bool = True, at=None, keymap=None):
    """Each recorded host a tab, all on one recorded clock, with no database: no engine controls,
    no backend, so every action that writes is off, and says why: there is no database behind a
    recording (not --read-only, which was not given: the app's read_only is the flag's)."""
    from probes.recording import ReplayClock, ReplaySource
    from tui.dashboard import HostSpec, QueuetopApp

    clock = ReplayClock(recording, speed=speed, playing=playing)
    if at is not None:
        clock.position = at

    def source_of(host: str):
        return lambda sink: ReplaySource(clock, host, sink)

    off = "engine controls are off: a recording has no database behind it"
    hosts = [HostSpec(name=host, source_factory=source_of(host), controls_off=off) for host in recording.hosts]
    return QueuetopApp(hosts=hosts, keymap=keymap, replay=clock)
