"""Judging one submission against what the intake knows, without writing anything.

The intake decides a command in two steps: judge it (this module: parse, check the sender, resolve the
election, answer a repeated key, validate), then write what the judgment says must be recorded (the
accepted event, or the ``SubmissionRejected`` of a refusal) and answer once it is durable. Keeping the
judgment free of writes is what lets the intake judge a group of queued commands in turn and append
their events together (``producers.intake_group``): the answer is built only after the write says
where the event went (the log, or the spool).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

from ledger.event_values import CLOCK_SKEW
from ledger.events import Event, Problem, new_event
from ledger.log.port import Position
from producers.commands import CommandKind, DefineElection, Parsed, claimable, parse_command
from producers.credentials import AuthFailure, Credential, authorize, election_scope
from producers.definition_precheck import definition_precheck
from producers.intake_receipts import duplicate_receipt, repeated
from producers.intake_refusals import submission_refused
from producers.intake_state import Claim, IntakeView
from producers.outcomes import Outcome, Receipt, Refusal, Submission, category_of
from producers.payloads import lenient_definition
from producers.validation import check, precheck, resolve_election, to_payload, with_warnings

__all__ = ["Judgment", "judge", "MAX_BODY"]

MAX_BODY = 1024 * 1024
"""Largest command accepted, in bytes (an election of 1,765 units is about 250 kB)."""

log = logging.getLogger("producers.intake")

Written = Literal["accepted", "spooled"]


@dataclass(frozen=True, slots=True)
class Judgment:
    """What was decided about one submission: the event to record (None: nothing to write, a repeated
    key answered with its original receipt, held in ``claim``), and what the sender hears once it is."""

    event: Event[Any] | None
    refused: bool = False
    receipt: Receipt | None = None  # an accepted command's receipt, status and position filled in by ``answer``
    claim: Claim | None = None
    kind: str = ""
    sender: str = ""
    key: str = ""
    sender_only: bool = False
    """A refusal that rests on the sender's credential alone (no valid token, another unit's chair), not on
    the log: it holds whatever the log holds, so an intake whose state lags the log may still give it."""

    def answer(self, status: Written, position: Position | None) -> Outcome:
        """The sender's answer once the event was written (``status``) at ``position``."""
        if self.event is None:
            assert self.claim is not None  # read now: a claim of the same group learns its position on the append
            return duplicate_receipt(self.claim)
        if not self.refused:
            assert self.receipt is not None
            return replace(self.receipt, status=status, position=position)
        recorded = self.event.payload.errors  # what was recorded is what the sender hears
        log.info("refused %s from %s: %s", self.kind, self.sender, ", ".join(f"{e.field} {e.code}" for e in recorded))
        return Refusal(recorded, category_of(recorded), self.event.event_id, "log" if status == "accepted" else "spool",
                       position, claimable(self.key))


def _not_yet(occurred_at: datetime | None, now: datetime) -> tuple[Problem, ...]:
    """A command cannot report what happened after it was received: ``occurred_at`` in 2099 was
    accepted, and the trail and as-of reads order a unit's events by such times."""
    if occurred_at is None or occurred_at <= now + CLOCK_SKEW:
        return ()
    return (Problem("occurred_at", "IN_THE_FUTURE",
                    f"occurred_at {occurred_at.isoformat()} is after the intake received the command "
                    f"({now.isoformat(timespec='seconds')}, allowing {int(CLOCK_SKEW.total_seconds() // 60)} minutes "
                    "for a sender's clock)"),)


def _filed_under(named: str, unit_id: str, credential: Credential, view: IntakeView) -> str:
    """The election a command refused unparsed is filed under: the one it names, else its chair's, else
    the only one with its unit. A toss of 0 seats for a unit is that unit's refusal, in its trail and in
    its count of refusals; only a command that names no unit anyone has stays unattributed ("")."""
    if named:
        return named
    if credential.role == "chair" and credential.election_id:
        return credential.election_id
    holders = view.elections_of_unit(unit_id) if unit_id else []
    return holders[0] if len(holders) == 1 else ""


def _in_credentials_election(command: Any, credential: Credential) -> Any:
    """A chair's command that names no election is about the election the chair's credential names, if
    it names one: a unit id repeated in another election must not make it ambiguous (AMBIGUOUS_ELECTION),
    as the credential says which of them its chair was trusted with."""
    if getattr(command, "election_id", "") is None and credential.role == "chair" and credential.election_id:
        return replace(command, election_id=credential.election_id)
    return command


