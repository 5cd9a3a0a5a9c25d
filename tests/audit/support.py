"""Helpers of the auditor tests (loaded by path from ``conftest.py``; the suite runs in importlib mode):
a synthetic election built so that each RULES.md §12 check fires on a unit made for it, the embedded
log that holds it, and plain-``csv`` readers of the real 2020 files for independent expectations.

The synthetic election, by unit (D, T = first-alignment total unless stated):

======================  =========================================================================
``ok-1``                D 5, A40 B35 C25, reported A2 B2 C1: clean (RULES §13 E01)
``ok-2``                D 14, A19 B105, reported A2 B12: clean, threshold exactly met (E02)
``overcount``           attendance 90 reported, first total 100: OVERCOUNT
``final-gt-first``      final total 105 > first 100: FINAL_GT_FIRST
``locked``              D 6, first A25 B18 C9 D8, final A20 B18 C14: LOCKED_GROUP_SHRANK (A)
``too-many``            D 3, 10/11/6/7 (E04): TOO_MANY_VIABLE
``total``               reported 6 delegates of 5: DELEGATE_TOTAL
``nonviable``           C has 10 < threshold 15 and was reported 1: NONVIABLE_AWARDED
``alloc``               reported A3 B1 C1 for A40 B35 C25: ALLOCATION error
``soft``                D 1, plurality A but B reported: ALLOCATION soft
``lot``                 D 8, 240/179 (+65 left) reported 4/4 (E09): ALLOCATION ambiguous (2016 lot)
``more-votes``          reported A2 B1 C2 for A40 B35 C25: MORE_VOTES_FEWER_DELS
``sat``                 satellite, 50 at the first alignment but SDE weight of 67 attendees, 7 reported:
                        SATELLITE_DELEGATES (and DELEGATE_TOTAL)
``left``                D 4, first A40 B40 C20, final A30 B30 C13: idp-2016 recomputes the threshold
``cut``                 D 2, A12 B9 C9 (E05): a lot draws which equal group realigns (the APP: both)
``corrected``           reported 6 of 5 on caucus night, corrected (recanvass) on day 2
``late``                first reported on day 2
``tie``                 D 6, W100 S50 B50 (E10): a toss pending until ``TieBroken`` on day 3
======================  =========================================================================
"""

from __future__ import annotations

import csv
import html
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

from ledger.events import (
    Channel,
    CorrectionStage,
    County,
    ElectionDefined,
    Event,
    Result,
    ResultCorrected,
    ResultReported,
    SatelliteGroup,
    TieBroken,
    TieMethod,
    UnitDefinition,
    new_event,
)
from ledger.journal import Journal
from ledger.log.sqlite import SqliteLog
from tests.shared_data import IOWA2020

ELECTION = "synthetic-2020"
CANDIDATES = ("A", "B", "C", "D", "Uncommitted")
T_NIGHT = datetime(2020, 2, 4, 2, 0, tzinfo=UTC)
T_DAY2 = datetime(2020, 2, 5, 12, 0, tzinfo=UTC)
T_DAY3 = datetime(2020, 2, 6, 0, 0, tzinfo=UTC)
PARTITIONS = 4

REPO = Path(__file__).resolve().parents[2]
IOWA_DIR = IOWA2020


@dataclass(frozen=True)
class Spec:
    unit_id: str
    d: int | None
    first: dict[str, int]
    final: dict[str, int] | None = None
    reported: dict[str, int] | None = None
    attendance: int | None = None
    county: str = "ash"


