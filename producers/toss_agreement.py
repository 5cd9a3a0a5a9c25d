"""A result whose reported delegates give a settled tie's seats otherwise than its toss did: accepted
(the chair's signed worksheet is the legal record, RULES §2.8), with a warning that says so at once.

Once a tie is settled only its outcome is legal (RULES §6). The tally names the contradiction among the
unit's problems and the audit reports it (``TOSS_CONTRADICTED``, error); the sender heard nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

from ledger.caucus_math import Allocation, CaucusMathError, TieResolution, get_rule_set, satellite_delegates, ties_called_for
from ledger.events import Problem, Result
from producers.intake_state import ElectionInfo, IntakeView

__all__ = ["toss_notices"]


def toss_notices(election: ElectionInfo, unit_id: str, result: Result, view: IntakeView) -> list[Problem]:
    """One warning per standing toss of the unit whose outcome ``result``'s reported delegates contradict."""
    reported: Mapping[str, int] | None = result.delegates_reported
    unit = election.units.get(unit_id)
    if not reported or unit is None:
        return []
    first, final = dict(result.first_alignment), dict(result.final_alignment)
    attendance = result.attendance
    rules = get_rule_set(election.definition.rule_set)
    stands: dict[tuple[tuple[str, ...], int], tuple[str, TieResolution]] = {}

    def standing(key: tuple[tuple[str, ...], int]) -> TieResolution | None:
        event_id = view.settled_by((election.election_id, unit_id, *key))
        toss = view.toss(event_id or "")
        if toss is None or event_id is None:
            return None
        stands[key] = (event_id, TieResolution(toss.contenders, toss.seats, toss.winners))
        return stands[key][1]

    try:
        delegates = unit.delegates if unit.delegates is not None else satellite_delegates(attendance or sum(first.values()))

        def allocate(ties: tuple[TieResolution, ...]) -> Allocation:
            return rules.allocate(delegates=delegates, attendance=attendance, first=first, final=final, ties=ties)

        called = ties_called_for(lambda ties: allocate(ties).pending, standing)
        applied = [stands[key] for key in sorted(called) if key in stands]
        computed = allocate(tuple(r for _, r in applied)).delegates
    except CaucusMathError:
        return []  # the result's own errors say why nothing can be computed
    out = []
    for event_id, tie in applied:
        differ = [c for c in tie.contenders if reported.get(c, 0) != computed.get(c, 0)]
        if differ:
            out.append(Problem(
                "delegates_reported", "TOSS_CONTRADICTED",
                f"coin toss {event_id} settled the tie of {tie.seats} seat(s) among {', '.join(tie.contenders)} for "
                f"{', '.join(tie.winners) or 'none'}; the reported delegates give "
                f"{', '.join(f'{c} {reported.get(c, 0)}' for c in differ)}, the toss {', '.join(f'{c} {computed.get(c, 0)}' for c in differ)} "
                "(RULES §6: a settled tie has only its outcome; the reported figure is recorded as sent)"))
    return out
