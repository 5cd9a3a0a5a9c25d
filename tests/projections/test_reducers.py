"""Reducers: each event type's effect on a unit or an election, dedupe, and JSON round trips."""

from __future__ import annotations

from datetime import timedelta
from fractions import Fraction
from types import ModuleType

from ledger.events import (
    CorrectionStage,
    Problem,
    Result,
    ResultCorrected,
    ResultReported,
    ResultsCertified,
    SubmissionRejected,
    TieBroken,
    TieMethod,
    UnitOpened,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections.tie_records import TieRecord
from projections.reducers import (
    ElectionState,
    Projection,
    UnitFold,
    UnitState,
    UnitStatus,
    apply_election,
    apply_unit,
    apply_unit_events,
)


def _report(support: ModuleType, unit: str, first: dict[str, int], final: dict[str, int], **kw: object):  # type: ignore[no-untyped-def]
    return support.ev(ResultReported(Result(first, final), reporter="chair"), unit_id=unit, **kw)


def test_report_then_corrections_set_result_status_and_stage(support: ModuleType) -> None:
    r = _report(support, "u1", {"A": 10, "B": 5}, {"A": 12, "B": 3})
    s = apply_unit(None, r)
    assert s.status is UnitStatus.REPORTED and s.result_event_id == r.event_id
    assert dict(s.result.first_alignment) == {"A": 10, "B": 5}
    c = support.ev(
        ResultCorrected(Result({"A": 11, "B": 5}, {"A": 13, "B": 3}), supersedes=r.event_id, reason="typo",
                        authority="party", stage=CorrectionStage.RECANVASS),
        unit_id="u1", at=support.T0 + timedelta(days=2),
    )
    s2 = apply_unit(s, c)
    assert (s2.status, s2.stage, s2.supersedes, s2.result_event_id) == (UnitStatus.CORRECTED, "recanvass", r.event_id, c.event_id)
    assert s2.result.first_alignment["A"] == 11 and s2.events == 2
    assert s.result.first_alignment["A"] == 10, "states are values: the old one is unchanged"


def test_opening_ties_rejections_and_certification(support: ModuleType) -> None:
    s = apply_unit(None, support.ev(UnitOpened(40), unit_id="u1"))
    assert s.attendance_opened == 40 and s.status is UnitStatus.NOT_REPORTED and not s.reporting
    toss = support.ev(TieBroken(("B", "A"), 1, ("B",), TieMethod.COIN, caller="A"), unit_id="u1")
    s = apply_unit(s, toss)
    assert [(t.contenders, t.winners) for t in s.ties] == [(("A", "B"), ("B",))]
    again = support.ev(TieBroken(("A", "B"), 1, ("A",), TieMethod.COIN, caller="A"), unit_id="u1")
    s = apply_unit(s, again)
    assert [(t.winners, t.event_id) for t in s.ties] == [(("B",), toss.event_id)], "a settled tie stays settled"
    assert [(n.event_id, n.outcome) for n in s.ties[0].later] == [(again.event_id, "ignored")]
    s = apply_unit(s, support.ev(SubmissionRejected("report", "{}", (Problem("final", "x", "y"),), "phone"), unit_id="u1"))
    assert s.rejected == 1
    cert = support.ev(ResultsCertified("party"), unit_id="u1")
    assert apply_unit(s, cert).status is UnitStatus.NOT_REPORTED, "nothing to certify without a result"
    s = apply_unit(s, _report(support, "u1", {"A": 20, "B": 20}, {"A": 20, "B": 20}))
    s = apply_unit(s, cert)
    assert s.status is UnitStatus.CERTIFIED and s.certified_by == cert.event_id
    s = apply_unit(s, _report(support, "u1", {"A": 21, "B": 19}, {"A": 21, "B": 19}))
    assert s.status is UnitStatus.REPORTED and s.certified_by is None, "a new report reopens a certified unit"


def test_election_state_definition_certification_and_redefinition(support: ModuleType) -> None:
    d1 = support.define(support.definition(3))
    e = apply_election(None, d1)
    assert e.definition is not None and e.defined_by == d1.event_id and e.revision == d1.event_id
    cert = support.ev(ResultsCertified("party", "final"))
    e = apply_election(e, cert)
    assert e.certified_by == cert.event_id and e.revision == cert.event_id
    d2 = support.ev(support.definition(4, seed=9), event_id="redefine")
    e = apply_election(e, d2)
    assert len(e.definition.units) == 5 and e.defined_by == "redefine"


def test_json_round_trips_are_exact(support: ModuleType) -> None:
    events = support.election_log(4, corrections=2, rejections=1)
    p = Projection()
    p.apply_all(events)
    for state in p.units.values():
        assert UnitState.loads(state.dumps()) == state
    (election,) = p.elections.values()
    back = ElectionState.loads(election.dumps())
    assert back == election
    assert any(isinstance(c.sde_ratio, Fraction) for c in back.definition.counties)
    assert back.dumps() == election.dumps()


def test_projection_drops_duplicate_event_ids(support: ModuleType) -> None:
    events = support.election_log(3)
    p = Projection()
    assert p.apply_all(events) == len(events)
    before = {u: s.dumps() for u, s in p.units.items()}
    assert p.apply_all(events[::-1]) == 0
    assert p.duplicates == len(events)
    assert {u: s.dumps() for u, s in p.units.items()} == before


_KINDS = ("report", "correct", "open", "toss", "reject", "certify")


def _unit_event(support: ModuleType, kind: str, n: int, previous: str | None):  # type: ignore[no-untyped-def]
    at = support.T0 + timedelta(minutes=n)
    first, final = {"A": 10 + n, "B": 5}, {"A": 12 + n, "B": 3}
    payload: object
    if kind == "report" or (kind == "correct" and previous is None):
        payload = ResultReported(Result(first, final), reporter="chair")
    elif kind == "correct":
        payload = ResultCorrected(Result(first, final), supersedes=previous or "", reason="recheck", authority="party",
                                  stage=CorrectionStage.REVIEW)
    elif kind == "open":
        payload = UnitOpened(30 + n)
    elif kind == "toss":
        payload = TieBroken(("A", "B"), 1, ("A",) if n % 2 else ("B",), TieMethod.COIN, caller="A")
    elif kind == "reject":
        payload = SubmissionRejected("report", "{}", (Problem("final", "x", "y"),), "phone")
    else:
        payload = ResultsCertified("party")
    return support.ev(payload, unit_id="u1", at=at)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kinds=st.lists(st.sampled_from(_KINDS), min_size=1, max_size=12), cuts=st.lists(st.integers(0, 12), max_size=4))
