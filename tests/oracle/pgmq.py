"""PGMQ for the truth oracle: its SQL as the PyPI client ships it (pgmq 1.1.4's pgmq/sql/pgmq.sql,
PGMQ 1.13 by design-notes/peers.md; the file states no version),
every write made through PGMQ's own SQL functions (`pgmq.create`, `send`, `send_batch`, `read`,
`read_grouped`, `set_vt`, `archive`, `delete`, `pop`: they are its API; no row is written any
other way), and the ground truth, written from its reads.

Its plain fetch, `pgmq.read`::

    WITH cte AS
    (
        SELECT msg_id
        FROM pgmq.%I
        WHERE vt <= clock_timestamp() AND CASE
            WHEN %L != '{}'::jsonb THEN (message @> %2$L)::integer
            ELSE 1
        END = 1
        ORDER BY msg_id ASC
        LIMIT $1
        FOR UPDATE SKIP LOCKED
    )
    UPDATE pgmq.%I m
    SET
        last_read_at = clock_timestamp(),
        vt = clock_timestamp() + %L,
        read_ct = read_ct + 1
    FROM cte ...

skips nothing that is visible. PGMQ 1.13 also has FIFO reads, for messages sent with a group in
their headers (`x-pgmq-group`), which do skip visible messages: `read_grouped_rr` and
`read_grouped_head` take a group only when its head is visible::

    WITH fifo_groups AS (
        -- Determine the absolute head (oldest) message id per FIFO group, regardless of visibility
        SELECT
            COALESCE(headers->>'x-pgmq-group', '_default_fifo_group') AS fifo_key,
            MIN(msg_id) AS head_msg_id
        ...
    eligible_groups AS (
        -- Only groups whose head message is currently visible
        ...
        WHERE h.vt <= clock_timestamp()

and `read_grouped` drops a group whose oldest visible message has an older invisible one
("Ensure no earlier message in this group is currently being processed": ``m2.vt >
clock_timestamp() AND m2.msg_id < gp.min_msg_id``), which is the same condition: the group's
absolute head is not visible. So, per queue (`pgmq.meta`; its table `pgmq.q_<name>`, archive
`pgmq.a_<name>`, names by `pgmq.format_table_name`):

- blocked = visible (``vt <= now()``), with an `x-pgmq-group`, and the head of its group (lowest
  msg_id of the queue table with that group) not visible: no read of PGMQ's claims it now (the
  group reads skip it; a plain `read` is not how a sender that groups its messages is consumed).
  A message without a group is never blocked: PGMQ files those under `_default_fifo_group` for
  its group reads, but a queue read with `pgmq.read` (the usual consumer, and all a queue of
  ungrouped messages has) skips none of them, so calling them blocked would call most queues
  blocked whenever one message is in flight;
- ready = visible and not blocked;
- in_flight = ``vt > now() AND read_ct > 0`` (read, its visibility timeout running: being
  worked, or set back by a consumer that failed and called `set_vt`; PGMQ keeps nothing that
  tells the two apart);
- delayed = ``vt > now() AND read_ct = 0`` (sent with a delay), plus blocked;
- dead = the rows of the archive (`pgmq.archive`); a deleted or popped message is gone, finished.

No priorities: PGMQ has none. No custom schema: pgmq.sql names the schema `pgmq` in every
statement (``CREATE SCHEMA IF NOT EXISTS pgmq``, ``INSERT INTO pgmq.%I``, ``FROM pgmq.meta``...),
so its API cannot put a queue anywhere else; the oracle runs in `pgmq` only.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

SOURCE = "pgmq"  # probes/sources/pgmq.py: Pgmq.name
SCHEMA = "pgmq"  # the only one PGMQ's SQL knows
FIELDS = ("ready", "in_flight", "delayed", "dead", "blocked")
GROUP = "x-pgmq-group"

QUEUES = "SELECT queue_name, pgmq.format_table_name(queue_name, 'q'), pgmq.format_table_name(queue_name, 'a') FROM pgmq.meta"
TRUTH = """
WITH heads AS (
    -- The head of each group: the lowest msg_id with that group, visible or not.
    SELECT DISTINCT ON (headers->>'x-pgmq-group') headers->>'x-pgmq-group' AS grp, vt
    FROM {queue}
    WHERE headers->>'x-pgmq-group' IS NOT NULL
    ORDER BY headers->>'x-pgmq-group', msg_id
), messages AS (
    SELECT m.vt <= now() AS visible, m.read_ct, coalesce(h.vt > now(), false) AS behind_group
    FROM {queue} m
    LEFT JOIN heads h ON h.grp = m.headers->>'x-pgmq-group'
)
SELECT count(*) FILTER (WHERE visible AND NOT behind_group) AS ready,
       count(*) FILTER (WHERE NOT visible AND read_ct > 0) AS in_flight,
       count(*) FILTER (WHERE (NOT visible AND read_ct = 0) OR (visible AND behind_group)) AS delayed,
       (SELECT count(*) FROM {archive}) AS dead,
       count(*) FILTER (WHERE visible AND behind_group) AS blocked
