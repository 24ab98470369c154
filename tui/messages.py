"""Messages the app's parts exchange. A snapshot is posted from its host's sampler's thread
(`post_message` is thread-safe); a newer one replaces an older one of the same host still
waiting in the queue, never another host's."""

from __future__ import annotations

from textual.message import Message

from probes.model import Snapshot


class SnapshotArrived(Message):
    def __init__(self, snapshot: Snapshot, host: int = 0) -> None:
        super().__init__()
        self.snapshot = snapshot
        self.host = host  # the index of the host (tab) it is of

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, SnapshotArrived) and message.host == self.host


class NoticeFromThread(Message):
    """A notice from a thread that must not wait on the event loop (a sampler's: quit waits for it)."""

    def __init__(self, text: str, severity: str = "information") -> None:
        super().__init__()
        self.text = text
        self.severity = severity


class ActivityEnded(Message):
    """Something the dashboard started in the background (the contention scenario) has ended;
    posted from its thread, which must never wait on the event loop (quit joins that thread)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text
