"""What every command stands on: the databases it acts on (`Context`, resolved once per
invocation), and its output (a JSON line, a warning, a benchmark's progress and report)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

from dbcore.database import ENV_DSN, Target, connect, has_password, hide_secrets, mask_dsn, resolve_target, secrets_of
from dbcore.dialect import Session, dialect_named, open_session
from dbcore.errors import ConnectionFailed, UsageError
from dbcore.target import host_names
from dbcore.text import inert_line
from probes.config import Config
from probes.pooler_console import console_target
from queues import schema
from tui.title import PROG


class Context:
    """What a command needs to reach the database, resolved once per invocation."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self._target: Target | None = None
        self._targets: list[tuple[str, Target]] | None = None
        # A command that writes (options.leaf): its sessions refuse a hot standby up front.
        self.writes = False

    @property
    def dsns(self) -> list[str]:
        """Every --dsn given (the option may be repeated)."""
        given = [getattr(self.args, "dsn", None), getattr(self.args, "dsn_after", None)]
        return [dsn for value in given for dsn in ([value] if isinstance(value, str) else list(value or []))]

    @property
    def pgbouncers(self) -> list[str]:
        """Every --pgbouncer given (one per --dsn, in the same order; "" for a target without one)."""
        given = [getattr(self.args, "pgbouncer", None), getattr(self.args, "pgbouncer_after", None)]
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
            self._target = self._with_pooler(target)
        return self._target

    def _with_pooler(self, target: Target, declared: str = "auto") -> Target:
        """`target` with what stands between (dbcore/pooler.py): --pooler, else the config target's
        `pooler` (`declared`), else as resolved (auto: found out on the first connection)."""
        mode = getattr(self.args, "pooler", None) or declared
        return target if mode in ("auto", target.pooler) else replace(target, pooler=mode)

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
                    named.append(("", self._with_pooler(target if target is not None else self._embedded())))
            elif config is not None and config.targets and not os.environ.get(ENV_DSN, "").strip():
                for spec in config.targets:
                    target = resolve_target(spec.resolve_dsn())
                    if target is None:
                        raise UsageError(f"target {spec.name!r}: empty DSN")
                    if spec.dsn is not None and has_password(target):
                        cautions.append(f"config: target {spec.name!r} holds a password; use ~/.pgpass, PGPASSWORD, a "
                                        f"service file or dsn_env instead")
                    if spec.pgbouncer is not None:
                        console = console_target(spec.pgbouncer, where=f"target {spec.name!r}: pgbouncer")
                        if console is not None and has_password(console):
                            cautions.append(f"config: target {spec.name!r}: its pgbouncer DSN holds a password; use ~/.pgpass "
                                            "or PGPASSWORD instead")
                        target = replace(target, pgbouncer=console)
                    named.append((spec.name, self._with_pooler(target, spec.pooler)))
                for message in cautions:
                    warn(message)
            else:
                named.append(("", self.target))
            named = self._with_pgbouncers(named)
            # Unnamed targets are named by host and database, and by what differs where two would
            # share a name (a socket's directory, a port, a user); the same DSN twice gets #2.
            names = host_names(named)
            self._targets = [(name, target) for name, (_given, target) in zip(names, named, strict=True)]
            if len(self._targets) == 1:
                self._target = self._targets[0][1]
        return self._targets

    def _with_pgbouncers(self, named: list[tuple[str, Target]]) -> list[tuple[str, Target]]:
        """The targets with the PgBouncer consoles --pgbouncer names: the N-th to the N-th --dsn
        (an empty one: none), or the one to the one target (QUEUETOP_DSN, a config's only target,
        the embedded server), over what the config says. Anything else cannot be told apart: a
        usage error."""
        consoles = self.pgbouncers
        if not consoles:
            return named
        if self.dsns and len(consoles) != len(self.dsns):
            raise UsageError(f"--pgbouncer: give it once per --dsn, in the same order (\"\" for a database without one): "
                             f"{len(self.dsns)} --dsn, {len(consoles)} --pgbouncer")
        if not self.dsns and (len(consoles) != 1 or len(named) != 1):
            raise UsageError("--pgbouncer applies to one database: with several [[targets]], set `pgbouncer` on each "
                             "in the config (or give --dsn once per database and --pgbouncer once per --dsn)")
        return [(name, replace(target, pgbouncer=console_target(dsn)))
                for (name, target), dsn in zip(named, consoles, strict=True)]

    def session(self, role: str) -> Session:
        """A session in the target's dialect (the commands that reach SQL Server use this). For a
        command that writes, on a hot standby: refused (exit 2, nothing written), on this session."""
        session = open_session(self.target, application_name=f"queuetop-cli:{role}")
        if self.writes:
            try:
                schema.refuse_standby(session, where=self.target.masked)
            except BaseException:
                session.close()
                raise
        return session

    @property
    def write_target(self) -> Target:
        """The target of a command that writes through sessions of its own (the scenarios, the
        benchmarks): refused on a hot standby, as `session` refuses it (one connection to ask,
        where the dialect can tell a standby: Capabilities.hot_standby)."""
        target = self.target
        if dialect_named(target.dialect).capabilities.hot_standby:
            with self.session("check"):
                pass
        return target

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
        raws = {dsn.strip() for dsn in [*self.dsns, *self.pgbouncers, os.environ.get(ENV_DSN) or ""] if dsn.strip()}
        resolved = [target for target in [self._target, *(target for _name, target in self._targets or ())] if target is not None]
        resolved += [target.pgbouncer for target in resolved if target.pgbouncer is not None]  # their PgBouncer consoles
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