FROM messages
"""


def install(dsn: str) -> None:
    """PGMQ's SQL, from the client's package, as its README installs it without the extension."""
    script = resources.files("pgmq").joinpath("sql", "pgmq.sql").read_text(encoding="utf-8")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(script)


def tables(conn: psycopg.Connection) -> dict[str, tuple[sql.Identifier, sql.Identifier]]:
    """Every queue of `pgmq.meta`: its table and its archive."""
    return {name: (sql.Identifier(SCHEMA, q), sql.Identifier(SCHEMA, a)) for name, q, a in conn.execute(QUEUES).fetchall()}


def truth(conn: psycopg.Connection, schema: str = SCHEMA) -> dict[str, dict[str, int]]:
    """Every queue: ready, in_flight, delayed (blocked included), dead, blocked, as PGMQ's reads
    see them now (see the module)."""
    assert schema == SCHEMA, "PGMQ lives in schema pgmq only"
    out: dict[str, dict[str, int]] = {}
    with conn.transaction():  # one snapshot for every queue
        for name, (queue, archive) in tables(conn).items():
            row = conn.execute(sql.SQL(TRUTH).format(queue=queue, archive=archive)).fetchone()
            assert row is not None
            out[name] = dict(zip(FIELDS, (int(v) for v in row), strict=True))
    return out


def reads_would_claim(conn: psycopg.Connection, queue: str) -> tuple[set[int], set[int], set[int]]:
    """What PGMQ's own reads take now from `queue`, each in a transaction rolled back: (plain
    `read`, `read_grouped_rr`, the messages the truth counts blocked). The first must be every
    ready and blocked message; the second must hold no blocked one and every ready grouped one."""
    table, _ = tables(conn)[queue]
    out: list[set[int]] = []
    for statement in ("SELECT msg_id FROM pgmq.read(%s, 1, 1000000)", "SELECT msg_id FROM pgmq.read_grouped_rr(%s, 1, 1000000)"):
        with conn.transaction(force_rollback=True):
            out.append({r[0] for r in conn.execute(statement, (queue,)).fetchall()})
    blocked = {r[0] for r in conn.execute(sql.SQL(
        "SELECT m.msg_id FROM {q} m WHERE m.vt <= now() AND m.headers->>'x-pgmq-group' IS NOT NULL AND ("
        " SELECT h.vt FROM {q} h WHERE h.headers->>'x-pgmq-group' = m.headers->>'x-pgmq-group' ORDER BY h.msg_id LIMIT 1"
        ") > now()").format(q=table)).fetchall()}
    return out[0], out[1], blocked


def grouped_visible(conn: psycopg.Connection, queue: str) -> set[int]:
    table, _ = tables(conn)[queue]
    return {r[0] for r in conn.execute(sql.SQL(
        "SELECT msg_id FROM {q} WHERE vt <= now() AND headers->>'x-pgmq-group' IS NOT NULL").format(q=table)).fetchall()}


# -- PGMQ, driven ----------------------------------------------------------------------------------


class Pgmq:
    """PGMQ's SQL functions on one session."""

    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True, application_name="pgmq-oracle")

    def _ids(self, statement: str, *params: Any) -> list[int]:
        return [r[0] for r in self.conn.execute(statement, params).fetchall()]

    def create(self, queue: str) -> None:
        self.conn.execute("SELECT pgmq.create(%s)", (queue,))

    def send(self, queue: str, message: dict[str, Any], *, group: str | None = None, delay: int = 0) -> int:
        headers = Jsonb({GROUP: group}) if group is not None else None
        [msg_id] = self._ids("SELECT * FROM pgmq.send(%s, %s, %s::jsonb, %s::integer)", queue, Jsonb(message), headers, delay)
        return msg_id

    def send_batch(self, queue: str, count: int, *, delay: int = 0, group: str | None = None, batch: int = 20_000) -> list[int]:
        """`count` messages `{"n": ...}` in batches of `batch` through `pgmq.send_batch` (the
        bodies made by the server: the client would only spend its time adapting JSON)."""
        ids: list[int] = []
        for start in range(0, count, batch):
            end = min(count, start + batch)
            ids += self._ids_named(
                "SELECT * FROM pgmq.send_batch(%(q)s,"
                " ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(%(start)s::integer, %(end)s::integer - 1) g),"
                " CASE WHEN %(group)s::text IS NULL THEN NULL"
                "  ELSE array_fill(jsonb_build_object('x-pgmq-group', %(group)s::text), ARRAY[%(end)s::integer - %(start)s::integer]) END,"
                " %(delay)s::integer)",
                {"q": queue, "start": start, "end": end, "group": group, "delay": delay})
        return ids

    def _ids_named(self, statement: str, params: dict[str, Any]) -> list[int]:
        return [r[0] for r in self.conn.execute(statement, params).fetchall()]

    def read(self, queue: str, vt: int, qty: int, conditional: dict[str, Any] | None = None) -> list[int]:
        return self._ids("SELECT msg_id FROM pgmq.read(%s, %s, %s, %s)", queue, vt, qty, Jsonb(conditional or {}))

    def read_grouped(self, queue: str, vt: int, qty: int) -> list[int]:
        return self._ids("SELECT msg_id FROM pgmq.read_grouped(%s, %s, %s)", queue, vt, qty)

    def set_vt(self, queue: str, msg_id: int, vt: int) -> None:
        self.conn.execute("SELECT * FROM pgmq.set_vt(%s, %s::bigint, %s::integer)", (queue, msg_id, vt))

    def archive(self, queue: str, ids: Sequence[int]) -> list[int]:
        return self._ids("SELECT * FROM pgmq.archive(%s, %s::bigint[])", queue, list(ids))

    def delete(self, queue: str, ids: Sequence[int]) -> list[int]:
        return self._ids("SELECT * FROM pgmq.delete(%s, %s::bigint[])", queue, list(ids))

    def pop(self, queue: str, qty: int) -> list[int]:
        return self._ids("SELECT msg_id FROM pgmq.pop(%s, %s)", queue, qty)

    def close(self) -> None:
        self.conn.close()


