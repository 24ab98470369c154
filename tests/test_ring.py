"""Ring buffer semantics: creation, refusal when full (all or nothing), FIFO across wrap-around
with byte-exact bodies, concurrent producers and consumers, rolled-back and still-open writers,
and the no-INSERT/no-DELETE steady state. The tests that take `engine_db` are the conformance
suite's (PostgreSQL, and SQL Server when QUEUETOP_MSSQL_DSN is set); the others use psycopg's
own transaction control or PostgreSQL's statistics and run there only."""

from __future__ import annotations

import json
import threading
import time

import pytest

from dbcore.dialect import dialect_of
from dbcore.errors import RingFull, UsageError
from queues import ring

from .conftest import flush_stats, wait_until

pytestmark = pytest.mark.matrix  # the server matrix runs these on every supported major

# A ring's cells, read by the tests in each dialect's SQL.
RING_CELLS = {
    "postgresql": """SELECT c.cell, c.is_full, c.seq, c.put_at, c.body::text
                     FROM queuetop.ring_cells c JOIN queuetop.rings r ON r.id = c.ring_id
                     WHERE r.name = %(name)s ORDER BY c.cell""",
    "mssql": """SELECT c.cell, c.is_full, c.seq, c.put_at, c.body
                FROM queuetop.ring_cells AS c JOIN queuetop.rings AS r ON r.id = c.ring_id
                WHERE r.name = %(name)s ORDER BY c.cell""",
}


def ring_rows(conn, name="r"):
    """Everything a put could change except refused_total: the cells, head and tail."""
    cells = [tuple(row) for row in conn.execute(RING_CELLS[dialect_of(conn).name], {"name": name}).fetchall()]
    state = ring.describe(conn, name)
    return cells, state.head, state.tail


# -- creation -----------------------------------------------------------------------------


def test_create_makes_capacity_empty_cells(db):
    with db.connect() as conn:
        state = ring.create(conn, "r", 5)
        assert (state.name, state.capacity, state.used, state.refused_total) == ("r", 5, 0, 0)
        cells = conn.execute("SELECT cell, is_full FROM queuetop.ring_cells ORDER BY cell").fetchall()
        assert cells == [(c, False) for c in range(5)]


def test_create_is_idempotent_with_same_capacity(db):
    with db.connect() as conn:
        ring.create(conn, "r", 3)
        ring.put(conn, "r", ['{"x": 1}'])
        again = ring.create(conn, "r", 3)
        assert (again.capacity, again.used) == (3, 1)  # the existing ring, contents kept
        assert conn.execute("SELECT count(*) FROM queuetop.rings").fetchone()[0] == 1
        assert conn.execute("SELECT count(*) FROM queuetop.ring_cells").fetchone()[0] == 3


def test_create_with_different_capacity_is_a_usage_error(db):
    with db.connect() as conn:
        ring.create(conn, "r", 3)
        with pytest.raises(UsageError, match="capacity 3"):
            ring.create(conn, "r", 4)
        assert ring.describe(conn, "r").capacity == 3
        assert conn.execute("SELECT count(*) FROM queuetop.ring_cells").fetchone()[0] == 3


@pytest.mark.parametrize("capacity", [0, -1, ring.MAX_CAPACITY + 1])
def test_create_rejects_out_of_range_capacity(db, capacity):
    with db.connect() as conn:
        with pytest.raises(UsageError, match="--capacity"):
            ring.create(conn, "r", capacity)
        assert conn.execute("SELECT count(*) FROM queuetop.rings").fetchone()[0] == 0


# -- full ring: refusal, nothing written ----------------------------------------------------


def test_put_until_full_then_refused_with_nothing_written(engine_db):
    with engine_db.connect() as conn:
        ring.create(conn, "r", 4)
        firsts = [ring.put(conn, "r", [json.dumps({"n": n})]) for n in range(4)]
        assert firsts == [0, 1, 2, 3]
        before = ring_rows(conn)
        with pytest.raises(RingFull, match="full"):
            ring.put(conn, "r", ['{"n": 99}'])
        assert ring_rows(conn) == before
        state = ring.describe(conn, "r")
        assert (state.used, state.refused_total) == (4, 1)
        # Still full after another refusal, and the counter keeps counting.
        with pytest.raises(RingFull):
            ring.put(conn, "r", ['{"n": 100}'])
        assert ring.describe(conn, "r").refused_total == 2
        assert [json.loads(i.body)["n"] for i in ring.take(conn, "r", 10)] == [0, 1, 2, 3]


