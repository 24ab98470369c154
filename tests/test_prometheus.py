"""The Prometheus exporter over real HTTP, against a real database with a workload running: the
values on /metrics are those of the snapshot taken at the same instant (served on /snapshot,
`queuetop snapshot --json`'s objects); a scrape never samples; the shipped alert rules and
Grafana dashboard name only metrics the exporter serves, with only labels those metrics carry."""

from __future__ import annotations

import gzip
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
import unicodedata
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import replace
from importlib.metadata import version

import promql_parser
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from probes.postgres import PROBE_NAMES
from probes.prometheus import METRICS, served_names
from probes.sampler import unreachable_status
from queues import lease as leases
from queues import ring as rings
from queues.table_queue import TableQueue

from .conftest import REPO, wait_until

ALERTS = REPO / "docs" / "prometheus-alerts.yml"
NOT_RUN = unreachable_status("").error or "?"  # the sampler's status of a probe it had no connection for
GRAFANA = REPO / "docs" / "grafana-dashboard.json"


# -- the shipped rules and dashboard -----------------------------------------------------------


def _labels_of(sample_name: str) -> set[str]:
    name = sample_name.removesuffix("_total") if sample_name not in METRICS else sample_name
    return set(METRICS[name].labels)


def _selectors(node) -> list:
    """Every vector selector in a parsed PromQL expression."""
    kind = type(node).__name__
    if kind == "VectorSelector":
        return [node]
    if kind == "MatrixSelector":
        return [node.vector_selector]
    found = []
    for attribute in ("lhs", "rhs", "expr", "param"):
        child = getattr(node, attribute, None)
        if child is not None and not isinstance(child, (str, int, float)):
            found += _selectors(child)
    for argument in getattr(node, "args", None) or []:
        found += _selectors(argument)
    return found


def _grouping_labels(node) -> set[str]:
    """Labels an expression aggregates or matches on (`by (...)`, `on (...)`)."""
    labels: set[str] = set()
    modifier = getattr(node, "modifier", None)
    for attribute in ("labels", "matching"):
        value = getattr(modifier, attribute, None) if modifier is not None else None
        if value is not None:
            labels |= set(getattr(value, "labels", value) if not isinstance(value, (list, tuple, set)) else value)
    for attribute in ("lhs", "rhs", "expr", "param"):
        child = getattr(node, attribute, None)
        if child is not None and not isinstance(child, (str, int, float)):
            labels |= _grouping_labels(child)
    for argument in getattr(node, "args", None) or []:
        labels |= _grouping_labels(argument)
    return labels


RANGE_OF_COUNTER = {"rate", "irate", "increase", "resets"}  # what a counter is read through
RANGE_OF_GAUGE = {"delta", "idelta", "deriv", "predict_linear", "changes"} | {
    f"{f}_over_time" for f in ("avg", "min", "max", "sum", "count", "last", "present", "stddev", "stdvar", "quantile")}


def _counter_misuse(node, inside: str | None = None) -> list[str]:
    """Prometheus conventions: a counter is read through rate() and its kin (its raw value is an
    accident of when the server last restarted), and those functions are given counters only
    (rate() of a gauge reads every fall as a reset)."""
    kind = type(node).__name__
    if kind == "MatrixSelector":
        node = node.vector_selector
        kind = "VectorSelector"
    if kind == "VectorSelector":
        spec = METRICS.get(node.name.removesuffix("_total"))
        counter = node.name.endswith("_total") and spec is not None and spec.kind == "counter"
        if counter and inside in RANGE_OF_GAUGE:
            return [f"{inside}() of the counter {node.name}"]
        if counter and inside not in RANGE_OF_COUNTER:
            return [f"the counter {node.name} outside rate(), irate() or increase()"]
        if not counter and inside in RANGE_OF_COUNTER:
            return [f"{inside}() of the gauge {node.name}"]
        return []
    found = []
    if kind == "Call":
        for argument in node.args or []:
            found += _counter_misuse(argument, node.func.name)
        return found
    for attribute in ("lhs", "rhs", "expr", "param"):
        child = getattr(node, attribute, None)
        if child is not None and not isinstance(child, (str, int, float)):
            # a subquery's range is the function's: rate(x[5m:]) is rate's, (x) is not
            found += _counter_misuse(child, inside if kind == "SubqueryExpr" else None)
    return found


def check_expression(expr: str, where: str, *, counters: bool = True) -> set[str]:
    """Parse `expr`; every metric it names is served, every label it matches on or groups by is
    one those metrics carry, counters are read through rate() and rate() reads only counters.
    Returns the metric names."""
    tree = promql_parser.parse(expr)
    misuse = _counter_misuse(tree) if counters else []
    assert not misuse, f"{where}: {'; '.join(misuse)}"
    selectors = _selectors(tree)
    assert selectors, f"{where}: no metric in {expr!r}"
    names = {s.name for s in selectors}
    assert names <= served_names(), f"{where}: not served: {sorted(names - served_names())}"
    carried = set().union(*(_labels_of(n) for n in names))
    for selector in selectors:
        for matcher in selector.matchers.matchers:
            assert matcher.name in _labels_of(selector.name), f"{where}: {selector.name} has no label {matcher.name!r}"
    grouped = _grouping_labels(tree)
    assert grouped <= carried, f"{where}: groups by {sorted(grouped - carried)}, which no metric of it carries"
    return names


