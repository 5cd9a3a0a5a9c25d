"""Unit tests of the caucus-math modules: edge cases, validation, ties, SDEs, rule sets."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest

from ledger.caucus_math import (
    DEFAULT_RULE_SET,
    RULE_SETS,
    CaucusMathError,
    Counts,
    PendingTie,
    RuleSet,
    Severity,
    TieResolution,
    cds_from_sde,
    county_sde_ratio,
    display_sde,
    get_rule_set,
    locked_groups,
    satellite_delegates,
    satellite_sde_ratio,
    satellite_sde_weight,
    sde_for,
    sum_displayed,
    too_many_viable,
    viability_share,
    viability_threshold,
    viable_groups,
)
from ledger.caucus_math._core import NO_TIES, TieBook, distribute

RS = get_rule_set()


def alloc(final, attendance=None, delegates=4, first=None, ties=(), rs=RS):
    return rs.allocate(
        delegates=delegates, attendance=attendance, first=final if first is None else first, final=final, ties=ties
    )


# ----------------------------------------------------------------------------- thresholds


def test_shares_by_band() -> None:
    assert [viability_share(d) for d in (1, 2, 3, 4, 36)] == [
        Fraction(1, 2), Fraction(1, 4), Fraction(1, 6), Fraction(3, 20), Fraction(3, 20)
    ]


@pytest.mark.parametrize("d", [1, 2, 3, 4, 7, 36])
def test_threshold_is_the_exact_ceiling(d: int) -> None:
    share = viability_share(d)
    for t in range(0, 5000):
        exact = -((-share.numerator * t) // share.denominator)
        assert viability_threshold(t, d) == exact, t


@pytest.mark.parametrize(
    ("args", "field"),
    [((10, 0), "delegates"), ((-1, 4), "attendance"), ((10, -2), "delegates"), ((True, 4), "attendance"),
     ((10.0, 4), "attendance")],
)
def test_threshold_rejects_impossible_input(args, field: str) -> None:
    with pytest.raises(CaucusMathError) as err:
        viability_threshold(*args)
    assert err.value.field == field
    assert str(err.value).startswith(f"{field}:")


# ----------------------------------------------------------------------------- viability


def test_viable_groups_need_members_and_the_threshold() -> None:
    assert viable_groups({"A": 0, "B": 19, "C": 18}, 19) == {"B"}
    assert viable_groups({"A": 0, "B": 1}, 0) == {"B"}
    assert locked_groups({"A": 24, "B": 5}, 29, 4) == {"A", "B"}
    assert locked_groups({"A": 24, "B": 4}, 28, 4) == {"A"}
    assert locked_groups({"A": 24}, 24, 0) == frozenset()


def test_too_many_viable_both_readings() -> None:
    sizes = {"A": 12, "B": 9, "C": 9}
    app = too_many_viable(sizes, 2, "all")
    assert (app.keep, app.must_realign, app.pending) == ({"A"}, {"B", "C"}, None)
    lots = too_many_viable(sizes, 2, "lots")
    assert lots.keep == {"A"} and lots.must_realign == frozenset()
    assert lots.pending is not None
    assert lots.pending == PendingTie(("B", "C"), 1, lots.pending.reason, "realign")
    drawn = too_many_viable(sizes, 2, "lots", ties=[TieResolution(("C", "B"), 1, ("B",), "coin")])
    assert (drawn.keep, drawn.must_realign) == ({"A", "B"}, {"C"})
    clean = too_many_viable({"A": 10, "B": 11, "S": 6, "U": 7}, 3)
    assert clean.must_realign == {"S"} and clean.pending is None


def test_every_group_tied_at_the_cut_is_decided_by_lot_even_under_the_app_reading() -> None:
    """§4.5 realigns the smallest groups until at most D stay viable; when the groups tied at the cut are
    all the groups left, realigning all of them (the APP's reading) leaves nobody to elect the D
    delegates, so a lot decides which realign. A-D 25 each, T=100, D=3: three stay by lot."""
    four = {"A": 25, "B": 25, "C": 25, "D": 25}
    cut = too_many_viable(four, 3, "all")
    assert cut.keep == frozenset() and cut.must_realign == frozenset()
    assert cut.pending is not None and (cut.pending.contenders, cut.pending.seats) == (("A", "B", "C", "D"), 3)
    # its seats count the groups that stay, and so does its reason: an official reading only the reason
    # ("1 of the 4 ... must realign") could enter the one that realigns as the toss's winner
    assert "1 of the 4 equal smallest groups" in cut.pending.reason and "winners are the 3 that stay" in cut.pending.reason
    pending = alloc(four, 100, 3)
    assert not pending.settled and pending.unallocated == 0 and not any(pending.delegates.values())
    drawn = alloc(four, 100, 3, ties=(TieResolution(("A", "B", "C", "D"), 3, ("A", "B", "D"), "lots"),))
    assert drawn.settled and drawn.must_realign == {"C"} and drawn.delegates == {"A": 1, "B": 1, "C": 0, "D": 1}
    assert too_many_viable({"A": 6, "B": 6, "C": 6}, 2, "all").pending is not None
    assert too_many_viable({"A": 12, "B": 9, "C": 9}, 2, "all").must_realign == {"B", "C"}, "a larger group stays: APP"


def test_e04_smallest_of_four_realigns_and_keeps_denominator() -> None:
    got = alloc({"Biden": 10, "Buttigieg": 11, "Steyer": 6, "Uncommitted": 7}, 34, 3)
    assert got.must_realign == {"Steyer"}
    assert got.viable_final == {"Biden", "Buttigieg", "Steyer", "Uncommitted"}
    assert got.eligible == {"Biden", "Buttigieg", "Uncommitted"}
    assert got.raw == {"Biden": Fraction(30, 34), "Buttigieg": Fraction(33, 34), "Uncommitted": Fraction(21, 34)}


# ----------------------------------------------------------------------------- allocation edge cases


def test_attendance_none_uses_the_first_alignment_total() -> None:
    a = alloc({"A": 40, "B": 35, "C": 25}, None, 5)
    assert a.attendance == 100 and a.threshold == 15
    assert a.delegates == {"A": 2, "B": 2, "C": 1}


def test_groups_missing_from_one_alignment_count_as_zero() -> None:
    a = RS.allocate(delegates=6, attendance=60, first={"A": 25, "B": 18, "C": 9, "D": 8},
                    final={"A": 25, "B": 18, "C": 14})
    assert a.delegates == {"A": 3, "B": 2, "C": 1, "D": 0}
    assert a.final["D"] == 0 and a.first["D"] == 8
    assert a.viable_first == {"A", "B", "C"}


def test_unit_electing_nobody() -> None:
    a = alloc({"A": 3}, 3, 0)
    assert a.delegates == {"A": 0}
    assert a.settled and a.unallocated == 0 and a.threshold == 0
    assert a.raw == {}


def test_nobody_viable_leaves_every_delegate_unallocated() -> None:
    a = alloc({"A": 0, "B": 0}, 0, 5)
    assert a.delegates == {"A": 0, "B": 0} and a.unallocated == 5 and a.settled
    b = alloc({"A": 1, "B": 1}, 30, 5, first={"A": 15, "B": 15})  # everybody else went home
    assert b.eligible == frozenset() and b.unallocated == 5


def test_everyone_left_but_one_group_takes_all_round_robin() -> None:
    a = alloc({"A": 20, "B": 0}, 100, 5, first={"A": 60, "B": 40})
    assert a.delegates == {"A": 5, "B": 0}
    assert a.raw == {"A": Fraction(1)}


def test_surplus_from_the_only_delegate_floor_is_taken_from_larger_groups() -> None:
    # D = 4, T = 20: three groups of 3 (raw 0.6, kept at 1) and 11 (raw 2.2, floor 2): 5 > 4.
    a = alloc({"A": 3, "B": 3, "C": 3, "D": 11}, 20, 4)
    assert a.settled
    assert a.delegates == {"A": 1, "B": 1, "C": 1, "D": 1}


def test_surplus_tie_is_pending_and_winners_keep_their_delegate() -> None:
    names, sizes = ["A", "B", "C", "D"], [1, 1, 4, 4]  # D = 5, T = 10: 1+1+2+2 = 6 rounded
    got, tie, _ = distribute(names, sizes, 5, 10, "round_robin", None, NO_TIES)
    assert got == [1, 1, 1, 1]
    assert tie is not None
    assert (tie.contenders, tie.seats, tie.stage) == (("C", "D"), 1, "surplus")

    done, tie2, _ = distribute(names, sizes, 5, 10, "round_robin", None,
                                TieBook([TieResolution(("C", "D"), 1, ("D",), "coin")]))
    assert (done, tie2) == ([1, 1, 1, 2], None)


def test_round_robin_continues_in_remainder_order() -> None:
    # E09: 240/179 of 484 for 8: 3.97 and 2.96 -> 3 + 2, left 3 -> C, S, C.
    a = alloc({"C": 240, "S": 179}, 484, 8)
    assert a.delegates == {"C": 5, "S": 3}


def test_leftover_lot_beyond_full_rounds() -> None:
    rs = get_rule_set("idp-2016").variant(recompute_threshold_at_final=False)
    a = alloc({"A": 20, "B": 20}, 100, 10, rs=rs)  # raw 2 and 2, six left over
    assert a.delegates == {"A": 5, "B": 5} and a.settled
    b = alloc({"A": 20, "B": 20, "C": 20}, 100, 10, rs=rs)  # raw 2,2,2: 4 left: one each + 1 by lot
    assert b.delegates == {"A": 3, "B": 3, "C": 3}
    (tie,) = b.pending
    assert (tie.contenders, tie.seats, tie.stage, tie.method) == (("A", "B", "C"), 1, "leftover", "lots")


def test_recomputed_threshold_2016() -> None:
    rs16 = get_rule_set("idp-2016")
    final = {"A": 10, "B": 30, "C": 0}
    a16 = alloc(final, 100, 4, first={"A": 20, "B": 30, "C": 50}, rs=rs16)
    a20 = alloc(final, 100, 4, first={"A": 20, "B": 30, "C": 50})
    assert (a20.threshold, a20.final_threshold) == (15, 15)
    assert (a16.threshold, a16.final_threshold) == (15, 6)
    assert a20.eligible == {"B"} and a16.eligible == {"A", "B"}


def test_worksheet_decimals_only_matter_from_ten_thousand_attendees() -> None:
    final = {"A": 3002, "B": 7005}  # D = 5, T = 10,007: remainders 0.49995... and 0.50004...
    exact = alloc(final, 10007, 5)
    app = alloc(final, 10007, 5, rs=RS.variant(worksheet_decimals=4))
    assert exact.settled and exact.delegates == {"A": 1, "B": 4}
    assert app.pending[0].contenders == ("A", "B")
    assert app.raw == {"A": Fraction(3, 2), "B": Fraction(7, 2)}


def test_one_delegate_readings() -> None:
    final = {"W": 10, "S": 8, "B": 8}
    assert alloc(final, 26, 1).delegates == {"W": 1, "S": 0, "B": 0}
    strict = alloc(final, 26, 1, rs=RS.variant(one_delegate_no_majority="unawarded"))
    assert strict.delegates == {"W": 0, "S": 0, "B": 0} and strict.unallocated == 1 and strict.settled
    majority = alloc({"W": 14, "S": 12}, 26, 1, rs=RS.variant(one_delegate_no_majority="unawarded"))
    assert majority.delegates == {"W": 1, "S": 0}
    assert alloc({"W": 0}, 0, 1).unallocated == 1


def test_unused_or_unknown_resolutions_are_ignored_not_guessed() -> None:
    final = {"Warren": 100, "Sanders": 50, "Biden": 50}
    stray = TieResolution(("Biden", "Warren"), 1, ("Warren",), "coin")
    a = alloc(final, 200, 6, ties=(stray,))
    assert not a.settled and a.applied_ties == ()


def test_candidate_names_do_not_need_to_be_known() -> None:
    a = alloc({"Other": 30, "Uncommitted": 70}, 100, 4)
    assert a.delegates == {"Other": 1, "Uncommitted": 3}


@pytest.mark.parametrize(
    ("kwargs", "field", "rule"),
    [
        (dict(delegates=-1, attendance=10, first={"A": 5}, final={"A": 5}), "delegates", None),
        (dict(delegates=4, attendance=-3, first={"A": 0}, final={"A": 0}), "attendance", None),
        (dict(delegates=4, attendance=10, first={"A": -1}, final={"A": 0}), "first", "RULES §2"),
        (dict(delegates=4, attendance=10, first={"A": 5}, final={"A": 2.5}), "final", None),
        (dict(delegates=4, attendance=10, first={"A": 5}, final={"": 1}), "final", None),
        (dict(delegates=4, attendance=10, first={"A": 11}, final={"A": 5}), "first", "RULES §2 step 3"),
        (dict(delegates=4, attendance=10, first={"A": 5}, final={"A": 11}), "final", "RULES §4.4"),
        (dict(delegates=4, attendance=None, first={"A": 5}, final={"A": 6}), "final", "RULES §4.4"),
        (dict(delegates=4, attendance=10, first=[("A", 5)], final={"A": 5}), "first", None),
        (dict(delegates=True, attendance=10, first={"A": 5}, final={"A": 5}), "delegates", None),
    ],
)
def test_invalid_input_names_the_field_and_the_rule(kwargs: dict, field: str, rule: str | None) -> None:
    with pytest.raises(CaucusMathError) as err:
        RS.allocate(**kwargs)
    assert issubclass(CaucusMathError, ValueError)
    assert err.value.field == field
    assert err.value.rule == rule
    assert str(err.value).startswith(f"{field}: ")


def test_results_are_frozen_hashable_and_equal_across_orders() -> None:
    a = alloc({"A": 40, "B": 35, "C": 25}, 100, 5)
    b = alloc({"C": 25, "B": 35, "A": 40}, 100, 5)
    assert a == b and hash(a) == hash(b) and repr(a) == repr(b)
    with pytest.raises(AttributeError):
        a.threshold = 3  # type: ignore[misc]
    assert list(a.delegates) == ["A", "B", "C"]
    assert a.delegates == {"C": 1, "A": 2, "B": 2}
    assert a.awarded == 5


def test_caller_mapping_changes_do_not_leak_into_results() -> None:
    final = {"A": 40, "B": 35, "C": 25}
    a = alloc(final, 100, 5)
    final["A"] = 0
    assert a.final["A"] == 40


# ----------------------------------------------------------------------------- ties


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        (dict(contenders=("A",), seats=1, winners=("A",)), "contenders"),
        (dict(contenders=("A", "B"), seats=2, winners=("A", "B")), "seats"),
        (dict(contenders=("A", "B"), seats=1, winners=("C",)), "winners"),
        (dict(contenders=("A", "B", "C"), seats=2, winners=("A",)), "winners"),
        (dict(contenders=("A", "B"), seats=1, winners=("A",), method="dice"), "method"),
        (dict(contenders=("A", "A"), seats=1, winners=("A",)), "contenders"),
        (dict(contenders="AB", seats=1, winners=("A",)), "contenders"),
    ],
)
def test_tie_resolution_is_validated_where_it_is_recorded(kwargs: dict, field: str) -> None:
    with pytest.raises(CaucusMathError) as err:
        TieResolution(**kwargs)
    assert err.value.field == field


def test_tie_resolution_is_order_independent() -> None:
    a = TieResolution(("B", "A", "C"), 2, ("C", "A"), "lots")
    b = TieResolution(("A", "C", "B"), 2, ("A", "C"), "lots", caller="B")
    assert a == b and a.contenders == ("A", "B", "C") and a.winners == ("A", "C")
    tie = PendingTie(("A", "B", "C"), 2, "x")
    assert tie.matches(a) and tie.method == "lots"
    assert PendingTie(("A", "B"), 1, "x").method == "coin"


# ----------------------------------------------------------------------------- satellites and SDEs


@pytest.mark.parametrize(
    ("attendance", "delegates"),
    [(0, 0), (1, 4), (20, 4), (21, 5), (40, 5), (41, 6), (60, 6), (61, 7), (80, 7), (81, 8), (100, 8), (101, 9),
     (318, 9)],
)
def test_satellite_delegate_table(attendance: int, delegates: int) -> None:
    assert satellite_delegates(attendance) == delegates


def test_satellite_weights_and_ratios() -> None:
    weight = satellite_sde_weight(65, 11, 943)
    assert weight == Fraction(715, 943)
    assert satellite_sde_ratio(weight, 7) == Fraction(715, 943 * 7)
    assert satellite_sde_weight(0, 4, 0) == 0
    assert satellite_sde_ratio(Fraction(0), 0) == 0
    with pytest.raises(CaucusMathError):
        satellite_sde_weight(5, 4, 3)
    with pytest.raises(CaucusMathError):
        satellite_sde_ratio(Fraction(1, 3), 0)
    with pytest.raises(CaucusMathError):
        satellite_delegates(-1)


def test_sde_exact_and_display() -> None:
    adair = county_sde_ratio(4, 51)
    assert display_sde(sde_for(1, adair)) == Decimal("0.0784")
    assert display_sde(sde_for(2, adair)) == Decimal("0.1569")
    assert str(display_sde(Fraction(0))) == "0.0000"
    assert display_sde(Fraction(1, 20000)) == Decimal("0.0001")  # halves round up
    assert display_sde(Fraction(-1, 20000)) == Decimal("-0.0001")
    assert display_sde(Fraction(3, 20000)) == Decimal("0.0002")
    assert sum_displayed([sde_for(1, adair)] * 3) == Decimal("0.2352")
    assert cds_from_sde(Decimal("0.1569"), adair) == 2
    with pytest.raises(CaucusMathError):
        cds_from_sde(Decimal("0.1000"), adair)
    with pytest.raises(CaucusMathError):
        sde_for(-1, adair)
    with pytest.raises(CaucusMathError):
        county_sde_ratio(3, 0)


# ----------------------------------------------------------------------------- rule sets


def test_registry() -> None:
    assert DEFAULT_RULE_SET == "idp-2020"
    assert set(RULE_SETS) == {"idp-2020", "idp-2016"}
    assert get_rule_set() is RULE_SETS["idp-2020"]
    with pytest.raises(CaucusMathError) as err:
        get_rule_set("idp-2024")
    assert "idp-2016" in str(err.value)
    rs16 = get_rule_set("idp-2016")
    assert (rs16.lock_viable_groups, rs16.leftover, rs16.realign_ties, rs16.recompute_threshold_at_final) == (
        False, "lots", "lots", True
    )
    rs20 = get_rule_set("idp-2020")
    assert (rs20.lock_viable_groups, rs20.leftover, rs20.realign_ties, rs20.recompute_threshold_at_final) == (
        True, "round_robin", "lots", False
    )


def test_variants_are_named_and_validated() -> None:
    v = RS.variant(realign_ties="all")
    assert v.name == "idp-2020[realign_ties=all]" and v.realign_ties == "all"
    assert alloc({"A": 12, "B": 9, "C": 9}, 30, 2, rs=v).rule_set == v.name
    with pytest.raises(CaucusMathError):
        RS.variant(realign_ties="coin")
    with pytest.raises(CaucusMathError):
        RS.variant(no_such_rule=True)
    # §4.5's cut inside equal groups is "decided by lot": both readings are legal outcomes, not ambiguous;
    # §12 keeps `ambiguous` for the 2016 leftover lot.
    assert {a.name for a in RS.alternatives()} == {"idp-2020[leftover=lots]"}
    assert "all equal smallest groups realigned" in RS.reading_of(v)
    assert get_rule_set("idp-2020[realign_ties=all]") == v
    assert get_rule_set("idp-2020[leftover=lots,realign_ties=all]").leftover == "lots"
    assert get_rule_set("idp-2016[recompute_threshold_at_final=False]").recompute_threshold_at_final is False
    for bad in ("idp-2020[realign_ties=coin]", "idp-2020[nothing=1]", "idp-2020[realign_ties=all,leftover=lots]", "idp-2030[leftover=lots]"):
        with pytest.raises(CaucusMathError):
            get_rule_set(bad)
    with pytest.raises(CaucusMathError, match="leftover is given more than once"):  # not "write it as ...round_robin"
        get_rule_set("idp-2020[leftover=lots,leftover=round_robin]")


def test_rulesets_docstring_lists_every_open_point() -> None:
    from ledger.caucus_math import rulesets

    doc = rulesets.__doc__ or ""
    for marker in ("§17.1", "§17.2", "§17.3", "§17.4", "§17.5", "§17.6", "§4.6", "§5.1"):
        assert marker in doc, marker
    for field in ("leftover", "realign_ties", "one_delegate_no_majority", "recompute_threshold_at_final",
                  "worksheet_decimals"):
        assert f"``{field}``" in doc, field


def test_custom_rule_set() -> None:
    mine = RuleSet(name="test-plurality", description="x", realign_ties="lots")
    assert mine.allocate(delegates=2, attendance=30, first={"A": 12, "B": 9, "C": 9},
                         final={"A": 12, "B": 9, "C": 9}).pending
    with pytest.raises(CaucusMathError):
        RuleSet(name="bad", description="x", leftover="coin")  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- checks


def codes(findings) -> list[tuple[str, str]]:
    return [(f.code, f.severity.value) for f in findings]


def test_clean_unit_has_no_findings() -> None:
    f = {"A": 40, "B": 35, "C": 25}
    assert RS.check(delegates=5, attendance=None, first=f, final=f, reported={"A": 2, "B": 2, "C": 1}) == []
    assert RS.check(delegates=5, attendance=None, first=f, final=f) == []


def test_check_delegate_total_when_nobody_is_viable_at_the_final_alignment() -> None:
    """§4.3: with no group viable at the final count no delegate can be awarded, so reporting none is
    the legal outcome; §7: a one-delegate unit still awards exactly one."""
    first, gone = {"A": 1, "B": 1, "C": 0}, {"A": 0, "B": 0, "C": 0}  # threshold 2: nobody viable
    assert RS.check(delegates=7, attendance=13, first=first, final=gone, reported={}) == []
    found = RS.check(delegates=7, attendance=13, first=first, final=gone, reported={"A": 7})
    total = [f for f in found if f.code == "DELEGATE_TOTAL"]
    assert [(f.expected, f.reported) for f in total] == [(0, 7)] and "no group is viable" in total[0].message
    assert [(f.code, f.expected) for f in RS.check(delegates=1, attendance=13, first=first, final=gone, reported={})
            if f.code == "DELEGATE_TOTAL"] == [("DELEGATE_TOTAL", 1)]
    # Nothing reported: a one-delegate unit with nobody in its final alignment cannot award its delegate
    # (§7); with the winner reported (Johnson, Graham Township, 2020) the sum is what counts.
    unawarded = [f for f in RS.check(delegates=1, attendance=13, first=first, final=gone) if f.code == "DELEGATE_TOTAL"]
    assert [(f.severity, f.expected, f.reported) for f in unawarded] == [(Severity.ERROR, 1, 0)]
    assert "RULES §7" in unawarded[0].message
    assert not [f for f in RS.check(delegates=1, attendance=13, first=first, final=gone, reported={"A": 1}) if f.code == "DELEGATE_TOTAL"]
    assert not [f for f in RS.check(delegates=2, attendance=13, first=first, final=gone) if f.code == "DELEGATE_TOTAL"]
    assert RS.check(delegates=1, attendance=0, first={"A": 0}, final={"A": 0}) == []  # nobody came
    assert [f.code for f in RS.check(delegates=1, attendance=13, first={"A": 0}, final={"A": 0})] == ["DELEGATE_TOTAL"]
    # Someone viable at the final count: all D are due again.
    assert [f.expected for f in RS.check(delegates=3, attendance=13, first={"A": 5, "B": 5}, final={"A": 5, "B": 5}, reported={})
            if f.code == "DELEGATE_TOTAL"] == [3]


def test_check_each_code() -> None:
    first = {"A": 30, "B": 30, "C": 40}
    # A shrank although locked, C received a delegate below the threshold, totals are off.
    found = RS.check(delegates=4, attendance=None, first=first, final={"A": 20, "B": 30, "C": 10},
                     reported={"A": 1, "B": 2, "C": 2})
    assert ("LOCKED_GROUP_SHRANK", "error") in codes(found)
    assert ("DELEGATE_TOTAL", "error") in codes(found)
    assert ("NONVIABLE_AWARDED", "error") in codes(found)
    assert ("ALLOCATION", "error") in codes(found)
    nonviable = next(x for x in found if x.code == "NONVIABLE_AWARDED")
    assert nonviable.candidate == "C" and nonviable.expected == 0 and nonviable.reported == 2
    assert nonviable.likely_cause == "viability taken from the first alignment"

    more = RS.check(delegates=4, attendance=None, first={"A": 10, "B": 10}, final={"A": 12, "B": 10})
    assert codes(more)[0] == ("FINAL_GT_FIRST", "error")
    over = RS.check(delegates=4, attendance=10, first={"A": 11}, final={"A": 10})
    assert codes(over)[0] == ("OVERCOUNT", "error")

    many = RS.check(delegates=3, attendance=None, first={"A": 10, "B": 11, "S": 6, "U": 7},
                    final={"A": 10, "B": 11, "S": 6, "U": 7}, reported={"A": 1, "B": 1, "U": 1})
    assert codes(many) == [("TOO_MANY_VIABLE", "warn")]

    sat = RS.check(delegates=6, attendance=None, first={"A": 50}, final={"A": 50}, satellite_attendance=67)
    assert codes(sat) == [("SATELLITE_DELEGATES", "warn")]
    assert (sat[0].expected, sat[0].reported) == (7, 6)

    fewer = RS.check(delegates=7, attendance=None, first={"W": 20, "S": 10, "B": 7},
                     final={"W": 20, "S": 10, "B": 7}, reported={"W": 3, "S": 2, "B": 2})
    assert ("MORE_VOTES_FEWER_DELS", "info") not in codes(fewer)
    swapped = RS.check(delegates=7, attendance=None, first={"W": 20, "S": 10, "B": 7},
                       final={"W": 20, "S": 10, "B": 7}, reported={"W": 2, "S": 4, "B": 1})
    assert ("MORE_VOTES_FEWER_DELS", "info") in codes(swapped)


def test_check_lock_rule_excuses_a_group_dissolved_under_rule_4_5() -> None:
    first = {"Biden": 7, "Buttigieg": 6, "Sanders": 7, "Warren": 6}  # 4 viable for 3
    found = RS.check(delegates=3, attendance=None, first=first,
                     final={"Biden": 9, "Buttigieg": 10, "Sanders": 9, "Warren": 0},
                     reported={"Biden": 1, "Buttigieg": 1, "Sanders": 1})
    assert "LOCKED_GROUP_SHRANK" not in [f.code for f in found]


def test_check_lock_rule_is_a_warning_on_the_threshold_and_absent_in_2016() -> None:
    first = {"A": 15, "B": 85}
    final = {"A": 0, "B": 100}
    found = RS.check(delegates=4, attendance=None, first=first, final=final)
    assert codes(found) == [("LOCKED_GROUP_SHRANK", "warn")]
    assert RS.check(delegates=4, attendance=100, first=first, final=final)[0].severity == "error"
    assert get_rule_set("idp-2016").check(delegates=4, attendance=None, first=first, final=final) == []


def test_check_ambiguous_when_only_the_other_reading_fits() -> None:
    f = {"Clinton": 240, "Sanders": 179}
    found = RS.check(delegates=8, attendance=484, first=f, final=f, reported={"Clinton": 4, "Sanders": 4})
    assert codes(found) == [("ALLOCATION", "ambiguous")]
    assert "2016" in (found[0].likely_cause or "")
    assert found[0].expected == Counts({"Clinton": 5, "Sanders": 3})
    # RULES §4.5 (E05): which of the equal smallest groups realigns is decided by lot, so either lot
    # outcome, and the APP's reading (all of them realign), are legal: no ALLOCATION finding.
    e05 = {"A": 12, "B": 9, "C": 9}
    for reported in ({"A": 1, "B": 1, "C": 0}, {"A": 1, "B": 0, "C": 1}, {"A": 2, "B": 0, "C": 0}):
        found = RS.check(delegates=2, attendance=None, first=e05, final=e05, reported=reported)
        assert codes(found) == [("TOO_MANY_VIABLE", "warn")], (reported, found)
    found = RS.check(delegates=2, attendance=None, first=e05, final=e05, reported={"A": 0, "B": 1, "C": 1})
    assert ("ALLOCATION", "error") in codes(found)


def test_check_one_delegate_units_are_soft() -> None:
    f = {"W": 10, "S": 8, "B": 8}
    found = RS.check(delegates=1, attendance=None, first=f, final=f, reported={"S": 1})
    assert codes(found) == [("ALLOCATION", "soft"), ("MORE_VOTES_FEWER_DELS", "info")]
    assert found[0].likely_cause == "one delegate moved from W to S"


def test_check_likely_causes() -> None:
    # Polk-style: the final-alignment total (100) used as the denominator instead of 109.
    first = {"Biden": 11, "Buttigieg": 16, "Sanders": 49, "Warren": 12, "Yang": 13, "Steyer": 4, "Klobuchar": 4}
    final = {"Biden": 15, "Buttigieg": 18, "Sanders": 51, "Warren": 16}
    found = RS.check(delegates=8, attendance=None, first=first, final=final,
                     reported={"Biden": 1, "Buttigieg": 2, "Sanders": 4, "Warren": 1})
    alloc_f = next(f for f in found if f.code == "ALLOCATION")
    assert str(alloc_f.likely_cause).startswith("final-alignment total (100) used as the denominator")

    # Computed from the first alignment.
    first = {"A": 50, "B": 30, "C": 20}
    final = {"A": 40, "B": 30, "C": 30}
    found = RS.check(delegates=10, attendance=100, first=first, final=final,
                     reported={"A": 5, "B": 3, "C": 2})
    assert "computed from the first alignment" in str(next(f for f in found if f.code == "ALLOCATION").likely_cause)

    # No adjustment: 2.5 + 2.5 + ... rounded up everywhere.
    f3 = {"A": 50, "B": 50, "C": 100}
    found = RS.check(delegates=7, attendance=None, first=f3, final=f3, reported={"A": 2, "B": 2, "C": 4})
    cause = str(next(f for f in found if f.code == "DELEGATE_TOTAL").likely_cause)
    assert cause.startswith("each raw share rounded") and cause.endswith("1 delegate(s) too many")

    # Threshold forgotten (Ringgold-style).
    f4 = {"Biden": 22, "Buttigieg": 10, "Sanders": 7, "Warren": 9}
    found = RS.check(delegates=21, attendance=None, first=f4, final=f4,
                     reported={"Biden": 10, "Buttigieg": 4, "Sanders": 3, "Warren": 4})
    assert "no viability threshold applied" in str(next(f for f in found if f.code == "ALLOCATION").likely_cause)


def test_check_rejects_impossible_input_instead_of_reporting_it() -> None:
    with pytest.raises(CaucusMathError):
        RS.check(delegates=4, attendance=None, first={"A": -1}, final={"A": 0})
    with pytest.raises(CaucusMathError):
        RS.check(delegates=4, attendance=None, first={"A": 1}, final={"A": 0}, reported={"A": -1})


def test_final_total_is_bounded_by_a_known_attendance() -> None:
    # RULES §4.4: Σ final ≤ T; Σ final ≤ Σ first is only the §12 stand-in when T is unknown. Ten people
    # counted at the door who did not align at first may join a group at the final alignment.
    first, final = {"A": 50, "B": 40}, {"A": 50, "B": 50}
    assert "FINAL_GT_FIRST" not in [c for c, _ in codes(RS.check(delegates=6, attendance=100, first=first, final=final))]
    assert ("FINAL_GT_FIRST", "error") in codes(RS.check(delegates=6, attendance=None, first=first, final=final))
    above = RS.check(delegates=6, attendance=99, first=first, final=final)
    finding = next(f for f in above if f.code == "FINAL_GT_FIRST")
    assert (finding.expected, finding.reported) == (99, 100) and "99 attendees" in finding.message


def test_worksheet_decimals_is_a_variant_option() -> None:
    """README lists ``worksheet_decimals`` beside the other options of ``--rule-set``: a variant's name sets it."""
    four = get_rule_set("idp-2020[worksheet_decimals=4]")
    assert four.worksheet_decimals == 4 and four.name == "idp-2020[worksheet_decimals=4]"
    assert four == RS.variant(worksheet_decimals=4)
    both = get_rule_set("idp-2016[leftover=round_robin,worksheet_decimals=0]")
    assert (both.leftover, both.worksheet_decimals) == ("round_robin", 0)
    assert alloc({"A": 12, "B": 9, "C": 9}, 30, 2, rs=four).delegates == alloc({"A": 12, "B": 9, "C": 9}, 30, 2).delegates
    for bad in ("x", "-1", "13", "4.0", "٤", ""):
        with pytest.raises(CaucusMathError, match="worksheet_decimals"):
            get_rule_set(f"idp-2020[worksheet_decimals={bad}]")


def test_every_option_the_readme_names_is_accepted() -> None:
    """The README's table of [OPEN] points names the options ``--rule-set`` takes; each must parse."""
    from pathlib import Path
    import re

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    rows = [line for line in readme.splitlines() if line.startswith("| ") and "(RULES" not in line and "§" in line]
    options = [m.group(1) for line in rows if (m := re.match(r"\|[^|]*\| `(\w+)`", line))]
    assert "worksheet_decimals" in options and "leftover" in options, options
    values = {"worksheet_decimals": "4", "recompute_threshold_at_final": "True", "leftover": "lots",
              "realign_ties": "lots", "one_delegate_no_majority": "unawarded"}
    for option in options:
        assert getattr(get_rule_set(f"idp-2020[{option}={values[option]}]"), option) is not None, option


def test_check_lock_rule_in_a_one_delegate_unit_is_shown_soft() -> None:
    """§4.2 and §12 exempt no D, but a one-delegate unit elects as a whole (§7) and its 50 % "viable" is the
    APP's, informational (§3): a majority group that shrank (19 of 25, then 16) is a soft finding, a warning
    at the intake, where it used to pass unseen. The same shrink with D >= 2 stays an error."""
    found = RS.check(delegates=1, attendance=25, first={"Steyer": 19, "U": 6}, final={"Steyer": 16, "U": 6})
    assert codes(found) == [("LOCKED_GROUP_SHRANK", "soft")]
    assert found[0].candidate == "Steyer" and "§7" in (found[0].likely_cause or "")
    assert codes(RS.check(delegates=1, attendance=25, first={"Steyer": 12, "U": 13}, final={"Steyer": 10, "U": 13})) == []
    # A majority that defected wholesale and handed the delegate to the other group is the worst case, not a
    # §4.5 dissolution (the other group was never viable without the defectors).
    for final, reported in (({"A": 0, "U": 25}, {"U": 1}), ({"A": 12, "U": 13}, {"U": 1})):
        first = {"A": 20, "U": 5} if final["A"] == 0 else {"A": 13, "U": 12}
        found = RS.check(delegates=1, attendance=25, first=first, final=final, reported=reported)
        assert ("LOCKED_GROUP_SHRANK", "soft") in codes(found), (first, final, found)
    # two majorities of a tie (50/50): §4.5 may cut one, which is no finding
    tie = RS.check(delegates=1, attendance=20, first={"A": 10, "B": 10}, final={"A": 0, "B": 20}, reported={"B": 1})
    assert "LOCKED_GROUP_SHRANK" not in [f.code for f in tie]
    assert ("LOCKED_GROUP_SHRANK", "error") in codes(RS.check(delegates=2, attendance=25, first={"Steyer": 19, "U": 6},
                                                              final={"Steyer": 16, "U": 6}))
