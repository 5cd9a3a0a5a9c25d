"""The helpers the caucus math modules share: integer thresholds, the §4.5 cut, the tie book, the
largest-remainder distribution and count validation.

Why one private module: allocation, the auditor's checks and the viability rules must ask the same
questions in the same way (a check that recomputed the cut differently from the allocation would
accuse correct results). Each public module imports what it needs from here and nothing private from
its siblings, so the package has no import cycle.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from .errors import CaucusMathError
from .ties import PendingTie, TieResolution

LeftoverRule = Literal["round_robin", "lots"]
"""Delegates left after every group got one more (§5.5): APP round-robin or 2016 lots."""

RealignTieRule = Literal["all", "lots"]
"""§4.5 with equal smallest groups at the cut: ``all`` of them realign (APP) or ``lots`` decide."""


# --------------------------------------------------------------------------- validation


def check_int(field: str, value: object, minimum: int = 0) -> int:
    """An integer of at least ``minimum`` (bools are not counts), named by ``field`` when it is not."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise CaucusMathError(field, f"must be an integer, got {value!r}")
    if value < minimum:
        raise CaucusMathError(field, f"must be >= {minimum}, got {value}")
    return int(value)


def _check_count(field: str, name: object, value: object) -> int:
    if type(name) is not str or not name:
        raise CaucusMathError(field, f"group names must be non-empty strings, got {name!r}")
    if type(value) is not int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise CaucusMathError(field, f"count for {name!r} must be an integer, got {value!r}")
        value = int(value)
    if value < 0:
        raise CaucusMathError(field, f"count for {name!r} is negative ({value})", "RULES §2")
    return value



def validate_counts(field: str, counts: Mapping[str, int]) -> dict[str, int]:
    """Check one alignment: group names are non-empty strings, counts are ints >= 0.

    Returns a fresh dict (the caller's mapping may change later; results must not).
    """
    if type(counts) is not dict and not isinstance(counts, Mapping):
        raise CaucusMathError(field, f"must be a mapping of group name to count, got {type(counts).__name__}")
    out = dict(counts)
    for name, value in out.items():
        # Fast path: the common case is a str name with a non-negative plain int.
        if type(value) is not int or value < 0 or type(name) is not str or not name:
            out[name] = _check_count(field, name, value)
    return out



# --------------------------------------------------------------------------- thresholds (§3)


def threshold_of(attendance: int, delegates: int) -> int:
    """Unchecked integer form of :func:`viability_threshold` for the hot path."""
    if delegates >= 4:
        return (15 * attendance + 99) // 100
    if delegates == 3:
        return (attendance + 5) // 6
    if delegates == 2:
        return (attendance + 3) // 4
    return (attendance + 1) // 2



# --------------------------------------------------------------------------- ties (§6)


class TieBook:
    """The resolutions offered to one computation, each usable once, in order."""

    __slots__ = ("_unused", "applied")

    def __init__(self, resolutions: Sequence[TieResolution]) -> None:
        for res in resolutions:
            if not isinstance(res, TieResolution):
                raise CaucusMathError("ties", f"expected TieResolution records, got {res!r}")
        self._unused = list(resolutions)
        self.applied: list[TieResolution] = []

    def take(self, tie: PendingTie) -> TieResolution | None:
        for i, res in enumerate(self._unused):
            if tie.matches(res):
                del self._unused[i]
                self.applied.append(res)
                return res
        return None



NO_TIES = TieBook(())
"""Shared: ``take`` on an empty book never changes it."""


# --------------------------------------------------------------------------- more viable groups than D (§4.5)


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



