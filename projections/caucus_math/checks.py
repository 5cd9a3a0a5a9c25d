"""Auditor and producer checks of one reporting unit (RULES.md §12).

Why checks are data (``Finding``) and not exceptions: published results contain
real errors (the certified 2020 release awards delegates to non-viable groups,
reports more final than first-alignment votes, ...).  An auditor must see every
one of them, graded and explained, while the ledger keeps the result as it was
reported.  Only input that cannot be counts at all (negative, not integers)
raises :class:`CaucusMathError`.

=========================  =================================================  ==========================
code                       rule                                               severity
=========================  =================================================  ==========================
``OVERCOUNT``              first-alignment total <= T (when T is known)       error
``FINAL_GT_FIRST``         final total <= first total (§4.4)                   error
``SATELLITE_DELEGATES``    a satellite's D (and the delegates it reported)     warn
                           match the attendance table (§8, §17.4)
``LOCKED_GROUP_SHRANK``    a first-viable group does not shrink (§4.2)        error; warn on the threshold
``TOO_MANY_VIABLE``        #viable at final <= D (§4.5 shown)                  warn
``DELEGATE_TOTAL``         reported delegates add up to D (to 0 when D >= 2    error
                           and no group is viable at the final alignment)
``NONVIABLE_AWARDED``      no delegate to a group below the threshold         error
``ALLOCATION``             reported = some outcome of §4.5/§5/§6 (every tie   error; soft for D = 1;
                           outcome, either reading of the §4.5 cut)           ambiguous if only the 2016
                                                                              leftover lot fits
``MORE_VOTES_FEWER_DELS``  a larger group never gets fewer delegates           info
=========================  =================================================  ==========================

Published data do not include T, so unless the caller knows it the
first-alignment total stands in (RULES §1, §12), also when the final total
exceeds it: that is a FINAL_GT_FIRST error, and "the final total used as the
denominator" is a likely cause the ALLOCATION finding names, not a reading it
accepts. Where the unknown T makes a verdict uncertain (a locked group sitting
exactly on the threshold) the finding is a ``warn``.

Each finding names a ``likely_cause`` when a known mistake reproduces the
reported numbers: the final total used as denominator, delegates computed from
the first alignment, no adjustment step after rounding, no §4.5 realignment,
the viability threshold forgotten, one delegate moved between two groups, or
simply ``n`` delegates too many.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from itertools import combinations, permutations
from typing import TYPE_CHECKING

from ._counts import Counts
from .allocation import _check_unit_int, _distribute, validate_counts
from .errors import CaucusMathError
from .satellites import satellite_delegates
from .thresholds import _threshold
from .ties import TieResolution, _TieBook
from .viability import _cut

if TYPE_CHECKING:  # pragma: no cover
    from .rulesets import RuleSet

__all__ = [
    "Severity",
    "Finding",
    "CHECK_CODES",
    "check_unit",
]


class Severity(StrEnum):
    """How bad a finding is.

    ``soft``: a one-delegate unit whose winner differs from the plurality (§7 is
    open).  ``ambiguous``: the result fits only another reading of an [OPEN]
    rule (e.g. the 2016 lot for leftover delegates).
    """

    ERROR = "error"
    WARN = "warn"
    INFO = "info"
    SOFT = "soft"
    AMBIGUOUS = "ambiguous"


@dataclass(frozen=True)
class Finding:
    """One problem found in one unit, phrased for a person reading an audit report."""

    code: str
    severity: Severity
    message: str
    candidate: str | None = None
    expected: object = None
    reported: object = None
    likely_cause: str | None = None


CHECK_CODES: tuple[str, ...] = (
    "OVERCOUNT",
    "FINAL_GT_FIRST",
    "SATELLITE_DELEGATES",
    "LOCKED_GROUP_SHRANK",
    "TOO_MANY_VIABLE",
    "DELEGATE_TOTAL",
    "NONVIABLE_AWARDED",
    "ALLOCATION",
    "MORE_VOTES_FEWER_DELS",
)
"""All codes, in the order findings are listed."""

_ORDER = {code: i for i, code in enumerate(CHECK_CODES)}


def _fmt(counts: Mapping[str, int]) -> str:
    shown = [f"{k} {v}" for k, v in counts.items() if v]
    return ", ".join(shown) if shown else "none"


def check_unit(
    rules: "RuleSet",
    *,
    delegates: int,
    attendance: int | None,
    first: Mapping[str, int],
    final: Mapping[str, int],
    reported: Mapping[str, int] | None = None,
    satellite_attendance: int | None = None,
) -> list[Finding]:
    """Run every §12 check that the given data allow, under ``rules``.

    ``reported`` are the county delegates the unit reported per group (``None``
    when unknown: only the alignment checks run).  ``satellite_attendance`` is
    the headcount of a satellite, to check its D against the APP table.
    """
    d = _check_unit_int("delegates", delegates)
    first_c = validate_counts("first", first)
    final_c = validate_counts("final", final)
    rep_c = validate_counts("reported", reported) if reported is not None else None
    names = sorted(first_c.keys() | final_c.keys() | (rep_c.keys() if rep_c is not None else set()))
    first_s = {k: first_c.get(k, 0) for k in names}
    final_s = {k: final_c.get(k, 0) for k in names}
    sum_first = sum(first_s.values())
    sum_final = sum(final_s.values())
    t_inferred = attendance is None
    t = sum_first if attendance is None else _check_unit_int("attendance", attendance)
    findings: list[Finding] = []

    if sum_first > t:
        findings.append(
            Finding(
                "OVERCOUNT", Severity.ERROR,
                f"first-alignment total {sum_first} exceeds the {t} attendees counted at the start",
                expected=t, reported=sum_first, likely_cause="attendance or a group miscounted",
            )
        )
    if sum_final > sum_first:
        findings.append(
            Finding(
                "FINAL_GT_FIRST", Severity.ERROR,
                f"final-alignment total {sum_final} exceeds the first-alignment total {sum_first}; "
                "nobody new is admitted after the first alignment (RULES §4.4)",
                expected=sum_first, reported=sum_final,
                likely_cause="a first- or final-alignment count entered wrongly, or people admitted late",
            )
        )
    # RULES §1, §12: the auditor's T is the attendance when known, else the first-alignment total, even
    # when the final total exceeds it; "the final total used as denominator" is then a likely cause.

    if satellite_attendance is not None:
        table_d = satellite_delegates(satellite_attendance)
        if table_d != d:
            findings.append(
                Finding(
                    "SATELLITE_DELEGATES", Severity.WARN,
                    f"a satellite with {satellite_attendance} attendees elects {table_d} delegates "
                    f"by the attendance table, not {d} (RULES §8)",
                    expected=table_d, reported=d,
                    likely_cause="attendance recorded differently from the alignment counts",
                )
            )
        elif rep_c is not None and sum(rep_c.values()) not in (0, d):
            findings.append(
                Finding(
                    "SATELLITE_DELEGATES", Severity.WARN,
                    f"a satellite with {satellite_attendance} attendees elects {table_d} delegates by the attendance "
                    f"table, but reported {sum(rep_c.values())} (RULES §8, §17.4)",
                    expected=table_d, reported=sum(rep_c.values()),
                    likely_cause="the satellite's delegates taken from another attendance band",
                )
            )

    if d == 0:
        if rep_c is not None and sum(rep_c.values()) > 0:
            findings.append(
                Finding(
                    "DELEGATE_TOTAL", Severity.ERROR,
                    f"{sum(rep_c.values())} delegates reported by a unit that elects none",
                    expected=0, reported=sum(rep_c.values()),
                )
            )
        return _sorted(findings)

    thr = _threshold(t, d)
    final_thr = _threshold(sum_final, d) if rules.recompute_threshold_at_final else thr

    # One-delegate units elect as a whole (§7): nothing there is shared by viability, so no lock check.
    if rules.lock_viable_groups and d >= 2:
        findings.extend(_lock_findings(first_s, final_s, rep_c, d, thr, t_inferred))

    viable_final = [k for k in names if final_s[k] and final_s[k] >= final_thr]
    if d >= 2 and len(viable_final) > d:
        findings.append(
            Finding(
                "TOO_MANY_VIABLE", Severity.WARN,
                f"{len(viable_final)} groups are viable at the final alignment for {d} delegates; the "
                "published final alignment does not show the realignment of the smallest (RULES §4.5)",
                expected=d, reported=len(viable_final),
            )
        )

    if rep_c is None:
        return _sorted(findings)
    rep_s = Counts({k: rep_c.get(k, 0) for k in names})
    total = sum(rep_s.values())
    outcomes = _legal(rules, d, t, first_s, final_s)
    causes = _likely_causes(rules, d, t, first_s, final_s, rep_s, outcomes)

    # Every legal outcome hands out all D delegates, except when no group is viable at the final
    # alignment: then none can be awarded (§4.3) and D stays unallocated. A one-delegate unit elects its
    # delegate as a whole and must award exactly one (§7), whoever it goes to.
    due = {d} if d == 1 else ({sum(o.values()) for o in outcomes} or {d})
    if total not in due:
        owed = d if d in due else min(due)
        findings.append(
            Finding(
                "DELEGATE_TOTAL", Severity.ERROR,
                f"{total} delegates reported for a unit that elects {d}" if owed == d else
                f"{total} delegates reported for a unit that elects {d} but where no group is viable at the "
                f"final alignment, so {owed} can be awarded (RULES §4.3)",
                expected=owed, reported=total, likely_cause=causes,
            )
        )
    if d >= 2:
        for k in names:
            if rep_s[k] and not (final_s[k] and final_s[k] >= final_thr):
                was = " (it was viable at the first alignment)" if first_s[k] >= thr and first_s[k] else ""
                findings.append(
                    Finding(
                        "NONVIABLE_AWARDED", Severity.ERROR,
                        f"{k} has {final_s[k]} at the final alignment, below the threshold of {final_thr}, "
                        f"but was reported {rep_s[k]} delegate(s){was}",
                        candidate=k, expected=0, reported=rep_s[k],
                        likely_cause="viability taken from the first alignment" if was else causes,
                    )
                )

    if rep_s not in outcomes:
        findings.append(_allocation_finding(rules, d, t, first_s, final_s, rep_s, outcomes, causes))

    for a, b in permutations(names, 2):
        if final_s[a] > final_s[b] and rep_s[a] < rep_s[b]:
            findings.append(
                Finding(
                    "MORE_VOTES_FEWER_DELS", Severity.INFO,
                    f"{a} ({final_s[a]}) was reported fewer delegates ({rep_s[a]}) than {b} "
                    f"({final_s[b]}, {rep_s[b]})",
                    candidate=a, expected=f">= {rep_s[b]}", reported=rep_s[a], likely_cause=causes,
                )
            )
    return _sorted(findings)


def _sorted(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (_ORDER.get(f.code, len(_ORDER)), f.candidate or "", f.message))


def _lock_findings(
    first_s: dict[str, int],
    final_s: dict[str, int],
    reported: Mapping[str, int] | None,
    d: int,
    thr: int,
    t_inferred: bool,
) -> list[Finding]:
    """§4.2: a group viable at the first alignment may only grow, unless §4.5 dissolved it.

    A locked group that shrank is excused only if it really was dissolved (nobody left in it at the
    final count, or no delegates for it) and §4.5 required that: counting every locked group at its
    first size (it could not legally be smaller) and every other group at its final size, more groups
    would be viable than delegates and this group is among the smallest (any of a tied block at the
    cut, since the lot may have fallen on any of them). A group that kept members and won delegates
    was not dissolved, so the lock was broken.
    """
    locked = [k for k, v in first_s.items() if v and v >= thr]
    if not locked:
        return []
    pre = {k: (max(first_s[k], final_s[k]) if k in locked else final_s[k]) for k in first_s}
    candidates = sorted((v for v in pre.values() if v and v >= thr))
    excess = len(candidates) - d
    dissolvable_up_to = candidates[excess - 1] if excess > 0 else -1
    out: list[Finding] = []
    for k in locked:
        if final_s[k] >= first_s[k]:
            continue
        dissolved = final_s[k] == 0 or (reported.get(k, 0) == 0 if reported is not None else final_s[k] < thr)
        if dissolved and pre[k] <= dissolvable_up_to:
            continue
        borderline = first_s[k] == thr
        severity = Severity.WARN if borderline and t_inferred else Severity.ERROR
        cause = (
            "the group sat exactly on the threshold; if the worksheet's attendance exceeded the "
            "first-alignment total it was not viable and could realign"
            if borderline and t_inferred
            else "the group realigned although viable (2016-style realignment)" if final_s[k] == 0
            else "a group §4.5 could dissolve kept members and won delegates: it was not dissolved"
            if pre[k] <= dissolvable_up_to
            else None
        )
        out.append(
            Finding(
                "LOCKED_GROUP_SHRANK", severity,
                f"{k} was viable at the first alignment ({first_s[k]} >= {thr}) and so "
                f"locked, but has {final_s[k]} at the final alignment (RULES §4.2)",
                candidate=k, expected=first_s[k], reported=final_s[k], likely_cause=cause,
            )
        )
    return out


def _legal(rules: "RuleSet", d: int, t: int, first_s: dict[str, int], final_s: dict[str, int]) -> frozenset[Counts[int]]:
    """The allocations the auditor accepts (``RuleSet.legal_outcomes``); none when T is 0 but people
    aligned (nothing can be computed from that)."""
    if t == 0:
        return frozenset({Counts(dict.fromkeys(final_s, 0))}) if not any(final_s.values()) else frozenset()
    try:
        return rules.legal_outcomes(delegates=d, attendance=t, first=first_s, final=final_s)
    except CaucusMathError:
        return frozenset()


def _allocation_finding(
    rules: "RuleSet",
    d: int,
    t: int,
    first_s: dict[str, int],
    final_s: dict[str, int],
    rep_s: Counts[int],
    outcomes: frozenset[Counts[int]],
    causes: str | None,
) -> Finding:
    expected: object = next(iter(outcomes)) if len(outcomes) == 1 else tuple(sorted(outcomes, key=_key))
    shown = " or ".join(_fmt(o) for o in sorted(outcomes, key=_key)) or "none"
    for alt in rules.alternatives():
        if rep_s in _legal(alt, d, t, first_s, final_s):
            return Finding(
                "ALLOCATION", Severity.AMBIGUOUS,
                f"reported {_fmt(rep_s)} fits only another reading of an open rule ({alt.name}); "
                f"{rules.name} gives {shown}",
                expected=expected, reported=rep_s, likely_cause=rules.reading_of(alt),
            )
    severity = Severity.SOFT if d == 1 else Severity.ERROR
    what = (
        "the one delegate should go to the final-alignment plurality (RULES §7)"
        if d == 1
        else f"not reachable under {rules.name} with any coin-toss outcome"
    )
    return Finding(
        "ALLOCATION", severity,
        f"reported {_fmt(rep_s)}: {what}; expected {shown}",
        expected=expected, reported=rep_s, likely_cause=causes,
    )


def _key(c: Counts[int]) -> tuple[tuple[str, int], ...]:
    return tuple(c.items())


def _likely_causes(
    rules: "RuleSet",
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
        thr = _threshold(t, d)
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
    viable: list[str], final_s: dict[str, int], d: int, t: int, rules: "RuleSet | None"
) -> Counts[int]:
    """Every share rounded half up (at least 1), no adjustment; §4.5 applied if ``rules`` given."""
    keep = set(viable)
    if rules is not None and len(viable) > d:
        keep = set(_cut([(k, final_s[k]) for k in viable], d, "all", _TieBook(())).keep)
    out = {}
    for k, v in final_s.items():
        if k in keep:
            out[k] = max(1, (2 * v * d + t) // (2 * t))
        else:
            out[k] = 0
    return Counts(out)


def _without_threshold(rules: "RuleSet", d: int, t: int, final_s: dict[str, int]) -> frozenset[Counts[int]]:
    """Outcomes if every group with members had been viable (the threshold forgotten)."""
    groups = sorted((k, v) for k, v in final_s.items() if v)
    if not groups or len(groups) > d:
        return frozenset()
    names = [k for k, _ in groups]
    outcomes: set[Counts[int]] = set()
    alloc, tie, _ = _distribute(names, [v for _, v in groups], d, t, rules.leftover, rules.worksheet_decimals, _TieBook(()))
    if tie is None:
        got = dict(zip(names, alloc))
        outcomes.add(Counts({k: got.get(k, 0) for k in final_s}))
    else:
        for winners in combinations(tie.contenders, tie.seats):
            res = TieResolution(tie.contenders, tie.seats, winners, tie.method)
            alloc, _, _ = _distribute(
                names, [v for _, v in groups], d, t, rules.leftover, rules.worksheet_decimals, _TieBook((res,))
            )
            got = dict(zip(names, alloc))
            outcomes.add(Counts({k: got.get(k, 0) for k in final_s}))
    return frozenset(outcomes)


def _one_moved(rep_s: Counts[int], outcomes: frozenset[Counts[int]]) -> str | None:
    for o in sorted(outcomes, key=_key):
        diff = {k: rep_s[k] - o.get(k, 0) for k in rep_s}
        plus = [k for k, v in diff.items() if v == 1]
        minus = [k for k, v in diff.items() if v == -1]
        if len(plus) == 1 and len(minus) == 1 and sum(1 for v in diff.values() if v) == 2:
            return f"one delegate moved from {minus[0]} to {plus[0]}"
    return None
