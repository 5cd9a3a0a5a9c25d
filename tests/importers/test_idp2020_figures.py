"""The imported history reproduces the published figures: SDEs from recovered CDs under the definition
in force at each release, alignment totals, county ratios and satellite pools."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction

import pytest

from ledger.events import ElectionDefined, Event, Result, UnitDefinition

CERTIFIED = "2020-04-06T2345Z"
CERTIFIED_AT = "2020-04-06T23:45:00+00:00"
RELEASE_AT = {"2020-02-07T0113Z": "2020-02-07T01:13:00+00:00", "2020-02-08T0628Z": "2020-02-08T06:28:00+00:00",
              CERTIFIED: CERTIFIED_AT}  # fmt: skip
CD1 = {"1140": 24, "1145": 3, "1148": 71, "1149": 15, "1152": 0, "1154": 8, "1156": 20, "1158": 112, "1159": 74,
       "1160": 20, "1161": 60, "1163": 41}  # VAN id -> first-alignment total in the 2020-02-08 release
FOUR = Decimal("0.0001")


def _shown(value: Fraction) -> Decimal:
    return (Decimal(value.numerator) / Decimal(value.denominator)).quantize(FOUR, ROUND_HALF_UP)


def _unit_sde(unit: UnitDefinition, ratio: Fraction, result: Result) -> dict[str, Decimal]:
    """Displayed SDE per candidate: CDs × county ratio; for a satellite weight × CDs ÷ the CDs it awarded."""
    delegates = dict(result.delegates_reported or {})
    if unit.sde_weight is None:
        return {c: _shown(n * ratio) for c, n in delegates.items()}
    d = sum(delegates.values())
    return {c: _shown(unit.sde_weight * n / d) if n else Decimal(0) for c, n in delegates.items()}


@pytest.fixture(scope="module")
def definition(idp_plan) -> ElectionDefined:
    """The definition in force after the import: the certified release's."""
    assert idp_plan.definition == idp_plan.definition_at(datetime.fromisoformat(CERTIFIED_AT))
    return idp_plan.definition


def test_certified_sdes_from_reported_cds(idp_plan, definition, published) -> None:
    units = {u.unit_id: u for u in definition.units}
    ratios = {c.county_id: c.sde_ratio for c in definition.counties}
    totals: Counter[str] = Counter()
    for unit_id, event in _state_at(idp_plan.events, CERTIFIED_AT).items():
        unit = units[unit_id]
        for candidate, sde in _unit_sde(unit, ratios[unit.county_id], event.payload.result).items():
            totals[candidate] += sde
    print(f"\ncertified SDE from CDs: Buttigieg {totals['Buttigieg']}, Sanders {totals['Sanders']}")
    assert totals["Buttigieg"] == Decimal("562.9538") == published.total(CERTIFIED, "Buttigieg", "sde")
    assert totals["Sanders"] == Decimal("562.0214") == published.total(CERTIFIED, "Sanders", "sde")
    for candidate in definition.candidates:
        assert totals[candidate] == published.total(CERTIFIED, candidate, "sde"), candidate


def _state_at(events: list[Event], at: str) -> dict[str, Event]:
    state: dict[str, Event] = {}
    for event in events:
        if event.unit_id and event.recorded_at.isoformat() <= at:
            state[event.unit_id] = event
    return state


@pytest.mark.parametrize("label", list(RELEASE_AT))
def test_recovered_cds_reproduce_every_displayed_sde(idp_plan, published, van_keys, label) -> None:
    """Per unit and candidate, recovered CDs under the definition in force at the release give back the
    displayed SDE, in every release, satellites included."""
    at = RELEASE_AT[label]
    definition = idp_plan.definition_at(datetime.fromisoformat(at))
    units = {u.unit_id: u for u in definition.units}
    ratios = {c.county_id: c.sde_ratio for c in definition.counties}
    state = _state_at(idp_plan.events, at)
    assert len(state) == len(published.units(label))
    satellites = 0
    for unit_id, event in state.items():
        unit = units[unit_id]
        satellites += unit.is_satellite
        shown = _unit_sde(unit, ratios[unit.county_id], event.payload.result)
        numbers = published.releases[label][van_keys[unit_id]]
        assert shown == {c: numbers[(c, "sde")] for c in shown}, (label, unit_id, unit.name)
    assert satellites == sum("Satellite" in county for county, _ in published.units(label))


