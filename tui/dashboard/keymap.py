"""The dashboard's keys: one table, in the order the help screen lists them, put together from
each part's own bindings; which of them act on which panel (the footer shows those of the focused
panel, then the few that act everywhere); which apply here and now (the help lists only those);
and the config's [keys] table, checked against it before the dashboard opens."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from textual.binding import Binding, BindingType

from dbcore.errors import UsageError

from .actions import ENGINE_BINDINGS
from .hosts import HOST_BINDINGS
from .replay import RECORD_BINDINGS

# Cancel and terminate are the capitals C and K, as in pg_activity: j and k move the cursor, as
# in vim, less and htop, and a key meant to move must not end a session.
BACKEND_BINDINGS: list[BindingType] = [
    Binding("C", "signal(False)", "Cancel the selected session's query", id="backend.cancel", show=False),
    Binding("K", "signal(True)", "Terminate the selected session", id="backend.terminate", show=False),
]
# From a queue's verdict to the session it names, where C and K act on it: v, for verdict (g, the
# obvious "go to", puts on a ring). The details screen of a queue has the same binding (same id).
VERDICT_BINDINGS: list[BindingType] = [
    Binding("v", "goto_culprit", "Verdict: go to the selected queue's root blocker or xmin holder", id="verdict.goto",
            show=False),
]
CURSOR_BINDINGS: list[BindingType] = [
    Binding("j", "cursor_down", "Down, as ↓ (vim's j)", id="cursor.down", show=False),
    Binding("k", "cursor_up", "Up, as ↑ (vim's k)", id="cursor.up", show=False),
]

KEYS: list[BindingType] = [
    Binding("question_mark", "help", "This help: the keys that apply now", id="help", key_display="?"),
    Binding("p", "toggle_pause", "Pause / resume", id="pause"),
    Binding("r", "refresh_now", "Refresh now", id="refresh", show=False),
    Binding("plus", "interval(1)", "Refresh less often", id="interval.slower", key_display="+", show=False),
    Binding("minus", "interval(-1)", "Refresh more often", id="interval.faster", key_display="-", show=False),
    Binding("slash", "filter", "Filter the focused panel: words, or fields (app: user: db: state: query: pid: dur>5s)",
            id="filter", key_display="/"),
    Binding("greater_than_sign", "sort", "Sort the focused panel (the next order)", id="sort", key_display=">",
            show=False),
    Binding("z", "zoom", "Zoom the focused panel (Esc: back)", id="zoom"),
    Binding("m", "notices", "Notices: every message so far", id="notices"),
    *CURSOR_BINDINGS,
    *BACKEND_BINDINGS,
    *VERDICT_BINDINGS,
    Binding("a", "sessions_idle", "Idle sessions: hide/show", id="sessions.idle", show=False),
    Binding("A", "sessions_all", "Sessions: show/hide the server's background processes and queuetop's own sessions",
            id="sessions.all", show=False),
    # Tags, as pg_activity's Space: C and K in the Sessions panel then act on every tagged session.
    Binding("space", "tag", "Sessions: tag / untag the selected session (C, K then act on every tagged one)",
            id="sessions.tag", key_display="Space", show=False),
    Binding("T", "untag", "Sessions: untag every session", id="sessions.untag", show=False),
    Binding("q", "quit", "Quit", id="quit"),
    # Taking things away (export.py): y as in pg_activity, e as Dolphie's E.
    Binding("y", "copy", "Copy to the clipboard (OSC 52): the selected session's whole query, or the row's name",
            id="copy", show=False),
    Binding("e", "export", "Export the focused table as CSV: every row it lists, values whole (the file in a notice)",
            id="export", show=False),
    *RECORD_BINDINGS,
    *HOST_BINDINGS,
    *ENGINE_BINDINGS,
]

# The panels, by id, and the keys that act on each: on its selected row, on its order or zoom,
# or, for the engine's keys (which act on the whole host, whatever has focus), where their
# effect shows. The footer shows the focused panel's, in this order, then FOOTER_GLOBAL; every
# key still works where it acts, shown or not. "details" is Enter (the tables' own key).
PANEL_KEYS: dict[str, tuple[str, ...]] = {
    "queues": ("details", "verdict.goto", "filter", "sort", "zoom", "engine.producer.start", "engine.consumers.start", "engine.burst",
               "engine.blocker", "copy", "export"),
    "locks": ("details", "backend.cancel", "backend.terminate", "filter", "zoom", "copy", "export"),
    "sessions": ("details", "backend.cancel", "backend.terminate", "sessions.idle", "sessions.all", "sort", "filter", "zoom",
                 "sessions.tag", "sessions.untag", "copy", "export"),
    "connections": ("backend.cancel", "backend.terminate", "sort", "filter", "zoom", "copy", "export"),
    "rings": ("engine.ring.put", "engine.ring.take", "filter", "zoom", "copy", "export"),
    "leases": ("engine.lease.take", "engine.lease.release", "engine.relays.start", "engine.relays.kill", "filter", "zoom", "copy",
               "export"),
    "compaction": ("engine.compact", "engine.scenario.start", "filter", "zoom"),
    "replication": ("filter", "zoom"),
    "pooler": ("filter", "zoom"),
}
FOOTER_GLOBAL = ("host.next", "replay.step", "replay.seek", "help", "pause", "notices", "quit")
DETAILS = ("enter", "Details")  # the footer's Enter: the key, its label

# The footer's words for a key (the help says more: the binding's description).
FOOTER_LABELS: dict[str, str] = {
    "help": "Help", "pause": "Pause", "notices": "Notices", "quit": "Quit", "filter": "Filter", "sort": "Sort",
    "zoom": "Zoom", "backend.cancel": "Cancel", "backend.terminate": "Terminate", "sessions.idle": "Idle", "sessions.all": "All",
    "sessions.tag": "Tag", "sessions.untag": "Untag",
    "host.next": "Next host", "replay.step": "Step", "replay.seek": "Go to",
    "engine.producer.start": "Produce", "engine.consumers.start": "Consume", "engine.burst": "Burst",
    "engine.blocker": "Blocker", "engine.ring.put": "Put", "engine.ring.take": "Take", "engine.lease.take": "Take",
    "engine.lease.release": "Release", "engine.relays.start": "Relays", "engine.relays.kill": "Kill leader",
    "engine.compact": "Compact", "engine.scenario.start": "Scenario", "verdict.goto": "Culprit",
    "copy": "Copy", "export": "Export",
}


@dataclass(frozen=True, kw_only=True)
class KeyContext:
    """What decides whether a key applies now: the footer and the help are built from it."""

    hosts: int  # how many databases (tabs)
    replay: bool  # a recording, with no database behind it
    engine: bool  # the shown host's engine controls are on
    backend: bool  # a database behind the shown host, to cancel or terminate a session on
    read_only: bool
    # The Queues panel's selected queue has a verdict that names a session to go to (`v`): its
    # root blocker, its xmin holder. The footer shows `v` only then; the help always lists it.
    culprit: bool = False


def applies(binding_id: str, context: KeyContext) -> bool:
    """Whether a key does something here and now (rather than say why it does not): host keys with
    several hosts, replay keys in a replay, engine keys when the engine's controls are on, ..."""
    group = binding_id.split(".")[0]
    if group == "host" or binding_id == "hosts":
        return context.hosts > 1
    if group == "replay":
        return context.replay
    if binding_id in ("record", "refresh"):
        return not context.replay
    if group == "engine":
        return context.engine and not context.read_only
    if group == "backend":
        return context.backend and not context.read_only
    return True


