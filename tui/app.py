"""`queuetop` with no command: the live dashboard."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import psycopg
from platformdirs import user_log_dir

from dbcore.database import connect, one
from dbcore.errors import UsageError, first_line
from probes.config import load_config
from probes.sampler import Sampler
from queues import schema


def run_dashboard(ctx) -> int:
    from queues.control import EngineControls
    from queues.demo import Demo
    from tui.backend import DatabaseBackend
    from tui.dashboard import QueuetopApp

    args = ctx.args
    config = load_config(getattr(args, "config", None))
    from tui.dashboard import check_keymap

    check_keymap(config.keys)  # before anything starts: a bad [keys] table is one line, exit 2
    target = ctx.target  # starts the embedded server when no DSN is given
    interval = args.interval if args.interval != 2.0 else config.interval_s
    if not 0.1 <= interval <= 3600:
        from dbcore.errors import UsageError

        raise UsageError("--interval must be between 0.1 and 3600 seconds")
    _log_to_file()
    controls = demo = None
    controls_off = None
    if not args.read_only:
        engine_ready, controls_off = engine_usable(target)
        if engine_ready:
            controls = EngineControls(target)
            if target.embedded and not args.no_demo:
                demo = Demo(controls)
    app = QueuetopApp(
        lambda sink: Sampler(target, sink, config, interval_s=interval),
        backend=DatabaseBackend(target, config),
        controls=controls,
        demo=demo,
        read_only=args.read_only,
        keymap=config.keys,
        controls_off=controls_off,
    )
    app.run()
    return 0


def engine_usable(target) -> tuple[bool, str | None]:
    """Whether the engine's controls can work here: its schema installed (queuetop engine init)
    and usable by this role. A role without privileges still gets the dashboard (every probe
    shows what it can see); the controls are off, and the reason is what a key press says."""
    try:
        with connect(target, application_name="queuetop-cli:dashboard") as conn:
            if not one(conn.execute(schema.ENGINE_SQL["schema_present"]))[0]:
                return False, "engine controls are off: the queuetop schema is not installed (queuetop engine init)"
            return True, None
    except psycopg.errors.InsufficientPrivilege as exc:
        return False, f"engine controls are off: this role may not use the queuetop schema ({first_line(exc)})"
    except UsageError as exc:  # a database the controls do not reach yet (SQL Server): the probes still run
        return False, f"engine controls are off: {exc}"


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
