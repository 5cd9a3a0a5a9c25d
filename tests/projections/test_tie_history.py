"""A settled tie stays settled in the projection too, whatever the log holds: a history that bypassed
the intake (an import, a hand-written log) may toss a tie again and again. The first toss settles the
tie; only a redraw (names the toss that stands, gives a reason) replaces it; every other toss is kept
visible on the unit's state, in the paper trail and in the audit, and flips nothing."""

from __future__ import annotations

from fractions import Fraction
from types import ModuleType
from typing import Any

from ledger.events import County, ElectionDefined, Result, ResultReported, TieBroken, TieMethod, UnitDefinition
from projections.audit.checks import audit_tallies
from projections.reducers import Projection, TieRecord, UnitFold, UnitState, apply_election, apply_unit
from projections.tally import compute_unit_tally, election_context
from projections.trail import describe_changes

THIRDS = {"Adams": 10, "Baker": 10, "Clark": 10}


def _lots(support: ModuleType, event_id: str, winner: str, **kw: Any) -> Any:
    toss = TieBroken(("Clark", "Adams", "Baker"), 1, (winner,), TieMethod.LOTS, caller="x", **kw)
    return support.ev(toss, unit_id="u1", event_id=event_id)


def _history(support: ModuleType) -> list[Any]:
    return [
        support.ev(ResultReported(Result(THIRDS, THIRDS, attendance=30), "chair"), unit_id="u1", event_id="report"),
        _lots(support, "first", "Baker"),
        _lots(support, "second", "Clark"),  # names no toss it supersedes
        _lots(support, "no-reason", "Clark", supersedes="first"),
        _lots(support, "wrong-target", "Clark", supersedes="second", reason="redraw"),
        _lots(support, "redraw", "Clark", supersedes="first", reason="the box was open"),
        _lots(support, "stale", "Adams", supersedes="first", reason="again"),  # "first" no longer stands
        _lots(support, "after", "Adams"),
    ]


def test_the_first_toss_settles_and_only_a_redraw_replaces_it(support: ModuleType) -> None:
    events = _history(support)
    state = UnitFold(None).add(events).state()
    (tie,) = state.ties
    assert (tie.event_id, tie.winners) == ("redraw", ("Clark",))
    assert [(n.event_id, n.outcome, n.against) for n in tie.later] == [
        ("second", "ignored", "first"),
        ("no-reason", "ignored", "first"),
        ("wrong-target", "ignored", "first"),
        ("redraw", "redrew", "first"),
        ("stale", "ignored", "redraw"),
        ("after", "ignored", "redraw"),
    ]
    stepwise = None
    for event in events:
        stepwise = apply_unit(stepwise, event)
    assert stepwise == state, "one run at once or event by event: the same state"
    assert UnitState.loads(state.dumps()) == state and TieRecord.from_json(tie.to_json()) == tie
    one_toss = UnitFold(None).add(events[:2]).state()
    assert "later" not in one_toss.ties[0].to_json(), "a tie tossed once is stored as before"


def test_tally_trail_and_audit_agree_on_a_log_with_contradicting_tosses(support: ModuleType) -> None:
    defn = ElectionDefined("t", "idp-2020", ("Adams", "Baker", "Clark"), (County("c", "C", Fraction(1)),),
                           (UnitDefinition("u1", "Unit 1", "c", 1),))  # fmt: skip
    ctx = election_context(apply_election(None, support.define(defn)), "e1")
    projection = Projection()
    steps: list[tuple[str, tuple[str, ...], dict[str, int]]] = []
    before = before_tally = None
    for event in _history(support):
        projection.apply(event)
        after = projection.units["e1", "u1"]
        tally = compute_unit_tally(after, ctx)
        changes = describe_changes(before, after, before_tally, tally, event=event)
        steps.append((event.event_id, changes, dict(tally.cds)))
        before, before_tally = after, tally
    cds = {event_id: won for event_id, _, won in steps}
    assert cds["first"] == cds["second"] == cds["no-reason"] == cds["wrong-target"] == {"Adams": 0, "Baker": 1, "Clark": 0}
    assert cds["redraw"] == cds["stale"] == cds["after"] == {"Adams": 0, "Baker": 0, "Clark": 1}
    lines = {event_id: changes for event_id, changes, _ in steps}
    assert "tie settled: 1 seat(s) among Adams, Baker, Clark" in lines["first"]
    assert any(c.startswith("toss ignored") and "names no toss it supersedes" in c for c in lines["second"])
    assert any("gives no reason" in c for c in lines["no-reason"])
    assert any("names second as the toss it supersedes, which is not the toss that stood" in c for c in lines["wrong-target"])
    assert any(c.startswith("tie redrawn by an official") and "the box was open" in c for c in lines["redraw"])
    assert any(c.startswith("toss ignored") and "settled by toss redraw" in c for c in lines["stale"])
    final = compute_unit_tally(projection.units["e1", "u1"], ctx)
    assert final.ties_applied == ("redraw",)
    report = audit_tallies(ctx, [final])
    found = [(f.code, f.severity, f.message.split()[1]) for f in report.findings if f.code.startswith("TIE_")]
    assert found == [
        ("TIE_CONTRADICTED", "error", "second"),
        ("TIE_CONTRADICTED", "error", "no-reason"),
        ("TIE_CONTRADICTED", "error", "wrong-target"),
        ("TIE_CONTRADICTED", "error", "stale"),
        ("TIE_CONTRADICTED", "error", "after"),
        ("TIE_REDRAWN", "info", "redraw"),
    ]
    assert report.has_errors


