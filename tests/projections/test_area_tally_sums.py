"""County and state sums summed in bulk (``area_tally.aggregate``: zeros skipped, SDE numerators added per
denominator) equal unit-by-unit ``AreaTally.add``, value for value and key for key (the JSON documents
print the keys in their order), on random elections with corrections, satellites and groups the ballot
does not list."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable
from decimal import Decimal
from fractions import Fraction
from types import ModuleType

from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.journal import Journal
from ledger.log.memory import MemoryLog
from projections.asof import tally_as_of
from projections.tally import AreaTally, ElectionContext, UnitTally, aggregate, aggregate_counties


def _one_by_one(ctx: ElectionContext, tallies: Iterable[UnitTally], county_id: str | None = None) -> AreaTally:
    """The reference: the sums as ``aggregate`` made them before, one ``add`` per unit."""
    area = aggregate(ctx, (), county_id)
    for t in tallies:
        if t.unit_id in ctx.units and (county_id is None or ctx.units[t.unit_id].county_id == county_id):
            area.add(t)
    return area


def _with_write_in(t: UnitTally, votes: int, cds: int) -> UnitTally:
    """A tally carrying a group the ballot does not list (zero or not), as a malformed report can."""
    sde = Fraction(cds, 7)
    return dataclasses.replace(
        t, first={**t.first, "Write-in": votes}, final={**t.final, "Write-in": votes}, cds={**t.cds, "Write-in": cds},
        sde={**t.sde, "Write-in": sde}, sde_display={**t.sde_display, "Write-in": Decimal(cds * 10_000 // 7).scaleb(-4)})


def _same(a: AreaTally, b: AreaTally) -> None:
    assert a.to_json() == b.to_json()
    for name in ("first", "final", "cds", "cds_computed", "cds_reported", "sde", "sde_display_sum"):
        assert list(getattr(a, name).items()) == list(getattr(b, name).items()), name


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), units=st.integers(1, 30), corrections=st.integers(0, 2),
       write_ins=st.lists(st.tuples(st.integers(0, 29), st.integers(0, 40), st.integers(0, 3)), max_size=5))
def test_bulk_sums_equal_unit_by_unit_sums(support: ModuleType, seed: int, units: int, corrections: int,
                                           write_ins: list[tuple[int, int, int]]) -> None:
    log = MemoryLog(f"area-sums-{uuid.uuid4()}", partitions=3)
    Journal(log).append_batch(support.election_log(units, corrections=corrections, seed=seed, satellites=2))
    at = tally_as_of(log)
    tallies = dict(at.units)
    for index, votes, cds in write_ins:
        uid = sorted(tallies)[index % len(tallies)]
        tallies[uid] = _with_write_in(tallies[uid], votes, cds)
    ctx = at.context
    _same(aggregate(ctx, tallies.values()), _one_by_one(ctx, tallies.values()))
    counties = aggregate_counties(ctx, tallies.values())
    assert list(counties) == list(ctx.counties)
    for cid, area in counties.items():
        _same(area, _one_by_one(ctx, tallies.values(), cid))
        _same(aggregate(ctx, tallies.values(), cid), area)
    assert any(v for v in aggregate(ctx, tallies.values()).sde.values()), "the sums hold SDEs, so the test can fail"