def test_multi_put_that_does_not_fit_is_refused_entirely(engine_db):
    with engine_db.connect() as conn:
        ring.create(conn, "r", 4)
        ring.put(conn, "r", ['"a"', '"b"'])
        before = ring_rows(conn)
        with pytest.raises(RingFull):
            ring.put(conn, "r", ['"c"', '"d"', '"e"'])  # 3 do not fit in the 2 free cells
        assert ring_rows(conn) == before
        state = ring.describe(conn, "r")
        assert state.used == 2 and state.refused_total > 0
        # What does fit still goes in, in order after the refusal.
        assert ring.put(conn, "r", ['"c"', '"d"']) == 2
        assert [i.body for i in ring.take(conn, "r", 10)] == ['"a"', '"b"', '"c"', '"d"']


def test_put_of_more_than_capacity_is_refused_on_an_empty_ring(engine_db):
    with engine_db.connect() as conn:
        ring.create(conn, "r", 3)
        before = ring_rows(conn)
        with pytest.raises(RingFull):
            ring.put(conn, "r", ["1", "2", "3", "4"])
        assert ring_rows(conn) == before
        assert ring.describe(conn, "r").used == 0


def test_refusal_counter_commits_even_though_the_put_failed(engine_db):
    with engine_db.connect() as conn, engine_db.connect() as other:
        ring.create(conn, "r", 1)
        ring.put(conn, "r", ["1"])
        with pytest.raises(RingFull):
            ring.put(conn, "r", ["2"])
        # Seen from another session: the refusal is visible to the dashboard.
        assert ring.describe(other, "r").refused_total == 1


# -- order and exact bodies -----------------------------------------------------------------


def test_fifo_across_several_wraparounds_with_exact_bodies(engine_db):
    with engine_db.connect() as conn:
        ring.create(conn, "r", 5)
        chunks = [1, 3, 5, 2, 4, 1, 5, 3, 2, 4, 5, 1]  # 36 messages: 7 trips round 5 cells
        sent, received = [], []
        n = 0
        for size in chunks:
            bodies = [f'{{"a":  {n + i},   "s" : "x\\"y é"}}' for i in range(size)]
            n += size
            while len(sent) - len(received) + size > 5:  # make room, two at a time
                received.extend(ring.take(conn, "r", 2))
            ring.put(conn, "r", bodies)
            sent.extend(bodies)
            # Take a different amount than was put, to move head and tail out of step.
            received.extend(ring.take(conn, "r", max(1, size - 1)))
        while batch := ring.take(conn, "r", 2):
            received.extend(batch)
        assert [i.body for i in received] == sent
        assert [i.seq for i in received] == list(range(len(sent)))
        assert ring.describe(conn, "r").used == 0


def test_take_on_empty_ring_returns_nothing(engine_db):
    with engine_db.connect() as conn:
        ring.create(conn, "r", 3)
        assert ring.take(conn, "r", 5) == []
        ring.put(conn, "r", ['{"a":  1}'])
        (item,) = ring.take(conn, "r", 5)
        assert item.body == '{"a":  1}'
        assert ring.take(conn, "r") == []
        assert ring.describe(conn, "r").head == 1


def test_take_returns_at_most_count(engine_db):
    with engine_db.connect() as conn:
        ring.create(conn, "r", 8)
        ring.put(conn, "r", [str(n) for n in range(6)])
        assert [i.body for i in ring.take(conn, "r", 4)] == ["0", "1", "2", "3"]
        assert ring.describe(conn, "r").used == 2
        with pytest.raises(UsageError, match="--count"):
            ring.take(conn, "r", 0)
        assert ring.describe(conn, "r").used == 2


@pytest.mark.parametrize("action", ["put", "take", "describe"])
def test_unknown_ring_is_a_usage_error(engine_db, action):
    with engine_db.connect() as conn:
        ring.create(conn, "other", 2)
        with pytest.raises(UsageError, match="unknown ring 'missing'"):
            if action == "put":
                ring.put(conn, "missing", ["1"])
            elif action == "take":
                ring.take(conn, "missing")
            else:
                ring.describe(conn, "missing")
        assert ring.describe(conn, "other").used == 0


# -- concurrency ----------------------------------------------------------------------------


