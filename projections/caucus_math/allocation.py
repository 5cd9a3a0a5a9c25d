"""Delegates from alignment counts (RULES.md §4.5, §5, §6, §7).

Why the APP's largest-remainder form (§5.5) is the reference algorithm: it is
what the official 2020 reporting app computed, it is equivalent to the
worksheet's "round .5 up, then adjust" procedure (§5.2-5.4) whenever the
only-delegate protection does not bind, and it states every decision as an
ordering of remainders, which makes ties at the cut explicit instead of
accidental.

Exactness: a raw share is ``members * D / T``.  All raws of a unit share the
denominator T, so floors and remainders are computed on the integer numerators
(``members * D`` and ``members * D % T``) and compared as integers; no rounding
ever decides a seat.  ``Allocation.raw`` gives the exact ``Fraction`` on demand.

The procedure, for D >= 2:

1. viability at the final alignment (threshold from T, §3);
2. §4.5: while more groups are viable than delegates, the smallest realign;
3. ``base = max(1, floor(raw))`` (a viable group never ends with 0, §5.3);
4. ``left = D - sum(base)``:

   * ``left > 0``: one each in descending order of ``raw - base``; beyond one
     round either round-robin in the same order (APP) or lots (2016);
   * ``left < 0`` (the protection of step 3 over-allocated): take one each from
     groups holding two or more, smallest ``raw - base`` first, never an only
     delegate (§5.4 "too many");
   * equal remainders at the cut: a :class:`PendingTie` (§6).

D = 1 goes to :mod:`.one_delegate`; D = 0 elects nobody.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from fractions import Fraction
from functools import cached_property
from itertools import combinations
from typing import Literal

from ._counts import Counts
from .errors import CaucusMathError
from .one_delegate import NoMajorityRule, one_delegate_winner
from .thresholds import _threshold
from .ties import PendingTie, TieResolution, _TieBook
from .viability import RealignTieRule, _cut

__all__ = ["LeftoverRule", "Allocation", "allocate", "validate_counts"]

LeftoverRule = Literal["round_robin", "lots"]
"""Delegates left after every group got one more (§5.5): APP round-robin or 2016 lots."""


@dataclass(frozen=True, repr=False)
class Allocation:
    """The delegates of one reporting unit, with everything needed to explain them.

    ``delegates`` holds the settled seats only: every group named in the input is
    present (0 if none).  While ties are pending the contested seats are in
    ``pending`` and counted nowhere else; ``unallocated`` counts seats that no
    group can take (nobody viable; a one-delegate unit without a majority under
    the APP-literal reading).  So ``sum(delegates) + sum(t.seats for t in pending)
    + unallocated == D`` except while a §4.5 lot is pending, when ``delegates``
    holds what every outcome of the lot gives.

    Fields: ``unit_delegates`` (D) and ``attendance`` (T) as used;
    ``threshold`` from T (``final_threshold`` differs only where a rule set
    recomputes it after people leave); ``first``/``final`` the counts with every
    group present; ``viable_first`` (the groups the 2020 lock rule freezes);
    ``viable_final`` (at or above the threshold at the final alignment);
    ``must_realign`` (dissolved under §4.5); ``eligible`` (the groups sharing the
    delegates, including contenders of a pending §4.5 lot; for D = 1 the groups
    that could win); ``applied_ties`` (the resolutions this result used, so
    that a recorded toss that no longer matches any tie can be noticed).
    """

    rule_set: str
    unit_delegates: int
    attendance: int
    threshold: int
    final_threshold: int
    first: Counts[int]
    final: Counts[int]
    viable_first: frozenset[str]
    viable_final: frozenset[str]
    must_realign: frozenset[str]
    eligible: frozenset[str]
    delegates: Counts[int]
    pending: tuple[PendingTie, ...]
    unallocated: int
    applied_ties: tuple[TieResolution, ...] = ()
    worksheet_decimals: int | None = None

    def __repr__(self) -> str:
        # Sets are shown sorted so that logs and snapshots do not depend on hash seeds.
        parts = []
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, frozenset):
                value = "{" + ", ".join(repr(v) for v in sorted(value)) + "}"
            else:
                value = repr(value)
            parts.append(f"{f.name}={value}")
        return f"Allocation({', '.join(parts)})"

    @property
    def settled(self) -> bool:
        """True when no coin toss or lot is outstanding."""
        return not self.pending

    @property
    def awarded(self) -> int:
        """Number of delegates awarded so far (settled seats)."""
        return sum(self.delegates.values())

    @cached_property
    def raw(self) -> Counts[Fraction]:
        """Exact ``members * D / T`` of each group sharing the delegates (§5.1).

        Empty for D <= 1 (no proportional formula) and for T = 0.  With a rule set
        that keeps worksheet decimals, the rounded value that was compared.
        """
        d, t = self.unit_delegates, self.attendance
        if d < 2 or t == 0:
            return Counts()
        if self.worksheet_decimals is None:
            return Counts({g: Fraction(self.final[g] * d, t) for g in self.eligible})
        p = 10**self.worksheet_decimals
        return Counts({g: Fraction((2 * self.final[g] * d * p + t) // (2 * t), p) for g in self.eligible})


_FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in fields(Allocation))
_new = object.__new__


def _build(*values: object) -> Allocation:
    """Construct an :class:`Allocation` from already validated values, in field order.

    The generated ``__init__`` of a frozen dataclass sets each of its sixteen
    fields through ``object.__setattr__``; on the hot path (tens of thousands of
    allocations per second when a log is replayed) filling ``__dict__`` at once
    is several times cheaper.  Only this module calls it, with trusted values.
    """
    obj = _new(Allocation)
    obj.__dict__.update(zip(_FIELD_NAMES, values))
    return obj


_NO_TIES = _TieBook(())  # shared: ``take`` on an empty book never changes it


# --------------------------------------------------------------------------- validation


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


def _check_unit_int(field: str, value: object, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise CaucusMathError(field, f"must be an integer, got {value!r}")
    if value < minimum:
        raise CaucusMathError(field, f"must be >= {minimum}, got {value}")
    return int(value)


# --------------------------------------------------------------------------- the formula


def _distribute(
    names: Sequence[str],
    sizes: Sequence[int],
    delegates: int,
    attendance: int,
    leftover: LeftoverRule,
    decimals: int | None,
    book: _TieBook,
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
        positive = [i for i in order if rems[i] > 0]
        seats = min(left, len(positive))
        tie = _give(names, positive, rems, seats, alloc, book, "remainder", delegates)
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
    book: _TieBook,
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
    book: _TieBook,
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


# --------------------------------------------------------------------------- entry point


def allocate(
    *,
    delegates: int,
    attendance: int | None,
    first: Mapping[str, int],
    final: Mapping[str, int],
    ties: Sequence[TieResolution] = (),
    rule_set: str = "idp-2020",
    leftover: LeftoverRule = "round_robin",
    realign_ties: RealignTieRule = "all",
    no_majority: NoMajorityRule = "plurality",
    recompute_threshold_at_final: bool = False,
    worksheet_decimals: int | None = None,
    check_totals: bool = True,
) -> Allocation:
    """Compute a unit's delegates under explicitly given rule options.

    Prefer ``get_rule_set(name).allocate(...)``; this function is the engine
    behind it.  ``attendance`` is T, the headcount before the first alignment;
    ``None`` means "not reported": the first-alignment total stands in (§1).

    Raises :class:`CaucusMathError` for input no caucus can produce: negative or
    non-integer counts, an overcount (first-alignment total above T), a final
    total above T (§4.4: nobody new is admitted). ``check_totals=False`` computes
    such input anyway, with T as given: the auditor must say what the rules give
    for a published result that breaks §4.4 (RULES §1, §12: T stays the
    denominator), not refuse to look at it.
    """
    d = delegates if type(delegates) is int and delegates >= 0 else _check_unit_int("delegates", delegates)
    first_c = validate_counts("first", first)
    final_c = validate_counts("final", final)
    sum_first = sum(first_c.values())
    sum_final = sum(final_c.values())
    if attendance is None:
        t = sum_first
    else:
        t = attendance if type(attendance) is int and attendance >= 0 else _check_unit_int("attendance", attendance)
        if sum_first > t and check_totals:
            raise CaucusMathError(
                "first",
                f"first-alignment total {sum_first} exceeds the {t} attendees counted at the start (overcount)",
                "RULES §2 step 3",
            )
    if sum_final > t and check_totals:
        raise CaucusMathError(
            "final",
            f"final-alignment total {sum_final} exceeds the {t} attendees counted at the start; "
            "nobody new is admitted",
            "RULES §4.4",
        )
    if worksheet_decimals is not None and decimals_bad(worksheet_decimals):
        raise CaucusMathError("worksheet_decimals", f"must be None or an integer >= 0, got {worksheet_decimals!r}")
    book = _TieBook(ties) if ties else _NO_TIES

    if first_c.keys() != final_c.keys():
        for k in final_c.keys() - first_c.keys():
            first_c[k] = 0
        for k in first_c.keys() - final_c.keys():
            final_c[k] = 0
    first_s, final_s = first_c, final_c
    names = final_s

    if d == 0:
        empty: frozenset[str] = frozenset()
        return _build(
            rule_set, 0, t, 0, 0, Counts._trusted(first_s), Counts._trusted(final_s), empty, empty,
            empty, empty, Counts._trusted(dict.fromkeys(names, 0)), (), 0, tuple(book.applied), worksheet_decimals,
        )

    thr = _threshold(t, d)
    final_thr = _threshold(sum_final, d) if recompute_threshold_at_final else thr
    viable_first = frozenset([k for k, v in first_s.items() if v and v >= thr])
    viable_list = sorted([(k, v) for k, v in final_s.items() if v and v >= final_thr])
    viable_final = frozenset([k for k, _ in viable_list])

    if d == 1:
        eligible, winner, tie = one_delegate_winner(sorted(final_s.items()), final_thr, no_majority, book)
        result = dict.fromkeys(names, 0)
        if winner is not None:
            result[winner] = 1
        return _build(
            rule_set, d, t, thr, final_thr, Counts._trusted(first_s), Counts._trusted(final_s), viable_first,
            viable_final, frozenset(), eligible, Counts._trusted(result), (tie,) if tie else (),
            0 if (winner is not None or tie is not None) else 1, tuple(book.applied), worksheet_decimals,
        )

    must_realign: frozenset[str] = frozenset()
    if len(viable_list) > d:
        cut = _cut(viable_list, d, realign_ties, book)
        must_realign = cut.must_realign
        if cut.pending is not None:
            return _pending_realignment(
                cut.pending, cut.keep, must_realign, names, first_s, final_s, d, t, thr, final_thr,
                viable_first, viable_final, rule_set, leftover, worksheet_decimals, book,
            )
        viable_list = [(k, v) for k, v in viable_list if k in cut.keep]

    group_names = [k for k, _ in viable_list]
    alloc, tie, unallocated = _distribute(
        group_names, [v for _, v in viable_list], d, t, leftover, worksheet_decimals, book
    )
    result = dict.fromkeys(names, 0)
    for k, a in zip(group_names, alloc):
        result[k] = a
    return _build(
        rule_set, d, t, thr, final_thr, Counts._trusted(first_s), Counts._trusted(final_s), viable_first,
        viable_final, must_realign, frozenset(group_names), Counts._trusted(result), (tie,) if tie else (),
        unallocated, tuple(book.applied), worksheet_decimals,
    )


def decimals_bad(value: object) -> bool:
    """True unless ``value`` is None or a non-negative int (worksheet decimals option)."""
    if value is None:
        return False
    return isinstance(value, bool) or not isinstance(value, int) or value < 0


def _pending_realignment(
    tie: PendingTie,
    keep: frozenset[str],
    must_realign: frozenset[str],
    names: dict[str, int],
    first_s: dict[str, int],
    final_s: dict[str, int],
    d: int,
    t: int,
    thr: int,
    final_thr: int,
    viable_first: frozenset[str],
    viable_final: frozenset[str],
    rule_set: str,
    leftover: LeftoverRule,
    decimals: int | None,
    book: _TieBook,
) -> Allocation:
    """A §4.5 lot is outstanding: settled seats are those every outcome of the lot gives."""
    settled = dict.fromkeys(names, d)
    for winners in combinations(tie.contenders, tie.seats):
        staying = sorted(keep | set(winners))
        alloc, _, _ = _distribute(staying, [final_s[k] for k in staying], d, t, leftover, decimals, _TieBook(()))
        got = dict(zip(staying, alloc))
        for k in names:
            v = got.get(k, 0)
            if v < settled[k]:
                settled[k] = v
    return _build(
        rule_set, d, t, thr, final_thr, Counts._trusted(first_s), Counts._trusted(final_s), viable_first,
        viable_final, must_realign, keep | frozenset(tie.contenders), Counts._trusted(settled), (tie,), 0,
        tuple(book.applied), decimals,
    )
