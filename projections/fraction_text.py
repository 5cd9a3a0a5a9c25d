"""How an exact fraction is spelled in stores, states and JSON: ``"numerator/denominator"``.

One spelling, so a tally written by one process reads back exactly in another and SDEs never pass
through a float.
"""

from __future__ import annotations

from fractions import Fraction

__all__ = ["fraction_text", "parse_fraction"]


def fraction_text(value: Fraction) -> str:
    return f"{value.numerator}/{value.denominator}"


def parse_fraction(text: str) -> Fraction:
    num, _, den = text.partition("/")
    return Fraction(int(num), int(den or 1))
