"""From parsed releases to events: the election, first reports, and corrections between releases.

The election is defined at the first release, with the satellite weights that release shows, and
defined again at a later release only when the definition changed (the CD1 satellite pool was shared
over a new base for the certified release; see ``definitions``); a later ``ElectionDefined`` of the
same election replaces the earlier one in the projections. A unit's first appearance is a
``ResultReported``; each later release whose numbers differ from what the unit last showed is a
``ResultCorrected`` that supersedes the previous event. Event ids are uuid5 of (election, release,
unit), the unit empty for the definition, so importing the same files again yields the same ids and
the log appends nothing. Every event is stamped with its release's time (occurred_at and
recorded_at), so an as-of query at a release's time sees exactly that release.

Stages: changes between 2020-02-07 and 2020-02-08 are ``review``. The certified release is one
snapshot after three processes (the party's review of 2020-02-09, the recanvass of 2020-02-18 and the
recount of 2020-02-27); the data cannot tell which of them changed a unit, and the party did not
publish the 23 recounted precincts, so every change there is ``recanvass`` unless the caller names
recount units (``recount_units``).
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction
from typing import Any

from ledger.events import (
    Channel,
    CorrectionStage,
    ElectionDefined,
    Event,
    Result,
    ResultCorrected,
    ResultReported,
    new_event,
)
from producers.importers.idp2020.definitions import RULE_SET, release_definitions
from producers.importers.idp2020.delegates import fit_satellite, precinct_delegates
from producers.importers.idp2020.reference import Apportionment, Directory, UnitRef
from producers.importers.idp2020.releases import RELEASES, Release, UnitNumbers
from producers.importers.idp2020.units import MappedRelease
from producers.importers.issues import Issue

__all__ = ["ELECTION_ID", "ACTOR", "AUTHORITY", "RULE_SET", "event_id", "StageCount", "ImportPlan", "build_events"]

ELECTION_ID = "iowa-2020-dem-caucus"
ACTOR = "idp-results-site"
AUTHORITY = "Iowa Democratic Party"
_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "caucus-ledger:import:idp2020")
_STAGES = {RELEASES[1].label: CorrectionStage.REVIEW, RELEASES[2].label: CorrectionStage.RECANVASS}
_CERTIFIED_NOTE = (
    "; the certified release folds the party's review (2020-02-09), recanvass (2020-02-18) and "
    "recount (2020-02-27) into one snapshot"
)


def event_id(election_id: str, release_label: str, unit_id: str) -> str:
    """Deterministic: the same election, release and unit always give the same event id (unit
    ``""``: the election's definition at that release)."""
    return str(uuid.uuid5(_NAMESPACE, f"{election_id}|{release_label}|{unit_id}"))


@dataclass(slots=True)
class StageCount:
    release: str
    published_at: str
    units: int = 0
    defined: bool = False  # an ElectionDefined at this release (the first, or a changed definition)
    reported: int = 0
    corrected: dict[str, int] = field(default_factory=dict)
    unchanged: int = 0
    total_rows: int = 0  # county "Total" / "Total_recalc" rows: not reporting units, not imported

    def to_json(self) -> dict[str, Any]:
        return {"release": self.release, "published_at": self.published_at, "units": self.units,
                "election_defined": self.defined, "reported": self.reported, "corrected": dict(self.corrected),
                "unchanged": self.unchanged, "total_rows_skipped": self.total_rows}  # fmt: skip


@dataclass(slots=True)
class ImportPlan:
    election_id: str
    events: list[Event[Any]]
    stages: list[StageCount]
    issues: list[Issue]

    @property
    def definitions(self) -> list[Event[ElectionDefined]]:
        """The election's definitions in the order they are appended (one per release that changed it)."""
        return [e for e in self.events if isinstance(e.payload, ElectionDefined)]

    @property
    def definition(self) -> ElectionDefined:
        """The definition in force after the whole import."""
        return self.definitions[-1].payload

    def definition_at(self, at: datetime) -> ElectionDefined | None:
        """The definition in force at ``at`` (the latest recorded at or before it)."""
        standing = [e.payload for e in self.definitions if e.recorded_at <= at]
        return standing[-1] if standing else None


def _result(ref: UnitRef, numbers: UnitNumbers, ratios: dict[str, Fraction], where: str,
            issues: list[Issue]) -> Result:
    """The reported result with CDs recovered from the SDEs (None when they cannot be recovered)."""
    label = f"{where}: {ref.county}/{ref.name} (VAN {ref.unit_id})"
    delegates: dict[str, int] | None = None
    if ref.satellite_group is not None:
        fit = fit_satellite(numbers.sde, sum(numbers.first.values()))
        if fit is None:
            issues.append(Issue("warning", label, "satellite SDEs fit no D near the attendance table; CDs left out"))
        else:
            delegates = fit.delegates
            if fit.note:
                issues.append(Issue("info", label, fit.note))
    elif ref.county in ratios:
        cds, misfits = precinct_delegates(numbers.sde, ratios[ref.county])
        if misfits:
            issues.append(Issue("warning", label, f"SDE of {', '.join(misfits)} is not a whole number of CDs × ratio; CDs left out"))
        else:
            delegates = cds
    return Result(first_alignment=numbers.first, final_alignment=numbers.final, delegates_reported=delegates)


def build_events(apportionment: Apportionment, directory: Directory, releases: Sequence[MappedRelease],
                 issues: list[Issue], *, election_id: str = ELECTION_ID,
                 recount_units: Collection[str] = ()) -> ImportPlan:
    results: list[list[Event[Any]]] = []  # per release
    stages: list[StageCount] = []
    last: dict[str, tuple[str, UnitNumbers]] = {}  # unit -> (event id, numbers) of its latest event
    for mapped in releases:
        release = mapped.parsed.release
        count = StageCount(release.label, release.published_at.isoformat(), units=len(mapped.units),
                           total_rows=mapped.parsed.total_rows)  # fmt: skip
        stages.append(count)
        results.append([])
        for unit_id in sorted(mapped.units, key=int):
            numbers = mapped.units[unit_id]
            ref = directory.units[unit_id]
            previous = last.get(unit_id)
            if previous is not None and previous[1].same_numbers(numbers):
                count.unchanged += 1
                continue
            result = _result(ref, numbers, apportionment.ratios, release.filename, issues)
            eid = event_id(election_id, release.label, unit_id)
            if previous is None:
                payload: Any = ResultReported(result=result, reporter=ACTOR)
                count.reported += 1
            else:
                stage = _stage(release, unit_id, recount_units)
                payload = ResultCorrected(result=result, supersedes=previous[0], reason=_reason(release, previous[1], numbers),
                                          authority=AUTHORITY, stage=stage)  # fmt: skip
                count.corrected[stage.value] = count.corrected.get(stage.value, 0) + 1
            results[-1].append(_event(payload, election_id, release, unit_id, eid))
            last[unit_id] = (eid, numbers)
    events: list[Event[Any]] = []
    standing: ElectionDefined | None = None
    definitions = release_definitions(apportionment, directory, releases, issues)
    for mapped, count, definition, reports in zip(releases, stages, definitions, results, strict=True):
        if definition != standing:  # the first release, or one whose definition changed
            release = mapped.parsed.release
            events.append(_event(definition, election_id, release, "", event_id(election_id, release.label, "")))
            count.defined = True
            standing = definition
        events.extend(reports)
    return ImportPlan(election_id, events, stages, issues)


def _stage(release: Release, unit_id: str, recount_units: Collection[str]) -> CorrectionStage:
    stage = _STAGES.get(release.label, CorrectionStage.REVIEW)
    if stage is CorrectionStage.RECANVASS and unit_id in recount_units:
        return CorrectionStage.RECOUNT
    return stage


def _reason(release: Release, before: UnitNumbers, after: UnitNumbers) -> str:
    changed = ", ".join(before.changed_measures(after))
    note = _CERTIFIED_NOTE if _STAGES.get(release.label) is CorrectionStage.RECANVASS else ""
    return f"{changed} changed in the results-site release of {release.published_at:%Y-%m-%d %H:%M} UTC{note}"


def _event(payload: Any, election_id: str, release: Release, unit_id: str, eid: str) -> Event[Any]:
    key = f"import:idp2020:{election_id}:{release.label}:{unit_id or 'election'}"
    return new_event(payload, election_id=election_id, unit_id=unit_id, actor=ACTOR, channel=Channel.IMPORT,
                     idempotency_key=key, occurred_at=release.published_at, recorded_at=release.published_at,
                     event_id=eid)  # fmt: skip
