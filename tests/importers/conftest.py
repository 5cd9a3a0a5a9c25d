"""Fixtures for the 2020 importer tests: the real data (skipped when absent) and what the tests expect,
derived here from the CSVs with plain ``csv`` code that shares nothing with the importer."""

from __future__ import annotations

import csv
import html
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pytest

from ledger.journal import Journal, LoggedEvent
from ledger.log.sqlite import SqliteLog
from producers.importers.idp2020 import ImportSummary, import_idp2020, plan_import
from producers.importers.idp2020.build import ImportPlan
from tests.shared_data import IOWA2020, WHERE

DATA_DIR = IOWA2020
HALF_DIGIT = Decimal("0.00005")
RELEASE_FILES = (
    ("2020-02-07T0113Z", "idp_results_2020-02-07T0113Z.csv"),
    ("2020-02-08T0628Z", "idp_results_2020-02-08T0628Z.csv"),
    ("2020-04-06T2345Z", "idp_results_2020-04-06T2345Z_certified.csv"),
)


@pytest.fixture(scope="session")
def iowa_dir() -> Path:
    if not (DATA_DIR / "idp_apportionment.csv").is_file():
        pytest.skip(f"the 2020 Iowa data is not at {DATA_DIR} ({WHERE})")
    return DATA_DIR


@pytest.fixture(scope="session")
def idp_plan(iowa_dir: Path) -> ImportPlan:
    return plan_import(iowa_dir)


@pytest.fixture(scope="session")
def imported(iowa_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Journal, list[LoggedEvent], ImportSummary]]:
    """The real history imported once into an embedded log."""
    journal = Journal(SqliteLog(tmp_path_factory.mktemp("idp") / "log.sqlite3"))
    summary = import_idp2020(iowa_dir, journal)
    yield journal, list(journal.read()), summary
    journal.close()


def _unit_key(county: str, name: str) -> tuple[str, str]:
    return county.strip(), " ".join(html.unescape(html.unescape(name)).split())


@dataclass
class Published:
    """Per release: unit key -> {(candidate, measure): value}; and the derived event counts."""

    releases: dict[str, dict[tuple[str, str], dict[tuple[str, str], Decimal]]]

    def units(self, label: str) -> set[tuple[str, str]]:
        return set(self.releases[label])

    def changed(self, before: str, after: str) -> set[tuple[str, str]]:
        a, b = self.releases[before], self.releases[after]
        return {u for u in a.keys() & b.keys() if a[u] != b[u]}

    def first_seen(self, label: str) -> set[tuple[str, str]]:
        seen: set[tuple[str, str]] = set()
        for other, _ in RELEASE_FILES:
            if other == label:
                return self.units(label) - seen
            seen |= self.units(other)
        raise KeyError(label)

    def satellite_weight_changes(self, before: str, after: str) -> set[tuple[str, str]]:
        """Satellites shown in both releases whose SDE weight changed. A satellite's displayed SDEs add
        up to its weight within half a digit per nonzero value (its CDs may move between candidates,
        its weight does not), so a larger difference between the sums is a new weight."""
        a, b = self.releases[before], self.releases[after]
        out = set()
        for unit in a.keys() & b.keys():
            if "Satellite" not in unit[0]:
                continue
            shown_a = [v for (_, m), v in a[unit].items() if m == "sde" and v]
            shown_b = [v for (_, m), v in b[unit].items() if m == "sde" and v]
            if abs(sum(shown_a, Decimal(0)) - sum(shown_b, Decimal(0))) > HALF_DIGIT * (len(shown_a) + len(shown_b)):
                out.add(unit)
        return out

    def redefined(self) -> list[str]:
        """The releases after the first at which some satellite's weight changed: the ones the
        election has to be defined again at."""
        labels = [label for label, _ in RELEASE_FILES]
        return [after for before, after in zip(labels, labels[1:]) if self.satellite_weight_changes(before, after)]

    def county_total(self, label: str, county: str, candidate: str, measure: str) -> Decimal:
        return sum((v for (c, _), unit in self.releases[label].items() if c == county for (cand, m), v in unit.items()
                    if m == measure and cand == candidate), Decimal(0))  # fmt: skip

    def total(self, label: str, candidate: str | None, measure: str) -> Decimal:
        return sum((v for unit in self.releases[label].values() for (c, m), v in unit.items()
                    if m == measure and candidate in (None, c)), Decimal(0))  # fmt: skip


def _read(path: Path) -> Iterator[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        yield from csv.DictReader(handle)


@pytest.fixture(scope="session")
def published(iowa_dir: Path) -> Published:
    releases = {}
    for label, filename in RELEASE_FILES:
        units: dict[tuple[str, str], dict[tuple[str, str], Decimal]] = {}
        for row in _read(iowa_dir / filename):
            if row["precinct"] in ("Total", "Total_recalc"):
                continue
            value = Decimal(row["value"]).quantize(Decimal("0.0001"))
            units.setdefault(_unit_key(row["county"], row["precinct"]), {})[(row["candidate"], row["measure"])] = value
        releases[label] = units
    return Published(releases)


@pytest.fixture(scope="session")
def directory_rows(iowa_dir: Path) -> list[dict[str, str]]:
    return list(_read(iowa_dir / "iowa2020_precincts.csv"))


@pytest.fixture(scope="session")
def van_keys(directory_rows: list[dict[str, str]]) -> dict[str, tuple[str, str]]:
    """VAN id -> the unit key ``published`` uses, from the directory's (county, name)."""
    return {row["precinct_id"]: _unit_key(row["county"], row["precinct_name"]) for row in directory_rows}
