"""What the intake answers: a receipt for an accepted command, a refusal with every error.

Both surfaces (CLI and HTTP) print these as JSON (``to_json``), so a program reading the CLI's ``--json``
output and one calling the HTTP service see the same documents. ``Submission`` is what a surface hands
the intake: the input as sent, who sent it, and how.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ledger.events import Channel, Problem
from ledger.log.port import Position
from producers.commands import CommandKind
from producers.credentials import AuthFailure, Credential
from producers.validation import CONFLICT_CODES

__all__ = ["Submission", "Receipt", "Refusal", "Outcome", "FlushReport", "Category", "category_of"]

Category = Literal["unauthenticated", "forbidden", "conflict", "invalid"]


@dataclass(frozen=True, slots=True)
class Submission:
    """One attempt to record something, as a surface received it."""

    kind: CommandKind
    body: str | bytes
    sender: Credential | AuthFailure
    channel: Channel = Channel.APP
    unit_id: str | None = None
    idempotency_key: str | None = None
    via: str = ""
    whole: tuple[int, str] | None = None
    """(size, SHA-256 hex) of the input when ``body`` is only its start: a surface that stops keeping an
    oversized body (the HTTP intake keeps just over ``MAX_BODY``) still says how large it was."""

    @property
    def size(self) -> int:
        """The input's size in bytes (of a str body: its UTF-8 length, near enough for the size limit)."""
        if self.whole is not None:
            return self.whole[0]
        return len(self.body) if isinstance(self.body, bytes) else len(self.body.encode("utf-8", "surrogatepass"))


@dataclass(frozen=True, slots=True)
class Receipt:
    """The answer to an accepted command. ``duplicate`` names the original event; ``position`` is None
    while the event waits in the spool."""

    status: Literal["accepted", "duplicate", "spooled"]
    event_id: str
    event_type: str
    election_id: str
    unit_id: str
    idempotency_key: str
    position: Position | None
    warnings: tuple[Problem, ...] = ()

    accepted = True

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "event_id": self.event_id,
            "type": self.event_type,
            "election_id": self.election_id,
            "unit_id": self.unit_id,
            "idempotency_key": self.idempotency_key,
            "position": None if self.position is None else str(self.position),
            "warnings": [w.to_avro() for w in self.warnings],
        }


@dataclass(frozen=True, slots=True)
class Refusal:
    """The answer to a refused command: every error, and where the refusal itself was recorded."""

    errors: tuple[Problem, ...]
    category: Category
    rejection_event_id: str
    recorded: Literal["log", "spool"]
    position: Position | None
    idempotency_key: str = ""

    accepted = False

    def to_json(self) -> dict[str, Any]:
        return {
            "status": "rejected",
            "category": self.category,
            "idempotency_key": self.idempotency_key,
            "errors": [e.to_avro() for e in self.errors],
            "rejection": {
                "event_id": self.rejection_event_id,
                "recorded": self.recorded,
                "position": None if self.position is None else str(self.position),
            },
        }


Outcome = Receipt | Refusal


@dataclass(frozen=True, slots=True)
class FlushReport:
    forwarded: int
    rejected: int
    already_present: int
    remaining: int
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "forwarded": self.forwarded,
            "rejected": self.rejected,
            "already_present": self.already_present,
            "remaining": self.remaining,
            "error": self.error,
        }


def category_of(errors: tuple[Problem, ...]) -> Category:
    """Which kind of refusal: decides the HTTP status (401, 403, 409, 422)."""
    codes = {e.code for e in errors}
    if codes & {"UNAUTHENTICATED", "REVOKED"}:
        return "unauthenticated"
    if codes & {"FORBIDDEN", "WRONG_UNIT", "WRONG_ELECTION", "AMBIGUOUS_CREDENTIAL"}:  # what the credential may not do
        return "forbidden"
    if codes & CONFLICT_CODES:
        return "conflict"
    return "invalid"
