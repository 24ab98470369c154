"""Why a queue backs up: one verdict per queue, from what a snapshot already holds (the queue's
figures, the sessions working on its table, the locks on it, the lock tree, the xmin horizon).
What one sample can show is said from one sample (a one-shot `queuetop snapshot` too); the rest is
judged over the samples of a window, and until there is one it is `not-judged`, saying why:
never a calm that was not judged.

The verdicts, the first that holds wins:

- `blocked`: the queue's table, or one of its indexes or partitions, is locked in a mode that stops
  its consumers (granted SHARE, SHARE ROW EXCLUSIVE, EXCLUSIVE or ACCESS EXCLUSIVE: anything that
  conflicts with the ROW EXCLUSIVE an UPDATE or DELETE takes; the queues probe reads them from
  pg_locks alone), or a consumer of the queue waits for a lock. The reason names the root of the
  chain (pid, state, application, how long its transaction has been open, the mode it holds): the
  locker itself, or, when the locker waits too, its root blockers from the lock tree, first in
  `pids`. Said whether or not the queue's figures could be read (a table locked ACCESS EXCLUSIVE
  cannot be read at all: its figures stay unknown beside the verdict), from one sample once the
  locker's transaction is MIN_WAIT_S old (or a consumer waited that long), and for every source.
- `starved`: ready messages wait, no session consumes the queue, and clients wait in a PgBouncer
  pool of its database for a server connection (the pooler probe: a PgBouncer was given): its
  consumers are there, held in the pooler, not missing. Said from one sample: `starved: 4 clients
  waiting in pool app/postgres for 40 s`, the pool (database/user, as PgBouncer names it) with the
  most clients waiting, and how long the first of them has waited (its maxwait).
- `no-consumers`: ready messages wait, none is in flight, and no session consumes the queue (none
  on its table, none taking from it, none listening for it). From one sample when it is the first
  the diagnoser sees of the queue (a one-shot snapshot, a dashboard just started); a condition that
  appears under its eyes must hold STARVED_HOLD_S (or its oldest ready message have waited that
  long) first: workers that are starting are not flashed `no-consumers` (meanwhile `not-judged`,
  never `healthy`). A queue whose consumers were seen earlier in the window (polling workers leave
  no trace between polls), or whose table other queues share, is `no-consumers` once its oldest
  ready message has outlived the samples and a poll (SHARED_IDLE_S). Where the server's
  connections are at 90 % or more of those ordinary roles may use (Connections.near_limit), the
  reason names that cause: "…; connections at 2,002 of 2,097: consumers may be unable to connect".
- `failing`: messages went dead faster than they completed over the window; and then for as long
  as none completes (a queue whose every message died stays failing when nothing arrives any more,
  and says so).
- `bloat`: the table's dead tuples grow past autovacuum's threshold while the xmin horizon is held
  (the holder named: a session, and beside it, when that session waits for a lock, its root
  blocker, first in `pids`; a prepared transaction; a replication slot; a standby's feedback, with
  the standby's name and address, and the horizon's age in time and in transactions), or while
  autovacuum has not run for a while.
- `saturated`: consumers are at work, none waits, and the backlog grows over the window: arrivals
  above departures, and the backlog's low points rising from one third of the window to the next
  (a burst that comes and is drained, or one falling sample, neither makes nor unmakes it).
- `healthy`: judged over a window (two samples at least MIN_WINDOW_S apart), nothing above holds.
- `not-judged`: none of the above can be said yet, and why ("one sample: rates and growth need
  two"; the queue's figures could not be read; ready messages with no consumer seen yet).

On a hot standby (the snapshot's server.role) only `blocked` is judged, from the standby's own
locks; every other queue is `not-judged`, "consumers run on the primary" (ON_STANDBY): its
consumers and producers work on the primary, its figures are the primary's as of the last
transaction replayed, and its table statistics count the standby's own work, so neither a
missing consumer, nor failures, nor growth, nor bloat can be told there.

The consumers of a queue are found in probes/consumers.py (what ties a session to a queue, and
what a table several queues share does not say).

Nothing here reads the database: the `Diagnoser` keeps each queue's last samples (a dashboard's
or a `snapshot --rates` run's) and returns the snapshot with its queues' `consumers` and
`diagnosis` filled in.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime

from .consumers import Candidates, consumers_of
from .locklabels import MODE_WORDS
from .model import BlockedSession, Connections, Consumer, Diagnosis, Locker, QueueSample, Snapshot
from .pooler_console import pool_name, pools_of

CODES = ("healthy", "blocked", "starved", "no-consumers", "failing", "bloat", "saturated", "not-judged")

WINDOW_S = 60.0  # how far back the growth of a backlog, of dead letters and of dead tuples is judged
MIN_WINDOW_S = 0.5  # two samples closer than this are one instant: not yet a window (a 1 s refresh jitters below 1 s)
MIN_WAIT_S = 2.0  # in a single sample, a consumer waiting this long for a lock, or a lock held this long, is blocked
STARVED_HOLD_S = 5.0  # ready messages and no consumer, appeared under the diagnoser's eyes: said once it holds this long
SATURATED_MIN_S = 10.0  # a backlog grows for at least this long (and 3 samples) before it is "saturated"
SATURATED_MIN_GROWTH = 10  # by at least this many messages (and a tenth of what it was)
REINSERTS_FAILED = frozenset({"pg-boss"})  # sources whose fail deletes the job and inserts it back
SHARED_IDLE_S = 10.0  # on a shared table, a ready message this old with nothing taken from its queue: no consumer of it
HORIZON_HELD_S = 30.0  # an xmin horizon held this long by one transaction is "held"
AUTOVACUUM_LATE_S = 300.0  # above its threshold, a table autovacuum has not reached in this long
# The table locks that stop a queue's consumers: those that conflict with the ROW EXCLUSIVE an
# UPDATE or DELETE takes (the queues probe reports only these, granted).
STOPPING_MODES = frozenset({"ShareLock", "ShareRowExclusiveLock", "ExclusiveLock", "AccessExclusiveLock"})
ONE_SAMPLE = "one sample: rates and growth need two"
# A hot standby's queues: their consumers (and producers) run on the primary, the figures are the
# primary's as of the last transaction replayed, and the table statistics (rates, dead tuples,
# vacuums) are the standby's own: none of no-consumers, failing, bloat, saturated or healthy can
# be said there. `blocked` still can, from the standby's own locks (a lock replayed from the
# primary is held by the startup process, which the queues probe does not list).
ON_STANDBY = "consumers run on the primary (a standby: figures as of its last replayed transaction)"

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
    lockers_before: frozenset[tuple[int, str | None]] = frozenset()  # the lockers the sample before saw (pid, gid)
    first_at: datetime | None = None  # the first sample the diagnoser saw of this queue


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
        self._first: dict[str, datetime] = {}  # queue → the first sample of it seen (its samples since are all kept)
        self._lockers: dict[str, frozenset[tuple[int, str | None]]] = {}  # queue → its lockers at the last sample
        # queue → its sample when messages last went dead faster than they completed: it stays
        # failing while none completes after it.
        self._failing: dict[str, _Point] = {}
        self._seen_at: dict[str, datetime] = {}  # queue → the last snapshot it was in

    def diagnose(self, snapshot: Snapshot) -> Snapshot:
        """The snapshot with every queue's consumers and verdict (a snapshot that could not reach
        its database is returned as it is)."""
        if not snapshot.connected or not snapshot.queues:
            return snapshot
        blocked = {b.pid: b for b in snapshot.blocked}
        candidates = Candidates.of(snapshot.sessions)  # once: queues × takers, not queues × sessions
        tables = Counter((q.source, q.table) for q in snapshot.queues)
        queues = []
        seen = set()
        at = snapshot.taken_at
        for q in snapshot.queues:
            key = queue_key(q)
            seen.add(key)
            consumers = consumers_of(q, candidates, blocked, shared_table=tables[q.source, q.table] > 1)
            if q.error is not None or q.depth is None:
                # Its figures not read (they stay absent): what the locks on its table say is said
                # all the same; nothing else can be.
                case = _Case(q, consumers, [], False, snapshot, blocked, was=self._since.get(key, (None, None))[0],
                             lockers_before=self._lockers.get(key, frozenset()))
                verdict = _blocked(case) or Diagnosis(
                    code="not-judged", reason=f"its figures could not be read: {_one_line(q.error or 'no figures')}",
                    objects=(q.table,))
            else:
                points = self._remember(key, q, consumers, at)
                verdict = self._verdict(q, consumers, points, snapshot, blocked)
            self._lockers[key] = frozenset((lock.pid, lock.gid) for lock in q.lockers or ())
            queues.append(replace(q, consumers=consumers, diagnosis=self._dated(key, verdict, at)))
        # A queue missing from one snapshot (a library's queue that drained, a source that failed
        # once) keeps its samples until they leave the window.
        for key in seen:
            self._seen_at[key] = at
        for gone in [k for k, last in self._seen_at.items() if k not in seen and (at - last).total_seconds() > self.window_s]:
            for kept in (self._seen_at, self._points, self._since, self._over, self._first, self._lockers, self._failing):
                kept.pop(gone, None)
        return replace(snapshot, queues=tuple(queues))

    # -- the window ---------------------------------------------------------------------------

    def _remember(self, key: str, q: QueueSample, consumers: tuple[Consumer, ...], at: datetime) -> list[_Point]:
        points = self._points.setdefault(key, deque())
        if points and at <= points[-1].at:  # a replay went back, or the same instant again
            points.clear()
            self._first.pop(key, None)
            self._failing.pop(key, None)
        self._first.setdefault(key, at)
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
        if code != verdict.code or at < first:
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
                     self._since.get(key, (None, None))[0], self._lockers.get(key, frozenset()), self._first.get(key))
        if snapshot.server.standby:  # a hot standby: what its own locks say, and nothing else
            return _blocked(case) or Diagnosis(code="not-judged", reason=ON_STANDBY, objects=(q.table,))
        for judge in (_blocked, _starved, _no_consumers):
            verdict = judge(case)
            if verdict is not None:
                return _short_of_connections(verdict, snapshot.connections)
        failing = _failing(case)
        if failing is not None:
            self._failing[key] = points[-1]
            return failing
        failing = _still_failing(case, self._failing.get(key))
        if failing is not None:
            return failing
        self._failing.pop(key, None)
        for judge in (_bloat, _saturated):
            verdict = judge(case)
            if verdict is not None:
                return verdict
        if not window:
            return Diagnosis(code="not-judged", reason=_one_sample_reason(q, consumers))
        return Diagnosis(code="healthy", reason=_healthy_reason(q, consumers, points))


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'s' if n != 1 else ''}"


def _one_sample_reason(q: QueueSample, consumers: tuple[Consumer, ...]) -> str:
    """What one sample said of a queue it found nothing wrong with, and what it could not say."""
    if not q.depth:
        now = "empty"
    elif q.ready:
        now = f"{q.ready:,} ready, {_plural(len(consumers), 'consumer')}"
    else:
        now = f"none ready, {q.depth:,} in flight or delayed"
    fresh = [lock for lock in q.lockers or () if lock.mode in STOPPING_MODES]
    if fresh:  # (held too briefly to be a verdict yet)
        who = f"pid {fresh[0].pid}" if fresh[0].gid is None else f"prepared transaction {fresh[0].gid}"
        return f"{ONE_SAMPLE} ({now}; its table locked {mode_words(fresh[0].mode)} a moment ago by {who})"
    if any(c.waiting for c in consumers):
        return f"{ONE_SAMPLE} ({now}; a consumer began to wait for a lock)"
    return f"{ONE_SAMPLE} ({now}, no lock holding it up)"


def _healthy_reason(q: QueueSample, consumers: tuple[Consumer, ...], points: list[_Point]) -> str:
    if not q.depth:
        return "empty"
    if consumers:
        return f"{_plural(len(consumers), 'consumer')}, keeping up"
    seen = next((p for p in reversed(points) if p.consumers), None)
    if seen is not None:
        return f"keeping up: its consumers were last seen {(points[-1].at - seen.at).total_seconds():.0f} s ago"
    return "keeping up: messages were taken in the window"


def mode_words(mode: str | None) -> str:
    """A lock mode as the documentation writes it ("AccessExclusiveLock" → "ACCESS EXCLUSIVE")."""
    return MODE_WORDS.get(mode or "", mode or "?")


def _describe_root(snapshot: Snapshot, pid: int, holds: str | None = None, relation: str | None = None) -> str:
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
    if holds:
        parts.append(f"holding {mode_words(holds)}" + (f" on {relation}" if relation else ""))
    return ", ".join(parts)


def _describe_locker(snapshot: Snapshot, lock: Locker) -> str:
    if lock.gid is not None:
        age = f", prepared {lock.xact_age_s:.0f} s ago" if lock.xact_age_s is not None else ""
        return f"prepared transaction {lock.gid}{age}, holding {mode_words(lock.mode)} on {lock.relation or '?'}"
    known = any(b.pid == lock.pid for b in snapshot.blockers) or any(s.pid == lock.pid for s in snapshot.sessions)
    if known:
        return _describe_root(snapshot, lock.pid, lock.mode, lock.relation)
    parts = [f"pid {lock.pid}", lock.state or "?"]  # the sessions unknown: what the queues probe read
    if lock.application:
        parts.append(f"application {lock.application}")
    if lock.xact_age_s is not None:
        parts.append(f"transaction open {lock.xact_age_s:.0f} s")
    parts.append(f"holding {mode_words(lock.mode)} on {lock.relation or '?'}")
    return ", ".join(parts)


def _roots_of(b: BlockedSession) -> tuple[tuple[int, ...], tuple[str, ...]]:
    return b.root_blockers or ((b.root_blocker,) if b.root_blocker is not None else ()), b.root_prepared


def _add(into: list, items: Iterable) -> None:
    for item in items:
        if item not in into:
            into.append(item)


def _blocked(case: _Case) -> Diagnosis | None:
    """The table locked in a mode that stops its consumers (the lockers: from pg_locks, so said
    whether or not the figures could be read), or consumers waiting for a lock: blocked by the
    root of that chain."""
    q, consumers, points, snapshot, blocked = case.q, case.consumers, case.points, case.snapshot, case.blocked
    waiting = [c for c in consumers if c.waiting and c.pid in blocked]
    if waiting and all(c.shared for c in waiting) and not q.ready:
        waiting = []  # (a worker of a table other queues share waits: this one, with nothing ready, is not held up)
    waits = [blocked[c.pid].wait_s or 0.0 for c in waiting]
    # Evidence over time: a consumer already waiting in the sample before, or the server's own
    # wait at least as long as the last interval (one sample alone: MIN_WAIT_S), not a lock
    # taken and given in a blink.
    interval = (points[-1].at - points[-2].at).total_seconds() if len(points) >= 2 else MIN_WAIT_S
    earlier = len(points) >= 2 and points[-2].waiting > 0
    waited = earlier or bool(waits and max(waits) >= interval)
    consumer_roots: list[int] = []
    for c in waiting if waited else ():
        _add(consumer_roots, _roots_of(blocked[c.pid])[0])
    # The locks on its table that stop its consumers, held a while (a transaction open MIN_WAIT_S,
    # or seen by the sample before), or behind which a consumer is seen waiting.
    lockers = [lock for lock in case.q.lockers or () if lock.mode in STOPPING_MODES and (
        (lock.xact_age_s or 0.0) >= MIN_WAIT_S or (lock.pid, lock.gid) in case.lockers_before
        or (lock.pid and lock.pid in consumer_roots))]
    if not waited and not lockers:
        return None
    if not waited:  # the table's lock is the verdict: whoever waits on the queue now is named with it
        for c in waiting:
            _add(consumer_roots, _roots_of(blocked[c.pid])[0])
    roots: list[int] = []
    prepared: list[str] = []
    relations: list[str] = []
    said: list[str] = []
    involved: list[int] = []
    for lock in lockers:
        described = _describe_locker(snapshot, lock)
        if lock.gid is not None:
            _add(prepared, (lock.gid,))
        elif lock.pid in blocked:  # the locker waits itself: the root of its chain is who holds up the queue
            lock_roots, lock_prepared = _roots_of(blocked[lock.pid])
            lock_roots = tuple(r for r in lock_roots if r != lock.pid)
            _add(roots, lock_roots)
            _add(prepared, lock_prepared)
            _add(involved, (lock.pid,))
            behind = [_describe_root(snapshot, r) for r in lock_roots] + [f"prepared transaction {g}" for g in lock_prepared]
            if behind:
                described += f", itself waiting for a lock held by {'; '.join(behind)}"
        else:
            _add(roots, (lock.pid,))
        said.append(described)
        _add(relations, (lock.relation or q.table,))
    if lockers:
        reason = f"its table is locked by {'; and by '.join(said)}"
        if waiting:
            reason += f"; consumer{'s' if len(waiting) > 1 else ''} {', '.join(str(c.pid) for c in waiting)} " \
                      f"wait{'s' if len(waiting) == 1 else ''}"
            others = [r for r in consumer_roots if r not in roots and r not in involved]
            if others:
                reason += f", also for {'; '.join(_describe_root(snapshot, r) for r in others)}"
    consumer_prepared: list[str] = []
    for c in waiting:
        b = blocked[c.pid]
        _add(consumer_prepared, b.root_prepared)
        if b.relation:
            _add(relations, (b.relation,))
    if not lockers:
        who = "; ".join([_describe_root(snapshot, r) for r in consumer_roots]
                        + [f"prepared transaction {g}" for g in consumer_prepared]) or "unknown"
        reason = f"consumer{'s' if len(waiting) > 1 else ''} {', '.join(str(c.pid) for c in waiting)} wait for a lock held by {who}"
    _add(roots, consumer_roots)
    _add(prepared, consumer_prepared)
    pids = [p for p in roots if p] + [p for p in involved if p not in roots] + [c.pid for c in waiting if c.pid not in roots]
    return Diagnosis(code="blocked", reason=reason, pids=tuple(pids), objects=tuple(relations + [f"prepared:{g}" for g in prepared]),
                     since_s=round(max(waits), 3) if waits else None)


def _starving(p: _Point) -> bool:
    """A sample with ready messages, none in flight and no session on the queue."""
    return bool(p.ready) and not p.consumers and not p.in_flight


def _no_consumers(case: _Case) -> Diagnosis | None:
    q, points = case.q, case.points
    if not q.ready:
        return None
    now = points[-1]
    age = q.oldest_ready_age_s
    said = f"; the oldest has waited {age:.0f} s" if age is not None else ""
    if len(points) < 2 or not case.window:
        # One sample: nobody on the queue at all is seen at once. Sessions only on a table other
        # queues share may serve it or not: one sample cannot say.
        if _starving(now):
            return Diagnosis(code="no-consumers", reason=f"{q.ready:,} ready and no session takes them{said}",
                             objects=(q.table,), since_s=round(age, 3) if age is not None else None)
        if not now.own and not now.in_flight and now.consumers:
            return Diagnosis(code="not-judged", reason=f"{ONE_SAMPLE} ({q.ready:,} ready; the {_plural(now.consumers, 'session')} "
                             "on its shared table may serve it or other queues)", objects=(q.table,))
        return None
    before = points[-2]
    if now.own or now.in_flight:
        return None  # (its messages being worked: someone consumes it)
    if now.dequeued_total is not None and before.dequeued_total is not None and now.dequeued_total > before.dequeued_total:
        return None  # something took messages between the samples: someone consumes it
    others = max(now.consumers, before.consumers)
    # Was it worked earlier in the window (a consumer seen, messages taken)? Then its workers may
    # be polling (pg-boss, Graphile Worker: every few seconds, leaving no trace between polls):
    # none is missing until its oldest ready message has outlived the samples and a poll. The
    # same for sessions only on a table other queues share: they may serve those.
    taken = [p.dequeued_total for p in points if p.dequeued_total is not None]
    worked = any(p.consumers for p in points) or (len(taken) >= 2 and taken[-1] > taken[0])
    if others or worked:
        if before.own or before.in_flight or not before.ready:
            return None
        span = (now.at - before.at).total_seconds()
        if age is None or age < max(SHARED_IDLE_S, span):
            return None
        if others:
            return Diagnosis(code="no-consumers", reason=f"{q.ready:,} ready and none taken: the {others} session"
                             f"{'s' if others != 1 else ''} on its shared table serve other queues{said}",
                             objects=(q.table,), since_s=round(age, 3))
        return Diagnosis(code="no-consumers", reason=f"{q.ready:,} ready and none taken since its consumers were last "
                         f"seen{said}", objects=(q.table,), since_s=round(age, 3))
    # Never worked in the window: since when has nobody been there for its ready messages? Seen so
    # from the first sample of it, it is said at once (a snapshot says what it saw); appeared since,
    # it must hold a while, or its oldest message have waited that long: workers just started are
    # not flashed "no consumers" before their first claim.
    start = len(points) - 1
    while start > 0 and _starving(points[start - 1]):
        start -= 1
    held = (now.at - points[start].at).total_seconds()
    from_first = case.first_at is not None and points[start].at <= case.first_at
    if from_first or held >= STARVED_HOLD_S or (age is not None and age >= STARVED_HOLD_S):
        return Diagnosis(code="no-consumers", reason=f"{q.ready:,} ready and no session takes them{said}",
                         objects=(q.table,), since_s=round(age, 3) if age is not None else None)
    return Diagnosis(code="not-judged", reason=f"{q.ready:,} ready and no consumer seen yet ({held:.0f} s): said once that "
                     f"holds {STARVED_HOLD_S:.0f} s (its workers may be starting)", objects=(q.table,))


def _starved(case: _Case) -> Diagnosis | None:
    """Ready messages, no session on the server consumes the queue, and clients wait in a pool of
    its database: its consumers wait for a server connection the pooler has none left to give."""
    q, snapshot = case.q, case.snapshot
    if not q.ready or case.consumers:
        return None
    waiting = [p for p in pools_of(snapshot.pooler, snapshot.server.database) if p.cl_waiting > 0]
    if not waiting:
        return None
    pool = max(waiting, key=lambda p: (p.cl_waiting, p.maxwait_s))
    return Diagnosis(code="starved", reason=f"starved: {_plural(pool.cl_waiting, 'client')} waiting in pool {pool_name(pool)} "
                     f"for {pool.maxwait_s:.0f} s", objects=(q.table, f"pool:{pool_name(pool)}"), since_s=round(pool.maxwait_s, 3))


def _completed(q: QueueSample, died: int, left: int | None) -> int | None:
    # pg-boss 10 fails a job by deleting it and inserting it back (failed, or retry): each is an
    # arrival and a departure more in its partition's counters, not a completion.
    reinserted = q.source in REINSERTS_FAILED and q.rates_from != "records"  # (its records count a failure once)
    return None if left is None else max(0, left - max(0, died) * (2 if reinserted else 1))


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
    completed = _completed(q, died, left)
    # Once failing, it stays so while deaths are at least half the completions: the counters'
    # noise (statistics sent late) does not make it blink.
    if completed is not None and died * (2 if case.was == "failing" else 1) < completed:
        return None
    span = (last.at - first.at).total_seconds()
    if completed is None:
        done = ", completions unknown (a table several queues share)"
    elif completed and q.source in REINSERTS_FAILED and q.rates_from != "records":
        # Inferred from the table's insert counter, which a writer's backend sends up to a second
        # or more after its exact row counts: a death near the window's edge can read as a
        # completion. Said as what it is.
        done = f", about {completed:,} completed (inferred from the table's counters)"
    else:
        done = f", {completed:,} completed"
    return Diagnosis(code="failing", reason=f"{died:,} went dead in {span:.0f} s{done}", objects=(q.table,))


def _still_failing(case: _Case, mark: _Point | None) -> Diagnosis | None:
    """Failing when last judged over a window (`mark`), and no message has completed since: the
    window no longer sees the deaths, but nothing has succeeded either. Completions must be known
    (a table several queues share: only the window's rule)."""
    q, now = case.q, case.points[-1]
    if mark is None or now.dead is None or mark.dead is None or now.dequeued_total is None or mark.dequeued_total is None:
        return None
    died = now.dead - mark.dead
    completed = _completed(q, died, now.dequeued_total - mark.dequeued_total)
    if completed:
        return None
    ago = (now.at - mark.at).total_seconds()
    arrived = (now.enqueued_total - mark.enqueued_total) if now.enqueued_total is not None and mark.enqueued_total is not None else None
    if died > 0:
        since = f"{died:,} more went dead and none completed in the {ago:.0f} s since it was last judged failing"
    else:
        since = f"none has completed in the {ago:.0f} s since messages last went dead"
    if arrived == 0:
        after = "; nothing arrived since: its last messages all died"
    elif arrived is None:
        after = ""
    else:
        after = f"; {arrived:,} arrived since"
    return Diagnosis(code="failing", reason=f"{q.dead or 0:,} dead: {since}{after}", objects=(q.table,))


def _horizon_age(c: Connections) -> str:
    """The horizon's age, in time and in transactions, as far as they are known."""
    parts = []
    if c.xmin_holder_age_s is not None:
        parts.append(f"{'at least ' if c.xmin_holder_age_at_least else ''}{c.xmin_holder_age_s:.0f} s")
    if c.xmin_holder_age_xids is not None:
        parts.append(f"{c.xmin_holder_age_xids:,} transactions")
    return f" (horizon {' and '.join(parts)} old)" if parts else ""


def _horizon_young(c: Connections) -> bool:
    """The horizon's age in time is known to be under HORIZON_HELD_S, or not known to be older
    (the probe's history of transaction ids reaches back less than that): it may move. Not known
    at all (a one-shot snapshot's slot): held, as its growing dead tuples say."""
    return c.xmin_holder_age_s is not None and c.xmin_holder_age_s < HORIZON_HELD_S


def _holder(case: _Case) -> tuple[str, tuple[int, ...], tuple[str, ...]] | None:
    """What holds the xmin horizon back, held (HORIZON_HELD_S): how the reason names it, the
    sessions involved (a root blocker before the holder it holds up), the objects (a prepared
    transaction's gid, a slot's or a standby's name); None when nothing holds it that long."""
    snapshot, blocked, q = case.snapshot, case.blocked, case.q
    c = snapshot.connections
    if c is None:
        return None
    kind = c.xmin_holder_kind or "session"
    if kind == "session":
        if c.xmin_holder_pid is None:
            return None
        pid = c.xmin_holder_pid
        session = next((s for s in snapshot.sessions if s.pid == pid), None)
        # The holder's own transaction open HORIZON_HELD_S at least (not the oldest transaction of
        # any session, which may hold no horizon at all), or the horizon itself that old.
        if not ((session is not None and (session.xact_age_s or 0) >= HORIZON_HELD_S)
                or (c.xmin_holder_age_s is not None and c.xmin_holder_age_s >= HORIZON_HELD_S)):
            return None
        if session is not None or any(b.pid == pid for b in snapshot.blockers):
            said = _describe_root(snapshot, pid)
        else:
            said = f"pid {pid}" + (f", application {c.xmin_holder_application}" if c.xmin_holder_application else "")
        said += _horizon_age(c)
        pids: tuple[int, ...] = (pid,)
        objects: tuple[str, ...] = (q.table,)
        if pid in blocked:  # the holder waits for a lock: whoever holds that up holds the horizon through it
            roots, gids = _roots_of(blocked[pid])
            roots = tuple(r for r in roots if r != pid)
            behind = [_describe_root(snapshot, r) for r in roots] + [f"prepared transaction {g}" for g in gids]
            if behind:
                said += f", itself waiting for a lock held by {'; '.join(behind)}"
            pids = (*roots, pid)
            objects += tuple(f"prepared:{g}" for g in gids)
        return said, pids, objects
    if not c.xmin_holder_name or _horizon_young(c):
        return None
    if kind == "prepared":
        return f"prepared transaction {c.xmin_holder_name}{_horizon_age(c)}", (), (q.table, f"prepared:{c.xmin_holder_name}")
    if kind == "standby":
        client = f" at {c.xmin_holder_client}" if c.xmin_holder_client else ""
        return (f"standby feedback from {c.xmin_holder_name}{client}{_horizon_age(c)}", (),
                (q.table, f"standby:{c.xmin_holder_name}"))
    streamed = f" (standby {c.xmin_holder_application})" if c.xmin_holder_application else ""
    return f"slot {c.xmin_holder_name}{streamed}{_horizon_age(c)}", (), (q.table, f"slot:{c.xmin_holder_name}")


def _bloat(case: _Case) -> Diagnosis | None:
    q, points, window, snapshot = case.q, case.points, case.window, case.snapshot
    if not window or q.dead_tuples is None or points[0].dead_tuples is None:
        return None
    grew = q.dead_tuples - points[0].dead_tuples
    threshold = autovacuum_threshold(q)
    if grew <= 0 or q.dead_tuples < threshold:
        return None
    holder = _holder(case)
    if holder is not None:
        said, pids, objects = holder
        return Diagnosis(code="bloat", reason=f"{q.dead_tuples:,} dead tuples (+{grew:,}) kept by the xmin horizon: {said}",
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
    """Consumers at work, none waiting, and the backlog growing over the window: more arrivals than
    departures, and its low points rising from each third of the window to the next, by at least
    SATURATED_MIN_GROWTH (and a tenth of what it was) in all, the last third's above everything the
    first third saw. Low points, not every sample: under
    bursts a backlog that grows falls between them (one falling sample does not reset it), and a
    burst that comes and is drained raises one third's low point at most, not two."""
    q, consumers, window = case.q, case.consumers, case.window
    if not window or not consumers or any(c.waiting for c in consumers):
        return None
    points = [p for p in case.points if p.depth is not None]
    if len(points) < 3:
        return None
    first, last = points[0], points[-1]
    span = (last.at - first.at).total_seconds()
    if span < SATURATED_MIN_S:
        return None
    lows: list[int] = []
    highs: list[int] = []
    for third in range(3):
        low, high = span * third / 3, span * (third + 1) / 3
        depths = [p.depth for p in points if p.depth is not None
                  and low <= (p.at - first.at).total_seconds() <= high + (1e-9 if third == 2 else -1e-9)]
        if not depths:
            return None
        lows.append(min(depths))
        highs.append(max(depths))
    grew = lows[2] - lows[0]
    if not (lows[0] < lows[1] < lows[2]) or grew < max(SATURATED_MIN_GROWTH, lows[0] // 10):
        return None
    if lows[2] <= highs[0]:
        # The last third's floor not above the first third's ceiling: a backlog that swings (a
        # busy queue's own ebb and flow, the first seconds of a churn filling it) is not one that
        # grows, however its low points fall.
        return None
    arrived = (last.enqueued_total - first.enqueued_total) if last.enqueued_total is not None and first.enqueued_total is not None else None
    left = (last.dequeued_total - first.dequeued_total) if last.dequeued_total is not None and first.dequeued_total is not None else None
    if arrived is not None and left is not None and arrived <= left:
        return None
    assert first.depth is not None and last.depth is not None
    rates = ""
    if arrived is not None and left is not None and span:
        rates = f": {arrived / span * 60:,.0f}/min in, {left / span * 60:,.0f}/min out"
    return Diagnosis(code="saturated", reason=f"backlog +{max(last.depth - first.depth, grew):,} in {span:.0f} s with "
                     f"{_plural(len(consumers), 'consumer')}{rates}", pids=tuple(c.pid for c in consumers), objects=(q.table,))


def _short_of_connections(verdict: Diagnosis, c: Connections | None) -> Diagnosis:
    """A queue with no consumer on a server whose connections are nearly all taken (90 % of those
    ordinary roles may use: Connections.near_limit): its consumers may be refused a connection,
    which the reason says, with the figures."""
    if verdict.code != "no-consumers" or c is None or not c.near_limit or c.usable is None:
        return verdict
    cannot = "cannot connect" if c.total >= c.usable else "may be unable to connect"
    return replace(verdict, reason=f"{verdict.reason}; connections at {c.total:,} of {c.usable:,}: consumers {cannot}")
