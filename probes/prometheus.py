"""The Prometheus exporter: the latest snapshot of each host as metrics, served on /metrics.

Samplers run on their own schedule (probes/sampler.py, with the probes' safety rules: read-only,
autocommit, timeouts, one pool per host); each hands its snapshot to `SnapshotCollector.update`.
A scrape only formats the cached snapshots: it never touches a database, so Prometheus scraping
every 5 s costs the monitored databases nothing more than the sampler's own interval.

Every metric is declared in METRICS (name, type, help, labels, the probe it comes from): the
exporter serves those and no others, and the tests check that the shipped alert rules and Grafana
dashboard name only these. Unknown is absent: a figure that cannot be known (null in the snapshot)
is no sample at all, never a 0; nor is any figure of a probe that failed or did not run (the
sampler's ProbeStatus says which), nor any of a host that is down but its `queuetop_up 0` and its
probes' errors. No label takes a value per session: root blockers are counted by state,
applications are the few with the most sessions plus `(other)`, and a queue's verdict is a series
per code (probes/diagnosis.py's CODES), its reason and sessions left to /snapshot.

`/snapshot` serves the same cached snapshots as JSON lines (`queuetop snapshot --json`'s objects,
one per host), so that a scrape can be checked against what the probes saw at the same instant.

Label values come from the databases (queue, application, lease names...): each is made inert
(dbcore/text.py: a control, bidi or other invisible character is written as `\\x1b`, `\\u202e`),
and the client library escapes backslash, quote and newline. Many scrapers at once are served:
the body of a scrape is formatted once per new snapshot and format (not once per scrape), every
connection has a thread, and the listen backlog holds a burst of them (socketserver's default, 5,
dropped connections under 50 concurrent scrapers: a client's SYN retried after 1, 3, 7 s).
"""

from __future__ import annotations

import gzip
import json
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from importlib.metadata import PackageNotFoundError, version
from socketserver import ThreadingMixIn
from typing import Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.registry import Collector

from dbcore.text import inert

from .diagnosis import CODES
from .model import ProbeStatus, QueueSample, Snapshot, as_utc
from .pooler_console import POOLER
from .sampler import unreachable_status


@dataclass(frozen=True, slots=True)
class MetricSpec:
    kind: str  # "gauge" | "counter" (a counter's samples are served as NAME_total)
    help: str
    labels: tuple[str, ...]
    # The probe whose figure it is: none of its samples is served while that probe fails (unknown
    # is absent, never a 0 that reads as calm). None: the exporter's and the host's own.
    probe: str | None = None


Q = ("host", "source", "queue")
POOL = ("host", "database", "user")  # a PgBouncer pool: its database as PgBouncer names it, and user


def _queue(kind: str, help: str) -> MetricSpec:
    return MetricSpec(kind, help, Q, "queues")


def _server(kind: str, help: str) -> MetricSpec:
    return MetricSpec(kind, help, ("host",), "server_stats")


