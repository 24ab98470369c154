"""One bad declaration never blanks the rest (issue 43, point 8): a declared table, dead-letter
table or column that is not there, a library's table the role may not read, a library's schema it
may not use, or a fault of queuetop's own in one probe or one source, makes that queue (that
probe, that source) unknown with a note naming it; every other probe, panel and metric goes on.
Each case on the real server: `queuetop snapshot`, the Prometheus exporter and the dashboard."""

from __future__ import annotations

import json
from importlib import resources

import pytest
from psycopg import sql
from textual.widgets import Tree

from dbcore.database import resolve_target
from probes.config import Config, DeclaredQueue, parse_config
from probes.postgres import PostgresProbes
from probes.sampler import PROBE_NAMES, Sampler, run_cycle
from tui.backend import DatabaseBackend
from tui.dashboard import QueuetopApp
from tui.widgets.panels import ConnectionsPanel, LocksPanel, QueuesPanel

from .conftest import PASSWORD, PASSWORD_ROLE, wait_until
from .test_cli_promises import one_error, run
from .test_probes import sessions, wait_blocked
from .test_prometheus import exporter_factory  # noqa: F401  (the fixture)
from .test_tui import queue_details_text, queue_rows, settle
from .test_tui_locks import tree_lines

TABLES = """
CREATE TABLE public.jobs (id bigserial PRIMARY KEY, status text NOT NULL DEFAULT 'todo',
                          created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE public.other (id bigserial PRIMARY KEY, status text NOT NULL DEFAULT 'todo');
CREATE TABLE public.accounts (id int PRIMARY KEY, balance int);
INSERT INTO public.jobs (status) SELECT 'todo' FROM generate_series(1, 5);
INSERT INTO public.other (status) SELECT CASE WHEN g <= 7 THEN 'todo' ELSE 'failed' END FROM generate_series(1, 9) g;
INSERT INTO public.accounts VALUES (1, 100);
"""

GOOD = {"name": "good", "table": "public.other", "order_by": "id", "state_column": "status",
        "ready_states": ["todo"], "dead_states": ["failed"]}

# Each bad declaration of `public.jobs`, and what its error must name.
BAD = {
    "dead-letter table": ({"dead_letter_table": "public.nope_dlq"}, "dead_letter_table 'public.nope_dlq' not found"),
    "table": ({"table": "public.nope_jobs"}, "table 'public.nope_jobs' not found"),
    "order_by column": ({"order_by": "nope_id"}, "order_by column 'nope_id' not in table public.jobs"),
    "state column": ({"state_column": "nope_state", "ready_states": ["todo"]},
                     "state_column column 'nope_state' not in table public.jobs"),
    "order_by column of several": ({"order_by": ["created_at DESC", "nope_id"]}, "order_by column 'nope_id' not in table public.jobs"),
    "dead-letter filter column": ({"dead_letter_table": "public.other", "dead_letter_where": {"nope": ["failed"]}},
                                  "dead_letter_where column 'nope' not in dead_letter_table public.other"),
    "dead-letter filter type": ({"dead_letter_table": "public.other", "dead_letter_where": {"id": "seven"}},
                                "dead_letter_where column 'id' of public.other is bigint: give it whole numbers"),
}


def toml(entries: list[dict]) -> str:
    def value(v: object) -> str:  # JSON's strings and lists are TOML's; a table is written inline
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{json.dumps(k)} = {value(x)}" for k, x in v.items()) + " }"
        return json.dumps(v)

    lines = []
    for entry in entries:
        lines.append("[[queues]]")
        lines.extend(f"{key} = {value(v)}" for key, v in entry.items())
    return "\n".join(lines) + "\n"


def declared(bad: dict) -> list[dict]:
    return [{"name": "bad", "table": "public.jobs", "order_by": "id", **bad}, GOOD]


def config_of(entries: list[dict]) -> Config:
    def field(v: object) -> object:
        if isinstance(v, dict):
            return tuple((k, tuple(x) if isinstance(x, list) else (x,)) for k, x in v.items())
        return tuple(v) if isinstance(v, list) else v

    return Config(queues=tuple(DeclaredQueue(**{k: field(v) for k, v in e.items()}) for e in entries))


