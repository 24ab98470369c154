"""The user's configuration: queue tables the operator already has, declared in TOML.

    # ~/.config/queuetop/config.toml (or the file $QUEUETOP_CONFIG names, or --config FILE)
    [keys]                    # remap dashboard keys by binding id (see `?` in the dashboard)
    pause = "space"

    [probes]
    interval = 2.0            # seconds between samples
    window = 1000             # rows read from a queue's head; above it depth is an estimate

    [dashboard]               # the flight recorder: the last minutes in memory, R saves them
    flight_minutes = 15       # how far back (0: off), at most 1440
    flight_mb = 50            # at most this much memory (compressed snapshots; 0: off), at most 4096

    [[targets]]               # several databases: a tab each in the dashboard (--dsn overrides)
    name = "billing"
    dsn_env = "BILLING_DSN"   # the DSN from this environment variable, or
    # service = "billing"     # a libpq service (~/.pg_service.conf), or
    # dsn = "host=db1 dbname=billing"   # a DSN: its password from ~/.pgpass or PGPASSWORD
    # pgbouncer = "postgresql://stats@db1:6432/pgbouncer"   # optional: its PgBouncer's admin console
    # pooler = "transaction"  # optional: reached through a pooler in this mode (session, transaction,
    #                         # none: direct); by default found out (a pooler found: transaction mode)

    [[queues]]
    name = "messages"         # shown in the dashboard
    table = "public.messages" # as you would write it in SQL; resolved through the catalog
    order_by = "id"           # the dequeue order (should lead an index), or columns in order:
                              # ["priority DESC", "id"] (each ASC or DESC, NULLS FIRST or LAST)
    age_column = "inserted"   # optional: timestamp for the oldest ready age
    visible_at_column = ""    # optional: rows with a future value are in flight (claimed)
    state_column = ""         # optional, with the states below
    ready_states = []         # e.g. ["new"]; empty = every row not in flight or dead
    in_flight_states = []     # e.g. ["processing"]
    dead_states = []          # e.g. ["failed"]
    dead_letter_table = ""    # optional: its rows are dead ...
    dead_letter_where = {}    # ... those whose columns hold these values: { status = ["failed"] }
    created_column = ""       # optional: when a row was created: the enqueue rate
    finished_column = ""      # optional: when it finished (done or dead): the dequeue and failure rates

Column and table names are never put into SQL as text: the probe looks them up in the catalog
and quotes the catalog's names.

The settings' model (Config, DeclaredQueue, TargetSpec) is probes/configmodel.py, re-exported
here; this module reads and checks the file, asking the queue sources (probes/sources/) which
sources and options there are.
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
from pathlib import Path

from platformdirs import user_config_dir

from dbcore.errors import UsageError, first_line
from dbcore.names import is_valid_name
from dbcore.pooler import POOLER_MODES

from .configmodel import CONTROL
from .configmodel import DEFAULT_FLIGHT_MB as DEFAULT_FLIGHT_MB
from .configmodel import DEFAULT_FLIGHT_MINUTES as DEFAULT_FLIGHT_MINUTES
from .configmodel import DEFAULT_INTERVAL_S as DEFAULT_INTERVAL_S
from .configmodel import DEFAULT_WINDOW as DEFAULT_WINDOW
from .configmodel import Config as Config
from .configmodel import DeclaredQueue as DeclaredQueue
from .configmodel import TargetSpec as TargetSpec

ENV_CONFIG = "QUEUETOP_CONFIG"


def default_config_path() -> Path:
    return Path(user_config_dir("queuetop")) / "config.toml"


MAX_CONFIG_BYTES = 1024 * 1024  # a config is a page of TOML: a larger file is not one


def load_config(path: str | Path | None = None) -> Config:
    """Read the config: `path` (--config FILE), else the file $QUEUETOP_CONFIG names, else the
    default file. A missing default file is an empty config; a missing file that was named, one
    that is not a regular file (a directory, a FIFO, /dev/zero), one over MAX_CONFIG_BYTES or a
    malformed one is a usage error (exit 2), said in one line, before anything is read from it."""
    if path is not None:
        file = Path(path)
        text = _read_config(file, f"config file {str(file)!r}", required=True)
    elif os.environ.get(ENV_CONFIG, ""):
        file = Path(os.environ[ENV_CONFIG])
        text = _read_config(file, f"config file {str(file)!r} (named by ${ENV_CONFIG})", required=True)
    else:
        file = default_config_path()
        text = _read_config(file, f"config {str(file)!r}", required=False)
    if text is None:
        return Config()
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"malformed config {str(file)!r}: {first_line(exc)}") from None
    except RecursionError:  # tomllib recurses once per nested array or inline table
        raise UsageError(f"malformed config {str(file)!r}: arrays or inline tables nested too deeply") from None
    return parse_config(data, file)


def _read_config(file: Path, where: str, *, required: bool) -> str | None:
    """The file's text; None when it does not exist and is not `required` (the default file). It
    is looked at before it is opened, and opened without blocking: a FIFO never hangs the command."""
    try:
        info = file.stat()
    except FileNotFoundError:
        if required:
            raise UsageError(f"{where} not found") from None
        return None
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise UsageError(f"cannot read {where}: {_reason(exc)}") from None
    _check_regular(where, info.st_mode, info.st_size)
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise UsageError(f"cannot read {where}: {_reason(exc)}") from None
    with os.fdopen(fd, "rb") as stream:
        try:
            opened = os.fstat(stream.fileno())  # replaced between the two looks: the second one counts
            _check_regular(where, opened.st_mode, opened.st_size)
            data = stream.read(MAX_CONFIG_BYTES + 1)
        except OSError as exc:
            raise UsageError(f"cannot read {where}: {_reason(exc)}") from None
    if len(data) > MAX_CONFIG_BYTES:  # grew since it was looked at
        raise UsageError(f"{where} is larger than {MAX_CONFIG_BYTES // 1024:,} KiB: not a queuetop config")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"cannot read {where}: not UTF-8 text (byte {exc.start})") from None


def _check_regular(where: str, mode: int, size: int) -> None:
    if stat.S_ISDIR(mode):
        raise UsageError(f"{where} is a directory: name a TOML file")
    if not stat.S_ISREG(mode):
        raise UsageError(f"{where} is not a regular file (a FIFO, a socket or a device): name a TOML file")
    if size > MAX_CONFIG_BYTES:
        raise UsageError(f"{where} is larger than {MAX_CONFIG_BYTES // 1024:,} KiB: not a queuetop config")


def _reason(exc: BaseException) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else first_line(exc)


def parse_config(data: dict, path: Path | None = None) -> Config:
    where = f"config {str(path)!r}" if path else "config"
    unknown = set(data) - {"probes", "queues", "keys", "sources", "targets", "dashboard"}
    if unknown:
        raise UsageError(f"{where}: unknown section(s) {_listed(unknown)}")
    probes = data.get("probes", {})
    if not isinstance(probes, dict):
        raise UsageError(f"{where}: [probes] must be a table")
    interval = probes.get("interval", DEFAULT_INTERVAL_S)
    window = probes.get("window", DEFAULT_WINDOW)
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not 0.1 <= interval <= 3600:  # true is no number
        raise UsageError(f"{where}: probes.interval must be a number of seconds between 0.1 and 3600")
    if not isinstance(window, int) or not 10 <= window <= 100_000:
        raise UsageError(f"{where}: probes.window must be an integer between 10 and 100000")
    raw_queues = data.get("queues", [])
    if not isinstance(raw_queues, list):
        raise UsageError(f"{where}: queues must be an array of tables ([[queues]])")
    queues = tuple(_declared_queue(entry, index, where) for index, entry in enumerate(raw_queues))
    names = [q.name for q in queues]
    if len(set(names)) != len(names):
        raise UsageError(f"{where}: queue names must be unique")
    keys = data.get("keys", {})
    if not isinstance(keys, dict) or not all(isinstance(k, str) and isinstance(v, str) and v and k.isprintable() and v.isprintable()
                                             for k, v in keys.items()):
        raise UsageError(f"{where}: [keys] maps binding ids to keys, e.g. pause = \"space\"")
    disabled, options = _sources(data.get("sources", {}), where)
    flight_minutes, flight_mb = _dashboard(data.get("dashboard", {}), where)
    return Config(interval_s=float(interval), window=window, queues=queues, keys=dict(keys), path=path,
                  disabled_sources=disabled, source_options=options, targets=_targets(data.get("targets", []), where),
                  flight_minutes=flight_minutes, flight_mb=flight_mb)


DASHBOARD_KEYS = {"flight_minutes": 1440, "flight_mb": 4096}  # each key's largest value


def _dashboard(section: object, where: str) -> tuple[float, float]:
    """[dashboard]: the flight recorder's bounds, each a number from 0 (off) to its largest."""
    if not isinstance(section, dict):
        raise UsageError(f"{where}: [dashboard] must be a table")
    unknown = set(section) - set(DASHBOARD_KEYS)
    if unknown:
        raise UsageError(f"{where}: [dashboard]: unknown key(s) {_listed(unknown)}; the keys are {', '.join(DASHBOARD_KEYS)}")
    values = []
    for key, high in DASHBOARD_KEYS.items():
        value = section.get(key, DEFAULT_FLIGHT_MINUTES if key == "flight_minutes" else DEFAULT_FLIGHT_MB)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= high:  # true is no number
            unit = "minutes" if key == "flight_minutes" else "megabytes"
            raise UsageError(f"{where}: dashboard.{key} must be a number of {unit} from 0 (off) to {high}")
        values.append(float(value))
    return values[0], values[1]