METRICS: dict[str, MetricSpec] = {
    # the exporter, the hosts and the probes
    "queuetop_build_info": MetricSpec("gauge", "1, with the version of queuetop that serves these metrics", ("version",)),
    "queuetop_up": MetricSpec("gauge", "1 while the host's database answers, 0 while it is unreachable", ("host",)),
    "queuetop_server_info": MetricSpec("gauge", "1, with the database server's dialect and version (while it answers)",
                                       ("host", "dialect", "version")),
    "queuetop_server_in_recovery": MetricSpec("gauge", "1 while the server is a hot standby (in recovery: read-only, its "
                                              "figures the primary's as of its last replayed transaction), 0 on a primary",
                                              ("host",)),
    "queuetop_server_replay_lag_seconds": MetricSpec("gauge", "A standby's replay lag: 0 when it replayed all the WAL it "
                                                     "received, else the time since the last transaction it replayed "
                                                     "committed on the primary (absent on a primary)", ("host",)),
    "queuetop_server_replay_lag_bytes": MetricSpec("gauge", "WAL a standby received and has not replayed yet (absent on a "
                                                   "primary, or with no WAL receiver)", ("host",)),
    "queuetop_server_replay_paused": MetricSpec("gauge", "1 while a standby's replay is paused (pg_wal_replay_pause), 0 "
                                                "while it runs (absent on a primary)", ("host",)),
    "queuetop_server_last_replay_timestamp_seconds": MetricSpec(
        "gauge", "When the last transaction a standby replayed committed on the primary (Unix time): what its figures are "
        "as of (absent on a primary)", ("host",)),
    # the whole server's figures (the server_stats probe: pg_stat_database summed over every database)
    "queuetop_server_transactions_committed": _server("counter", "Transactions committed, every database's (rate() of it "
                                                      "and of the rolled back is the server's transactions per second)"),
    "queuetop_server_transactions_rolled_back": _server("counter", "Transactions rolled back, every database's"),
    "queuetop_server_rows_inserted": _server("counter", "Rows inserted, every database's (absent on a standby: what it "
                                             "replays is not counted there)"),
    "queuetop_server_rows_updated": _server("counter", "Rows updated, every database's (absent on a standby)"),
    "queuetop_server_rows_deleted": _server("counter", "Rows deleted, every database's (absent on a standby)"),
    "queuetop_server_temp_bytes": _server("counter", "Bytes written to temporary files by queries (sorts and hashes past "
                                          "work_mem), every database's"),
    "queuetop_server_wal_bytes": _server("counter", "The WAL position in bytes: written on a primary (pg_current_wal_lsn), "
                                         "replayed on a standby (pg_last_wal_replay_lsn); rate() of it is WAL bytes per second"),
    "queuetop_server_blocks_hit": _server("counter", "Blocks found in shared buffers, every database's"),
    "queuetop_server_blocks_read": _server("counter", "Blocks read from outside shared buffers (the OS cache or disk), "
                                           "every database's"),
    "queuetop_server_deadlocks": _server("counter", "Deadlocks the server detected and broke, every database's"),
    "queuetop_server_cache_hit_ratio": _server("gauge", "Blocks found in shared buffers among those read between the probe's "
                                               "last two reads (absent: none read, or a first read)"),
    "queuetop_server_database_size_bytes": _server("gauge", "The size of every database, summed (read every 30 s; absent "
                                                   "where the role may not read them all)"),
    "queuetop_snapshot_timestamp_seconds": MetricSpec("gauge", "When the cached snapshot was taken (Unix time)", ("host",)),
    "queuetop_probe_duration_seconds": MetricSpec("gauge", "What the probe cost on the database, last run (absent: it did not run)",
                                                  ("host", "probe")),
    "queuetop_probe_error": MetricSpec("gauge", "1 when the probe failed, wholly or in part (a queue source), last run",
                                       ("host", "probe")),
    "queuetop_probe_note": MetricSpec("gauge", "1 when the probe read its figures and says something beside them (rows "
                                      "privileges hide, a locked named queue), last run", ("host", "probe")),
    # queues (every source: the engine's, outbox, inboxes, job tables, the libraries')
    "queuetop_queue_depth": _queue("gauge", "Messages ready, in flight or delayed"),
    "queuetop_queue_ready": _queue("gauge", "Messages claimable now"),
    "queuetop_queue_in_flight": _queue("gauge", "Messages being worked"),
    "queuetop_queue_delayed": _queue("gauge", "Messages scheduled for later or backing off"),
    "queuetop_queue_dead": _queue("gauge", "Messages failed for good (dead letters, archived failures)"),
    "queuetop_queue_blocked": _queue("gauge", "Messages due but not claimable now (a lock, a singleton or stately policy, "
                                     "a locked named queue): part of delayed"),
    "queuetop_queue_count_age_seconds": _queue("gauge", "Age of the exact count behind the queue's figures that are estimates "
                                               "(absent when every figure is exact now, or one was never counted)"),
    "queuetop_queue_oldest_ready_age_seconds": _queue("gauge", "Age of the oldest claimable message"),
    "queuetop_queue_enqueued_per_second": _queue("gauge", "Messages enqueued per second between the probe's last two samples"),
    "queuetop_queue_dequeued_per_second": _queue("gauge", "Messages dequeued per second between the probe's last two samples"),
    "queuetop_queue_failed_per_second": _queue("gauge", "Jobs failed for good per second between the probe's last two samples "
                                               "(where the library records it)"),
    "queuetop_queue_depth_is_estimate": _queue("gauge", "1 when depth is an estimate (a queue deeper than the probe reads)"),
    "queuetop_queue_dead_tuples": _queue("gauge", "Dead tuples (PostgreSQL) or ghost records (SQL Server) of the queue's table"),
    "queuetop_queue_enqueued": _queue("counter", "Messages enqueued since queuetop first saw the queue (rate() of it is the "
                                      "enqueue rate; absent where neither the library's records nor the table's statistics tell)"),
    "queuetop_queue_dequeued": _queue("counter", "Messages dequeued since queuetop first saw the queue (absent where neither "
                                      "the library's records nor exact counts tell)"),
    "queuetop_queue_failed": _queue("counter", "Jobs failed for good since queuetop first saw the queue (where the library "
                                    "records it)"),
    "queuetop_queue_table_inserted_rows": _queue("counter", "Rows inserted into the queue's table (the table's statistics)"),
    "queuetop_queue_table_deleted_rows": _queue("counter", "Rows deleted from the queue's table (the table's statistics)"),
    # each queue's verdict (probes/diagnosis.py): a state set over CODES, as queuetop_lease_state
    "queuetop_queue_diagnosis": MetricSpec(
        "gauge", "1 for the queue's verdict, judged over a window of samples (healthy, blocked, starved, no-consumers, "
        "failing, bloat, saturated, not-judged), 0 for the others; absent while the queue has no verdict", (*Q, "code"), "queues"),
    "queuetop_queue_diagnosis_seconds": _queue("gauge", "How long the queue's current verdict has held (absent: not judged, "
                                               "or not known)"),
    # rings
    "queuetop_ring_capacity": MetricSpec("gauge", "Cells of the ring", ("host", "ring"), "rings"),
    "queuetop_ring_used": MetricSpec("gauge", "Full cells of the ring", ("host", "ring"), "rings"),
    "queuetop_ring_refused": MetricSpec("counter", "Puts refused because the ring was full", ("host", "ring"), "rings"),
    # leases
    "queuetop_lease_expires_in_seconds": MetricSpec("gauge", "Seconds until the lease expires (negative: expired)",
                                                    ("host", "lease"), "leases"),
    "queuetop_lease_token": MetricSpec("gauge", "The lease's fencing token", ("host", "lease"), "leases"),
    "queuetop_lease_state": MetricSpec("gauge", "1 for the lease's state (held, expired: held past its expiry, free)",
                                       ("host", "lease", "state"), "leases"),
    # locks
    "queuetop_blocked_sessions": MetricSpec("gauge", "Sessions waiting on a lock", ("host",), "locks"),
    "queuetop_blocked_wait_max_seconds": MetricSpec("gauge", "The longest wait of a blocked session (0: none waits)", ("host",), "locks"),
    "queuetop_root_blockers": MetricSpec("gauge", "Sessions at the root of a blocking chain", ("host",), "locks"),
    "queuetop_root_blockers_by_state": MetricSpec("gauge", "Sessions at the root of a blocking chain, by their state",
                                                  ("host", "state"), "locks"),
    "queuetop_root_blocker_blocked_sessions_max": MetricSpec(
        "gauge", "The most sessions one root blocker in this state holds up, directly or behind others", ("host", "state"), "locks"),
    "queuetop_root_blocker_info": MetricSpec(
        "gauge", "1 for each of the root blockers holding up the most sessions (at most 3 per host): pid, state, application",
        ("host", "pid", "state", "application"), "locks"),
    "queuetop_prepared_transactions": MetricSpec("gauge", "Transactions prepared for two-phase commit (locks with no session)",
                                                 ("host",), "locks"),
    "queuetop_app_locks": MetricSpec("gauge", "Application locks (advisory, sp_getapplock) held or waited for",
                                     ("host", "granted"), "locks"),
    # connections
    "queuetop_sessions": MetricSpec("gauge", "Sessions on the server", ("host",), "connections"),
    "queuetop_sessions_max": MetricSpec("gauge", "max_connections (@@MAX_CONNECTIONS)", ("host",), "connections"),
    "queuetop_sessions_usable": MetricSpec(
        "gauge", "The connections ordinary roles may use: max_connections less superuser_reserved_connections (and, "
        "PostgreSQL 16+, reserved_connections); past queuetop_sessions of them an ordinary role is refused", ("host",),
        "connections"),
    "queuetop_sessions_by_state": MetricSpec("gauge", "Sessions by state", ("host", "state"), "connections"),
    "queuetop_sessions_by_application": MetricSpec(
        "gauge", "Sessions by application name: the 10 applications with the most, the rest under (other)",
        ("host", "application"), "connections"),
    "queuetop_oldest_transaction_age_seconds": MetricSpec("gauge", "Age of the oldest open transaction", ("host",), "connections"),
    "queuetop_xmin_horizon_age_xids": MetricSpec(
        "gauge", "Transactions by which the session holding the xmin horizon (oldest snapshot or transaction) holds it back",
        ("host",), "connections"),
    # replication (PostgreSQL): the standbys streaming from the server, its replication slots
    "queuetop_standbys": MetricSpec("gauge", "Standbys (walsenders: physical standbys, logical subscribers, base backups) "
                                    "streaming from the server", ("host",), "replication"),
    "queuetop_standby_replay_lag_seconds": MetricSpec(
        "gauge", "How long the standby's replay is behind this server's flushed WAL (0 when it replayed it all; absent "
        "without pg_read_all_stats)", ("host", "standby", "client"), "replication"),
    "queuetop_standby_replay_lag_bytes": MetricSpec(
        "gauge", "WAL written here and not yet replayed on the standby (absent without pg_read_all_stats)",
        ("host", "standby", "client"), "replication"),
    "queuetop_replication_slot_retained_wal_bytes": MetricSpec(
        "gauge", "WAL the server keeps for the replication slot (from its restart_lsn)", ("host", "slot", "type"), "replication"),
    "queuetop_replication_slot_active": MetricSpec("gauge", "1 while a consumer streams from the slot, 0 while none does",
                                                   ("host", "slot", "type"), "replication"),
    "queuetop_replication_slot_xmin_age_xids": MetricSpec(
        "gauge", "Transactions by which the slot's xmin (a standby's feedback) holds every table's horizon back (absent: "
        "it holds none)", ("host", "slot", "type"), "replication"),
    "queuetop_replication_slot_catalog_xmin_age_xids": MetricSpec(
        "gauge", "Transactions by which the slot's catalog_xmin (logical decoding) holds the system catalogs' horizon back "
        "(absent: it holds none)", ("host", "slot", "type"), "replication"),
    # a PgBouncer's pools (the pooler probe, on its admin console: --pgbouncer), every pool but the
    # console's own, by the database (as PgBouncer names it) and user
    "queuetop_pool_clients_active": MetricSpec("gauge", "Clients of the PgBouncer pool linked to a server connection, or "
                                               "idle needing none (cl_active)", POOL, "pooler"),
    "queuetop_pool_clients_waiting": MetricSpec("gauge", "Clients of the PgBouncer pool waiting for a server connection "
                                                "(cl_waiting): its server connections are all in use", POOL, "pooler"),
    "queuetop_pool_servers_active": MetricSpec("gauge", "Server connections of the PgBouncer pool linked to a client (sv_active)",
                                               POOL, "pooler"),
    "queuetop_pool_servers_idle": MetricSpec("gauge", "Server connections of the PgBouncer pool free for a client (sv_idle)",
                                             POOL, "pooler"),
    "queuetop_pool_maxwait_seconds": MetricSpec("gauge", "How long the PgBouncer pool's oldest waiting client has waited "
                                                "(maxwait; 0: none waits)", POOL, "pooler"),
    # the compactor
    "queuetop_compaction_pending_deltas": MetricSpec("gauge", "Delta rows waiting to be folded", ("host", "name"), "compaction"),
    "queuetop_compaction_groups": MetricSpec("gauge", "Groups with pending deltas", ("host", "name"), "compaction"),
    "queuetop_compaction_last_run_timestamp_seconds": MetricSpec("gauge", "When the compactor last ran (Unix time)",
                                                                 ("host", "name"), "compaction"),
    "queuetop_compaction_runs": MetricSpec("counter", "Compactions run", ("host", "name"), "compaction"),
}
LEASE_STATES = ("held", "expired", "free")
# Bounded label values: the applications with the most sessions each have a series, the rest are
# summed under OTHER_APPLICATIONS; root blockers are counted by state, and only the few holding up
# the most sessions are named (pid, application) in queuetop_root_blocker_info.
TOP_APPLICATIONS = 10
OTHER_APPLICATIONS = "(other)"
TOP_ROOT_BLOCKERS = 3
UNKNOWN_STATE = "unknown"  # a state the probe's role may not see (no pg_read_all_stats)
# The status the sampler gives a probe it had no connection to run (probes/sampler.py).
_NOT_RUN = unreachable_status("").error or "cannot reach the database: "


