"""The three snapshots of the party's results site, parsed into per-unit numbers.

Each snapshot is long form (``county, precinct, candidate, measure, value``) with the site's county
totals (``Total``) and the scraper's own sums (``Total_recalc``) mixed in; those are not reporting
units and are counted, not imported. A unit is kept only when all 14 × 3 values are present and
readable, so a half-parsed unit can never reach the ledger as a result.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

from producers.importers.idp2020.text import decode_name, name_key, parse_count, parse_sde
from producers.importers.issues import Issue, utf8_text

__all__ = ["CANDIDATES", "Release", "RELEASES", "UnitNumbers", "ParsedRelease", "parse_release"]

CANDIDATES: tuple[str, ...] = (
    "Bennet", "Biden", "Bloomberg", "Buttigieg", "Delaney", "Gabbard", "Klobuchar",
    "Patrick", "Sanders", "Steyer", "Warren", "Yang", "Other", "Uncommitted",
)  # fmt: skip
MEASURES = {"expression_1": "first", "expression_2": "final", "sde": "sde"}
NOT_UNITS = frozenset({"total", "total_recalc"})
COLUMNS = ("county", "precinct", "candidate", "measure", "value")


@dataclass(frozen=True, slots=True)
class Release:
    """One snapshot: its label (used in event ids), file, and the time the site showed it."""

    label: str
    filename: str
    published_at: datetime
    description: str


RELEASES: tuple[Release, ...] = (
    Release("2020-02-07T0113Z", "idp_results_2020-02-07T0113Z.csv", datetime(2020, 2, 7, 1, 13, tzinfo=UTC),
            "results site at 2020-02-07 01:13 UTC (1,711 of 1,765 units)"),
    Release("2020-02-08T0628Z", "idp_results_2020-02-08T0628Z.csv", datetime(2020, 2, 8, 6, 28, tzinfo=UTC),
            "results site at 2020-02-08 06:28 UTC (the 100 % release of 2020-02-06)"),
    Release("2020-04-06T2345Z", "idp_results_2020-04-06T2345Z_certified.csv", datetime(2020, 4, 6, 23, 45, tzinfo=UTC),
            "certified results (after the review of 2020-02-09, the recanvass of 2020-02-18 and the recount of 2020-02-27)"),
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class UnitNumbers:
    """A unit's published numbers in one release, names decoded."""

    county: str
    name: str
    first: dict[str, int]
    final: dict[str, int]
    sde: dict[str, Decimal]

    def same_numbers(self, other: UnitNumbers) -> bool:
        return (self.first, self.final, self.sde) == (other.first, other.final, other.sde)

    def changed_measures(self, other: UnitNumbers) -> list[str]:
        pairs = (("first alignment", self.first, other.first), ("final alignment", self.final, other.final),
                 ("SDE", self.sde, other.sde))  # fmt: skip
        return [label for label, mine, theirs in pairs if mine != theirs]


@dataclass(slots=True)
class ParsedRelease:
    release: Release
    units: dict[tuple[str, str], UnitNumbers] = field(default_factory=dict)
    total_rows: int = 0
    issues: list[Issue] = field(default_factory=list)


def parse_release(path: Path, release: Release, candidates: Sequence[str] = CANDIDATES) -> ParsedRelease:
    out = ParsedRelease(release)
    where = release.filename
    try:
        handle = utf8_text(path, where, out.issues)
    except OSError as exc:
        out.issues.append(Issue("error", where, f"cannot read: {exc}"))
        return out
    if handle is None:
        return out
    known = set(candidates)
    raw: dict[tuple[str, str], dict[tuple[str, str], str]] = {}
    names: dict[tuple[str, str], tuple[str, str]] = {}
    with handle:
        reader = csv.reader(handle)
        header = [h.strip() for h in next(reader, [])]
        if any(col not in header for col in COLUMNS):
            out.issues.append(Issue("error", where, f"header {header} lacks one of {list(COLUMNS)}"))
            return out
        at = [header.index(col) for col in COLUMNS]
        keys: dict[tuple[str, str], tuple[str, str] | None] = {}  # raw (county, precinct) -> unit key, None: a total
        for lineno, row in enumerate(reader, start=2):
            if len(row) < len(header):
                if any(v.strip() for v in row):
                    out.issues.append(Issue("warning", f"{where}:{lineno}", f"short row {row!r}; not imported"))
                continue
            county, precinct, candidate, measure, value = (row[i] for i in at)
            if (county, precinct) not in keys:
                fresh = None if precinct.strip().casefold() in NOT_UNITS else name_key(county, precinct)
                keys[(county, precinct)] = fresh
                if fresh is not None:
                    names.setdefault(fresh, (decode_name(county), decode_name(precinct)))
            key = keys[(county, precinct)]
            if key is None:
                out.total_rows += 1
                continue
            candidate, measure = candidate.strip(), measure.strip()
            if candidate not in known or measure not in MEASURES:
                out.issues.append(Issue("warning", f"{where}:{lineno}",
                                        f"unknown candidate {candidate!r} or measure {measure!r}; row not imported"))
                continue
            cell = raw.setdefault(key, {})
            value = value.strip()
            previous = cell.setdefault((candidate, measure), value)
            if previous != value:
                out.issues.append(Issue("warning", f"{where}:{lineno}",
                                        f"{county}/{precinct} {candidate} {measure} given twice ({previous!r}, {value!r}); kept the first"))
    for key, cell in raw.items():
        unit = _unit(names[key], cell, candidates, where, out.issues)
        if unit is not None:
            out.units[key] = unit
    return out


def _unit(name: tuple[str, str], cell: dict[tuple[str, str], str], candidates: Sequence[str], where: str,
          issues: list[Issue]) -> UnitNumbers | None:
    county, precinct = name
    missing = [f"{c} {m}" for c in candidates for m in MEASURES if (c, m) not in cell]
    if missing:
        issues.append(Issue("warning", f"{where}: {county}/{precinct}",
                            f"incomplete unit (missing {', '.join(missing[:4])}{'…' if len(missing) > 4 else ''}); not imported"))
        return None
    try:
        first = {c: parse_count(cell[(c, "expression_1")]) for c in candidates}
        final = {c: parse_count(cell[(c, "expression_2")]) for c in candidates}
        sde = {c: parse_sde(cell[(c, "sde")]) for c in candidates}
    except ValueError as exc:
        issues.append(Issue("warning", f"{where}: {county}/{precinct}", f"unreadable value ({exc}); not imported"))
        return None
    return UnitNumbers(county, precinct, first, final, sde)
