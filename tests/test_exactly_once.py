"""Pattern 4 against a real PostgreSQL: every race the inbox/outbox-with-claims design closes,
each as its own test, with the naive "check the inbox, then process" variant shown failing the
same interleavings; crashes of a real receiving process at every step. The first test and the
scenario are conformance tests: on SQL Server too when QUEUETOP_MSSQL_DSN is set."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

import pytest

from queues.exactly_once import RECEIVE_STEPS, Endpoint, Outgoing, Signal, signal_queue

from .conftest import REPO, wait_until

SENDER, RECEIVER, SINK = "eo-sender", "eo-receiver", "eo-sink"


def effects(db, endpoint=RECEIVER) -> int:
    with db.connect() as conn:
        return conn.execute("SELECT count(*) FROM queuetop.eo_effects WHERE endpoint = %(e)s", {"e": endpoint}).fetchone()[0]


def leftovers(db) -> tuple[int, int, int]:
    with db.connect() as conn:
        return conn.execute(
            "SELECT (SELECT count(*) FROM queuetop.eo_inbox), (SELECT count(*) FROM queuetop.eo_outbox),"
            " (SELECT count(*) FROM queuetop.eo_payloads)"
        ).fetchone()


def send_one(db, body='{"order": 1}') -> Signal:
    """The sender's business operation and dispatch; returns the signal the receiver got."""
    with db.connect() as conn:
        Endpoint(SENDER).send(conn, [Outgoing(RECEIVER, body)])
        [message] = signal_queue(conn, RECEIVER).claim(conn, visibility_s=60)
    return Signal.from_json(message.body)


def deliver(db, sig: Signal, *, variant="claims", hook=None, handler=None) -> str:
    from queues.exactly_once import Duplicate

    with db.connect() as conn:
        try:
            return Endpoint(RECEIVER, handler, variant=variant, hook=hook).handle(conn, sig)
        except Duplicate:
            return "duplicate"


def run_concurrently(*calls):
    results, errors = [None] * len(calls), []

    def run(i, call):
        try:
            results[i] = call()
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    return results


def test_one_message_one_effect_and_nothing_left(engine_db):
    db = engine_db
    sig = send_one(db)
    assert deliver(db, sig) == "processed"
    assert deliver(db, sig) == "duplicate"  # the same signal again, late
    assert effects(db) == 1
    assert leftovers(db) == (0, 0, 0)


@pytest.mark.parametrize(("variant", "expected_effects"), [("claims", 1), ("naive", 2)])
def test_two_copies_arriving_at_once(db, variant, expected_effects):
    sig = send_one(db)
    both_checked = threading.Barrier(2, timeout=10)

    def hook(step):
        if step == "process":  # both copies have passed their check / claim
            both_checked.wait()

    outcomes = run_concurrently(lambda: deliver(db, sig, variant=variant, hook=hook),
                                lambda: deliver(db, sig, variant=variant, hook=hook))
    assert effects(db) == expected_effects
    if variant == "claims":
        # Both copies share one outbox record and one claim; one business transaction commits.
        assert sorted(outcomes) == ["processed", "resumed"]
        assert leftovers(db) == (0, 0, 0)


def test_copy_arriving_after_the_first_finished_but_before_cleanup(db):
    sig = send_one(db)
    paused, go = threading.Event(), threading.Event()

    def first_hook(step):
        if step == "inbox.delete":  # processed and committed; clean-up not started
            paused.set()
            assert go.wait(10)

    first = threading.Thread(target=lambda: deliver(db, sig, hook=first_hook))
    first.start()
    assert paused.wait(10)
    assert deliver(db, sig) == "resumed"  # it sees the processed record and only cleans up
    go.set()
    first.join(10)
    assert effects(db) == 1 and leftovers(db) == (0, 0, 0)
    assert deliver(db, sig) == "duplicate"  # after the clean-up: no inbox record to claim
    assert effects(db) == 1 and leftovers(db) == (0, 0, 0)  # and its claim attempt left nothing


def test_naive_copy_that_checked_before_the_first_cleaned_up_processes_again(db):
    sig = send_one(db)
    checked, go = threading.Event(), threading.Event()

    def second_hook(step):
        if step == "process":  # it saw the inbox record
            checked.set()
            assert go.wait(10)

    second = threading.Thread(target=lambda: deliver(db, sig, variant="naive", hook=second_hook))
    second.start()
    assert checked.wait(10)
    assert deliver(db, sig, variant="naive") == "processed"  # the first copy, start to finish
    go.set()
    second.join(10)
    assert effects(db) == 2  # the race the claim closes


