"""State Delegate Equivalents (RULES.md §9): exact values, display values, inverse.

Why exact ratios: a county's ratio is state delegates / county delegates (Lee
21/150, Black Hawk 101/500, Adair 4/51).  Stored as a ``Fraction``, a
candidate's SDE is exact and sums are exact; the results site showed each value
rounded to 4 decimals and added the *displayed* values for county and state
totals (Buttigieg 562.9538 as displayed and summed; exactly 562.952994...).
Both are derived here from the same exact data, so a replay can reproduce either.

Display rounding: rounding half up reproduces all 24,710 published unit values
of the certified release; truncation (1,078 mismatches) and rounding up (1,762)
do not.  No exact half ever occurs in the data, so half-up and half-even agree
on it; half-up is what the site's ``toFixed(4)`` does.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal
from fractions import Fraction

from .errors import CaucusMathError

__all__ = [
    "SDE_PLACES",
    "county_sde_ratio",
    "sde_for",
    "display_sde",
    "sum_displayed",
    "cds_from_sde",
]

SDE_PLACES = 4
_QUANT = Decimal(1).scaleb(-SDE_PLACES)


def county_sde_ratio(state_delegates: int | Fraction, county_delegates: int) -> Fraction:
    """A county's SDEs per county delegate: ``state_delegates / county_delegates`` (§9).

    Constant within a county; verified for all 99 counties of the 2020 apportionment.
    """
    if isinstance(state_delegates, bool) or not isinstance(state_delegates, (int, Fraction)):
        raise CaucusMathError("state_delegates", f"must be an int or Fraction, got {state_delegates!r}")
    if state_delegates < 0:
        raise CaucusMathError("state_delegates", f"must be >= 0, got {state_delegates}")
    if isinstance(county_delegates, bool) or not isinstance(county_delegates, int) or county_delegates <= 0:
        raise CaucusMathError("county_delegates", f"must be a positive integer, got {county_delegates!r}")
    return Fraction(state_delegates) / county_delegates


def sde_for(cds: int, ratio: Fraction) -> Fraction:
    """Exact SDEs of ``cds`` county delegates at ``ratio`` SDE per delegate."""
    if isinstance(cds, bool) or not isinstance(cds, int) or cds < 0:
        raise CaucusMathError("cds", f"must be an integer >= 0, got {cds!r}")
    if isinstance(ratio, bool) or not isinstance(ratio, (int, Fraction)) or ratio < 0:
        raise CaucusMathError("ratio", f"must be a non-negative Fraction, got {ratio!r}")
    return cds * Fraction(ratio)


def display_sde(value: Fraction) -> Decimal:
    """The value as the results site showed it: 4 decimals, halves rounded up.

    Computed on the exact rational (not via a float), so the rounding is decided
    by the true value.  Negative values (differences between releases) round
    half away from zero, like ``Decimal.ROUND_HALF_UP``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, Fraction)):
        raise CaucusMathError("value", f"must be an int or Fraction, got {value!r}")
    v = Fraction(value)
    scaled = abs(v) * 10**SDE_PLACES
    units = (2 * scaled.numerator + scaled.denominator) // (2 * scaled.denominator)
    if v < 0:
        units = -units
    return Decimal(units).scaleb(-SDE_PLACES).quantize(_QUANT)


def sum_displayed(values: Iterable[Fraction]) -> Decimal:
    """Sum of display values, the way county and state totals were published."""
    return sum((display_sde(v) for v in values), Decimal(0)).quantize(_QUANT)


def cds_from_sde(sde: Decimal | Fraction, ratio: Fraction) -> int:
    """Recover county delegates from a published SDE: ``round(SDE / ratio)`` (§9 inverse).

    Raises if the result is not within half a display unit of an exact multiple,
    i.e. if the published value cannot come from a whole number of delegates.
    """
    if ratio <= 0:
        raise CaucusMathError("ratio", f"must be positive to invert, got {ratio!r}")
    s = Fraction(sde)
    if s < 0:
        raise CaucusMathError("sde", f"must be >= 0, got {sde}")
    q = s / ratio
    cds = (2 * q.numerator + q.denominator) // (2 * q.denominator)
    if abs(cds * ratio - s) > Fraction(1, 2 * 10**SDE_PLACES):
        raise CaucusMathError(
            "sde", f"{sde} is not a whole number of county delegates at ratio {ratio}", "RULES §9"
        )
    return cds
