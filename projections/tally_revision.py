"""Which code computed a stored or published tally.

Why apart from the tallies: the store's mark, the feed's record ids and the read API's ETags all carry it,
and none of them needs the tally code itself.
"""

from __future__ import annotations

from ledger.caucus_math import RULES_REVISION

__all__ = ["TALLY_CODE", "TALLIES_REVISION"]

TALLY_CODE = 5
"""Bumped whenever ``compute_unit_tally`` gives another tally for the same state and rules (2: the
standing tosses a result does not use, ``tosses_unused``; 3: the 2016 leftover lot only for delegates
past one more per group, RULES §5.5, so a tie at the first round's cut is a tie among those groups; 4: a
pending realignment lot's reason says its winners are the groups that stay, as its seats count them;
5: the threshold shown where the allocation cannot be computed, from T and D alone: a report whose
final total exceeds T, a unit opened but not reported yet, RULES §2.2)."""

TALLIES_REVISION = f"tallies v{TALLY_CODE};{RULES_REVISION}"
"""What a stored or published tally was computed by: this code and every rule set's meaning. A store's
mark, a feed record's id and a read-API ETag carry it, so tallies of older code are computed again,
published again, and not answered 304."""