def served_names() -> set[str]:
    """Every sample name /metrics may carry (a counter's with `_total`)."""
    return {name + ("_total" if spec.kind == "counter" else "") for name, spec in METRICS.items()}


def build_version() -> str:
    """queuetop's version, as installed."""
    try:
        return version("queuetop")
    except PackageNotFoundError:
        return "unknown"


_BUILD_VERSION = build_version()


def probe_ran(status: ProbeStatus) -> bool:
    """Whether the probe ran on the database last time (a host that is down runs none)."""
    return not (status.error or "").startswith(_NOT_RUN)


def probe_failed(status: ProbeStatus) -> bool:
    """Whether what the probe reports is unknown: it failed (`unread == ("all",)`, probes/sampler.py)
    or did not run. A probe that saw only part (a queue source that failed, another role's
    sessions hidden) has an error too, but its figures are good."""
    return status.error is not None and (status.unread == ("all",) or not probe_ran(status))


class _Families:
    """The metric families of one scrape, filled sample by sample; a sample of a probe that is not
    `known` (it failed, or did not run) is dropped."""

    def __init__(self) -> None:
        self._families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {}
        self.known: set[str] = set()

    def add(self, name: str, labels: Iterable[object], value: float | int | bool | None) -> None:
        spec = METRICS[name]
        if value is None or (spec.probe is not None and spec.probe not in self.known):
            return  # unknown: no sample, never a made-up 0
        family = self._families.get(name)
        if family is None:
            family = self._families[name] = (CounterMetricFamily if spec.kind == "counter" else GaugeMetricFamily)(
                name, spec.help, labels=spec.labels)
        # inert(): text from the database never carries a control character into a label
        # (None is ""); the client escapes backslash, quote and newline itself.
        family.add_metric([inert(label) for label in labels], float(value))

    def __iter__(self) -> Iterator[Metric]:
        return iter(self._families.values())


