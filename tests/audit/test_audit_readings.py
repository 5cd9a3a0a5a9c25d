"""The audit reads RULES.md as written, on the real 2020 history and on minimal cases.

Each test is one reading the audit used to get wrong: satellite SDEs of computed delegates shared over
the delegates assigned instead of D (§8); the final total taken as T when it exceeds the first total
(§1, §12); the §4.5 cut between equal groups graded ``ambiguous`` although §4.5 decides it by lot; a
locked group that shrank excused although it kept members and won delegates (§4.2, §4.5); satellites
that reported more delegates than the table gives (§8, §17.4) and a unit with too many viable groups
missed; variant rule sets that could not be named.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import pytest

from ledger.caucus_math import CaucusMathError, get_rule_set

Run = Callable[..., Any]
RS = get_rule_set("idp-2020")
FAR_FUTURE = "2999-01-01T00:00:00Z"  # --as-of replays the log (these tests build no projection store)


def _doc(result: Any, *codes: int) -> dict[str, Any]:
    assert result.exit_code in codes, result.output[-2000:]
    return dict(json.loads(result.stdout))


def _findings(iowa_caucus: Run) -> dict[str, list[dict[str, Any]]]:
    doc = _doc(iowa_caucus("audit", "--log", "--json"), 1)
    by_unit: dict[str, list[dict[str, Any]]] = {}
    for f in doc["findings"]:
        by_unit.setdefault(f["unit_id"], []).append(f)
    return by_unit


def _codes(found: list[dict[str, Any]], code: str) -> list[str]:
    return [f["severity"] for f in found if f["code"] == code]


def test_satellite_sde_of_computed_delegates_is_shared_over_d(iowa_caucus: Run) -> None:
    """Grinnell satellite 1148 elects 7; its computed result leaves one seat to a toss, and Biden's one
    computed delegate was worth W/6 (0.1571) instead of W/7 (0.1346, RULES §8)."""
    doc = _doc(iowa_caucus("diff", "log/reported", "log/computed", "--json"), 1)
    unit = next(u for u in doc["units"] if u["unit_id"] == "1148")
    changed = {c["candidate"]: c for c in unit["candidates"]}
    assert "Biden" not in changed, changed["Biden"]  # 1 CD on both sides: the same SDE
    klobuchar = changed["Klobuchar"]
    assert (klobuchar["cds"]["a"], klobuchar["cds"]["b"]) == (3, 2)
    per_cd_reported = Fraction(klobuchar["sde"]["a_exact"]) / 3
    assert Fraction(klobuchar["sde"]["b_exact"]) == 2 * per_cd_reported
    assert klobuchar["sde"]["b"] == "0.2693" and str(round(float(per_cd_reported), 4)) == "0.1346"


def test_certified_replay_keeps_the_published_state_sdes(iowa_caucus: Run) -> None:
    """Reported delegates keep their own divisor (three satellites reported one more than the table):
    the certified state totals stay as published."""
    state = _doc(iowa_caucus("tally", "--as-of", FAR_FUTURE, "--json"), 0)["state"]
    assert (state["sde_display_sum"]["Buttigieg"], state["sde_display_sum"]["Sanders"]) == ("562.9538", "562.0214")


def test_the_auditors_t_is_the_first_total_even_when_the_final_total_is_larger(iowa_caucus: Run) -> None:
    found = _findings(iowa_caucus)
    for unit, final_total in (("1593481", 297), ("947608", 198), ("946591", 30)):
        allocation = [f for f in found[unit] if f["code"] == "ALLOCATION"]
        assert [f["severity"] for f in allocation] == ["error"], (unit, allocation)
        assert f"final-alignment total ({final_total}) used as the denominator" in allocation[0]["likely_cause"]
        assert _codes(found[unit], "FINAL_GT_FIRST") == ["error"]
    # `warn` is not an ALLOCATION severity (RULES §12).
    assert not [f for fs in found.values() for f in fs if f["code"] == "ALLOCATION" and f["severity"] == "warn"]


def test_the_cut_between_equal_groups_is_a_lot_not_an_ambiguity(iowa_caucus: Run) -> None:
    found = _findings(iowa_caucus)
    for unit in ("1593430", "946725", "946805"):  # Readlyn, Arcadia, Douglas-Peterson
        assert _codes(found[unit], "ALLOCATION") == [], found[unit]
        assert _codes(found[unit], "TOO_MANY_VIABLE") == ["warn"]  # the published final does not show the cut
    ambiguous = [f for fs in found.values() for f in fs if f["code"] == "ALLOCATION" and f["severity"] == "ambiguous"]
    assert ambiguous and all("leftover" in f["likely_cause"] for f in ambiguous)


def test_satellites_that_reported_more_than_the_table_and_too_many_viable_groups(iowa_caucus: Run) -> None:
    found = _findings(iowa_caucus)
    for unit, table, reported in (("1117", 8, 9), ("1184", 7, 8)):
        satellite = [f for f in found[unit] if f["code"] == "SATELLITE_DELEGATES"]
        assert [(f["severity"], f["expected"], f["reported"]) for f in satellite] == [("warn", table, reported)], found[unit]
    # 948195: 4 groups viable at the threshold of T = 23 (the first total) for 3 delegates.
    assert _codes(found["948195"], "TOO_MANY_VIABLE") == ["warn"]


def test_a_locked_group_that_kept_members_and_won_a_delegate_was_not_dissolved() -> None:
    """D=2, first A 8 B 8 C 8: §4.5 may dissolve one of the three. C shrank to 5 but won a delegate,
    so it was not dissolved: the lock was broken."""
    first = {"A": 8, "B": 8, "C": 8}
    found = RS.check(delegates=2, attendance=None, first=first, final={"A": 8, "B": 8, "C": 5}, reported={"A": 1, "C": 1})
    shrank = [f for f in found if f.code == "LOCKED_GROUP_SHRANK"]
    assert [(f.candidate, str(f.severity)) for f in shrank] == [("C", "error")]
    assert "not dissolved" in str(shrank[0].likely_cause)


@pytest.mark.parametrize(
    ("final", "reported"),
    [({"A": 8, "B": 8, "C": 0}, {"A": 1, "B": 1}), ({"A": 8, "B": 8, "C": 3}, {"A": 1, "B": 1})],
    ids=["emptied", "no-delegate"],
)
def test_a_group_really_dissolved_under_4_5_is_excused(final: dict[str, int], reported: dict[str, int]) -> None:
    found = RS.check(delegates=2, attendance=None, first={"A": 8, "B": 8, "C": 8}, final=final, reported=reported)
    assert [f for f in found if f.code == "LOCKED_GROUP_SHRANK"] == []


@pytest.mark.parametrize(
    ("delegates", "first", "final"),
    [(2, {"A": 12, "B": 10, "C": 10}, {"A": 0, "B": 16, "C": 16}),
     (3, {"A": 12, "B": 10, "C": 10, "D": 10}, {"A": 0, "B": 14, "C": 14, "D": 14})],
    ids=["three-for-two", "four-for-three"],
)
def test_the_largest_locked_group_cannot_be_the_one_4_5_dissolved(delegates: int, first: dict[str, int],
                                                                   final: dict[str, int]) -> None:
    """Everyone sat in a locked group, so nobody could realign before the cut: it fell on the smallest
    (B, C, D by lot), never on A. B and C reached 16 only by taking A's members, after the cut; sizing
    them at their final count made A look the smallest and excused it."""
    found = RS.check(delegates=delegates, attendance=sum(first.values()), first=first, final=final)
    shrank = [f for f in found if f.code == "LOCKED_GROUP_SHRANK"]
    assert [(f.candidate, str(f.severity)) for f in shrank] == [("A", "error")]


@pytest.mark.parametrize(
    ("first", "final"),
    [({"A": 12, "B": 10, "C": 10, "D": 8}, {"A": 0, "B": 20, "C": 20, "D": 0}),  # D's 8 lift B and C to 14: A is cut
     ({"A": 12, "B": 10, "C": 10, "D": 4}, {"A": 0, "B": 18, "C": 18, "D": 0})],  # 2 + 2 lift both to A's 12: the lot
    ids=["realigners-lift-both", "realigners-just-enough"],
)
def test_realigners_before_the_cut_can_make_the_largest_group_the_smallest(first: dict[str, int], final: dict[str, int]) -> None:
    found = RS.check(delegates=2, attendance=sum(first.values()), first=first, final=final)
    assert [f for f in found if f.code == "LOCKED_GROUP_SHRANK"] == []


def test_a_group_cut_second_may_be_the_largest_once_the_first_cut_group_realigned() -> None:
    """D=2, four locked groups: B (10) is cut first and its members join C and D (15 each), which leaves
    A (12) the smallest of three for two: A is cut too, and C and D take its members."""
    first = {"A": 12, "B": 10, "C": 10, "D": 10}
    found = RS.check(delegates=2, attendance=42, first=first, final={"A": 0, "B": 0, "C": 21, "D": 21})
    assert [f for f in found if f.code == "LOCKED_GROUP_SHRANK"] == []


def test_people_who_did_not_align_at_first_realign_before_the_cut_too() -> None:
    """T = 36 against 32 aligned: the 4 who stood aside join B and C (12 each), three tie at 12, the lot
    falls on A (as FINAL_GT_FIRST lets them align late)."""
    found = RS.check(delegates=2, attendance=36, first={"A": 12, "B": 10, "C": 10}, final={"A": 0, "B": 18, "C": 18})
    assert [f for f in found if f.code == "LOCKED_GROUP_SHRANK"] == []


def test_a_group_formed_from_realigners_uses_them_up_before_the_cut() -> None:
    """C, viable only at the final count, had to stand as large as A at the cut (12 of the 12 realigners),
    and B needed 2 more: 14 are not there, so A was not the group the cut fell on."""
    first = {"A": 12, "B": 10, "C": 6, "E": 6}
    found = RS.check(delegates=2, attendance=34, first=first, final={"A": 0, "B": 16, "C": 18, "E": 0})
    assert [f.candidate for f in found if f.code == "LOCKED_GROUP_SHRANK"] == ["A"]
    legal = RS.check(delegates=2, attendance=40, first={"A": 12, "B": 10, "C": 9, "E": 9}, final={"A": 0, "B": 18, "C": 22, "E": 0})
    assert [f for f in legal if f.code == "LOCKED_GROUP_SHRANK"] == []


def test_too_few_realigners_to_lift_every_other_group_leave_the_shrink_an_error() -> None:
    """D's 2 can lift B or C to A's 12, not both: the smaller of them stays the one the cut takes."""
    first = {"A": 12, "B": 10, "C": 10, "D": 2}
    found = RS.check(delegates=2, attendance=34, first=first, final={"A": 0, "B": 17, "C": 17, "D": 0})
    assert [f.candidate for f in found if f.code == "LOCKED_GROUP_SHRANK"] == ["A"]


def test_variant_rule_sets_can_be_named_wherever_a_rule_set_can(iowa_caucus: Run) -> None:
    name = "idp-2020[realign_ties=all]"
    shown = _doc(iowa_caucus("tally", "--unit", "946725", "--rule-set", name, "--as-of", FAR_FUTURE, "--json"), 0)
    assert shown["rule_set"] == name
    doc = _doc(iowa_caucus("diff", "log", f"rules:{name}", "--json"), 0, 1)
    assert doc["b"]["rule_set"] == name
    with pytest.raises(CaucusMathError, match="alphabetical"):
        get_rule_set("idp-2020[realign_ties=all,leftover=lots]")
    refused = iowa_caucus("tally", "--rule-set", "idp-2020[realign_ties=coin]", "--as-of", FAR_FUTURE)
    assert refused.exit_code == 2 and "realign_ties must be one of" in refused.output
