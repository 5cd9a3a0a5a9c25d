"""Viability thresholds (RULES.md §3).

Why integers: the APP tests ``members / T >= share`` in floating point; for an
integer group size that is exactly ``members >= ceil(share * T)``.  Computing the
ceiling with integer division keeps the rule exact for every T (floating point
and the Warren calculator's ``ceil(T / 6.67)`` disagree from T = 667 on) and lets
the hot path compare plain ints.

The bands are the same in 2016 and 2020 (IDPMED16; APP ``calculateThreshold``):

====  ===============  ==============================
D     share            integer threshold
====  ===============  ==============================
1     1/2 (majority)   ``ceil(T/2)``  (informational, §7)
2     1/4              ``ceil(T/4)``
3     1/6              ``ceil(T/6)``
>= 4  15/100           ``ceil(15 T / 100)``
====  ===============  ==============================
"""

from __future__ import annotations

from fractions import Fraction

from ._core import check_int, threshold_of

__all__ = ["viability_share", "viability_threshold", "is_viable"]

_SHARES: dict[int, Fraction] = {1: Fraction(1, 2), 2: Fraction(1, 4), 3: Fraction(1, 6)}
_SHARE_4_PLUS = Fraction(15, 100)


def viability_share(delegates: int) -> Fraction:
    """The share of attendance a group needs, by the number of delegates D (§3).

    A unit electing no delegates has no viability question at all, so D = 0 is
    rejected here rather than given an arbitrary share.
    """
    check_int("delegates", delegates, 1)
    return _SHARES.get(delegates, _SHARE_4_PLUS)


def viability_threshold(attendance: int, delegates: int) -> int:
    """Smallest group size that is viable: ``ceil(share(D) * T)`` (§3).

    Rounding is always up, and a group of exactly the threshold is viable
    (T = 124, D = 14 gives 19; Black Hawk WL 2-4 had a viable group of 19).
    T is the headcount taken before the first alignment; the threshold is not
    recomputed for the final alignment in 2020 (§4.6).
    """
    check_int("attendance", attendance, 0)
    check_int("delegates", delegates, 1)
    return threshold_of(attendance, delegates)


def is_viable(members: int, threshold: int) -> bool:
    """A group is viable when it reaches the threshold and is not empty.

    The emptiness test matters only for T = 0 (threshold 0): a group nobody
    stands in can never elect a delegate.
    """
    return members > 0 and members >= threshold
