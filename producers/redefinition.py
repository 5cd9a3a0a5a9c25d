"""What a second definition of an election may change once the caucuses are under way.

The intake refuses to define an election twice, but a direct write may record a redefinition: a
published release that amends the first (the 2020 history holds one: the certified release changed
satellite SDE weights), or a corrected apportionment before a precinct reports. The tallies always use
the latest definition (``projections.reducers.apply_election``), so a redefinition also rewrites every
result already recorded under the old one: re-appending the definition with a reported unit's D
raised from 6 to 600 hands that unit's groups a hundred times the county delegates, with no result
event saying so.

So a redefinition may add units and candidates and change units that are not under way, but not what
a unit under way (opened, reported, or with a coin toss, which may come before the result) is counted
under: its D, its county, its satellite group or weight, its county's or group's SDE ratio, the rule
set, nor remove the unit or a candidate a result or a toss names. A published amendment (the import
channel) may re-weight satellites (``PUBLISHED_MAY_CHANGE``), which is what the party's releases did;
the rest is refused to it too, since any official can write a record on the import channel (its writer
header names them, and the audit lists it).
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction

from ledger.events import ElectionDefined, Problem, UnitDefinition
from producers.intake_state import IntakeView

__all__ = ["redefinition_problems", "PUBLISHED_MAY_CHANGE"]

_UNDER_WAY = "under way (opened, reported or tossed for)"

PUBLISHED_MAY_CHANGE = frozenset({"SDE_WEIGHT_CHANGED", "GROUP_CHANGED"})
"""What a published amendment may change of a reported unit: the 2020 certified release re-fitted the
satellites' SDE weights to corrected headcounts (``producers.importers.idp2020.definitions``)."""


def redefinition_problems(new: ElectionDefined, election_id: str, view: IntakeView) -> tuple[Problem, ...]:
    """Why ``new`` may not replace the standing definition of ``election_id`` (empty when it may, or
    when there is none)."""
    info = view.election(election_id)
    if info is None:
        return ()
    tosses = view.tosses_in(election_id)
    tossed = {t.unit_id for t in tosses}
    under_way = [uid for uid in info.units if uid in tossed or _under_way(view, election_id, uid)]
    if not under_way:
        return ()
    problems: list[Problem] = []
    old = info.definition
    if new.rule_set != old.rule_set:
        problems.append(Problem("rule_set", "RULE_SET_CHANGED", f"the rule set would change from {old.rule_set!r} to "
                                f"{new.rule_set!r} while {len(under_way)} unit(s) are opened, reported or tossed for under it"))
    units = {u.unit_id: u for u in new.units}
    before, after = _Areas(old), _Areas(new)
    for uid in under_way:
        problems.extend(_unit_problems(info.units[uid], units.get(uid), uid, before, after))
    named = _candidates_in_results(view, election_id, under_way)
    contenders = {name for t in tosses for name in t.contenders}
    for name in sorted((named | contenders) - set(new.candidates)):
        problems.append(Problem("candidates", "CANDIDATE_REMOVED",
                                f"candidate {name!r} would be removed, but recorded "
                                f"{'results' if name in named else 'coin tosses'} name them"))
    return tuple(problems)


def _under_way(view: IntakeView, election_id: str, unit_id: str) -> bool:
    status = view.unit(election_id, unit_id)
    return status.opened_event_id is not None or status.result_event_id is not None


class _Areas:
    """A definition's county ratios and satellite groups by id, looked up once per unit under way."""

    def __init__(self, definition: ElectionDefined) -> None:
        self.ratios = {c.county_id: c.sde_ratio for c in definition.counties}
        self.groups = {g.group_id: (g.sde_pool, g.attendance_base) for g in definition.satellite_groups}


def _shown(value: object, name: str) -> str:
    """A definition's value as its input gives it: a ratio "n/d", an id quoted; none as such (a satellite
    without a weight of its own weighs its share of its group's pool)."""
    if value is None:
        return "none (its share of the group's pool)" if name == "sde_weight" else "none"
    if isinstance(value, Fraction):
        return f'"{value.numerator}/{value.denominator}"'
    return repr(value)


def _unit_problems(old: UnitDefinition, new: UnitDefinition | None, uid: str, before: _Areas, after: _Areas) -> Iterator[Problem]:
    if new is None:
        yield Problem("units", "UNIT_REMOVED", f"unit {uid!r} would be removed, but it is opened or reported, or has a coin "
                      "toss recorded (the toss would then belong to no unit)")
        return
    field = f"units.{uid}"
    if new.delegates != old.delegates:
        yield Problem(f"{field}.delegates", "DELEGATES_CHANGED", f"unit {uid!r} is {_UNDER_WAY} with "
                      f"{old.delegates} delegate(s); a redefinition may not make it {new.delegates}")
    for name in ("county_id", "satellite_group", "sde_weight"):
        if getattr(new, name) != getattr(old, name):
            satellite = old.satellite_group is not None and new.satellite_group == old.satellite_group
            code = "SDE_WEIGHT_CHANGED" if name == "sde_weight" and satellite else "UNIT_CHANGED"
            yield Problem(f"{field}.{name}", code, f"unit {uid!r} is {_UNDER_WAY}; a redefinition may not "
                          f"change its {name} from {_shown(getattr(old, name), name)} to {_shown(getattr(new, name), name)}")
    old_county, new_county = before.ratios.get(old.county_id), after.ratios.get(new.county_id)
    if new.county_id == old.county_id and new_county != old_county:
        yield Problem(f"counties.{old.county_id}.sde_ratio", "COUNTY_RATIO_CHANGED",
                      f"county {old.county_id!r} holds unit {uid!r}, which is {_UNDER_WAY}; a redefinition may not "
                      f"change the county's SDE ratio ({old_county} to {new_county})")
    group = old.satellite_group
    if group is not None and new.satellite_group == group and before.groups.get(group) != after.groups.get(group):
        yield Problem(f"satellite_groups.{group}", "GROUP_CHANGED",
                      f"satellite group {group!r} holds unit {uid!r}, which is {_UNDER_WAY}; "
                      "a redefinition may not change the group's SDE pool or attendance base")


def _candidates_in_results(view: IntakeView, election_id: str, units: list[str]) -> set[str]:
    named: set[str] = set()
    for uid in units:
        result = view.unit(election_id, uid).result
        if result is not None:
            named.update(result.first_alignment)
            named.update(result.final_alignment)
    return named