def footer_ids(panel: str | None, context: KeyContext) -> list[str]:
    """The binding ids the footer shows, in order: the focused panel's that apply now, then the
    global ones that do ("details": Enter; `v` only where the selected queue's verdict names a
    session to go to)."""
    return [i for i in (*PANEL_KEYS.get(panel or "", ()), *FOOTER_GLOBAL)
            if i == "details" or (applies(i, context) and (i != "verdict.goto" or context.culprit))]


def footer_rank(binding_id: str, panel: str | None) -> int:
    """Which keys the footer keeps when it is too narrow for all (the lowest rank first): help (it
    lists the rest), then the host and replay keys, then the panel's in their order, then quit,
    pause and the notices; copy and export last (the help lists them)."""
    keep = ("help", "host.next", "replay.step", "replay.seek", *(i for i in PANEL_KEYS.get(panel or "", ()) if i not in TAKE_AWAY),
            "quit", "pause", "notices", *TAKE_AWAY)
    return keep.index(binding_id) if binding_id in keep else len(keep)


TAKE_AWAY = ("copy", "export")  # y and e: in every table's footer where there is room, after quit


def panel_of(widget) -> str | None:
    """The id of the panel `widget` is in (a table, a tree), if any."""
    return next((node.id for node in (widget.ancestors_with_self if widget is not None else ()) if node.id in PANEL_KEYS),
                None)


