"""Leases, in every dialect (conformance suite: `engine_db` runs each test on PostgreSQL, and on
SQL Server when QUEUETOP_MSSQL_DSN is set): compare-and-swap acquire on the database clock,
fencing tokens, expiry takeover, renew and release only by the holder (and under its token)."""

from __future__ import annotations

import threading

import pytest

from dbcore.errors import LeaseHeld, UsageError
from queues import lease

from .conftest import wait_until

pytestmark = pytest.mark.matrix  # the server matrix runs these on every supported major

LONG = 60.0  # a ttl no test outlives
SHORT = 0.3


def try_acquire(conn, name, holder, ttl):
    try:
        return lease.acquire(conn, name, holder, ttl)
    except LeaseHeld:
        return None


def wait_expired(conn, name):
    wait_until(
        lambda: (state := lease.describe(conn, name)) is not None and state.expires_in_s <= 0,
        timeout=5,
        what=f"lease {name} to expire",
    )


def test_acquire_of_a_new_lease_returns_token_1(engine_db):
    with engine_db.connect() as conn:
        assert lease.describe(conn, "relay") is None
        assert lease.acquire(conn, "relay", "a", LONG) == 1
        state = lease.describe(conn, "relay")
        assert (state.holder, state.token) == ("a", 1)
        assert 0 < state.expires_in_s <= LONG


def test_same_holder_reacquiring_keeps_its_token_and_extends(engine_db):
    with engine_db.connect() as conn:
        assert lease.acquire(conn, "relay", "a", 5) == 1
        assert lease.acquire(conn, "relay", "a", LONG) == 1
        state = lease.describe(conn, "relay")
        assert (state.holder, state.token) == ("a", 1)
        assert state.expires_in_s > 5


def test_another_holder_is_refused_while_held(engine_db):
    with engine_db.connect() as conn, engine_db.connect() as other:
        lease.acquire(conn, "relay", "a", LONG)
        with pytest.raises(LeaseHeld, match="held by 'a'"):
            lease.acquire(other, "relay", "b", LONG)
        state = lease.describe(conn, "relay")
        assert (state.holder, state.token) == ("a", 1)


