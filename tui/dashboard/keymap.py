"""The dashboard's keys: one table, in the order the footer and the help screen list them, put
together from each part's own bindings; and the config's [keys] table, checked against it before
the dashboard opens."""

from __future__ import annotations

from collections.abc import Callable

from textual.binding import Binding, BindingType

from dbcore.errors import UsageError

from .actions import ENGINE_BINDINGS, SIGNAL_BINDINGS
from .hosts import HOST_BINDINGS
from .replay import RECORD_BINDINGS

KEYS: list[BindingType] = [
    Binding("question_mark", "help", "Help", id="help", key_display="?"),
    Binding("p", "toggle_pause", "Pause", id="pause"),
    Binding("r", "refresh_now", "Refresh", id="refresh", show=False),
    Binding("plus", "interval(1)", "Slower", id="interval.slower", key_display="+", show=False),
    Binding("minus", "interval(-1)", "Faster", id="interval.faster", key_display="-", show=False),
    Binding("slash", "filter", "Filter", id="filter", key_display="/"),
    Binding("greater_than_sign", "sort", "Sort the focused panel", id="sort", key_display=">", show=False),
    Binding("z", "zoom", "Zoom", id="zoom"),
    Binding("m", "notices", "Notices", id="notices"),
    *SIGNAL_BINDINGS,
    Binding("q", "quit", "Quit", id="quit"),
    *RECORD_BINDINGS,
    *HOST_BINDINGS,
    *ENGINE_BINDINGS,
]


def bindings_by_id() -> dict[str, Binding]:
    """Every binding, by the id the config's [keys] table remaps it by."""
    return {b.id: b for b in KEYS if isinstance(b, Binding) and b.id}


def help_keys(key_for: Callable[[str], str]) -> list[tuple[str, str, str]]:
    """The help screen's lines: (key, what it does, binding id), the keys as remapped."""
    keys = []
    for binding in KEYS:
        assert isinstance(binding, Binding)
        keys.append((key_for(binding.id or ""), binding.description, binding.id or ""))
    keys.append(("Tab / Shift-Tab", "move between panels", ""))
    keys.append(("Enter", "details: a queue's head and dead letters, a session's query and locks", ""))
    keys.append(("Ctrl-P", "command palette", ""))
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
        raise UsageError(f"config [keys]: unknown binding id(s) {', '.join(unknown)}; the ids are listed by ? in the dashboard")
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
