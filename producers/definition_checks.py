"""What makes an election definition malformed in itself, whatever the ledger already holds: ids listed
twice, candidate names that collide, a county of precincts with a ratio of zero, units naming a county or satellite group the
definition does not have, a precinct without delegates, a satellite weighing more than its group's pool.

Pure and separate from ``producers.validation``, which adds what depends on the ledger (an election
defined twice, a rule set this code does not know)."""

from __future__ import annotations

from typing import Any

from ledger.events import ElectionDefined, Problem
from producers.identifiers import candidate_collisions, id_lookalikes

__all__ = ["definition_problems", "listed_twice"]


def listed_twice(values: Any, where: str, what: str) -> list[Problem]:
    """A DUPLICATE problem for each value met again, naming its place (``contenders.2``)."""
    seen: set[str] = set()
    out = []
    for i, value in enumerate(values):
        if value in seen:
            out.append(Problem(f"{where}.{i}", "DUPLICATE", f"{what} {value!r} is listed more than once"))
        seen.add(value)
    return out


def definition_problems(payload: ElectionDefined) -> list[Problem]:
    """Every structural problem of ``payload``, each naming its field (``units.3.county_id``)."""
    errors: list[Problem] = []
    errors += listed_twice(payload.candidates, "candidates", "candidate")
    errors += candidate_collisions(payload.candidates)
    errors += listed_twice([c.county_id for c in payload.counties], "counties", "county id")
    errors += listed_twice([g.group_id for g in payload.satellite_groups], "satellite_groups", "satellite group id")
    errors += listed_twice([u.unit_id for u in payload.units], "units", "unit id")
    errors += id_lookalikes([c.county_id for c in payload.counties], "counties", "county id")
    errors += id_lookalikes([g.group_id for g in payload.satellite_groups], "satellite_groups", "satellite group id")
    errors += id_lookalikes([u.unit_id for u in payload.units], "units", "unit id")
    errors += _zero_ratios(payload)
    counties = {c.county_id for c in payload.counties}
    groups = {g.group_id for g in payload.satellite_groups}
    pools = {g.group_id: g.sde_pool for g in payload.satellite_groups if g.sde_pool is not None}
    for i, unit in enumerate(payload.units):
        pool = pools.get(unit.satellite_group or "")
        if pool is not None and unit.sde_weight is not None and unit.sde_weight > pool:
            errors.append(Problem(
                f"units.{i}.sde_weight", "SDE_WEIGHT_OVER_POOL",
                f"satellite {unit.unit_id!r} would weigh {unit.sde_weight} SDEs, more than the whole pool of its group "
                f"{unit.satellite_group!r} ({pool}): a satellite's SDEs are its share of the group's pool (RULES §8)"))
        if unit.sde_weight is not None and unit.satellite_group is None:  # it silently replaced D x the county ratio
            errors.append(Problem(f"units.{i}.sde_weight", "NOT_A_SATELLITE", f"unit {unit.unit_id!r} is a precinct: its "
                                  "SDEs are its delegates x its county's ratio (RULES §9); sde_weight is for satellites"))
        if unit.county_id not in counties:
            errors.append(
                Problem(f"units.{i}.county_id", "UNKNOWN_COUNTY", f"unit {unit.unit_id!r} names county {unit.county_id!r}, which is not in counties")
            )
        if unit.satellite_group is not None and unit.satellite_group not in groups:
            errors.append(
                Problem(
                    f"units.{i}.satellite_group",
                    "UNKNOWN_SATELLITE_GROUP",
                    f"unit {unit.unit_id!r} names satellite group {unit.satellite_group!r}, which is not in satellite_groups",
                )
            )
        if unit.satellite_group is None and unit.delegates is None:
            errors.append(
                Problem(
                    f"units.{i}.delegates",
                    "REQUIRED",
                    f"precinct {unit.unit_id!r} needs delegates (D); only satellites may leave it out",
                )
            )
    return errors


def _zero_ratios(payload: ElectionDefined) -> list[Problem]:
    """A precinct's SDEs are its delegates x its county's ratio (RULES §9): a ratio of 0 would weigh them at
    nothing. Only a county of satellites alone may have one (theirs come from their group's pool, §8), as
    the 2020 import's satellite districts do."""
    precinct = {u.county_id: u.unit_id for u in payload.units if u.satellite_group is None}
    return [Problem(f"counties.{i}.sde_ratio", "ZERO_RATIO",
                    f"county {c.county_id!r} has SDE ratio 0 but holds precincts (such as {precinct[c.county_id]!r}), whose "
                    "SDEs are their delegates x the county's ratio (RULES §9): give the state delegates allotted to the "
                    "county over its county delegates; only a county of satellites alone may have 0")
            for i, c in enumerate(payload.counties) if c.sde_ratio == 0 and c.county_id in precinct]
