"""What every command stands on: the databases it acts on (`Context`, resolved once per
invocation), and its output (a JSON line, a warning, a benchmark's progress and report)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

from dbcore.database import ENV_DSN, Target, connect, has_password, hide_secrets, mask_dsn, resolve_target, secrets_of
from dbcore.dialect import Session, open_session
from dbcore.errors import ConnectionFailed, UsageError
from dbcore.target import host_names
from dbcore.text import inert_line
from probes.config import Config
from queues import schema
from tui.title import PROG


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
        """The embedded server, started if it is not running, with the engine's schema; each
        slow step says so on a terminal (tui/progress.py), before the first frame or line."""
        from queues.embedded import embedded_target
        from tui import progress

        data_dir = getattr(self.args, "data_dir", None)
        target = embedded_target(Path(data_dir) if data_dir else None, step=progress.step)
        if not getattr(self.args, "read_only", False):  # --read-only writes nothing, not even the schema
            with connect(target, application_name="queuetop-cli:init") as conn:
                try:
                    schema.require(conn, where=target.masked)
                    current = True
                except UsageError:  # missing or of another version
                    current = False
                # The embedded default always carries the schema (install is idempotent, and runs
                # even when current: a concurrent queuetop may be installing it right now).
                with progress.step("installing the queuetop schema") if not current else nullcontext():
                    schema.install(conn)
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
            # Unnamed targets are named by host and database, and by what differs where two would
            # share a name (a socket's directory, a port, a user); the same DSN twice gets #2.
            names = host_names(named)
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


class HostsUnreachable(ConnectionFailed):
    """Some of the hosts a command watched could not be reached (exit 2), after it showed what
    the others saw: one error line for each, `host: reason` (tui/cli.py writes them)."""

    def __init__(self, failures: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{host}: {reason}" for host, reason in failures))
        self.failures = failures


def warn(message: str) -> None:
    """One line on stderr that something works but should not be so (the command goes on)."""
    print(f"{PROG}: warning: {inert_line(message)}", file=sys.stderr, flush=True)


def emit(obj: object) -> None:
    print(json.dumps(obj, separators=(", ", ": ")), flush=True)


def progress(args: argparse.Namespace) -> Callable[[str], None] | None:
    """Benchmarks narrate their rounds on stderr, unless the output is --json."""
    return None if args.json else lambda line: print(line, file=sys.stderr, flush=True)


def report(args: argparse.Namespace, result: dict) -> int:
    if args.json:
        emit(result)
    else:
        print(json.dumps(result, indent=2))
    return 0