def run_producers_and_consumers(db, *, producers, per_producer, consumers, capacity, extra=()):
    """Real threads, each with its own connection (`db` is any database fixture with connect()).
    Returns every item taken, and errors."""
    total = producers * per_producer
    taken: list[ring.RingItem] = []
    lock = threading.Lock()
    done = threading.Event()
    errors: list[BaseException] = []
    deadline = time.monotonic() + 30

    with db.connect() as conn:
        ring.create(conn, "r", capacity)

    def guard(fn):
        def run():
            try:
                fn()
            except BaseException as exc:  # reported by the assertion on `errors`
                errors.append(exc)
                done.set()

        return run

    def produce(p):
        with db.connect() as conn:
            for k in range(per_producer):
                body = json.dumps({"p": p, "k": k})
                while True:
                    if done.is_set() or time.monotonic() > deadline:
                        raise TimeoutError(f"producer {p} stuck at k={k}")
                    try:
                        ring.put(conn, "r", [body])
                        break
                    except RingFull:
                        continue

    def consume(c):
        with db.connect() as conn:
            while not done.is_set():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"consumer {c} timed out with {len(taken)}/{total} taken")
                items = ring.take(conn, "r", 1 + c)  # consumers take 1, 2, 3... at a time
                if items:
                    with lock:
                        taken.extend(items)
                        if len(taken) >= total:
                            done.set()

    threads = [threading.Thread(target=guard(lambda p=p: produce(p))) for p in range(producers)]
    threads += [threading.Thread(target=guard(lambda c=c: consume(c))) for c in range(consumers)]
    threads += [threading.Thread(target=guard(lambda f=f: f(done, deadline))) for f in extra]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a thread did not finish"
    return taken, errors


def check_no_loss_no_duplicate_per_producer_order(taken, producers, per_producer):
    total = producers * per_producer
    in_ring_order = sorted(taken, key=lambda item: item.seq)
    assert [i.seq for i in in_ring_order] == list(range(total)), "lost or duplicated positions"
    payloads = [json.loads(i.body) for i in in_ring_order]
    assert sorted((m["p"], m["k"]) for m in payloads) == [(p, k) for p in range(producers) for k in range(per_producer)]
    for p in range(producers):
        ks = [m["k"] for m in payloads if m["p"] == p]
        assert ks == list(range(per_producer)), f"producer {p} out of order"


def test_concurrent_producers_and_consumers_lose_and_duplicate_nothing(engine_db):
    taken, errors = run_producers_and_consumers(engine_db, producers=4, per_producer=200, consumers=3, capacity=16)
    assert errors == []
    check_no_loss_no_duplicate_per_producer_order(taken, 4, 200)
    with engine_db.connect() as conn:
        state = ring.describe(conn, "r")
        assert (state.used, state.head, state.tail) == (0, 800, 800)
        assert ring.take(conn, "r", 16) == []


def test_concurrent_rolled_back_writers_and_readers_leave_no_hole(db):
    """Alongside the real traffic, a writer and a reader keep rolling back their work."""

    def rolling_back_writer(done, deadline):
        with db.connect(autocommit=False) as conn:
            while not done.is_set() and time.monotonic() < deadline:
                try:
                    ring.put(conn, "r", ['{"ghost": true}'])
                except RingFull:
                    pass
                conn.rollback()

    def rolling_back_reader(done, deadline):
        with db.connect(autocommit=False) as conn:
            while not done.is_set() and time.monotonic() < deadline:
                ring.take(conn, "r", 2)
                conn.rollback()

    taken, errors = run_producers_and_consumers(
        db, producers=3, per_producer=100, consumers=2, capacity=8, extra=(rolling_back_writer, rolling_back_reader)
    )
    assert errors == []
    assert all("ghost" not in i.body for i in taken)
    check_no_loss_no_duplicate_per_producer_order(taken, 3, 100)


def test_rolled_back_writer_leaves_no_hole(db):
    with db.connect() as conn, db.connect(autocommit=False) as writer:
        ring.create(conn, "r", 3)
        ring.put(conn, "r", ['"a"'])
        ring.put(writer, "r", ['"ghost1"', '"ghost2"'])
        writer.rollback()
        assert ring.describe(conn, "r").tail == 1
        ring.put(conn, "r", ['"b"'])
        ring.put(conn, "r", ['"c"'])  # the ring is full again only with real messages
        items = ring.take(conn, "r", 10)
        assert [(i.seq, i.body) for i in items] == [(0, '"a"'), (1, '"b"'), (2, '"c"')]
        # Wrap around once more: the positions the ghost would have used are reused in order.
        ring.put(conn, "r", ['"d"', '"e"'])
        assert [(i.seq, i.body) for i in ring.take(conn, "r", 10)] == [(3, '"d"'), (4, '"e"')]