def test_folding_a_run_at_once_equals_folding_event_by_event(support: ModuleType, kinds: list[str], cuts: list[int]) -> None:
    events = []
    previous: str | None = None
    for n, kind in enumerate(kinds):
        e = _unit_event(support, kind, n, previous)
        if isinstance(e.payload, (ResultReported, ResultCorrected)):
            previous = e.event_id
        events.append(e)
    one_by_one: UnitState | None = None
    for e in events:
        one_by_one = apply_unit(one_by_one, e)
    bounds = sorted({0, len(events), *(c for c in cuts if c < len(events))})
    in_runs: UnitState | None = None
    for a, b in zip(bounds, bounds[1:], strict=False):
        in_runs = apply_unit_events(in_runs, events[a:b])
    assert in_runs == one_by_one
    assert in_runs is not None and in_runs.dumps() == one_by_one.dumps()
    fold = UnitFold(None)  # one fold fed run after run, as the runner feeds a batch's chunks
    for a, b in zip(bounds, bounds[1:], strict=False):
        fold.add(events[a:b])
    assert fold.state() == one_by_one and fold.state().dumps() == one_by_one.dumps()


def test_an_opening_recorded_after_the_result_is_ignored_and_the_trail_says_so(support: ModuleType) -> None:
    # RULES §2: a unit opens before it reports. An opening written past the intake after the result
    # must not change the T the result was computed with (T = Σ first = 100 here).
    from projections.tally import compute_unit_tally
    from projections.election_context import election_context
    from projections.trail import describe_changes

    defn = support.definition(3)
    unit = defn.units[0]
    context = election_context(apply_election(None, support.define(defn)), "e1")
    report = _report(support, unit.unit_id, {"A": 60, "B": 40}, {"A": 60, "B": 40})
    before = apply_unit(None, report)
    late = support.ev(UnitOpened(1000), unit_id=unit.unit_id)
    after = apply_unit(before, late)
    assert after.attendance_opened is None and after.result == before.result
    assert apply_unit_events(None, [report, late]).attendance_opened is None, "the same when folded in one run"
    t_before, t_after = compute_unit_tally(before, context), compute_unit_tally(after, context)
    assert (t_after.attendance, t_after.cds) == (t_before.attendance, t_before.cds) and t_after.attendance == 100
    changes = describe_changes(before, after, t_before, t_after, event=late)
    assert any(c.startswith("opening ignored: attendance 1000") for c in changes), changes
    # an opening before the result still counts
    assert apply_unit(None, late).attendance_opened == 1000


