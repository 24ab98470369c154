"""The engine's actions as the dashboard offers them (a key, a prompt, a palette command each),
and how a prompt's words become an engine call. No Textual here: the app's actions part runs
`run_engine_action` in a thread worker."""

from __future__ import annotations

from collections.abc import Callable

from dbcore.errors import QueuetopError

# Engine actions: (binding id, key, title, prompt placeholder, default value); no placeholder: no prompt.
ENGINE_ACTIONS = [
    ("producer.start", "n", "Start a producer", "QUEUE RATE_PER_S", "orders 50"),
    ("producer.stop", "N", "Stop a producer", "QUEUE", "orders"),
    ("consumers.start", "w", "Start consumers", "QUEUE WORKERS HANDLER MODE(claim|hold-transaction)", "orders 2 noop claim"),
    ("consumers.stop", "W", "Stop consumers", "QUEUE", "orders"),
    ("burst", "b", "Burst-enqueue", "QUEUE COUNT", "orders 1000"),
    ("ring.put", "g", "Put on a ring", "RING COUNT", "audit 5"),
    ("ring.take", "G", "Take from a ring", "RING COUNT", "audit 5"),
    ("lease.take", "l", "Take a lease", "NAME HOLDER TTL_S", "relay operator 30"),
    ("lease.release", "L", "Release a lease", "NAME HOLDER", "relay operator"),
    ("blocker", "i", "Inject a blocker", "QUEUE SECONDS [row]", "orders 10"),
    ("compact", "o", "Compact now", "GROUP (a task id) or all", "all"),
    ("scenario.start", "s", "Start the contention scenario", "MODE(naive|compacted) SUBMITTERS [SECONDS]", "naive 16 60"),
    ("scenario.stop", "S", "Stop the contention scenario", None, None),
    # u, U: y is copy (as in pg_activity).
    ("relays.start", "u", "Start outbox relays", "RELAYS RATE_PER_S", "3 20"),
    ("relays.stop", "U", "Stop the outbox relays", None, None),
    ("relays.kill", "x", "Kill the relay leader", None, None),
]


class MissingQueue(QueuetopError):
    """A prompt named a queue that does not exist: the dashboard asks before creating it (a typo
    must not create an empty queue)."""

    exit_code = 2
    kind = "queue"

    def __init__(self, queue: str) -> None:
        super().__init__(f"{self.kind} {queue!r} does not exist")
        self.queue = self.name = queue


class MissingRing(MissingQueue):
    """A prompt named a ring (a bounded queue) that does not exist: the dashboard asks, as for a
    queue, and for its capacity (a ring is never resized)."""

    kind = "ring"


def ring_exists(controls, name: str) -> bool:
    """Whether the engine has a ring of that name (a name it refuses is a UsageError), on a
    session of the controls' database, in its dialect."""
    from dbcore.dialect import open_session
    from dbcore.names import check_name
    from queues.schema import ENGINE_SQL

    with open_session(controls.target, application_name="queuetop-control") as conn:
        return conn.execute(ENGINE_SQL["ring_describe"], {"name": check_name("ring", name)}).fetchone() is not None