class Holder:
    """A real consumer, in a thread, on its own session: it reads one message from each of
    `queues` (visibility 10 minutes), works on them until close(), then deletes them (done)."""

    def __init__(self, dsn: str, queues: Sequence[str]) -> None:
        self.queues = list(queues)
        self.gate = threading.Event()
        self.taken: dict[str, list[int]] = {}
        self.error: BaseException | None = None
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(dsn,), name="pgmq-holder", daemon=True)

    def _run(self, dsn: str) -> None:
        try:
            mq = Pgmq(dsn)
            try:
                for queue in self.queues:
                    self.taken[queue] = mq.read(queue, 600, 1)
                self._ready.set()
                self.gate.wait(600)
                for queue, ids in self.taken.items():
                    mq.delete(queue, ids)
            finally:
                mq.close()
        except BaseException as exc:  # said by start() or close()
            self.error = exc
            self._ready.set()

    def start(self) -> None:
        self.thread.start()
        if not self._ready.wait(60) or self.error is not None:
            raise AssertionError(f"the PGMQ consumer did not take its messages: {self.error!r}")
        assert all(len(ids) == 1 for ids in self.taken.values()), self.taken

    def close(self) -> None:
        self.gate.set()
        self.thread.join(60)


@dataclass
class Workload:
    """One built workload: the counts it was built to have (per queue, the FIELDS), the rows in
    its tables, and the consumer holding its running messages until close()."""

    expected: dict[str, dict[str, int]]
    rows: int
    build_s: float
    report: dict[str, Any] = field(default_factory=dict)
    holders: list[Holder] = field(default_factory=list)
    schema: str = SCHEMA

    def close(self) -> None:
        for holder in self.holders:
            holder.close()
        self.holders = []


