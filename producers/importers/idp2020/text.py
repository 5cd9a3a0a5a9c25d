"""Cleaning the published text: names, counts and SDE values as the scrapes have them.

The results site double-escaped some names (``&amp;amp;``), padded others with spaces (``Guthrie ``,
``Council Bluff  04``) and printed SDEs through binary floats (``0.07840000000000001``). Names are
compared by a key that survives all of that; values are parsed exactly.
"""

from __future__ import annotations

import html
import re
from functools import lru_cache
from decimal import Decimal, InvalidOperation

__all__ = ["decode_name", "name_key", "parse_count", "parse_sde", "SDE_PLACES"]

SDE_PLACES = Decimal("0.0001")
_SPACES = re.compile(r"\s+")


@lru_cache(maxsize=65536)
def decode_name(raw: str) -> str:
    """Undo HTML escaping as often as it was applied (the site escaped some names twice) and tidy spaces."""
    text = raw
    for _ in range(4):
        decoded = html.unescape(text)
        if decoded == text:
            break
        text = decoded
    return _SPACES.sub(" ", text).strip()


@lru_cache(maxsize=65536)
def name_key(county: str, name: str) -> tuple[str, str]:
    """The key two spellings of one unit share: decoded, single-spaced, case-folded."""
    return decode_name(county).casefold(), decode_name(name).casefold()


def parse_count(raw: str) -> int:
    """A head count: a non-negative whole number (``"12"``, ``"12.0"``)."""
    try:
        value = Decimal(raw.strip())
    except InvalidOperation:
        raise ValueError(f"not a number: {raw!r}") from None
    if value != value.to_integral_value() or value < 0:
        raise ValueError(f"not a non-negative whole number: {raw!r}")
    return int(value)


def parse_sde(raw: str) -> Decimal:
    """An SDE as displayed (4 decimals); float noise such as ``0.15690000000000004`` is rounded away."""
    try:
        value = Decimal(raw.strip())
    except InvalidOperation:
        raise ValueError(f"not a number: {raw!r}") from None
    if value < 0 or not value.is_finite():
        raise ValueError(f"not a non-negative SDE: {raw!r}")
    return value.quantize(SDE_PLACES)
