"""Deterministic snapshots without a database: for snapshot tests, the TUI benchmark and demos of
the layout. Everything is derived from the arguments; nothing from the clock."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from functools import cache

from probes.model import (
    BlockedSession,
    Blocker,
    CompactionGroup,
    CompactionSample,
    Connections,
    Diagnosis,
    LeaseSample,
    ProbeStatus,
    QueueSample,
    RingSample,
    ServerInfo,
    ServerStats,
    SessionSample,
    Snapshot,
)

TAKEN_AT = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)


def sample_snapshot(*, queues: int = 4, sessions: int = 12, tree_depth: int = 3, step: int = 0,
                    long_names: bool = False) -> Snapshot:
    """A snapshot with `queues` queues, `sessions` client sessions of which most are blocked
    in chains `tree_depth` deep under a few idle-in-transaction roots; `step` moves the figures
    as successive samples would. `long_names`: 48-character queue names, long holders and
    seven-digit fencing tokens (what must not push a figure off screen)."""
    snapshot = _sample_snapshot(queues=queues, sessions=sessions, tree_depth=tree_depth, step=step)
    if not long_names:
        return snapshot
    return replace(
        snapshot,
        queues=tuple(replace(q, name=f"{q.name}.{'billing-reconciliation-export-'}{i:02d}".ljust(48, "x")[:48])
                     for i, q in enumerate(snapshot.queues)),
        leases=tuple(replace(lease, name=f"{lease.name}-leader-election-for-region-eu-west",
                             holder=None if lease.holder is None else f"{lease.holder}.pod-7f9c4d8b6-x2kqp.eu-west-1",
                             token=lease.token + 2_718_281) for lease in snapshot.leases),
    )


def _sample_server_stats(step: int) -> ServerStats:
    """The server's figures a busy primary's header line shows (the rates of the 2 s before `step`)."""
    return ServerStats(
        read_at=TAKEN_AT + timedelta(seconds=step), interval_s=2.0, xact_commit_per_s=1201.5 + step, xact_rollback_per_s=3.0,
        tup_inserted_per_s=812.0, tup_updated_per_s=40.5, tup_deleted_per_s=790.0 + step, temp_bytes_per_s=0.0,
        wal_bytes_per_s=1_310_720.0, cache_hit_ratio=0.9984, database_size_bytes=3_328_599_654, deadlocks_total=2,
        database_size_read_at=TAKEN_AT, wal_position="insert", deadlocks_by_database={"app": 2},
        xact_commit_total=9_120_455 + step * 2403, xact_rollback_total=1_804 + step * 6, tup_inserted_total=40_200_117 + step * 1624,
        tup_updated_total=3_100_411 + step * 81, tup_deleted_total=39_870_002 + step * 1580, temp_bytes_total=73_400_320,
        wal_bytes_total=912_680_550_400 + step * 2_621_440, blks_hit_total=5_203_114_027 + step * 90_000,
        blks_read_total=8_313_906 + step * 144)


def _sample_verdict(i: int, step: int) -> Diagnosis:
    """The first queue's consumers wait behind the first root blocker (pid 1000), the second's
    fall behind; the others keep up."""
    if i == 0:
        return Diagnosis(code="blocked", reason="consumers 1001, 1002 wait for a lock held by pid 1000, idle in transaction, "
                         "application billing, transaction open 120 s", pids=(1000, 1001, 1002), objects=("accounts",),
                         since_s=12.0 + step)
    if i == 1:
        return Diagnosis(code="saturated", reason="backlog +840 in 60 s with 4 consumers (4 busy): 3,000/min in, 2,160/min out",
                         pids=(2001, 2002, 2003, 2004), objects=('"queuetop"."q_queue-01"',), since_s=30.0 + step)
    return Diagnosis(code="healthy", reason="keeping up", since_s=300.0 + step)


def _sample_snapshot(*, queues: int, sessions: int, tree_depth: int, step: int) -> Snapshot:
    queue_samples = tuple(
        QueueSample(
            name=f"queue-{i:02d}" if i else "orders",
            kind="reference" if i % 3 else "table",
            source="reference" if i % 3 else "table",
            table=f'"queuetop"."q_queue-{i:02d}"',
            depth=4321 * (i + 1) + step * 7,
            ready=4000 * (i + 1) + step * 5,
            in_flight=8 + i,
            delayed=0,
            dead=i * 3,
            oldest_ready_age_s=12.5 + i * 30,
            enqueued_per_s=50.0 + i,
            dequeued_per_s=48.0 + i,
            depth_is_estimate=i % 4 == 3,
            dead_tuples=1500 * i,
            live_tuples=4321 * (i + 1),
            last_vacuum_at=TAKEN_AT - timedelta(seconds=90 + i),
            last_autovacuum_at=TAKEN_AT - timedelta(seconds=90 + i),
            inserted_total=100_000 + step * 50,
            deleted_total=95_000 + step * 48,
            diagnosis=_sample_verdict(i, step),
        )
        for i in range(queues)
    )
    roots = max(1, sessions // 20)
    blocked, blockers = [], []
    pid = 1000
    per_root = max(0, (sessions - roots) // roots)
    for r in range(roots):
        root_pid = pid
        pid += 1
        blockers.append(Blocker(pid=root_pid, blocked_count=per_root, state="idle in transaction",
                                xact_age_s=120.0 + r, query=f"UPDATE accounts SET balance = balance - 1 WHERE id = {r}",
                                application="billing"))
        parents = [root_pid]
        for n in range(per_root):
            level = n % tree_depth
            parent = parents[min(level, len(parents) - 1)]
            # A row wait as the probe names it: the table and the row's ctid (the first waiter waits
            # for the holder's transaction id, the others queue on the row's tuple lock).
            blocked.append(BlockedSession(pid=pid, blocked_by=(parent,), root_blocker=root_pid, root_blockers=(root_pid,),
                                          wait_s=5.0 + n % 30,
                                          lock_type="transactionid" if level == 0 else "tuple",
                                          mode="ShareLock" if level == 0 else "ExclusiveLock",
                                          relation="accounts", row=f"(0,{r})", database="app",
                                          query=f"UPDATE accounts SET balance = balance + 1 WHERE id = {r}",
                                          application=f"worker-{n % 7}", state="active",
                                          wants=f"to update a row of accounts (0,{r})", holders=(root_pid,)))
            if len(parents) <= level + 1:
                parents.append(pid)
            pid += 1
    connections = Connections(
        total=sessions + 3, max=200,
        by_state={"active": len(blocked), "idle in transaction": roots, "idle": 3},
        by_application={"billing": roots, **{f"worker-{k}": len(blocked) // 7 for k in range(7)}},
        oldest_xact_age_s=120.0, oldest_xact_pid=1000, xmin_holder_pid=1000, xmin_holder_age_xids=5321,
        xmin_holder_application="billing",
    )
    session_samples = _session_samples(blockers, blocked, step)
    return Snapshot(
        taken_at=TAKEN_AT + timedelta(seconds=step),
        server=ServerInfo(dialect="postgresql", version="16.2", database="app", label="sample data"),
        probes={name: ProbeStatus(elapsed_ms=1.0)
                for name in ("queues", "rings", "leases", "locks", "connections", "compaction", "server_stats")},
        queues=queue_samples,
        rings=(RingSample(name="audit", capacity=40, used=40, refused_total=17),
               RingSample(name="metrics", capacity=1000, used=250, refused_total=0)),
        leases=(LeaseSample(name="relay", holder="relay-1", token=7, expires_in_s=3600.0, state="held"),
                LeaseSample(name="compactor", holder="host-b", token=3, expires_in_s=-42.0, state="expired"),
                LeaseSample(name="reports", holder=None, token=2, expires_in_s=None, state="free")),
        blocked=tuple(blocked),
        blockers=tuple(blockers),
        connections=connections,
        compaction=(CompactionSample(
            name="task_status", pending_deltas=1234 + step, groups=3, last_run_at=TAKEN_AT - timedelta(seconds=4),
            last_duration_ms=6.5, last_rows_folded=980, runs_total=57,
            by_group=(CompactionGroup(group=12, title="spring survey", pending_deltas=1000 + step),
                      CompactionGroup(group=7, title="onboarding", pending_deltas=200),
                      CompactionGroup(group=3, title="nps", pending_deltas=34)),
        ),),
        sessions=session_samples,
        sessions_total=len(session_samples),
        sessions_in_order=True,
        server_stats=_sample_server_stats(step),
        extra={"connected": True},
    )


def _session_samples(blockers: list[Blocker], blocked: list[BlockedSession], step: int) -> tuple[SessionSample, ...]:
    """The sessions view's rows for the sample's lock tree, in the probe's order (the oldest
    transaction first, then the longest query or idle time, then the pid): the idle-in-transaction
    roots (the first holds the xmin horizon), the sessions they block, three idle ones and the
    autovacuum launcher."""
    rows = [SessionSample(pid=b.pid, database="app", user="billing", application=b.application, client="10.0.4.17",
                          backend_type="client backend", state=b.state, xact_age_s=(b.xact_age_s or 0.0) + step,
                          query_age_s=100.0 + step, wait_event_type="Client", wait_event="ClientRead",
                          xmin_holder=i == 0, query=b.query) for i, b in enumerate(blockers)]
    rows.sort(key=lambda row: -(row.xact_age_s or 0.0))
    rows += [SessionSample(pid=b.pid, database="app", user="worker", application=b.application, client="10.0.4.23",
                           backend_type="client backend", state=b.state, xact_age_s=(b.wait_s or 0.0) + step,
                           query_age_s=(b.wait_s or 0.0) + step, wait_event_type="Lock",
                           wait_event="transactionid" if b.lock_type == "transactionid" else "tuple",
                           blocked_by=b.blocked_by, query=b.query)
             for b in sorted(blocked, key=lambda b: (-(b.wait_s or 0.0), b.pid))]
    rows += [SessionSample(pid=900 + n, database="app", user="web", application="web", client="local",
                           backend_type="client backend", state="idle", xact_age_s=None, query_age_s=3.0 * (n + 1),
                           wait_event_type="Client", wait_event="ClientRead", query="SELECT id, status FROM orders WHERE id = $1")
             for n in reversed(range(3))]  # as the probe sends them: the longest idle first
    rows.append(SessionSample(pid=42, database=None, user=None, application="", client=None,
                              backend_type="autovacuum launcher", state=None, xact_age_s=None, query_age_s=None,
                              wait_event_type="Activity", wait_event="AutoVacuumMain", query=""))
    # queuetop's own probe session (the Sessions list hides it, and the launcher, until A).
    rows.append(SessionSample(pid=43, database="app", user="postgres", application="queuetop-probe", client="local",
                              backend_type="client backend", state="active", xact_age_s=None, query_age_s=None,
                              wait_event_type=None, wait_event=None, query="SELECT pid, state FROM pg_stat_activity"))
    # Each backend started an hour before the sample (its pid's seconds apart): the same session
    # from one step to the next, its identity (pid, backend_start) unchanged.
    return tuple(replace(row, backend_start=TAKEN_AT - timedelta(hours=1, seconds=row.pid)) for row in rows)


@cache
def _queued_ahead(first: int, waiters: int) -> list[tuple[int, ...]]:
    """Each pile-up waiter's blockers as pg_blocking_pids names them (every one queued ahead),
    made once for every step's snapshot: a pile-up of 2,000 holds two million of them."""
    pids = tuple(range(first, first + waiters))
    return [pids[:k] for k in range(waiters)]