def families(snapshots: Iterable[Snapshot]) -> list[Metric]:
    out = _Families()
    out.add("queuetop_build_info", [_BUILD_VERSION], 1)
    for s in snapshots:
        host = s.host
        connected = s.connected
        out.add("queuetop_up", [host], connected)
        out.add("queuetop_snapshot_timestamp_seconds", [host], _epoch(s.taken_at))
        for probe, status in s.probes.items():
            if connected and probe_ran(status):
                out.add("queuetop_probe_duration_seconds", [host, probe], status.elapsed_ms / 1000)
            out.add("queuetop_probe_error", [host, probe], status.error is not None)
            if connected and probe_ran(status):
                out.add("queuetop_probe_note", [host, probe], status.notes is not None)
        # A host that is down: what it had is unknown now (absent, not stale); each probe that
        # failed: its figures are unknown; a probe missing from the snapshot did not run.
        out.known = {probe for probe, status in s.probes.items() if not probe_failed(status)} if connected else set()
        if connected and s.server.version is not None:
            out.add("queuetop_server_info", [host, s.server.dialect, s.server.version], 1)
        if connected and s.server.role is not None:
            _recovery(out, s)
        _queues(out, s)
        for r in s.rings:
            out.add("queuetop_ring_capacity", [host, r.name], r.capacity)
            out.add("queuetop_ring_used", [host, r.name], r.used)
            out.add("queuetop_ring_refused", [host, r.name], r.refused_total)
        for lease in s.leases:
            out.add("queuetop_lease_expires_in_seconds", [host, lease.name], lease.expires_in_s)
            out.add("queuetop_lease_token", [host, lease.name], lease.token)
            for state in LEASE_STATES:
                out.add("queuetop_lease_state", [host, lease.name, state], lease.state == state)
        _locks(out, s)
        _connections(out, s)
        _replication(out, s)
        _pooler(out, s)
        _server_stats(out, s)
        for comp in s.compaction:
            out.add("queuetop_compaction_pending_deltas", [host, comp.name], comp.pending_deltas)
            out.add("queuetop_compaction_groups", [host, comp.name], comp.groups)
            out.add("queuetop_compaction_last_run_timestamp_seconds", [host, comp.name], _epoch(comp.last_run_at))
            out.add("queuetop_compaction_runs", [host, comp.name], comp.runs_total)
    return list(out)


