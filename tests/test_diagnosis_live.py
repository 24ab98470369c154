"""Queue verdicts on a real server (issue 29): the engine's queue with ready messages and nobody
on its table, and a consumer blocked behind a session that locked the table and went idle in
its transaction. What the verdict names is checked against what the test built: the blocker's
own pid, the waiting consumer's."""

from __future__ import annotations

import pytest

from probes.diagnosis import Diagnoser
from probes.sampler import run_cycle
from queues.table_queue import TableQueue

from .conftest import wait_until
from .test_conformance_probes import IDLE_WITH_OPEN_TRANSACTION, Waiter

pytestmark = pytest.mark.matrix  # the server matrix runs these on every supported major


def verdict_of(snapshot, name):
    (queue,) = [q for q in snapshot.queues if q.name == name and q.source == "reference"]
    return queue


def test_ready_messages_with_nobody_on_the_table_are_no_consumers(engine_db):
    with engine_db.connect() as conn:
        queue = TableQueue.create(conn, "orphan")
        for n in range(3):
            queue.enqueue(conn, f'{{"n": {n}}}')
    diagnoser = Diagnoser()
    first = verdict_of(run_cycle(engine_db.target, diagnoser=diagnoser), "orphan")
    assert first.diagnosis.code == "healthy" and first.consumers == ()  # one sample is not evidence
    second = verdict_of(run_cycle(engine_db.target, diagnoser=diagnoser), "orphan")
    assert second.diagnosis.code == "no-consumers", second.diagnosis
    assert "3 ready" in second.diagnosis.reason and second.diagnosis.since_s is not None and second.diagnosis.since_s >= 0


def test_a_consumer_waiting_behind_an_idle_transaction_is_blocked_by_it(engine_db):
    with engine_db.connect() as conn:
        queue = TableQueue.create(conn, "stuck")
        queue.enqueue(conn, '{"n": 1}')
    blocker = engine_db.connect()
    try:
        with blocker.transaction():
            blocker.execute(queue.statement_for(blocker, "block_table"))  # then does nothing: idle, transaction open
            waiter = Waiter(engine_db, lambda s: queue.claim(s, visibility_s=30))
            wait_until(lambda: run_cycle(engine_db.target).blocked, timeout=20, what="the consumer blocked")
            diagnoser = Diagnoser()
            snapshots = [run_cycle(engine_db.target, diagnoser=diagnoser) for _ in range(2)]
            stuck = verdict_of(snapshots[-1], "stuck")
            roots = {b.pid: b for b in snapshots[-1].blockers}
            (waiting,) = [b for b in snapshots[-1].blocked if b.root_blocker in roots]
            assert stuck.diagnosis.code == "blocked", stuck.diagnosis
            assert stuck.diagnosis.pids[0] == waiting.root_blocker  # the root blocker first
            assert waiting.pid in stuck.diagnosis.pids
            assert IDLE_WITH_OPEN_TRANSACTION[engine_db.dialect] in stuck.diagnosis.reason
            consumer = next(c for c in stuck.consumers if c.pid == waiting.pid)
            assert consumer.waiting and consumer.evidence == "lock"
    finally:
        blocker.close()
    waiter.finish()