@pytest.fixture
def blocked_pair(db):
    """The tables, and a session waiting for a row an idle-in-transaction session holds: what the
    Locks probe must still read beside a bad declaration."""
    with db.connect() as conn:
        conn.execute(TABLES)
    with sessions(db, "qt-bad-holder", "qt-bad-waiter") as (holder, waiter):
        holder.run("BEGIN")
        holder.run("UPDATE accounts SET balance = 1 WHERE id = 1")
        waiter.start("UPDATE accounts SET balance = 2 WHERE id = 1")
        wait_blocked(db, {waiter.pid}, 1)
        yield holder, waiter


@pytest.mark.parametrize("case", list(BAD))
def test_snapshot_shows_the_bad_queue_unknown_and_everything_else(db, cli, tmp_path, blocked_pair, case):
    holder, waiter = blocked_pair
    bad, says = BAD[case]
    path = tmp_path / "config.toml"
    path.write_text(toml(declared(bad)))
    result = cli("snapshot", "--json", "--dsn", db.dsn, "--config", str(path), timeout=60)
    assert result.returncode == 0, result.stderr  # was exit 1, "internal error: LookupError"
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    snap = json.loads(result.stdout)
    queues = {q["name"]: q for q in snap["queues"] if q["source"] == "table"}
    # The bad queue: unknown (every figure null), its error naming what is missing.
    assert says in queues["bad"]["error"]
    assert all(queues["bad"][k] is None for k in ("depth", "ready", "in_flight", "delayed", "dead"))
    assert f"bad: {says}" in snap["probes"]["queues"]["error"]
    # The good one: exact.
    good = queues["good"]
    assert good["error"] is None
    assert (good["depth"], good["ready"], good["dead"], good["depth_is_estimate"]) == (7, 7, 2, False)
    # The other probes went on: the lock the waiter waits for, its holder, the connections.
    assert waiter.pid in {b["pid"] for b in snap["blocked"]}
    assert {b["pid"]: b["root_blocker"] for b in snap["blocked"]}[waiter.pid] == holder.pid
    assert all(snap["probes"][name]["error"] is None for name in ("locks", "rings", "leases", "compaction"))
    assert snap["connections"]["total"] >= 2


def test_the_plain_snapshot_says_which_queue_is_unknown_and_why(db, cli, tmp_path):
    with db.connect() as conn:
        conn.execute(TABLES)
    path = tmp_path / "config.toml"
    path.write_text(toml(declared(BAD["dead-letter table"][0])))
    result = cli("snapshot", "--dsn", db.dsn, "--config", str(path), timeout=60)
    assert result.returncode == 0, result.stderr
    assert "bad: unknown: dead_letter_table 'public.nope_dlq' not found" in result.stdout
    [good] = [line.split() for line in result.stdout.splitlines() if line.split()[:2] == ["good", "table"]]
    assert good[2:4] == ["7", "7"]  # depth, ready


def test_the_exporter_goes_on_publishing_beside_a_bad_declaration(db, tmp_path, exporter_factory):  # noqa: F811
    with db.connect() as conn:
        conn.execute(TABLES)
    path = tmp_path / "config.toml"
    path.write_text(toml(declared(BAD["dead-letter table"][0])))
    exporter = exporter_factory("--dsn", db.dsn, "--config", str(path), "--interval", "0.3")
    host = (("host", f"local/{db.name}"),)
    good = (*host, ("queue", "good"), ("source", "table"))
    bad = (*host, ("queue", "bad"), ("source", "table"))
    stamps: set[float] = set()

    def sampled() -> dict | None:
        metrics = exporter.metrics()
        stamp = metrics.get(("queuetop_snapshot_timestamp_seconds", host))
        if stamp is not None:
            stamps.add(stamp)
        return metrics if len(stamps) >= 4 else None  # several rounds: a traceback would be printed each

    metrics = wait_until(sampled, timeout=60, interval=0.2, what="four samples served")
    assert isinstance(metrics, dict)
    assert metrics[("queuetop_up", host)] == 1
    assert metrics[("queuetop_queue_depth", good)] == 7 and metrics[("queuetop_queue_dead", good)] == 2
    assert ("queuetop_queue_depth", bad) not in metrics  # unknown is absent
    assert metrics[("queuetop_probe_error", (*host, ("probe", "queues")))] == 1
    ran = {dict(labels)["probe"] for name, labels in metrics if name == "queuetop_probe_duration_seconds"}
    assert ran == set(PROBE_NAMES)
    assert all(metrics[("queuetop_probe_error", (*host, ("probe", p)))] == 0 for p in PROBE_NAMES if p != "queues")
    assert exporter.stop() == 0
    stderr = exporter.proc.stderr.read()
    assert "Traceback" not in stderr and "LookupError" not in stderr, stderr


