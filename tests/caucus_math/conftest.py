"""Test helper of the caucus-math tests: the reference data, parsed, as fixtures.

The reference data live outside the repository (the repo root's sibling
``shared/data``); tests skip with a reason when they are absent.  This is a
test helper only: the production importer is a separate component.

Fixtures: ``vectors`` (caucus_math_vectors.json), ``iowa`` (the certified 2020
release: units, exact county ratios, satellite weights).  Tests that take a
``threshold_fixture`` or ``worked_example`` argument are parametrised over the
entries of caucus_math_vectors.json.

Satellite SDE weights.  Each satellite group shares a fixed SDE pool in
proportion to headcount: ``weight = T_u * pool / base`` with ``base = sum(T_u)``
over the group.  For most satellites T_u is the published first-alignment
total, but the published SDEs of seven units reproduce only with a different
headcount (``SATELLITE_HEADCOUNTS``), and the group bases that result are
exactly the denominators the per-attendee constants of RULES.md §8 point to
(452, 943, 1,567, 141, 1,187).  One CD1 unit (``SATELLITE_STALE_BASE``) is
shared over 448, the CD1 base of the 2020-02-08 release, when another CD1
site (VAN 1158) still showed 112 attendees.
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache
from pathlib import Path

import pytest

from ledger.caucus_math import SATELLITE_SDE_POOLS_2020
from tests.shared_data import SHARED_DATA, WHERE

REPO_ROOT = Path(__file__).resolve().parents[2]
DATA_DIR = SHARED_DATA
IOWA_DIR = DATA_DIR / "iowa2020"
VECTORS = DATA_DIR / "caucus_math_vectors.json"
PRECINCTS_CSV = IOWA_DIR / "iowa2020_precincts.csv"
APPORTIONMENT_CSV = IOWA_DIR / "idp_apportionment.csv"

# Headcounts whose published SDE weight differs from the first-alignment total
# (VAN id -> headcount the weight implies; published first-alignment total in the comment).
SATELLITE_HEADCOUNTS: dict[str, int] = {
    "1158": 116,  # Cedar Rapids, Hoover Elementary: 43 (112 in the 2020-02-08 release)
    "1168": 192,  # Iowa City, Oaknoll Retirement: 190
    "1143": 67,  # Des Moines, Central Iowa Center for Independent Living: 50
    "1187": 160,  # Des Moines, Karen Baptist Church: 159
    "1186": 187,  # Des Moines, Southside YMCA: 183
    "1206": 105,  # Storm Lake, Better Day Cafe: 103
    "1118": 106,  # St. Petersburg, St. Andrew's: 105
}
# Units whose weight was shared over a base other than their group's.
SATELLITE_STALE_BASE: dict[str, int] = {"1156": 448}  # Waterloo, UAW Local 838
# Units whose SDEs are shared over a D other than the one in the normalised file:
# 67 attendees elect 7 by the table (the file derives 6 from the 50 of the first alignment).
SATELLITE_DELEGATES_USED: dict[str, int] = {"1143": 7}

CANDIDATES = (
    "Bennet", "Biden", "Bloomberg", "Buttigieg", "Delaney", "Gabbard", "Klobuchar",
    "Patrick", "Sanders", "Steyer", "Warren", "Yang", "Other", "Uncommitted",
)


def require(path: Path) -> Path:
    """Skip the calling test when a reference file is missing."""
    if not path.exists():
        pytest.skip(f"reference data not found at {path} ({WHERE})")
    return path


@dataclass(frozen=True)
class Unit:
    """One reporting unit of the certified release (a precinct or a satellite)."""

    county: str
    van_id: str
    name: str
    delegates: int
    is_satellite: bool
    first: dict[str, int]
    final: dict[str, int]
    reported_cds: dict[str, int]
    sde_reported: dict[str, Decimal]
    note: str

    @property
    def first_total(self) -> int:
        return sum(self.first.values())

    @property
    def final_total(self) -> int:
        return sum(self.final.values())


@lru_cache(maxsize=1)
def vectors() -> dict:
    with require(VECTORS).open(encoding="utf-8") as fh:
        return json.load(fh)


@lru_cache(maxsize=1)
def units() -> tuple[Unit, ...]:
    """All 1,765 units of ``iowa2020_precincts.csv``, in file order."""
    rows: dict[tuple[str, str], list[dict[str, str]]] = {}
    with require(PRECINCTS_CSV).open(encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh):
            rows.setdefault((row["county"], row["precinct_id"]), []).append(row)
    out = []
    for (county, van), rs in rows.items():
        head = rs[0]
        out.append(
            Unit(
                county=county,
                van_id=van,
                name=head["precinct_name"],
                delegates=int(head["precinct_delegates"]),
                is_satellite=head["is_satellite"] == "1",
                first={r["candidate"]: int(r["first_alignment"]) for r in rs},
                final={r["candidate"]: int(r["final_alignment"]) for r in rs},
                reported_cds={r["candidate"]: int(r["county_delegates_reported"]) for r in rs},
                sde_reported={r["candidate"]: Decimal(r["sde_reported"]) for r in rs},
                note=head["delegates_note"],
            )
        )
    return tuple(out)


@lru_cache(maxsize=1)
def county_ratios() -> dict[str, Fraction]:
    """Exact SDE per county delegate, per county, from the party's apportionment.

    The file's SDE column is the floating-point ``D * ratio``; a county's SDEs
    sum to a whole number of state delegates (within 1e-9), so the exact ratio
    is that integer over the county's delegate total.  Every row is checked to
    agree with it, i.e. the ratio is constant within the county.
    """
    d_sum: dict[str, int] = defaultdict(int)
    sde_sum: dict[str, Decimal] = defaultdict(Decimal)
    rows = []
    with require(APPORTIONMENT_CSV).open(encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh):
            county = row["County"].strip()  # "Guthrie " has a trailing space
            d = int(row["Delegates to County Convention"])
            sde = Decimal(row["State Delegate Equivalents"])
            d_sum[county] += d
            sde_sum[county] += sde
            rows.append((county, d, sde))
    ratios = {}
    for county, total in sde_sum.items():
        whole = int(total.to_integral_value())
        assert abs(total - whole) < Decimal("1e-9"), f"{county}: SDE sum {total} is not a whole number"
        ratios[county] = Fraction(whole, d_sum[county])
    for county, d, sde in rows:
        assert abs(Fraction(sde) - d * ratios[county]) < Fraction(1, 10**12), (
            f"{county}: row with D={d} has SDE {sde}, not D x {ratios[county]}"
        )
    return ratios


def satellite_headcount(unit: Unit) -> int:
    """The headcount a satellite's SDE weight is based on."""
    return SATELLITE_HEADCOUNTS.get(unit.van_id, unit.first_total)


