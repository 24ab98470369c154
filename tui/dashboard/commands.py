"""The command palette (Ctrl-P): every action, listed as soon as it opens and searchable by name.
It knows the app only as `PaletteActions` (the actions it offers and the keys they are on)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Protocol, runtime_checkable

from textual.command import DiscoveryHit, Hit, Hits, Provider

from .engine_actions import ENGINE_ACTIONS


@runtime_checkable
class PaletteActions(Protocol):
    def key_for(self, binding_id: str) -> str: ...
    def action_engine(self, binding_id: str) -> None: ...
    def action_toggle_pause(self) -> None: ...
    def action_refresh_now(self) -> None: ...
    def action_signal(self, terminate: bool) -> None: ...
    def action_goto_culprit(self) -> None: ...
    def action_zoom(self) -> None: ...
    def action_notices(self) -> None: ...
    def action_sort(self) -> None: ...
    def action_help(self) -> None: ...
    def action_stop_all(self) -> None: ...
    def action_reset_demo(self) -> None: ...


def palette_commands(app: PaletteActions) -> list[tuple[str, Callable[[], object], str]]:
    """(title, what it runs, help) for each command, in the palette's order."""
    key = app.key_for
    commands: list[tuple[str, Callable[[], object], str]] = [
        (title, partial(app.action_engine, binding_id), f"engine · key {key(f'engine.{binding_id}')}")
        for binding_id, _key, title, _placeholder, _default in ENGINE_ACTIONS
    ]
    commands += [
        ("Pause / resume", app.action_toggle_pause, f"key {key('pause')}"),
        ("Refresh now", app.action_refresh_now, f"key {key('refresh')}"),
        ("Cancel the selected backend", partial(app.action_signal, False), f"key {key('backend.cancel')}"),
        ("Terminate the selected backend", partial(app.action_signal, True), f"key {key('backend.terminate')}"),
        ("Go to the selected queue's root blocker or xmin holder", app.action_goto_culprit, f"key {key('verdict.goto')}"),
        ("Zoom the focused panel", app.action_zoom, f"key {key('zoom')}"),
        ("Notices", app.action_notices, f"key {key('notices')}"),
        ("Sort the focused panel (Queues or Connections)", app.action_sort, f"key {key('sort')}"),
        ("Help", app.action_help, f"key {key('help')}"),
        ("Stop everything the dashboard started", app.action_stop_all, "no key"),
        ("Reset the demo (remove what the demo and the prompts made)", app.action_reset_demo, "no key"),
    ]
    return commands


class EngineCommands(Provider):
    """The command palette: every action, listed as soon as Ctrl-P opens and searchable by name."""

    def _commands(self) -> list[tuple[str, Callable[[], object], str]]:
        app = self.app
        assert isinstance(app, PaletteActions)
        return palette_commands(app)

    async def discover(self) -> Hits:
        for title, action, help_text in self._commands():
            yield DiscoveryHit(title, action, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, action, help_text in self._commands():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), action, help=help_text)
