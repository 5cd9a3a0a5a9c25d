"""The worked examples and threshold fixtures of caucus_math_vectors.json, and RULES.md §14."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from itertools import combinations
from typing import Any

import pytest

from ledger.caucus_math import (
    Counts,
    TieResolution,
    get_rule_set,
    viability_threshold,
)


# Examples that document a reading other than the default rule set's (see rulesets.py).
READING: dict[str, Any] = {}
"""Worked examples that need another reading than the default rule set's (none since idp-2020 reads
§4.5's cut inside equal groups as a lot, as E05 does)."""


def test_threshold_fixture(threshold_fixture: dict) -> None:
    fx = threshold_fixture
    assert viability_threshold(fx["attendance"], fx["delegates"]) == fx["threshold"]


def _expected(ex: dict) -> set[Counts[int]]:
    names = set(ex["first_alignment"]) | set(ex["final_alignment"])
    return {Counts({**dict.fromkeys(names, 0), **e}) for e in ex["expected_allocations"]}


def _round4(x) -> float:
    """The fixtures give raw values to 4 decimals."""
    return float((Decimal(x.numerator) / Decimal(x.denominator)).quantize(Decimal("0.0001"), rounding=ROUND_HALF_UP))


def test_worked_example(worked_example: dict) -> None:
    ex = worked_example
    rs = READING.get(ex["id"], get_rule_set())
    kw: dict[str, Any] = dict(
        delegates=ex["delegates"], attendance=ex["attendance"], first=ex["first_alignment"], final=ex["final_alignment"]
    )
    alloc = rs.allocate(**kw)
    expected = _expected(ex)

    assert alloc.threshold == ex["threshold"]
    assert {k: _round4(v) for k, v in alloc.raw.items()} == pytest.approx(ex["raw"])
    assert set(alloc.delegates) == set(ex["first_alignment"]) | set(ex["final_alignment"])

    if len(expected) == 1:
        assert alloc.settled, alloc.pending
        assert alloc.delegates in expected
        assert sum(alloc.delegates.values()) == ex["delegates"]
        return

    # A toss is needed: the result names it and settles nothing that is contested.
    assert len(alloc.pending) == 1
    tie = alloc.pending[0]
    if ex["tie"] is not None:
        assert tie.contenders == tuple(sorted(ex["tie"]["groups"]))
        assert tie.seats == ex["tie"]["seats"]
    assert tie.method == ("coin" if len(tie.contenders) == 2 else "lots")
    for name, got in alloc.delegates.items():
        assert all(got <= e[name] for e in expected), (name, got)

    outcomes = set()
    for winners in combinations(tie.contenders, tie.seats):
        res = TieResolution(contenders=tie.contenders, seats=tie.seats, winners=winners, method=tie.method)
        done = rs.allocate(**kw, ties=(res,))
        assert done.settled
        assert done.applied_ties == (res,)
        assert done.delegates in expected, (winners, done.delegates)
        outcomes.add(done.delegates)
    assert outcomes == expected
    assert rs.outcomes(**kw) == frozenset(expected)


def test_e05_under_the_app_reading_all_equal_smallest_groups_realign(vectors: dict) -> None:
    ex = next(e for e in vectors["allocations"] if e["id"] == "E05")
    alloc = get_rule_set("idp-2020[realign_ties=all]").allocate(
        delegates=ex["delegates"], attendance=ex["attendance"], first=ex["first_alignment"], final=ex["final_alignment"]
    )
    assert alloc.must_realign == {"B", "C"}
    assert alloc.settled
    assert alloc.delegates == {"A": 2, "B": 0, "C": 0}


def test_e05_lot_names_the_groups_that_stay_viable() -> None:
    rs = get_rule_set()  # the default: "one must realign, chosen by lot" (RULES §4.5, §17.2 "our reading")
    kw: dict[str, Any] = dict(delegates=2, attendance=30, first={"A": 12, "B": 9, "C": 9}, final={"A": 12, "B": 9, "C": 9})
    alloc = rs.allocate(**kw)
    assert alloc.pending[0].stage == "realign"
    assert alloc.delegates == {"A": 1, "B": 0, "C": 0}
    done = rs.allocate(**kw, ties=(TieResolution(("B", "C"), 1, ("C",), "coin"),))
    assert done.must_realign == {"B"}
    assert done.delegates == {"A": 1, "B": 0, "C": 1}


def test_e09_under_2016_practice_the_eighth_delegate_is_a_coin_toss(vectors: dict) -> None:
    ex = next(e for e in vectors["allocations"] if e["id"] == "E09")
    rs = get_rule_set("idp-2016")
    kw: dict[str, Any] = dict(delegates=8, attendance=484, first=ex["first_alignment"], final=ex["final_alignment"])
    alloc = rs.allocate(**kw)
    (tie,) = alloc.pending
    assert (tie.contenders, tie.seats, tie.stage) == (("Clinton", "Sanders"), 1, "leftover")
    assert alloc.delegates == {"Clinton": 4, "Sanders": 3}
    assert rs.outcomes(**kw) == {Counts({"Clinton": 5, "Sanders": 3}), Counts({"Clinton": 4, "Sanders": 4})}
    # The historical toss: Clinton won it.
    won = rs.allocate(**kw, ties=(TieResolution(("Clinton", "Sanders"), 1, ("Clinton",), "coin"),))
    assert won.delegates == {"Clinton": 5, "Sanders": 3}


