"""Versioned rule sets: which reading of the caucus rules a computation used.

Why versioned: the rules changed between 2016 and 2020, and several points are
genuinely undecided by the sources (RULES.md marks them [OPEN]).  A projection
is a function of (events, rule set); naming the rule set in every result lets an
auditor recompute under another reading and diff, instead of arguing about
which one the code silently picked.  Each undecided point is a field of
:class:`RuleSet`, so the other reading is one ``variant(...)`` away.

Rule sets
---------
``idp-2020`` (default)
    The 2020 rules as the official reporting app (APP, IowaReporterApp v1.1)
    computed them: two alignments, viable groups locked, largest remainder;
    but a lot, not the APP's "all of them", decides which of equal smallest
    groups realign under §4.5 (point 2 below).
``idp-2016``
    2016 practice: no lock (anyone could move, repeated realignments), coin
    tosses or lots for leftover delegates.

The [OPEN] points and the choices made
--------------------------------------
1. Leftover delegates when people left or stayed in non-viable groups (§5.5,
   §17.1) -- field ``leftover``.
   idp-2020: ``"round_robin"`` (APP: hand them out again in descending order of
   remainder).  idp-2016: ``"lots"`` (DMR16; Ames 2-4 tossed a coin for its 8th
   delegate): the first round is the same (one more each, in descending order
   of remainder, a tie at its cut by lot); the delegates past one more per
   group are drawn by lot among all viable groups.  The checks accept the
   other reading as ``ambiguous``.
2. Which of several equal smallest groups realigns when more groups are viable
   than delegates (§4.5, §17.2) -- field ``realign_ties``.
   Both rule sets: ``"lots"`` (a lot decides which of them realign: the text of
   RULES §4.5, "our reading" of §17.2, and worked example E05).  The APP's
   reading, ``"all"`` (it zeroes every group tied at the minimum size), is
   ``idp-2020[realign_ties=all]``.  Evidence from the certified 2020 release:
   in 27 units the cut falls inside equal groups; the reported delegates of 26
   of them fit the lot reading and none fits the APP's (the 27th reported 4
   delegates for 3).  idp-2020 meant ``"all"`` until this evidence was weighed;
   a tally stored under that meaning is computed again, never served (a stored
   tally records ``RuleSet.meaning``).  The checks accept both readings as
   legal outcomes (``accepted_options``), so a unit that reported the APP's
   outcome has no finding.  Both readings agree when every
   viable group ties at the cut (6/6/6 for two delegates; 4 units in 2020):
   realigning all of them would leave nobody to elect the D delegates, which
   §4.5 ("until #viable <= D") cannot mean, so a lot decides which realign.
3. One-delegate units (§7, §17.3) -- field ``one_delegate_no_majority``.
   Both rule sets: a group with a majority (``ceil(T/2)``, APP; IDPMED16's
   "simple majority") wins; two groups of exactly 50 % toss a coin.  Neither
   source says what happens when no group has a majority (56 of 121 such
   units in 2020); the choice is ``"plurality"``: the largest final group wins,
   as the caucus as a whole elects (WAPP; the auditor's reference of §7, and
   worked example E15).  ``"unawarded"`` is the APP-literal reading: no group is
   viable and the delegate stays unawarded until the caucus realigns.  A winner
   other than the plurality is a ``soft`` finding.
4. The satellite SDE base (§8, §17.4): not a rule choice but a fact recovered
   from the certified data; see :mod:`.satellites`.  The three satellites whose
   split "implies one more delegate" are: one whose headcount (67) exceeds its
   first-alignment total (50) and elects 7 by the table, and two that reported
   one delegate more than they elect (8 of 7, 9 of 8; the 100-attendee site's
   SDEs are shared over 8, so a ">= 100 -> 9" boundary does not fit).
5. DSP20's own text could not be read (§17.5): the "too many" adjustment takes
   delegates from the group with the smallest remainder among those holding two
   or more, so a viable group never loses its only delegate (APP, WAPP, 2016
   training).  Both rule sets.
6. Whether the worksheet's T ever differed from the first-alignment total
   (§17.6): T is an input; when it is not reported the first-alignment total
   stands in, and the lock-rule check downgrades a locked group that sat
   exactly on the threshold to ``warn``.  Both rule sets.
7. Threshold after people leave (§4.6) -- field ``recompute_threshold_at_final``.
   idp-2020: ``False`` (APP keeps the threshold of the first alignment).
   idp-2016: ``True`` (the 2016 training quiz asks for the threshold "now"
   after people left); the final-alignment total is the headcount then.  The
   delegate formula keeps T as its denominator in both (Ames 2-4, 2016).
8. Worksheet decimals (§5.1) -- field ``worksheet_decimals``.
   Both: ``None`` (exact rationals).  ``4`` reproduces the APP's ``toFixed(4)``
   raw values; the two agree for every T < 10,000, because distinct remainders
   then differ by at least 1/T > 0.0001.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from itertools import combinations
from types import MappingProxyType

from ._counts import Counts
from .allocation import Allocation, LeftoverRule, allocate
from .checks import Finding, check_unit
from .errors import CaucusMathError
from .one_delegate import NoMajorityRule
from .thresholds import viability_threshold
from .ties import TieResolution
from .viability import RealignTieRule

__all__ = ["RuleSet", "RULE_SETS", "DEFAULT_RULE_SET", "RULES_REVISION", "get_rule_set"]

_READINGS: dict[tuple[str, object], str] = {
    ("leftover", "lots"): "leftover delegates decided by coin toss or lot (2016 practice, RULES §5.5)",
    ("leftover", "round_robin"): "leftover delegates handed out again in remainder order (APP, RULES §5.5)",
    ("realign_ties", "lots"): "a lot decided which of the equal smallest groups realigned (RULES §4.5)",
    ("realign_ties", "all"): "all equal smallest groups realigned (APP, RULES §4.5)",
    ("one_delegate_no_majority", "plurality"): "without a majority the plurality took the one delegate (RULES §7)",
    ("one_delegate_no_majority", "unawarded"): "without a majority the one delegate stayed unawarded (APP, RULES §7)",
    ("recompute_threshold_at_final", True): "threshold recomputed from the final-alignment headcount (RULES §4.6)",
    ("recompute_threshold_at_final", False): "threshold kept from the start of the caucus (APP, RULES §4.6)",
}

_FLIPS: dict[str, dict[object, object]] = {
    "leftover": {"round_robin": "lots", "lots": "round_robin"},
    "realign_ties": {"all": "lots", "lots": "all"},
    "one_delegate_no_majority": {"plurality": "unawarded", "unawarded": "plurality"},
    "recompute_threshold_at_final": {True: False, False: True},
}


@dataclass(frozen=True)
class RuleSet:
    """A named, immutable reading of the caucus rules.

    The fields other than ``name``/``description`` are the points where readings
    differ (see the module docstring for what each choice means and why).
    ``ambiguous_options`` lists the [OPEN] fields whose other reading the checks
    accept as ``ambiguous`` rather than ``error``; ``accepted_options`` those whose
    other reading is a legal outcome too, with no finding (§4.5's cut inside equal
    groups is "decided by lot", and §12 keeps ``ambiguous`` for the 2016 leftover
    lot only).
    """

    name: str
    description: str
    lock_viable_groups: bool = True
    leftover: LeftoverRule = "round_robin"
    realign_ties: RealignTieRule = "lots"
    one_delegate_no_majority: NoMajorityRule = "plurality"
    recompute_threshold_at_final: bool = False
    worksheet_decimals: int | None = None
    ambiguous_options: tuple[str, ...] = ("leftover",)
    accepted_options: tuple[str, ...] = ("realign_ties",)

    def __post_init__(self) -> None:
        allowed = {
            "leftover": ("round_robin", "lots"),
            "realign_ties": ("all", "lots"),
            "one_delegate_no_majority": ("plurality", "unawarded"),
        }
        for field_name, values in allowed.items():
            if getattr(self, field_name) not in values:
                raise CaucusMathError(field_name, f"must be one of {values}, got {getattr(self, field_name)!r}")
        decimals = self.worksheet_decimals
        if decimals is not None and (isinstance(decimals, bool) or not isinstance(decimals, int) or decimals < 0):
            raise CaucusMathError("worksheet_decimals", f"must be None or an integer >= 0, got {decimals!r}")
        for opt in (*self.ambiguous_options, *self.accepted_options):
            if opt not in _FLIPS:
                raise CaucusMathError("ambiguous_options", f"{opt!r} is not an [OPEN] option of a rule set")

    # ------------------------------------------------------------------ math

    def threshold(self, attendance: int, delegates: int) -> int:
        """Viability threshold for T attendees and D delegates (§3)."""
        return viability_threshold(attendance, delegates)

    def allocate(
        self,
        *,
        delegates: int,
        attendance: int | None,
        first: Mapping[str, int],
        final: Mapping[str, int],
        ties: Sequence[TieResolution] = (),
        check_totals: bool = True,
    ) -> Allocation:
        """The unit's delegates under this rule set; ties stay pending unless resolved in ``ties``."""
        return allocate(
            check_totals=check_totals,
            delegates=delegates,
            attendance=attendance,
            first=first,
            final=final,
            ties=ties,
            rule_set=self.name,
            leftover=self.leftover,
            realign_ties=self.realign_ties,
            no_majority=self.one_delegate_no_majority,
            recompute_threshold_at_final=self.recompute_threshold_at_final,
            worksheet_decimals=self.worksheet_decimals,
        )

    def outcomes(
        self,
        *,
        delegates: int,
        attendance: int | None,
        first: Mapping[str, int],
        final: Mapping[str, int],
        ties: Sequence[TieResolution] = (),
        check_totals: bool = True,
    ) -> frozenset[Counts[int]]:
        """Every delegate allocation reachable through some outcome of the pending tosses.

        One element when nothing is left to chance.  This is what the auditor
        compares a reported allocation against (§12 ``ALLOCATION``).
        """
        alloc = self.allocate(delegates=delegates, attendance=attendance, first=first, final=final, ties=ties,
                              check_totals=check_totals)
        if alloc.settled:
            return frozenset((alloc.delegates,))
        tie = alloc.pending[0]
        found: set[Counts[int]] = set()
        for winners in combinations(tie.contenders, tie.seats):
            res = TieResolution(tie.contenders, tie.seats, winners, tie.method)
            found |= self.outcomes(
                delegates=delegates, attendance=attendance, first=first, final=final, ties=(*ties, res),
                check_totals=check_totals,
            )
        return frozenset(found)

    def legal_outcomes(
        self, *, delegates: int, attendance: int, first: Mapping[str, int], final: Mapping[str, int]
    ) -> frozenset[Counts[int]]:
        """What the auditor accepts without a finding: every tie outcome (§12), under this rule set's
        reading and under the other reading of each ``accepted_options`` point. T is as given even when
        the final total exceeds it (§1: the auditor's T is the first-alignment total)."""
        found = set(self.outcomes(delegates=delegates, attendance=attendance, first=first, final=final, check_totals=False))
        for opt in self.accepted_options:
            other = self.variant(**{opt: _FLIPS[opt][getattr(self, opt)]})
            found |= other.outcomes(delegates=delegates, attendance=attendance, first=first, final=final, check_totals=False)
        return frozenset(found)

    def check(
        self,
        *,
        delegates: int,
        attendance: int | None,
        first: Mapping[str, int],
        final: Mapping[str, int],
        reported: Mapping[str, int] | None = None,
        satellite_attendance: int | None = None,
    ) -> list[Finding]:
        """The §12 auditor checks of one unit under this rule set (see :mod:`.checks`)."""
        return check_unit(
            self,
            delegates=delegates,
            attendance=attendance,
            first=first,
            final=final,
            reported=reported,
            satellite_attendance=satellite_attendance,
        )

    # ------------------------------------------------------------------ readings

    def variant(self, **changes: object) -> "RuleSet":
        """This rule set with other choices on some [OPEN] points, named after them.

        >>> get_rule_set("idp-2020").variant(realign_ties="all").name
        'idp-2020[realign_ties=all]'
        """
        known = {f.name for f in fields(self)} - {"name", "description"}
        unknown = set(changes) - known
        if unknown:
            raise CaucusMathError("variant", f"unknown rule options {sorted(unknown)}; known: {sorted(known)}")
        tag = ",".join(f"{k}={v}" for k, v in sorted(changes.items()))
        return replace(
            self,
            name=f"{self.name}[{tag}]" if tag else self.name,
            description=f"{self.description} With {tag}." if tag else self.description,
            **changes,  # type: ignore[arg-type]
        )

    @property
    def meaning(self) -> str:
        """Every choice this rule set makes, as one string. A stored tally records it beside the rule
        set's name, so a tally computed when a name meant another reading (idp-2020's §4.5 cut was
        ``all`` until it became ``lots``) is recognised as stale and computed again, never served."""
        choices = (f"{f.name}={getattr(self, f.name)}" for f in fields(self)
                   if f.name not in ("name", "description", "ambiguous_options", "accepted_options"))
        return ",".join(choices)

    def reading_of(self, other: "RuleSet") -> str:
        """Plain words for how ``other`` reads the [OPEN] points differently from this rule set."""
        parts = [
            _READINGS.get((opt, getattr(other, opt)), f"{opt}={getattr(other, opt)}")
            for opt in _FLIPS
            if getattr(other, opt) != getattr(self, opt)
        ]
        return "; ".join(parts) or "the same reading"

    def alternatives(self) -> tuple["RuleSet", ...]:
        """The other readings of the [OPEN] points in ``ambiguous_options``, singly and combined."""
        out: list[RuleSet] = []
        opts = self.ambiguous_options
        for r in range(1, len(opts) + 1):
            for combo in combinations(opts, r):
                changes = {opt: _FLIPS[opt][getattr(self, opt)] for opt in combo}
                out.append(self.variant(**changes))
        return tuple(out)