def acquire_race(engine_db, name, contenders=16):
    barrier = threading.Barrier(contenders)
    results: dict[str, object] = {}
    lock = threading.Lock()

    def contend(holder):
        with engine_db.connect() as conn:
            try:
                barrier.wait(timeout=30)
                outcome: object = lease.acquire(conn, name, holder, LONG)
            except LeaseHeld as exc:
                outcome = exc
            except BaseException as exc:  # reported below as an unexpected outcome
                outcome = exc
            with lock:
                results[holder] = outcome

    threads = [threading.Thread(target=contend, args=(f"holder-{i}",)) for i in range(contenders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(results) == contenders
    winners = {h: tok for h, tok in results.items() if isinstance(tok, int)}
    losers = [r for r in results.values() if isinstance(r, LeaseHeld)]
    unexpected = [r for r in results.values() if not isinstance(r, (int, LeaseHeld))]
    assert unexpected == []
    return winners, losers


def assert_single_winner(engine_db, name, expected_token):
    """Race 16 acquirers: exactly one wins, with `expected_token`, and the table agrees."""
    winners, losers = acquire_race(engine_db, name)
    assert len(winners) == 1 and len(losers) == 15
    ((holder, token),) = winners.items()
    assert token == expected_token
    with engine_db.connect() as conn:
        state = lease.describe(conn, name)
        assert (state.holder, state.token) == (holder, expected_token)


def test_concurrent_acquirers_of_a_new_lease_exactly_one_wins(engine_db):
    assert_single_winner(engine_db, "relay", 1)


def test_concurrent_takeover_of_an_expired_lease_exactly_one_wins(engine_db):
    with engine_db.connect() as conn:
        lease.acquire(conn, "relay", "old", SHORT)
        wait_expired(conn, "relay")
    assert_single_winner(engine_db, "relay", 2)


def test_concurrent_acquirers_of_a_released_lease_exactly_one_wins(engine_db):
    with engine_db.connect() as conn:
        lease.acquire(conn, "relay", "old", LONG)
        lease.release(conn, "relay", "old")
    assert_single_winner(engine_db, "relay", 2)


def test_expired_lease_is_taken_over_with_next_token(engine_db):
    with engine_db.connect() as a, engine_db.connect() as b:
        first = lease.acquire(a, "relay", "a", SHORT)
        with pytest.raises(LeaseHeld):
            lease.acquire(b, "relay", "b", LONG)  # not yet expired
        second = wait_until(lambda: try_acquire(b, "relay", "b", LONG), timeout=5, what="takeover")
        assert second == first + 1
        state = lease.describe(a, "relay")
        assert (state.holder, state.token) == ("b", second)
        # The old holder lost it: it can neither renew, release nor re-take it.
        with pytest.raises(LeaseHeld, match="held by 'b'"):
            lease.renew(a, "relay", "a", LONG)
        with pytest.raises(LeaseHeld, match="held by 'b'"):
            lease.release(a, "relay", "a")
        with pytest.raises(LeaseHeld):
            lease.acquire(a, "relay", "a", LONG)
        assert lease.describe(a, "relay").holder == "b"


def test_fencing_token_grows_strictly_over_handovers(engine_db):
    with engine_db.connect() as conn:
        tokens = [lease.acquire(conn, "relay", "a", LONG)]
        lease.release(conn, "relay", "a")
        tokens.append(lease.acquire(conn, "relay", "b", SHORT))
        tokens.append(wait_until(lambda: try_acquire(conn, "relay", "c", SHORT), timeout=5, what="takeover by c"))
        tokens.append(wait_until(lambda: try_acquire(conn, "relay", "a", LONG), timeout=5, what="takeover by a"))
        lease.release(conn, "relay", "a")
        tokens.append(lease.acquire(conn, "relay", "a", LONG))  # same holder after release: new token
        assert tokens == [1, 2, 3, 4, 5]


def test_renew_and_release_only_by_the_holder(engine_db):
    with engine_db.connect() as conn:
        token = lease.acquire(conn, "relay", "a", 5)
        with pytest.raises(LeaseHeld, match="held by 'a'"):
            lease.renew(conn, "relay", "b", LONG)
        with pytest.raises(LeaseHeld, match="held by 'a'"):
            lease.release(conn, "relay", "b")
        state = lease.describe(conn, "relay")
        assert (state.holder, state.token) == ("a", token) and state.expires_in_s <= 5
        assert lease.renew(conn, "relay", "a", LONG) == token
        assert lease.describe(conn, "relay").expires_in_s > 5
        assert lease.release(conn, "relay", "a") == token
        assert lease.describe(conn, "relay").holder is None


def test_renew_and_release_with_a_stale_token_are_refused(engine_db):
    with engine_db.connect() as conn:
        stale = lease.acquire(conn, "relay", "a", LONG)
        lease.release(conn, "relay", "a")
        current = lease.acquire(conn, "relay", "a", 5)
        assert current == stale + 1
        with pytest.raises(LeaseHeld, match=f"under token {current}"):
            lease.renew(conn, "relay", "a", LONG, token=stale)
        with pytest.raises(LeaseHeld, match=f"under token {current}"):
            lease.release(conn, "relay", "a", token=stale)
        with pytest.raises(LeaseHeld):
            lease.renew(conn, "relay", "a", LONG, token=current + 1)
        state = lease.describe(conn, "relay")
        assert (state.holder, state.token) == ("a", current) and state.expires_in_s <= 5  # not renewed
        assert lease.renew(conn, "relay", "a", LONG, token=current) == current
        assert lease.release(conn, "relay", "a", token=current) == current
        assert lease.describe(conn, "relay").holder is None


def test_expired_lease_not_taken_over_can_be_renewed_by_its_holder(engine_db):
    with engine_db.connect() as conn:
        token = lease.acquire(conn, "relay", "a", SHORT)
        wait_expired(conn, "relay")
        assert lease.renew(conn, "relay", "a", LONG, token=token) == token
        state = lease.describe(conn, "relay")
        assert (state.holder, state.token) == ("a", token) and state.expires_in_s > 1
        with pytest.raises(LeaseHeld):
            lease.acquire(conn, "relay", "b", LONG)  # held again


def test_release_makes_it_free_and_next_acquire_gets_next_token(engine_db):
    with engine_db.connect() as conn, engine_db.connect() as other:
        token = lease.acquire(conn, "relay", "a", LONG)
        assert lease.release(conn, "relay", "a") == token
        state = lease.describe(conn, "relay")
        assert (state.holder, state.token, state.expires_in_s) == (None, token, None)
        # Released leases cannot be renewed or released again.
        with pytest.raises(LeaseHeld, match="free"):
            lease.renew(conn, "relay", "a", LONG)
        with pytest.raises(LeaseHeld, match="free"):
            lease.release(conn, "relay", "a")
        assert lease.acquire(other, "relay", "b", LONG) == token + 1


def test_renew_or_release_of_an_unknown_lease_is_refused(engine_db):
    with engine_db.connect() as conn:
        with pytest.raises(LeaseHeld):
            lease.renew(conn, "ghost", "a", LONG)
        with pytest.raises(LeaseHeld):
            lease.release(conn, "ghost", "a")
        assert lease.describe(conn, "ghost") is None


@pytest.mark.parametrize(
    "name, holder, ttl",
    [('x"; drop table y; --', "a", 1.0), ("ok", "", 1.0), ("ok", "bad\nholder", 1.0), ("ok", "a", 0.0), ("ok", "a", -1.0)],
)
def test_invalid_input_is_a_usage_error_before_sql(engine_db, name, holder, ttl):
    with engine_db.connect() as conn:
        with pytest.raises(UsageError):
            lease.acquire(conn, name, holder, ttl)
        assert conn.execute("SELECT count(*) FROM queuetop.leases").fetchone()[0] == 0
