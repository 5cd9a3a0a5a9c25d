"""What the auditor's checks need from a rule set, as a protocol.

Why a protocol and not :class:`~.rulesets.RuleSet` itself: a rule set runs the checks
(``RuleSet.check``) and the checks ask the rule set for its legal outcomes; naming the
class on both sides would make the two modules import each other. The checks depend on
this small reading of the rules instead, which any rule set satisfies.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, Self

from ._core import LeftoverRule
from ._counts import Counts
from .errors import CaucusMathError
from .ties import TieResolution

__all__ = ["RuleReading", "legal_outcomes_of"]


class RuleReading(Protocol):
    """A reading of the rules: its name, the options the checks branch on, and its outcomes."""

    @property
    def name(self) -> str: ...

    @property
    def lock_viable_groups(self) -> bool: ...

    @property
    def recompute_threshold_at_final(self) -> bool: ...

    @property
    def leftover(self) -> LeftoverRule: ...

    @property
    def worksheet_decimals(self) -> int | None: ...

    def outcomes(
        self,
        *,
        delegates: int,
        attendance: int | None,
        first: Mapping[str, int],
        final: Mapping[str, int],
        ties: Sequence[TieResolution] = (),
        check_totals: bool = True,
    ) -> frozenset[Counts[int]]: ...

    def legal_outcomes(
        self, *, delegates: int, attendance: int, first: Mapping[str, int], final: Mapping[str, int]
    ) -> frozenset[Counts[int]]: ...

    def alternatives(self) -> Sequence[Self]: ...

    def reading_of(self, other: Self) -> str: ...


def legal_outcomes_of(
    rules: RuleReading, d: int, t: int, first_s: dict[str, int], final_s: dict[str, int]
) -> frozenset[Counts[int]]:
    """The allocations the auditor accepts (``RuleSet.legal_outcomes``); none when T is 0 but people
    aligned (nothing can be computed from that)."""
    if t == 0:
        return frozenset({Counts(dict.fromkeys(final_s, 0))}) if not any(final_s.values()) else frozenset()
    try:
        return rules.legal_outcomes(delegates=d, attendance=t, first=first_s, final=final_s)
    except CaucusMathError:
        return frozenset()