MAX_TARGETS = 16


def _listed(names: set[str]) -> str:
    """Names from the file, for an error: quoted where they hold anything unprintable (a key may)."""
    return ", ".join(name if name.isprintable() else repr(name) for name in sorted(names))


def _targets(entries: object, where: str) -> tuple[TargetSpec, ...]:
    """`[[targets]]`: each a name and one of dsn, dsn_env (an environment variable holding the
    DSN) or service (a libpq service); optionally `pgbouncer`, the DSN of its PgBouncer's admin
    console (the pooler probe)."""
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise UsageError(f"{where}: targets must be an array of tables ([[targets]])")
    if len(entries) > MAX_TARGETS:
        raise UsageError(f"{where}: at most {MAX_TARGETS} targets")
    targets = []
    for index, entry in enumerate(entries):
        unknown = set(entry) - {"name", "dsn", "dsn_env", "service", "pgbouncer", "pooler"}
        if unknown:
            raise UsageError(f"{where}: targets[{index}]: unknown key(s) {_listed(unknown)}")
        name = entry.get("name")
        if not isinstance(name, str) or not is_valid_name(name):
            raise UsageError(f"{where}: targets[{index}]: name is required (letters, digits, . _ -)")
        given = {key: entry[key] for key in ("dsn", "dsn_env", "service") if key in entry}
        if len(given) != 1 or not all(isinstance(v, str) and v.strip() for v in given.values()):
            raise UsageError(f"{where}: target {name!r}: give one of dsn, dsn_env or service, as a string")
        for key, value in given.items():
            if CONTROL.search(value):  # it would be printed in errors: one line, always
                raise UsageError(f"{where}: target {name!r}: {key} must be one line, without control characters")
        if "dsn_env" in given and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", given["dsn_env"]):
            raise UsageError(f"{where}: target {name!r}: dsn_env must name an environment variable")
        pgbouncer = entry.get("pgbouncer")
        if pgbouncer is not None and (not isinstance(pgbouncer, str) or not pgbouncer.strip() or CONTROL.search(pgbouncer)):
            raise UsageError(f"{where}: target {name!r}: pgbouncer must be the DSN of PgBouncer's admin console, one line")
        pooler = entry.get("pooler", "auto")
        if pooler not in POOLER_MODES:
            raise UsageError(f"{where}: target {name!r}: pooler must be one of {', '.join(POOLER_MODES)}")
        targets.append(TargetSpec(name=name, **{k: v.strip() for k, v in given.items()},
                                  pgbouncer=pgbouncer.strip() if pgbouncer is not None else None, pooler=pooler))
    names = [t.name for t in targets]
    if len(set(names)) != len(names):
        raise UsageError(f"{where}: target names must be unique")
    return tuple(targets)