def _recovery(out: _Families, s: Snapshot) -> None:
    """Whether the server is a standby, and its replay: how far behind, paused, as of when."""
    server, host = s.server, s.host
    out.add("queuetop_server_in_recovery", [host], server.standby)
    if server.standby:
        out.add("queuetop_server_replay_lag_seconds", [host], server.replay_lag_s)
        out.add("queuetop_server_replay_lag_bytes", [host], server.replay_lag_bytes)
        out.add("queuetop_server_replay_paused", [host], server.replay_paused)
        out.add("queuetop_server_last_replay_timestamp_seconds", [host], _epoch(server.replayed_at))


def _queues(out: _Families, s: Snapshot) -> None:
    status = s.probes.get("queues")
    unread = set(status.unread) if status is not None else set()  # sources that failed: their queues are unknown
    for q in s.queues:
        if q.source in unread:
            continue
        labels = [s.host, q.source, q.name]
        for name, value in (("depth", q.depth), ("ready", q.ready), ("in_flight", q.in_flight), ("delayed", q.delayed),
                            ("dead", q.dead), ("blocked", q.blocked), ("oldest_ready_age_seconds", q.oldest_ready_age_s),
                            ("count_age_seconds", _count_age(q)),
                            ("enqueued_per_second", q.enqueued_per_s), ("dequeued_per_second", q.dequeued_per_s),
                            ("failed_per_second", q.failed_per_s),
                            # whether a depth nobody could read is an estimate is unknown too
                            ("depth_is_estimate", q.depth_is_estimate if q.depth is not None else None),
                            ("dead_tuples", q.dead_tuples), ("table_inserted_rows", q.inserted_total),
                            ("enqueued", q.enqueued_total), ("dequeued", q.dequeued_total), ("failed", q.failed_total),
                            ("table_deleted_rows", q.deleted_total)):
            out.add(f"queuetop_queue_{name}", labels, value)
        # The verdict, as a state set: a series per code, 1 for the current one (none: not judged,
        # e.g. a recording older than the verdicts). No pid or reason in a label: they vary.
        if q.diagnosis is not None:
            for code in CODES:
                out.add("queuetop_queue_diagnosis", [*labels, code], q.diagnosis.code == code)
            out.add("queuetop_queue_diagnosis_seconds", labels, q.diagnosis.since_s)