def test_rolled_back_reader_gives_the_messages_back_in_order(db):
    with db.connect() as conn, db.connect(autocommit=False) as reader:
        ring.create(conn, "r", 4)
        ring.put(conn, "r", ['"a"', '"b"', '"c"'])
        assert [i.body for i in ring.take(reader, "r", 2)] == ['"a"', '"b"']
        reader.rollback()
        assert [i.body for i in ring.take(conn, "r", 10)] == ['"a"', '"b"', '"c"']


def test_open_writer_does_not_wedge_readers(db):
    with db.connect() as conn, db.connect(autocommit=False) as writer, db.connect() as reader:
        reader.execute("SET lock_timeout = '2s'")
        ring.create(conn, "r", 4)
        ring.put(conn, "r", ['"a"', '"b"'])
        ring.put(writer, "r", ['"pending"'])  # transaction left open: holds the tail and a cell
        # The reader gets what was committed, then reaches the writer's cell without waiting.
        started = time.monotonic()
        assert [i.body for i in ring.take(reader, "r", 10)] == ['"a"', '"b"']
        assert ring.take(reader, "r", 10) == []
        assert time.monotonic() - started < 2  # lock_timeout would have raised anyway
        # Once the writer commits, its message follows in order.
        writer.commit()
        assert [(i.seq, i.body) for i in ring.take(reader, "r", 10)] == [(2, '"pending"')]


def test_open_reader_does_not_wedge_writers(db):
    with db.connect() as conn, db.connect(autocommit=False) as reader, db.connect() as writer:
        writer.execute("SET lock_timeout = '2s'")
        ring.create(conn, "r", 4)
        ring.put(conn, "r", ['"a"'])
        assert [i.body for i in ring.take(reader, "r", 1)] == ['"a"']  # left open
        # The writer can fill the cells the reader does not hold (3 free, 1 still held).
        ring.put(writer, "r", ['"b"', '"c"', '"d"'])
        with pytest.raises(RingFull):
            ring.put(writer, "r", ['"e"'])  # the held cell is not free until the reader commits
        reader.commit()
        ring.put(writer, "r", ['"e"'])
        assert [i.body for i in ring.take(conn, "r", 10)] == ['"b"', '"c"', '"d"', '"e"']


# -- steady state: only UPDATEs -------------------------------------------------------------


def ring_table_stats(conn):
    conn.execute("SELECT pg_stat_clear_snapshot()")
    rows = conn.execute(
        """SELECT relname, n_tup_ins, n_tup_del, n_tup_upd FROM pg_stat_user_tables
           WHERE schemaname = 'queuetop' AND relname IN ('ring_cells', 'ring_heads', 'ring_tails')"""
    ).fetchall()
    return {name: {"ins": ins, "del": dele, "upd": upd} for name, ins, dele, upd in rows}


def test_steady_state_does_no_insert_or_delete_on_ring_tables(db):
    capacity = 8
    with db.connect() as work, db.connect() as stats:
        ring.create(work, "r", capacity)
        baseline = wait_until(
            lambda: flush_stats(work) or ((s := ring_table_stats(stats)) and s.get("ring_cells", {}).get("ins") == capacity and s),
            timeout=10,
            what="creation statistics",
        )
        puts = takes = 0
        for cycle in range(60):
            size = 1 + cycle % 3
            ring.put(work, "r", [json.dumps({"c": cycle, "i": i}) for i in range(size)])
            puts += size
            takes += len(ring.take(work, "r", size))
        assert takes == puts
        enough = baseline["ring_cells"]["upd"] + puts + takes
        after = wait_until(
            lambda: flush_stats(work) or ((s := ring_table_stats(stats))["ring_cells"]["upd"] >= enough and s),
            timeout=10,
            what="ring_cells update statistics",
        )
        for table in ("ring_cells", "ring_heads", "ring_tails"):
            assert after[table]["ins"] == baseline[table]["ins"], table
            assert after[table]["del"] == baseline[table]["del"], table
        assert after["ring_heads"]["upd"] > baseline["ring_heads"]["upd"]
        assert after["ring_tails"]["upd"] > baseline["ring_tails"]["upd"]
