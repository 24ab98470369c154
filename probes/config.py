"""The user's configuration: queue tables the operator already has, declared in TOML.

    # ~/.config/queuetop/config.toml (or --config FILE)
    [keys]                    # remap dashboard keys by binding id (see `?` in the dashboard)
    pause = "space"

    [probes]
    interval = 2.0            # seconds between samples
    window = 1000             # rows read from a queue's head; above it depth is an estimate

    [[queues]]
    name = "messages"         # shown in the dashboard
    table = "public.messages" # as you would write it in SQL; resolved through the catalog
    order_by = "id"           # the dequeue order (should lead an index)
    age_column = "inserted"   # optional: timestamp for the oldest ready age
    visible_at_column = ""    # optional: rows with a future value are in flight (claimed)
    state_column = ""         # optional, with the states below
    ready_states = []         # e.g. ["new"]; empty = every row not in flight or dead
    in_flight_states = []     # e.g. ["processing"]
    dead_states = []          # e.g. ["failed"]

Column and table names are never put into SQL as text: the probe looks them up in the catalog
and quotes the catalog's names.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from platformdirs import user_config_dir

from dbcore.errors import UsageError
from dbcore.names import is_valid_name

ENV_CONFIG = "QUEUETOP_CONFIG"
DEFAULT_INTERVAL_S = 2.0
DEFAULT_WINDOW = 1000


@dataclass(frozen=True, slots=True, kw_only=True)
class DeclaredQueue:
    name: str
    table: str
    order_by: str
    age_column: str | None = None
    visible_at_column: str | None = None
    state_column: str | None = None
    ready_states: tuple[str, ...] = ()
    in_flight_states: tuple[str, ...] = ()
    dead_states: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    interval_s: float = DEFAULT_INTERVAL_S
    window: int = DEFAULT_WINDOW
    queues: tuple[DeclaredQueue, ...] = field(default_factory=tuple)
    keys: dict[str, str] = field(default_factory=dict)  # dashboard binding id -> key(s)
    path: Path | None = None


def default_config_path() -> Path:
    return Path(user_config_dir("queuetop")) / "config.toml"


def load_config(path: str | Path | None = None) -> Config:
    """Read the config; a missing default file is an empty config, a missing explicit file or a
    malformed one is a usage error (exit 2)."""
    file = Path(path) if path is not None else default_config_path()
    if not file.exists():
        if path is not None:
            raise UsageError(f"config file {str(file)!r} not found")
        return Config()
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read config {str(file)!r}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"malformed config {str(file)!r}: {exc}") from None
    return parse_config(data, file)


def parse_config(data: dict, path: Path | None = None) -> Config:
    where = f"config {str(path)!r}" if path else "config"
    unknown = set(data) - {"probes", "queues", "keys"}
    if unknown:
        raise UsageError(f"{where}: unknown section(s) {', '.join(sorted(unknown))}")
    probes = data.get("probes", {})
    if not isinstance(probes, dict):
        raise UsageError(f"{where}: [probes] must be a table")
    interval = probes.get("interval", DEFAULT_INTERVAL_S)
    window = probes.get("window", DEFAULT_WINDOW)
    if not isinstance(interval, (int, float)) or not 0.1 <= interval <= 3600:
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
    if not isinstance(keys, dict) or not all(isinstance(k, str) and isinstance(v, str) and v for k, v in keys.items()):
        raise UsageError(f"{where}: [keys] maps binding ids to keys, e.g. pause = \"space\"")
    return Config(interval_s=float(interval), window=window, queues=queues, keys=dict(keys), path=path)


_KEYS = {
    "name", "table", "order_by", "age_column", "visible_at_column", "state_column",
    "ready_states", "in_flight_states", "dead_states",
}


def _declared_queue(entry: object, index: int, where: str) -> DeclaredQueue:
    if not isinstance(entry, dict):
        raise UsageError(f"{where}: queues[{index}] must be a table")
    unknown = set(entry) - _KEYS
    if unknown:
        raise UsageError(f"{where}: queues[{index}]: unknown key(s) {', '.join(sorted(unknown))}")

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

    name = required("name")
    if not is_valid_name(name):
        raise UsageError(f"{where}: queues[{index}]: invalid name {name!r}")
    state_column = text("state_column")
    declared = DeclaredQueue(
        name=name,
        table=required("table"),
        order_by=required("order_by"),
        age_column=text("age_column"),
        visible_at_column=text("visible_at_column"),
        state_column=state_column,
        ready_states=states("ready_states"),
        in_flight_states=states("in_flight_states"),
        dead_states=states("dead_states"),
    )
    if not state_column and (declared.ready_states or declared.in_flight_states or declared.dead_states):
        raise UsageError(f"{where}: queues[{index}]: states need a state_column")
    return declared
