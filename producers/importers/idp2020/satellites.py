"""Satellite SDE weights: each group's pool shared in proportion to headcount.

RULES.md §8: a satellite's share of its group's pool is ``headcount × pool ÷ base`` where ``base`` is
the headcount of the whole group. Neither headcounts nor bases are published; the display only
bounds each satellite's SDE per county delegate (CD). So for each group the smallest base is searched
for which every satellite's bounds hold a whole headcount (at least its first-alignment total) and
those headcounts add up to the base; a weight found that way is an exact pool share. In 2020 this
finds the bases 452, 943, 1,567, 141 and 1,187 that RULES.md §8's per-attendee constants point to in
the certified release, and 448 for CD1 in the release of 2020-02-08 (``definitions``).

``sde_weight`` is what the unit's awarded CDs are worth together, so that candidate SDE = weight ×
CDs ÷ (CDs the unit awarded), as ``projections.tally`` computes it. That is the pool share itself
except for a satellite that awarded more CDs than its headcount elects (Washington DC IBEW 9 of 8,
Wesley Acres 8 of 7): its share is spread over the table's D, so its weight is the share × awarded ÷
D. A satellite no whole headcount explains (Waterloo UAW 838 in the certified release, still shared
over the base of 2020-02-08) keeps the weight it had before when that reproduces its SDEs, else gets
the shortest decimal that does. Both are named in ``info`` issues.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from producers.importers.idp2020.delegates import SatelliteFit, shortest_decimal_in
from producers.importers.issues import Issue

__all__ = ["SatelliteShown", "GroupWeights", "satellite_weights"]


@dataclass(frozen=True, slots=True)
class SatelliteShown:
    unit_id: str
    name: str
    group: str
    first_total: int
    shown_total: Fraction  # Σ displayed SDEs
    fit: SatelliteFit


@dataclass(slots=True)
class GroupWeights:
    pool: Fraction
    base: int | None
    weights: dict[str, Fraction]


def _bounds(unit: SatelliteShown) -> tuple[Fraction, Fraction] | None:
    return unit.fit.weight_bounds(unit.fit.unit_delegates)


_TABLE_BANDS = {4: (1, 20), 5: (21, 40), 6: (41, 60), 7: (61, 80), 8: (81, 100), 9: (101, 10**9)}


@dataclass(frozen=True, slots=True)
class Share:
    """A headcount and the D its pool share is spread over (the awarded CDs, or the table's D)."""

    head: int
    spread_over: int

    def weight(self, pool: Fraction, base: int, awarded: int) -> Fraction:
        if not self.spread_over:
            return Fraction(0)
        return self.head * pool / base * awarded / self.spread_over


def _share_finder(unit: SatelliteShown, pool: Fraction) -> Callable[[int], Share | None]:
    """For a base, the smallest whole headcount h ≥ first total whose share h × pool ÷ base, spread
    over the awarded CDs or over the table's D for h, shows the unit's SDEs. Integer arithmetic:
    the search tries thousands of bases."""
    bounds = _bounds(unit)
    first, awarded = unit.first_total, unit.fit.unit_delegates
    if bounds is None:  # nobody attended, or nobody won an SDE: the SDEs say nothing about the share
        return lambda base: Share(first, awarded)
    readings = [(awarded, awarded, 1, 10**9)] + [(t, awarded, lo, hi) for t, (lo, hi) in _TABLE_BANDS.items() if t != awarded]
    # h × pool ÷ base × awarded ÷ t ∈ bounds  ⇔  h ∈ bounds × base × t ÷ (pool × awarded)
    scaled = [(t, bounds[0] * t / (pool * a), bounds[1] * t / (pool * a), lo, hi) for t, a, lo, hi in readings]

    def find(base: int) -> Share | None:
        best: Share | None = None
        for t, low_f, high_f, band_lo, band_hi in scaled:
            low = max((low_f.numerator * base) // low_f.denominator + 1, first, band_lo)
            high = min(-((-high_f.numerator * base) // high_f.denominator) - 1, band_hi)
            if low <= high and (best is None or low < best.head):
                best = Share(low, t)
        return best

    return find


def _search_base(units: Sequence[SatelliteShown], pool: Fraction, misfits_allowed: int) -> tuple[int, dict[str, Share]] | None:
    """The smallest base whose whole headcounts add up to it (a misfit's share being whatever is
    left over, at least its first-alignment total)."""
    finders = {u.unit_id: _share_finder(u, pool) for u in units}
    start = sum(u.first_total for u in units)
    for base in range(max(start, 1), 2 * start + 100):
        shares = {unit_id: find(base) for unit_id, find in finders.items()}
        missing = [u for u in units if shares[u.unit_id] is None]
        if len(missing) > misfits_allowed:
            continue
        slack = base - sum(s.head for s in shares.values() if s is not None)
        if (not missing and slack == 0) or (missing and slack >= sum(u.first_total for u in missing)):
            return base, {k: v for k, v in shares.items() if v is not None}
    return None


def satellite_weights(units: Sequence[SatelliteShown], issues: list[Issue], *,
                      previous: Mapping[str, Fraction] | None = None) -> dict[str, GroupWeights]:
    """Weights per group; ``previous`` (the weights of an earlier release) is kept for a satellite
    no whole headcount explains, when it still reproduces the satellite's SDEs."""
    out: dict[str, GroupWeights] = {}
    for group in sorted({u.group for u in units}):
        members = [u for u in units if u.group == group]
        pool = Fraction(round(sum(u.shown_total for u in members)))
        found = _search_base(members, pool, 0) or _search_base(members, pool, 1)
        base, shares = found if found is not None else (None, {})
        weights: dict[str, Fraction] = {}
        for unit in members:
            share = shares.get(unit.unit_id)
            if base is None or share is None:
                weights[unit.unit_id] = _leftover_weight(unit, group, issues, (previous or {}).get(unit.unit_id))
                continue
            awarded = unit.fit.unit_delegates
            weights[unit.unit_id] = share.weight(pool, base, awarded)
            notes = []
            if share.head != unit.first_total:
                notes.append(f"headcount {share.head}, first alignment {unit.first_total}")
            if share.spread_over != awarded:
                notes.append(f"awarded {awarded} CDs but {share.head} attendees elect {share.spread_over}: "
                             f"weight = share × {awarded}/{share.spread_over}")  # fmt: skip
            if notes:
                issues.append(Issue("info", f"satellite {unit.name} (VAN {unit.unit_id})",
                                    f"SDE share {share.head}/{base} of the {group} pool; " + "; ".join(notes)))  # fmt: skip
        out[group] = GroupWeights(pool, base, weights)
    return out


def _leftover_weight(unit: SatelliteShown, group: str, issues: list[Issue], before: Fraction | None) -> Fraction:
    bounds = _bounds(unit)
    if bounds is None:
        weight = Fraction(0)
    else:
        weight = shortest_decimal_in(bounds, before if before is not None else unit.shown_total)
    kept = before is not None and weight == before
    how = f"keeps its earlier weight {weight} ({float(weight):.5f}), which" if kept else f"SDE weight {float(weight):.5f}"
    issues.append(Issue("info", f"satellite {unit.name} (VAN {unit.unit_id})",
                        f"no whole headcount shares the {group} pool as published; {how} reproduces its SDEs"))  # fmt: skip
    return weight
