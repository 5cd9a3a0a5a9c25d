"""The election's definition as each release shows it.

Precinct D and county ratios come from the apportionment and never change; satellite SDE weights are
read off the satellites' displayed SDEs (``satellites``), and those did change: the party shared the
CD1 pool over 448 attendees in the release of 2020-02-08 (the group's first-alignment total then,
Hoover Elementary counted with 112) and over 452 in the certified one, after Hoover's headcount was
corrected. So each release's weights are derived from that release's numbers, and the import defines
the election again at a release only when its definition changed (``build``).

A group is fitted only from a release that shows every one of its satellites, because its base is the
whole group's headcount. A release that shows only some or none of them (2020-02-07 shows no CD1
satellite) takes the group's weights from the nearest release that shows all of them, an earlier one
first; in such a release those weights apply to no result. A satellite that no whole headcount
explains keeps its previous weight when that still shows its SDEs (Waterloo UAW 838 in the certified
release: its SDEs are still those of 20 of 448 attendees).
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from ledger.events import ElectionDefined
from producers.importers.idp2020.delegates import fit_satellite
from producers.importers.idp2020.reference import Apportionment, Directory
from producers.importers.idp2020.releases import CANDIDATES
from producers.importers.idp2020.satellites import GroupWeights, SatelliteShown, satellite_weights
from producers.importers.idp2020.units import MappedRelease, counties, satellite_groups, unit_definitions
from producers.importers.issues import Issue

__all__ = ["ELECTION_NAME", "RULE_SET", "release_definitions"]

ELECTION_NAME = "2020 Iowa Democratic precinct caucuses"
RULE_SET = "idp-2020"


def release_definitions(apportionment: Apportionment, directory: Directory, releases: Sequence[MappedRelease],
                        issues: list[Issue]) -> list[ElectionDefined]:  # fmt: skip
    """One definition per release, in the order of ``releases``; equal definitions compare equal."""
    members = _group_members(directory, releases)
    fitted = _fit_groups(directory, releases, members, issues)
    out: list[ElectionDefined] = []
    seen: set[Issue] = set(issues)
    for index, mapped in enumerate(releases):
        groups: dict[str, GroupWeights] = {}
        for group in sorted(members):
            source = _nearest(fitted[group], index)
            if source is None:
                continue
            groups[group] = fitted[group][source]
            if source != index:
                shown = len(members[group] & mapped.units.keys())
                _add(issues, seen, Issue("info", f"{mapped.parsed.release.filename}: {group} satellites",
                                         f"{shown} of {len(members[group])} satellites of the group reported; SDE weights "
                                         f"of the release {releases[source].parsed.release.label} defined"))  # fmt: skip
        weights = {unit_id: w for g in groups.values() for unit_id, w in g.weights.items()}
        local: list[Issue] = []
        definition = ElectionDefined(
            name=ELECTION_NAME,
            rule_set=RULE_SET,
            candidates=CANDIDATES,
            counties=tuple(counties(apportionment, directory)),
            units=tuple(unit_definitions(directory, apportionment, weights, local)),
            satellite_groups=tuple(satellite_groups(groups)),
        )
        for issue in local:  # the same reference data every release: say each problem once
            _add(issues, seen, issue)
        out.append(definition)
    return out


def _group_members(directory: Directory, releases: Sequence[MappedRelease]) -> dict[str, set[str]]:
    """Each satellite group's units: every satellite any release shows."""
    members: dict[str, set[str]] = {}
    for mapped in releases:
        for unit_id in mapped.units:
            group = directory.units[unit_id].satellite_group
            if group is not None:
                members.setdefault(group, set()).add(unit_id)
    return members


def _fit_groups(directory: Directory, releases: Sequence[MappedRelease], members: dict[str, set[str]],
                issues: list[Issue]) -> dict[str, dict[int, GroupWeights]]:  # fmt: skip
    """Per group, the weights fitted from each release that shows all its satellites (when none
    does: from the release showing most of them, the latest of equals). Notes on a group's weights
    are reported with the release whose weights differ from the group's previous ones."""
    out: dict[str, dict[int, GroupWeights]] = {}
    for group, units in sorted(members.items()):
        shown = [len(units & mapped.units.keys()) for mapped in releases]
        complete = [i for i, n in enumerate(shown) if n == len(units)]
        if not complete:
            complete = [max(range(len(releases)), key=lambda i: (shown[i], i))]
        out[group] = {}
        previous: GroupWeights | None = None
        for index in complete:
            mapped = releases[index]
            local: list[Issue] = []
            fitted = satellite_weights(_shown(directory, mapped, units), local,
                                       previous=previous.weights if previous else None).get(group)  # fmt: skip
            if fitted is None:
                continue
            if previous is None or (fitted.weights, fitted.base, fitted.pool) != (previous.weights, previous.base, previous.pool):
                where = mapped.parsed.release.filename
                issues.extend(Issue(i.severity, f"{where}: {i.where}", i.message) for i in local)
            out[group][index] = previous = fitted
    return out


def _shown(directory: Directory, mapped: MappedRelease, units: set[str]) -> list[SatelliteShown]:
    """The group's satellites as ``mapped`` shows them (those whose SDEs fit whole CDs)."""
    out = []
    for unit_id in sorted(units & mapped.units.keys(), key=int):
        numbers, ref = mapped.units[unit_id], directory.units[unit_id]
        first = sum(numbers.first.values())
        fit = fit_satellite(numbers.sde, first)
        if fit is None:
            continue  # reported as a warning with the unit's result
        shown_total = sum((Fraction(v) for v in numbers.sde.values()), Fraction(0))
        out.append(SatelliteShown(unit_id, ref.name, ref.satellite_group or "", first, shown_total, fit))
    return out


def _nearest(fitted: dict[int, GroupWeights], index: int) -> int | None:
    """The release whose weights stand at ``index``: itself, else the latest earlier, else the earliest later."""
    if index in fitted:
        return index
    earlier = [i for i in fitted if i < index]
    if earlier:
        return max(earlier)
    later = [i for i in fitted if i > index]
    return min(later) if later else None


def _add(issues: list[Issue], seen: set[Issue], issue: Issue) -> None:
    if issue not in seen:
        seen.add(issue)
        issues.append(issue)