@lru_cache(maxsize=1)
def satellite_bases() -> dict[str, int]:
    """Sum of headcounts per satellite group (the denominator of each pool share)."""
    bases: dict[str, int] = defaultdict(int)
    for u in units():
        if u.is_satellite:
            bases[u.county] += satellite_headcount(u)
    return dict(bases)


def satellite_weight(unit: Unit) -> Fraction:
    base = SATELLITE_STALE_BASE.get(unit.van_id, satellite_bases()[unit.county])
    return Fraction(satellite_headcount(unit) * SATELLITE_SDE_POOLS_2020[unit.county], base)


def satellite_delegates_used(unit: Unit) -> int:
    """The D a satellite's SDE weight is shared over."""
    return SATELLITE_DELEGATES_USED.get(unit.van_id, unit.delegates)


def sde_ratio(unit: Unit) -> Fraction:
    """Exact SDEs per county delegate of the unit."""
    if not unit.is_satellite:
        return county_ratios()[unit.county]
    d = satellite_delegates_used(unit)
    return satellite_weight(unit) / d if d else Fraction(0)


class Iowa2020:
    """What the ``iowa`` fixture gives: the parsed certified release and the derived exact weights."""

    Unit = Unit
    CANDIDATES = CANDIDATES
    SATELLITE_HEADCOUNTS = SATELLITE_HEADCOUNTS
    SATELLITE_STALE_BASE = SATELLITE_STALE_BASE
    SATELLITE_DELEGATES_USED = SATELLITE_DELEGATES_USED
    IOWA_DIR = IOWA_DIR

    units = staticmethod(units)
    county_ratios = staticmethod(county_ratios)
    satellite_headcount = staticmethod(satellite_headcount)
    satellite_bases = staticmethod(satellite_bases)
    satellite_weight = staticmethod(satellite_weight)
    satellite_delegates_used = staticmethod(satellite_delegates_used)
    sde_ratio = staticmethod(sde_ratio)


@pytest.fixture(scope="session")
def iowa() -> Iowa2020:
    """The certified 2020 release (skips when the reference data are absent)."""
    require(PRECINCTS_CSV)
    require(APPORTIONMENT_CSV)
    return Iowa2020()


@pytest.fixture(scope="session", name="vectors")
def vectors_fixture() -> dict:
    """caucus_math_vectors.json (skips when absent)."""
    return vectors()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrise over the JSON fixtures, so each threshold and worked example is its own test."""
    for arg, key, ident in (
        ("threshold_fixture", "thresholds", lambda fx: f"T{fx['attendance']}-D{fx['delegates']}"),
        ("worked_example", "allocations", lambda ex: ex["id"]),
    ):
        if arg not in metafunc.fixturenames:
            continue
        if not VECTORS.exists():
            metafunc.parametrize(
                arg, [pytest.param(None, marks=pytest.mark.skip(reason=f"{VECTORS} not found"))]
            )
            continue
        items = vectors()[key]
        metafunc.parametrize(arg, items, ids=[ident(x) for x in items])
