"""A unit's SDE weight and its candidates' SDEs (RULES.md §8, §9), apart from the rest of its tally.

Why apart: precincts and satellites weigh their SDEs differently (a county ratio per delegate; a
share of the satellite group's pool by attendance), and the 2020 import fixes each satellite's
certified weight in the definition, which wins over both.
"""

from __future__ import annotations

from fractions import Fraction

from ledger.caucus_math import CaucusMathError, satellite_sde_weight
from ledger.events import County, SatelliteGroup, UnitDefinition
from projections.election_context import ElectionContext

__all__ = ["group_of", "unit_sdes"]

_ZERO = Fraction(0)


def group_of(unit: UnitDefinition | None, ctx: ElectionContext) -> SatelliteGroup | None:
    """The satellite group the definition names for ``unit``, if any."""
    defn = ctx.state.definition
    if unit is None or unit.satellite_group is None or defn is None:
        return None
    return next((g for g in defn.satellite_groups if g.group_id == unit.satellite_group), None)


def _sde_weight(
    unit: UnitDefinition,
    county: County | None,
    group: SatelliteGroup | None,
    delegates: int,
    attendance: int | None,
    problems: list[str],
) -> Fraction | None:
    """A unit's SDE weight (§8, §9). A weight the definition gives wins (the 2020 import fixes each
    satellite's certified weight); a satellite's weight is otherwise its share of its group's pool,
    never D x the county ratio: satellites are outside the county apportionment."""
    if unit.sde_weight is not None:
        return unit.sde_weight
    if unit.satellite_group is not None:
        if group is None or group.attendance_base is None:
            problems.append(
                f"satellite_group {unit.satellite_group!r}: no sde_pool and attendance_base to weigh the unit's "
                "SDEs by (RULES §8: weight = attendance x pool / attendance base)"
            )
            return None
        if attendance is None:
            return None
        try:
            return satellite_sde_weight(attendance, group.sde_pool, group.attendance_base)
        except CaucusMathError as exc:
            problems.append(f"satellite SDE weight cannot be computed: {exc}")
            return None
    return delegates * county.sde_ratio if county is not None else None


def unit_sdes(
    unit: UnitDefinition | None,
    county: County | None,
    group: SatelliteGroup | None,
    delegates: int | None,
    attendance: int | None,
    official: dict[str, int],
    cds_source: str | None,
    *,
    reporting: bool,
    problems: list[str],
) -> tuple[Fraction | None, int | None, dict[str, Fraction]]:
    """The unit's SDE weight, the divisor it is shared by, and each candidate's SDEs (§8, §9)."""
    if unit is None or delegates is None:
        return None, None, {}
    weight = _sde_weight(unit, county, group, delegates, attendance, problems)
    # RULES §8: a satellite's candidate SDE is weight x CDs / D. Only a satellite's *reported*
    # delegates are shared over what it reported: three 2020 satellites reported one more than the
    # attendance table gives (§17.4) and their published SDEs split the weight over that total.
    awarded = sum(official.values())
    divisor = awarded if (unit.delegates is None and cds_source == "reported" and awarded > 0) else delegates
    if weight is None or not reporting:
        return weight, divisor, {}
    per_cd = weight / divisor if divisor else Fraction(0)
    return weight, divisor, {c: (per_cd * n if n else _ZERO) for c, n in official.items()}
