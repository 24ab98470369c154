"""The probes' clock of transaction ids (probes/xidclock.py): how long ago an xid was the next one,
from the readings each cycle records (issue 43, point 4: a standby's or a slot's horizon has no
transaction, so no start time, only an age in xids)."""

from __future__ import annotations

import pytest

from probes.xidclock import MAX_READINGS, XidAge, XidClock


def clock(*readings: tuple[float, int]) -> XidClock:
    c = XidClock()
    for at, xid in readings:
        c.record(at, xid)
    return c


def test_nothing_is_known_without_a_history():
    assert XidClock().age(5) is None
    assert clock((10.0, 100)).age(90) is None  # older than a single reading: its span is 0, nothing said
    assert clock((10.0, 100)).age(100) == XidAge(0.0, False)  # the next id now: as new as the reading


def test_the_age_is_when_the_next_id_was_the_horizons_interpolated_between_readings():
    c = clock((0.0, 1000), (10.0, 1100), (20.0, 1100), (30.0, 1400))
    assert c.age(1000) == XidAge(30.0, False)  # the first reading's id: 30 s before the last
    assert c.age(1050) == XidAge(25.0, False)  # half way through the first interval
    assert c.age(1100) == XidAge(10.0, False)  # still the next id at 20 s: the last time it was
    assert c.age(1300) == pytest.approx(XidAge(30.0 - (20.0 + 10.0 * 200 / 300), False))
    assert c.age(1400) == XidAge(0.0, False) and c.age(5000) == XidAge(0.0, False)


def test_a_horizon_older_than_the_history_is_at_least_as_old_as_the_history():
    c = clock((5.0, 1000), (65.0, 1600))
    assert c.age(10) == XidAge(60.0, True)


def test_a_reading_that_goes_back_starts_afresh():
    c = clock((0.0, 1000), (10.0, 2000), (20.0, 500))  # a restored server: fewer ids than before
    assert len(c) == 1 and c.age(400) is None
    c = clock((10.0, 1000), (5.0, 1100))  # a clock that went back
    assert len(c) == 1


def test_a_full_history_keeps_its_span_more_coarsely():
    c = XidClock()
    for n in range(MAX_READINGS * 3):
        c.record(float(n), 10 * n)
    assert len(c) <= MAX_READINGS + 1
    last = float(MAX_READINGS * 3 - 1)
    assert c.age(0) == XidAge(last, False)  # the first reading is kept: the whole span still reaches back
    assert c.age(10 * 100 + 5).seconds == pytest.approx(last - 100.5, abs=8.0)  # coarser there, close
    assert c.age(10 * (MAX_READINGS * 3 - 2)) == XidAge(1.0, False)  # the recent past as read
