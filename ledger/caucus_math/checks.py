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
``FINAL_GT_FIRST``         final total <= T; <= first total when T is unknown  error
                           (§4.4, §12)
``SATELLITE_DELEGATES``    a satellite's D (and the delegates it reported)     warn
                           match the attendance table (§8, §17.4)
``LOCKED_GROUP_SHRANK``    a first-viable group does not shrink (§4.2)        error; warn on the threshold;
                                                                              soft for D = 1
``TOO_MANY_VIABLE``        #viable at final <= D (§4.5 shown)                  warn
``DELEGATE_TOTAL``         reported delegates add up to D (to 0 when D >= 2    error
                           and no group is viable at the final alignment);
                           a one-delegate unit attended awards its delegate
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
from functools import cached_property
from itertools import permutations

from ._counts import Counts
from ._core import check_int, threshold_of, validate_counts
from .likely_causes import likely_causes, outcome_key
from .reading import RuleReading, legal_outcomes_of
from .satellites import satellite_delegates


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


@dataclass
class _Unit:
    """One unit's input, checked and squared up once (every group in every alignment), with what
    several checks share computed on first use."""

    rules: RuleReading
    d: int
    t: int
    t_inferred: bool
    names: list[str]
    first: dict[str, int]
    final: dict[str, int]
    reported: dict[str, int] | None
    satellite_attendance: int | None

    @cached_property
    def sum_first(self) -> int:
        return sum(self.first.values())

    @cached_property
    def sum_final(self) -> int:
        return sum(self.final.values())

    @cached_property
    def thr(self) -> int:
        return threshold_of(self.t, self.d)

    @cached_property
    def final_thr(self) -> int:
        return threshold_of(self.sum_final, self.d) if self.rules.recompute_threshold_at_final else self.thr

    @cached_property
    def rep_s(self) -> Counts[int]:
        rep = self.reported or {}
        return Counts({k: rep.get(k, 0) for k in self.names})

    @cached_property
    def outcomes(self) -> frozenset[Counts[int]]:
        return legal_outcomes_of(self.rules, self.d, self.t, self.first, self.final)

    @cached_property
    def causes(self) -> str | None:
        return likely_causes(self.rules, self.d, self.t, self.first, self.final, self.rep_s, self.outcomes)


