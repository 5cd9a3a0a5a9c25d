"""Whether a parsed command may become an event, judged against what the ledger already holds.

Pure functions of (command, intake state): no IO, so every surface and every test sees the same verdict.
Two grades of problem:

- **errors** refuse the command: the election, unit or candidate does not exist; the unit already
  reported (a second report must be a correction); a correction names an unknown or already superseded
  event; the numbers break a caucus rule in a way no real caucus could produce (the ``error`` findings of
  ``ledger.caucus_math``: an overcount, delegates that do not add up to D, ...); a toss whose
  winners are not among the contenders; a second toss for a tie that is already settled, unless it is
  an official's redraw that names the toss it replaces and gives a reason (DESIGN: a settled tie stays
  settled).
- **warnings** are recorded on the event (``ResultReported.warnings``) and shown to the sender, but do
  not stop it: things that only look odd (every non-error finding of the caucus math, an attendance that
  differs from the one given when the unit opened, a correction that changes nothing).

Every problem names the field (``final_alignment.Sanders``) and the rule (a stable code and a message).

The payload a command asks for, before any check, is ``producers.payloads`` (``to_payload`` and
``with_warnings`` are exported here too, beside the checks that follow them).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ledger.events import (
    Event,
    ElectionDefined,
    Payload,
    Problem,
    ResultCorrected,
    ResultReported,
    TieBroken,
    UnitDefinition,
    UnitOpened,
)
from producers.commands import Command, CorrectResult, DefineElection, OpenUnit, RecordTie, ReportResult
from producers.definition_checks import definition_problems, listed_twice
from producers.intake_state import ElectionInfo, IntakeView
from producers.after_certification import late_notice
from producers.toss_agreement import toss_notices
from producers.payloads import result_of, to_payload, with_warnings
from producers.tie_settlement import no_such_tie, settled_meanwhile, settlement_problems
from ledger.caucus_math import CaucusMathError, Finding, Severity, get_rule_set, satellite_delegates

__all__ = [
    "Verdict",
    "CONFLICT_CODES",
    "resolve_election",
    "to_payload",
    "check",
    "with_warnings",
    "conflicts",
    "precheck",
]

CONFLICT_CODES = frozenset(
    {"ALREADY_DEFINED", "ALREADY_OPENED", "ALREADY_REPORTED", "ALREADY_SUPERSEDED", "IDEMPOTENCY_CONFLICT", "TIE_ALREADY_SETTLED"}
)
"""Codes that say "this clashes with what is already recorded" (HTTP 409) rather than "this is wrong"."""


@dataclass(frozen=True, slots=True)
class Verdict:
    errors: tuple[Problem, ...] = ()
    warnings: tuple[Problem, ...] = ()


# -- which election ------------------------------------------------------------------------------------


def resolve_election(command: Command, view: IntakeView) -> tuple[str | None, tuple[Problem, ...]]:
    """The election a command is about: the one it names, or else the only one holding its unit."""
    if isinstance(command, DefineElection):
        return command.election_id, ()
    return _resolve(command.election_id, command.unit_id, view)


def _resolve(election_id: str | None, unit: str, view: IntakeView) -> tuple[str | None, tuple[Problem, ...]]:
    if election_id is not None:
        election = view.election(election_id)
        if election is None:
            known = ", ".join(view.election_ids()) or "none yet"
            return None, (
                Problem("election_id", "UNKNOWN_ELECTION", f"no election {election_id!r} is defined (defined: {known})"),
            )
        if unit not in election.units:
            return None, (
                Problem("unit_id", "UNKNOWN_UNIT", f"election {election.election_id!r} has no reporting unit {unit!r}"),
            )
        return election.election_id, ()
    holders = view.elections_of_unit(unit)
    if len(holders) == 1:
        return holders[0], ()
    if not holders:
        if not view.election_ids():
            return None, (Problem("election_id", "UNKNOWN_ELECTION", "no election is defined yet; define one first"),)
        return None, (Problem("unit_id", "UNKNOWN_UNIT", f"no defined election has a reporting unit {unit!r}"),)
    return None, (
        Problem(
            "election_id",
            "AMBIGUOUS_ELECTION",
            f"unit {unit!r} belongs to several elections ({', '.join(holders)}); name one in election_id",
        ),
    )


def precheck(data: Mapping[str, Any], view: IntakeView) -> tuple[Problem, ...]:
    """What can still be said of input that failed to parse, so the sender hears every error at once:
    an unknown election or unit, unknown candidates, a correction of an unknown event."""
    unit_id = data.get("unit_id")
    if not isinstance(unit_id, str):
        return ()
    election_id = data.get("election_id")
    resolved, problems = _resolve(election_id if isinstance(election_id, str) else None, unit_id, view)
    election = view.election(resolved) if resolved is not None else None
    if election is None:
        return problems
    found: list[Problem] = []
    for where in ("first_alignment", "final_alignment", "delegates_reported"):
        if isinstance(data.get(where), dict):
            found += _unknown_candidates(((f"{where}.{name}", name) for name in data[where]), election)
    for where in ("contenders", "winners"):
        if isinstance(data.get(where), list):
            named = ((f"{where}.{i}", name) for i, name in enumerate(data[where]) if isinstance(name, str))
            found += _unknown_candidates(named, election)
    supersedes = data.get("supersedes")
    if isinstance(supersedes, str) and view.result_event(supersedes) is None:
        found.append(Problem("supersedes", "UNKNOWN_EVENT", f"no result event {supersedes!r} is recorded"))
    return tuple(found)


# -- checks against the state ----------------------------------------------------------------------------


def check(command: Command, payload: Payload, election_id: str, view: IntakeView) -> Verdict:
    """Errors and warnings for a command whose election is resolved and whose payload is built."""
    if isinstance(command, DefineElection):
        assert isinstance(payload, ElectionDefined)
        return _check_definition(election_id, payload, view)
    election = view.election(election_id)
    assert election is not None, "resolve_election first"
    checks = {OpenUnit: (_check_open, "opening"), ReportResult: (_check_report, "report"),
              CorrectResult: (_check_correction, "correction"), RecordTie: (_check_tie, "toss")}
    if type(command) not in checks:
        raise TypeError(f"not a command: {type(command).__name__}")
    judged, what = checks[type(command)]
    verdict: Verdict = judged(command, election, view)  # type: ignore[operator]
    if verdict.errors:
        return verdict
    notes = [n for n in (late_notice(election_id, view, what),) if n is not None]
    if isinstance(payload, (ResultReported, ResultCorrected)):
        notes += toss_notices(election, command.unit_id, payload.result, view)  # type: ignore[attr-defined]
    return Verdict((), (*verdict.warnings, *notes)) if notes else verdict


def _check_definition(election_id: str, payload: ElectionDefined, view: IntakeView) -> Verdict:
    errors: list[Problem] = []
    existing = view.election(election_id)
    if existing is not None:
        errors.append(Problem("election_id", "ALREADY_DEFINED",
                              f"election {election_id!r} is already defined (event {existing.event_id}); an election is defined once"))
    try:
        get_rule_set(payload.rule_set)
    except CaucusMathError as exc:
        errors.append(Problem("rule_set", "UNKNOWN_RULE_SET", str(exc).removeprefix("rule_set: ")))
    return Verdict((*errors, *definition_problems(payload)))


def _unit_problems(command: OpenUnit | ReportResult | CorrectResult | RecordTie, election: ElectionInfo) -> list[Problem]:
    if command.unit_id not in election.units:
        return [Problem("unit_id", "UNKNOWN_UNIT", f"election {election.election_id!r} has no reporting unit {command.unit_id!r}")]
    return []


def _check_open(command: OpenUnit, election: ElectionInfo, view: IntakeView) -> Verdict:
    errors = _unit_problems(command, election)
    status = view.unit(election.election_id, command.unit_id)
    if not errors and status.opened_event_id is not None:
        errors.append(
            Problem(
                "unit_id",
                "ALREADY_OPENED",
                f"unit {command.unit_id!r} was already opened (event {status.opened_event_id}, attendance "
                f"{status.attendance}); report the attendance with the result instead",
            )
        )
    if not errors and status.result_event_id is not None:
        errors.append(_opened_after_result(command.unit_id, status.result_event_id))
    return Verdict(tuple(errors))


def _opened_after_result(unit_id: str, result_event_id: str) -> Problem:
    """RULES §2: a unit opens (D, T) before it reports. An opening after the result would change the T
    the result was computed with, and a chair may not change a standing result; an official's correction
    that carries the attendance may."""
    return Problem(
        "attendance",
        "ALREADY_REPORTED",
        f"unit {unit_id!r} already has a result (event {result_event_id}); a unit opens before it reports "
        f"(RULES §2), and changing its attendance T needs an official's correction that supersedes {result_event_id}",
    )


def _unknown_candidates(named: Iterable[tuple[str, str]], election: ElectionInfo) -> list[Problem]:
    """``named``: (field, candidate) pairs; a problem for each candidate the election does not have.

    Names are compared code point for code point, as they are recorded and tallied; a name that differs
    from a candidate's only in its Unicode form (an accent typed as a letter plus a combining mark) looks
    the same on screen, so the message says which candidate it resembles rather than list one that seems
    to be the name refused."""
    return [
        Problem(where, "UNKNOWN_CANDIDATE", f"{name!r} is not a candidate of {election.election_id!r} ({_closest(name, election)})")
        for where, name in named
        if name not in election.candidates
    ]


def _closest(name: str, election: ElectionInfo) -> str:
    same = [c for c in election.definition.candidates if unicodedata.normalize("NFC", c) == unicodedata.normalize("NFC", name)]
    if same:
        return (f"it looks like {same[0]!r} but is written with other Unicode code points ({_code_points(name)} against "
                f"{_code_points(same[0])}): send the name as the definition writes it")
    return f"candidates: {', '.join(election.definition.candidates)}"


def _code_points(text: str) -> str:
    return " ".join(f"U+{ord(ch):04X}" for ch in text)


_FINDING_FIELDS = {
    "OVERCOUNT": "first_alignment",
    "FINAL_GT_FIRST": "final_alignment",
    "SATELLITE_DELEGATES": "attendance",
    "LOCKED_GROUP_SHRANK": "final_alignment",
    "TOO_MANY_VIABLE": "final_alignment",
}
_MATH_FIELDS = {"first": "first_alignment", "final": "final_alignment", "reported": "delegates_reported"}


def _problem_of_finding(finding: Finding, reported: bool) -> Problem:
    where = _FINDING_FIELDS.get(finding.code, "delegates_reported" if reported else "final_alignment")
    if finding.candidate is not None:
        where = f"{where}.{finding.candidate}"
    message = finding.message
    if finding.likely_cause:
        message += f" (likely cause: {finding.likely_cause})"
    if finding.severity not in (Severity.ERROR, Severity.WARN):
        message = f"[{finding.severity}] {message}"
    return Problem(where, finding.code, message)


def _check_result(
    command: ReportResult | CorrectResult, election: ElectionInfo, view: IntakeView
) -> tuple[list[Problem], list[Problem]]:
    errors = _unit_problems(command, election)
    if errors:
        return errors, []
    for counts, where in (
        (command.first_alignment, "first_alignment"),
        (command.final_alignment, "final_alignment"),
        (command.delegates_reported or {}, "delegates_reported"),
    ):
        errors += _unknown_candidates(((f"{where}.{name}", name) for name in counts), election)
    if errors:
        return errors, []
    warnings: list[Problem] = []
    status = view.unit(election.election_id, command.unit_id)
    attendance = command.attendance
    reverts: Problem | None = None
    if attendance is None:
        attendance = status.attendance
        stated = status.result.attendance if status.result is not None else None
        if stated is not None and stated != attendance:
            reverts = Problem(
                "attendance", "ATTENDANCE_REVERTS",
                f"the current result (event {status.result_event_id}) gave T {stated}; this one gives none, so T is "
                f"{'unknown' if attendance is None else f'the {attendance} counted when the unit opened'}: give the "
                f"attendance again to keep {stated}")
            warnings.append(reverts)
    elif status.attendance is not None and status.attendance != attendance:
        warnings.append(
            Problem(
                "attendance",
                "ATTENDANCE_CHANGED",
                f"attendance {attendance} differs from the {status.attendance} given when the unit opened "
                f"(event {status.opened_event_id}); the report's number is used",
            )
        )
    unit = election.units[command.unit_id]
    counted = attendance if attendance is not None else sum(command.first_alignment.values())
    satellite_attendance = None
    if unit.delegates is not None:
        delegates = unit.delegates
        if unit.is_satellite:
            satellite_attendance = counted  # an explicit D for a satellite is checked against the table
    else:
        delegates = satellite_delegates(counted)
    if attendance is not None and sum(command.first_alignment.values()) < attendance:
        warnings.append(
            Problem(
                "first_alignment",
                "UNDERCOUNT",
                f"first-alignment total {sum(command.first_alignment.values())} is below the {attendance} attendees "
                "counted at the start (RULES §2.3)",
            )
        )
    if attendance is None and not any(command.first_alignment.values()):
        warnings.append(Problem("first_alignment", "NOBODY_COUNTED",
                                "no one in any group at the first alignment and no attendance given: this reports a "
                                "caucus nobody attended, which elects no delegates (if people came, correct it)"))
    rules = get_rule_set(election.definition.rule_set)
    try:
        findings = rules.check(
            delegates=delegates,
            attendance=attendance,
            first=command.first_alignment,
            final=command.final_alignment,
            reported=command.delegates_reported,
            satellite_attendance=satellite_attendance,
        )
    except CaucusMathError as exc:
        where = _MATH_FIELDS.get(exc.field, exc.field)
        return [Problem(where, "IMPOSSIBLE_COUNTS", str(exc))], warnings
    reported = command.delegates_reported is not None
    for finding in findings:
        (errors if finding.severity is Severity.ERROR else warnings).append(_problem_of_finding(finding, reported))
    warnings += _over_group_base(unit, election, counted)
    if errors and reverts is not None:  # a refusal shows its errors only: the reason T is what it is goes with them
        errors.append(reverts)
    return errors, warnings


def _over_group_base(unit: UnitDefinition, election: ElectionInfo, counted: int) -> list[Problem]:
    """RULES §8: a satellite's SDE weight is its attendance's share of its group's attendance base. A
    headcount above the whole group's leaves the weight uncomputable, and the unit's SDEs out of every
    total, until the definition is mended: the chair's count is taken, and the intake says so now
    rather than leaving it to the audit (SDE_UNWEIGHED)."""
    if unit.satellite_group is None or unit.sde_weight is not None:
        return []
    group = next((g for g in election.definition.satellite_groups if g.group_id == unit.satellite_group), None)
    if group is None or (group.attendance_base is not None and counted <= group.attendance_base):
        return []
    why = (f"satellite group {group.group_id!r} has no attendance base" if group.attendance_base is None else
           f"{counted} attendees exceed the attendance base {group.attendance_base} of satellite group {group.group_id!r}")
    return [Problem("attendance", "SATELLITE_OVER_BASE",
                    f"{why}, so this satellite's SDE weight (attendance x pool / base, RULES §8) cannot be computed "
                    "and its SDEs stay out of the totals until the election's definition gives a base that covers it")]


def _check_report(command: ReportResult, election: ElectionInfo, view: IntakeView) -> Verdict:
    errors, warnings = _check_result(command, election, view)
    status = view.unit(election.election_id, command.unit_id)
    if status.result_event_id is not None and not _unit_problems(command, election):
        errors.insert(
            0,
            Problem(
                "unit_id",
                "ALREADY_REPORTED",
                f"unit {command.unit_id!r} already has a result (event {status.result_event_id}); "
                f"to change it, send a correction that supersedes {status.result_event_id}",
            ),
        )
    return Verdict(tuple(errors), tuple(warnings))


def _check_correction(command: CorrectResult, election: ElectionInfo, view: IntakeView) -> Verdict:
    errors, warnings = _check_result(command, election, view)
    target = view.result_event(command.supersedes)
    status = view.unit(election.election_id, command.unit_id)
    if target is None:
        current = f"; its current result is event {status.result_event_id}" if status.result_event_id else "; it has no result yet"
        errors.insert(
            0,
            Problem(
                "supersedes",
                "UNKNOWN_EVENT",
                f"no result event {command.supersedes!r} is recorded for unit {command.unit_id!r}{current}",
            ),
        )
    elif (target.election_id, target.unit_id) != (election.election_id, command.unit_id):
        errors.insert(
            0,
            Problem(
                "supersedes",
                "OTHER_UNITS_EVENT",
                f"event {command.supersedes} is a result of unit {target.unit_id!r} of election {target.election_id!r}, "
                f"not of unit {command.unit_id!r} of election {election.election_id!r}",
            ),
        )
    else:
        by = view.superseded_by(command.supersedes)
        if by is not None:
            errors.insert(
                0,
                Problem(
                    "supersedes",
                    "ALREADY_SUPERSEDED",
                    f"event {command.supersedes} was already superseded by {by}; correct the current result "
                    f"{status.result_event_id} instead",
                ),
            )
        elif status.result is not None and status.result == result_of(command):
            warnings.append(
                Problem("supersedes", "CORRECTION_UNCHANGED", f"the correction repeats the result of {command.supersedes} unchanged")
            )
    return Verdict(tuple(errors), tuple(warnings))


def _check_tie(command: RecordTie, election: ElectionInfo, view: IntakeView) -> Verdict:
    errors = _unit_problems(command, election)
    warnings: list[Problem] = []
    errors += _unknown_candidates(((f"contenders.{i}", name) for i, name in enumerate(command.contenders)), election)
    errors += listed_twice(command.contenders, "contenders", "contender")
    errors += listed_twice(command.winners, "winners", "winner")
    for i, name in enumerate(command.winners):
        if name not in command.contenders:
            errors.append(
                Problem(f"winners.{i}", "WINNER_NOT_CONTENDER", f"winner {name!r} is not among the contenders {list(command.contenders)}")
            )
    if command.seats >= len(command.contenders):
        errors.append(
            Problem(
                "seats",
                "NOTHING_CONTESTED",
                f"{command.seats} seat(s) for {len(command.contenders)} contenders: a tie needs fewer seats than contenders",
            )
        )
    if len(command.winners) != command.seats:
        errors.append(
            Problem("winners", "WINNER_COUNT", f"{len(command.winners)} winner(s) named for {command.seats} contested seat(s)")
        )
    if not errors:  # a tie the current result does not have is the first thing wrong with a toss for it
        errors += no_such_tie(command, election, view)
    if not errors:
        errors += settlement_problems(command, election.election_id, view)
    if command.caller in command.witnesses:
        warnings.append(Problem("witnesses", "CALLER_AS_WITNESS", f"the caller {command.caller!r} is also listed as a witness"))
    if command.method == "coin" and len(command.contenders) != 2:
        warnings.append(
            Problem("method", "COIN_FOR_MANY", f"a coin decides between two groups; {len(command.contenders)} contenders usually draw lots (RULES §6)")
        )
    if command.method == "lots" and len(command.contenders) == 2:
        warnings.append(Problem("method", "LOTS_FOR_TWO", "two groups are decided by a coin toss; lots are drawn among three or more (RULES §6)"))
    return Verdict(tuple(errors), tuple(warnings))


def conflicts(event: Event[Any], view: IntakeView) -> tuple[Problem, ...]:
    """What makes a spooled event wrong *now*: it was checked against the state when it was spooled,
    but while the log was out of reach another intake may have recorded something that clashes."""
    env = event.envelope
    payload = event.payload
    if isinstance(payload, ElectionDefined):
        existing = view.election(env.election_id)
        if existing is not None:
            return (Problem("election_id", "ALREADY_DEFINED", f"election {env.election_id!r} was defined meanwhile (event {existing.event_id})"),)
        return ()
    if isinstance(payload, (UnitOpened, ResultReported, ResultCorrected, TieBroken)):
        election = view.election(env.election_id)
        if election is None:
            return (Problem("election_id", "UNKNOWN_ELECTION", f"election {env.election_id!r} is not defined in the log"),)
        if env.unit_id not in election.units:  # the log was restored from a copy older than the definition it was judged by
            return (Problem("unit_id", "UNKNOWN_UNIT", f"election {env.election_id!r} as the log now defines it has no "
                            f"reporting unit {env.unit_id!r}"),)
    status = view.unit(env.election_id, env.unit_id)
    if isinstance(payload, UnitOpened) and status.opened_event_id is not None:
        return (Problem("unit_id", "ALREADY_OPENED", f"unit {env.unit_id!r} was opened meanwhile (event {status.opened_event_id})"),)
    if isinstance(payload, UnitOpened) and status.result_event_id is not None:
        return (_opened_after_result(env.unit_id, status.result_event_id),)
    if isinstance(payload, ResultReported) and status.result_event_id is not None:
        return (
            Problem(
                "unit_id",
                "ALREADY_REPORTED",
                f"unit {env.unit_id!r} got a result meanwhile (event {status.result_event_id}); send this one as a correction",
            ),
        )
    if isinstance(payload, TieBroken):
        return settled_meanwhile(event, view)
    if isinstance(payload, ResultCorrected):
        by = view.superseded_by(payload.supersedes)
        if by is not None:
            return (Problem("supersedes", "ALREADY_SUPERSEDED", f"event {payload.supersedes} was superseded meanwhile by {by}"),)
        if view.result_event(payload.supersedes) is None:
            return (Problem("supersedes", "UNKNOWN_EVENT", f"no result event {payload.supersedes!r} is in the log"),)
    return ()