async def test_the_dashboard_shows_every_panel_and_the_bad_row_unknown_with_its_reason(db, blocked_pair):
    holder, waiter = blocked_pair
    config = config_of(declared(BAD["dead-letter table"][0]))
    app = QueuetopApp(lambda sink: Sampler(db.target, sink, config, interval_s=0.3), backend=DatabaseBackend(db.target, config))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app, lambda: queue_rows(app).get("table:good", ("", ""))[1] == "7", "the good queue's depth", 500)
        rows = queue_rows(app)
        assert rows["table:bad"][1] == "unknown"
        assert "1 unknown" in str(app.query_one(QueuesPanel).border_subtitle)  # its border says so
        # The other panels: the lock tree names the waiter and its holder, the connections are counted.
        tree = app.query_one(LocksPanel).query_one(Tree)
        await settle(pilot, app, lambda: any(str(waiter.pid) in text for _d, text in tree_lines(tree)), "the waiter in the tree", 500)
        assert any(str(holder.pid) in text for _d, text in tree_lines(tree))
        assert str(app.query_one(ConnectionsPanel).border_title).startswith("Connections ")
        assert app.snapshot.connections is not None and app.snapshot.connections.total >= 2
        # Enter on the bad row: why it is unknown, first (its verdict says it, or a line of its own).
        text = await queue_details_text(pilot, app, "table:bad")
        said = "dead_letter_table 'public.nope_dlq' not found"
        assert "unknown" in text and said in text and "could not load" not in text, text
        assert text.index(said) < text.index("its rows could not be read")


# -- a declaration the file itself gets wrong: one error line, exit 2, nothing read -----------------

ORDER_SAYS = "order_by must be a column, or a list of 1 to 8 columns each optionally followed by ASC or DESC"
WHERE_SAYS = "dead_letter_where must be a table of column = value or list of values"


@pytest.mark.parametrize("entry, says", [
    ('order_by = []', ORDER_SAYS),
    ('order_by = ["id", 3]', ORDER_SAYS),
    ('order_by = ["id", ""]', ORDER_SAYS),
    ('order_by = 7', ORDER_SAYS),
    ('order_by = "id"\ndead_letter_table = "public.other"\ndead_letter_where = "status = \'failed\'"', WHERE_SAYS),
    ('order_by = "id"\ndead_letter_table = "public.other"\ndead_letter_where = ["status", "failed"]', WHERE_SAYS),
    ('order_by = "id"\ndead_letter_table = "public.other"\ndead_letter_where = { status = 1.5 }',
     "dead_letter_where: status: give a value or a list of 1 to 100 values (strings, whole numbers or booleans)"),
    ('order_by = "id"\ndead_letter_table = "public.other"\ndead_letter_where = { status = [] }', "status: give a value or a list"),
    ('order_by = "id"\ndead_letter_table = "public.other"\ndead_letter_where = { status = { a = 1 } }', "status: give a value"),
    ('order_by = "id"\ndead_letter_table = "public.other"\ndead_letter_where = { status = ["failed", 3] }',
     "dead_letter_where: status: its values must be all strings, all whole numbers or all booleans"),
    ('order_by = "id"\ndead_letter_where = { status = "failed" }', "queues[0]: dead_letter_where needs a dead_letter_table"),
], ids=["order-empty", "order-not-strings", "order-blank", "order-number", "where-sql-text", "where-list", "where-float",
        "where-no-values", "where-table", "where-mixed", "where-no-table"])