def _sources(section: object, where: str) -> tuple[frozenset[str], dict[str, dict[str, object]]]:
    """`[sources]`: `disable = [names]`, and per source a table of options (`[sources.pgmq]
    schema = "pgmq"`)."""
    from .sources import source_classes

    known = source_classes()
    if not isinstance(section, dict):
        raise UsageError(f"{where}: [sources] must be a table")
    disable = section.get("disable", [])
    if not isinstance(disable, list) or not all(isinstance(n, str) for n in disable):
        raise UsageError(f"{where}: sources.disable must be a list of source names")
    options: dict[str, dict[str, object]] = {}
    for name in [*disable, *(k for k in section if k != "disable")]:
        if name not in known:
            raise UsageError(f"{where}: unknown source {name!r} (known: {', '.join(known)})")
    for name, value in section.items():
        if name == "disable":
            continue
        if not isinstance(value, dict):
            raise UsageError(f"{where}: [sources.{name}] must be a table of options")
        allowed = set(getattr(known[name], "options", ()))
        unknown = set(value) - allowed
        if unknown:
            raise UsageError(f"{where}: [sources.{name}]: unknown option(s) {_listed(unknown)}"
                             + (f" (it takes {', '.join(sorted(allowed))})" if allowed else " (it takes none)"))
        for key, option in value.items():
            if key != "schema" and isinstance(option, bool):  # a switch (pg-boss 9's enforce_singleton_queue_active_limit)
                continue
            if not isinstance(option, str) or not is_valid_name(option):
                raise UsageError(f"{where}: sources.{name}.{key} must be a name")
        options[name] = dict(value)
    return frozenset(disable), options


