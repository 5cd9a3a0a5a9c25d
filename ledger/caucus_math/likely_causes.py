"""Known mistakes that reproduce a unit's reported delegates exactly (RULES.md §12 "likely cause").

Why it matters: an auditor who reads "ALLOCATION error" must then redo the worksheet by hand; naming
the mistake that gives exactly the reported numbers (the final total as denominator, the first
alignment used, no adjustment after rounding, ...) tells them where to look on the worksheet.
"""

from __future__ import annotations

from itertools import combinations

from ._core import TieBook, distribute, realignment_cut, threshold_of
from ._counts import Counts
from .errors import CaucusMathError
from .reading import RuleReading
from .ties import TieResolution

__all__ = ["likely_causes", "outcome_key"]


def likely_causes(
    rules: RuleReading,
    d: int,
    t: int,
    first_s: dict[str, int],
    final_s: dict[str, int],
    rep_s: Counts[int],
    outcomes: frozenset[Counts[int]],
) -> str | None:
    """Name the known mistakes that reproduce the reported delegates exactly."""
    if rep_s in outcomes:
        return None
    if t == 0:
        return "no first-alignment count to compute from (T = 0)"
    causes: list[str] = []
    sum_final = sum(final_s.values())
    sum_first = sum(first_s.values())

    def fits(_no_threshold: bool = False, **kw: object) -> bool:
        if _no_threshold:
            return rep_s in _without_threshold(rules, d, t, final_s)
        try:
            return rep_s in rules.outcomes(**kw)  # type: ignore[arg-type]
        except CaucusMathError:
            return False

    if 0 < sum_final != t and fits(delegates=d, attendance=sum_final, first=final_s, final=final_s):
        causes.append(f"final-alignment total ({sum_final}) used as the denominator")
    if first_s != final_s and sum_first and fits(delegates=d, attendance=t, first=first_s, final=first_s):
        causes.append("computed from the first alignment")
    if d >= 2:
        thr = threshold_of(t, d)
        viable = [k for k, v in final_s.items() if v and v >= thr]
        if rep_s == _rounded_only(viable, final_s, d, t, rules):
            causes.append("each raw share rounded (.5 up) with no adjustment to the unit's total")
        elif len(viable) > d and rep_s == _rounded_only(viable, final_s, d, t, None):
            causes.append("no realignment of the smallest groups although more were viable than delegates (§4.5)")
        elif fits(delegates=d, attendance=t, first=first_s, final=final_s, _no_threshold=True):
            causes.append("no viability threshold applied: every group with members shared the delegates")
    total = sum(rep_s.values())
    if total == d:
        moved = _one_moved(rep_s, outcomes)
        if moved:
            causes.append(moved)
    elif total > d:
        causes.append(f"{total - d} delegate(s) too many")
    else:
        causes.append(f"{d - total} delegate(s) not awarded")
    return "; ".join(causes) if causes else None



def _rounded_only(
    viable: list[str], final_s: dict[str, int], d: int, t: int, rules: RuleReading | None
) -> Counts[int]:
    """Every share rounded half up (at least 1), no adjustment; §4.5 applied if ``rules`` given, as the
    reporting app applied it (every equal smallest group realigns): a likely cause is what a worksheet
    or the app would have produced, whatever the rule set's reading of the cut."""
    keep = set(viable)
    if rules is not None and len(viable) > d:
        keep = set(realignment_cut([(k, final_s[k]) for k in viable], d, "all", TieBook(())).keep)
    out = {}
    for k, v in final_s.items():
        if k in keep:
            out[k] = max(1, (2 * v * d + t) // (2 * t))
        else:
            out[k] = 0
    return Counts(out)



def _without_threshold(rules: RuleReading, d: int, t: int, final_s: dict[str, int]) -> frozenset[Counts[int]]:
    """Outcomes if every group with members had been viable (the threshold forgotten)."""
    groups = sorted((k, v) for k, v in final_s.items() if v)
    if not groups or len(groups) > d:
        return frozenset()
    names = [k for k, _ in groups]
    outcomes: set[Counts[int]] = set()
    alloc, tie, _ = distribute(names, [v for _, v in groups], d, t, rules.leftover, rules.worksheet_decimals, TieBook(()))
    if tie is None:
        got = dict(zip(names, alloc))
        outcomes.add(Counts({k: got.get(k, 0) for k in final_s}))
    else:
        for winners in combinations(tie.contenders, tie.seats):
            res = TieResolution(tie.contenders, tie.seats, winners, tie.method)
            alloc, _, _ = distribute(
                names, [v for _, v in groups], d, t, rules.leftover, rules.worksheet_decimals, TieBook((res,))
            )
            got = dict(zip(names, alloc))
            outcomes.add(Counts({k: got.get(k, 0) for k in final_s}))
    return frozenset(outcomes)



def _one_moved(rep_s: Counts[int], outcomes: frozenset[Counts[int]]) -> str | None:
    for o in sorted(outcomes, key=outcome_key):
        diff = {k: rep_s[k] - o.get(k, 0) for k in rep_s}
        plus = [k for k, v in diff.items() if v == 1]
        minus = [k for k, v in diff.items() if v == -1]
        if len(plus) == 1 and len(minus) == 1 and sum(1 for v in diff.values() if v) == 2:
            return f"one delegate moved from {minus[0]} to {plus[0]}"
    return None



def outcome_key(c: Counts[int]) -> tuple[tuple[str, int], ...]:
    return tuple(c.items())