def bindings_by_id() -> dict[str, Binding]:
    """Every binding, by the id the config's [keys] table remaps it by."""
    return {b.id: b for b in KEYS if isinstance(b, Binding) and b.id}


def help_keys(key_for: Callable[[str], str], context: KeyContext, engine_off: str | None = None) -> list[tuple[str, str, str]]:
    """The help screen's lines: (key, what it does, binding id), the keys as remapped; only the
    keys that apply now (`applies`), with a line for why the engine's are not listed."""
    keys = []
    for binding in KEYS:
        assert isinstance(binding, Binding)
        binding_id = binding.id or ""
        if not applies(binding_id, context):
            continue
        description = binding.description
        if context.replay and binding_id.startswith("interval."):  # + and - change a recording's speed
            description = "Replay faster" if binding_id == "interval.slower" else "Replay slower"
        keys.append((key_for(binding_id), description, binding_id))
    if not (context.engine and not context.read_only):
        why = ("queuetop runs with --read-only" if context.read_only else
               engine_off or ("a recording has no database behind it" if context.replay else "no database"))
        keys.append(("", f"Engine keys (n, w, b, g, l, o, s, u, ...): off: {why}", ""))
    keys.append(("Tab / Shift-Tab", "move between panels", ""))
    keys.append(("j k, C K", "j and k move, as in vim; cancel and terminate are C and K, as in pg_activity", ""))
    keys.append(("Enter", "details: a queue's head and dead letters, a session's query and locks (Esc, q or Enter closes)", ""))
    keys.append(("Ctrl-P", "command palette: every action by name", ""))
    return keys


MODIFIERS = {"ctrl", "shift", "alt", "meta", "super", "hyper"}


def _key_is_possible(key: str) -> bool:
    """A key Textual can report: modifiers + a named key (escape, f5, space, up, ...) or a
    character (a, greater_than_sign, ...)."""
    from textual.keys import Keys, key_to_character

    *modifiers, base = key.split("+")
    if not base or any(m not in MODIFIERS for m in modifiers):
        return False
    return base in {k.value for k in Keys} or key_to_character(base) is not None


def check_keymap(keymap: dict[str, str]) -> None:
    """The config's [keys] table, refused whole (UsageError, exit 2) unless every binding id
    exists, every key is one a terminal can send, and no key ends up on two bindings (one of
    them would be unreachable)."""
    bindings = bindings_by_id()
    unknown = sorted(set(keymap) - set(bindings))
    if unknown:
        raise UsageError(f"config [keys]: unknown binding id(s) {', '.join(unknown)}; the ids are {', '.join(bindings)} "
                         "(? in the dashboard lists those that apply there)")
    for binding_id, keys in keymap.items():
        bad = [k for k in keys.split(",") if not _key_is_possible(k.strip())]
        if bad:
            raise UsageError(f"config [keys]: {binding_id} = {keys!r}: no such key {bad[0].strip()!r} "
                             "(e.g. \"space\", \"ctrl+r\", \"f5\", \"x\")")
    owner: dict[str, str] = {}
    for binding_id, binding in bindings.items():
        for key in (keymap.get(binding_id) or binding.key).split(","):
            key = key.strip()
            if key in owner:
                raise UsageError(f"config [keys]: key {key!r} would run both {owner[key]} and {binding_id}")
            owner[key] = binding_id
