"""The intake's reducer: deterministic, idempotent, and the same whether folded, snapshotted or layered."""

from __future__ import annotations

import json
from fractions import Fraction
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.events import (
    Channel,
    CorrectionStage,
    County,
    ElectionDefined,
    Event,
    Problem,
    Result,
    ResultCorrected,
    ResultReported,
    SubmissionRejected,
    UnitDefinition,
    UnitOpened,
    new_event,
)
from ledger.log.port import Position
from producers.intake_state import IntakeState, Layered, fingerprint, rejection_key

UNITS = ("u1", "u2", "u3")


def _ev(payload: Any, unit: str = "", key: str | None = None) -> Event[Any]:
    return new_event(payload, election_id="e", unit_id=unit, actor="a", channel=Channel.APP, idempotency_key=key)


def _definition() -> Event[Any]:
    units = tuple(UnitDefinition(u, u.upper(), "c", 3) for u in UNITS)
    return _ev(ElectionDefined("E", "idp-2020", ("A", "B"), (County("c", "C", Fraction(1, 7)),), units), key="define")


def _result(a: int) -> Result:
    return Result({"A": a, "B": 1}, {"A": a, "B": 1})


def _story() -> list[Event[Any]]:
    """Opened, reported, corrected twice, a refusal, a tie-free unit."""
    report = _ev(ResultReported(_result(5), "chair"), "u1", "r1")
    fix = _ev(ResultCorrected(_result(6), report.event_id, "why", "IDP", CorrectionStage.REVIEW), "u1", "c1")
    fix2 = _ev(ResultCorrected(_result(7), fix.event_id, "why", "IDP", CorrectionStage.RECOUNT), "u1", "c2")
    rejected_id = "11111111-2222-3333-4444-555555555555"
    refusal = new_event(
        SubmissionRejected("report", "{", (Problem("body", "MALFORMED_JSON", "x"),), "chair"),
        election_id="e", unit_id="u2", actor="system:intake", channel=Channel.APP,
        idempotency_key=rejection_key(rejected_id, "r2"), event_id=rejected_id,
    )  # fmt: skip
    return [_definition(), _ev(UnitOpened(9), "u1", "o1"), report, fix, fix2, refusal, _ev(UnitOpened(4), "u2", "o2")]


def _positions(events: list[Event[Any]]) -> list[tuple[Event[Any], Position]]:
    return [(e, Position(0, i)) for i, e in enumerate(events)]


def test_the_story_folds_to_the_expected_state() -> None:
    events = _story()
    state = IntakeState()
    assert state.apply_all(_positions(events)) == len(events)
    report, fix, fix2, refusal = events[2], events[3], events[4], events[5]
    unit = state.unit("e", "u1")
    assert (unit.opened_event_id, unit.attendance, unit.result_event_id) == (events[1].event_id, 9, fix2.event_id)
    assert unit.result == _result(7)
    assert state.superseded_by(report.event_id) == fix.event_id and state.superseded_by(fix.event_id) == fix2.event_id
    assert state.superseded_by(fix2.event_id) is None
    assert state.result_event(fix.event_id) is not None and state.result_event(events[1].event_id) is None
    claim = state.claim("r1")
    assert claim is not None and claim.event_id == report.event_id and claim.position == Position(0, 2)
    assert claim.fingerprint() == fingerprint(report)
    assert state.claim("r2") is None  # a refusal does not take the key it was sent with
    rejection = state.rejection("r2")
    assert rejection is not None and rejection.event_id == refusal.event_id
    assert state.positions == {0: len(events)} and state.anchors == {0: events[-1].event_id}


def test_duplicates_change_nothing_and_spooled_events_get_their_position() -> None:
    events = _story()
    state = IntakeState()
    state.apply_all(_positions(events))
    before = json.dumps(state.to_snapshot(), sort_keys=True)
    retried = _ev(ResultReported(_result(99), "chair"), "u3", "r1")  # same key, other id: a duplicate
    assert not state.apply(retried, Position(1, 0))
    assert state.unit("e", "u3").result is None
    spooled = _ev(UnitOpened(3), "u3", "o3")
    assert state.apply(spooled)  # from the spool: no position yet
    assert state.claim("o3").position is None  # type: ignore[union-attr]
    assert not state.apply(spooled, Position(1, 1))  # the same event read back from the log
    assert state.claim("o3").position == Position(1, 1)  # type: ignore[union-attr]
    assert before != json.dumps(state.to_snapshot(), sort_keys=True)


