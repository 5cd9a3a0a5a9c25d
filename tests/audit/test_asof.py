"""The ledger as of a time or a log position, rebuilt in memory from the log (``projections.asof``)."""

from __future__ import annotations

from datetime import timedelta
from types import ModuleType
from typing import Any

import pytest

from ledger.codec import default_codec
from ledger.events import Result, ResultCorrected, ResultReported
from ledger.log.port import PendingRecord
from projections.asof import AsOfError, Cut, parse_cut, parse_positions, parse_time, replay, tally_as_of
from projections.reducers import Projection
from projections.tally import compute_unit_tally, election_context



def test_position_syntax() -> None:
    assert parse_positions("3:120,5:88").ends == {3: 120, 5: 88}
    assert parse_positions("3:..120").ends == {3: 120}
    assert parse_positions("3:..=119").ends == {3: 120}  # inclusive: up to and including offset 119
    cut = parse_positions("3:120")
    assert cut.end_of(3) == 120 and cut.end_of(0) == 0  # partitions not named contribute nothing
    cut = parse_positions("3:120,*:end")
    assert cut.end_of(3) == 120 and cut.end_of(0) is None
    assert parse_positions("*:7").end_of(2) == 7
    for bad in ("", "3", "3:x", "a:1", "3:1,3:2", "3:end", "*:..=end"):
        with pytest.raises(AsOfError):
            parse_positions(bad)


def test_instants_and_positions_beyond_any_log_are_named_not_crashed_on() -> None:
    """An instant whose UTC form Python cannot hold, and an offset no 64-bit store column can, are the
    user's errors (they were an OverflowError and a 500)."""
    for text in ("9999-12-31T23:59:59-12:00", "0001-01-01T00:00:00+14:00"):
        with pytest.raises(AsOfError, match="outside the instants the log can record"):
            parse_cut(text)
    assert parse_time("9999-12-31T23:59:59-00:00").year == 9999
    for text in ("0:99999999999999999999999", "99999999999999999999:1", "*:1234567890123456789"):
        with pytest.raises(AsOfError, match="beyond any log"):
            parse_cut(text)
    assert parse_positions("0:999999999999999999").ends == {0: 999_999_999_999_999_999}


def test_time_syntax() -> None:
    assert parse_time("2020-02-08T06:28:00Z") == parse_time("2020-02-08T07:28:00+01:00")
    with pytest.raises(AsOfError, match="time zone"):
        parse_time("2020-02-08T06:28:00")
    with pytest.raises(AsOfError, match="ISO 8601"):
        parse_time("yesterday")
    # a well-formed time no calendar has is told as such, and the other form --as-of takes is named
    with pytest.raises(AsOfError, match=r"day is out of range for month\) nor log positions such as 3:120,5:88"):
        parse_cut("2020-02-30T00:00:00Z")
    # ISO 8601's 24:00 is the end of the day, the next day's first instant
    assert parse_time("2020-02-07T24:00:00Z") == parse_time("2020-02-08T00:00Z") == parse_time("2020-02-07T24:00Z")
    assert parse_time("2020-12-31T24:00:00.000-06:00") == parse_time("2021-01-01T06:00:00Z")
    for bad in ("2020-02-07T24:00:01Z", "2020-02-07T24:30Z"):
        with pytest.raises(AsOfError, match="ISO 8601"):
            parse_time(bad)
    with pytest.raises(AsOfError, match="outside the instants"):
        parse_time("9999-12-31T24:00:00Z")
    assert parse_cut("2020-02-08T06:28:00Z").at is not None
    assert parse_cut("0:4,1:..=2").ends == {0: 4, 1: 3}


def _whole(ledger: Any) -> Projection:
    proj = Projection()
    proj.apply_all(ledger.events)
    return proj


def test_whole_log_equals_the_reducers_over_every_event(ledger: Any, aud: ModuleType) -> None:
    log = ledger.log()
    try:
        state = replay(log)
    finally:
        log.close()
    proj = _whole(ledger)
    assert state.units == proj.units
    assert state.elections == proj.elections
    assert state.applied == len(ledger.events) and state.duplicates == 0 and state.outside == 0


def test_a_time_includes_the_events_recorded_at_exactly_that_time(ledger: Any, aud: ModuleType) -> None:
    log = ledger.log()
    try:
        before = replay(log, Cut(at=aud.T_DAY2 - timedelta(microseconds=1)))
        at = replay(log, Cut(at=aud.T_DAY2))
        night = tally_as_of(log, Cut(at=aud.T_NIGHT))
    finally:
        log.close()
    e = aud.ELECTION
    assert (e, "late") not in before.units and before.units[e, "corrected"].stage is None
    assert (e, "late") in at.units and at.units[e, "corrected"].stage == "recanvass"
    assert at.applied - before.applied == 2 and at.outside == 1  # the toss of day 3 is outside
    # On caucus night the tie is pending and the corrected unit shows the 6 delegates it reported.
    assert night.units["tie"].pending and sum(night.units["corrected"].cds.values()) == 6
    assert night.state_tally().units_reporting == len(night.units) == 17
    assert night.as_of == aud.T_NIGHT