E01 = {"A": 40, "B": 35, "C": 25}
UNITS: tuple[Spec, ...] = (
    Spec("ok-1", 5, E01, reported={"A": 2, "B": 2, "C": 1}),
    Spec("ok-2", 14, {"A": 19, "B": 105}, reported={"A": 2, "B": 12}),
    Spec("overcount", 5, E01, reported={"A": 2, "B": 2, "C": 1}, attendance=90),
    Spec("final-gt-first", 5, E01, final={"A": 45, "B": 35, "C": 25}, reported={"A": 2, "B": 2, "C": 1}),
    Spec("locked", 6, {"A": 25, "B": 18, "C": 9, "D": 8}, final={"A": 20, "B": 18, "C": 14}, reported={"A": 2, "B": 2, "C": 2}, county="birch"),
    Spec("too-many", 3, {"A": 10, "B": 11, "C": 6, "Uncommitted": 7}, reported={"A": 1, "B": 1, "Uncommitted": 1}, county="birch"),
    Spec("total", 5, E01, reported={"A": 3, "B": 2, "C": 1}),
    Spec("nonviable", 5, {"A": 50, "B": 40, "C": 10}, reported={"A": 2, "B": 2, "C": 1}),
    Spec("alloc", 5, E01, reported={"A": 3, "B": 1, "C": 1}, county="birch"),
    Spec("soft", 1, {"A": 10, "B": 8, "C": 8}, reported={"B": 1}),
    Spec("lot", 8, {"A": 240, "B": 179, "C": 65}, final={"A": 240, "B": 179}, reported={"A": 4, "B": 4}, county="birch"),
    Spec("more-votes", 5, E01, reported={"A": 2, "B": 1, "C": 2}),
    Spec("sat", None, {"A": 30, "B": 20}, reported={"A": 4, "B": 3}, county="sat"),
    Spec("left", 4, {"A": 40, "B": 40, "C": 20}, final={"A": 30, "B": 30, "C": 13}),
    Spec("cut", 2, {"A": 12, "B": 9, "C": 9}),
    Spec("corrected", 5, E01, reported={"A": 3, "B": 2, "C": 1}, county="birch"),
    Spec("late", 5, {"A": 60, "B": 40}, reported={"A": 3, "B": 2}, county="birch"),
    Spec("tie", 6, {"A": 100, "B": 50, "C": 50}),
)
SPECS = {s.unit_id: s for s in UNITS}
DESIGNED: dict[str, tuple[str, str]] = {
    "overcount": ("OVERCOUNT", "error"),
    "final-gt-first": ("FINAL_GT_FIRST", "error"),
    "locked": ("LOCKED_GROUP_SHRANK", "error"),
    "too-many": ("TOO_MANY_VIABLE", "warn"),
    "total": ("DELEGATE_TOTAL", "error"),
    "nonviable": ("NONVIABLE_AWARDED", "error"),
    "alloc": ("ALLOCATION", "error"),
    "soft": ("ALLOCATION", "soft"),
    "lot": ("ALLOCATION", "ambiguous"),
    "more-votes": ("MORE_VOTES_FEWER_DELS", "info"),
    "sat": ("SATELLITE_DELEGATES", "warn"),
}


def definition() -> ElectionDefined:
    counties = (
        County("ash", "Ash", Fraction(1, 5)),
        County("birch", "Birch", Fraction(3, 10)),
        County("sat", "Satellites", Fraction(1, 100)),
    )
    units = []
    for s in UNITS:
        if s.county == "sat":
            # 67 attendees' share of a pool of 1 SDE over a base of 100: weight 67/100.
            weight = Fraction(67, 100)
            units.append(UnitDefinition(s.unit_id, f"Site {s.unit_id}", "sat", None, satellite_group="SG", sde_weight=weight))
        else:
            units.append(UnitDefinition(s.unit_id, f"Precinct {s.unit_id}", s.county, s.d, short_name=s.unit_id.upper()))
    units.append(UnitDefinition("silent", "Precinct silent", "ash", 3))
    return ElectionDefined(
        name="Synthetic caucus", rule_set="idp-2020", candidates=CANDIDATES, counties=counties, units=tuple(units),
        satellite_groups=(SatelliteGroup("SG", "Satellite group", Fraction(1), 100),),
    )


def make_event(
    payload: Any, unit_id: str, at: datetime, *, actor: str = "chair", channel: Channel = Channel.APP, event_id: str | None = None
) -> Event[Any]:
    return new_event(payload, election_id=ELECTION, unit_id=unit_id, actor=actor, channel=channel, occurred_at=at, recorded_at=at, event_id=event_id)