def test_a_malformed_order_by_or_dead_letter_where_is_one_error_line(tmp_path, entry, says):
    path = tmp_path / "config.toml"
    path.write_text(f'[[queues]]\nname = "bad"\ntable = "public.jobs"\n{entry}\n')
    line = one_error(*run(["snapshot", "--config", str(path), "--dsn", "postgresql://u@127.0.0.1:1/x"]))
    assert line.startswith(f"queuetop: error: config {str(path)!r}: queues[0]") and says in line, line


def test_order_by_takes_a_column_or_a_list_and_dead_letter_where_a_table_of_values():
    [single, several] = parse_config({"queues": [
        {"name": "a", "table": "t", "order_by": "id", "dead_letter_table": "", "dead_letter_where": {}},  # as the example
        {"name": "b", "table": "t", "order_by": ["priority DESC", "id ASC NULLS FIRST"], "dead_letter_table": "t_dead",
         "dead_letter_where": {"status": ["exception", "failed"], "final": True, "attempts": [3, 4]}},
    ]}).queues
    assert single.order_by == "id" and single.dead_letter_where == ()
    assert several.order_by == ("priority DESC", "id ASC NULLS FIRST")
    assert several.dead_letter_where == (("status", ("exception", "failed")), ("final", (True,)), ("attempts", (3, 4)))


# -- a fault of queuetop's own: contained to its probe, or to its source ---------------------------


def test_a_probe_that_raises_is_unknown_and_the_others_go_on(db, monkeypatch):
    with db.connect() as conn:
        conn.execute(TABLES)

    def broken(self, conn):
        raise KeyError("ring_name")

    monkeypatch.setattr(PostgresProbes, "rings", broken)
    snap = run_cycle(db.target, config_of([GOOD]))
    assert snap.probes["rings"].error == "internal error: KeyError: 'ring_name'" and snap.probes["rings"].unread == ("all",)
    assert snap.unknown_list("rings") is not None  # unknown, not an empty list
    assert {q.name: q.depth for q in snap.queues if q.source == "table"} == {"good": 7}
    assert all(snap.probes[name].error is None for name in PROBE_NAMES if name != "rings")


def test_the_sampler_goes_on_when_a_probe_raises(db, monkeypatch):
    """The dashboard and the exporter sample on a schedule: a probe raising something unforeseen
    left its round never complete (no snapshot ever, empty panels) and printed a traceback a turn."""
    with db.connect() as conn:
        conn.execute(TABLES)

    def broken(self, conn):
        raise RuntimeError("no such thing")

    monkeypatch.setattr(PostgresProbes, "leases", broken)
    seen: list = []
    sampler = Sampler(db.target, seen.append, config_of([GOOD]), interval_s=0.3)
    sampler.start()
    try:
        wait_until(lambda: len(seen) >= 2, timeout=30, what="two snapshots")
    finally:
        sampler.stop()
    last = seen[-1]
    assert last.probes["leases"].error == "internal error: RuntimeError: no such thing"
    assert {q.name: q.depth for q in last.queues if q.source == "table"} == {"good": 7}
    assert last.connected and last.probes["locks"].error is None


def test_a_source_that_raises_is_unknown_and_the_other_sources_go_on(db, monkeypatch):
    from probes.sources.outbox import SOURCE as Outbox

    with db.connect() as conn:
        conn.execute(TABLES)

    def broken(self, conn, detection):
        raise IndexError("list index out of range")

    monkeypatch.setattr(Outbox, "sample", broken)
    snap = run_cycle(db.target, config_of([GOOD]))
    status = snap.probes["queues"]
    assert "outbox: internal error: IndexError: list index out of range" in status.error
    assert status.unread == ("outbox",)
    assert {q.name: q.depth for q in snap.queues if q.source == "table"} == {"good": 7}


# -- privileges: a library's table, a library's schema ------------------------------------------------


