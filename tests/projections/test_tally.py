"""Unit tallies and their sums: T and D, reported vs computed delegates, ties, SDEs exact and shown."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from fractions import Fraction
from types import ModuleType

from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.events import (
    County,
    ElectionDefined,
    Result,
    ResultReported,
    ResultsCertified,
    SatelliteGroup,
    TieBroken,
    TieMethod,
    UnitDefinition,
    UnitOpened,
)
from projections.reducers import Projection, TieRecord, UnitState, apply_election, apply_unit
from projections.tally import UnitTally, aggregate, aggregate_counties, compute_unit_tally, election_context

CANDS = ("Biden", "Buttigieg", "Sanders", "Warren", "Uncommitted")


def _election(units: tuple[UnitDefinition, ...], counties: tuple[County, ...], rule_set: str = "idp-2020") -> ElectionDefined:
    return ElectionDefined("t", rule_set, CANDS, counties, units)


LEE = County("lee", "Lee", Fraction(21, 150))
SATS = County("sat", "CD3 Satellite", Fraction(1))


def _ctx(support: ModuleType, defn: ElectionDefined, **kw: object):  # type: ignore[no-untyped-def]
    return election_context(apply_election(None, support.define(defn)), "e1", **kw)


def _unit(support: ModuleType, unit_id: str, first: dict[str, int], final: dict[str, int], *, reported: dict[str, int] | None = None,
          opened: int | None = None, ties: tuple[TieBroken, ...] = ()) -> UnitState:
    s = None
    if opened is not None:
        s = apply_unit(s, support.ev(UnitOpened(opened), unit_id=unit_id))
    s = apply_unit(s, support.ev(ResultReported(Result(first, final, delegates_reported=reported), "chair"), unit_id=unit_id))
    for t in ties:
        s = apply_unit(s, support.ev(t, unit_id=unit_id))
    return s


def test_precinct_worked_example_e06_lee_fm5(support: ModuleType) -> None:
    """RULES §13 E06: Lee FM5, D=12, T=91 -> Biden 3, Buttigieg 5, Sanders 4; SDE 0.42 / 0.70 / 0.56."""
    ctx = _ctx(support, _election((UnitDefinition("947310", "FM5", "lee", 12),), (LEE,)))
    st = _unit(support, "947310", {"Biden": 24, "Buttigieg": 30, "Sanders": 21, "Warren": 4, "Uncommitted": 12},
               {"Biden": 25, "Buttigieg": 35, "Sanders": 31})
    t = compute_unit_tally(st, ctx)
    assert (t.attendance, t.attendance_source, t.delegates, t.delegates_source, t.threshold) == (91, "first_alignment", 12, "apportioned", 14)
    assert t.cds_source == "computed" and t.cds_reported is None
    assert {c: n for c, n in t.cds.items() if n} == {"Biden": 3, "Buttigieg": 5, "Sanders": 4}
    assert t.sde_weight == Fraction(12 * 21, 150)
    assert t.sde["Buttigieg"] == Fraction(7, 10) and t.sde_display["Sanders"] == Decimal("0.5600")
    assert t.first["Warren"] == 4 and t.final["Warren"] == 0 and set(t.first) == set(CANDS)
    assert t.problems == () and t.settled


def test_reported_delegates_are_official_and_computed_kept(support: ModuleType) -> None:
    """E08 Black Hawk WL 2-4: certified 3/4/3/4/3 = 17 for D = 14; the rule set gives 3/3/2/4/2."""
    bh = County("bh", "Black Hawk", Fraction(101, 500))
    ctx = _ctx(support, _election((UnitDefinition("946620", "WL 2-4", "bh", 14),), (bh,)))
    final = {"Biden": 25, "Buttigieg": 29, "Klobuchar": 20, "Sanders": 30, "Warren": 19}
    st = _unit(support, "946620", final, final, opened=124,
               reported={"Biden": 3, "Buttigieg": 4, "Klobuchar": 3, "Sanders": 4, "Warren": 3})
    t = compute_unit_tally(st, ctx)
    assert t.cds_source == "reported" and t.cds["Buttigieg"] == 4 and sum(t.cds.values()) == 17
    assert t.cds_computed == {**dict.fromkeys(CANDS, 0), "Biden": 3, "Buttigieg": 3, "Klobuchar": 2, "Sanders": 4, "Warren": 2}
    assert t.sde["Buttigieg"] == 4 * Fraction(101, 500), "SDE follows the official (reported) delegates"
    assert any("add up to 17" in p for p in t.problems)
    assert t.attendance_source == "opened" and t.threshold == 19


def test_satellite_d_from_attendance_and_explicit_weight(support: ModuleType) -> None:
    """E07 UIHC satellite: 65 attendees -> D 7; Sanders 5, Warren 2; weight 0.7582 -> 0.5416 / 0.2166."""
    unit = UnitDefinition("1172", "UIHC", "sat", None, satellite_group="CD2", sde_weight=Fraction(7582, 10000))
    ctx = _ctx(support, _election((unit,), (SATS,)))
    st = _unit(support, "1172", {"Sanders": 48, "Warren": 17}, {"Sanders": 48, "Warren": 15, "Uncommitted": 2})
    t = compute_unit_tally(st, ctx)
    assert (t.delegates, t.delegates_source) == (7, "attendance")
    assert {c: n for c, n in t.cds.items() if n} == {"Sanders": 5, "Warren": 2}
    assert (t.sde_display["Sanders"], t.sde_display["Warren"]) == (Decimal("0.5416"), Decimal("0.2166"))


def test_satellite_without_a_weight_shares_its_group_pool(support: ModuleType) -> None:
    """RULES §8: a satellite the definition gives no weight weighs attendance x pool / attendance base,
    never D x the county ratio. E07 in CD2 (pool 11, base 943): 65 x 11/943 = 0.7582 -> 0.5416 / 0.2166;
    a one-attendee satellite gets 11/943 (0.0117), a 100-attendee one 1,100/943 (1.1665)."""
    units = (UnitDefinition("1172", "UIHC", "lee", None, satellite_group="cd2"),
             UnitDefinition("s1", "S1", "lee", None, satellite_group="cd2"),
             UnitDefinition("s2", "S2", "lee", None, satellite_group="cd2"))
    defn = replace(_election(units, (LEE,)), satellite_groups=(SatelliteGroup("cd2", "CD2 Satellite", Fraction(11), 943),))
    ctx = _ctx(support, defn)
    t = compute_unit_tally(_unit(support, "1172", {"Sanders": 48, "Warren": 17}, {"Sanders": 48, "Warren": 15, "Uncommitted": 2}), ctx)
    assert t.sde_weight == Fraction(65 * 11, 943) and t.problems == ()
    assert (t.sde_display["Sanders"], t.sde_display["Warren"]) == (Decimal("0.5416"), Decimal("0.2166"))
    one = compute_unit_tally(_unit(support, "s1", {"Biden": 1}, {"Biden": 1}), ctx)
    hundred = compute_unit_tally(_unit(support, "s2", {"Biden": 100}, {"Biden": 100}), ctx)
    assert (one.sde_display["Biden"], hundred.sde_display["Biden"]) == (Decimal("0.0117"), Decimal("1.1665"))


def test_satellite_weight_is_shared_over_the_delegates_it_awarded(support: ModuleType) -> None:
    """Three 2020 satellites awarded one CD above the attendance table; their published SDEs split the
    weight over the larger number (VAN 1143: Sanders 2 of 7 CDs at weight 0.7696 -> 0.2199)."""
    unit = UnitDefinition("1143", "CIL", "sat", None, satellite_group="CD3", sde_weight=Fraction(7696, 10000))
    ctx = _ctx(support, _election((unit,), (SATS,)))
    st = _unit(support, "1143", {"Sanders": 15, "Warren": 35}, {"Sanders": 15, "Warren": 35}, reported={"Sanders": 2, "Warren": 5})
    t = compute_unit_tally(st, ctx)
    assert t.delegates == 6 and t.sde_divisor == 7
    assert (t.sde_display["Sanders"], t.sde_display["Warren"]) == (Decimal("0.2199"), Decimal("0.5497"))


def test_ties_pending_until_a_matching_toss(support: ModuleType) -> None:
    """E10: W100 S50 B50, T=200, D=6: Sanders/Biden tie for the last seat; the toss settles it."""
    county = County("c", "C", Fraction(1, 10))
    ctx = _ctx(support, _election((UnitDefinition("u", "U", "c", 6),), (county,)))
    align = {"Warren": 100, "Sanders": 50, "Biden": 50}
    pending = compute_unit_tally(_unit(support, "u", align, align), ctx)
    assert [(p.contenders, p.seats) for p in pending.pending] == [(("Biden", "Sanders"), 1)]
    assert not pending.settled and pending.cds["Warren"] == 3 and pending.cds["Sanders"] + pending.cds["Biden"] == 2
    wrong = TieBroken(("Warren", "Sanders"), 1, ("Warren",), TieMethod.COIN, caller="x")
    assert not compute_unit_tally(_unit(support, "u", align, align, ties=(wrong,)), ctx).settled, "a toss of another tie settles nothing"
    toss = TieBroken(("Sanders", "Biden"), 1, ("Sanders",), TieMethod.COIN, caller="Biden")
    st = _unit(support, "u", align, align, ties=(toss,))
    done = compute_unit_tally(st, ctx)
    assert done.settled and (done.cds["Warren"], done.cds["Sanders"], done.cds["Biden"]) == (3, 2, 1)
    assert done.ties_applied == (st.ties[0].event_id,)


def test_an_unusable_toss_is_a_problem_every_time_the_tally_is_computed(support: ModuleType) -> None:
    """A recorded toss the caucus math refuses (a winner who was not in the tie) is named in the
    problems and left out; the record keeps its check, so a later tally says the same."""
    ctx = _ctx(support, _election((UnitDefinition("947310", "FM5", "lee", 12),), (LEE,)))
    base = _unit(support, "947310", {"Biden": 24, "Buttigieg": 30, "Sanders": 21, "Warren": 4, "Uncommitted": 12},
                 {"Biden": 25, "Buttigieg": 35, "Sanders": 31})
    bad = TieRecord(("Biden", "Sanders"), 1, ("Warren",), "coin", "toss-1")
    st = replace(base, ties=(bad,))
    first, again = compute_unit_tally(st, ctx), compute_unit_tally(st, ctx)
    assert first == again and first.ties_applied == ()
    (problem,) = first.problems
    assert problem.startswith("coin toss toss-1 cannot be used: winners") and "did not take part" in problem
    assert {c: n for c, n in first.cds.items() if n} == {"Biden": 3, "Buttigieg": 5, "Sanders": 4}
    assert bad == TieRecord(("Biden", "Sanders"), 1, ("Warren",), "coin", "toss-1"), "the check is no part of the record"


def test_missing_definition_unknown_unit_and_bad_input_are_problems_not_crashes(support: ModuleType) -> None:
    st = _unit(support, "u9", {"A": 5}, {"A": 5}, reported={"A": 1})
    t = compute_unit_tally(st, election_context(None, "e1"))
    assert not t.defined and t.cds_source == "reported" and t.cds_computed is None and t.sde == {}
    assert "not defined" in t.problems[0]
    county = County("c", "C", Fraction(1, 10))
    ctx = _ctx(support, _election((UnitDefinition("u", "U", "c", 4),), (county,)))
    assert "not in the definition" in compute_unit_tally(st, ctx).problems[0]
    over = _unit(support, "u", {"Biden": 30}, {"Biden": 50})
    bad = compute_unit_tally(over, ctx)
    assert bad.cds_computed is None and any("cannot be computed" in p for p in bad.problems)
    unknown = _ctx(support, _election((UnitDefinition("u", "U", "c", 4),), (county,), rule_set="idp-1972"))
    assert any("idp-1972" in p for p in compute_unit_tally(over, unknown).problems)


def test_the_threshold_is_shown_where_the_delegates_cannot_be_computed(support: ModuleType) -> None:
    """Adair 4SE Orient, 2020: T = Σ first = 34, final 36 (RULES §4.4 broken). No allocation can be
    made, but the threshold depends on T and D alone: ceil(15% x 34) = 6 for D = 4 (§3)."""
    county = County("c", "C", Fraction(1, 10))
    ctx = _ctx(support, _election((UnitDefinition("u", "U", "c", 4),), (county,)))
    t = compute_unit_tally(_unit(support, "u", {"Biden": 20, "Sanders": 14}, {"Biden": 20, "Sanders": 16}), ctx)
    assert t.cds_computed is None and any("cannot be computed" in p for p in t.problems)
    assert (t.attendance, t.attendance_source, t.threshold) == (34, "first_alignment", 6)
    reported = _unit(support, "u", {"Biden": 20, "Sanders": 14}, {"Biden": 20, "Sanders": 16}, opened=30)
    opened = compute_unit_tally(reported, ctx)
    assert opened.cds_computed is None and (opened.attendance_source, opened.threshold) == ("opened", 5), "ceil(15% x 30)"
    unknown = _ctx(support, _election((UnitDefinition("u", "U", "c", 4),), (county,), rule_set="idp-1972"))
    assert compute_unit_tally(reported, unknown).threshold is None, "no rule set, no threshold"
    only_opened = compute_unit_tally(apply_unit(None, support.ev(UnitOpened(40), unit_id="u")), ctx)
    assert (only_opened.reporting, only_opened.threshold) == (False, 6), "announced once T is counted (RULES §2.2)"
    no_d = compute_unit_tally(reported, election_context(None, "e1"))
    assert no_d.threshold is None, "no definition, no D"


def test_election_certification_marks_reporting_units_certified(support: ModuleType) -> None:
    county = County("c", "C", Fraction(1, 10))
    defn = _election((UnitDefinition("u", "U", "c", 4), UnitDefinition("v", "V", "c", 4)), (county,))
    state = apply_election(apply_election(None, support.define(defn)), support.ev(ResultsCertified("party")))
    ctx = election_context(state, "e1")
    t = compute_unit_tally(_unit(support, "u", {"Biden": 5}, {"Biden": 5}), ctx)
    assert t.status == "certified"
    assert compute_unit_tally(apply_unit(None, support.ev(UnitOpened(3), unit_id="v")), ctx).status == "not_reported"


def test_aggregates_sum_units_and_count_all_defined_units(support: ModuleType) -> None:
    events = support.election_log(30, corrections=1, rejections=0)
    p = Projection()
    p.apply_all(events)
    ctx = election_context(p.elections["e1"], "e1")
    silent = sorted(p.units)[:3]
    tallies = [compute_unit_tally(s, ctx) for u, s in p.units.items() if u not in silent]
    state = aggregate(ctx, tallies)
    assert state.units_defined == 31 and state.units_reporting == 28
    assert state.share_reporting == Fraction(28, 31)
    for c in ctx.candidates:
        assert state.first[c] == sum(t.first[c] for t in tallies)
        assert state.sde[c] == sum((t.sde[c] for t in tallies), Fraction(0))
        assert state.sde_display_sum[c] == sum((t.sde_display[c] for t in tallies), Decimal(0))
    counties = aggregate_counties(ctx, tallies)
    assert sum(a.units_defined for a in counties.values()) == 31
    for c in ctx.candidates:
        assert sum(a.cds[c] for a in counties.values()) == state.cds[c]
    assert aggregate(ctx, tallies, "c1").to_json() == counties["c1"].to_json()


def test_unit_tally_json_round_trip(support: ModuleType) -> None:
    p = Projection()
    p.apply_all(support.election_log(10))
    ctx = election_context(p.elections["e1"], "e1")
    for s in p.units.values():
        t = compute_unit_tally(s, ctx)
        assert UnitTally.loads(t.dumps()) == t
        assert UnitTally.loads(t.dumps()).dumps() == t.dumps()


def test_another_rule_set_is_a_different_context(support: ModuleType) -> None:
    p = Projection()
    p.apply_all(support.election_log(5))
    own = election_context(p.elections["e1"], "e1")
    other = election_context(p.elections["e1"], "e1", rule_set="idp-2016")
    assert own.key != other.key and other.rule_set_name == "idp-2016"
    assert all(compute_unit_tally(s, other).rule_set == "idp-2016" for s in p.units.values())


@settings(max_examples=2000, deadline=None)
@given(st.integers(min_value=0, max_value=10**9), st.integers(min_value=1, max_value=10**7))
def test_tally_display_rounding_is_the_published_one(num: int, den: int) -> None:
    from ledger.caucus_math import display_sde
    from projections.tally import _shown

    value = Fraction(num, den)
    assert _shown(value) == display_sde(value) and str(_shown(value)) == str(display_sde(value))