IDP_2020 = RuleSet(
    name="idp-2020",
    description=(
        "Iowa Democratic Party 2020: two alignments, viable groups locked, largest remainder with "
        "round-robin for leftovers (the official reporting app), and a lot decides which of equal "
        "smallest groups realign under the more-viable-groups-than-delegates rule (RULES §4.5)."
    ),
)

IDP_2016 = RuleSet(
    name="idp-2016",
    description=(
        "Iowa Democratic Party 2016 practice: no lock rule, threshold recomputed after people leave, "
        "coin toss or lots for leftover delegates and for equal groups that must realign."
    ),
    lock_viable_groups=False,
    leftover="lots",
    realign_ties="lots",
    recompute_threshold_at_final=True,
    ambiguous_options=("leftover", "realign_ties", "recompute_threshold_at_final"),
    accepted_options=(),
)

DEFAULT_RULE_SET = "idp-2020"

RULE_SETS: Mapping[str, RuleSet] = MappingProxyType({rs.name: rs for rs in (IDP_2020, IDP_2016)})

RULES_REVISION = ";".join(f"{n}:{rs.meaning}" for n, rs in sorted(RULE_SETS.items()))
"""What every rule set name means in this code, in one string (every variant derives from a base's
meaning). Whatever was computed and handed out under a name (a published feed record's id, a read
API answer's ETag, the mark a store keeps of its tallies' meanings) carries it, so that when a name
comes to mean another reading the old answers are recognised as old."""