def _reported_against_a_toss(support: ModuleType, *, delegates: int, align: dict[str, int], reported: dict[str, int],
                             contenders: tuple[str, ...], winner: str, toss_first: bool) -> tuple[Any, Any]:
    defn = ElectionDefined("t", "idp-2020", ("Adams", "Baker", "Clark"), (County("c", "C", Fraction(1)),),
                           (UnitDefinition("u1", "Unit 1", "c", delegates),))  # fmt: skip
    ctx = election_context(apply_election(None, support.define(defn)), "e1")
    report = support.ev(ResultReported(Result(align, align, attendance=sum(align.values()), delegates_reported=reported),
                                       "chair"), unit_id="u1", event_id="report")  # fmt: skip
    toss = support.ev(TieBroken(contenders, 1, (winner,), TieMethod.COIN, caller=contenders[0]), unit_id="u1", event_id="toss")
    state = UnitFold(None).add([toss, report] if toss_first else [report, toss]).state()
    return ctx, compute_unit_tally(state, ctx)


def test_reported_delegates_that_contradict_a_standing_toss_are_a_problem_and_a_finding(support: ModuleType) -> None:
    """RULES §6, §12: once a toss settled a tie only its outcome is legal. E10 (D=6, A100 B50 C50; the
    toss gives C the seat) reported as B2 C1, toss before or after the report; and a D=1 tie."""
    e10 = {"Adams": 100, "Baker": 50, "Clark": 50}
    cases = [
        dict(delegates=6, align=e10, reported={"Adams": 3, "Baker": 2, "Clark": 1}, contenders=("Baker", "Clark"), winner="Clark"),
        dict(delegates=1, align={"Adams": 10, "Baker": 10}, reported={"Adams": 0, "Baker": 1}, contenders=("Adams", "Baker"),
             winner="Adams"),
    ]  # fmt: skip
    for case in cases:
        for toss_first in (False, True):
            ctx, tally = _reported_against_a_toss(support, toss_first=toss_first, **case)  # type: ignore[arg-type]
            assert tally.cds_source == "reported" and tally.cds == {**dict.fromkeys(ctx.candidates, 0), **case["reported"]}
            assert tally.tosses_contradicted == ("toss",), (case, toss_first)
            assert any("contradict coin toss toss" in p and "stays official" in p for p in tally.problems), tally.problems
            found = [f for f in audit_tallies(ctx, [tally]).findings if f.code == "TOSS_CONTRADICTED"]
            assert [(f.severity, f.unit_id) for f in found] == [("error", "u1")]
            loser = next(c for c in case["contenders"] if c != case["winner"])  # type: ignore[attr-defined]
            assert found[0].reported[loser] == found[0].expected[loser] + 1  # type: ignore[index]
    ctx, agrees = _reported_against_a_toss(support, toss_first=False, **{**cases[0], "winner": "Baker"})  # type: ignore[arg-type]
    assert agrees.tosses_contradicted == () and agrees.problems == ()
    assert not [f for f in audit_tallies(ctx, [agrees]).findings if f.code == "TOSS_CONTRADICTED"]


