"""Recovering county delegates (CDs) from the SDEs the site published.

The site never published CDs. For a precinct, candidate SDE = CDs × county ratio, shown to 4 decimals,
so ``CDs = round(SDE ÷ ratio)`` and the display must be reproduced (RULES.md §9; exact for every
precinct in all three releases). For a satellite, candidate SDE = weight × CDs ÷ D where D follows
attendance (RULES.md §8). Neither weight nor D is published, and only their quotient (SDE per CD) can
be read off the display: D is tried from the attendance table (Σ first alignment), then one above and
one below it (three certified satellites report one CD more than the table gives their first alignment),
and the result
is the open interval of SDE per CD that shows every displayed value. ``satellites`` turns those
intervals into weights.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

__all__ = [
    "HALF_UNIT", "precinct_delegates", "satellite_table_delegates", "SatelliteFit", "fit_satellite", "shortest_decimal_in",
]  # fmt: skip

HALF_UNIT = Fraction(1, 20000)  # half of the last displayed digit (4 decimals)


def precinct_delegates(sde: Mapping[str, Decimal], ratio: Fraction) -> tuple[dict[str, int], list[str]]:
    """CDs per candidate and the candidates whose displayed SDE the recovered CDs do not reproduce."""
    cds: dict[str, int] = {}
    misfits: list[str] = []
    for candidate, shown in sde.items():
        value = Fraction(shown)
        cds[candidate] = round(value / ratio)
        if abs(cds[candidate] * ratio - value) > HALF_UNIT:
            misfits.append(candidate)
    return cds, misfits


def satellite_table_delegates(attendance: int) -> int:
    """D of a satellite by attendance (RULES.md §8: 1–20 → 4, each further 20 one more, > 100 → 9)."""
    if attendance <= 0:
        return 0
    return min(9, 4 + (attendance - 1) // 20)


@dataclass(frozen=True, slots=True)
class SatelliteFit:
    delegates: dict[str, int]
    unit_delegates: int  # Σ CDs the SDE split implies
    table_delegates: int  # D the attendance table gives for Σ first alignment
    per_delegate: tuple[Fraction, Fraction] | None  # open interval of SDE per CD that shows every SDE

    def weight_bounds(self, delegates: int) -> tuple[Fraction, Fraction] | None:
        """Weights w for which w × CDs ÷ ``delegates`` shows every displayed SDE."""
        if self.per_delegate is None:
            return None
        lo, hi = self.per_delegate
        return lo * delegates, hi * delegates

    @property
    def note(self) -> str | None:
        if self.unit_delegates == self.table_delegates:
            return None
        return f"reported CDs sum to {self.unit_delegates}; the attendance table gives {self.table_delegates}"


def fit_satellite(sde: Mapping[str, Decimal], attendance: int) -> SatelliteFit | None:
    """CDs and SDE per CD that reproduce a satellite's displayed SDEs, or None when no D near the
    attendance table splits them into whole delegates."""
    shown = {c: Fraction(v) for c, v in sde.items()}
    total = sum(shown.values(), Fraction(0))
    table = satellite_table_delegates(attendance)
    if total == 0:
        return SatelliteFit({c: 0 for c in shown}, 0, table, None)
    for d in dict.fromkeys(x for x in (table, table + 1, table - 1) if x >= 1):
        cds = {c: round(v * d / total) for c, v in shown.items()}
        if sum(cds.values()) != d:
            continue
        bounds = _weight_bounds(shown, cds, d)
        if bounds is not None:
            return SatelliteFit(cds, d, table, (bounds[0] / d, bounds[1] / d))
    return None


def shortest_decimal_in(bounds: tuple[Fraction, Fraction], prefer: Fraction) -> Fraction:
    """``prefer`` if it lies in the open interval, else the decimal with fewest digits there, nearest ``prefer``."""
    return _shortest_decimal(*bounds, prefer=prefer)


def _weight_bounds(shown: Mapping[str, Fraction], cds: Mapping[str, int], d: int) -> tuple[Fraction, Fraction] | None:
    """The open interval of weights w for which w × CDs ÷ d lies strictly within half a digit of
    every displayed SDE. Open, because a value exactly on a half would round either way: the site
    shows 0.08425 as 0.0842 in one unit and 0.06895 as 0.0690 in another."""
    lo, hi = Fraction(0), None
    for candidate, value in shown.items():
        won = cds[candidate]
        if won == 0:
            if value != 0:
                return None
            continue
        lo = max(lo, (value - HALF_UNIT) * d / won)
        top = (value + HALF_UNIT) * d / won
        hi = top if hi is None else min(hi, top)
    if hi is None or lo >= hi:
        return None
    return lo, hi


def _shortest_decimal(lo: Fraction, hi: Fraction, *, prefer: Fraction) -> Fraction:
    """``prefer`` if it lies in (lo, hi), else the decimal with fewest digits there, nearest ``prefer``."""
    if lo < prefer < hi:
        return prefer
    for digits in range(1, 16):
        step = Fraction(1, 10**digits)
        first, last = math.floor(lo / step) + 1, math.ceil(hi / step) - 1
        if first <= last:
            return min(max(round(prefer / step), first), last) * step
    return (lo + hi) / 2
