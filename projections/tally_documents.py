"""The JSON documents of a tally: statewide, one county with its units, one unit.

Why a module of their own: ``caucus tally --json`` and the read API (``caucus serve results``) must
give the same numbers in the same shape, so both build their documents here from one ``TallyView``.
"""

from __future__ import annotations

from typing import Any

from projections.queries import TallyView
from projections.tally import AreaTally

__all__ = ["state_document", "county_document", "unit_document"]


def state_document(view: TallyView, area: AreaTally | None = None) -> dict[str, Any]:
    """The statewide sums (``area``: already summed by the caller), and the units that reported but are
    not in the definition (in no sum)."""
    area = view.state() if area is None else area
    return {**view.meta(), "state": area.to_json(), "undefined_units": [u.unit_id for u in view.undefined_units]}


def county_document(view: TallyView, county_id: str) -> dict[str, Any]:
    """One county's sums and every unit of it the view holds."""
    return {**view.meta(), "county": view.county(county_id).to_json(), "units": [u.to_json() for u in view.units_in(county_id)]}


def unit_document(view: TallyView, unit_id: str) -> dict[str, Any] | None:
    """One unit's tally; a defined unit with no result yet is ``not_reported``, as a county lists it, so
    that "has it reported?" gets an answer rather than a 404 (None: the election has no such unit)."""
    t = view.unit(unit_id)
    return None if t is None else {**view.meta(), "unit": t.to_json()}
