"""County and state sums of one election kept up to date from the units that changed.

Why: the results feed publishes after every batch. Summing every unit of the election again for the
state (and scanning every unit to find a county's) made each batch cost the size of the election, so
publishing a night of N units cost N x batches. Here a unit that changed takes its old tally out of
its county's sums and the state's and puts its new one in: exact integers, Fractions and Decimals
add and subtract without error in any order, so the sums equal those of ``area_tally.aggregate``
over every unit, which the tests check.

The state's exact SDEs are the exception: its Fractions carry the least common multiple of every
county's denominators, so adding one unit's SDEs to them costs far more than adding them to its
county's. They are moved by each changed county's difference since the state was last read
(``state``): one large addition per county and candidate per publish, not per unit.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from fractions import Fraction
from typing import Any

from projections.area_tally import AreaTally, aggregate
from projections.election_context import ElectionContext
from projections.tally import UnitTally

__all__ = ["ElectionSums", "LOOSE"]

LOOSE = ""
"""The group of units whose county the definition does not list: in the state's sums, in no county's."""


def _merge(into: AreaTally, part: AreaTally) -> None:
    into.units_reporting += part.units_reporting
    into.units_pending += part.units_pending
    into.units_with_problems += part.units_with_problems
    for target, source in ((into.first, part.first), (into.final, part.final), (into.cds, part.cds),
                           (into.cds_computed, part.cds_computed), (into.cds_reported, part.cds_reported)):
        for c, n in source.items():
            target[c] = target.get(c, 0) + n
    for c, v in part.sde.items():
        into.sde[c] = into.sde.get(c, Fraction(0)) + v
    for c, shown in part.sde_display_sum.items():
        into.sde_display_sum[c] = into.sde_display_sum.get(c, Decimal("0.0000")) + shown


class ElectionSums:
    """One election's sums per county (and for the units of no defined county), and the events applied
    to each county's units, followed unit by unit."""

    def __init__(self, ctx: ElectionContext) -> None:
        self.ctx = ctx
        self._ballot = frozenset(ctx.candidates)
        members: dict[str, int] = dict.fromkeys(ctx.counties, 0)
        for unit in ctx.units.values():
            group = unit.county_id if unit.county_id in ctx.counties else LOOSE
            members[group] = members.get(group, 0) + 1
        self.areas: dict[str, AreaTally] = {
            g: aggregate(ctx, (), None if g == LOOSE else g, units_defined=n) for g, n in members.items()}
        self.events: dict[str, int] = dict.fromkeys(members, 0)
        self.total = aggregate(ctx, ())  # the state's sums but its exact SDEs, followed with the counties'
        self._state_sde: dict[str, Fraction] = {}  # the state's exact SDEs as of the last ``state()``
        self._folded: dict[str, dict[str, Fraction]] = {g: {} for g in members}  # each group's, as then summed in
        self._moved: set[str] = set(members)

    def group_of(self, unit_id: str) -> str | None:
        """The county whose sums count the unit (LOOSE for a county the definition does not list);
        None for a unit the definition does not list, which no sum counts."""
        unit = self.ctx.units.get(unit_id)
        if unit is None:
            return None
        return unit.county_id if unit.county_id in self.ctx.counties else LOOSE

    def load(self, tallies: Mapping[str, UnitTally], unit_events: Mapping[str, int]) -> None:
        """Count every unit once (a new or reloaded election)."""
        for uid, t in tallies.items():
            group = self.group_of(uid)
            if group is not None:
                self.areas[group].add(t)
                self.total.add(t, sde=False)
        for uid, n in unit_events.items():
            group = self.group_of(uid)
            if group is not None:
                self.events[group] += n

    def change(self, unit_id: str, old: UnitTally | None, new: UnitTally | None, old_events: int, new_events: int) -> str | None:
        """Replace one unit's part of its county's sums; returns the group it changed, if any."""
        group = self.group_of(unit_id)
        if group is None:
            return None
        for area, sde in ((self.areas[group], True), (self.total, False)):
            if old is not None:
                area.remove(old, sde=sde)
                self._prune(area, old)
            if new is not None:
                area.add(new, sde=sde)
        self.events[group] += new_events - old_events
        self._moved.add(group)
        return group

    def _prune(self, area: AreaTally, old: UnitTally) -> None:
        """Drop a group the ballot does not list once nothing counts it any more, as a fresh sum would."""
        for name in set(old.first) | set(old.final) | set(old.cds) | set(old.sde):
            if name in self._ballot:
                continue
            maps: list[dict[str, Any]] = [area.first, area.final, area.cds, area.cds_computed, area.cds_reported,
                                          area.sde, area.sde_display_sum]
            if all(not m.get(name) for m in maps):
                for m in maps:
                    m.pop(name, None)

    def counties(self) -> list[str]:
        return [g for g in self.areas if g != LOOSE]

    def state(self) -> AreaTally:
        """The statewide sums (a copy: the caller may keep it while the sums move on)."""
        for group in self._moved:
            now, then = self.areas[group].sde, self._folded[group]
            for c in now.keys() | then.keys():
                change = now.get(c, Fraction(0)) - then.get(c, Fraction(0))
                if change:
                    self._state_sde[c] = self._state_sde.get(c, Fraction(0)) + change
            self._folded[group] = dict(now)
        self._moved.clear()
        total = aggregate(self.ctx, ())
        _merge(total, self.total)
        # The names a sum over every unit would hold: the ballot's, and those some county still counts.
        named = set(total.sde).union(*(area.sde for area in self.areas.values()))
        total.sde = {c: self._state_sde.get(c, Fraction(0)) for c in [*total.sde, *sorted(named - set(total.sde))]}
        return total

    def state_events(self) -> int:
        return sum(self.events.values())
