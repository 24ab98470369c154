"""An engine queue's details (Enter on its row): its head and its dead letters, which `r` puts
back in the queue and `d` purges, each after a confirmation that says how many and what happens.
Where the dashboard may not write (--read-only, no engine controls) the keys are not offered."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from textual.binding import Binding, BindingType

from .details import DetailsScreen
from .dialogs import ConfirmScreen

QUESTIONS = {
    "retry": ("Retry the {n} dead letter(s) of queue {queue!r}? Each goes back in the queue as a new message (its attempts "
              "start again at 0) and leaves the dead letters, in one transaction."),
    "purge": ("Purge the {n} dead letter(s) of queue {queue!r}? They are deleted for good, with their bodies and errors; "
              "the queue's messages stay."),
}


class EngineQueueDetails(DetailsScreen):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "dead_letters('retry')", "Retry the dead letters", id="details.retry"),
        Binding("d", "dead_letters('purge')", "Purge the dead letters", id="details.purge"),
    ]
    CLOSE_HINT = "r retry the dead letters · d purge them · Esc, q or Enter closes"

    def __init__(self, title: str, loader, *, queue: str, dead: Callable[[], int | None],
                 act: Callable[[str, Callable[[], None]], None] | None, goto: Callable[[], None] | None = None,
                 jobs: Callable[[], None] | None = None) -> None:
        """`dead()`: how many dead letters the last sample counted; `act(what, then)` retries or
        purges them off the event loop and calls `then` (from its thread) when done; None: the
        dashboard may not write here. `goto`: the verdict's key (DetailsScreen)."""
        super().__init__(title, loader, goto=goto, jobs=jobs)
        self.queue = queue
        self._dead = dead
        self._act = act
        if act is None:  # (DetailsScreen has put `J jobs` first where the queue has a job console)
            self.CLOSE_HINT = DetailsScreen.CLOSE_HINT if jobs is None else f"J jobs · {DetailsScreen.CLOSE_HINT}"

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "dead_letters":
            return self._act is not None
        return super().check_action(action, parameters)

    def action_dead_letters(self, what: str) -> None:
        if self._act is None:
            return
        count = self._dead()
        if not count:
            self.app.notify(f"queue {self.queue!r} has no dead letters", severity="warning", timeout=4)
            return
        act = self._act

        def decided(yes: bool | None) -> None:
            if yes:
                act(what, lambda: self.app.call_from_thread(self.reload))

        self.app.push_screen(ConfirmScreen(QUESTIONS[what].format(n=f"{count:,}", queue=self.queue)), decided)

    def reload(self) -> None:
        """Fetch the head and the dead letters again (after a retry or a purge)."""
        if self.is_attached:
            self.run_worker(self._load, thread=True, exclusive=True)