def test_cd1_pool_is_shared_over_448_in_the_02_08_release(idp_plan, published, van_keys) -> None:
    """RULES.md §8: before certification the CD1 pool (6 SDE) was shared over the group's first-alignment
    total of 2020-02-08, 448 (Hoover Elementary with 112); the certified release shares it over 452."""
    at_0207, at_0208 = (idp_plan.definition_at(datetime.fromisoformat(RELEASE_AT[label]))
                        for label in ("2020-02-07T0113Z", "2020-02-08T0628Z"))
    assert at_0207 == at_0208  # no CD1 satellite reported by 02-07: the 02-08 weights are defined from the start
    pools = {g.group_id: (g.sde_pool, g.attendance_base) for g in at_0208.satellite_groups}
    assert pools == {"CD1": (6, 448), "CD2": (11, 943), "CD3": (18, 1567), "CD4": (4, 141), "out-of-state": (4, 1187)}
    release = published.releases["2020-02-08T0628Z"]
    first = {v: int(sum(x for (_, m), x in release[van_keys[v]].items() if m == "expression_1")) for v in CD1}
    assert first == CD1 and sum(first.values()) == 448
    weights = {u.unit_id: u.sde_weight for u in at_0208.units if u.satellite_group == "CD1"}
    assert weights == {v: Fraction(n * 6, 448) for v, n in CD1.items()}
    certified = {u.unit_id: u.sde_weight for u in idp_plan.definition.units if u.satellite_group == "CD1"}
    assert certified["1158"] == Fraction(116 * 6, 452) and certified["1140"] == Fraction(24 * 6, 452)
    assert certified["1156"] == weights["1156"] == Fraction(20 * 6, 448)  # Waterloo UAW 838 kept the old base
    changed = {v for v in CD1 if certified[v] != weights[v]}
    assert changed == set(CD1) - {"1156", "1152"}  # all but Waterloo and Marshalltown (nobody attended)
    others = [(u.unit_id, u.sde_weight) for u in at_0208.units if u.satellite_group not in (None, "CD1")]
    assert others == [(u.unit_id, u.sde_weight) for u in idp_plan.definition.units if u.satellite_group not in (None, "CD1")]


def test_certified_alignment_totals(idp_plan, published) -> None:
    first: Counter[str] = Counter()
    final: Counter[str] = Counter()
    for event in _state_at(idp_plan.events, CERTIFIED_AT).values():
        first.update(event.payload.result.first_alignment)
        final.update(event.payload.result.final_alignment)
    readme = {"Buttigieg": (37572, 43209), "Sanders": (43581, 45652), "Warren": (32589, 34909),
              "Biden": (26291, 23605), "Klobuchar": (22454, 21100), "Yang": (8914, 1758)}  # fmt: skip
    for candidate, (f1, f2) in readme.items():
        assert (first[candidate], final[candidate]) == (f1, f2), candidate
    assert (sum(first.values()), sum(final.values())) == (176352, 172300)
    assert sum(first.values()) == published.total(CERTIFIED, None, "expression_1")
    assert sum(final.values()) == published.total(CERTIFIED, None, "expression_2")


def test_county_ratios_are_exact_and_sum_to_the_state(definition) -> None:
    ratios = {c.county_id: c.sde_ratio for c in definition.counties}
    assert ratios["Lee"] == Fraction(21, 150) and ratios["Black Hawk"] == Fraction(101, 500)
    assert ratios["Davis"] == Fraction(3, 100) and ratios["Adair"] == Fraction(4, 51)
    assert "Guthrie" in ratios and "Guthrie " not in ratios
    precincts = [u for u in definition.units if not u.is_satellite]
    assert len(precincts) == 1678 and sum(u.delegates for u in precincts) == 11402
    assert sum(u.delegates * ratios[u.county_id] for u in precincts) == 2107


def test_satellites_have_groups_weights_and_pools(definition) -> None:
    satellites = [u for u in definition.units if u.is_satellite]
    assert Counter(u.satellite_group for u in satellites) == {"CD1": 12, "CD2": 17, "CD3": 20, "CD4": 11, "out-of-state": 27}
    assert all(u.delegates is None and u.sde_weight is not None for u in satellites)
    pools = {g.group_id: (g.sde_pool, g.attendance_base) for g in definition.satellite_groups}
    # RULES.md §8: pools 6, 11, 18, 4, 4; the bases its per-attendee constants point to (≈452, 943, 1,567, 141, 1,187)
    assert pools == {"CD1": (6, 452), "CD2": (11, 943), "CD3": (18, 1567), "CD4": (4, 141), "out-of-state": (4, 1187)}
    uihc = next(u for u in satellites if u.unit_id == "1172")  # RULES.md §13 E07: 65 attendees, weight 0.7582
    assert uihc.sde_weight == Fraction(65 * 11, 943) and round(float(uihc.sde_weight), 4) == 0.7582
    assert "&" in uihc.name and "&amp;" not in uihc.name
    exact = [u for u in satellites if (u.sde_weight * pools[u.satellite_group][1] / pools[u.satellite_group][0]).denominator == 1]
    print(f"\nsatellites whose weight is a whole-headcount pool share: {len(exact)} of {len(satellites)}")
    assert len(exact) >= 84
    weights = {u.unit_id: u.sde_weight for u in satellites}
    assert weights["1158"] == Fraction(116 * 6, 452)  # Hoover: shared as if 116 attended; 43 in the first alignment
    assert weights["1117"] == Fraction(100 * 4, 1187) * 9 / 8  # DC IBEW: 100 attendees elect 8; 9 CDs awarded
    assert weights["1184"] == Fraction(63 * 18, 1567) * 8 / 7  # Wesley Acres: 63 elect 7; 8 awarded
    assert weights["1156"] == Fraction(20 * 6, 448)  # Waterloo UAW 838: still the 02-08 share, 20 of 448


def test_messy_names_are_cleaned(definition) -> None:
    names = {u.unit_id: u.name for u in definition.units}
    assert not any("&amp;" in n or "  " in n or n != n.strip() for n in names.values())
    assert "Carroll Ward Three & S1/2 Maple River Twp" in names.values()  # &amp;amp; on the site
    assert {"Council Bluff 04", "Council Bluff 11", "Council Bluff 16", "Council Bluff 20"} <= set(names.values())
