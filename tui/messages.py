"""Messages the app's parts exchange. A snapshot is posted from the sampler's thread
(`post_message` is thread-safe); a newer one replaces an older one still waiting in the queue."""

from __future__ import annotations

from textual.message import Message

from probes.model import Snapshot


class SnapshotArrived(Message):
    def __init__(self, snapshot: Snapshot) -> None:
        super().__init__()
        self.snapshot = snapshot

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, SnapshotArrived)


class ActivityEnded(Message):
    """Something the dashboard started in the background (the contention scenario) has ended;
    posted from its thread, which must never wait on the event loop (quit joins that thread)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text
