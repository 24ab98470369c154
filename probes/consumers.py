"""A queue's consumers: the sessions that work on it, found in what a snapshot already holds.

The consumers of a queue are the sessions the probe saw holding or awaiting a lock on its table
(the queues probe: `Consumer.evidence == "lock"`) unless their statement takes no messages (the
blocker that LOCKed the table, a producer's INSERT, a report's SELECT), the sessions whose current or last statement
takes messages from it (names its table in an UPDATE, a DELETE, a FOR UPDATE or SKIP LOCKED
select, or calls its library's fetch function: "query"), and the idle workers waiting on its
library's notifications (a LISTEN on its channel: "listen"). queuetop's own sessions are never
consumers.

A table several queues share (Procrastinate's, River's, Graphile Worker's, pg-boss's parent
table, a job table's groups) does not say which queue a session on it serves: such a consumer is
`shared`. Its wait holds up a queue (`blocked`) only if that queue has ready messages (a lock on
the table itself holds up every queue in it), and it does not
count as serving a queue whose messages nobody works (none in flight, nothing taken) while its
oldest ready message outlives the samples and a worker's poll (SHARED_IDLE_S): `no-consumers`,
"the sessions on its shared table serve other queues". A LISTEN on a queue's own channel ties
a worker to that queue alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

from .model import BlockedSession, Consumer, QueueSample, SessionSample
from .session import APPLICATION_NAME

# A statement that takes or finishes messages (a library's fetch, an engine's claim or ack), as
# opposed to one that only adds them (INSERT, COPY) or reads them (a monitoring count).
TAKES = re.compile(r"\b(update|delete)\b|\bfor\s+(no\s+key\s+)?update\b|\bskip\s+locked\b|(fetch|finish|retry)_job|\bget_jobs?\s*\(",
                   re.IGNORECASE)


def table_name(table: str) -> str:
    """The bare table name of a queue's `schema.table` as the probes quote it (`"q_a.b"` → q_a.b)."""
    parts = re.findall(r'"((?:[^"]|"")*)"|([^."]+)', table)
    if not parts:
        return table
    quoted, bare = parts[-1]
    return quoted.replace('""', '"') if quoted else bare.strip()


def names_table(query: str | None, table: str) -> bool:
    """Whether a statement names the table (as a whole word: `jobs` is not `jobs_archive`)."""
    if not query or not table:
        return False
    lowered, name = query.lower(), table.lower()
    start = lowered.find(name)
    while start >= 0:
        before = lowered[start - 1] if start else " "
        end = start + len(name)
        after = lowered[end] if end < len(lowered) else " "
        if not (before.isalnum() or before == "_") and not (after.isalnum() or after == "_"):
            return True
        start = lowered.find(name, start + 1)
    return False


def takes_messages(query: str | None) -> bool:
    return bool(query) and TAKES.search(query or "") is not None


def _ours(session: SessionSample) -> bool:
    return (session.application or "").startswith(APPLICATION_NAME)


# The channels a library's idle workers LISTEN on, by source: one for every queue, and the prefix
# of a queue's own (Procrastinate: `procrastinate_any_queue_v1`, `procrastinate_queue_v1#mail`).
LISTENS: dict[str, tuple[str, str | None]] = {
    "procrastinate": ("procrastinate_any_queue_v1", "procrastinate_queue_v1#"),
    "pgqueuer": ("ch_pgqueuer", None),  # its QueueManager's channel (DBSettings.channel), every entrypoint's
}  # (the engine's listeners share one channel for every queue: its workers are found by their claims)
# The functions a library's workers fetch jobs with, by source: a call takes from its table even
# though the statement does not name it.
FETCHES: dict[str, re.Pattern[str]] = {
    "procrastinate": re.compile(r"\bprocrastinate_(fetch|finish|retry)_job", re.IGNORECASE),
    "graphile-worker": re.compile(r"\bget_jobs?\s*\(", re.IGNORECASE),
}
LISTEN = re.compile(r'^\s*listen\s+("(?:[^"]|"")+"|[^\s;]+)\s*;?\s*$', re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Candidates:
    """The sessions of one snapshot that may consume a queue, sorted once for every queue: those
    whose statement takes messages, and those that LISTEN (by channel)."""

    takers: tuple[SessionSample, ...]
    listeners: dict[str, tuple[SessionSample, ...]]
    others: frozenset[int]  # listed sessions whose statement takes no messages (a producer, a reader, a LOCK)

    @classmethod
    def of(cls, sessions: Iterable[SessionSample]) -> Candidates:
        takers: list[SessionSample] = []
        listeners: dict[str, list[SessionSample]] = {}
        others: list[int] = []
        for s in sessions:
            if s.query and takes_messages(s.query):
                if not _ours(s) and s.backend_type in (None, "client backend"):
                    takers.append(s)
                continue
            if not s.query:
                continue  # its statement unknown (hidden by privileges): what its locks say stands
            others.append(s.pid)
            if (m := LISTEN.match(s.query)) is not None and not _ours(s):
                channel = m.group(1)
                channel = channel[1:-1].replace('""', '"') if channel.startswith('"') else channel.lower()
                listeners.setdefault(channel, []).append(s)
        return cls(tuple(takers), {k: tuple(v) for k, v in listeners.items()}, frozenset(others))


def consumers_of(queue: QueueSample, sessions: Iterable[SessionSample] | Candidates, blocked: dict[int, BlockedSession],
                 shared_table: bool = False) -> tuple[Consumer, ...]:
    """The queue's consumers: those the probe saw on its table's locks, the client sessions whose
    statement takes messages from its table, and those waiting on its library's notifications;
    each marked waiting when the lock tree has it, and `shared` when what ties it to the queue is
    shared by other queues too (`shared_table`: several queues in one table)."""
    candidates = sessions if isinstance(sessions, Candidates) else Candidates.of(sessions)
    table = table_name(queue.table)
    # On the table's locks, a session whose statement takes no messages is no consumer: the
    # blocker that LOCKed it, a producer's INSERT, a report's SELECT.
    found: dict[int, Consumer] = {c.pid: c for c in queue.consumers or () if c.pid not in candidates.others}
    fetch = FETCHES.get(queue.source)
    for s in candidates.takers:
        if s.pid not in found and (names_table(s.query, table) or (fetch is not None and fetch.search(s.query or ""))):
            found[s.pid] = Consumer(pid=s.pid, state=s.state, application=s.application, for_s=s.query_age_s,
                                    evidence="query", shared=shared_table)
    every, own = LISTENS.get(queue.source, (None, None))
    for channel, shared in ((every, True), (f"{own}{queue.name}" if own else None, False)):
        for s in candidates.listeners.get(channel or "", ()):
            if s.pid not in found:
                found[s.pid] = Consumer(pid=s.pid, state=s.state, application=s.application, for_s=s.query_age_s,
                                        evidence="listen", shared=shared)
    return tuple(replace(c, waiting=c.waiting or c.pid in blocked) for c in sorted(found.values(), key=lambda c: c.pid))
