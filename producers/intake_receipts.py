"""What the intake answers about an idempotency key: a command sent again, and ``GET /receipts/KEY``.

A key names one command. Sent again with the same content it gets the original receipt (``duplicate``:
nothing is written); with other content it is refused (``IDEMPOTENCY_CONFLICT``). A receipt is shown to
its sender and to officials only: a chair may not learn what others sent, or that they sent it.
"""

from __future__ import annotations

from typing import Any, Literal

from ledger.events import Event, Problem
from producers.credentials import Credential
from producers.intake_state import Claim, IntakeState, Layered, fingerprint
from producers.outcomes import Outcome, Receipt, Refusal, category_of

__all__ = ["duplicate_receipt", "repeated", "answer"]


def duplicate_receipt(claim: Claim) -> Receipt:
    """The original's receipt, for a command repeating a claimed key with the same content."""
    return Receipt("duplicate", claim.event_id, claim.event_type, claim.election_id, claim.unit_id, claim.key, claim.position)


def repeated(claim: Claim, draft: Event[Any], key: str, *, shown: bool = True) -> Receipt | Problem:
    """A key already claimed: the original receipt if ``draft`` says the same, else the conflict.
    ``shown``: whether the sender may read the original (its own, or an official's reader; see
    ``answer``). A chair who meets another sender's key hears only that it is taken: the refusal is
    kept in the log and told to the sender, and must not name what someone else sent."""
    if claim.fingerprint() == fingerprint(draft):
        return duplicate_receipt(claim)
    if not shown:
        return Problem("idempotency_key", "IDEMPOTENCY_CONFLICT",
                       f"key {key!r} was already used by another sender; use a new key for a new command")
    if draft.envelope.actor != claim.actor:  # the same content from someone else is another command
        return Problem("idempotency_key", "IDEMPOTENCY_CONFLICT",
                       f"key {key!r} was already used by {claim.actor} (event {claim.event_id}, a {claim.event_type} for "
                       f"unit {claim.unit_id or '(election)'}); a key is its sender's: use a new key for a new command")
    return Problem(
        "idempotency_key",
        "IDEMPOTENCY_CONFLICT",
        f"key {key!r} was already used for different content (event {claim.event_id}, a {claim.event_type} for unit "
        f"{claim.unit_id or '(election)'}); use a new key for a new command",
    )


def answer(view: IntakeState | Layered, state: IntakeState, key: str, reader: Credential | None) -> Outcome | None:
    """What became of the command sent with ``key`` (``view``: the log's state with the spool over it;
    ``state``: the log's alone): its receipt, its last refusal, or None, also when ``reader`` may not see it."""
    claim = view.claim(key)
    if reader is not None:
        rejected = view.rejection(key)
        owner = claim.actor if claim is not None else (rejected.sender if rejected is not None else "")
        if not reader.may_read(owner):
            return None
    if claim is not None:
        status: Literal["accepted", "spooled"] = "accepted" if claim.position is not None else "spooled"
        if claim.position is None and state.claim(key) is not None:
            status = "accepted"  # in the log, position not read back yet
        return Receipt(status, claim.event_id, claim.event_type, claim.election_id, claim.unit_id, key, claim.position)
    rejection = view.rejection(key)
    if rejection is not None:
        return Refusal(
            rejection.errors,
            category_of(rejection.errors),
            rejection.event_id,
            "log" if rejection.position is not None else "spool",
            rejection.position,
            key,
        )
    return None