def _pooler(out: _Families, s: Snapshot) -> None:
    """A PgBouncer's pools. Read on a connection of their own, they are known whether or not the
    database answers (a pool with no connection left is when they matter most); unknown (absent)
    while the console cannot be read."""
    status = s.probes.get(POOLER)
    if status is None or probe_failed(status) or s.pooler is None:
        return
    out.known.add(POOLER)
    for pool in s.pooler.pools:
        labels = [s.host, pool.database, pool.user]
        out.add("queuetop_pool_clients_active", labels, pool.cl_active)
        out.add("queuetop_pool_clients_waiting", labels, pool.cl_waiting)
        out.add("queuetop_pool_servers_active", labels, pool.sv_active)
        out.add("queuetop_pool_servers_idle", labels, pool.sv_idle)
        out.add("queuetop_pool_maxwait_seconds", labels, pool.maxwait_s)


def _server_stats(out: _Families, s: Snapshot) -> None:
    """The server's cumulative counters (rate() makes them per second, across resets), the hit
    ratio over the probe's last interval, and the size."""
    st = s.server_stats
    if st is None:
        return
    labels = [s.host]
    for name, value in (("transactions_committed", st.xact_commit_total), ("transactions_rolled_back", st.xact_rollback_total),
                        ("rows_inserted", st.tup_inserted_total), ("rows_updated", st.tup_updated_total),
                        ("rows_deleted", st.tup_deleted_total), ("temp_bytes", st.temp_bytes_total),
                        ("wal_bytes", st.wal_bytes_total), ("blocks_hit", st.blks_hit_total), ("blocks_read", st.blks_read_total),
                        ("deadlocks", st.deadlocks_total), ("cache_hit_ratio", st.cache_hit_ratio),
                        ("database_size_bytes", st.database_size_bytes)):
        out.add(f"queuetop_server_{name}", labels, value)


def _count_age(q: QueueSample) -> float | None:
    """The oldest exact count behind a queue's estimated figures (None: none estimated, or one
    extrapolated, never counted)."""
    ages = list(q.estimated.values())
    if not ages or any(age is None for age in ages):
        return None
    return max(age for age in ages if age is not None)


def _locks(out: _Families, s: Snapshot) -> None:
    host = s.host
    out.add("queuetop_blocked_sessions", [host], len(s.blocked))
    waits = [b.wait_s for b in s.blocked if b.wait_s is not None]
    out.add("queuetop_blocked_wait_max_seconds", [host], max(waits) if waits else (0 if not s.blocked else None))
    out.add("queuetop_root_blockers", [host], len(s.blockers))
    by_state: dict[str, list[int]] = {}
    for root in s.blockers:
        by_state.setdefault(inert(root.state or UNKNOWN_STATE), []).append(root.blocked_count)
    for state, counts in by_state.items():
        out.add("queuetop_root_blockers_by_state", [host, state], len(counts))
        out.add("queuetop_root_blocker_blocked_sessions_max", [host, state], max(counts))
    for root in sorted(s.blockers, key=lambda b: (-b.blocked_count, b.pid))[:TOP_ROOT_BLOCKERS]:
        out.add("queuetop_root_blocker_info", [host, root.pid, root.state or UNKNOWN_STATE, root.application], 1)
    out.add("queuetop_prepared_transactions", [host], len(s.prepared_xacts))
    for granted in (True, False):
        out.add("queuetop_app_locks", [host, str(granted).lower()], sum(1 for a in s.app_locks if a.granted is granted))


