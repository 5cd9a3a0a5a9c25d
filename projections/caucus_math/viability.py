"""Who is viable, who is locked, and who must realign (RULES.md §3-§4).

Why a separate module: viability is decided twice (first and final alignment)
and feeds both the delegate formula and the auditor's lock-rule check, and the
"more viable groups than delegates" rule (§4.5) is the one place where a viable
group can be dissolved.  Keeping these decisions here, as plain functions of
counts, lets the checks ask the same questions the allocation asks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from .thresholds import _threshold
from .ties import PendingTie, TieResolution, _TieBook

__all__ = [
    "RealignTieRule",
    "RealignmentCut",
    "viable_groups",
    "locked_groups",
    "too_many_viable",
]

RealignTieRule = Literal["all", "lots"]
"""§4.5 with equal smallest groups at the cut: ``all`` of them realign (APP) or ``lots`` decide."""


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
    return viable_groups(first, _threshold(attendance, delegates))


@dataclass(frozen=True)
class RealignmentCut:
    """Outcome of §4.5 for one alignment.

    ``keep`` are the groups that stay viable; ``must_realign`` the ones dissolved
    for certain; ``pending`` a lot among equal groups at the cut (only with the
    ``lots`` reading), whose contenders are in neither set until it is resolved.
    """

    keep: frozenset[str]
    must_realign: frozenset[str]
    pending: PendingTie | None = None
    applied: TieResolution | None = None


def too_many_viable(
    sizes: Mapping[str, int],
    delegates: int,
    tie_rule: RealignTieRule = "all",
    ties: Iterable[TieResolution] = (),
) -> RealignmentCut:
    """Apply §4.5: while more groups are viable than there are delegates, the smallest realign.

    ``sizes`` holds the viable groups only.  With the APP reading (``all``) every
    group tied at the cut realigns (the APP zeroes all groups of the minimum size);
    with ``lots`` exactly as many of the tied groups as needed are drawn to
    realign, and until the draw is recorded the result carries a
    :class:`PendingTie` whose winners are the groups that *stay* viable.
    """
    book = _TieBook(tuple(ties))
    return _cut(sorted(sizes.items()), delegates, tie_rule, book)


def _cut(
    groups: list[tuple[str, int]], delegates: int, tie_rule: RealignTieRule, book: _TieBook
) -> RealignmentCut:
    excess = len(groups) - delegates
    if excess <= 0:
        return RealignmentCut(keep=frozenset(n for n, _ in groups), must_realign=frozenset())
    ordered = sorted(groups, key=lambda g: g[1])
    cut_size = ordered[excess - 1][1]
    if ordered[excess][1] != cut_size:
        # The cut falls between two different sizes: no choice to make.
        return RealignmentCut(
            keep=frozenset(n for n, _ in ordered[excess:]),
            must_realign=frozenset(n for n, _ in ordered[:excess]),
        )
    if tie_rule == "all":
        return RealignmentCut(
            keep=frozenset(n for n, s in ordered if s > cut_size),
            must_realign=frozenset(n for n, s in ordered if s <= cut_size),
        )
    smaller = [n for n, s in ordered if s < cut_size]
    block = tuple(sorted(n for n, s in ordered if s == cut_size))
    larger = [n for n, s in ordered if s > cut_size]
    leaving = excess - len(smaller)
    tie = PendingTie(
        contenders=block,
        seats=len(block) - leaving,
        reason=(
            f"{len(groups)} viable groups for {delegates} delegates: {leaving} of the "
            f"{len(block)} equal smallest groups ({cut_size} each) must realign, chosen by lot"
        ),
        stage="realign",
    )
    res = book.take(tie)
    if res is None:
        return RealignmentCut(keep=frozenset(larger), must_realign=frozenset(smaller), pending=tie)
    winners = set(res.winners)
    return RealignmentCut(
        keep=frozenset(larger) | winners,
        must_realign=frozenset(smaller) | (set(block) - winners),
        applied=res,
    )
