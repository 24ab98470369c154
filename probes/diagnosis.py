"""Why a queue backs up: one verdict per queue, from what a snapshot already holds (the queue's
figures, the sessions working on its table, the lock tree, the xmin horizon), judged over the
samples of a window, never on one sample alone.

The verdicts, the first that holds wins:

- `blocked`: a consumer of the queue waits for a lock; the reason names the root blocker (pid,
  state, application, how long its transaction has been open), from the lock tree.
- `no-consumers`: ready messages wait, and nobody has worked the queue's table (no consumer
  session, nothing dequeued) in two samples running.
- `failing`: messages went dead faster than they completed over the window.
- `bloat`: the table's dead tuples grow past autovacuum's threshold while the xmin horizon is
  held (the holder named: a session, a prepared transaction or a replication slot), or while
  autovacuum has not run for a while.
- `saturated`: consumers are at work, none waits, and the backlog grows: arrivals above
  completions, over the window.
- `healthy` otherwise (an empty queue included).

The consumers of a queue are the sessions the probe saw holding or awaiting a lock on its table
(the queues probe: `Consumer.evidence == "lock"`) unless their statement takes no messages (the
blocker that LOCKed the table, a producer's INSERT, a report's SELECT), the sessions whose current or last statement
takes messages from it (names its table in an UPDATE, a DELETE, a FOR UPDATE or SKIP LOCKED
select, or calls its library's fetch function: "query"), and the idle workers waiting on its
library's notifications (a LISTEN on its channel: "listen"). queuetop's own sessions are never
consumers.

A table several queues share (Procrastinate's, River's, Graphile Worker's, pg-boss's parent
table, a job table's groups) does not say which queue a session on it serves: such a consumer is
`shared`. It holds up a queue (`blocked`) only if that queue has ready messages, and it does not
count as serving a queue whose messages nobody works (none in flight, nothing taken) while its
oldest ready message outlives the samples and a worker's poll (SHARED_IDLE_S): `no-consumers`,
"the sessions on its shared table serve other queues". A LISTEN on a queue's own channel ties
a worker to that queue alone.

Nothing here reads the database: the `Diagnoser` keeps each queue's last samples (a dashboard's
or a `snapshot --rates` run's) and returns the snapshot with its queues' `consumers` and
`diagnosis` filled in.
"""

from __future__ import annotations

import re
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from itertools import pairwise

from .model import BlockedSession, Consumer, Diagnosis, QueueSample, SessionSample, Snapshot
from .session import APPLICATION_NAME

CODES = ("healthy", "blocked", "no-consumers", "failing", "bloat", "saturated")

WINDOW_S = 60.0  # how far back the growth of a backlog, of dead letters and of dead tuples is judged
MIN_WINDOW_S = 0.5  # two samples closer than this are one instant: not yet a window (a 1 s refresh jitters below 1 s)
MIN_WAIT_S = 2.0  # in a single sample, a consumer waiting this long for a lock is blocked
SATURATED_MIN_S = 10.0  # a backlog grows for at least this long (and 3 samples) before it is "saturated"
SATURATED_MIN_GROWTH = 10  # by at least this many messages (and a tenth of what it was)
REINSERTS_FAILED = frozenset({"pg-boss"})  # sources whose fail deletes the job and inserts it back
SHARED_IDLE_S = 10.0  # on a shared table, a ready message this old with nothing taken from its queue: no consumer of it
HORIZON_HELD_S = 30.0  # an xmin horizon held this long by one transaction is "held"
AUTOVACUUM_LATE_S = 300.0  # above its threshold, a table autovacuum has not reached in this long