def test_every_alert_rule_names_only_metrics_the_exporter_serves():
    document = yaml.safe_load(ALERTS.read_text())
    (group,) = document["groups"]
    rules = group["rules"]
    named = set()
    for rule in rules:
        assert set(rule) == {"alert", "expr", "for", "labels", "annotations"}, rule.get("alert")
        assert rule["labels"]["severity"] in ("info", "warning", "critical")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        named |= check_expression(rule["expr"], rule["alert"])
    # What the issue names: oldest ready age, dead letters growing, an expired lease nobody holds,
    # an idle-in-transaction root blocker, a database the exporter cannot reach, a probe failing.
    assert {"queuetop_queue_oldest_ready_age_seconds", "queuetop_queue_dead", "queuetop_lease_state",
            "queuetop_root_blocker_blocked_sessions_max", "queuetop_up", "queuetop_probe_error"} <= named
    # A host that is down fails every probe: DatabaseDisconnected says so, ProbeFailing stays silent
    # (promtool's unit tests below show it; this says how).
    (failing,) = [rule for rule in rules if rule["alert"] == "QueuetopProbeFailing"]
    assert "queuetop_up" in check_expression(failing["expr"], "QueuetopProbeFailing") and "unless" in failing["expr"]


def test_a_wrong_rule_is_caught():
    with pytest.raises(AssertionError, match="not served"):
        check_expression("queuetop_queue_lenght > 5", "typo")
    with pytest.raises(AssertionError, match="has no label 'table'"):
        check_expression('queuetop_queue_depth{table="x"} > 5', "label")
    with pytest.raises(AssertionError, match="groups by"):
        check_expression("max by (queue) (queuetop_up)", "grouping")
    with pytest.raises(AssertionError, match=r"rate\(\) of the gauge queuetop_queue_depth"):
        check_expression("rate(queuetop_queue_depth[5m]) > 1", "rate of a gauge")
    with pytest.raises(AssertionError, match="the counter queuetop_ring_refused_total outside rate"):
        check_expression("queuetop_ring_refused_total > 100", "a raw counter")
    with pytest.raises(AssertionError, match=r"delta\(\) of the counter"):
        check_expression("delta(queuetop_queue_table_inserted_rows_total[5m]) > 1", "delta of a counter")
    with pytest.raises(AssertionError, match="not served"):  # renamed or removed: no rule may name them
        check_expression("queuetop_root_blocker_blocked_sessions > 3", "removed")
    assert check_expression("sum by (host) (rate(queuetop_queue_table_inserted_rows_total[5m]))", "ok") == {
        "queuetop_queue_table_inserted_rows_total"}


def test_the_grafana_dashboard_queries_only_served_metrics():
    dashboard = json.loads(GRAFANA.read_text())
    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 36
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)) >= 12
    # Grafana's variables stand for a range and a regular expression: substituted, the queries are PromQL.
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}" and panel["targets"], panel["title"]
        for target in panel["targets"]:
            expr = target["expr"].replace("$__rate_interval", "5m").replace("$host", ".*")
            check_expression(expr, f"{panel['title']} {target['refId']}")
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["host"]["query"] == "label_values(queuetop_up, host)" and "host" in METRICS["queuetop_up"].labels


def test_the_metrics_are_documented():
    """Every metric served is in the table of docs/prometheus.md, with its type, labels and probe;
    the table names no other (a renamed or removed metric leaves no trace there)."""
    text = (REPO / "docs" / "prometheus.md").read_text()
    rows = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| `queuetop_") and len(cells) >= 5:
            rows[cells[0].strip("`")] = cells
    assert set(rows) == served_names(), (sorted(set(rows) - served_names()), sorted(served_names() - set(rows)))
    for name, spec in METRICS.items():
        cells = rows[name + ("_total" if spec.kind == "counter" else "")]
        assert cells[1] == spec.kind and cells[2] == ", ".join(spec.labels) and cells[3] == (spec.probe or "-"), (name, cells)


# -- the exporter over HTTP ------------------------------------------------------------------


