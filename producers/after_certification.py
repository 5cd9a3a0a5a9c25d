"""A command recorded after its election was certified: accepted, with a warning that says so.

A certification covers the results that stood when it was recorded. A recount or a late report after
it is lawful and the ledger records it, but the sender must hear that the certified numbers no longer
stand alone (the unit's tally marks it ``after certification`` and the audit names it,
``CHANGED_AFTER_CERTIFICATION``); before, the receipt said nothing, and nor did the audit.
"""

from __future__ import annotations

from ledger.events import Problem
from producers.intake_state import IntakeView

__all__ = ["late_notice"]


def late_notice(election_id: str, view: IntakeView, what: str) -> Problem | None:
    """The warning for a ``what`` (a report, a correction, ...) of a certified election, else None."""
    certification = view.certified_by(election_id)
    if certification is None:
        return None
    return Problem("election_id", "AFTER_CERTIFICATION",
                   f"election {election_id!r} was certified (event {certification}); this {what} is recorded after "
                   "it, so the certification does not cover it: the unit's tally shows it as after certification")