# A statement that takes or finishes messages (a library's fetch, an engine's claim or ack), as
# opposed to one that only adds them (INSERT, COPY) or reads them (a monitoring count).
TAKES = re.compile(r"\b(update|delete)\b|\bfor\s+(no\s+key\s+)?update\b|\bskip\s+locked\b|(fetch|finish|retry)_job|\bget_jobs?\s*\(",
                   re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class _Point:
    """What a verdict needs of one sample of a queue."""

    at: datetime
    depth: int | None
    ready: int | None
    dead: int | None
    dequeued_total: int | None
    enqueued_total: int | None
    dead_tuples: int | None
    in_flight: int | None
    consumers: int
    own: int  # consumers tied to this queue alone (not only to a table or channel other queues share)
    working: int  # consumers running a statement, not waiting for a lock
    waiting: int  # consumers waiting for a lock


@dataclass(frozen=True, slots=True)
class _Case:
    """What every verdict looks at: the queue, its consumers, its samples in the window."""

    q: QueueSample
    consumers: tuple[Consumer, ...]
    points: list[_Point]
    window: bool  # two samples at least MIN_WINDOW_S apart
    snapshot: Snapshot
    blocked: dict[int, BlockedSession]
    over_threshold_since: datetime | None = None  # since when its dead tuples are over autovacuum's threshold
    was: str | None = None  # the verdict at the sample before


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
}  # (the engine's listeners share one channel for every queue: its workers are found by their claims)
# The functions a library's workers fetch jobs with, by source: a call takes from its table even
# though the statement does not name it.
FETCHES: dict[str, re.Pattern[str]] = {
    "procrastinate": re.compile(r"\bprocrastinate_(fetch|finish|retry)_job", re.IGNORECASE),
    "graphile-worker": re.compile(r"\bget_jobs?\s*\(", re.IGNORECASE),
}
LISTEN = re.compile(r'^\s*listen\s+("(?:[^"]|"")+"|[^\s;]+)\s*;?\s*$', re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class _Candidates:
    """The sessions of one snapshot that may consume a queue, sorted once for every queue: those
    whose statement takes messages, and those that LISTEN (by channel)."""

    takers: tuple[SessionSample, ...]
    listeners: dict[str, tuple[SessionSample, ...]]
    others: frozenset[int]  # listed sessions whose statement takes no messages (a producer, a reader, a LOCK)

    @classmethod
    def of(cls, sessions: Iterable[SessionSample]) -> _Candidates:
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


def consumers_of(queue: QueueSample, sessions: Iterable[SessionSample] | _Candidates, blocked: dict[int, BlockedSession],
                 shared_table: bool = False) -> tuple[Consumer, ...]:
    """The queue's consumers: those the probe saw on its table's locks, the client sessions whose
    statement takes messages from its table, and those waiting on its library's notifications;
    each marked waiting when the lock tree has it, and `shared` when what ties it to the queue is
    shared by other queues too (`shared_table`: several queues in one table)."""
    candidates = sessions if isinstance(sessions, _Candidates) else _Candidates.of(sessions)
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


def autovacuum_threshold(q: QueueSample) -> float:
    """Autovacuum's default trigger: 50 dead tuples plus 20 % of the rows."""
    return 50 + 0.2 * (q.live_tuples or 0)


def queue_key(queue: QueueSample) -> str:
    return f"{queue.source}\x00{queue.schema or ''}\x00{queue.name}"


class Diagnoser:
    """Each queue's last samples, and the verdict on it at each new snapshot."""

    def __init__(self, window_s: float = WINDOW_S) -> None:
        self.window_s = window_s
        self._points: dict[str, deque[_Point]] = {}
        self._since: dict[str, tuple[str, datetime]] = {}  # queue → (its verdict's code, first seen at)
        self._over: dict[str, datetime] = {}  # queue → since when its dead tuples are over autovacuum's threshold

    def diagnose(self, snapshot: Snapshot) -> Snapshot:
        """The snapshot with every queue's consumers and verdict (a snapshot that could not reach
        its database is returned as it is)."""
        if not snapshot.connected or not snapshot.queues:
            return snapshot
        blocked = {b.pid: b for b in snapshot.blocked}
        candidates = _Candidates.of(snapshot.sessions)  # once: queues × takers, not queues × sessions
        tables = Counter((q.source, q.table) for q in snapshot.queues)
        queues = []
        seen = set()
        for q in snapshot.queues:
            key = queue_key(q)
            seen.add(key)
            consumers = consumers_of(q, candidates, blocked, shared_table=tables[q.source, q.table] > 1)
            if q.error is not None or q.depth is None:  # figures not read: no verdict (unknown is absent)
                queues.append(replace(q, consumers=consumers, diagnosis=None))
                continue
            points = self._remember(key, q, consumers, snapshot.taken_at)
            verdict = self._verdict(q, consumers, points, snapshot, blocked)
            queues.append(replace(q, consumers=consumers, diagnosis=self._dated(key, verdict, snapshot.taken_at)))
        # A queue missing from one snapshot (a library's queue that drained, a source that failed
        # once) keeps its samples until they leave the window.
        at = snapshot.taken_at
        for gone in [k for k, p in self._points.items() if k not in seen and (at - p[-1].at).total_seconds() > self.window_s]:
            del self._points[gone]
            self._since.pop(gone, None)
            self._over.pop(gone, None)
        return replace(snapshot, queues=tuple(queues))

    # -- the window ---------------------------------------------------------------------------

    def _remember(self, key: str, q: QueueSample, consumers: tuple[Consumer, ...], at: datetime) -> list[_Point]:
        points = self._points.setdefault(key, deque())
        if points and at <= points[-1].at:  # a replay went back, or the same instant again
            points.clear()
        points.append(_Point(at=at, depth=q.depth, ready=q.ready, dead=q.dead, dequeued_total=q.dequeued_total,
                             enqueued_total=q.enqueued_total, dead_tuples=q.dead_tuples, in_flight=q.in_flight,
                             consumers=len(consumers), own=sum(1 for c in consumers if not c.shared),
                             working=sum(1 for c in consumers if not c.waiting and c.state == "active"),
                             waiting=sum(1 for c in consumers if c.waiting)))
        while len(points) > 2 and (at - points[1].at).total_seconds() >= self.window_s:
            points.popleft()
        return list(points)

    def _dated(self, key: str, verdict: Diagnosis, at: datetime) -> Diagnosis:
        """The verdict with how long it has held: the server's own duration where the verdict has
        one (a lock wait, the oldest ready message), else since the first sample it was given."""
        code, first = self._since.get(key, (None, at))
        if code != verdict.code:
            first = at
            self._since[key] = (verdict.code, at)
        if verdict.since_s is not None:
            return verdict
        return replace(verdict, since_s=round((at - first).total_seconds(), 3))

    def _over_threshold(self, key: str, q: QueueSample, at: datetime) -> datetime | None:
        over = q.dead_tuples is not None and q.dead_tuples >= autovacuum_threshold(q)
        if not over:
            self._over.pop(key, None)
            return None
        return self._over.setdefault(key, at)

    # -- the verdicts -------------------------------------------------------------------------

    def _verdict(self, q: QueueSample, consumers: tuple[Consumer, ...], points: list[_Point], snapshot: Snapshot,
                 blocked: dict[int, BlockedSession]) -> Diagnosis:
        window = len(points) >= 2 and (points[-1].at - points[0].at).total_seconds() >= MIN_WINDOW_S
        key = queue_key(q)
        case = _Case(q, consumers, points, window, snapshot, blocked, self._over_threshold(key, q, snapshot.taken_at),
                     self._since.get(key, (None, None))[0])
        for judge in (_blocked, _no_consumers, _failing, _bloat, _saturated):
            verdict = judge(case)
            if verdict is not None:
                return verdict
        if not window:
            return Diagnosis(code="healthy", reason="nothing wrong in one sample (rates and growth need two)")
        return Diagnosis(code="healthy", reason=_healthy_reason(q, consumers))


def _healthy_reason(q: QueueSample, consumers: tuple[Consumer, ...]) -> str:
    if not q.depth:
        return "empty"
    return f"{len(consumers)} consumer{'s' if len(consumers) != 1 else ''}, keeping up"


def _describe_root(snapshot: Snapshot, pid: int) -> str:
    root = next((b for b in snapshot.blockers if b.pid == pid), None)
    session = next((s for s in snapshot.sessions if s.pid == pid), None)
    state = (root.state if root else None) or (session.state if session else None) or "?"
    application = (root.application if root else None) or (session.application if session else None)
    xact = (root.xact_age_s if root else None) if root and root.xact_age_s is not None else (session.xact_age_s if session else None)
    parts = [f"pid {pid}", state]
    if application:
        parts.append(f"application {application}")
    if xact is not None:
        parts.append(f"transaction open {xact:.0f} s")
    return ", ".join(parts)


def _blocked(case: _Case) -> Diagnosis | None:
    consumers, points, snapshot, blocked = case.consumers, case.points, case.snapshot, case.blocked
    waiting = [c for c in consumers if c.waiting and c.pid in blocked]
    if not waiting or (all(c.shared for c in waiting) and not case.q.ready):
        return None  # (a worker of a table other queues share waits: this one, with nothing ready, is not held up)
    waits = [blocked[c.pid].wait_s or 0.0 for c in waiting]
    # Evidence over time: a consumer already waiting in the sample before, or the server's own
    # wait at least as long as the last interval (one sample alone: MIN_WAIT_S), not a lock
    # taken and given in a blink.
    interval = (points[-1].at - points[-2].at).total_seconds() if len(points) >= 2 else MIN_WAIT_S
    earlier = len(points) >= 2 and points[-2].waiting > 0
    if not earlier and max(waits) < interval:
        return None
    roots: list[int] = []
    prepared: list[str] = []
    relations: list[str] = []
    for c in waiting:
        b = blocked[c.pid]
        for root in b.root_blockers or ((b.root_blocker,) if b.root_blocker is not None else ()):
            if root not in roots:
                roots.append(root)
        for gid in b.root_prepared:
            if gid not in prepared:
                prepared.append(gid)
        if b.relation and b.relation not in relations:
            relations.append(b.relation)
    who = "; ".join([_describe_root(snapshot, r) for r in roots] + [f"prepared transaction {g}" for g in prepared]) or "unknown"
    consumers_said = ", ".join(str(c.pid) for c in waiting)
    return Diagnosis(code="blocked", reason=f"consumer{'s' if len(waiting) > 1 else ''} {consumers_said} wait for a lock held by {who}",
                     pids=tuple(roots + [c.pid for c in waiting if c.pid not in roots]),
                     objects=tuple(relations + [f"prepared:{g}" for g in prepared]), since_s=round(max(waits), 3))


def _no_consumers(case: _Case) -> Diagnosis | None:
    q, points = case.q, case.points
    if not q.ready or len(points) < 2:
        return None
    before, now = points[-2], points[-1]
    if now.own or before.own or not before.ready or now.in_flight or before.in_flight:
        return None  # (its messages being worked: someone consumes it, though between statements now)
    if now.dequeued_total is not None and before.dequeued_total is not None and now.dequeued_total > before.dequeued_total:
        return None  # something took messages between the samples: someone consumes it
    age = q.oldest_ready_age_s
    said = f"; the oldest has waited {age:.0f} s" if age is not None else ""
    others = max(now.consumers, before.consumers)
    # Was it worked earlier in the window (a consumer seen, messages taken)? Then its workers may
    # be polling (pg-boss, Graphile Worker: every few seconds, leaving no trace between polls):
    # none is missing until its oldest ready message has outlived the samples and a poll. The
    # same for sessions only on a table other queues share: they may serve those.
    taken = [p.dequeued_total for p in points if p.dequeued_total is not None]
    worked = any(p.consumers for p in points) or (len(taken) >= 2 and taken[-1] > taken[0])
    if others or worked:
        span = (now.at - before.at).total_seconds()
        if age is None or age < max(SHARED_IDLE_S, span):
            return None
        if others:
            return Diagnosis(code="no-consumers", reason=f"{q.ready:,} ready and none taken: the {others} session"
                             f"{'s' if others != 1 else ''} on its shared table serve other queues{said}",
                             objects=(q.table,), since_s=round(age, 3))
        return Diagnosis(code="no-consumers", reason=f"{q.ready:,} ready and none taken since its consumers were last "
                         f"seen{said}", objects=(q.table,), since_s=round(age, 3))
    return Diagnosis(code="no-consumers", reason=f"{q.ready:,} ready and no session takes them{said}",
                     objects=(q.table,), since_s=round(age, 3) if age is not None else None)


def _failing(case: _Case) -> Diagnosis | None:
    q, points, window = case.q, case.points, case.window
    if not window:
        return None
    first, last = points[0], points[-1]
    if first.dead is None or last.dead is None:
        return None
    died = last.dead - first.dead
    if died <= 0:
        return None
    left = (last.dequeued_total - first.dequeued_total) if last.dequeued_total is not None and first.dequeued_total is not None else None
    # pg-boss 10 fails a job by deleting it and inserting it back (failed, or retry): each is an
    # arrival and a departure more in its partition's counters, not a completion.
    completed = None if left is None else max(0, left - died * (2 if q.source in REINSERTS_FAILED else 1))
    # Once failing, it stays so while deaths are at least half the completions: the counters'
    # noise (statistics sent late) does not make it blink.
    if completed is not None and died * (2 if case.was == "failing" else 1) < completed:
        return None
    span = (last.at - first.at).total_seconds()
    if completed is None:
        done = ", completions unknown (a table several queues share)"
    elif completed and q.source in REINSERTS_FAILED:
        # Inferred from the table's insert counter, which a writer's backend sends up to a second
        # or more after its exact row counts: a death near the window's edge can read as a
        # completion. Said as what it is.
        done = f", about {completed:,} completed (inferred from the table's counters)"
    else:
        done = f", {completed:,} completed"
    return Diagnosis(code="failing", reason=f"{died:,} went dead in {span:.0f} s{done}", objects=(q.table,))


def _bloat(case: _Case) -> Diagnosis | None:
    q, points, window, snapshot = case.q, case.points, case.window, case.snapshot
    if not window or q.dead_tuples is None or points[0].dead_tuples is None:
        return None
    grew = q.dead_tuples - points[0].dead_tuples
    threshold = autovacuum_threshold(q)
    if grew <= 0 or q.dead_tuples < threshold:
        return None
    c = snapshot.connections
    kind = (c.xmin_holder_kind or "session") if c is not None else None
    holder_session = None
    if c is not None and kind == "session" and c.xmin_holder_pid is not None:
        holder_session = next((s for s in snapshot.sessions if s.pid == c.xmin_holder_pid), None)
    # The holder's own transaction open HORIZON_HELD_S at least (not the oldest transaction of
    # any session, which may hold no horizon at all), or a prepared transaction or a slot.
    held = (holder_session is not None and (holder_session.xact_age_s or 0) >= HORIZON_HELD_S) \
        or (c is not None and kind in ("prepared", "slot") and bool(c.xmin_holder_name))
    if held and c is not None:
        if kind == "session" and c.xmin_holder_pid is not None:
            holder = _describe_root(snapshot, c.xmin_holder_pid)
            pids: tuple[int, ...] = (c.xmin_holder_pid,)
            objects: tuple[str, ...] = (q.table,)
        else:
            holder = f"{'prepared transaction' if kind == 'prepared' else 'replication slot'} {c.xmin_holder_name}"
            pids, objects = (), (q.table, f"{kind}:{c.xmin_holder_name}")
        return Diagnosis(code="bloat", reason=f"{q.dead_tuples:,} dead tuples (+{grew:,}) kept by the xmin horizon: {holder}",
                         pids=pids, objects=objects)
    # Autovacuum behind: over its threshold for AUTOVACUUM_LATE_S as these samples saw it (a
    # table just made, or a dashboard just started, has not given it the chance), and no
    # autovacuum in that time.
    last = q.last_autovacuum_at
    over = (snapshot.taken_at - case.over_threshold_since).total_seconds() if case.over_threshold_since else 0.0
    late = over >= AUTOVACUUM_LATE_S and (last is None or (snapshot.taken_at - last).total_seconds() >= AUTOVACUUM_LATE_S)
    if late:
        when = "never" if last is None else f"{(snapshot.taken_at - last).total_seconds():.0f} s ago"
        return Diagnosis(code="bloat", reason=f"{q.dead_tuples:,} dead tuples (+{grew:,}), over autovacuum's threshold "
                         f"{threshold:,.0f}; last autovacuum {when}", objects=(q.table,))
    return None


def _saturated(case: _Case) -> Diagnosis | None:
    q, consumers, points, window = case.q, case.consumers, case.points, case.window
    if not window or not consumers or any(c.waiting for c in consumers):
        return None
    first, last = points[0], points[-1]
    if first.depth is None or last.depth is None or len(points) < 3:
        return None
    # A backlog that grew for a while and by more than a handful: one message more than a
    # minute ago is the noise of a busy queue, not a verdict.
    if (last.at - first.at).total_seconds() < SATURATED_MIN_S or last.depth - first.depth < max(SATURATED_MIN_GROWTH, first.depth // 10):
        return None
    if any(b.depth is not None and a.depth is not None and b.depth < a.depth for a, b in pairwise(points)):
        return None  # the backlog fell at some point: not a steady growth
    arrived = (last.enqueued_total - first.enqueued_total) if last.enqueued_total is not None and first.enqueued_total is not None else None
    left = (last.dequeued_total - first.dequeued_total) if last.dequeued_total is not None and first.dequeued_total is not None else None
    if arrived is not None and left is not None and arrived <= left:
        return None
    span = (last.at - first.at).total_seconds()
    rates = ""
    if arrived is not None and left is not None and span:
        rates = f": {arrived / span * 60:,.0f}/min in, {left / span * 60:,.0f}/min out"
    return Diagnosis(code="saturated", reason=f"backlog +{last.depth - first.depth:,} in {span:.0f} s with {len(consumers)} "
                     f"consumer{'s' if len(consumers) != 1 else ''}{rates}",
                     pids=tuple(c.pid for c in consumers), objects=(q.table,))