def test_a_toss_recorded_before_any_result_is_applied_and_shown_to_the_auditor(support: ModuleType) -> None:
    """A precinct may toss before its chair reports, so such a toss still settles the tie of the result
    (E10: D=6, A100 B50 C50, Clark wins the toss); but nothing could check the tie when it was recorded,
    so the audit names it (an official could otherwise settle likely ties of every unit in advance)."""
    e10 = {"Adams": 100, "Baker": 50, "Clark": 50}
    case = dict(delegates=6, align=e10, reported=None, contenders=("Baker", "Clark"), winner="Clark")
    for toss_first, expected in ((True, ("toss",)), (False, ())):
        ctx, tally = _reported_against_a_toss(support, toss_first=toss_first, **case)  # type: ignore[arg-type]
        assert tally.cds == {"Adams": 3, "Baker": 1, "Clark": 2} and tally.ties_applied == ("toss",)
        assert tally.tosses_before_result == expected, toss_first
        found = [(f.code, f.severity) for f in audit_tallies(ctx, [tally]).findings if f.code == "TOSS_BEFORE_RESULT"]
        assert found == ([("TOSS_BEFORE_RESULT", "warn")] if toss_first else [])


def test_a_standing_toss_the_result_does_not_use_is_a_problem_and_a_finding(support: ModuleType) -> None:
    """A toss recorded against the result that stands, for a tie that result does not call for under the
    rule set (the intake refuses it as NO_SUCH_TIE; a log written under another reading of the rules, or
    by hand, may hold one): the tally does not use it, and says so, and so does the audit (TOSS_UNUSED).
    E10 (D=6, A100 B50 C50) calls for a Baker/Clark toss; an Adams/Baker toss decides nothing there."""
    e10 = {"Adams": 100, "Baker": 50, "Clark": 50}
    ctx, tally = _reported_against_a_toss(support, toss_first=False, delegates=6, align=e10, reported=None,
                                          contenders=("Adams", "Baker"), winner="Baker")
    assert tally.tosses_unused == ("toss",) and tally.ties_applied == ()
    assert [p for p in tally.problems if "coin toss toss matches no tie of this result under idp-2020" in p], tally.problems
    found = [(f.code, f.severity) for f in audit_tallies(ctx, [tally]).findings if f.code == "TOSS_UNUSED"]
    assert found == [("TOSS_UNUSED", "warn")]
    _, used = _reported_against_a_toss(support, toss_first=False, delegates=6, align=e10, reported=None,
                                       contenders=("Baker", "Clark"), winner="Clark")
    assert used.tosses_unused == () and not [p for p in used.problems if "matches no tie" in p]


def test_a_kept_answer_is_used_only_while_the_tosses_it_read_still_stand() -> None:
    """``decided_nothing`` keeps its answer on the toss's record; it must give it again only while the
    standing tosses it read, and the context, are the same. Here the old result calls first for a tie of
    B and C, and for the tie of A and D only once that tie is settled (a leftover after a lot)."""
    from ledger.caucus_math import PendingTie
    from projections.tie_records import decided_nothing

    old, now = Result({"A": 9}, {"A": 9}, attendance=9), Result({"A": 8}, {"A": 8}, attendance=8)
    calls: list[int] = []

    def pending_of(result: Result, resolutions: tuple[Any, ...]) -> list[PendingTie]:
        assert result is old
        calls.append(len(resolutions))
        return [PendingTie(("A", "D"), 1, "leftover")] if resolutions else [PendingTie(("B", "C"), 1, "tie")]

    ad = TieRecord(("A", "D"), 1, ("A",), "coin", "toss-ad", recorded_against=old)
    bc = TieRecord(("B", "C"), 1, ("B",), "coin", "toss-bc")
    bc_other = TieRecord(("B", "C"), 1, ("C",), "coin", "toss-bc-redrawn")
    rules = ("rules", 3, None)

    assert decided_nothing(ad, {t.key: t for t in (ad, bc)}, now, pending_of, rules) is False  # B-C settled: A-D is called for
    assert calls == [0, 1, 2]
    assert decided_nothing(ad, {t.key: t for t in (ad, bc)}, now, pending_of, rules) is False
    assert calls == [0, 1, 2]  # the kept answer: nothing allocated again
    assert decided_nothing(ad, {ad.key: ad}, now, pending_of, rules) is True  # B-C no longer settled: A-D never called for
    assert decided_nothing(ad, {t.key: t for t in (ad, bc_other)}, now, pending_of, rules) is False  # another toss of B-C: read again
    assert calls == [0, 1, 2, 0, 0, 1, 2]
    assert decided_nothing(ad, {t.key: t for t in (ad, bc_other)}, now, pending_of, ("rules", 4, None)) is False  # another context
    assert calls == [0, 1, 2, 0, 0, 1, 2, 0, 1, 2]
    assert decided_nothing(ad, {t.key: t for t in (ad, bc_other)}, now, pending_of) is False  # no context: nothing kept, nothing used
    assert calls == [0, 1, 2, 0, 0, 1, 2, 0, 1, 2, 0, 1, 2]