def _expected(**queues: dict[str, int]) -> dict[str, dict[str, int]]:
    return {name: {f: int(counts.get(f, 0)) for f in FIELDS} for name, counts in queues.items()}


def _rows(dsn: str) -> int:
    """Messages in every queue table and archive."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        total = 0
        for queue, archive in tables(conn).values():
            for table in (queue, archive):
                row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone()
                total += int(row[0]) if row else 0
    return total


class Phases:
    """Seconds per phase of a build."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._clock = time.monotonic()

    def __call__(self, name: str) -> None:
        now = time.monotonic()
        self.seconds[name] = now - self._clock
        self._clock = now


# -- the small workload ----------------------------------------------------------------------------


def build_small(dsn: str) -> Workload:
    """Every state in two queues, `emails` and `orders`, in this order (each read takes the oldest
    visible messages, so what must not be taken is sent after):

    - running: one message per queue, read by a real consumer (a thread) that works on it until
      close();
    - failed for good: sent, read, archived (1 in emails, 2 in orders);
    - finished: sent, read and deleted (emails), or popped (orders): gone;
    - backing off: sent, read, and set 10 minutes ahead by the consumer that failed (`set_vt`):
      in flight by PGMQ's definitions;
    - blocked: FIFO groups read with `read_grouped`: emails' `cust-1` (3 messages, its head read:
      2 blocked) and `cust-2` (1 message, nothing ahead: ready); orders' `cust-7` (2, head read: 1
      blocked) and `cust-9` (its head sent with a 15-minute delay, then 1 visible: blocked);
    - retried: sent and read with a visibility of 0 (`read(..., conditional)` picks it): visible
      again, read once: ready;
    - ready: sent; scheduled: sent with a delay (15 minutes, and an hour).
    """
    started = time.monotonic()
    install(dsn)
    mq = Pgmq(dsn)
    holder: Holder | None = None
    try:
        for queue in ("emails", "orders"):
            mq.create(queue)
            mq.send(queue, {"job": "held"})
        holder = Holder(dsn, ["emails", "orders"])
        holder.start()
        for queue, dead in (("emails", 1), ("orders", 2)):
            ids = [mq.send(queue, {"job": "poison", "n": n}) for n in range(dead)]
            assert sorted(mq.read(queue, 30, dead)) == ids
            assert sorted(mq.archive(queue, ids)) == ids
        ids = [mq.send("emails", {"job": "done", "n": n}) for n in range(2)]
        assert sorted(mq.read("emails", 30, 2)) == ids and sorted(mq.delete("emails", ids)) == ids
        for n in range(2):
            mq.send("orders", {"job": "done", "n": n})
        assert len(mq.pop("orders", 2)) == 2
        for queue in ("emails", "orders"):
            failing = mq.send(queue, {"job": "failing"})
            assert mq.read(queue, 30, 1) == [failing]
            mq.set_vt(queue, failing, 600)  # the consumer failed: try again in 10 minutes
        # FIFO groups, while nothing else is visible.
        head = mq.send("emails", {"job": "fifo", "n": 0}, group="cust-1")
        for n in (1, 2):
            mq.send("emails", {"job": "fifo", "n": n}, group="cust-1")
        mq.send("emails", {"job": "fifo", "n": 0}, group="cust-2")
        assert mq.read_grouped("emails", 600, 1) == [head]
        head = mq.send("orders", {"job": "fifo", "n": 0}, group="cust-7")
        mq.send("orders", {"job": "fifo", "n": 1}, group="cust-7")
        mq.send("orders", {"job": "fifo", "n": 0}, group="cust-9", delay=900)
        mq.send("orders", {"job": "fifo", "n": 1}, group="cust-9")
        assert mq.read_grouped("orders", 600, 1) == [head]
        for queue, ready, scheduled in (("emails", 3, 2), ("orders", 2, 1)):
            retried = mq.send(queue, {"job": "retried"})
            assert mq.read(queue, 0, 1, {"job": "retried"}) == [retried]
            for n in range(ready):
                mq.send(queue, {"job": "ready", "n": n})
            for n in range(scheduled):
                mq.send(queue, {"job": "later", "n": n}, delay=900 if n == 0 else 3600)
    except BaseException:
        if holder is not None:
            holder.close()
        raise
    finally:
        mq.close()
    expected = _expected(
        # ready: 3 + the retried one + cust-2; in flight: held, backing off, cust-1's head;
        # delayed: 2 scheduled + 2 blocked (cust-1).
        emails={"ready": 3 + 1 + 1, "in_flight": 3, "delayed": 2 + 2, "dead": 1, "blocked": 2},
        # ready: 2 + the retried one; in flight: held, backing off, cust-7's head; delayed: 1
        # scheduled + cust-9's delayed head + 2 blocked (cust-7's second, cust-9's second).
        orders={"ready": 2 + 1, "in_flight": 3, "delayed": 1 + 1 + 2, "dead": 2, "blocked": 2},
    )
    return Workload(expected=expected, rows=_rows(dsn), build_s=time.monotonic() - started, holders=[holder])