def _connections(out: _Families, s: Snapshot) -> None:
    c = s.connections
    if c is None:
        return
    host = s.host
    out.add("queuetop_sessions", [host], c.total)
    out.add("queuetop_sessions_max", [host], c.max)
    out.add("queuetop_sessions_usable", [host], c.usable)
    for state, n in c.by_state.items():
        out.add("queuetop_sessions_by_state", [host, state], n)
    for application, n in top_applications(c.by_application).items():
        out.add("queuetop_sessions_by_application", [host, application], n)
    out.add("queuetop_oldest_transaction_age_seconds", [host], c.oldest_xact_age_s)
    out.add("queuetop_xmin_horizon_age_xids", [host], c.xmin_holder_age_xids)


def _replication(out: _Families, s: Snapshot) -> None:
    """The standbys, each by its name and client (two standbys both called `walreceiver` on the
    same host are one series: the one further behind), and the replication slots."""
    r = s.replication
    if r is None:
        return
    host = s.host
    out.add("queuetop_standbys", [host], len(r.standbys))
    worst: dict[tuple[str, str], tuple[float | None, float | None]] = {}
    for standby in r.standbys:
        key = (inert(standby.application or ""), inert(standby.client or ""))
        seconds, size = worst.get(key, (None, None))
        worst[key] = (_most(seconds, standby.replay_lag_s), _most(size, standby.replay_lag_bytes))
    for (name, client), (seconds, size) in worst.items():
        out.add("queuetop_standby_replay_lag_seconds", [host, name, client], seconds)
        out.add("queuetop_standby_replay_lag_bytes", [host, name, client], size)
    for slot in r.slots:
        labels = [host, slot.name, slot.type]
        out.add("queuetop_replication_slot_retained_wal_bytes", labels, slot.retained_wal_bytes)
        out.add("queuetop_replication_slot_active", labels, slot.active)
        out.add("queuetop_replication_slot_xmin_age_xids", labels, slot.xmin_age)
        out.add("queuetop_replication_slot_catalog_xmin_age_xids", labels, slot.catalog_xmin_age)