def run_engine_action(controls, binding_id: str, text: str, report: Callable[[str], None] | None = None,
                      *, create: bool = False) -> str:
    """Parse a prompt's words and run the action; returns what to tell the operator. `report`
    receives what an action running on in the background has to say when it ends. A queue that
    does not exist raises MissingQueue, unless `create` (the operator said yes): then it is
    created and recorded as the dashboard's (`queuetop demo reset` removes it). A ring put on
    raises MissingRing, unless `create`: then it is created with the capacity the prompt's third
    word gives (RING COUNT CAPACITY)."""
    from dbcore.errors import UsageError
    from probes.sampler import blocked_applications
    from queues.control import SCENARIO_KEY
    from queues.scenarios.contention import ContentionOptions

    words = text.split()

    def existing(queue: str) -> str:
        if not controls.queue_exists(queue):
            if not create:
                raise MissingQueue(queue)
            controls.ensure_queue(queue, remember=True)
        return queue

    def arg(index: int, convert=str, name: str = "value"):
        try:
            return convert(words[index])
        except (IndexError, ValueError):
            raise UsageError(f"expected {name} as word {index + 1} in {text!r}") from None

    if binding_id == "producer.start":
        queue, rate = arg(0, name="QUEUE"), arg(1, float, "RATE_PER_S")
        controls.start_producer(existing(queue), rate)
        return f"producer on {queue}: {rate:g} messages/s"
    if binding_id == "producer.stop":
        queue = arg(0, name="QUEUE")
        return f"producer on {queue} stopped" if controls.stop(f"producer:{queue}") else f"no producer on {queue}"
    if binding_id == "consumers.start":
        queue = arg(0, name="QUEUE")
        workers = arg(1, int, "WORKERS") if len(words) > 1 else 1
        handler = words[2] if len(words) > 2 else "noop"
        mode = words[3] if len(words) > 3 else "claim"
        controls.start_consumers(existing(queue), workers=workers, handler=handler, mode=mode)
        return f"{workers} consumer(s) on {queue} ({handler}, {mode})"
    if binding_id == "consumers.stop":
        queue = arg(0, name="QUEUE")
        return f"consumers on {queue} stopped" if controls.stop(f"consumers:{queue}") else f"no consumers on {queue}"
    if binding_id == "burst":
        queue, count = arg(0, name="QUEUE"), arg(1, int, "COUNT")
        controls.burst(existing(queue), count)
        return f"enqueued {count:,} on {queue}"
    if binding_id == "ring.put":
        ring, count = arg(0, name="RING"), arg(1, int, "COUNT") if len(words) > 1 else 1
        created = ""
        if not ring_exists(controls, ring):
            if not create:
                raise MissingRing(ring)
            capacity = arg(2, int, "CAPACITY")
            controls.ring_create(ring, capacity)
            created = f" (a new ring of {capacity:,} cells)"
        controls.ring_put(ring, count)
        return f"put {count} on ring {ring}{created}"
    if binding_id == "ring.take":
        ring, count = arg(0, name="RING"), arg(1, int, "COUNT") if len(words) > 1 else 1
        if not ring_exists(controls, ring):  # nothing to take: a put offers to create it
            raise UsageError(f"no ring {ring!r}: Put on a ring offers to create it")
        return f"took {controls.ring_take(ring, count)} from ring {ring}"
    if binding_id == "lease.take":
        name, holder, ttl = arg(0, name="NAME"), arg(1, name="HOLDER"), arg(2, float, "TTL_S")
        return f"lease {name} taken by {holder}, fencing token {controls.lease_take(name, holder, ttl, remember=True)}"
    if binding_id == "lease.release":
        name, holder = arg(0, name="NAME"), arg(1, name="HOLDER")
        controls.lease_release(name, holder)
        return f"lease {name} released by {holder}"
    if binding_id == "blocker":
        queue, seconds = arg(0, name="QUEUE"), arg(1, float, "SECONDS")
        row = len(words) > 2 and words[2] == "row"
        controls.inject_blocker(queue, seconds, row=row)
        return f"blocker holds {queue} ({'head row' if row else 'table'}) for {seconds:g}s"
    if binding_id == "compact":
        group = None if not words or words[0] == "all" else arg(0, int, "GROUP (a task id) or all")
        result = controls.compact(group)
        return (f"compacted {result.groups} group(s): {result.rows_deleted:,} delta rows folded into "
                f"{result.aggregates_inserted:,} in {result.duration_ms:.0f} ms")
    if binding_id == "scenario.start":
        mode = arg(0, name="MODE")
        submitters = arg(1, int, "SUBMITTERS") if len(words) > 1 else 16
        seconds = arg(2, float, "SECONDS") if len(words) > 2 else 60.0
        options = ContentionOptions(mode=mode, submitters=submitters, duration_s=seconds)
        controls.start_scenario(options, blocked_applications, on_done=lambda result: report and report(scenario_summary(result)))
        watch = "the Locks panel fill up" if mode == "naive" else "the Compaction panel fold and Locks stay empty"
        return f"contention scenario: {mode}, {submitters} submitters, {seconds:g}s; watch {watch}"
    if binding_id == "relays.start":
        count = arg(0, int, "RELAYS") if words else 3
        rate = arg(1, float, "RATE_PER_S") if len(words) > 1 else 20.0
        controls.start_relays(count, rate)
        return f"{count} outbox relays share the lease outbox-relay; a service writes {rate:g} messages/s"
    if binding_id == "relays.stop":
        return "outbox relays stopped" if controls.stop_relays() else "no outbox relays are running"
    if binding_id == "relays.kill":
        holder, token = controls.kill_relay_leader()
        return f"killed {holder} (token {token}): its lease expires, a standby takes over with token {token + 1}"
    if binding_id == "scenario.stop":
        if controls.stop(SCENARIO_KEY):
            return "contention scenario stopped"
        return "no contention scenario is running"
    raise UsageError(f"unknown action {binding_id}")


def scenario_summary(result: dict) -> str:
    verdict = "consistent" if result.get("consistent") else "INCONSISTENT"
    return (f"contention {result['mode']}: {result['answers']:,} answers, {result['answers_per_s']:,.0f}/s, "
            f"at most {result['max_blocked_sessions']} blocked, {result['retries']:,} retries, {verdict}")

