"""What a directly written event says, held to the rules the intake holds a command to.

``caucus log append`` takes events as JSON lines. Decoding one (``ledger.render.event_from_json``)
builds the event as given: a count of 1.5 became 1, a negative count or an unknown candidate went
through, and the tally then summed them (delegates reported beyond the unit's D counted as official).
So each line is also read back as the command the intake would have taken for it, from the line's own
JSON (before any conversion), and judged by the intake's own parse and checks
(``producers.commands.parse_command``, ``producers.validation.check``): the same field names, codes
and messages. The line's envelope is checked too: an event id that is not a UUID, a schema version
this ledger does not know.

Only refusals count here (the intake's warnings are not recorded on a restored event: it keeps the
warnings it was written with), and on the import channel not all of them: a published result that
breaks a caucus rule (the caucus math's findings: delegates that do not add up, a final total above the
first, ...) is kept as it was recorded, because published history holds such results (the certified
2020 release does: 249 of its 1,868 events) and a restore must carry them; the audit reports each one.
A text longer than the intake takes is kept for the same reason (the importer's correction notes). Any
other channel's event is held to every refusal of the intake: it was, or should have been, a command
the intake judged, and a result it refuses (1,000 delegates for a unit that elects 3) would otherwise
become an official tally. An election definition is held to the intake's definition checks, except
``ALREADY_DEFINED`` (``producers.direct_writes``: a release that amends the first); a redefinition
may not change what an opened, reported or tossed-for unit is counted under, except a published one its
satellites' SDE weights (``producers.redefinition``). Certifications and checkpoints, which no
command writes, are held to ``producers.direct_records``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from ledger.events import (
    PAYLOAD_TYPES,
    Channel,
    ElectionDefined,
    Event,
    Problem,
    ResultCorrected,
    ResultReported,
    TieBroken,
    UnitOpened,
)
from producers.commands import CommandKind, parse_command
from producers.definition_precheck import definition_precheck
from producers.intake_state import IntakeView
from producers.direct_records import CheckpointTrees, record_problems
from producers.payloads import to_payload
from producers.redefinition import PUBLISHED_MAY_CHANGE, redefinition_problems
from producers.validation import check, resolve_election
from ledger.caucus_math.checks import CHECK_CODES
from ledger.integrity.keys import TrustedKey

__all__ = ["content_problems", "KEPT_AS_RECORDED", "KEPT_ALWAYS"]

KEPT_AS_RECORDED = frozenset(CHECK_CODES) | {"TOO_LONG", "ALREADY_DEFINED"}
"""Refusals of the intake that a direct write of a published record (the import channel) is not
refused for (module docstring)."""
KEPT_ALWAYS = frozenset({"ALREADY_DEFINED", "BLANK", "NOT_A_SATELLITE", "SLASH_IN_ID", "HIDDEN_CHARACTER", "ZERO_RATIO",
                         "CANDIDATE_LOOKALIKE", "ID_LOOKALIKE"})
"""... and those that no direct write is refused for. ``BLANK`` (a reason or a name blank on screen),
``NOT_A_SATELLITE`` (a precinct's sde_weight), ``ZERO_RATIO`` (a county's SDE ratio of 0), ``SLASH_IN_ID`` (an id with a '/', which no HTTP path
can name), ``HIDDEN_CHARACTER`` (a name with a control or invisible character), ``CANDIDATE_LOOKALIKE`` and
``ID_LOOKALIKE`` (names or ids told apart only by case or a compatibility form): the intake took such
definitions before it refused them,
and a restore must keep what the ledger accepted; a direct write names its official in its writer
header, and the audit lists it, whatever it says."""

_KINDS: dict[type[Any], CommandKind] = {
    UnitOpened: CommandKind.OPEN, ResultReported: CommandKind.REPORT, ResultCorrected: CommandKind.CORRECT,
    TieBroken: CommandKind.TOSS, ElectionDefined: CommandKind.DEFINE,
}
_RESULT = ("first_alignment", "final_alignment", "attendance", "delegates_reported", "worksheet_digest")


def content_problems(line: Mapping[str, Any], event: Event[Any], view: IntakeView, partitions: int = 1,
                     trees: CheckpointTrees | None = None, trusted: Sequence[TrustedKey] | None = None) -> tuple[Problem, ...]:
    """Why the event of ``line`` (its JSON, as ``caucus log tail --json`` prints it) would not be
    accepted by the intake against ``view``, or, for a record no command writes, by
    ``producers.direct_records`` against a log of ``partitions`` partitions; empty when it would."""
    problems = [*_envelope_problems(line, event), *_command_problems(line, event, view),
                *record_problems(event, view, partitions, trees, trusted)]
    published = event.envelope.channel is Channel.IMPORT
    if isinstance(event.payload, ElectionDefined):
        changes = redefinition_problems(event.payload, event.envelope.election_id, view)
        problems.extend(p for p in changes if not (published and p.code in PUBLISHED_MAY_CHANGE))
    kept = KEPT_AS_RECORDED | KEPT_ALWAYS if published else KEPT_ALWAYS
    return tuple(p for p in problems if p.code not in kept)


def _command_problems(line: Mapping[str, Any], event: Event[Any], view: IntakeView) -> tuple[Problem, ...]:
    kind = _KINDS.get(type(event.payload))
    if kind is None:
        return ()
    body = _command_body(line, event)
    parsed = parse_command(kind, json.dumps(body))
    if parsed.command is None:  # a definition's other problems too, as `caucus define` says them all at once
        more = definition_precheck(body, parsed.errors, view) if kind is CommandKind.DEFINE else ()
        return tuple(_named(p) for p in (*parsed.errors, *more))
    command = parsed.command
    election_id, unresolved = resolve_election(command, view)
    if election_id is None:
        return unresolved
    payload, built = to_payload(command, event.envelope.actor)
    if payload is None:
        return built
    return check(command, payload, election_id, view).errors


def _envelope_problems(line: Mapping[str, Any], event: Event[Any]) -> list[Problem]:
    out: list[Problem] = []
    event_id = event.event_id
    try:
        canonical = str(uuid.UUID(event_id)) == event_id
    except (ValueError, AttributeError, TypeError):
        canonical = False
    if not canonical:
        out.append(Problem("event_id", "NOT_A_UUID", f"event id {event_id!r} is not a UUID in its canonical form "
                                                     "(lower-case hex, 8-4-4-4-12)"))
    version = line.get("schema_version")
    known = getattr(PAYLOAD_TYPES[event.type], "VERSION", 1)
    if version is not None and (not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= known):
        out.append(Problem("schema_version", "UNKNOWN_VERSION",
                           f"{event.type} schema version {version!r} is not one this ledger knows (1 to {known})"))
    return out


def _command_body(line: Mapping[str, Any], event: Event[Any]) -> dict[str, Any]:
    """The command the intake would have taken for this event, from the line's JSON as given."""
    payload: Mapping[str, Any] = line.get("payload") or {}
    body: dict[str, Any] = {"idempotency_key": event.envelope.idempotency_key, "election_id": event.envelope.election_id}
    if isinstance(event.payload, ElectionDefined):
        body.update(_definition_body(payload))
        return body
    body["unit_id"] = event.envelope.unit_id
    if isinstance(event.payload, UnitOpened):
        body["attendance"] = payload.get("attendance")
    elif isinstance(event.payload, (ResultReported, ResultCorrected)):
        result: Mapping[str, Any] = payload.get("result") or {}
        body.update({k: result.get(k) for k in _RESULT})
        if isinstance(event.payload, ResultReported):
            body["reporter"] = payload.get("reporter") or None
        else:
            body.update({k: payload.get(k) for k in ("supersedes", "reason", "authority", "stage")})
    elif isinstance(event.payload, TieBroken):
        body.update({k: payload.get(k) for k in ("contenders", "seats", "winners", "method", "caller")})
        body["witnesses"] = payload.get("witnesses") or []
        for name in ("reason", "supersedes"):
            if payload.get(name):
                body[name] = payload[name]
    return {k: v for k, v in body.items() if v is not None}


def _definition_body(payload: Mapping[str, Any]) -> dict[str, Any]:
    """An election definition as the define command spells it (the event's ratios are given again as
    the text they were defined with)."""
    out: dict[str, Any] = {k: payload.get(k) for k in ("name", "rule_set", "candidates")}
    out["counties"] = [_ratios(c) for c in payload.get("counties") or []]
    out["units"] = [_ratios(u) for u in payload.get("units") or []]
    out["satellite_groups"] = [_ratios(g) for g in payload.get("satellite_groups") or []]
    return out


def _ratios(item: Any) -> Any:
    """A county, unit or satellite group with its ratios as "n/d" text and its unset fields left out."""
    if not isinstance(item, Mapping):
        return item  # the parse names it
    out: dict[str, Any] = {}
    for key, value in item.items():
        if value is None:
            continue
        if isinstance(value, Mapping) and set(value) == {"numerator", "denominator"}:
            value = f"{value['numerator']}/{value['denominator']}"
        out[key] = value
    return out


def _named(problem: Problem) -> Problem:
    """A parse problem, worded for a line of a file rather than a request body."""
    return Problem(problem.field, problem.code, problem.message.replace("in the body", "in the event"))