# ----------------------------------------------------------------- RULES.md §14 (Warren calculator)


@pytest.mark.parametrize(
    ("attendance", "delegates", "threshold"),
    [(45, 3, 8), (25, 5, 4), (40, 2, 10), (60, 18, 9)],
)
def test_wapp_thresholds(attendance: int, delegates: int, threshold: int) -> None:
    assert viability_threshold(attendance, delegates) == threshold


def test_wapp_threshold_for_one_delegate_is_the_app_majority_not_zero() -> None:
    # WAPP shows 0 for (T=5, D=1): it uses plurality.  The APP's majority is ceil(5/2) = 3.
    assert viability_threshold(5, 1) == 3


def test_wapp_threshold_differs_from_15_percent_from_667_on() -> None:
    import math

    wapp = [t for t in range(1, 3001) if math.ceil(t / 6.67) != viability_threshold(t, 4)]
    assert wapp[:3] == [667, 687, 707]
    assert len(wapp) == 268


def _alloc(final: dict[str, int], attendance: int, delegates: int, ties=()):
    return get_rule_set().allocate(delegates=delegates, attendance=attendance, first=final, final=final, ties=ties)


@pytest.mark.parametrize(
    ("final", "attendance", "delegates", "expected"),
    [
        pytest.param({"W": 20, "S": 10, "B": 7}, 37, 7, {"W": 4, "S": 2, "B": 1}, id="natural"),
        pytest.param({"W": 10, "S": 8, "B": 8}, 26, 1, {"W": 1, "S": 0, "B": 0}, id="simple-majority"),
        pytest.param({"W": 75, "B": 15}, 90, 3, {"W": 2, "B": 1}, id="only-delegate"),
        pytest.param({"W": 100, "S": 50, "B": 50}, 200, 7, {"W": 3, "S": 2, "B": 2}, id="remove-by-largest-rounding"),
    ],
)
def test_wapp_settled_cases(final: dict, attendance: int, delegates: int, expected: dict) -> None:
    alloc = _alloc(final, attendance, delegates)
    assert alloc.settled
    assert alloc.delegates == expected


@pytest.mark.parametrize(
    ("final", "attendance", "delegates", "contenders", "seats", "settled"),
    [
        pytest.param({"W": 100, "S": 50, "B": 50}, 200, 6, ("B", "S"), 1, {"W": 3, "S": 1, "B": 1}, id="2-way"),
        pytest.param({"W": 15, "S": 15, "B": 15, "H": 15}, 60, 18, ("B", "H", "S", "W"), 2,
                     {"W": 4, "S": 4, "B": 4, "H": 4}, id="4-way"),
        pytest.param({"W": 10, "S": 10}, 20, 1, ("S", "W"), 1, {"W": 0, "S": 0}, id="majority-2-way"),
        pytest.param({"W": 10, "S": 10, "B": 10}, 30, 1, ("B", "S", "W"), 1, {"W": 0, "S": 0, "B": 0},
                     id="plurality-3-way"),
    ],
)
def test_wapp_unresolved_ties(final, attendance, delegates, contenders, seats, settled) -> None:
    alloc = _alloc(final, attendance, delegates)
    (tie,) = alloc.pending
    assert tie.contenders == contenders
    assert tie.seats == seats
    assert alloc.delegates == settled
    assert sum(alloc.delegates.values()) + seats == delegates


def test_wapp_e2e_ties_webster_fort_dodge_11() -> None:
    final = {"Warren": 15, "Sanders": 15, "Biden": 15, "Buttigieg": 15}
    alloc = _alloc(final, 60, 18)
    assert alloc.threshold == 9
    (tie,) = alloc.pending
    # WAPP shows 20 of 18 while unresolved (the contested seat counted for all four); we show 16 + 2 pending.
    assert sum(alloc.delegates.values()) + len(tie.contenders) == 20
    res = TieResolution(tie.contenders, 2, ("Warren", "Buttigieg"), "lots")
    assert _alloc(final, 60, 18, (res,)).delegates == {"Warren": 5, "Sanders": 4, "Biden": 4, "Buttigieg": 5}


def test_wapp_e2e_ties_2_adair_1nw() -> None:
    final = {"Warren": 35, "Biden": 35, "Sanders": 21, "Buttigieg": 21, "Bloomberg": 21}
    alloc = _alloc(final, 133, 8)
    assert alloc.threshold == 20
    (tie,) = alloc.pending
    assert sum(alloc.delegates.values()) + len(tie.contenders) == 10  # WAPP: "10/8"
    res = TieResolution(tie.contenders, 1, ("Sanders",), "lots")
    assert _alloc(final, 133, 8, (res,)).delegates == {
        "Warren": 2, "Biden": 2, "Sanders": 2, "Buttigieg": 1, "Bloomberg": 1
    }
