"""Reading the data directory, planning the events and appending them to the log.

Planning reads files only; appending is the one step with side effects, done in batches so a progress
display can follow and a large import does not hold one giant transaction. Whether an event was new
is read off the log's high watermarks (the log drops event ids it already holds), so a second run
reports everything as already present.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ledger.events import Event
from ledger.journal import Journal
from ledger.render import event_to_json
from ledger.log.port import Position
from producers.direct_writes import append_new, judge
from producers.importers.idp2020.build import ELECTION_ID, ImportPlan, StageCount, build_events
from producers.importers.idp2020.reference import APPORTIONMENT, DIRECTORY, NYT_FEED, load_apportionment, load_directory
from producers.importers.idp2020.releases import RELEASES, parse_release
from producers.importers.idp2020.units import map_release
from producers.importers.issues import Issue, has_errors

__all__ = ["plan_import", "import_idp2020", "ImportSummary", "Progress"]

Progress = Callable[[int, int], None]
"""Called with (events done, events in all) after each batch."""


def plan_import(data_dir: Path, *, election_id: str = ELECTION_ID, recount_units: Collection[str] = ()) -> ImportPlan:
    """Everything the import would append, and every issue found, without touching a log."""
    issues: list[Issue] = []
    if not data_dir.is_dir():
        issues.append(Issue("error", str(data_dir), "not a directory"))
        return ImportPlan(election_id, [], [], issues)
    apportionment = load_apportionment(data_dir / APPORTIONMENT, issues)
    directory = load_directory(data_dir / DIRECTORY, data_dir / NYT_FEED, issues)
    parsed = [parse_release(data_dir / r.filename, r) for r in RELEASES]
    for p in parsed:
        issues.extend(p.issues)
    if has_errors(issues):
        return ImportPlan(election_id, [], [], issues)
    if apportionment.zero_units:
        issues.append(Issue("info", APPORTIONMENT, f"{len(apportionment.zero_units)} rows with D = 0 are not reporting "
                                                   f"units and are not defined: {', '.join(apportionment.zero_units)}"))  # fmt: skip
    mapped = [map_release(p, directory, issues) for p in parsed]
    return build_events(apportionment, directory, mapped, issues, election_id=election_id, recount_units=recount_units)


@dataclass(slots=True)
class ImportSummary:
    election_id: str
    log: str
    events: Counter[str] = field(default_factory=Counter)
    corrections_by_stage: Counter[str] = field(default_factory=Counter)
    stages: list[StageCount] = field(default_factory=list)
    units_defined: int = 0
    appended: int = 0
    already_present: int = 0
    issues: list[Issue] = field(default_factory=list)
    dry_run: bool = False

    @property
    def ok(self) -> bool:
        return not has_errors(self.issues)

    def to_json(self) -> dict[str, Any]:
        return {
            "election_id": self.election_id,
            "log": self.log,
            "dry_run": self.dry_run,
            "ok": self.ok,
            "events": dict(sorted(self.events.items())),
            "corrections_by_stage": dict(sorted(self.corrections_by_stage.items())),
            "releases": [s.to_json() for s in self.stages],
            "units_defined": self.units_defined,
            "appended": self.appended,
            "already_present": self.already_present,
            "issues": [i.to_json() for i in self.issues],
        }


SHOWN_CONFLICTS = 20
"""Refused events listed one by one; the rest are counted."""


def _conflicts(journal: Journal, events: list[Event[Any]]) -> tuple[list[Issue], dict[str, Position]]:
    """What the log as it stands refuses of the plan, judged as ``caucus log append`` judges a file
    (``producers.direct_writes.judge``), less the times, which are the published history's: an
    election of the same id defined otherwise (its units, candidates or counties changed under results
    the log holds), a unit's second result, an event id the log holds for other content (a re-run with
    other ``--recount-unit`` choices). The importer needs no credential because it writes only what the
    releases say; it may not, for that, change what the log already holds. One error per refused event
    (the first ``SHOWN_CONFLICTS``), and nothing is appended. Also where the log holds the events it
    already has, which a re-run does not append again (``direct_writes.append_new``)."""
    judged = judge(journal, events, datetime.now(UTC), [event_to_json(e) for e in events], check_times=False)
    found = judged.refused
    issues = [
        Issue("error", f"{events[i].type} {events[i].unit_id or events[i].envelope.election_id} (event {events[i].event_id})",
              "; ".join(f"{p.field}: {p.code}: {p.message}" for p in problems))
        for i, problems in found[:SHOWN_CONFLICTS]
    ]
    if len(found) > SHOWN_CONFLICTS:
        issues.append(Issue("error", "import", f"{len(found) - SHOWN_CONFLICTS} more events refused the same way"))
    if found:
        issues.append(Issue("info", "import", "to import the releases beside what the log holds, give them an election id "
                                              "of their own: --election-id ID"))
    return issues, judged.held


def import_idp2020(data_dir: Path, journal: Journal | None, *, election_id: str = ELECTION_ID, log_name: str = "",
                   recount_units: Collection[str] = (), progress: Progress | None = None,
                   batch_size: int = 250, turn: Callable[[], AbstractContextManager[None]] = nullcontext) -> ImportSummary:
    """Plan and append. With ``journal=None`` (a dry run) nothing is written. Nothing is appended
    either when the plan has errors. Each batch is appended inside ``turn()`` (the intake's turn, so an
    intake beside the import decides between batches, not after the whole import)."""
    plan = plan_import(data_dir, election_id=election_id, recount_units=recount_units)
    summary = ImportSummary(election_id, log_name, stages=plan.stages, issues=plan.issues, dry_run=journal is None)
    for event in plan.events:
        summary.events[event.type] += 1
        stage = getattr(event.payload, "stage", None)
        if stage is not None:
            summary.corrections_by_stage[stage.value] += 1
    if plan.events:
        summary.units_defined = len(plan.definition.units)
    if journal is None or not summary.ok:
        return summary
    with turn():
        issues, held = _conflicts(journal, plan.events)
        summary.issues.extend(issues)
    if not summary.ok:
        return summary
    before = sum(journal.log.high_watermarks().values())
    total = len(plan.events)
    for start in range(0, total, batch_size):
        with turn():
            append_new(journal, plan.events[start : start + batch_size], held)
        if progress is not None:
            progress(min(start + batch_size, total), total)
    summary.appended = sum(journal.log.high_watermarks().values()) - before
    summary.already_present = total - summary.appended
    return summary
