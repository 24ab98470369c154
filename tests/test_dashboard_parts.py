"""The dashboard's parts, each on its own, without an app: the hosts and their switching, the host
bar's and the status line's text, what a prompt offers, what a terminate says it frees, live
recording and seeking in a replay. (The app that composes them is driven in test_tui.py.)"""

from __future__ import annotations

import dataclasses

from probes.recording import Recording, ReplayClock
from tui.dashboard.actions import prefill, what_ending_releases
from tui.dashboard.bars import StatusFacts, status_parts
from tui.dashboard.hosts import INTERVALS, Hosts, HostSpec, hosts_text
from tui.dashboard.replay import LiveRecording, seek
from tui.sample import SampleSource, sample_snapshot


def _hosts(n: int) -> tuple[Hosts, list[tuple[int, object]]]:
    arrived: list[tuple[int, object]] = []
    specs = [HostSpec(name=f"db{i}", source_factory=lambda sink: SampleSource(sink)) for i in range(n)]
    return Hosts(specs, lambda index, snapshot: arrived.append((index, snapshot))), arrived


def test_hosts_switch_forward_and_back_with_wrap_and_say_when_nothing_changes():
    hosts, _ = _hosts(3)
    assert hosts.shown.name == "db0"
    assert hosts.select(-1) and hosts.shown.name == "db1"  # next
    assert hosts.select(-2) and hosts.select(-2) and hosts.shown.name == "db2"  # previous, wrapping
    assert not hosts.select(2)  # already shown
    assert not hosts.select(7)  # no such host
    single, _ = _hosts(1)
    assert not single.select(-1) and single.current == 0


def test_each_hosts_sink_names_its_host_and_intervals_step_for_all():
    hosts, arrived = _hosts(2)
    for host in hosts:
        host.source.start()
    assert [index for index, _ in arrived] == [0, 1]
    start = hosts.shown.source.interval_s
    longer = hosts.step_interval(+1)
    assert longer > start and all(h.source.interval_s == longer for h in hosts)
    for _ in range(len(INTERVALS) + 2):
        shortest = hosts.step_interval(-1)
    assert shortest == INTERVALS[0]
    hosts.pause(True)
    hosts.refresh()
    assert len(arrived) == 2  # paused sources hand out nothing
    hosts.pause(False)  # resumed with a sample at once
    assert len(arrived) == 4


def test_the_host_bar_keeps_names_and_drops_the_news_first_when_narrow():
    hosts, _ = _hosts(2)
    for host in hosts:
        Hosts.keep(host, sample_snapshot())
    wide = hosts_text(hosts.all, 0, 200).plain
    assert "1 db0" in wide and "2 db1" in wide and "blocked" in wide
    narrow = hosts_text(hosts.all, 0, 22).plain
    assert "1 db0" in narrow and "2 db1" in narrow and "blocked" not in narrow
    down = dataclasses.replace(sample_snapshot(), extra={"connected": False, "connection_error": "refused"})
    Hosts.keep(hosts.all[1], down)
    assert "DOWN" in hosts_text(hosts.all, 0, 200).plain
    assert hosts.all[1].shown is not down  # the last connected figures stay on screen


def _facts(**changes) -> StatusFacts:
    facts = StatusFacts(snapshot=sample_snapshot(), last_good_at=None, host_name=None, replay=None, paused=False,
                        recording=False, read_only=False, interval_s=2.0)
    return dataclasses.replace(facts, **changes)


def test_the_status_line_says_one_state_and_why():
    def text(facts: StatusFacts) -> str:
        return "".join(part for part, _style, _priority in status_parts(facts))

    assert "LIVE" in text(_facts()) and "every 2s" in text(_facts())
    paused = text(_facts(paused=True))
    assert "PAUSED" in paused and "LIVE" not in paused
    down = dataclasses.replace(sample_snapshot(), extra={"connected": False, "connection_error": "refused"})
    disconnected = text(_facts(snapshot=down))
    assert "DISCONNECTED" in disconnected and "refused" in disconnected and "LIVE" not in disconnected
    assert "REC" in text(_facts(recording=True)) and "READ-ONLY" in text(_facts(read_only=True))


def test_a_prompt_offers_the_selected_queue_else_what_exists():
    snapshot = sample_snapshot()

    def only(kind: str, name: str | None):
        return lambda asked: name if asked == kind else None

    assert prefill(snapshot, "burst", "orders 1000", only("queue", "queue-02")) == "queue-02 1000"
    assert prefill(snapshot, "burst", "orders 1000", only("queue", None)) == "queue-01 1000"  # the engine's first queue
    assert prefill(snapshot, "ring.put", "audit 5", only("ring", None)) == "audit 5"
    assert prefill(snapshot, "ring.put", "audit 5", only("ring", "metrics")) == "metrics 5"  # the selected ring
    assert prefill(snapshot, "ring.take", "audit 5", only("queue", "queue-02")) == "audit 5"  # a queue is no ring
    assert prefill(snapshot, "lease.take", "relay operator 30", only("lease", None)) == "relay operator 30"
    assert prefill(snapshot, "lease.release", "relay operator", only("lease", "compactor")) == "compactor operator"
    assert prefill(snapshot, "burst", "orders 1000", only("queue", "two words")) == "orders 1000"  # never a name it can't take back
    assert prefill(None, "burst", "orders 1000", only("queue", "queue-02")) == "orders 1000"


def test_terminate_says_what_ending_the_session_frees():
    snapshot = sample_snapshot()
    root = snapshot.blocked[0].root_blockers[0]
    assert what_ending_releases(snapshot, root).startswith(f" It holds up {len(snapshot.blocked)} session(s)")
    waiter = snapshot.blocked[0].pid
    behind = [b for b in snapshot.blocked if waiter in b.blocked_by]
    assert what_ending_releases(snapshot, waiter) == f" {len(behind)} session(s) wait directly behind it."
    assert what_ending_releases(snapshot, 4242) == " No session waits on it."


def test_live_recording_writes_a_replayable_file_and_seek_goes_to_a_time(tmp_path):
    recording = LiveRecording(tmp_path)
    started, severity = recording.toggle()
    assert severity == "information" and "recording to" in started
    for step in range(3):
        assert recording.write(sample_snapshot(step=step)) is None
    stopped, _ = recording.toggle()
    assert "3 snapshot(s)" in stopped
    [path] = list(tmp_path.glob("queuetop-*.jsonl.gz"))
    clock = ReplayClock(Recording(path), playing=False)
    assert (clock.recording.end - clock.recording.start).total_seconds() == 2
    assert seek(clock, "+2") is None and clock.now() == clock.recording.end
    assert seek(clock, "not a time") is not None and clock.now() == clock.recording.end  # says what is wrong, stays
    assert seek(clock, "+0") is None and clock.now() == clock.recording.start