def test_a_toss_recorded_against_a_result_without_that_tie_decides_nothing_later(support: ModuleType) -> None:
    # RULES §6: a toss decides a tie of the result it was tossed for. A B/C toss recorded while the result
    # had no B/C tie must not silently decide the B/C tie a later correction creates: that tie is pending.
    from fractions import Fraction as F

    from ledger.events import County, ElectionDefined, UnitDefinition
    from projections.election_context import election_context
    from projections.tally import compute_unit_tally

    defn = ElectionDefined("E", "idp-2020", ("A", "B", "C"), (County("lee", "Lee", F(21, 150)),),
                           (UnitDefinition("P7", "P7", "lee", 5),))  # fmt: skip
    context = election_context(apply_election(None, support.define(defn)), "e1")
    no_tie = support.ev(ResultReported(Result({"A": 50, "B": 35, "C": 15}, {"A": 50, "B": 35, "C": 15}, 100), reporter="c"), unit_id="P7")
    toss = support.ev(TieBroken(("B", "C"), 1, ("C",), TieMethod.COIN, caller="B"), unit_id="P7")
    state = apply_unit_events(None, [no_tie, toss])
    assert compute_unit_tally(state, context).pending == ()
    tied = Result({"A": 40, "B": 30, "C": 30}, {"A": 40, "B": 30, "C": 30}, 100)
    fix = support.ev(ResultCorrected(tied, supersedes=no_tie.event_id, reason="r", authority="party",
                                     stage=CorrectionStage.REVIEW), unit_id="P7")  # fmt: skip
    after = compute_unit_tally(apply_unit(state, fix), context)
    assert [(p.contenders, p.seats) for p in after.pending] == [(("B", "C"), 1)], after
    assert any(toss.event_id in p and "decides nothing" in p for p in after.problems), after.problems
    assert TieRecord.from_json(apply_unit(state, fix).ties[0].to_json()) == apply_unit(state, fix).ties[0]
    # a toss of a tie the result had still decides it after a correction that keeps the tie
    report = support.ev(ResultReported(tied, reporter="c"), unit_id="P7")
    settled = apply_unit_events(None, [report, support.ev(TieBroken(("B", "C"), 1, ("C",), TieMethod.COIN, caller="B"), unit_id="P7")])
    same_tie = Result({"A": 40, "B": 30, "C": 30}, {"A": 40, "B": 30, "C": 30}, 101)
    kept = apply_unit(settled, support.ev(ResultCorrected(same_tie, supersedes=report.event_id, reason="r", authority="party",
                                                          stage=CorrectionStage.REVIEW), unit_id="P7"))  # fmt: skip
    tally = compute_unit_tally(kept, context)
    assert tally.pending == () and tally.cds["C"] == 2 and not tally.problems, tally