def _most(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


def top_applications(by_application: dict[str, int], top: int = TOP_APPLICATIONS) -> dict[str, int]:
    """Sessions by application as labels may carry them: inert names (two names that read the same
    once inert are one), the `top` applications with the most sessions, the rest summed under
    OTHER_APPLICATIONS (so the series stay few, whatever the clients call themselves)."""
    merged: dict[str, int] = {}
    for application, n in by_application.items():
        label = inert(application)
        merged[label] = merged.get(label, 0) + n
    rest = merged.pop(OTHER_APPLICATIONS, 0)  # an application that calls itself "(other)" is counted with the rest
    ranked = sorted(merged.items(), key=lambda kv: (-kv[1], kv[0]))
    kept = dict(ranked[:top])
    rest += sum(n for _application, n in ranked[top:])
    if rest:
        kept[OTHER_APPLICATIONS] = rest
    return kept


def _epoch(value: datetime | None) -> float | None:
    """Unix time; a time without zone is UTC (SQL Server's datetime2, as queuetop's T-SQL reads it)."""
    if value is None:
        return None
    return as_utc(value).timestamp()


class SnapshotCollector(Collector):
    """The latest snapshot of each host; a scrape formats them (the sink runs in the samplers' threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snapshots: dict[str, Snapshot] = {}
        self.generation = 0  # counts updates: a scrape's body is formatted once per generation

    def update(self, snapshot: Snapshot) -> None:
        with self._lock:
            self._snapshots[snapshot.host] = snapshot
            self.generation += 1

    def snapshots(self) -> list[Snapshot]:
        with self._lock:
            return list(self._snapshots.values())

    def state(self) -> tuple[int, list[Snapshot]]:
        """The generation and its snapshots, read together."""
        with self._lock:
            return self.generation, list(self._snapshots.values())

    def collect(self) -> Iterator[Metric]:
        yield from families(self.snapshots())


class _Fixed(Collector):
    """The families of a given list of snapshots (one generation's), for an encoder; only the
    samples named in `names`, if given (`/metrics?name[]=queuetop_up`)."""

    def __init__(self, snapshots: list[Snapshot], names: set[str] | None = None) -> None:
        self._snapshots = snapshots
        self._names = names

    def collect(self) -> Iterator[Metric]:
        for family in families(self._snapshots):
            if self._names is None:
                yield family
                continue
            samples = [sample for sample in family.samples if sample.name in self._names]
            if samples:
                restricted = Metric(family.name, family.documentation, family.type, family.unit)
                restricted.samples = samples
                yield restricted


class _Bodies:
    """/metrics bodies of the collector's latest generation, one per format (text or OpenMetrics,
    as the Accept header asks; gzipped or not): formatted by the first scrape that asks, under a
    lock so that fifty scrapers arriving together format it once, then served as they are."""

    def __init__(self, collector: SnapshotCollector) -> None:
        self._collector = collector
        self._lock = threading.Lock()
        self._generation = -1
        self._bodies: dict[tuple[str, bool], tuple[list[tuple[str, str]], bytes]] = {}

    def get(self, accept: str, accept_encoding: str, names: set[str] | None = None) -> tuple[list[tuple[str, str]], bytes]:
        """The headers and body of a scrape; one restricted to `names` is formatted afresh."""
        encoder, content_type = choose_encoder(accept)
        key = (content_type, gzip_accepted(accept_encoding))
        if names is not None:
            return self._format(encoder, key, self._collector.snapshots(), names)
        with self._lock:
            generation, snapshots = self._collector.state()
            if generation != self._generation:
                self._generation, self._bodies = generation, {}
            found = self._bodies.get(key)
            if found is None:
                found = self._bodies[key] = self._format(encoder, key, snapshots)
            return found

    @staticmethod
    def _format(encoder: Callable[[Collector], bytes], key: tuple[str, bool], snapshots: list[Snapshot],
                names: set[str] | None = None) -> tuple[list[tuple[str, str]], bytes]:
        body = encoder(_Fixed(snapshots, names))
        headers = [("Content-Type", key[0])]
        if key[1]:
            body = gzip.compress(body, compresslevel=6, mtime=0)
            headers.append(("Content-Encoding", "gzip"))
        headers.append(("Content-Length", str(len(body))))
        return headers, body


class _QuietHandler(WSGIRequestHandler):
    timeout = 30  # a client that connects and sends nothing holds its thread this long at most

    def setup(self) -> None:
        super().setup()
        if self.connection.family in (socket.AF_INET, socket.AF_INET6):
            # wsgiref sends the headers and the body in two writes: without this, Nagle holds
            # the body back until the client's delayed ACK of the headers (up to 40 ms).
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # a scrape every few seconds is no news
        pass


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    """A thread per connection; a listen backlog for a burst of scrapers (the kernel caps it
    at net.core.somaxconn)."""

    daemon_threads = True
    request_queue_size = 1024


def wsgi_app(collector: SnapshotCollector) -> Callable[..., Iterable[bytes]]:
    """/metrics (and /) from the collector's registry; /snapshot as JSON lines."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    metrics = make_wsgi_app(registry)  # OPTIONS, and 405 for any other method
    bodies = _Bodies(collector)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO") or "/"
        if path == "/snapshot":
            body = "".join(json.dumps(s.to_json()) + "\n" for s in collector.snapshots()).encode()
            start_response("200 OK", [("Content-Type", "application/x-ndjson"), ("Content-Length", str(len(body)))])
            return [body]
        if path in ("/", "/metrics"):
            if environ.get("REQUEST_METHOD") == "GET":
                names = parse_qs(environ.get("QUERY_STRING", "")).get("name[]")
                headers, body = bodies.get(environ.get("HTTP_ACCEPT", ""), environ.get("HTTP_ACCEPT_ENCODING", ""),
                                           set(names) if names else None)
                start_response("200 OK", list(headers))
                return [body]
            return metrics(environ, start_response)
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"queuetop: /metrics, or /snapshot\n"]

    return app


class _ThreadingServer6(_ThreadingServer):
    address_family = socket.AF_INET6


def serve(collector: SnapshotCollector, host: str, port: int) -> WSGIServer:
    """An HTTP server bound to (host, port), not yet serving (the caller runs `serve_forever`)."""
    server_class = _ThreadingServer6 if ":" in host else _ThreadingServer
    return make_server(host, port, wsgi_app(collector), server_class=server_class, handler_class=_QuietHandler)
