"""The candidates of a published tally as one list in ballot order, with vote shares.

Why: the tally's maps (first, final, cds, SDEs) are keyed by candidate and carry no order; a results
desk reads a list of candidates in the order of the ballot, with each one's share of the votes. The
shares are computed exactly and rounded once, half up, for display (RULES: exact arithmetic, rounding
only for display); the counts they come from are beside them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["candidate_results", "percent_text"]


def percent_text(part: int, whole: int) -> str:
    """``part / whole`` as a percentage with 2 decimals, half up; ``0.00`` when ``whole`` is 0."""
    if whole <= 0:
        return "0.00"
    hundredths = (part * 20000 + whole) // (2 * whole)  # part / whole x 10,000, rounded half up, in integers
    sign = "-" if hundredths < 0 else ""
    return f"{sign}{abs(hundredths) // 100}.{abs(hundredths) % 100:02d}"


def candidate_results(
    ballot: Sequence[str],
    first: Mapping[str, int],
    final: Mapping[str, int],
    cds: Mapping[str, int],
    sde_display: Mapping[str, Any],
) -> list[dict[str, Any]]:
    """Every candidate of the ballot, then any other group the tally names (by name), each with its
    votes and shares of both alignments, county delegates and displayed SDEs."""
    listed = list(dict.fromkeys(ballot))
    others = sorted((set(first) | set(final) | set(cds) | set(sde_display)) - set(listed))
    first_total, final_total = sum(first.values()), sum(final.values())
    out = []
    for order, name in enumerate(listed + others, start=1):
        f1, f2 = int(first.get(name, 0)), int(final.get(name, 0))
        out.append({
            "name": name, "display_name": name, "ballot_order": order,
            "first_votes": f1, "first_pct": percent_text(f1, first_total),
            "final_votes": f2, "final_pct": percent_text(f2, final_total),
            "cds": int(cds.get(name, 0)), "sde_display": str(sde_display.get(name, "0.0000")),
        })  # fmt: skip
    return out