_KEYS = {
    "name", "table", "order_by", "age_column", "queue_column", "queue", "visible_at_column", "not_before_column",
    "state_column", "ready_states", "in_flight_states", "delayed_states", "done_states", "dead_states",
    "in_flight_when_not_null",
    "attempts_column", "max_attempts_column", "max_attempts", "dead_letter_table", "dead_letter_where",
    "created_column", "finished_column",
}
MAX_ORDER_COLUMNS = 8
MAX_FILTER_COLUMNS = 8
MAX_FILTER_VALUES = 100


def _declared_queue(entry: object, index: int, where: str) -> DeclaredQueue:
    if not isinstance(entry, dict):
        raise UsageError(f"{where}: queues[{index}] must be a table")
    unknown = set(entry) - _KEYS
    if unknown:
        raise UsageError(f"{where}: queues[{index}]: unknown key(s) {_listed(unknown)}")

    def text(key: str) -> str | None:
        value = entry.get(key)
        if value in (None, ""):
            return None
        if not isinstance(value, str) or len(value) > 200 or "\x00" in value:
            raise UsageError(f"{where}: queues[{index}]: {key} must be a string")
        return value

    def required(key: str) -> str:
        value = text(key)
        if value is None:
            raise UsageError(f"{where}: queues[{index}]: {key} is required")
        return value

    def states(key: str) -> tuple[str, ...]:
        value = entry.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise UsageError(f"{where}: queues[{index}]: {key} must be a list of strings")
        return tuple(value)

    def order_by() -> str | tuple[str, ...]:
        value = entry.get("order_by")
        if isinstance(value, list) or (value is not None and not isinstance(value, str)):
            if (not isinstance(value, list) or not value or len(value) > MAX_ORDER_COLUMNS
                    or not all(isinstance(v, str) and v.strip() and len(v) <= 200 and "\x00" not in v for v in value)):
                raise UsageError(f"{where}: queues[{index}]: order_by must be a column, or a list of 1 to {MAX_ORDER_COLUMNS}"
                                 ' columns each optionally followed by ASC or DESC, NULLS FIRST or LAST: ["priority DESC", "id"]')
            return tuple(value)
        return required("order_by")

    name = required("name")
    if not is_valid_name(name):
        raise UsageError(f"{where}: queues[{index}]: invalid name {name!r}")
    state_column = text("state_column")
    max_attempts = entry.get("max_attempts")
    if max_attempts is not None and (not isinstance(max_attempts, int) or isinstance(max_attempts, bool)
                                     or not 1 <= max_attempts <= 1_000_000):
        raise UsageError(f"{where}: queues[{index}]: max_attempts must be a whole number from 1 to 1000000")
    declared = DeclaredQueue(
        name=name,
        table=required("table"),
        order_by=order_by(),
        age_column=text("age_column"),
        queue_column=text("queue_column"),
        queue=text("queue"),
        visible_at_column=text("visible_at_column"),
        not_before_column=text("not_before_column"),
        state_column=state_column,
        ready_states=states("ready_states"),
        in_flight_states=states("in_flight_states"),
        delayed_states=states("delayed_states"),
        done_states=states("done_states"),
        dead_states=states("dead_states"),
        in_flight_when_not_null=text("in_flight_when_not_null"),
        attempts_column=text("attempts_column"),
        max_attempts_column=text("max_attempts_column"),
        max_attempts=max_attempts,
        dead_letter_table=text("dead_letter_table"),
        dead_letter_where=_filter(entry.get("dead_letter_where"), f"{where}: queues[{index}]: dead_letter_where"),
        created_column=text("created_column"),
        finished_column=text("finished_column"),
    )
    listed = [*declared.ready_states, *declared.in_flight_states, *declared.delayed_states, *declared.done_states,
              *declared.dead_states]
    if not state_column and listed:
        raise UsageError(f"{where}: queues[{index}]: states need a state_column")
    if state_column and not (declared.ready_states or declared.in_flight_states or declared.delayed_states
                             or declared.dead_states):
        raise UsageError(f"{where}: queues[{index}]: a state_column needs its states listed (ready_states, "
                         "in_flight_states, delayed_states, done_states, dead_states): each state is read through its index")
    if len(set(listed)) != len(listed):
        raise UsageError(f"{where}: queues[{index}]: a state is listed twice")
    if declared.queue is not None and declared.queue_column is None:
        raise UsageError(f"{where}: queues[{index}]: queue needs a queue_column")
    if (declared.max_attempts_column or max_attempts) and not declared.attempts_column:
        raise UsageError(f"{where}: queues[{index}]: max_attempts needs an attempts_column")
    if declared.max_attempts_column and max_attempts:
        raise UsageError(f"{where}: queues[{index}]: give max_attempts_column or max_attempts, not both")
    if declared.dead_letter_where and not declared.dead_letter_table:
        raise UsageError(f"{where}: queues[{index}]: dead_letter_where needs a dead_letter_table")
    return declared