def test_recorded_at_decides_not_log_order(ledger: Any, aud: ModuleType) -> None:
    """A spool replayed late: an event recorded before the cut sits after one recorded after it."""
    early = aud.T_NIGHT - timedelta(hours=1)
    spooled = aud.make_event(ResultReported(Result({"A": 3}, {"A": 3}), reporter="spool"), "spooled", early)
    newer = aud.make_event(ResultReported(Result({"A": 9}, {"A": 9}), reporter="chair"), "spooled-2", aud.T_DAY3 + timedelta(days=1))
    ledger.append([newer, spooled])
    log = ledger.log()
    try:
        state = replay(log, Cut(at=aud.T_NIGHT))
    finally:
        log.close()
    assert (aud.ELECTION, "spooled") in state.units and (aud.ELECTION, "spooled-2") not in state.units


def test_positions_cut(ledger: Any, aud: ModuleType) -> None:
    log = ledger.log()
    try:
        marks = log.high_watermarks()
        night = replay(log, Cut(at=aud.T_NIGHT))
        # The positions a projection would have stored on caucus night give the same states.
        by_position = replay(log, Cut(ends=dict(night.positions), rest=0))
        assert by_position.units == night.units and by_position.elections == night.elections
        everything = replay(log, parse_positions("*:end"))
        assert everything.applied == len(ledger.events)
        one = max(marks, key=lambda p: marks[p])
        only = replay(log, parse_positions(f"{one}:{marks[one]}"))
        assert only.positions == {one: marks[one]} and only.applied == marks[one]
        with pytest.raises(AsOfError, match="beyond partition"):
            replay(log, parse_positions(f"{one}:{marks[one] + 1}"))
        with pytest.raises(AsOfError, match="partitions 0..3"):
            replay(log, parse_positions("9:1"))
    finally:
        log.close()


def test_duplicates_are_dropped_by_event_id(ledger: Any, aud: ModuleType) -> None:
    """A retry of the caucus-night report stored after the correction must not undo the correction."""
    report = next(e for e in ledger.events if e.unit_id == "corrected" and isinstance(e.payload, ResultReported))
    codec = default_codec()
    log = ledger.log()
    try:
        # The embedded log itself refuses a known event id, so the retry is written as a raw record
        # under a fresh record id, as a Kafka producer retry would land.
        log.append(PendingRecord(report.key, report.event_id + "-retry", codec.encode(report)))
        state = replay(log)
    finally:
        log.close()
    assert state.duplicates == 1
    assert state.units[aud.ELECTION, "corrected"].stage == "recanvass"
    ctx = election_context(state.elections[aud.ELECTION], aud.ELECTION)
    assert sum(compute_unit_tally(state.units[aud.ELECTION, "corrected"], ctx).cds.values()) == 5


def test_no_election_inside_the_cut(ledger: Any, aud: ModuleType) -> None:
    log = ledger.log()
    try:
        with pytest.raises(AsOfError, match=r"no election is defined inside the cut \(events recorded at or before .*\) \(no ElectionDefined event; a cut "
                                            "must come after the election's definition was recorded"):
            tally_as_of(log, Cut(at=aud.T_NIGHT - timedelta(days=1)))
        with pytest.raises(AsOfError, match="has no events"):
            tally_as_of(log, None, election_id="nope")
        with pytest.raises(AsOfError, match="rule set"):
            tally_as_of(log, None, rule_set="idp-1999")
    finally:
        log.close()


def test_unit_filter_keeps_memory_to_the_units_asked_for(ledger: Any, aud: ModuleType) -> None:
    log = ledger.log()
    try:
        state = replay(log, units={(aud.ELECTION, "tie"), (aud.ELECTION, "late")})
    finally:
        log.close()
    assert set(state.units) == {(aud.ELECTION, "tie"), (aud.ELECTION, "late")} and aud.ELECTION in state.elections


def _corrections(ledger: Any) -> list[Any]:
    return [e for e in ledger.events if isinstance(e.payload, ResultCorrected)]


def test_the_synthetic_history_has_what_the_tests_rely_on(ledger: Any, aud: ModuleType) -> None:
    assert len(_corrections(ledger)) == 1
    assert sorted({e.recorded_at for e in ledger.events})[-1] == aud.T_DAY3
