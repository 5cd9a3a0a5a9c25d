"""What becomes of a spooled event when the log is back: it was accepted while the log was out of reach,
against a state that may have lagged the log, so it is checked again against the log as it now is.

Already there (the same event, or the same content under its key: a retry that reached the log after
all) it is marked present; no longer fitting (its key taken meanwhile by other content, a conflict with
what the log now holds, a unit its election no longer defines) it is refused and the refusal recorded in its place; else it is appended. A
refusal that waited in the spool is always appended: it records what was sent, whatever came since. A
line the intake did not seal (``producers.spool``) is refused, whatever it holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ledger.events import Event, Problem, SubmissionRejected
from ledger.log.port import Position
from producers.intake_state import IntakeState, claimed_key, fingerprint
from producers.validation import conflicts

__all__ = ["Verdict", "recheck", "NOT_SPOOLED_HERE"]


@dataclass(frozen=True, slots=True)
class Verdict:
    action: Literal["present", "refuse", "append"]
    position: Position | None = None
    """Where the event already is (``present``)."""
    original: str = ""
    """The event id already in the log (``present``)."""
    problems: tuple[Problem, ...] = ()
    """Why it is refused (``refuse``)."""


NOT_SPOOLED_HERE = Problem("spool", "NOT_SPOOLED_HERE", "this spool line carries no seal of this intake: it was written "
                           "into the spool file by another hand, not accepted here; it is recorded as refused, never appended")


def recheck(event: Event[Any], state: IntakeState, *, sealed: bool = True) -> Verdict:
    """``sealed``: the spool line carries this intake's seal (``producers.spool``); one that does not is refused."""
    if not sealed:
        return Verdict("refuse", problems=(NOT_SPOOLED_HERE,))
    key = event.envelope.idempotency_key
    claim = state.claim(key)
    if claim is not None and (claim.event_id == event.event_id or claim.fingerprint() == fingerprint(event)):
        return Verdict("present", claim.position, claim.event_id)
    known = state.rejection(claimed_key(key)) if isinstance(event.payload, SubmissionRejected) else None
    if known is not None and known.event_id == event.event_id:
        return Verdict("present", known.position, event.event_id)
    problems = conflicts(event, state)
    if claim is not None:
        problems = (
            Problem("idempotency_key", "IDEMPOTENCY_CONFLICT", f"key {key!r} was used meanwhile for other content (event {claim.event_id})"),
            *problems,
        )
    if problems and not isinstance(event.payload, SubmissionRejected):
        return Verdict("refuse", problems=problems)
    return Verdict("append")
