"""The reference files: the party's apportionment and the unit directory.

* ``idp_apportionment.csv`` gives D per precinct (by county and short name) and the precinct's SDE
  weight. A county's ratio is its state delegates over its county delegates; the file only has the
  weights as binary floats (``3.9999999999999999``), so the county's SDE sum is snapped to the nearest
  simple fraction and every precinct is checked against it: the ratio must be constant in a county.
* ``iowa2020_precincts.csv`` maps each unit's site name to its VAN precinct id, the one id that is
  stable across releases, and gives the short name and the satellite flag.
* ``nyt_feed_*.csv`` confirms the VAN id ↔ short name pairs and names the satellites' short names.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from pathlib import Path

from producers.importers.idp2020.text import decode_name, name_key, parse_count
from producers.importers.issues import Issue, utf8_text

__all__ = [
    "APPORTIONMENT", "DIRECTORY", "NYT_FEED",
    "Apportionment", "UnitRef", "Directory",
    "load_apportionment", "load_directory", "satellite_group_of",
]  # fmt: skip

APPORTIONMENT = "idp_apportionment.csv"
DIRECTORY = "iowa2020_precincts.csv"
NYT_FEED = "nyt_feed_2020-02-06T1850Z.csv"

_RATIO_TOLERANCE = Fraction(1, 10**6)  # the file's floats carry ~1e-16 noise; a wrong ratio is off by > 1e-3
_SATELLITE_COUNTY = re.compile(r"^(CD[1-4]) satellite$", re.IGNORECASE)


def satellite_group_of(county: str) -> str | None:
    """The satellite group a pseudo-county stands for (``CD1`` … ``CD4``, ``out-of-state``), else None."""
    text = decode_name(county)
    match = _SATELLITE_COUNTY.match(text)
    if match:
        return match.group(1).upper()
    if text.casefold() == "out of state satellite":
        return "out-of-state"
    return None


def _rows(path: Path, required: tuple[str, ...], issues: list[Issue]) -> Iterator[tuple[int, dict[str, str]]]:
    """Rows with stripped header names and values; a missing file or column is an error, not a crash."""
    try:
        handle = utf8_text(path, path.name, issues)
    except OSError as exc:
        issues.append(Issue("error", path.name, f"cannot read: {exc}"))
        return
    if handle is None:
        return
    with handle:
        reader = csv.reader(handle)
        header = [h.strip() for h in next(reader, [])]
        lacking = [c for c in required if c not in header]
        if lacking:
            issues.append(Issue("error", path.name, f"header lacks {lacking}"))
            return
        for lineno, values in enumerate(reader, start=2):
            if values:
                yield lineno, {h: v.strip() for h, v in zip(header, values)}


@dataclass(slots=True)
class Apportionment:
    delegates: dict[tuple[str, str], int] = field(default_factory=dict)  # (county key, short name key) -> D
    ratios: dict[str, Fraction] = field(default_factory=dict)  # county name -> exact ratio
    zero_units: list[str] = field(default_factory=list)  # rows with D = 0 (no caucus held)


def load_apportionment(path: Path, issues: list[Issue]) -> Apportionment:
    out = Apportionment()
    per_county: dict[str, list[tuple[str, int, Decimal]]] = {}
    for lineno, row in _rows(path, ("County", "Precinct Short Name", "Delegates to County Convention",
                                    "State Delegate Equivalents"), issues):  # fmt: skip
        county, short = decode_name(row["County"]), row["Precinct Short Name"]
        try:
            d, sde = parse_count(row["Delegates to County Convention"]), Decimal(row["State Delegate Equivalents"])
        except (ValueError, InvalidOperation) as exc:
            issues.append(Issue("error", f"{path.name}:{lineno}", f"{county}/{short}: {exc}"))
            continue
        key = name_key(county, short)
        if key in out.delegates:
            issues.append(Issue("error", f"{path.name}:{lineno}", f"{county}/{short} apportioned twice"))
        out.delegates[key] = d
        if d == 0:
            out.zero_units.append(f"{county}/{short}")
        per_county.setdefault(county, []).append((short, d, sde))
    for county, rows in sorted(per_county.items()):
        ratio = _county_ratio(county, rows, path.name, issues)
        if ratio is not None:
            out.ratios[county] = ratio
    return out


def _county_ratio(county: str, rows: list[tuple[str, int, Decimal]], where: str, issues: list[Issue]) -> Fraction | None:
    total_d = sum(d for _, d, _ in rows)
    if total_d == 0:
        issues.append(Issue("error", f"{where}: {county}", "no county delegates; no SDE ratio"))
        return None
    total_sde = Fraction(sum((s for _, _, s in rows), Decimal(0)))
    state = total_sde.limit_denominator(100)  # the county's state delegates; whole numbers in 2020
    if abs(state - total_sde) > _RATIO_TOLERANCE * len(rows):
        state = total_sde
    ratio = state / total_d
    for short, d, sde in rows:
        if abs(d * ratio - Fraction(sde)) > _RATIO_TOLERANCE:
            issues.append(Issue("error", f"{where}: {county}/{short}",
                                f"SDE {sde} is not D {d} × county ratio {ratio} ({float(d * ratio):.6f}): ratio not constant"))
            return None
    return ratio


@dataclass(frozen=True, slots=True)
class UnitRef:
    """A unit as the directory knows it."""

    unit_id: str
    county: str
    name: str
    short_name: str | None
    satellite_group: str | None
    delegates_listed: int | None


@dataclass(slots=True)
class Directory:
    units: dict[str, UnitRef] = field(default_factory=dict)  # VAN id -> unit
    by_name: dict[tuple[str, str], str] = field(default_factory=dict)  # name key -> VAN id
    by_short: dict[tuple[str, str], str] = field(default_factory=dict)  # (county, short) key -> VAN id


def load_directory(path: Path, nyt_path: Path, issues: list[Issue]) -> Directory:
    out = Directory()
    nyt = _nyt_short_names(nyt_path, issues)
    for lineno, row in _rows(path, ("county", "precinct_id", "precinct_name", "precinct_delegates",
                                    "precinct_short_name", "is_satellite"), issues):  # fmt: skip
        unit_id = row["precinct_id"]
        if unit_id in out.units:
            continue  # one row per candidate; the unit's columns repeat
        county, name = decode_name(row["county"]), decode_name(row["precinct_name"])
        if not unit_id.isdigit():
            issues.append(Issue("warning", f"{path.name}:{lineno}", f"{county}/{name}: VAN id {unit_id!r} is not a number"))
            continue
        group = satellite_group_of(county) if row["is_satellite"] == "1" else None
        if row["is_satellite"] == "1" and group is None:
            issues.append(Issue("warning", f"{path.name}:{lineno}", f"satellite {name} in unknown group {county!r}"))
            continue
        short = row["precinct_short_name"] or None
        nyt_short = nyt.get(unit_id)
        if nyt_short is not None and short is not None and nyt_short != short:
            issues.append(Issue("warning", f"{path.name}:{lineno}",
                                f"{county}/{name}: short name {short!r} but NYT feed has {nyt_short!r} for VAN {unit_id}"))
        listed = row["precinct_delegates"]
        ref = UnitRef(unit_id, county, name, short or nyt_short, group, int(listed) if listed.isdigit() else None)
        out.units[unit_id] = ref
        out.by_name[name_key(county, name)] = unit_id
        if ref.short_name is not None:
            out.by_short[name_key(county, ref.short_name)] = unit_id
    return out


def _nyt_short_names(path: Path, issues: list[Issue]) -> dict[str, str]:
    return {row["precinct_id"]: decode_name(row["precinct"])
            for _, row in _rows(path, ("precinct", "precinct_id", "County"), issues)}  # fmt: skip
