"""Who is viable, who is locked, and who must realign (RULES.md §3-§4).

Why a separate module: viability is decided twice (first and final alignment)
and feeds both the delegate formula and the auditor's lock-rule check, and the
"more viable groups than delegates" rule (§4.5) is the one place where a viable
group can be dissolved.  Keeping these decisions here, as plain functions of
counts, lets the checks ask the same questions the allocation asks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ._core import RealignmentCut, RealignTieRule, TieBook, realignment_cut, threshold_of
from .ties import TieResolution

__all__ = [
    "RealignTieRule",
    "RealignmentCut",
    "viable_groups",
    "locked_groups",
    "too_many_viable",
]


def viable_groups(counts: Mapping[str, int], threshold: int) -> frozenset[str]:
    """Groups at or above the threshold; an empty group is never viable (§3)."""
    return frozenset(name for name, members in counts.items() if members > 0 and members >= threshold)


def locked_groups(first: Mapping[str, int], attendance: int, delegates: int) -> frozenset[str]:
    """Groups the 2020 lock rule (§4.2) freezes: viable at the first alignment.

    Their members may not leave, so each must have ``final >= first`` unless §4.5
    dissolves it.  For D = 0 nothing is elected and nothing is locked.
    """
    if delegates <= 0:
        return frozenset()
    return viable_groups(first, threshold_of(attendance, delegates))


def too_many_viable(
    sizes: Mapping[str, int],
    delegates: int,
    tie_rule: RealignTieRule = "lots",
    ties: Iterable[TieResolution] = (),
) -> RealignmentCut:
    """Apply §4.5: while more groups are viable than there are delegates, the smallest realign.

    ``sizes`` holds the viable groups only.  With the APP reading (``all``) every
    group tied at the cut realigns (the APP zeroes all groups of the minimum size),
    unless they are every group left: then nobody would elect the D delegates, and
    a lot decides which of them realign, as under ``lots``; with ``lots`` exactly as many of the tied groups as needed are drawn to
    realign, and until the draw is recorded the result carries a
    :class:`PendingTie` whose winners are the groups that *stay* viable.
    """
    book = TieBook(tuple(ties))
    return realignment_cut(sorted(sizes.items()), delegates, tie_rule, book)