def realignment_cut(
    groups: list[tuple[str, int]], delegates: int, tie_rule: RealignTieRule, book: TieBook
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
    if tie_rule == "all" and ordered[-1][1] != cut_size:
        # APP: every group tied at the cut realigns. Not when they are all the groups left: §4.5
        # realigns groups so that at most D stay viable, not so that none does, and nobody would be
        # left to elect the D delegates; then a lot decides which realign, as below.
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
            f"{len(block)} equal smallest groups ({cut_size} each) must realign, chosen by lot; "
            f"the lot's winners are the {len(block) - leaving} that stay viable"
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



# --------------------------------------------------------------------------- the delegate formula (§5)


def distribute(
    names: Sequence[str],
    sizes: Sequence[int],
    delegates: int,
    attendance: int,
    leftover: LeftoverRule,
    decimals: int | None,
    book: TieBook,
) -> tuple[list[int], PendingTie | None, int]:
    """Largest remainder with the only-delegate floor (§5.3-5.5) on integer numerators.

    ``names``/``sizes`` are the groups sharing the delegates, sorted by name.
    Returns the settled delegates per group, the pending tie if any, and the
    number of seats nobody can take.
    """
    n = len(names)
    if n == 0:
        return [], None, delegates
    if decimals is None:
        scale = attendance
        nums = [s * delegates for s in sizes]
    else:
        # The APP rounded raw to 4 decimals (toFixed) before comparing.
        scale = 10**decimals
        twice_t = 2 * attendance
        nums = [(2 * s * delegates * scale + attendance) // twice_t for s in sizes]
    alloc = [num // scale or 1 for num in nums]
    left = delegates - sum(alloc)
    if left == 0:
        return alloc, None, 0
    if left > 0:
        rems = [num - a * scale for num, a in zip(nums, alloc)]
        order = sorted(range(n), key=rems.__getitem__, reverse=True)
        if leftover == "round_robin":
            rounds, seats = divmod(left, n)
            if rounds:
                alloc = [a + rounds for a in alloc]
            tie = _give(names, order, rems, seats, alloc, book, "remainder", delegates)
            return alloc, tie, 0
        # §5.5: the first round is the reference algorithm's (every group in remainder order, a tie at the
        # cut to lots, as idp-2020); only seats past one more per group are "left over" for the 2016 lot.
        seats = min(left, n)
        tie = _give(names, order, rems, seats, alloc, book, "remainder", delegates)
        rest = left - seats
        if rest == 0 or tie is not None:
            return alloc, tie, 0
        rounds, seats = divmod(rest, n)
        if rounds:
            alloc = [a + rounds for a in alloc]
        if seats == 0:
            return alloc, None, 0
        lot = PendingTie(
            contenders=tuple(names),
            seats=seats,
            reason=(
                f"{rest} delegate(s) left over after every viable group was rounded up "
                f"(people left or stayed in non-viable groups); 2016 practice: decided by "
                f"{'coin toss' if n == 2 else 'lot'}"
            ),
            stage="leftover",
        )
        res = book.take(lot)
        if res is None:
            return alloc, lot, 0
        won = set(res.winners)
        return [a + (names[i] in won) for i, a in enumerate(alloc)], None, 0
    return alloc, _take_surplus(names, nums, scale, -left, alloc, book, delegates), 0



def _give(
    names: Sequence[str],
    order: Sequence[int],
    keys: Sequence[int],
    seats: int,
    alloc: list[int],
    book: TieBook,
    stage: Literal["remainder"],
    delegates: int,
) -> PendingTie | None:
    """Give one delegate to each of the first ``seats`` groups of ``order`` (descending keys)."""
    if seats == 0:
        return None
    if seats < len(order) and keys[order[seats - 1]] == keys[order[seats]]:
        cut = keys[order[seats]]
        above = [i for i in order if keys[i] > cut]
        block = [i for i in order if keys[i] == cut]
        for i in above:
            alloc[i] += 1
        contested = seats - len(above)
        tie = PendingTie(
            contenders=tuple(sorted(names[i] for i in block)),
            seats=contested,
            reason=(
                f"equal remainders at the cut: {contested} delegate(s) of {delegates} among "
                f"{len(block)} groups, by {'coin toss' if len(block) == 2 else 'lot'} (RULES §5.4, §6)"
            ),
            stage=stage,
        )
        res = book.take(tie)
        if res is None:
            return tie
        won = set(res.winners)
        for i in block:
            if names[i] in won:
                alloc[i] += 1
        return None
    for i in order[:seats]:
        alloc[i] += 1
    return None



def _take_surplus(
    names: Sequence[str],
    nums: Sequence[int],
    scale: int,
    surplus: int,
    alloc: list[int],
    book: TieBook,
    delegates: int,
) -> PendingTie | None:
    """§5.4 "too many": remove delegates, smallest ``raw - delegates`` first, never an only one.

    Only reachable when the floor of one delegate per viable group over-fills D;
    §4.5 guarantees there are at most D groups, so this always terminates.
    """
    while surplus > 0:
        able = [i for i in range(len(alloc)) if alloc[i] >= 2]
        if not able:  # pragma: no cover - excluded by §4.5 (at most D groups)
            raise AssertionError("more groups than delegates after §4.5")
        keys = {i: nums[i] - alloc[i] * scale for i in able}
        order = sorted(able, key=keys.__getitem__)
        k = min(surplus, len(order))
        if k < len(order) and keys[order[k - 1]] == keys[order[k]]:
            cut = keys[order[k]]
            below = [i for i in order if keys[i] < cut]
            block = [i for i in order if keys[i] == cut]
            for i in below:
                alloc[i] -= 1
            losing = k - len(below)
            tie = PendingTie(
                contenders=tuple(sorted(names[i] for i in block)),
                seats=len(block) - losing,
                reason=(
                    f"more delegates rounded than the {delegates} to elect: {losing} of {len(block)} "
                    f"groups with equal remainders lose one, by {'coin toss' if len(block) == 2 else 'lot'} "
                    f"(RULES §5.4; winners keep theirs)"
                ),
                stage="surplus",
            )
            res = book.take(tie)
            keep = set(res.winners) if res is not None else set()
            for i in block:
                if names[i] not in keep:
                    alloc[i] -= 1
            if res is None:
                return tie
        else:
            for i in order[:k]:
                alloc[i] -= 1
        surplus -= k
    return None