def _filter(value: object, where: str) -> tuple[tuple[str, tuple[str | int | bool, ...]], ...]:
    """A structured row filter (`{ status = ["failed", "exception"], kind = "mail" }`): column ->
    a value or a list of values, strings, whole numbers or booleans, one kind per column. The
    columns are looked up in the catalog and quoted from it, the values bound as parameters: no
    text of the file is ever put into SQL."""
    if value is None or value == {}:  # (as an empty dead_letter_table is none)
        return ()
    if not isinstance(value, dict):
        raise UsageError(f"{where} must be a table of column = value or list of values (strings, whole numbers or"
                         ' booleans), e.g. { status = ["failed", "exception"] }')
    if len(value) > MAX_FILTER_COLUMNS:
        raise UsageError(f"{where}: at most {MAX_FILTER_COLUMNS} columns")
    out = []
    for column, given in value.items():
        if not column.strip() or len(column) > 200 or CONTROL.search(column):
            raise UsageError(f"{where}: {column!r} is not a column name")
        values = given if isinstance(given, list) else [given]
        if not values or len(values) > MAX_FILTER_VALUES or not all(isinstance(v, (str, int)) for v in values):
            raise UsageError(f"{where}: {column}: give a value or a list of 1 to {MAX_FILTER_VALUES} values"
                             " (strings, whole numbers or booleans)")
        kinds = {bool if isinstance(v, bool) else type(v) for v in values}
        if len(kinds) > 1:
            raise UsageError(f"{where}: {column}: its values must be all strings, all whole numbers or all booleans")
        if any(isinstance(v, str) and "\x00" in v for v in values):
            raise UsageError(f"{where}: {column}: a value holds a NUL character")
        out.append((column, tuple(values)))
    return tuple(out)
