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

from ._counts import Counts
from .errors import CaucusMathError
from .one_delegate import NoMajorityRule, one_delegate_winner
from ._core import (
    NO_TIES,
    LeftoverRule,
    RealignTieRule,
    TieBook,
    check_int,
    distribute,
    realignment_cut,
    threshold_of,
    validate_counts,
)
from .ties import PendingTie, TieResolution

__all__ = ["LeftoverRule", "Allocation", "allocate", "validate_counts"]


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




# --------------------------------------------------------------------------- validation


# --------------------------------------------------------------------------- the formula


# --------------------------------------------------------------------------- entry point


def _checked_inputs(
    delegates: int,
    attendance: int | None,
    first: Mapping[str, int],
    final: Mapping[str, int],
    worksheet_decimals: int | None,
    check_totals: bool,
) -> tuple[int, int, dict[str, int], dict[str, int], int]:
    """D, T, both alignments over the same candidates (0 where one names a group the other does not)
    and the final total; CaucusMathError for input no caucus can produce (see ``allocate``)."""
    d = delegates if type(delegates) is int and delegates >= 0 else check_int("delegates", delegates)
    first_c = validate_counts("first", first)
    final_c = validate_counts("final", final)
    sum_first = sum(first_c.values())
    sum_final = sum(final_c.values())
    if attendance is None:
        t = sum_first
    else:
        t = attendance if type(attendance) is int and attendance >= 0 else check_int("attendance", attendance)
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

    if first_c.keys() != final_c.keys():
        for k in final_c.keys() - first_c.keys():
            first_c[k] = 0
        for k in first_c.keys() - final_c.keys():
            final_c[k] = 0
    return d, t, first_c, final_c, sum_final


def allocate(
    *,
    delegates: int,
    attendance: int | None,
    first: Mapping[str, int],
    final: Mapping[str, int],
    ties: Sequence[TieResolution] = (),
    rule_set: str = "idp-2020",
    leftover: LeftoverRule = "round_robin",
    realign_ties: RealignTieRule = "lots",
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
    d, t, first_s, final_s, sum_final = _checked_inputs(delegates, attendance, first, final, worksheet_decimals, check_totals)
    book = TieBook(ties) if ties else NO_TIES
    names = final_s

    if d == 0:
        empty: frozenset[str] = frozenset()
        return _build(
            rule_set, 0, t, 0, 0, Counts._trusted(first_s), Counts._trusted(final_s), empty, empty,
            empty, empty, Counts._trusted(dict.fromkeys(names, 0)), (), 0, tuple(book.applied), worksheet_decimals,
        )

    thr = threshold_of(t, d)
    final_thr = threshold_of(sum_final, d) if recompute_threshold_at_final else thr
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
        cut = realignment_cut(viable_list, d, realign_ties, book)
        must_realign = cut.must_realign
        if cut.pending is not None:
            return _pending_realignment(
                cut.pending, cut.keep, must_realign, names, first_s, final_s, d, t, thr, final_thr,
                viable_first, viable_final, rule_set, leftover, worksheet_decimals, book,
            )
        viable_list = [(k, v) for k, v in viable_list if k in cut.keep]

    group_names = [k for k, _ in viable_list]
    alloc, tie, unallocated = distribute(
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
    book: TieBook,
) -> Allocation:
    """A §4.5 lot is outstanding: settled seats are those every outcome of the lot gives."""
    settled = dict.fromkeys(names, d)
    for winners in combinations(tie.contenders, tie.seats):
        staying = sorted(keep | set(winners))
        alloc, _, _ = distribute(staying, [final_s[k] for k in staying], d, t, leftover, decimals, TieBook(()))
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