def test_claims_copy_that_read_the_record_before_the_first_cleaned_up_does_not_process_again(db):
    sig = send_one(db)
    at_claim, go = threading.Event(), threading.Event()

    def second_hook(step):
        if step == "claim":  # it found (or made) the record in state claimed
            at_claim.set()
            assert go.wait(10)

    outcome = []
    second = threading.Thread(target=lambda: outcome.append(deliver(db, sig, hook=second_hook)))
    second.start()
    assert at_claim.wait(10)
    assert deliver(db, sig) == "processed"
    go.set()
    second.join(10)
    assert outcome == ["duplicate"] and effects(db) == 1 and leftovers(db) == (0, 0, 0)


def test_late_create_from_a_lost_attempt_validates_nothing(db, monkeypatch):
    lost = []
    real_create = Endpoint.create_inbox_record

    def losing_create(conn, destination, attempt_id, message_id):
        lost.append((destination, attempt_id, message_id))
        raise ConnectionError("request lost between the routers")

    with db.connect() as conn:
        sender = Endpoint(SENDER)
        monkeypatch.setattr(Endpoint, "create_inbox_record", staticmethod(losing_create))
        with pytest.raises(ConnectionError):
            sender.send(conn, [Outgoing(RECEIVER, '{"order": 7}')])
        monkeypatch.setattr(Endpoint, "create_inbox_record", staticmethod(real_create))
        assert sender.recover(conn) == 1  # the retry: fresh attempt ids, persisted, then signalled
        [message] = signal_queue(conn, RECEIVER).claim(conn, visibility_s=60)
    sig = Signal.from_json(message.body)
    [(destination, lost_attempt, message_id)] = lost
    assert sig.attempt_id != lost_attempt and sig.message_id == message_id
    assert deliver(db, sig) == "processed"
    with db.connect() as conn:
        real_create(conn, destination, lost_attempt, message_id)  # the lost create arrives, late
    assert deliver(db, sig) == "duplicate"  # the signal redelivered: no valid inbox record for it
    assert effects(db) == 1
    assert leftovers(db) == (1, 0, 0)  # only the orphan of the lost attempt


def test_two_dispatchers_of_one_record_send_one_attempt(db):
    with db.connect() as conn:
        operation = Endpoint(SENDER).send(conn, [Outgoing(RECEIVER, "{}")], dispatch=False)
    barrier = threading.Barrier(2, timeout=10)

    def dispatch():
        with db.connect() as conn:
            return Endpoint(SENDER, hook=lambda step: step == "dispatch" and barrier.wait()).dispatch(conn, operation)

    run_concurrently(dispatch, dispatch)
    with db.connect() as conn:
        signals = [Signal.from_json(m.body) for m in signal_queue(conn, RECEIVER).claim(conn, visibility_s=60, batch=10)]
    assert len(signals) == 2 and len({s.attempt_id for s in signals}) == 1  # the winner's ids only
    assert [deliver(db, s) for s in signals] == ["processed", "duplicate"]
    assert effects(db) == 1


def test_large_body_travels_as_a_payload_reference(db):
    body = '{"blob": "' + "x" * 5000 + '"}'
    sig = send_one(db, body)
    assert sig.payload is not None and sig.body is None
    seen = []
    assert deliver(db, sig, handler=lambda conn, mid, b: seen.append(b) or ()) == "processed"
    assert seen == [body] and leftovers(db) == (0, 0, 0)


CRASHING_RECEIVER = """
import os, signal, sys
import psycopg
from queues.exactly_once import Endpoint, Outgoing, record_effect, signal_queue
step = sys.argv[2]
def hook(s):
    if s == step:
        os.kill(os.getpid(), signal.SIGKILL)
def handler(conn, message_id, body):
    record_effect("eo-receiver")(conn, message_id, body)
    return [Outgoing("eo-sink", body, message_id=message_id[:-4] + "0000")]
with psycopg.connect(sys.argv[1], autocommit=True) as conn:
    queue = signal_queue(conn, "eo-receiver")
    [message] = queue.claim(conn, visibility_s=0.5)
    Endpoint("eo-receiver", handler, hook=hook).receive(conn, queue, message)
print("survived", flush=True)
"""


