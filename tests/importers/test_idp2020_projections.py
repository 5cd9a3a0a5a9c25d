"""The imported history through the projections' own pure reducers and tallies: each release's stage
gives that release's published statewide SDEs (sums of the displayed per-unit values) and the certified
one its alignment totals; the same as-of the embedded log through ``projections.asof``."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from projections.asof import parse_cut, tally_as_of
from projections.reducers import apply_election, apply_unit
from projections.tally import aggregate, compute_unit_tally, election_context

# data README, "Published statewide figures": (cut, release, Buttigieg, Sanders, units reporting)
FIGURES = [
    ("2020-02-07T01:13:00Z", "2020-02-07T0113Z", "550.3388", "546.9120", 1711),
    ("2020-02-08T06:28:00Z", "2020-02-08T0628Z", "564.0124", "562.4973", 1765),
    ("2020-04-06T23:45:00Z", "2020-04-06T2345Z", "562.9538", "562.0214", 1765),
]


def _state_tally(events, at: datetime):
    election = None
    units = {}
    for event in events:
        if event.recorded_at > at:
            continue
        if event.unit_id:
            units[event.unit_id] = apply_unit(units.get(event.unit_id), event)
        else:
            election = apply_election(election, event)
    ctx = election_context(election)
    tallies = [compute_unit_tally(state, ctx) for state in units.values()]
    return aggregate(ctx, tallies), tallies


@pytest.mark.parametrize(("cut", "label", "buttigieg", "sanders", "reporting"), FIGURES)
def test_tallies_as_of_each_release(idp_plan, published, cut, label, buttigieg, sanders, reporting) -> None:
    state, tallies = _state_tally(idp_plan.events, parse_cut(cut).at)
    assert sum(t.reporting for t in tallies) == reporting
    assert all(t.cds_source == "reported" for t in tallies)
    print(f"\nprojected SDE as of {cut}: Buttigieg {state.sde_display_sum['Buttigieg']}, Sanders {state.sde_display_sum['Sanders']}")
    assert state.sde_display_sum["Buttigieg"] == Decimal(buttigieg) == published.total(label, "Buttigieg", "sde")
    assert state.sde_display_sum["Sanders"] == Decimal(sanders) == published.total(label, "Sanders", "sde")
    for candidate in state.candidates:  # every candidate, not only the two the press quoted
        assert state.sde_display_sum.get(candidate, Decimal(0)) == published.total(label, candidate, "sde"), candidate


def test_certified_alignment_totals(idp_plan) -> None:
    _, tallies = _state_tally(idp_plan.events, datetime(2020, 4, 6, 23, 45, tzinfo=UTC))
    assert sum(sum(t.first.values()) for t in tallies) == 176352
    assert sum(sum(t.final.values()) for t in tallies) == 172300


@pytest.mark.parametrize(("cut", "label", "buttigieg", "sanders", "reporting"), FIGURES)
def test_as_of_the_embedded_log(imported, published, cut, label, buttigieg, sanders, reporting) -> None:
    """``caucus tally --as-of`` over the log the import wrote: the definition standing at the cut is the
    one recorded last before it (at 02-08 the CD1 pool is shared over 448, after it over 452)."""
    journal, _, _ = imported
    tally = tally_as_of(journal.log, parse_cut(cut))
    state = tally.state_tally()
    assert state.units_reporting == reporting and not tally.context.certified
    assert state.sde_display_sum["Buttigieg"] == Decimal(buttigieg) == published.total(label, "Buttigieg", "sde")
    assert state.sde_display_sum["Sanders"] == Decimal(sanders) == published.total(label, "Sanders", "sde")
    cd1 = {g.group_id: g.attendance_base for g in tally.context.state.definition.satellite_groups}["CD1"]
    assert cd1 == (452 if label == "2020-04-06T2345Z" else 448)
    counties = tally.counties()
    for county in ("CD1 Satellite", "Out of State Satellite", "Polk"):
        shown = counties[county].sde_display_sum if county in counties else {}
        for candidate in state.candidates:
            assert shown.get(candidate, Decimal(0)) == published.county_total(label, county, candidate, "sde"), (county, candidate)