def check_unit(
    rules: RuleReading,
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
    d = check_int("delegates", delegates)
    first_c = validate_counts("first", first)
    final_c = validate_counts("final", final)
    rep_c = validate_counts("reported", reported) if reported is not None else None
    names = sorted(first_c.keys() | final_c.keys() | (rep_c.keys() if rep_c is not None else set()))
    first_s = {k: first_c.get(k, 0) for k in names}
    # RULES §1, §12: the auditor's T is the attendance when known, else the first-alignment total, even
    # when the final total exceeds it; "the final total used as denominator" is then a likely cause.
    t = sum(first_s.values()) if attendance is None else check_int("attendance", attendance)
    unit = _Unit(
        rules, d, t, attendance is None, names, first_s, {k: final_c.get(k, 0) for k in names}, rep_c,
        satellite_attendance,
    )
    return _sorted([finding for check in _CHECKS for finding in check(unit)])


def _overcount(u: _Unit) -> list[Finding]:
    """OVERCOUNT: no more people aligned at first than were counted at the door."""
    if u.sum_first <= u.t:
        return []
    return [
        Finding(
            "OVERCOUNT", Severity.ERROR,
            f"first-alignment total {u.sum_first} exceeds the {u.t} attendees counted at the start",
            expected=u.t, reported=u.sum_first, likely_cause="attendance or a group miscounted",
        )
    ]


def _final_gt_first(u: _Unit) -> list[Finding]:
    """FINAL_GT_FIRST: nobody new is admitted after the first alignment (§4.4), so Σ final ≤ T. When T
    is known it is the bound: people counted at the door who did not align at first may align at the
    final alignment. Σ first is only the stand-in for an unknown T (§12)."""
    if not u.t_inferred:
        if u.sum_final <= u.t:
            return []
        return [
            Finding(
                "FINAL_GT_FIRST", Severity.ERROR,
                f"final-alignment total {u.sum_final} exceeds the {u.t} attendees counted at the start; "
                "nobody new is admitted after the first alignment (RULES §4.4)",
                expected=u.t, reported=u.sum_final,
                likely_cause="a final-alignment count or the attendance entered wrongly, or people admitted late",
            )
        ]
    if u.sum_final <= u.sum_first:
        return []
    return [
        Finding(
            "FINAL_GT_FIRST", Severity.ERROR,
            f"final-alignment total {u.sum_final} exceeds the first-alignment total {u.sum_first}; "
            "nobody new is admitted after the first alignment (RULES §4.4)",
            expected=u.sum_first, reported=u.sum_final,
            likely_cause="a first- or final-alignment count entered wrongly, or people admitted late",
        )
    ]


def _satellite_delegates(u: _Unit) -> list[Finding]:
    """SATELLITE_DELEGATES: a satellite's D, and what it reported, follow the attendance table (§8, §17.4)."""
    if u.satellite_attendance is None:
        return []
    table_d = satellite_delegates(u.satellite_attendance)
    if table_d != u.d:
        return [
            Finding(
                "SATELLITE_DELEGATES", Severity.WARN,
                f"a satellite with {u.satellite_attendance} attendees elects {table_d} delegates "
                f"by the attendance table, not {u.d} (RULES §8)",
                expected=table_d, reported=u.d,
                likely_cause="attendance recorded differently from the alignment counts",
            )
        ]
    if u.reported is not None and sum(u.reported.values()) not in (0, u.d):
        return [
            Finding(
                "SATELLITE_DELEGATES", Severity.WARN,
                f"a satellite with {u.satellite_attendance} attendees elects {table_d} delegates by the attendance "
                f"table, but reported {sum(u.reported.values())} (RULES §8, §17.4)",
                expected=table_d, reported=sum(u.reported.values()),
                likely_cause="the satellite's delegates taken from another attendance band",
            )
        ]
    return []


def _too_many_viable(u: _Unit) -> list[Finding]:
    """TOO_MANY_VIABLE: the published final alignment shows at most D viable groups (§4.5)."""
    if u.d < 2:
        return []
    viable_final = [k for k in u.names if u.final[k] and u.final[k] >= u.final_thr]
    if len(viable_final) <= u.d:
        return []
    return [
        Finding(
            "TOO_MANY_VIABLE", Severity.WARN,
            f"{len(viable_final)} groups are viable at the final alignment for {u.d} delegates; the "
            "published final alignment does not show the realignment of the smallest (RULES §4.5)",
            expected=u.d, reported=len(viable_final),
        )
    ]


def _delegate_total(u: _Unit) -> list[Finding]:
    """DELEGATE_TOTAL: the reported delegates add up to what the unit elects. Without reported delegates, a
    one-delegate unit that was attended needs someone in its final alignment to award its delegate to
    (§7); with them, the chair named the winner (published 2020 results have such a unit: Johnson,
    Graham Township, no final alignment, its delegate reported), and the sum is what is checked."""
    if u.reported is None:
        if u.d == 1 and u.sum_final == 0 and max(u.t, u.sum_first) > 0:
            return [Finding("DELEGATE_TOTAL", Severity.ERROR, f"nobody is in the final alignment of a one-delegate "
                            f"unit {max(u.t, u.sum_first)} attended, and no delegate is reported: its delegate is elected by the "
                            "caucus as a whole and must be awarded (RULES §7); give the final alignment or the delegate",
                            expected=1, reported=0)]
        return []
    total = sum(u.rep_s.values())
    if u.d == 0:
        if total == 0:
            return []
        return [
            Finding(
                "DELEGATE_TOTAL", Severity.ERROR,
                f"{total} delegates reported by a unit that elects none",
                expected=0, reported=total,
            )
        ]
    # Every legal outcome hands out all D delegates, except when no group is viable at the final
    # alignment: then none can be awarded (§4.3) and D stays unallocated. A one-delegate unit elects its
    # delegate as a whole and must award exactly one (§7), whoever it goes to.
    due = {u.d} if u.d == 1 else ({sum(o.values()) for o in u.outcomes} or {u.d})
    if total in due:
        return []
    owed = u.d if u.d in due else min(due)
    return [
        Finding(
            "DELEGATE_TOTAL", Severity.ERROR,
            f"{total} delegates reported for a unit that elects {u.d}" if owed == u.d else
            f"{total} delegates reported for a unit that elects {u.d} but where no group is viable at the "
            f"final alignment, so {owed} can be awarded (RULES §4.3)",
            expected=owed, reported=total, likely_cause=u.causes,
        )
    ]


def _nonviable_awarded(u: _Unit) -> list[Finding]:
    """NONVIABLE_AWARDED: no delegate for a group below the threshold at the final alignment."""
    if u.reported is None or u.d < 2:
        return []
    out = []
    for k in u.names:
        if u.rep_s[k] and not (u.final[k] and u.final[k] >= u.final_thr):
            was = " (it was viable at the first alignment)" if u.first[k] >= u.thr and u.first[k] else ""
            out.append(
                Finding(
                    "NONVIABLE_AWARDED", Severity.ERROR,
                    f"{k} has {u.final[k]} at the final alignment, below the threshold of {u.final_thr}, "
                    f"but was reported {u.rep_s[k]} delegate(s){was}",
                    candidate=k, expected=0, reported=u.rep_s[k],
                    likely_cause="viability taken from the first alignment" if was else u.causes,
                )
            )
    return out


def _more_votes_fewer_dels(u: _Unit) -> list[Finding]:
    """MORE_VOTES_FEWER_DELS: a larger final group never gets fewer delegates (information only)."""
    if u.reported is None or u.d == 0:
        return []
    rep_s, final_s = u.rep_s, u.final
    return [
        Finding(
            "MORE_VOTES_FEWER_DELS", Severity.INFO,
            f"{a} ({final_s[a]}) was reported fewer delegates ({rep_s[a]}) than {b} "
            f"({final_s[b]}, {rep_s[b]})",
            candidate=a, expected=f">= {rep_s[b]}", reported=rep_s[a], likely_cause=u.causes,
        )
        for a, b in permutations(u.names, 2)
        if final_s[a] > final_s[b] and rep_s[a] < rep_s[b]
    ]


def _sorted(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (_ORDER.get(f.code, len(_ORDER)), f.candidate or "", f.message))


def _locked_group_shrank(u: _Unit) -> list[Finding]:
    """§4.2: a group viable at the first alignment may only grow, unless §4.5 dissolved it.

    A locked group that shrank is excused only if it really was dissolved (nobody left in it at the
    final count, or no delegates for it) and §4.5 required that: counting every locked group at its
    largest size (it could not legally be smaller than its first) and every other group at its final
    size, more groups would be viable than delegates and this group is among the smallest (any of a
    tied block at the cut, since the lot may have fallen on any of them). Where one cut was due, the
    others could have grown before it only by the realigners, who must also have been enough to lift
    every other locked group to this one's size. A group that kept members and won delegates was not
    dissolved, so the lock was broken.
    """
    if not (u.rules.lock_viable_groups and u.d >= 1):
        return []
    first_s, final_s, reported, d, thr, t_inferred = u.first, u.final, u.reported, u.d, u.thr, u.t_inferred
    locked = [k for k, v in first_s.items() if v and v >= thr]
    if not locked:
        return []
    pre = {k: (max(first_s[k], final_s[k]) if k in locked else final_s[k]) for k in first_s}
    candidates = sorted((v for v in pre.values() if v and v >= thr))
    excess = len(candidates) - d
    # One cut: before it a locked group grew only by realigners (members of groups not viable at the first
    # alignment); what it holds beyond them came from the group the cut dissolved. (With more cuts, the
    # members of a group cut earlier realign too, and may lift others above a group cut later.)
    # (People counted at the door who did not align at first may align later, as FINAL_GT_FIRST allows.)
    realigners = sum(v for k, v in first_s.items() if k not in locked) + (0 if t_inferred else max(0, u.t - u.sum_first))
    if excess == 1:
        pre = {k: (first_s[k] + min(max(0, final_s[k] - first_s[k]), realigners) if k in locked else final_s[k])
               for k in first_s}
        candidates = sorted((v for v in pre.values() if v and v >= thr))
    dissolvable_up_to = candidates[excess - 1] if excess > 0 else -1
    out: list[Finding] = []
    for k in locked:
        if final_s[k] >= first_s[k]:
            continue
        dissolved = final_s[k] == 0 or (reported.get(k, 0) == 0 if reported is not None else final_s[k] < thr)
        # With one delegate §4.5 can cut only a tie of two majorities (both locked): counting the defectors
        # in the group they joined would excuse the very shrink that handed it the delegate.
        if (dissolved and pre[k] <= dissolvable_up_to and (d > 1 or len(locked) > 1)
                and (excess > 1 or _lifted(first_s, final_s, locked, k, thr) <= realigners)):
            continue
        borderline = first_s[k] == thr
        # A one-delegate unit elects as a whole (§7); its 50 % "viable" is the APP's and only informational
        # (§3), and §12 exempts no D: the shrink is shown, as an ALLOCATION of such a unit is, as soft.
        severity = Severity.SOFT if d == 1 else Severity.WARN if borderline and t_inferred else Severity.ERROR
        cause = (
            "a one-delegate unit, which elects as a whole (RULES §7): the APP's 50 % viability is informational (§3)"
            if d == 1
            else "the group sat exactly on the threshold; if the worksheet's attendance exceeded the "
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


def _lifted(first_s: Mapping[str, int], final_s: Mapping[str, int], locked: list[str], k: str, thr: int) -> int:
    """Realigners a single §4.5 cut needs to have fallen on ``k``: every other locked group at least
    as large as ``k`` when it was cut (a tie lets the lot fall on ``k``), and every group viable only
    at the final count already there, as large: with one cut due it was viable at the cut, and one
    smaller than ``k`` would have been cut instead."""
    lift = sum(max(0, first_s[k] - first_s[j]) for j in locked if j != k)
    formed = sum(1 for g, v in final_s.items() if g not in locked and v >= thr)
    return lift + formed * first_s[k]


def _allocation(u: _Unit) -> list[Finding]:
    """ALLOCATION: the reported delegates are one of the legal outcomes (every toss, §4.5-§7)."""
    if u.reported is None or u.d == 0 or u.rep_s in u.outcomes:
        return []
    return [_allocation_finding(u)]


def _allocation_finding(u: _Unit) -> Finding:
    rules, d, t, first_s, final_s = u.rules, u.d, u.t, u.first, u.final
    rep_s, outcomes, causes = u.rep_s, u.outcomes, u.causes
    expected: object = next(iter(outcomes)) if len(outcomes) == 1 else tuple(sorted(outcomes, key=outcome_key))
    shown = " or ".join(_fmt(o) for o in sorted(outcomes, key=outcome_key)) or "none"
    for alt in rules.alternatives():
        if rep_s in legal_outcomes_of(alt, d, t, first_s, final_s):
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


_CHECKS = (
    _overcount,
    _final_gt_first,
    _satellite_delegates,
    _locked_group_shrank,
    _too_many_viable,
    _delegate_total,
    _nonviable_awarded,
    _allocation,
    _more_votes_fewer_dels,
)
"""One function per code, each deciding on its own whether the data allow it to run."""