@pytest.mark.parametrize("step", RECEIVE_STEPS)
def test_receiver_killed_at_each_step_processes_exactly_once(db, step):
    with db.connect() as conn:
        Endpoint(SENDER).send(conn, [Outgoing(RECEIVER, '{"order": 3}')])
    proc = subprocess.run([sys.executable, "-c", CRASHING_RECEIVER, db.dsn, step], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr  # a real crash, at that step

    def handler(conn, message_id, body):
        from queues.exactly_once import record_effect

        record_effect(RECEIVER)(conn, message_id, body)
        return [Outgoing(SINK, body, message_id=message_id[:-4] + "0000")]

    receiver, sink = Endpoint(RECEIVER, handler), Endpoint(SINK)
    with db.connect() as conn:
        queue, sink_queue = signal_queue(conn, RECEIVER), signal_queue(conn, SINK)
        # The signal comes back when the dead receiver's claim expires.
        [message] = wait_until(lambda: queue.claim(conn, visibility_s=30), timeout=10, what="the signal redelivered")
        receiver.receive(conn, queue, message)
        for message in sink_queue.claim(conn, visibility_s=30, batch=10):  # one, or two after a crash at send
            sink.receive(conn, sink_queue, message)
        assert not queue.has_messages(conn) and not sink_queue.has_messages(conn)
    assert effects(db, RECEIVER) == 1 and effects(db, SINK) == 1
    assert leftovers(db) == (0, 0, 0)


# -- the scenario: real processes, random crash points, duplicates --------------------------


@pytest.mark.parametrize("seed", [pytest.param(1, marks=pytest.mark.matrix), 2, 3])  # the matrix: one seed
def test_scenario_claims_exactly_once_at_random_crash_points(engine_db, seed):
    db = engine_db
    from queues.scenarios.exactly_once import ExactlyOnceScenario

    result = ExactlyOnceScenario(db.target, messages=80, duplicate_rate=0.4, crash_rate=0.15, receivers=3,
                                 visibility_s=0.3, seed=seed).run()
    assert result["crashes"] > 0 and result["duplicates_delivered"] > 0
    assert result["deliveries"] >= result["messages"] + result["duplicates_delivered"]
    assert result["side_effects"] == result["messages"] == 80
    assert result["lost"] == 0 and result["duplicate_effects"] == 0
    assert result["inbox_left"] == 0 and result["outbox_left"] == 0
    with db.connect() as conn:  # the run cleaned up after itself
        assert conn.execute("SELECT count(*) FROM queuetop.eo_effects").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM queuetop.queues WHERE name LIKE 'eo.%'").fetchone()[0] == 0


def test_scenario_naive_lets_duplicates_through(db, cli):
    result = cli("engine", "scenario", "exactly-once", "--dsn", db.dsn, "--messages", "100", "--duplicate-rate", "0.5",
                 "--crash-rate", "0.2", "--variant", "naive", "--receivers", "3", "--visibility", "0.3",
                 "--seed", "7", "--json")
    assert result.returncode == 0, result.stderr
    [line] = result.json_lines()
    for key in ("messages", "deliveries", "duplicates_delivered", "crashes", "side_effects", "lost"):
        assert key in line
    assert line["variant"] == "naive" and line["messages"] == 100
    assert line["side_effects"] > line["messages"] and line["duplicate_effects"] > 0


def test_scenario_bad_options_are_one_line(db, cli):
    result = cli("engine", "scenario", "exactly-once", "--dsn", db.dsn, "--crash-rate", "1.5", "--json")
    assert result.returncode == 2 and "argument --crash-rate: '1.5' must be between 0 and 0.99" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and result.stdout == ""


def test_recover_dispatches_the_senders_operations_only(db):
    with db.connect() as conn:
        sender = Endpoint(SENDER)
        # The sender "crashed" between its business transaction and the dispatch.
        sender.send(conn, [Outgoing(RECEIVER, "{}")], dispatch=False)
        assert sender.recover(conn) == 1 and sender.recover(conn) == 0
        [message] = signal_queue(conn, RECEIVER).claim(conn, visibility_s=60)
    sig = Signal.from_json(message.body)

    def stop_after_processing(step):
        if step == "dispatch":
            raise KeyboardInterrupt  # the receiver dies with its record processed, inbox claimed

    with pytest.raises(KeyboardInterrupt):
        deliver(db, sig, hook=stop_after_processing)
    with db.connect() as conn:
        assert Endpoint(RECEIVER).recover(conn) == 0  # an incoming message's record: not recover's
    assert deliver(db, sig) == "resumed"  # the redelivered signal finishes it, inbox first
    assert effects(db) == 1 and leftovers(db) == (0, 0, 0)


def test_one_large_message_to_two_destinations_each_gets_its_payload(db):
    body = '{"blob": "' + "y" * 2000 + '"}'
    with db.connect() as conn:
        with pytest.raises(ValueError):  # one record, one id per outgoing message
            Endpoint(SENDER).send(conn, [Outgoing(RECEIVER, body, message_id="m"), Outgoing(SINK, body, message_id="m")])
        Endpoint(SENDER).send(conn, [Outgoing(RECEIVER, body), Outgoing(SINK, body)])
        signals = {name: Signal.from_json(signal_queue(conn, name).claim(conn, visibility_s=60)[0].body)
                   for name in (RECEIVER, SINK)}
    assert signals[RECEIVER].payload != signals[SINK].payload
    from queues.exactly_once import Duplicate

    for name, sig in signals.items():
        with db.connect() as conn:
            try:
                assert Endpoint(name).handle(conn, sig) == "processed"
            except Duplicate:
                raise AssertionError(f"{name} saw its message as a duplicate") from None
    assert effects(db, RECEIVER) == effects(db, SINK) == 1
    assert leftovers(db) == (0, 0, 0)
