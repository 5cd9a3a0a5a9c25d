"""What becomes of a spooled event when the log is back: it was accepted while the log was out of reach,
against a state that may have lagged the log, so it is checked again against the log as it now is.

Already there (the same event, or the same content under its key: a retry that reached the log after
all) it is marked present; no longer fitting (its key taken meanwhile by other content, a conflict with
what the log now holds, a unit its election no longer defines) it is refused and the refusal recorded in its place; else it is appended. A
refusal that waited in the spool is always appended: it records what was sent, whatever came since.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ledger.events import Event, Problem, ResultCorrected, ResultReported, SubmissionRejected, TieBroken, UnitOpened
from ledger.log.port import Position
from producers.intake_state import IntakeState, claimed_key, fingerprint
from producers.validation import conflicts

__all__ = ["Verdict", "recheck"]

_UNIT_EVENTS = (UnitOpened, ResultReported, ResultCorrected, TieBroken)


@dataclass(frozen=True, slots=True)
class Verdict:
    action: Literal["present", "refuse", "append"]
    position: Position | None = None
    """Where the event already is (``present``)."""
    original: str = ""
    """The event id already in the log (``present``)."""
    problems: tuple[Problem, ...] = ()
    """Why it is refused (``refuse``)."""


def recheck(event: Event[Any], state: IntakeState) -> Verdict:
    key = event.envelope.idempotency_key
    claim = state.claim(key)
    if claim is not None and (claim.event_id == event.event_id or claim.fingerprint() == fingerprint(event)):
        return Verdict("present", claim.position, claim.event_id)
    known = state.rejection(claimed_key(key)) if isinstance(event.payload, SubmissionRejected) else None
    if known is not None and known.event_id == event.event_id:
        return Verdict("present", known.position, event.event_id)
    problems = conflicts(event, state) or _unit_gone(event, state)
    if claim is not None:
        problems = (
            Problem("idempotency_key", "IDEMPOTENCY_CONFLICT", f"key {key!r} was used meanwhile for other content (event {claim.event_id})"),
            *problems,
        )
    if problems and not isinstance(event.payload, SubmissionRejected):
        return Verdict("refuse", problems=problems)
    return Verdict("append")


def _unit_gone(event: Event[Any], state: IntakeState) -> tuple[Problem, ...]:
    """A unit's event whose election, as the log now defines it, has no such unit: a log restored from a
    copy older than the definition the event was judged by (after a lost log, ``Intake.flush``)."""
    env = event.envelope
    election = state.election(env.election_id)
    if not isinstance(event.payload, _UNIT_EVENTS) or election is None or env.unit_id in election.units:
        return ()
    return (Problem("unit_id", "UNKNOWN_UNIT", f"election {env.election_id!r} as the log now defines it has no "
                    f"reporting unit {env.unit_id!r}"),)
