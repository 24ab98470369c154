"""The snapshot's JSON form round-trips exactly: a recording must replay what was seen, so
`Snapshot.from_json(to_json(s)) == s` for every snapshot, through real JSON text. It used to
round floats to 3 places and to drop most keys of an empty connections object."""

from __future__ import annotations

import json
from dataclasses import fields, is_dataclass, replace
from datetime import UTC, datetime, timedelta, timezone
from types import UnionType
from typing import Union, get_args, get_origin, get_type_hints

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from probes.model import SNAPSHOT_VERSION, Connections, ProbeStatus, Snapshot
from tui.sample import pileup_snapshot, sample_snapshot

pytestmark = pytest.mark.matrix  # the server matrix runs these on every supported major

KNOWN = {f.name for f in fields(Snapshot)} | {"version"}
JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**63), max_value=2**63 - 1),
                         st.floats(allow_nan=False, allow_infinity=False), st.text())

DATETIMES = st.datetimes(timezones=st.sampled_from([UTC, timezone(timedelta(hours=-7, minutes=-30))]))
FLOATS = st.floats(allow_nan=False, allow_infinity=False)


def every_field(hint):
    """A strategy for `hint` that fills every field of a dataclass, those with defaults too
    (st.builds leaves a defaulted field at its default)."""
    origin = get_origin(hint)
    if origin in (Union, UnionType):
        return st.one_of(*[every_field(a) for a in get_args(hint)])
    if origin is tuple:
        return st.lists(every_field(get_args(hint)[0]), max_size=3).map(tuple)
    if origin is dict:
        key, item = get_args(hint)
        return st.dictionaries(every_field(key), every_field(item), max_size=3)
    if isinstance(hint, type) and is_dataclass(hint):
        hints = get_type_hints(hint)
        return st.builds(hint, **{f.name: every_field(hints[f.name]) for f in fields(hint) if f.name != "extra"})
    if hint is datetime:
        return DATETIMES
    if hint is float:
        return FLOATS
    if hint is type(None):
        return st.none()
    return st.from_type(hint)


# The keys of `extra` the model reads, of their type (model.py check_extra: any other type is
# refused); any other key holds any JSON value. (Hypothesis once drew the key "host" with a boolean.)
TYPED_EXTRA = {"host": st.text(), "connected": st.booleans()}
EXTRA = st.tuples(
    st.dictionaries(st.text().filter(lambda key: key not in KNOWN and key not in TYPED_EXTRA), JSON_SCALARS, max_size=3),
    st.fixed_dictionaries({}, optional=TYPED_EXTRA),
).map(lambda parts: {**parts[0], **parts[1]})
SNAPSHOTS = every_field(Snapshot).flatmap(lambda snapshot: EXTRA.map(lambda extra: replace(snapshot, extra=extra)))


def through_json(snapshot: Snapshot) -> Snapshot:
    return Snapshot.from_json(json.loads(json.dumps(snapshot.to_json())))


@settings(max_examples=150, deadline=None)
@given(SNAPSHOTS)
def test_every_snapshot_round_trips_exactly_through_json_text(snapshot):
    assert through_json(snapshot) == snapshot


def test_the_sample_snapshots_round_trip_with_their_floats_unrounded():
    for step in range(4):
        snapshot = sample_snapshot(step=step)
        assert through_json(snapshot) == snapshot
    odd = replace(sample_snapshot(step=0), queues=(replace(sample_snapshot(step=0).queues[0], oldest_ready_age_s=0.1 + 0.2),))
    assert through_json(odd).queues[0].oldest_ready_age_s == 0.30000000000000004


def test_a_snapshot_round_trips_through_its_json_object_without_the_text():
    """`Snapshot.from_json(s.to_json()) == s` (model.py's promise; the flight recorder's and the
    exporter's objects are read back without text between): plain()'s marked dicts are objects."""
    for snapshot in (sample_snapshot(step=1), pileup_snapshot()):
        assert Snapshot.from_json(snapshot.to_json()) == snapshot


def test_an_empty_connections_object_has_every_key_and_reads_back_as_none():
    snapshot = replace(sample_snapshot(step=0), connections=None)
    document = snapshot.to_json()
    assert set(document["connections"]) == {f.name for f in fields(Connections)}
    assert through_json(snapshot).connections is None


def test_a_naive_time_is_read_as_utc():
    """SQL Server's datetime2 has no zone; queuetop's T-SQL reads UTC times."""
    snapshot = replace(sample_snapshot(step=0), taken_at=datetime(2026, 11, 23, 3, 12))
    assert snapshot.to_json()["taken_at"] == "2026-11-23T03:12:00Z"
    assert through_json(snapshot).taken_at == datetime(2026, 11, 23, 3, 12, tzinfo=UTC)


def test_another_version_is_refused():
    document = sample_snapshot(step=0).to_json()
    with pytest.raises(ValueError, match=f"this queuetop reads version {SNAPSHOT_VERSION}"):
        Snapshot.from_json({**document, "version": SNAPSHOT_VERSION + 1})


def test_a_snapshot_recorded_before_sessions_were_read_still_loads():
    # Recordings made before the sessions view have neither `sessions` nor `sessions_total`.
    document = json.loads(json.dumps(sample_snapshot(step=0).to_json()))
    assert document["sessions"] and document["sessions_total"] == len(document["sessions"])
    del document["sessions"], document["sessions_total"]
    loaded = Snapshot.from_json(document)
    assert loaded.sessions == () and loaded.sessions_total is None and loaded.unknown_list("sessions") is None
    assert loaded == replace(sample_snapshot(step=0), sessions=(), sessions_total=None)


def test_sessions_the_connections_probe_could_not_read_are_null_beside_its_figures():
    # The sessions' statement failed, the connections' figures stand: the list is unknown (null),
    # not empty, and reads back as such.
    sample = sample_snapshot(step=0)
    failed = ProbeStatus(elapsed_ms=3.0, error="sessions: skipped: statement timeout (2000 ms) reached", unread=("sessions",))
    snapshot = replace(sample, sessions=(), sessions_total=None, probes={**sample.probes, "connections": failed})
    document = snapshot.to_json()
    assert document["sessions"] is None and document["sessions_total"] is None
    assert sample.connections is not None and document["connections"]["total"] == sample.connections.total
    assert snapshot.unknown_list("sessions") == failed.error and snapshot.unknown_list("connections") is None
    assert through_json(snapshot) == snapshot