def get_rule_set(name: str = DEFAULT_RULE_SET) -> RuleSet:
    """Look up a rule set by its versioned name (``idp-2020``, ``idp-2016``), or a variant of one by the
    name ``variant`` gives it: ``idp-2020[realign_ties=all]``, ``idp-2020[leftover=lots,realign_ties=all]``."""
    if isinstance(name, str) and name.endswith("]") and "[" in name:
        base_name, _, tag = name[:-1].partition("[")
        base = get_rule_set(base_name)
        changes: dict[str, object] = {}
        for part in filter(None, tag.split(",")):
            option, eq, text = part.partition("=")
            if not eq or option not in _OPTION_NAMES:
                raise CaucusMathError(
                    "rule_set", f"{part!r} in {name!r} is not OPTION=VALUE of an [OPEN] option ({', '.join(_OPTION_NAMES)})"
                )
            if option in changes:
                raise CaucusMathError("rule_set", f"{option} is given more than once in {name!r}; give each option once")
            if option == "worksheet_decimals":
                changes[option] = _decimals(text)
                continue
            values = {str(v): v for v in _FLIPS[option]}
            if text not in values:
                raise CaucusMathError("rule_set", f"{option} must be one of {', '.join(sorted(values))}, got {text!r}")
            changes[option] = values[text]
        variant = base.variant(**changes)
        if variant.name != name:
            raise CaucusMathError("rule_set", f"write the variant as {variant.name!r} (options in alphabetical order)")
        return variant
    try:
        return RULE_SETS[name]
    except (KeyError, TypeError):
        raise CaucusMathError(
            "rule_set",
            f"unknown rule set {name!r}; known: {', '.join(sorted(RULE_SETS))}, or a variant such as "
            "idp-2020[realign_ties=all] (options: " + ", ".join(_OPTION_NAMES) + ")",
        ) from None


MAX_WORKSHEET_DECIMALS = 12
"""The most decimals a ``worksheet_decimals`` variant may ask for: a worksheet carries four (the APP's
``toFixed(4)``), and a name is not allowed to make the arithmetic arbitrarily large (10**n per unit)."""

_OPTION_NAMES = tuple(sorted({*_FLIPS, "worksheet_decimals"}))
"""The options a variant's name may set: the two-way [OPEN] readings and the worksheet's decimals (§5.1),
which is a number, not a flip, so the audit never offers it as an alternative reading."""


def _decimals(text: str) -> int:
    """``worksheet_decimals`` from a variant's name: plain digits, 0 to ``MAX_WORKSHEET_DECIMALS``."""
    if not (text.isascii() and text.isdigit()) or int(text) > MAX_WORKSHEET_DECIMALS:
        raise CaucusMathError(
            "rule_set", f"worksheet_decimals must be an integer from 0 to {MAX_WORKSHEET_DECIMALS}, got {text!r}"
        )
    return int(text)
