"""The event body a command asks for, before any check against the ledger's state.

Apart from the checks (``producers.validation``) because it needs no state: the same command always gives
the same payload. Only an election definition can fail here, because its ratios are text until parsed.
Warnings found by the checks are put on the payload afterwards (``with_warnings``).
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from typing import Any

from ledger.events import (
    CorrectionStage,
    County,
    ElectionDefined,
    Payload,
    Problem,
    Result,
    ResultCorrected,
    ResultReported,
    SatelliteGroup,
    TieBroken,
    TieMethod,
    UnitDefinition,
    UnitOpened,
)
from producers.commands import Command, CorrectResult, DefineElection, OpenUnit, RecordTie, ReportResult, parse_ratio

__all__ = ["lenient_definition", "result_of", "to_payload", "with_warnings"]


def result_of(command: ReportResult | CorrectResult) -> Result:
    return Result(
        first_alignment=command.first_alignment,
        final_alignment=command.final_alignment,
        attendance=command.attendance,
        delegates_reported=command.delegates_reported,
        worksheet_digest=command.worksheet_digest,
    )


def to_payload(command: Command, actor: str) -> tuple[Payload | None, tuple[Problem, ...]]:
    """The event body a command asks for, before any check against the state (and without warnings).
    Only an election definition can fail here: its ratios are text until parsed."""
    if isinstance(command, DefineElection):
        return _election_payload(command)
    if isinstance(command, OpenUnit):
        return UnitOpened(command.attendance), ()
    if isinstance(command, ReportResult):
        return ResultReported(result_of(command), command.reporter or actor), ()
    if isinstance(command, CorrectResult):
        return (
            ResultCorrected(
                result=result_of(command),
                supersedes=command.supersedes,
                reason=command.reason,
                authority=command.authority,
                stage=CorrectionStage(command.stage),
            ),
            (),
        )
    if isinstance(command, RecordTie):
        return (
            TieBroken(
                contenders=command.contenders,
                seats=command.seats,
                winners=command.winners,
                method=TieMethod(command.method),
                caller=command.caller,
                witnesses=command.witnesses,
                reason=command.reason,
                supersedes=command.supersedes or "",
            ),
            (),
        )
    raise TypeError(f"not a command: {type(command).__name__}")


def _election_payload(command: DefineElection) -> tuple[ElectionDefined | None, tuple[Problem, ...]]:
    payload, problems = lenient_definition(command)
    return (None, problems) if problems else (payload, ())


def lenient_definition(command: DefineElection) -> tuple[ElectionDefined, tuple[Problem, ...]]:
    """The definition with each ratio that does not parse left out (a county's read as 1), and the
    problems of those ratios: the checks of the rest run on it, so a sender hears every error at once."""
    problems: list[Problem] = []

    def ratio(value: Any, where: str, instead: Fraction | None = None) -> Any:
        if value is None:
            return None
        parsed, problem = parse_ratio(value, where)
        if problem is not None:
            problems.append(problem)
            return instead
        return parsed

    counties = tuple(
        County(c.county_id, c.name, ratio(c.sde_ratio, f"counties.{i}.sde_ratio", Fraction(1)))
        for i, c in enumerate(command.counties)
    )
    groups = tuple(
        SatelliteGroup(g.group_id, g.name, ratio(g.sde_pool, f"satellite_groups.{i}.sde_pool"), g.attendance_base)
        for i, g in enumerate(command.satellite_groups)
    )
    units = tuple(
        UnitDefinition(
            unit_id=u.unit_id,
            name=u.name,
            county_id=u.county_id,
            delegates=u.delegates,
            satellite_group=u.satellite_group,
            short_name=u.short_name,
            sde_weight=ratio(u.sde_weight, f"units.{i}.sde_weight"),
        )
        for i, u in enumerate(command.units)
    )
    return ElectionDefined(command.name, command.rule_set, command.candidates, counties, units, groups), tuple(problems)


def with_warnings(payload: Payload, warnings: tuple[Problem, ...]) -> Payload:
    if warnings and isinstance(payload, (ResultReported, ResultCorrected)):
        return replace(payload, warnings=warnings)
    return payload
