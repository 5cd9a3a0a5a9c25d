"""County and statewide sums of unit tallies.

Only the units the election defines are summed: a unit the definition does not list cannot be placed
in a county, and a mistyped id would be counted twice. SDE totals come two ways, the exact sum and the
sum of the displayed per-unit values, which is how the party published them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from math import lcm
from operator import attrgetter, mul
from typing import TYPE_CHECKING, Any

from ledger.caucus_math import display_sde
from projections.election_context import ElectionContext
from projections.fraction_text import fraction_text

if TYPE_CHECKING:
    from projections.tally import UnitTally

__all__ = ["AreaTally", "aggregate", "aggregate_counties"]

_ZERO_SHOWN = Decimal("0.0000")
_NUMERATOR = attrgetter("numerator")
_DENOMINATOR = attrgetter("denominator")


@dataclass
class AreaTally:
    """Sums over the units of one area (a county, or the state when ``area`` is ``"state"``)."""

    area: str
    name: str
    candidates: tuple[str, ...]
    units_defined: int = 0
    units_reporting: int = 0
    units_pending: int = 0
    units_with_problems: int = 0
    first: dict[str, int] = field(default_factory=dict)
    final: dict[str, int] = field(default_factory=dict)
    cds: dict[str, int] = field(default_factory=dict)
    cds_computed: dict[str, int] = field(default_factory=dict)
    cds_reported: dict[str, int] = field(default_factory=dict)
    sde: dict[str, Fraction] = field(default_factory=dict)
    sde_display_sum: dict[str, Decimal] = field(default_factory=dict)

    @property
    def share_reporting(self) -> Fraction:
        return Fraction(self.units_reporting, self.units_defined) if self.units_defined else Fraction(0)

    def add(self, t: UnitTally, *, sde: bool = True) -> None:
        """Count a unit in; ``sde=False`` leaves the exact SDE sums alone (for a caller that sums them
        another way: ``area_sums`` adds the state's from its counties')."""
        self._count(t, 1, sde)

    def remove(self, t: UnitTally, *, sde: bool = True) -> None:
        """Take back what ``add(t)`` added (exact: integers, Fractions, Decimals), so sums can follow a
        unit whose tally changed without summing its area again."""
        self._count(t, -1, sde)

    def _count(self, t: UnitTally, sign: int, sde: bool = True) -> None:
        if not t.reporting:
            return
        self.units_reporting += sign
        self.units_pending += sign * bool(t.pending)
        self.units_with_problems += sign * bool(t.problems)
        for target, source in ((self.first, t.first), (self.final, t.final), (self.cds, t.cds),
                               (self.cds_computed, t.cds_computed or {}), (self.cds_reported, t.cds_reported or {})):
            for c, n in source.items():
                target[c] = target.get(c, 0) + sign * n
        # Adding or subtracting, never multiplying by the sign: a Fraction product costs as much as the sum.
        sdes, shown = self.sde, self.sde_display_sum
        if sde:
            for c, v in t.sde.items():
                was = sdes.get(c)
                sdes[c] = (v if sign > 0 else -v) if was is None else (was + v if sign > 0 else was - v)
        for c, d in t.sde_display.items():
            shown[c] = (shown.get(c, _ZERO_SHOWN) + d) if sign > 0 else (shown.get(c, _ZERO_SHOWN) - d)

    def to_json(self) -> dict[str, Any]:
        return {
            "area": self.area,
            "name": self.name,
            "candidates": list(self.candidates),
            "units_defined": self.units_defined,
            "units_reporting": self.units_reporting,
            "share_reporting": float(self.share_reporting),
            "units_pending_ties": self.units_pending,
            "units_with_problems": self.units_with_problems,
            "first": dict(self.first),
            "final": dict(self.final),
            "cds": dict(self.cds),
            "cds_computed": dict(self.cds_computed),
            "cds_reported": dict(self.cds_reported),
            "sde_exact": {c: fraction_text(v) for c, v in self.sde.items()},
            "sde_exact_decimal": {c: str(display_sde(v)) for c, v in self.sde.items()},
            "sde_display_sum": {c: str(v) for c, v in self.sde_display_sum.items()},
            "total": {  # the human table's last row
                "first": sum(self.first.values()), "final": sum(self.final.values()), "cds": sum(self.cds.values()),
                "sde_display_sum": str(sum(self.sde_display_sum.values(), Decimal(0))),
            },
        }


def _sum_into(area: AreaTally, tallies: Iterable[UnitTally]) -> None:
    """``area.add(t)`` for every tally, with the same result (values, and the order of the keys), faster.

    Why: a statewide sum visits every candidate of every unit (mostly zeros), and ``add`` does it in
    Python, adding the SDEs as Fractions (a gcd each). Here the maps of the units are summed column by
    column in C (``_add_columns``) and each candidate's SDEs as integer numerators over the least
    common denominator of its column: exact, so equal to ``add``'s sums in any order.
    """
    units = [t for t in tallies if t.reporting]
    area.units_reporting += len(units)
    area.units_pending += sum(1 for t in units if t.pending)
    area.units_with_problems += sum(1 for t in units if t.problems)
    _add_columns(area.first, [t.first for t in units], 0, sum)
    _add_columns(area.final, [t.final for t in units], 0, sum)
    _add_columns(area.cds, [t.cds for t in units], 0, sum)
    _add_columns(area.cds_computed, [t.cds_computed or {} for t in units], 0, sum)
    _add_columns(area.cds_reported, [t.cds_reported or {} for t in units], 0, sum)
    _add_columns(area.sde, [t.sde for t in units], Fraction(0), _exact_sum)
    _add_columns(area.sde_display_sum, [t.sde_display for t in units], _ZERO_SHOWN, sum)


def _add_columns(target: dict[str, Any], maps: list[Mapping[str, Any]], zero: Any,
                 add_up: Callable[[tuple[Any, ...], Any], Any]) -> None:
    """Add every map into ``target`` key by key, new keys in the order ``add`` meets them. Maps with
    the same keys in the same order (as a rule every unit of an election) form one group whose
    columns ``add_up`` sums; groups go in the order of their first map, so new keys do too."""
    groups: dict[tuple[str, ...], list[Mapping[str, Any]]] = {}
    shapes = set(map(tuple, maps))
    if len(shapes) == 1:
        groups[shapes.pop()] = maps
    for m in maps if len(groups) != 1 else ():
        keys = tuple(m)
        group = groups.get(keys)
        if group is None:
            groups[keys] = [m]
        else:
            group.append(m)
    for keys, members in groups.items():
        for c, column in zip(keys, zip(*[m.values() for m in members]), strict=True):
            target[c] = target.get(c, zero) + add_up(column, zero)


def _exact_sum(column: tuple[Fraction, ...], zero: Fraction) -> Fraction:
    """The exact sum of Fractions, as numerators over their least common denominator (C loops)."""
    dens = list(map(_DENOMINATOR, column))
    common = lcm(*set(dens))
    return zero + Fraction(sum(map(mul, map(_NUMERATOR, column), map(common.__floordiv__, dens))), common)


def _empty(area: str, name: str, candidates: tuple[str, ...]) -> AreaTally:
    zero = dict.fromkeys(candidates, 0)
    return AreaTally(
        area, name, candidates, first=dict(zero), final=dict(zero), cds=dict(zero),
        cds_computed=dict(zero), cds_reported=dict(zero),
        sde=dict.fromkeys(candidates, Fraction(0)), sde_display_sum=dict.fromkeys(candidates, Decimal("0.0000")),
    )


def aggregate(
    ctx: ElectionContext, tallies: Iterable[UnitTally], county_id: str | None = None, *, units_defined: int | None = None
) -> AreaTally:
    """Statewide (or one county's) sums over the units the election defines.

    Units the definition does not list are left out (they cannot be placed in a county and would
    be counted twice if their id was mistyped); ``caucus tally`` lists them separately. A caller that
    knows how many units the area has passes ``units_defined`` (counting them scans the election).
    """
    if county_id is None:
        area = _empty("state", ctx.state.definition.name if ctx.state.definition else ctx.election_id, ctx.candidates)
        area.units_defined = len(ctx.units) if units_defined is None else units_defined
    else:
        county = ctx.counties.get(county_id)
        area = _empty(county_id, county.name if county else county_id, ctx.candidates)
        area.units_defined = (sum(1 for u in ctx.units.values() if u.county_id == county_id)
                              if units_defined is None else units_defined)
    units = ctx.units
    if county_id is None:
        _sum_into(area, (t for t in tallies if t.unit_id in units))
    else:
        _sum_into(area, (t for t in tallies if t.unit_id in units and units[t.unit_id].county_id == county_id))
    return area


def aggregate_counties(ctx: ElectionContext, tallies: Iterable[UnitTally]) -> dict[str, AreaTally]:
    """Every county's sums in one pass, keyed by county id, in definition order."""
    out = {cid: _empty(cid, c.name, ctx.candidates) for cid, c in ctx.counties.items()}
    for u in ctx.units.values():
        if u.county_id in out:
            out[u.county_id].units_defined += 1
    members: dict[str, list[UnitTally]] = {cid: [] for cid in out}
    for t in tallies:
        unit = ctx.units.get(t.unit_id)
        if unit is not None and unit.county_id in out:
            members[unit.county_id].append(t)
    for cid, area in out.items():
        _sum_into(area, members[cid])
    return out
