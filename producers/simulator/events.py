"""The simulated election as ledger events, for demos that need a log without running the intake.

The events are what the intake would have recorded for the command stream: the definition, each unit's
opening, refusals of the malformed attempts (with the problems the command parser finds), first reports,
tosses and corrections. Retries record nothing new. Event ids are uuid5 of (election, idempotency key),
so writing the same seed twice appends nothing the second time.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from ledger.events import (
    Channel,
    CorrectionStage,
    County,
    ElectionDefined,
    Event,
    Problem,
    Result,
    ResultCorrected,
    ResultReported,
    SatelliteGroup,
    SubmissionRejected,
    TieBroken,
    TieMethod,
    UnitDefinition,
    UnitOpened,
    new_event,
)
from producers.commands import CommandKind, parse_command
from producers.intake_state import rejection_key
from producers.simulator.model import SimConfig, SimElection, generate
from producers.simulator.stream import SimCommand, command_stream

__all__ = ["simulate_election", "election_events"]

_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "caucus-ledger:simulator")
_LATENCY = timedelta(seconds=1)


def simulate_election(seed: int, *, units: int = 40, **config: Any) -> list[Event[Any]]:
    """A small, complete election as ordered events (by recorded_at): ``caucus demo`` writes these."""
    return election_events(generate(seed, SimConfig(units=units, **config)))


def _id(election_id: str, key: str) -> str:
    return str(uuid.uuid5(_NAMESPACE, f"{election_id}|{key}"))


def _definition(election: SimElection) -> ElectionDefined:
    counties = [County(c.county_id, c.name, c.sde_ratio) for c in election.counties]
    counties += [County(f"{g.group_id}-sites", f"{g.name} sites", 0 * g.sde_pool) for g in election.groups]
    return ElectionDefined(
        name=election.name,
        rule_set="idp-2020",
        candidates=election.config.candidates,
        counties=tuple(counties),
        units=tuple(UnitDefinition(u.unit_id, u.name, u.county_id, u.delegates, u.satellite_group, None, u.sde_weight)
                    for u in election.units),  # fmt: skip
        satellite_groups=tuple(SatelliteGroup(g.group_id, g.name, g.sde_pool, g.attendance_base) for g in election.groups),
    )


def _result(body: dict[str, Any]) -> Result:
    return Result(body["first_alignment"], body["final_alignment"], body.get("attendance"),
                  body.get("delegates_reported"), body.get("worksheet_digest"))  # fmt: skip


def _refusal(command: SimCommand, known_units: set[str]) -> tuple[str, SubmissionRejected]:
    parsed = parse_command(CommandKind(command.kind), command.payload())
    errors = parsed.errors
    unit_id = parsed.unit_id or command.unit_id
    if not errors and unit_id not in known_units:
        errors = (Problem("unit_id", "UNKNOWN_UNIT", f"unit_id {unit_id!r} is not a unit of this election"),)
    return unit_id, SubmissionRejected(command.kind, command.payload(), tuple(errors), f"chair-{command.unit_id}")


def _payload(command: SimCommand, report_ids: dict[str, str]) -> Any:
    body = command.body or {}
    if command.kind == "open":
        return UnitOpened(body.get("attendance"))
    if command.kind == "report":
        return ResultReported(_result(body), body.get("reporter") or f"chair-{command.unit_id}")
    if command.kind == "toss":
        return TieBroken(tuple(body["contenders"]), body["seats"], tuple(body["winners"]), TieMethod(body["method"]),
                         body["caller"], tuple(body.get("witnesses", ())), body.get("reason", ""))  # fmt: skip
    if command.kind == "correct":
        return ResultCorrected(_result(body), report_ids[command.supersedes_key or ""], body["reason"],
                               body["authority"], CorrectionStage(body["stage"]))  # fmt: skip
    raise ValueError(f"kind: no event for command kind {command.kind!r}")


def election_events(election: SimElection) -> list[Event[Any]]:
    eid = election.election_id
    known = {u.unit_id for u in election.units}
    events: list[Event[Any]] = []
    report_ids: dict[str, str] = {}
    seen: set[str] = set()

    def record(payload: Any, command: SimCommand, unit_id: str, actor: str, event_id: str, key: str) -> None:
        channel = Channel.SYSTEM if command.kind == "define" else Channel.APP
        events.append(new_event(payload, election_id=eid, unit_id=unit_id, actor=actor, channel=channel,
                                idempotency_key=key, occurred_at=command.at, recorded_at=command.at + _LATENCY,
                                event_id=event_id))  # fmt: skip

    for command in command_stream(election):
        if command.expect == "refused":
            unit_id, refusal = _refusal(command, known)
            event_id = _id(eid, f"refused:{command.idempotency_key}")
            record(refusal, command, unit_id, refusal.sender, event_id, rejection_key(event_id, command.idempotency_key))
            continue
        if command.idempotency_key in seen:  # a retry: the intake records nothing new
            continue
        seen.add(command.idempotency_key)
        event_id = _id(eid, command.idempotency_key)
        if command.kind == "define":
            record(_definition(election), command, "", "simulator", event_id, command.idempotency_key)
            continue
        if command.kind == "report":
            report_ids[command.idempotency_key] = event_id
        record(_payload(command, report_ids), command, command.unit_id, f"chair-{command.unit_id}", event_id,
               command.idempotency_key)  # fmt: skip
    return sorted(events, key=lambda e: e.recorded_at)