def judge(sub: Submission, view: IntakeView, now: Callable[[], datetime]) -> Judgment:
    """Judge ``sub`` against ``view`` (the log's state, the spool's and the group's before it on top)."""
    if sub.size > MAX_BODY:
        too_large = Problem("body", "TOO_LARGE", f"the input is {sub.size} bytes; at most {MAX_BODY} are accepted")
        parsed = Parsed(None, (too_large,), unit_id=claimable(sub.unit_id), idempotency_key=claimable(sub.idempotency_key))
    else:
        parsed = parse_command(sub.kind, sub.body, unit_id=sub.unit_id, idempotency_key=sub.idempotency_key)
    unit_id = claimable(sub.unit_id) or parsed.unit_id
    key = parsed.idempotency_key or claimable(sub.idempotency_key)

    def refuse(errors: tuple[Problem, ...], sender: str, election_id: str = "", *, filed: bool = True) -> Judgment:
        """``filed=False``: a sender without the right to the unit (no valid credential, another unit's
        chair) is kept out of every unit's state and trail count, whatever election the body names."""
        filed_under = (election_id or parsed.election_id) if filed else ""
        event = submission_refused(sub, errors, sender, filed_under, unit_id, key, now())
        return Judgment(event, refused=True, kind=sub.kind.value, sender=sender, key=key, sender_only=not filed)

    if isinstance(sub.sender, AuthFailure):
        return refuse((sub.sender.problem,), sub.sender.claimed, filed=False)
    credential = sub.sender
    actor = credential.actor
    denied = authorize(credential, sub.kind, unit_id if sub.kind is not CommandKind.DEFINE else None)
    # A chair's input that names no unit and does not parse is told what is missing (REQUIRED, as an
    # official is), not that it is for the wrong unit; one that parses still needs the chair's own unit.
    unnamed = denied is not None and denied.code == "WRONG_UNIT" and not unit_id and parsed.command is None
    if denied is not None and not unnamed:
        return refuse((denied,), actor, filed=False)
    if parsed.command is None:
        more = definition_precheck(parsed.data, parsed.errors, view) if sub.kind is CommandKind.DEFINE else precheck(parsed.data, view)
        return refuse((*parsed.errors, *more), actor, _filed_under(parsed.election_id, unit_id, credential, view))
    command = parsed.command
    claim = view.claim(command.idempotency_key)
    election_id: str | None
    problems: tuple[Problem, ...]
    if claim is not None and claim.election_id and getattr(command, "election_id", "") is None:
        # A retry that names no election is about the election its original went to, even if
        # another election with the same unit was defined since (which would make it ambiguous).
        election_id, problems = claim.election_id, ()
    else:
        election_id, problems = resolve_election(_in_credentials_election(command, credential), view)
    if election_id is None:
        return refuse(problems, actor)
    payload, problems = to_payload(command, actor)
    if payload is None:  # a definition's ratio: the rest of it is judged too, so every error is heard at once
        rest = check(command, lenient_definition(command)[0], election_id, view).errors if isinstance(command, DefineElection) else ()
        return refuse((*problems, *rest), actor, election_id)
    at = now()
    draft = new_event(
        payload,
        election_id=election_id,
        unit_id=command.unit_id,
        actor=actor,
        channel=sub.channel,
        idempotency_key=command.idempotency_key,
        occurred_at=command.occurred_at or at,
        recorded_at=at,
    )
    claim = view.claim(command.idempotency_key)
    if claim is not None:
        again = repeated(claim, draft, command.idempotency_key,
                         shown=credential.may_read(claim.actor))
        return Judgment(None, claim=claim) if isinstance(again, Receipt) else refuse((again,), actor, election_id)
    # Checked only for a new write: a duplicate above repeats a receipt, it writes nothing.
    out_of_scope = election_scope(credential, election_id, view.elections_of_unit(command.unit_id))
    if out_of_scope is not None:
        return refuse((out_of_scope,), actor, election_id)
    verdict = check(command, payload, election_id, view)
    errors = (*verdict.errors, *_not_yet(getattr(command, "occurred_at", None), at))
    if errors:
        return refuse(errors, actor, election_id)
    event = replace(draft, payload=with_warnings(payload, verdict.warnings))
    receipt = Receipt("accepted", event.event_id, event.type, election_id, command.unit_id, command.idempotency_key, None,
                      verdict.warnings)
    return Judgment(event, receipt=receipt)