def make_result(s: Spec, reported: dict[str, int] | None = None) -> Result:
    return Result(s.first, s.final if s.final is not None else s.first, attendance=s.attendance,
                  delegates_reported=reported if reported is not None else s.reported)  # fmt: skip


def election_events() -> list[Event[Any]]:
    """The whole history, in the order it was recorded."""
    events: list[Event[Any]] = [make_event(definition(), "", T_NIGHT - timedelta(hours=8), actor="party", channel=Channel.IMPORT)]
    reports: dict[str, Event[Any]] = {}
    for s in UNITS:
        if s.unit_id == "late":
            continue
        reports[s.unit_id] = make_event(ResultReported(make_result(s), reporter="chair"), s.unit_id, T_NIGHT)
        events.append(reports[s.unit_id])
    fixed = ResultCorrected(make_result(SPECS["corrected"], {"A": 2, "B": 2, "C": 1}), supersedes=reports["corrected"].event_id,
                            reason="worksheet recheck: 6 delegates reported for 5", authority="county chair",
                            stage=CorrectionStage.RECANVASS)  # fmt: skip
    events.append(make_event(fixed, "corrected", T_DAY2, actor="county chair", channel=Channel.PAPER))
    events.append(make_event(ResultReported(make_result(SPECS["late"]), reporter="phone bank"), "late", T_DAY2, channel=Channel.PHONE))
    toss = TieBroken(("B", "C"), 1, ("B",), TieMethod.COIN, caller="B", witnesses=("w1", "w2"))
    events.append(make_event(toss, "tie", T_DAY3))
    return events


@dataclass
class Ledger:
    data_dir: Path
    events: list[Event[Any]]

    @property
    def log_path(self) -> Path:
        return self.data_dir / "log.sqlite3"

    def log(self) -> SqliteLog:
        return SqliteLog(self.log_path, partitions=PARTITIONS)

    def append(self, events: list[Event[Any]]) -> None:
        journal = Journal(self.log())
        try:
            journal.append_batch(events)
        finally:
            journal.close()


# -- the real 2020 history -------------------------------------------------------------------------------


def read_release(path: Path) -> dict[tuple[str, str], dict[tuple[str, str], Decimal]]:
    """A results-site snapshot by (county, unit name), with plain ``csv`` code: (candidate, measure) ->
    value, SDEs as displayed (4 decimals; the scrape carries float noise)."""
    out: dict[tuple[str, str], dict[tuple[str, str], Decimal]] = {}
    with path.open(newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            if row["precinct"] in ("Total", "Total_recalc"):
                continue
            key = (row["county"].strip(), " ".join(html.unescape(html.unescape(row["precinct"])).split()))
            out.setdefault(key, {})[(row["candidate"], row["measure"])] = Decimal(row["value"] or 0).quantize(Decimal("0.0001"))
    return out


@dataclass
class CertifiedUnit:
    van_id: str
    county: str
    satellite: bool
    delegates: int
    first: dict[str, int]
    final: dict[str, int]
    reported: dict[str, int]


def read_certified(iowa_dir: Path) -> list[CertifiedUnit]:
    """``iowa2020_precincts.csv`` (the normalised certified results), read with plain ``csv``."""
    units: dict[str, CertifiedUnit] = {}
    with (iowa_dir / "iowa2020_precincts.csv").open(newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            van = row["precinct_id"]
            u = units.get(van)
            if u is None:
                u = units[van] = CertifiedUnit(van, row["county"].strip(), row["is_satellite"].strip().lower() in ("true", "1", "yes"),
                                               int(row["precinct_delegates"]), {}, {}, {})  # fmt: skip
            c = row["candidate"]
            u.first[c] = int(row["first_alignment"])
            u.final[c] = int(row["final_alignment"])
            u.reported[c] = int(row["county_delegates_reported"])
    return list(units.values())