class Exporter:
    """`queuetop export prometheus` as a process, and its address once it says it serves."""

    def __init__(self, *args: str) -> None:
        env = {k: v for k, v in os.environ.items() if k != "QUEUETOP_DSN"}
        self.proc = subprocess.Popen([sys.executable, "-m", "tui", "export", "prometheus", "--listen", "127.0.0.1:0", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], 30)
        assert ready, "the exporter said nothing in 30 s"
        line = self.proc.stdout.readline()
        assert line.startswith("queuetop: serving http://127.0.0.1:"), (line, self.proc.stderr.read() if self.proc.poll() else "")
        self.base = line.split()[2].removesuffix("/metrics")

    def get(self, path: str) -> str:
        with urllib.request.urlopen(self.base + path, timeout=10) as response:
            return response.read().decode()

    def metrics(self) -> dict[tuple[str, tuple], float]:
        samples = {}
        for family in text_string_to_metric_families(self.get("/metrics")):
            for sample in family.samples:
                samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
        return samples

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(20)


@pytest.fixture
def exporter_factory():
    started: list[Exporter] = []

    def start(*args: str) -> Exporter:
        exporter = Exporter(*args)
        started.append(exporter)
        return exporter

    yield start
    for exporter in started:
        if exporter.proc.poll() is None:
            exporter.proc.kill()
            exporter.proc.wait(10)


def _at_one_instant(exporter: Exporter, host: str) -> tuple[dict, dict]:
    """A scrape and the snapshot it was made from: retried until no sample came in between."""
    for _ in range(50):
        before = exporter.get("/snapshot")
        metrics = exporter.metrics()
        after = exporter.get("/snapshot")
        if before == after:
            (snapshot,) = [s for s in map(json.loads, after.splitlines()) if s["host"] == host]
            stamp = metrics[("queuetop_snapshot_timestamp_seconds", (("host", host),))]
            assert abs(stamp - _epoch(snapshot["taken_at"])) < 1e-6
            return metrics, snapshot
    raise AssertionError("a sample came in between every scrape and its snapshot")