@pytest.fixture
def pgmq_queues(db):
    """PGMQ from its client's own SQL, with two queues of messages: `shown` (3 sent, 1 archived) and
    `hidden`, and the password role, which may connect."""
    pgmq = pytest.importorskip("pgmq", reason="the pgmq client is a test dependency (pip install -e '.[test]')")
    script = resources.files(pgmq).joinpath("sql", "pgmq.sql").read_text(encoding="utf-8")
    with db.connect() as conn:
        conn.execute(script)
        for name in ("shown", "hidden"):
            conn.execute("SELECT pgmq.create(%s)", (name,))
            conn.execute("SELECT pgmq.send_batch(%s, ARRAY['{\"a\": 1}', '{\"a\": 2}', '{\"a\": 3}']::jsonb[])", (name,))
        conn.execute("SELECT pgmq.archive('shown', 1::bigint)")
        conn.execute(TABLES)
        conn.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(sql.Identifier(db.name), sql.Identifier(PASSWORD_ROLE)))
        conn.execute(sql.SQL("GRANT SELECT ON public.other TO {}").format(sql.Identifier(PASSWORD_ROLE)))
        # The engine's own schema readable: what is said of the role is PGMQ's alone.
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA queuetop TO {}").format(sql.Identifier(PASSWORD_ROLE)))
        conn.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA queuetop TO {}").format(sql.Identifier(PASSWORD_ROLE)))
    target = resolve_target(db.dsn.replace("postgres@", f"{PASSWORD_ROLE}:{PASSWORD}@"))
    assert target is not None
    return target


def test_a_librarys_table_without_select_is_that_queue_unknown(db, pgmq_queues):
    role = sql.Identifier(PASSWORD_ROLE)
    with db.connect() as conn:
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA pgmq TO {}").format(role))
        conn.execute(sql.SQL("GRANT SELECT ON pgmq.meta, pgmq.q_shown, pgmq.a_shown TO {}").format(role))
    snap = run_cycle(pgmq_queues, config_of([GOOD]))
    rows = {q.name: q for q in snap.queues if q.source == "pgmq"}
    assert set(rows) == {"shown", "hidden"}
    assert (rows["shown"].ready, rows["shown"].dead, rows["shown"].depth, rows["shown"].error) == (2, 1, 2, None)
    hidden = rows["hidden"]
    assert hidden.depth is None and hidden.ready is None and hidden.error == 'no SELECT privilege on "pgmq"."q_hidden"'
    assert 'hidden: no SELECT privilege on "pgmq"."q_hidden"' in snap.probes["queues"].error
    assert {q.name: q.depth for q in snap.queues if q.source == "table"} == {"good": 7}


def test_a_librarys_archive_without_select_is_that_queue_unknown(db, pgmq_queues):
    role = sql.Identifier(PASSWORD_ROLE)
    with db.connect() as conn:
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA pgmq TO {}").format(role))
        conn.execute(sql.SQL("GRANT SELECT ON pgmq.meta, pgmq.q_shown, pgmq.a_shown, pgmq.q_hidden TO {}").format(role))
    snap = run_cycle(pgmq_queues)
    rows = {q.name: q for q in snap.queues if q.source == "pgmq"}
    assert rows["shown"].depth == 2 and rows["shown"].error is None
    # Its figures would leave out the dead: unknown, the archive named.
    assert rows["hidden"].depth is None
    assert rows["hidden"].error == 'no SELECT privilege on dead_letter_table "pgmq"."a_hidden"'


def test_a_role_without_usage_on_pgmqs_schema_gets_a_note_not_silence(db, pgmq_queues):
    snap = run_cycle(pgmq_queues, config_of([GOOD]))
    assert not [q for q in snap.queues if q.source == "pgmq"]  # nothing it could read ...
    status = snap.probes["queues"]
    # ... and that there is something it may not read, and how to let it.
    assert "pgmq in schema pgmq: its queues are unknown: this role has no USAGE privilege on schema pgmq" in status.notes
    assert 'GRANT USAGE ON SCHEMA "pgmq"' in status.notes
    assert status.error is None  # what it read is right: a note beside it
    assert {q.name: q.depth for q in snap.queues if q.source == "table"} == {"good": 7}
    # Once it may, the note goes and the queues come.
    with db.connect() as conn:
        role = sql.Identifier(PASSWORD_ROLE)
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA pgmq TO {}").format(role))
        conn.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA pgmq TO {}").format(role))
    snap = run_cycle(pgmq_queues)
    assert {q.name: q.depth for q in snap.queues if q.source == "pgmq"} == {"shown": 2, "hidden": 3}
    assert "USAGE" not in (snap.probes["queues"].notes or "")
