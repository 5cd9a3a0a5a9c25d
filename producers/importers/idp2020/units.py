"""Site names to VAN ids, and the election's reference data built from the directory.

Site names are the unstable key (escaped twice, renamed between releases, satellites prefixed with
their city), so a site unit is looked up by its decoded name first, then by its short name, and a
satellite also by its location without the ``City, ST - `` prefix (the NYT feed's name for it). A name
none of these finds is reported with its release, never dropped silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from ledger.events import County, SatelliteGroup, UnitDefinition
from producers.importers.idp2020.reference import Apportionment, Directory, UnitRef
from producers.importers.idp2020.releases import ParsedRelease, UnitNumbers
from producers.importers.idp2020.satellites import GroupWeights
from producers.importers.idp2020.text import name_key
from producers.importers.issues import Issue

__all__ = ["MappedRelease", "map_release", "unit_definitions", "counties", "satellite_groups", "SATELLITE_GROUPS"]

SATELLITE_GROUPS: dict[str, str] = {
    "CD1": "CD1 Satellite",
    "CD2": "CD2 Satellite",
    "CD3": "CD3 Satellite",
    "CD4": "CD4 Satellite",
    "out-of-state": "Out of State Satellite",
}


@dataclass(slots=True)
class MappedRelease:
    parsed: ParsedRelease
    units: dict[str, UnitNumbers] = field(default_factory=dict)  # VAN id -> numbers


def _lookup(directory: Directory, county: str, name: str) -> str | None:
    keys = [name_key(county, name)]
    if " - " in name:  # satellites: "Iowa City, IA - <location>" on the site, "<location>" in the NYT feed
        keys.append(name_key(county, name.split(" - ", 1)[1]))
    for key in keys:
        for index in (directory.by_name, directory.by_short):
            if key in index:
                return index[key]
    return None


def map_release(parsed: ParsedRelease, directory: Directory, issues: list[Issue]) -> MappedRelease:
    out = MappedRelease(parsed)
    sources: dict[str, str] = {}
    where = parsed.release.filename
    for numbers in parsed.units.values():
        unit_id = _lookup(directory, numbers.county, numbers.name)
        label = f"{numbers.county}/{numbers.name}"
        if unit_id is None:
            issues.append(Issue("warning", where, f"{label}: no VAN id for this name; unit not imported from this release"))
            continue
        if unit_id in out.units:
            issues.append(Issue("warning", where, f"{label} and {sources[unit_id]} both map to VAN {unit_id}; kept the first"))
            continue
        out.units[unit_id] = numbers
        sources[unit_id] = label
    return out


def unit_definitions(directory: Directory, apportionment: Apportionment, weights: dict[str, Fraction],
                     issues: list[Issue]) -> list[UnitDefinition]:
    """Every unit of the directory: D from the apportionment for precincts, weights for satellites."""
    units = []
    for ref in sorted(directory.units.values(), key=lambda r: (r.county, int(r.unit_id))):
        if ref.satellite_group is not None:
            units.append(UnitDefinition(ref.unit_id, ref.name, ref.county, None, ref.satellite_group,
                                        ref.short_name, weights.get(ref.unit_id)))  # fmt: skip
            if ref.unit_id not in weights:
                issues.append(Issue("warning", f"satellite {ref.county}/{ref.name}",
                                    "no SDE weight could be fitted; defined without one"))
            continue
        units.append(UnitDefinition(ref.unit_id, ref.name, ref.county, _delegates(ref, apportionment, issues),
                                    None, ref.short_name))  # fmt: skip
    return units


def _delegates(ref: UnitRef, apportionment: Apportionment, issues: list[Issue]) -> int:
    key = name_key(ref.county, ref.short_name or "")
    if key in apportionment.delegates:
        d = apportionment.delegates[key]
        if ref.delegates_listed is not None and ref.delegates_listed != d:
            issues.append(Issue("warning", f"precinct {ref.county}/{ref.name}",
                                f"apportionment D {d} but the directory lists {ref.delegates_listed}; used {d}"))
        return d
    fallback = ref.delegates_listed or 0
    issues.append(Issue("warning", f"precinct {ref.county}/{ref.name}",
                        f"short name {ref.short_name!r} not in the apportionment; D {fallback} from the directory"))
    return fallback


def counties(apportionment: Apportionment, directory: Directory) -> list[County]:
    """The 99 counties with their exact ratios, plus the five satellite pseudo-counties with ratio 0:
    satellites carry their own ``sde_weight`` and no county ratio applies to them."""
    out = [County(name, name, ratio) for name, ratio in sorted(apportionment.ratios.items())]
    used = {ref.county for ref in directory.units.values() if ref.satellite_group is not None}
    out += [County(name, name, Fraction(0)) for name in sorted(used)]
    return out


def satellite_groups(groups: dict[str, GroupWeights]) -> list[SatelliteGroup]:
    """Pools are the groups' published SDE totals rounded to whole state delegates (6, 11, 18, 4, 4);
    the base is the group headcount the pool is shared over, when it could be recovered."""
    return [SatelliteGroup(gid, SATELLITE_GROUPS[gid], groups[gid].pool, groups[gid].base)
            for gid in SATELLITE_GROUPS if gid in groups]  # fmt: skip