# -- the large workload ----------------------------------------------------------------------------

LARGE = {
    "backlog": "185,000 ready",
    "mail": "20,000 read (visible again in 15 min); 20,000 ready; 12,000 sent for +10 min and 15,000 for +6 h;"
            " 7 archived; a FIFO group with its head read and 3 behind it (blocked)",
    "audit": "30,000 sent, read and archived: only dead",
    "drained": "60,000 sent, read and deleted: only finished (gone)",
    "reports": "1 running (a real consumer); 2 ready",
}
LARGE_EXPECTED = _expected(
    backlog={"ready": 185_000},
    mail={"ready": 20_000, "in_flight": 20_000 + 1, "delayed": 12_000 + 15_000 + 3, "dead": 7, "blocked": 3},
    audit={"dead": 30_000},
    drained={},
    reports={"ready": 2, "in_flight": 1},
)
# Rows in the queue tables and archives at the end (the 60,000 drained messages are gone).
LARGE_ROWS = 185_000 + (20_000 + 20_000 + 27_000 + 7 + 4) + 30_000 + 3


def build_large(dsn: str) -> Workload:
    """LARGE_ROWS messages with the shapes of LARGE (one queue holding the whole backlog, one only
    finished messages, one only dead ones; bimodal visibility times, read ones (+15 min) between
    the two delays; small exact figures beside 10k-50k ones). Ends with ANALYZE of PGMQ's tables,
    as autovacuum would after such a load."""
    phase = Phases()
    install(dsn)
    mq = Pgmq(dsn)
    holder: Holder | None = None
    try:
        for queue in LARGE:
            mq.create(queue)
        mq.send("reports", {"job": "held"})
        holder = Holder(dsn, ["reports"])
        holder.start()
        mq.send_batch("reports", 2)
        phase("create, running")
        mq.send_batch("mail", 20_000)
        assert len(mq.read("mail", 900, 20_000)) == 20_000
        poison = mq.send_batch("mail", 7)
        assert sorted(mq.read("mail", 30, 7)) == poison and len(mq.archive("mail", poison)) == 7
        [head, *_] = mq.send_batch("mail", 4, group="batch-1")
        assert mq.read_grouped("mail", 900, 1) == [head]
        mq.send_batch("mail", 20_000)
        mq.send_batch("mail", 12_000, delay=600)
        mq.send_batch("mail", 15_000, delay=6 * 3600)
        phase("mail")
        mq.send_batch("backlog", 185_000)
        phase("backlog")
        mq.send_batch("audit", 30_000)
        assert len(mq.archive("audit", mq.read("audit", 30, 30_000))) == 30_000
        mq.send_batch("drained", 60_000)
        assert len(mq.delete("drained", mq.read("drained", 30, 60_000))) == 60_000
        phase("audit, drained")
        for table, archive in tables(mq.conn).values():
            mq.conn.execute(sql.SQL("ANALYZE {}, {}").format(table, archive))
        phase("analyze")
    except BaseException:
        if holder is not None:
            holder.close()
        raise
    finally:
        mq.close()
    return Workload(expected=LARGE_EXPECTED, rows=_rows(dsn), build_s=sum(phase.seconds.values()),
                    report={"phases_s": phase.seconds, "shapes": LARGE}, holders=[holder])