def _epoch(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def test_scraped_values_equal_the_snapshot_taken_at_the_same_instant_while_a_workload_runs(db, exporter_factory):
    with db.connect() as conn:
        queue = TableQueue.create(conn, "prom_jobs")
        queue.enqueue_batch(conn, [json.dumps({"n": n}) for n in range(3000)])
        rings.create(conn, "prom_ring", 8)
        rings.put(conn, "prom_ring", ['{"a": 1}', '{"a": 2}', '{"a": 3}'])
        token = leases.acquire(conn, "prom_lease", "exporter-test", 60)
    # A blocker idle in transaction, and a session waiting behind it: the lock metrics' subject.
    blocker = db.connect(application_name="prom-blocker", autocommit=False)
    blocker.execute("LOCK TABLE queuetop.rings IN EXCLUSIVE MODE")
    waiter = threading.Thread(target=lambda: db.connect(application_name="prom-waiter").execute(
        "UPDATE queuetop.rings SET capacity = capacity WHERE name = 'prom_ring'"), daemon=True)
    waiter.start()
    worker = subprocess.Popen([sys.executable, "-m", "tui", "engine", "work", "prom_jobs", "--dsn", db.dsn, "--workers", "2",
                               "--handler", "sleep:0.002", "--duration", "60"], cwd=REPO, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
    try:
        exporter = exporter_factory("--dsn", db.dsn, "--interval", "0.3")
        host = "local/" + db.name
        wait_until(lambda: (s := exporter.get("/snapshot")) and json.loads(s.splitlines()[0])["blocked"], timeout=30,
                   what="the waiter in a snapshot")
        depths = []
        for _ in range(2):
            metrics, snapshot = _at_one_instant(exporter, host)
            q = next(q for q in snapshot["queues"] if q["name"] == "prom_jobs")
            labels = (("host", host), ("queue", "prom_jobs"), ("source", "reference"))
            for metric, key in (("depth", "depth"), ("ready", "ready"), ("in_flight", "in_flight"), ("delayed", "delayed"),
                                ("dead", "dead"), ("oldest_ready_age_seconds", "oldest_ready_age_s"),
                                ("enqueued_per_second", "enqueued_per_s"), ("dequeued_per_second", "dequeued_per_s"),
                                ("table_inserted_rows_total", "inserted_total"), ("table_deleted_rows_total", "deleted_total")):
                if q[key] is None:
                    assert (f"queuetop_queue_{metric}", labels) not in metrics  # unknown: absent, not 0
                else:
                    assert metrics[(f"queuetop_queue_{metric}", labels)] == q[key], metric
            depths.append(q["depth"])
            ring = next(r for r in snapshot["rings"] if r["name"] == "prom_ring")
            assert metrics[("queuetop_ring_used", (("host", host), ("ring", "prom_ring")))] == ring["used"] == 3
            lease = next(x for x in snapshot["leases"] if x["name"] == "prom_lease")
            lease_labels = (("host", host), ("lease", "prom_lease"))
            assert metrics[("queuetop_lease_token", lease_labels)] == lease["token"] == token
            assert metrics[("queuetop_lease_expires_in_seconds", lease_labels)] == lease["expires_in_s"]
            assert metrics[("queuetop_lease_state", (*lease_labels[:1], ("lease", "prom_lease"), ("state", "held")))] == 1
            assert metrics[("queuetop_blocked_sessions", (("host", host),))] == len(snapshot["blocked"]) >= 1
            (root,) = [b for b in snapshot["blockers"] if b["application"] == "prom-blocker"]
            assert root["state"] == "idle in transaction"
            idle = (("host", host), ("state", "idle in transaction"))
            assert metrics[("queuetop_root_blocker_blocked_sessions_max", idle)] == max(
                b["blocked_count"] for b in snapshot["blockers"] if b["state"] == "idle in transaction") >= 1
            assert metrics[("queuetop_root_blockers_by_state", idle)] == sum(
                1 for b in snapshot["blockers"] if b["state"] == "idle in transaction")
            info = (("application", "prom-blocker"), ("host", host), ("pid", str(root["pid"])), ("state", root["state"]))
            assert metrics[("queuetop_root_blocker_info", info)] == 1
            assert not [key for key in metrics if "pid" in dict(key[1]) and key[0] != "queuetop_root_blocker_info"]
            assert metrics[("queuetop_server_info", (("dialect", "postgresql"), ("host", host),
                                                     ("version", snapshot["server"]["version"])))] == 1
            assert metrics[("queuetop_build_info", (("version", version("queuetop")),))] == 1
            assert metrics[("queuetop_sessions", (("host", host),))] == snapshot["connections"]["total"]
            for probe, status in snapshot["probes"].items():
                duration = ("queuetop_probe_duration_seconds", (("host", host), ("probe", probe)))
                if (status["error"] or "").startswith(NOT_RUN):  # a turn that found no connection: it cost nothing known
                    assert duration not in metrics
                else:
                    assert metrics[duration] == status["elapsed_ms"] / 1000
                assert metrics[("queuetop_probe_error", (("host", host), ("probe", probe)))] == (status["error"] is not None)
            assert metrics[("queuetop_up", (("host", host),))] == 1
            # The workload must have moved the queue's depth itself (its other figures, the oldest
            # message's age, change anyway): under load the worker process starts late.
            wait_until(lambda depth=q["depth"]: next(
                x["depth"] for x in json.loads(exporter.get("/snapshot").splitlines()[0])["queues"] if x["name"] == "prom_jobs"
            ) < depth, timeout=30, what="the workload to move the queue's depth")
        assert depths[1] < depths[0], depths  # the workload ran between the two instants
        assert exporter.stop() == 0
    finally:
        worker.kill()
        worker.wait(10)
        blocker.close()
        waiter.join(10)


def test_a_scrape_never_samples_the_database(db, exporter_factory):
    """Scraped 30 times within one interval, the exporter serves one cached snapshot: the
    database sees the sampler's schedule, not Prometheus's."""
    exporter = exporter_factory("--dsn", db.dsn, "--interval", "30")
    wait_until(lambda: exporter.get("/snapshot"), timeout=30, what="the first sample")
    stamps = {value for _ in range(30) for (name, _l), value in exporter.metrics().items()
              if name == "queuetop_snapshot_timestamp_seconds"}
    assert len(stamps) == 1
    assert exporter.stop() == 0


def test_a_host_that_is_down_is_up_0_and_has_no_figures(db, exporter_factory):
    exporter = exporter_factory("--dsn", db.dsn, "--dsn", "postgresql://ops:s3cret@127.0.0.1:1/app", "--interval", "0.5")
    up = ("queuetop_up", (("host", f"local/{db.name}"),))

    def sampled() -> dict | None:
        # Both hosts sampled, and every probe of the one that answers run on it (on a busy machine
        # its first turns may find no connection within the pool's first timeout).
        m = exporter.metrics()
        ran = {dict(labels)["probe"] for name, labels in m if name == "queuetop_probe_duration_seconds"}
        return m if m.get(up) == 1 and ("queuetop_up", (("host", "127.0.0.1:1/app"),)) in m and ran == set(PROBE_NAMES) else None

    metrics = wait_until(sampled, timeout=30, what="both hosts sampled")
    assert isinstance(metrics, dict)
    assert metrics[("queuetop_up", (("host", "127.0.0.1:1/app"),))] == 0
    down = [key for key in metrics if ("host", "127.0.0.1:1/app") in key[1]]
    # up 0, when it was tried, and each probe's error: no figure, no server, and no probe
    # duration (no probe ran: not 0 s each)
    assert {name for name, _labels in down} == {"queuetop_up", "queuetop_snapshot_timestamp_seconds", "queuetop_probe_error"}
    assert {dict(labels)["probe"] for name, labels in down if name == "queuetop_probe_error"} == set(PROBE_NAMES)
    assert all(metrics[key] == 1 for key in down if key[0] == "queuetop_probe_error")
    assert "s3cret" not in exporter.get("/metrics") + exporter.get("/snapshot")
    assert exporter.stop() == 0
    assert "s3cret" not in exporter.proc.stderr.read()


@pytest.mark.parametrize("listen", ["nowhere", "127.0.0.1:99999", "[::1:9187", "a b:1"])
def test_a_bad_listen_address_is_one_line(cli, db, listen):
    result = cli("export", "prometheus", "--dsn", db.dsn, "--listen", listen, timeout=30)
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1 and "HOST:PORT" in result.stderr


def test_a_port_in_use_is_one_line(cli, db, exporter_factory):
    exporter = exporter_factory("--dsn", db.dsn)
    port = exporter.base.rsplit(":", 1)[1]
    result = cli("export", "prometheus", "--dsn", db.dsn, "--listen", f"127.0.0.1:{port}", timeout=30)
    assert result.returncode == 2 and result.stderr.startswith(f"queuetop: error: cannot listen on 127.0.0.1:{port}: ")
    assert len(result.stderr.splitlines()) == 1


def test_paths_other_than_the_metrics_are_404(db, exporter_factory):
    exporter = exporter_factory("--dsn", db.dsn)
    with pytest.raises(urllib.error.HTTPError) as raised:
        exporter.get("/nothing")
    assert raised.value.code == 404
    wait_until(lambda: "queuetop_up" in exporter.get("/"), timeout=30, what="the metrics on /")


# -- labels, and many scrapers at once ------------------------------------------------------------


@contextmanager
def _served(collector):
    """`probes.prometheus.serve` in this process, on a free port: its base URL."""
    from probes.prometheus import serve

    server = serve(collector, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _get(url: str, **headers: str) -> tuple[dict, bytes]:
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=10) as response:
        body = response.read()
        return dict(response.headers), gzip.decompress(body) if response.headers.get("Content-Encoding") == "gzip" else body


HOSTILE = {
    "esc": "jobs\x1b]2;pwned\x07", "csi": "jobs\x1b[2J", "c1": "jobs\x9b31m", "cr": "over\rwrite", "nl": "two\nlines",
    "bidi": "rtl\u202eevil", "zero width": "zero\u200bwidth", "quote and backslash": 'a"b\\c', "tab": "a\tb",
}


def test_text_from_the_database_is_never_sent_raw_in_a_label():
    """Queue, application, lease and host names with terminal escapes, carriage returns, bidi
    overrides: every label value is inert() (`\\x1b` written out), in the text format and in
    OpenMetrics, gzipped or not; the client escapes quote, backslash and newline."""
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families

    from dbcore.text import inert
    from probes.prometheus import SnapshotCollector
    from tui.sample import sample_snapshot

    base = sample_snapshot(step=1)
    names = list(HOSTILE.values())
    snapshot = replace(
        base,
        queues=tuple(replace(base.queues[i % len(base.queues)], name=name) for i, name in enumerate(names)),
        leases=tuple(replace(base.leases[0], name=name) for name in names),
        blockers=tuple(replace(b, application=names[i % len(names)]) for i, b in enumerate(base.blockers)),
        connections=replace(base.connections, by_application={name: n for n, name in enumerate(names)}),
        extra={**base.extra, "host": "db\x1b[1m1"})
    collector = SnapshotCollector()
    collector.update(snapshot)
    with _served(collector) as base_url:
        for accept, parse in (("", text_string_to_metric_families),
                              ("application/openmetrics-text; version=1.0.0; charset=utf-8", openmetrics_families)):
            for encoding in ("", "gzip"):
                _headers, body = _get(base_url + "/metrics", Accept=accept, **{"Accept-Encoding": encoding})
                text = body.decode()
                raw = sorted({c for c in text if c != "\n" and unicodedata.category(c) in ("Cc", "Cf")})
                assert not raw, (accept, encoding, raw)
                labels = {(s.name, k): set() for f in parse(text) for s in f.samples for k in s.labels}
                for family in parse(text):
                    for sample in family.samples:
                        for key, value in sample.labels.items():
                            labels[sample.name, key].add(value)
                assert labels["queuetop_queue_depth", "queue"] >= {inert(name) for name in names}
                assert labels["queuetop_lease_token", "lease"] == {inert(name) for name in names}
                assert labels["queuetop_sessions_by_application", "application"] == {inert(name) for name in names}
                assert labels["queuetop_root_blocker_info", "application"] == {
                    inert(b.application) for b in sorted(snapshot.blockers, key=lambda b: (-b.blocked_count, b.pid))[:3]}
                assert labels["queuetop_up", "host"] == {"db\\x1b[1m1"}


def _scraped(snapshot) -> dict[tuple[str, tuple], float]:
    from probes.prometheus import families

    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in families([snapshot]) for sample in family.samples}


def test_label_values_stay_few_whatever_the_sessions_call_themselves():
    """300 sessions of 30 applications (a pid in each name, as some pools set it): 10 series for
    the applications with the most sessions and one `(other)` with the rest, the total kept. An
    application that calls itself `(other)` is counted with the rest, never a second series."""
    from tui.sample import sample_snapshot

    base = sample_snapshot(step=1)
    apps = {f"worker-{pid}": 30 - i for i, pid in enumerate(range(4000, 4030))} | {"(other)": 25}
    snapshot = replace(base, connections=replace(base.connections, by_application=apps))
    metrics = _scraped(snapshot)
    by_app = {dict(labels)["application"]: value for (name, labels), value in metrics.items()
              if name == "queuetop_sessions_by_application"}
    top = sorted(((name, n) for name, n in apps.items() if name != "(other)"), key=lambda kv: (-kv[1], kv[0]))[:10]
    assert len(by_app) == 11 and all(by_app[name] == n for name, n in top), by_app
    assert sum(by_app.values()) == sum(apps.values())
    assert by_app["(other)"] == sum(apps.values()) - sum(n for _name, n in top)
    few = _scraped(replace(snapshot, connections=replace(base.connections, by_application={"api": 3, "": 2})))
    assert {dict(labels).get("application"): v for (name, labels), v in few.items()
            if name == "queuetop_sessions_by_application"} == {"api": 3, "": 2}  # no (other) when there is no rest


def test_root_blockers_are_counted_by_state_and_the_three_worst_named():
    """No pid in a series' identity, but in an info metric of at most 3 series per host: the root
    blockers holding up the most sessions. By state: how many, and the most one of them holds up."""
    from probes.model import Blocker
    from tui.sample import sample_snapshot

    base = sample_snapshot(step=1)
    blockers = tuple(Blocker(pid=100 + i, blocked_count=n, state=state, xact_age_s=1.0, query="q", application=f"app{i}")
                     for i, (n, state) in enumerate([(1, "active"), (7, "idle in transaction"), (2, "idle in transaction"),
                                                     (5, None), (3, "active"), (9, "active")]))
    metrics = _scraped(replace(base, blockers=blockers))

    def by(name: str) -> dict[str, float]:
        return {dict(labels)["state"]: value for (n, labels), value in metrics.items() if n == name}

    assert by("queuetop_root_blockers_by_state") == {"active": 3, "idle in transaction": 2, "unknown": 1}
    assert by("queuetop_root_blocker_blocked_sessions_max") == {"active": 9, "idle in transaction": 7, "unknown": 5}
    assert metrics[("queuetop_root_blockers", (("host", ""),))] == 6
    named = {dict(labels)["pid"]: dict(labels) for (n, labels), value in metrics.items() if n == "queuetop_root_blocker_info"}
    assert set(named) == {"105", "101", "103"} and named["103"]["state"] == "unknown" and named["101"]["application"] == "app1"


def test_build_and_server_info():
    from tui.sample import sample_snapshot

    metrics = _scraped(replace(sample_snapshot(step=1), extra={"host": "db1"}))
    assert metrics[("queuetop_build_info", (("version", version("queuetop")),))] == 1
    server = sample_snapshot(step=1).server
    assert metrics[("queuetop_server_info", (("dialect", server.dialect), ("host", "db1"), ("version", server.version)))] == 1


def test_a_scrape_serves_the_latest_snapshot_formatted_once_and_filters_by_name(monkeypatch):
    import probes.prometheus as exporter
    from probes.prometheus import SnapshotCollector
    from tui.sample import sample_snapshot

    formatted = []
    monkeypatch.setattr(exporter, "families", lambda snapshots, real=exporter.families: formatted.append(1) or real(snapshots))
    collector = SnapshotCollector()
    first = replace(sample_snapshot(step=1), extra={"host": "a"})
    collector.update(first)
    with _served(collector) as base_url:
        def depth() -> float:
            _h, body = _get(base_url + "/metrics")
            return next(s.value for f in text_string_to_metric_families(body.decode()) for s in f.samples
                        if s.name == "queuetop_queue_depth" and s.labels["queue"] == first.queues[0].name)

        for _ in range(5):
            assert depth() == first.queues[0].depth
        assert len(formatted) == 1  # five scrapes of one snapshot: formatted once
        second = replace(first, queues=(replace(first.queues[0], depth=first.queues[0].depth + 17), *first.queues[1:]))
        collector.update(second)
        assert depth() == first.queues[0].depth + 17  # a new snapshot, a new body
        assert len(formatted) == 2
        _h, body = _get(base_url + "/metrics?name[]=queuetop_up&name[]=queuetop_queue_table_inserted_rows_total")
        assert {f.name for f in text_string_to_metric_families(body.decode())} == {"queuetop_up", "queuetop_queue_table_inserted_rows"}


def test_fifty_concurrent_scrapers_are_all_served_within_a_second(db, exporter_factory):
    """50 scrapers connecting at once, 4 scrapes each, a new connection each (as Prometheus
    makes): none times out (5 s), p99 under a second. A listen backlog of 5 (socketserver's
    default) dropped connections here: SYN retried after 1 s, 3 s, 7 s."""
    exporter = exporter_factory("--dsn", db.dsn, "--interval", "0.5")
    wait_until(lambda: "queuetop_queue_depth" in exporter.get("/metrics") or "queuetop_up 1" in exporter.get("/metrics"),
               timeout=30, what="the first sample")
    start = threading.Barrier(50)
    latencies: list[float] = []
    failures: list[str] = []

    def scrape() -> None:
        start.wait()
        for _ in range(4):
            began = time.perf_counter()
            try:
                with urllib.request.urlopen(exporter.base + "/metrics", timeout=5) as response:
                    assert b"queuetop_up" in response.read()
                latencies.append(time.perf_counter() - began)
            except Exception as exc:  # a timeout, a refused or reset connection: what this test is for
                failures.append(f"{type(exc).__name__}: {exc} after {time.perf_counter() - began:.2f}s")

    threads = [threading.Thread(target=scrape) for _ in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failures, failures[:5]
    latencies.sort()
    p99 = latencies[int(len(latencies) * 0.99) - 1]
    assert len(latencies) == 200 and p99 < 1.0, (p99, latencies[-5:])
    assert exporter.stop() == 0


# -- promtool: the rules as Prometheus itself reads them ---------------------------------------------

RULE_TESTS = REPO / "docs" / "prometheus-alerts.test.yml"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian: apt-get install prometheus)")


@needs_promtool
def test_promtool_checks_the_alert_rules():
    result = subprocess.run([PROMTOOL, "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr


@needs_promtool
def test_promtool_unit_tests_of_the_alert_rules_pass():
    """docs/prometheus-alerts.test.yml: ProbeFailing silent for a host that is down and firing
    for a probe that fails on a host that is up, the idle-in-transaction blocker, and the rest."""
    result = subprocess.run([PROMTOOL, "test", "rules", str(RULE_TESTS)], capture_output=True, text=True, timeout=60,
                            cwd=RULE_TESTS.parent)
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr


def test_the_rule_unit_tests_feed_only_served_series_and_cover_every_alert():
    """The series the unit tests feed promtool are ones the exporter serves (names and labels),
    so the tests exercise what Prometheus will scrape; every alert is tested firing, and
    ProbeFailing also silent for a host that is down."""
    document = yaml.safe_load(RULE_TESTS.read_text())
    assert document["rule_files"] == [ALERTS.name]
    fired: set[str] = set()
    silent: set[str] = set()
    for test in document["tests"]:
        for series in test["input_series"]:
            check_expression(series["series"], f"input series {series['series']}", counters=False)
        for case in test.get("alert_rule_test", []):
            (fired if case.get("exp_alerts") else silent).add(case["alertname"])
    alerts = {rule["alert"] for rule in yaml.safe_load(ALERTS.read_text())["groups"][0]["rules"]}
    assert fired == alerts, sorted(alerts - fired)
    assert {"QueuetopProbeFailing", "QueuetopIdleInTransactionRootBlocker"} <= silent


# -- queue verdicts (issue 29) ---------------------------------------------------------------------


def _verdicts(metrics: dict[tuple[str, tuple], float]) -> dict[tuple[str, str, str], dict[str, float]]:
    """queuetop_queue_diagnosis by (host, source, queue): each code's value."""
    found: dict[tuple[str, str, str], dict[str, float]] = {}
    for (name, labels), value in metrics.items():
        if name == "queuetop_queue_diagnosis":
            d = dict(labels)
            found.setdefault((d["host"], d["source"], d["queue"]), {})[d["code"]] = value
    return found


def _verdict_seconds(metrics: dict[tuple[str, tuple], float]) -> dict[tuple[str, str, str], float]:
    return {(d["host"], d["source"], d["queue"]): value for (name, labels), value in metrics.items()
            if name == "queuetop_queue_diagnosis_seconds" for d in [dict(labels)]}


def test_each_judged_queue_has_a_series_per_verdict_code_one_of_them_1():
    """A state set, as queuetop_lease_state: every code of CODES for each judged queue, 1 for its
    verdict, 0 for the others; how long it has held beside it. No pid, reason or object in a label."""
    from probes.diagnosis import CODES
    from probes.samples import Diagnosis
    from tui.sample import sample_snapshot

    base = replace(sample_snapshot(step=1), extra={"host": "db1"})
    assert METRICS["queuetop_queue_diagnosis"].labels == ("host", "source", "queue", "code")
    assert METRICS["queuetop_queue_diagnosis_seconds"].labels == ("host", "source", "queue")
    assert {"queuetop_queue_diagnosis", "queuetop_queue_diagnosis_seconds"} <= served_names()
    for n, code in enumerate(CODES):
        verdict = Diagnosis(code=code, reason=f"why {code}", pids=(4242, 4343), objects=("jobs",), since_s=10.0 * n + 0.5)
        snapshot = replace(base, queues=(replace(base.queues[0], diagnosis=verdict), *base.queues[1:]))
        metrics = _scraped(snapshot)
        verdicts = _verdicts(metrics)
        first = ("db1", base.queues[0].source, base.queues[0].name)
        assert verdicts[first] == {c: float(c == code) for c in CODES}, code
        assert _verdict_seconds(metrics)[first] == 10.0 * n + 0.5
        # every queue of the snapshot is judged: each has all the codes, exactly one of them 1
        assert set(verdicts) == {("db1", q.source, q.name) for q in snapshot.queues}
        for queue, values in verdicts.items():
            assert set(values) == set(CODES) and sorted(values.values()) == [0.0] * (len(CODES) - 1) + [1.0], queue
        labels = {key for (name, labels), _v in metrics.items() if name.startswith("queuetop_queue_diagnosis")
                  for key, _value in labels}
        assert labels == {"host", "source", "queue", "code"}
        assert not any("4242" in value or "why" in value for (_n, labels), _v in metrics.items() for _k, value in labels)
    # how long not known: the verdict is served, its duration absent (never 0)
    unknown_since = replace(base.queues[0], diagnosis=Diagnosis(code="no-consumers", reason="3 ready", since_s=None))
    metrics = _scraped(replace(base, queues=(unknown_since, *base.queues[1:])))
    first = ("db1", base.queues[0].source, base.queues[0].name)
    assert _verdicts(metrics)[first]["no-consumers"] == 1 and first not in _verdict_seconds(metrics)


def test_a_verdict_not_known_is_absent():
    """Not judged (diagnosis None: a recording older than the verdicts), a queue source that failed,
    the queues probe failed: no series of the verdict at all, never a 0 or a `healthy` that reads as calm."""
    from probes.model import ProbeStatus
    from tui.sample import sample_snapshot

    base = replace(sample_snapshot(step=1), extra={"host": "db1"})
    assert {q.source for q in base.queues} == {"reference", "table"}
    judged = {("db1", q.source, q.name) for q in base.queues}
    # not judged: that queue alone has neither family; the others keep theirs
    unjudged = replace(base, queues=(replace(base.queues[0], diagnosis=None), *base.queues[1:]))
    metrics = _scraped(unjudged)
    first = ("db1", base.queues[0].source, base.queues[0].name)
    assert set(_verdicts(metrics)) == set(_verdict_seconds(metrics)) == judged - {first}
    assert ("queuetop_queue_depth", (("host", "db1"), ("queue", base.queues[0].name), ("source", base.queues[0].source))) in metrics
    # a source that failed: its queues' verdicts are unknown too
    probes = dict(base.probes)
    probes["queues"] = ProbeStatus(elapsed_ms=3.0, error="table: permission denied", unread=("table",))
    metrics = _scraped(replace(base, probes=probes))
    assert set(_verdicts(metrics)) == set(_verdict_seconds(metrics)) == {q for q in judged if q[1] != "table"} != set()
    # the queues probe failed: none
    probes["queues"] = ProbeStatus(elapsed_ms=3.0, error="canceling statement due to statement timeout", unread=("all",))
    metrics = _scraped(replace(base, probes=probes))
    assert not _verdicts(metrics) and not _verdict_seconds(metrics)
    # a host that is down: none
    assert not _verdicts(_scraped(replace(base, extra={"host": "db1", "connected": False})))


def test_the_exporter_serves_a_no_consumers_verdict_from_the_real_server(db, exporter_factory):
    """The engine's queue with 3 ready messages and nobody on its table: the exporter's sampler
    judges it over its cycles (one Diagnoser per host), and /metrics says no-consumers, 1, the
    other codes 0, and how long it has held: the snapshot's since_s at the same instant."""
    from probes.diagnosis import CODES

    with db.connect() as conn:
        queue = TableQueue.create(conn, "prom_orphans")
        for n in range(3):
            queue.enqueue(conn, json.dumps({"n": n}))
    exporter = exporter_factory("--dsn", db.dsn, "--interval", "0.3")
    host = "local/" + db.name
    key = (host, "reference", "prom_orphans")
    wait_until(lambda: _verdicts(exporter.metrics()).get(key, {}).get("no-consumers") == 1, timeout=30,
               what="the no-consumers verdict on /metrics")
    text = exporter.get("/metrics")
    # the text format as served (the client writes labels in name order)
    assert f'queuetop_queue_diagnosis{{code="no-consumers",host="{host}",queue="prom_orphans",source="reference"}} 1.0' in text
    metrics, snapshot = _at_one_instant(exporter, host)
    (q,) = [q for q in snapshot["queues"] if q["name"] == "prom_orphans" and q["source"] == "reference"]
    assert q["diagnosis"]["code"] == "no-consumers" and "3 ready" in q["diagnosis"]["reason"], q["diagnosis"]
    assert _verdicts(metrics)[key] == {code: float(code == "no-consumers") for code in CODES}
    assert _verdict_seconds(metrics)[key] == q["diagnosis"]["since_s"] >= 0
    assert not [k for k in metrics if "pid" in dict(k[1]) and k[0] != "queuetop_root_blocker_info"]
    assert exporter.stop() == 0
