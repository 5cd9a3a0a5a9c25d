"""Satellite caucuses (RULES.md §8): delegates from attendance, SDEs from a pool.

Why satellites need their own arithmetic: they have no apportioned D.  The APP
derived D from the headcount (``calculateSatelliteDelegates``), and the party
gave each of the five satellite groups a fixed pool of State Delegate
Equivalents, shared in proportion to attendance.

What the certified 2020 data show about the pool shares (every one of the 87
satellites' published SDEs reproduces exactly):

* a satellite's SDE weight is ``T_u * pool / base``, where ``T_u`` is the unit's
  headcount and ``base`` is the sum of the headcounts of its group;
* the bases are 452 (CD1), 943 (CD2), 1,567 (CD3), 141 (CD4) and 1,187 (out of
  state): the group's first-alignment totals (379, 941, 1,545, 139, 1,186) with
  seven headcounts that differ from the published first alignment (the headcount
  counted at the start exceeds the first-alignment total, or was corrected
  after the weights were fixed);
* one CD1 satellite's weight reproduces only with a base of 448, the CD1 total
  of the 2020-02-08 release (when another CD1 site still showed 112 attendees):
  its weight was apparently not recomputed after that correction;
* candidate SDE = weight * CDs won / D.

So the per-attendee constants of RULES §8 are exactly ``pool / base``
(6/452, 11/943, 18/1567, 4/141, 4/1187).  The unit data (headcounts, bases)
belong to the election's reference data; this module only provides the
functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from types import MappingProxyType

from .errors import CaucusMathError

__all__ = [
    "SATELLITE_DELEGATE_BANDS",
    "SATELLITE_SDE_POOLS_2020",
    "satellite_delegates",
    "satellite_sde_weight",
    "satellite_sde_ratio",
]

SATELLITE_DELEGATE_BANDS: tuple[tuple[int, int], ...] = ((20, 4), (40, 5), (60, 6), (80, 7), (100, 8))
"""(largest attendance, delegates) bands of the APP table; above 100 attendees: 9."""

SATELLITE_SDE_POOLS_2020: Mapping[str, int] = MappingProxyType(
    {
        "CD1 Satellite": 6,
        "CD2 Satellite": 11,
        "CD3 Satellite": 18,
        "CD4 Satellite": 4,
        "Out of State Satellite": 4,
    }
)
"""State delegates each satellite group shares (43 in all; 2,107 + 43 = 2,150)."""


def _int(field: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise CaucusMathError(field, f"must be an integer, got {value!r}")
    if value < 0:
        raise CaucusMathError(field, f"must be >= 0, got {value}")
    return int(value)


def satellite_delegates(attendance: int) -> int:
    """County delegates a satellite elects, from its headcount (APP table, §8).

    1-20 -> 4, 21-40 -> 5, 41-60 -> 6, 61-80 -> 7, 81-100 -> 8, more -> 9; a
    satellite nobody attended elects nobody.
    """
    a = _int("satellite_attendance", attendance)
    if a == 0:
        return 0
    for upper, delegates in SATELLITE_DELEGATE_BANDS:
        if a <= upper:
            return delegates
    return 9


def satellite_sde_weight(attendance: int, pool: int | Fraction, pool_attendance: int) -> Fraction:
    """A satellite's share of its group's SDE pool: ``attendance * pool / pool_attendance``."""
    a = _int("satellite_attendance", attendance)
    base = _int("pool_attendance", pool_attendance)
    if not isinstance(pool, (int, Fraction)) or isinstance(pool, bool) or pool < 0:
        raise CaucusMathError("pool", f"must be a non-negative int or Fraction, got {pool!r}")
    if base == 0:
        if a:
            raise CaucusMathError("pool_attendance", "is 0 but this satellite had attendees", "RULES §8")
        return Fraction(0)
    if a > base:
        raise CaucusMathError(
            "satellite_attendance", f"{a} exceeds the attendance of the whole group ({base})", "RULES §8"
        )
    return Fraction(pool) * a / base


def satellite_sde_ratio(weight: Fraction, delegates: int) -> Fraction:
    """SDEs per county delegate at a satellite: its weight shared over its D delegates."""
    d = _int("delegates", delegates)
    if d == 0:
        if weight:
            raise CaucusMathError("delegates", "a satellite with an SDE weight must elect delegates", "RULES §8")
        return Fraction(0)
    return Fraction(weight) / d