def test_snapshot_round_trip() -> None:
    state = IntakeState()
    state.apply_all(_positions(_story()))
    snap = json.loads(json.dumps(state.to_snapshot()))
    restored = IntakeState.from_snapshot(snap)
    assert restored.to_snapshot() == state.to_snapshot()
    assert restored.unit("e", "u1") == state.unit("e", "u1")
    assert restored.election("e") is not None and restored.election("e").units == state.election("e").units  # type: ignore[union-attr]
    assert restored.claim("r1").fingerprint() == state.claim("r1").fingerprint()  # type: ignore[union-attr]


def test_layered_view_sees_the_spool_on_top_of_the_log() -> None:
    events = _story()
    base = IntakeState()
    base.apply_all(_positions(events))
    top = IntakeState()
    fix3 = _ev(ResultCorrected(_result(8), events[4].event_id, "why", "IDP", CorrectionStage.RECOUNT), "u1", "c3")
    top.apply(fix3)
    top.apply(_ev(ResultReported(_result(2), "chair"), "u3", "r3"))
    view = Layered(base, top)
    assert view.unit("e", "u1").result_event_id == fix3.event_id
    assert view.unit("e", "u1").attendance == 9  # opened in the log
    assert view.superseded_by(events[4].event_id) == fix3.event_id
    assert view.superseded_by(events[2].event_id) == events[3].event_id
    assert view.unit("e", "u3").result == _result(2) and base.unit("e", "u3").result is None
    assert view.claim("r3") is not None and view.claim("r1") is not None
    assert view.election("e") is base.election("e") and view.elections_of_unit("u1") == ["e"]


@settings(max_examples=40, deadline=None)
@given(st.permutations(range(2, 7)), st.integers(min_value=0, max_value=6))
def test_folding_twice_or_resuming_gives_the_same_state(order: list[int], cut: int) -> None:
    """Any log prefix, then the rest (or everything again), gives the state of one fold."""
    events = _story()
    log = [events[0], events[1], *[events[i] for i in order]]
    once = IntakeState()
    once.apply_all(_positions(log))
    resumed = IntakeState.from_snapshot(json.loads(json.dumps(_fold(log[:cut]).to_snapshot())))
    resumed.apply_all(_positions(log)[cut:])
    twice = _fold(log)
    twice.apply_all(_positions(log))
    assert resumed.to_snapshot() == once.to_snapshot()
    assert {k: v for k, v in twice.to_snapshot().items() if k != "applied"} == {
        k: v for k, v in once.to_snapshot().items() if k != "applied"
    }


def _fold(events: list[Event[Any]]) -> IntakeState:
    state = IntakeState()
    state.apply_all(_positions(events))
    return state


def test_an_opening_written_after_the_result_is_ignored_like_the_reducers_do() -> None:
    # RULES §2: a unit opens before it reports. An opening written past the intake after the result must
    # not give later checks a T the projection does not use.
    state = IntakeState()
    report = _ev(ResultReported(_result(5), "chair"), "u3", "r3")
    state.apply_all(_positions([_definition(), report, _ev(UnitOpened(1000), "u3", "o3")]))
    unit = state.unit("e", "u3")
    assert (unit.opened_event_id, unit.attendance, unit.result_event_id) == (None, None, report.event_id)


def test_a_refusal_counts_once_and_keeps_the_position_it_was_read_at() -> None:
    """A refusal's key is ``rejected:<id>:<key>`` but it is kept under the key it refused: folding the same
    refusal again (spooled, then read back; or read twice) changes nothing but the position it gains."""
    refusal = _story()[5]
    state = IntakeState()
    assert state.apply(refusal)  # spooled: no position yet
    assert not state.apply(refusal, Position(2, 7))  # read back from the log
    assert state.applied == 1
    assert state.rejection("r2").position == Position(2, 7)  # type: ignore[union-attr]
    assert not state.apply(refusal) and state.rejection("r2").position == Position(2, 7)  # type: ignore[union-attr]