def pileup_snapshot(*, waiters: int = 2000, chain: int = 50, step: int = 0) -> Snapshot:
    """The worst minute: `waiters` sessions updating one row behind an idle-in-transaction holder,
    as PostgreSQL reports them (the first waits for the holder's transaction id; each other
    queues on the row's tuple lock, and pg_blocking_pids names every one queued ahead of it: as
    many waits as pairs), beside a chain `chain` deep (each session waiting for the row the one
    before it updated), on the sample's other panels. `step` moves the waits on."""
    base = _sample_snapshot(queues=4, sessions=12, tree_depth=3, step=step)
    holder, first = 50_000, 50_001
    pids = list(range(first, first + waiters))
    query = "UPDATE accounts SET balance = balance - 1 WHERE id = 7"
    queued = _queued_ahead(first, waiters)
    blocked: list[BlockedSession] = []
    for k, pid in enumerate(pids):
        blocked.append(BlockedSession(
            pid=pid, blocked_by=(holder,) if k == 0 else queued[k], root_blocker=holder, root_blockers=(holder,),
            wait_s=float(step + waiters - k) / 10, lock_type="transactionid" if k == 0 else "tuple",
            mode="ShareLock" if k == 0 else "ExclusiveLock", relation="accounts", row="(0,7)", database="app", query=query,
            application="checkout", state="active", wants="to update a row of accounts (0,7)", holders=(holder,)))
    chain_root = 60_000
    for depth in range(1, chain + 1):
        pid = chain_root + depth
        blocked.append(BlockedSession(
            pid=pid, blocked_by=(pid - 1,), root_blocker=chain_root, root_blockers=(chain_root,), wait_s=float(step + chain - depth),
            lock_type="transactionid", mode="ShareLock", relation="ledger", row=f"(3,{depth})", database="app",
            query=f"UPDATE ledger SET total = total + 1 WHERE id IN ({depth}, {depth + 1})", application="ledger-sync",
            state="active", wants=f"to update a row of ledger (3,{depth})", holders=(pid - 1,)))
    blockers = (
        Blocker(pid=holder, blocked_count=waiters, blocked_processes=waiters, state="idle in transaction",
                xact_age_s=300.0 + step, query=query, application="admin-console"),
        Blocker(pid=chain_root, blocked_count=chain, blocked_processes=chain, state="idle in transaction",
                xact_age_s=200.0 + step, query="UPDATE ledger SET total = 0 WHERE id = 1", application="ledger-sync"),
    )
    return replace(base, blocked=tuple(blocked), blockers=blockers,
                   sessions=_session_samples(list(blockers), blocked, step)[:500], sessions_total=waiters + chain + 6)


class SampleSource:
    """A SnapshotSource that hands out prepared snapshots: one on start and on each refresh."""

    def __init__(self, sink: Callable[[Snapshot], None], snapshots: list[Snapshot] | None = None, interval_s: float = 2.0) -> None:
        self.sink = sink
        self.snapshots = snapshots or [sample_snapshot()]
        self.interval_s = interval_s
        self.paused = False
        self.started = self.stopped = False
        self._next = 0
        self._lock = threading.Lock()

    def _emit(self) -> None:
        with self._lock:
            snapshot = self.snapshots[min(self._next, len(self.snapshots) - 1)]
            self._next += 1
        self.sink(snapshot)

    def start(self) -> None:
        self.started = True
        self._emit()

    def stop(self) -> None:
        self.stopped = True

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False

    def refresh_now(self) -> None:
        if not self.paused:
            self._emit()

    def set_interval(self, seconds: float) -> None:
        self.interval_s = seconds
