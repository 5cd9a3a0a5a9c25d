"""Properties of the allocation that must hold for every possible caucus (hypothesis).

Besides the invariants of RULES.md §5, the reachable outcomes are compared with
an independent, deliberately naive implementation of the worksheet procedure
(§5.2-5.4: round .5 up, then adjust one delegate at a time, ties branching into
every outcome), written with Fractions and no shared code.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ledger.caucus_math import Allocation, Counts, TieResolution, get_rule_set
from itertools import combinations

NAMES = ("Biden", "Buttigieg", "Klobuchar", "Sanders", "Steyer", "Uncommitted", "Warren", "Yang")

RULE_SETS = (
    get_rule_set("idp-2020"),
    get_rule_set("idp-2016"),
    get_rule_set("idp-2020").variant(realign_ties="all"),
    get_rule_set("idp-2020").variant(worksheet_decimals=4),
)

SETTINGS = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def caucuses(draw: st.DrawFn, min_delegates: int = 2, max_delegates: int = 20) -> dict:
    """A plausible unit: first alignment within T; a final alignment nobody new joined."""
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=len(NAMES), unique=True))
    first = {n: draw(st.integers(0, 60)) for n in names}
    attendance = sum(first.values()) + draw(st.integers(0, 5))
    final: dict[str, int] = {}
    room = attendance
    for n in names:
        v = min(room, draw(st.integers(0, 70)))
        final[n] = v
        room -= v
    delegates = draw(st.integers(min_delegates, max_delegates))
    return {"delegates": delegates, "attendance": attendance, "first": first, "final": final}


def _all_outcomes(rs, unit: dict) -> list[Allocation]:
    """Every fully resolved allocation, by resolving pending ties in every possible way."""
    out = []
    stack: list[tuple[TieResolution, ...]] = [()]
    while stack:
        ties = stack.pop()
        alloc = rs.allocate(**unit, ties=ties)
        if alloc.settled:
            out.append(alloc)
            continue
        tie = alloc.pending[0]
        for winners in combinations(tie.contenders, tie.seats):
            stack.append((*ties, TieResolution(tie.contenders, tie.seats, winners, tie.method)))
    return out


def _invariants(alloc: Allocation, monotonic: bool = True) -> None:
    """RULES §5 invariants.

    ``monotonic``: a larger final group never has fewer delegates than a smaller
    one.  It holds for every unresolved result and after every toss except a
    2016 leftover lot, which may go to the smaller group (Ames 2-4, 2016).
    """
    d = alloc.unit_delegates
    got = alloc.delegates
    assert all(v >= 0 for v in got.values())
    assert set(got) == set(alloc.final)
    for name, v in got.items():
        if name not in alloc.eligible:
            assert v == 0, f"{name} is not eligible but got {v}"
    if d >= 2:
        assert alloc.eligible <= alloc.viable_final - alloc.must_realign
        for name in alloc.viable_final - alloc.must_realign - alloc.eligible:
            assert any(name in t.contenders for t in alloc.pending)
    if alloc.settled:
        if alloc.eligible:
            assert sum(got.values()) == d, "delegates must add up to D"
            assert alloc.unallocated == 0
            if d >= 2:
                assert all(got[n] >= 1 for n in alloc.eligible), "a viable group ended with 0"
        else:
            assert sum(got.values()) == 0
            assert alloc.unallocated == d
        for a in got if monotonic else ():
            for b in got:
                if alloc.final[a] > alloc.final[b]:
                    assert got[a] >= got[b], f"{a} has more members but fewer delegates than {b}"
    else:
        stages = {t.stage for t in alloc.pending}
        if "realign" not in stages:
            assert sum(got.values()) + sum(t.seats for t in alloc.pending) + alloc.unallocated == d


@SETTINGS
@given(unit=caucuses())
def test_invariants_hold_before_and_after_every_toss(unit: dict) -> None:
    for rs in RULE_SETS:
        _invariants(rs.allocate(**unit))
        for done in _all_outcomes(rs, unit):
            _invariants(done, monotonic=rs.leftover != "lots")


@SETTINGS
@given(unit=caucuses(min_delegates=1, max_delegates=1))
def test_one_delegate_units(unit: dict) -> None:
    for rs in RULE_SETS:
        alloc = rs.allocate(**unit)
        _invariants(alloc)
        top = max(unit["final"].values())
        leaders = {n for n, v in unit["final"].items() if v == top and v > 0}
        if alloc.settled and sum(alloc.delegates.values()) == 1:
            (winner,) = [n for n, v in alloc.delegates.items() if v]
            assert winner in leaders
        if len(leaders) > 1:
            assert not alloc.settled
            assert set(alloc.pending[0].contenders) == leaders


@SETTINGS
@given(
    unit=caucuses(min_delegates=0, max_delegates=20),
    seed=st.integers(0, 2**32 - 1),
    noise=st.lists(st.integers(-1, 1), min_size=len(NAMES), max_size=len(NAMES)),
)
def test_candidate_order_never_changes_the_result(unit: dict, seed: int, noise: list[int]) -> None:
    rng = random.Random(seed)
    names = list(unit["final"])
    rng.shuffle(names)
    shuffled = {
        **unit,
        "first": {n: unit["first"][n] for n in names},
        "final": {n: unit["final"][n] for n in reversed(names)},
    }
    for rs in RULE_SETS:
        a, b = rs.allocate(**unit), rs.allocate(**shuffled)
        assert a == b
        assert repr(a) == repr(b)
        # The checks too, on a reported allocation that may be wrong.
        reported = {n: max(0, v + noise[i]) for i, (n, v) in enumerate(a.delegates.items())}
        backwards = dict(reversed(list(reported.items())))
        assert rs.check(**unit, reported=reported) == rs.check(**shuffled, reported=backwards)


def test_the_2016_lot_is_only_for_delegates_past_one_more_per_group() -> None:
    """RULES §5.5: left = D - sum(max(1, floor(raw))) goes one each in remainder order, a tie at the cut to
    lots, as in 2020; the 2016 reading differs only when left exceeds the viable groups."""
    rs = get_rule_set("idp-2016")
    # D=12, T=30: raw A 2.0, C 4.0, D 4.4 (B stays put, not viable); left 2 <= 3 groups: D, then A or C.
    unit = {"delegates": 12, "attendance": 30, "first": {"A": 5, "B": 4, "C": 10, "D": 11},
            "final": {"A": 5, "B": 4, "C": 10, "D": 11}}
    pending = rs.allocate(**unit).pending
    assert [(t.contenders, t.seats) for t in pending] == [(("A", "C"), 1)]
    assert {tuple(a.delegates[n] for n in "ACD") for a in _all_outcomes(rs, unit)} == {(3, 4, 5), (2, 5, 5)}
    # D=10, T=100: raw A 2.0, B 1.6; left 7 > 2 groups: one each (A3 B2), two more each, the last by lot.
    unit = {"delegates": 10, "attendance": 100, "first": {"A": 20, "B": 16}, "final": {"A": 20, "B": 16}}
    assert {tuple(a.delegates[n] for n in "AB") for a in _all_outcomes(rs, unit)} == {(6, 4), (5, 5)}
    assert {tuple(a.delegates[n] for n in "AB") for a in _all_outcomes(get_rule_set("idp-2020"), unit)} == {(5, 5)}


@SETTINGS
@given(unit=caucuses())
@example(unit={"delegates": 2, "attendance": 13, "first": {"Biden": 0, "Buttigieg": 0, "Klobuchar": 8},
               "final": {"Biden": 4, "Buttigieg": 4, "Klobuchar": 5}})  # §4.5 cut inside two equal groups
def test_reachable_outcomes_match_the_worksheet_procedure(unit: dict) -> None:
    rs = get_rule_set("idp-2016")  # threshold recomputed from the final-alignment headcount
    mine = {a.delegates for a in _all_outcomes(rs, unit)}
    assert mine == _reference(unit, leftover="lots", threshold_base=sum(unit["final"].values()))
    rs = rs.variant(recompute_threshold_at_final=False)
    assert {a.delegates for a in _all_outcomes(rs, unit)} == _reference(unit, leftover="lots")
    # Without leftovers (everybody in a viable group) the APP's round-robin never starts.
    # idp-2020 reads a §4.5 cut inside equal groups as a lot; its variant as the APP did, all of them realign.
    for app, realign in ((get_rule_set("idp-2020"), "lots"), (get_rule_set("idp-2020").variant(realign_ties="all"), "all")):
        ref_app = _reference(unit, leftover=None, realign=realign)
        if ref_app is not None:
            assert {a.delegates for a in _all_outcomes(app, unit)} == ref_app, realign


# ---------------------------------------------------------------------- the naive reference


def _round_half_up(x: Fraction) -> int:
    return math.floor(x + Fraction(1, 2))


def _reference(unit: dict, leftover: str | None, threshold_base: int | None = None,
               realign: str = "lots") -> set[Counts[int]] | None:
    """§5.2-5.4 by hand; ``leftover=None`` returns None when leftovers would need a rule. ``realign``: a
    §4.5 cut inside equal groups decided by lot (every choice), or ``all`` of them realign (the APP)."""
    d, t, final = unit["delegates"], unit["attendance"], unit["final"]
    base = t if threshold_base is None else threshold_base
    share = Fraction(15, 100) if d >= 4 else Fraction(1, {2: 4, 3: 6}[d])
    threshold = math.ceil(share * base)
    viable = sorted(n for n, v in final.items() if v > 0 and v >= threshold)
    # §4.5 with lots: every choice of which equal smallest groups realign.
    eligible_sets = []
    if len(viable) > d:
        by_size = sorted(viable, key=lambda n: final[n])
        excess = len(viable) - d
        cut = final[by_size[excess - 1]]
        smaller = [n for n in viable if final[n] < cut]
        block = [n for n in viable if final[n] == cut]
        if realign == "all" and len(block) > excess - len(smaller):  # the cut falls inside the block
            eligible_sets.append([n for n in viable if final[n] > cut])
        else:
            for leaving in combinations(block, excess - len(smaller)):
                eligible_sets.append([n for n in viable if n not in smaller and n not in leaving])
    else:
        eligible_sets.append(viable)

    results: set[Counts[int]] = set()
    for eligible in eligible_sets:
        if not eligible:
            results.add(Counts(dict.fromkeys(final, 0)))
            continue
        raw = {n: Fraction(final[n] * d, t) for n in eligible}
        start = {n: max(1, _round_half_up(raw[n])) for n in eligible}
        for done in _adjust(start, raw, d, leftover):
            if done is None:
                return None
            results.add(Counts({n: done.get(n, 0) for n in final}))
    return results


def _adjust(cur: dict, raw: dict, d: int, leftover: str | None):
    """Adjust one step at a time; a tie at an extreme branches into every choice of groups."""
    total = sum(cur.values())
    if total == d:
        yield dict(cur)
        return
    if total > d:
        # Too many: take from the smallest raw - delegates among groups that keep at least one.
        able = [n for n in cur if cur[n] >= 2]
        low = min(raw[n] - cur[n] for n in able)
        block = [n for n in able if raw[n] - cur[n] == low]
        k = min(total - d, len(block))
        for losers in combinations(block, k):
            yield from _adjust({n: cur[n] - (n in losers) for n in cur}, raw, d, leftover)
        return
    # Too few: give to the largest raw - delegates among groups that were not rounded up and have had no
    # extra yet: those that rounded down first, then (§5.5, every group in remainder order) those whose raw
    # was whole or below one (§5.3). Only once each group had one more are delegates "left over".
    down = [n for n in cur if cur[n] == max(1, math.floor(raw[n]))]
    if down:
        high = max(raw[n] - cur[n] for n in down)
        block = [n for n in down if raw[n] - cur[n] == high]
        k = min(d - total, len(block))
        for winners in combinations(block, k):
            yield from _adjust({n: cur[n] + (n in winners) for n in cur}, raw, d, leftover)
        return
    if leftover is None:
        yield None
        return
    # 2016: every group had one more; the remaining delegates go by lot, one per group per round.
    rounds, seats = divmod(d - total, len(cur))
    for winners in combinations(sorted(cur), seats):
        yield {n: cur[n] + rounds + (n in winners) for n in cur}
