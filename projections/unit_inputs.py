"""A unit's T and D, and where each comes from, for its tally (RULES §3, §8).

Why apart: the tally and its readers name the source of each (reported, opened, first alignment;
apportioned, attendance), and the threshold needs only these two, even where no allocation can be made.
"""

from __future__ import annotations

from ledger.caucus_math import CaucusMathError, satellite_delegates
from ledger.events import UnitDefinition
from projections.election_context import ElectionContext
from projections.reducers import UnitState

__all__ = ["unit_attendance", "unit_delegates", "threshold_alone"]


def unit_attendance(state: UnitState, first: dict[str, int]) -> tuple[int | None, str | None]:
    """T and where it comes from: the report, else the opening headcount, else the first alignment."""
    result = state.result
    if result is not None and result.attendance is not None:
        return result.attendance, "reported"
    if state.attendance_opened is not None:
        return state.attendance_opened, "opened"
    if result is not None:
        return sum(first.values()), "first_alignment"
    return None, None


def unit_delegates(unit: UnitDefinition | None, attendance: int | None, problems: list[str]) -> tuple[int | None, str | None]:
    """D: apportioned by the definition, or (a satellite) from its attendance by the §8 table."""
    if unit is None:
        return None, None
    if unit.delegates is not None:
        return unit.delegates, "apportioned"
    if attendance is None:
        return None, None
    try:
        return satellite_delegates(attendance), "attendance"
    except CaucusMathError as exc:
        problems.append(str(exc))
        return None, None


def threshold_alone(ctx: ElectionContext, attendance: int | None, delegates: int | None) -> int | None:
    """The threshold from T and D (RULES §3) where the allocation could not be computed (a final total
    above T, say): it depends on neither alignment, and a reader checking the report needs it most there."""
    if ctx.rules is None or attendance is None or delegates is None:
        return None
    try:
        return ctx.rules.threshold(attendance, delegates)
    except CaucusMathError:
        return None
