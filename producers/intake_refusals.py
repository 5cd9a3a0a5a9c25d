"""What the intake records when it refuses: a ``SubmissionRejected`` event, whatever was sent.

Everything the sender controls is made encodable and bounded here (ids it cannot be filed under are
left empty; the raw input keeps them), so a refusal can always be recorded; and what was recorded is
what the sender hears (``intake_judge.Judgment.answer``).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from ledger.events import Channel, Event, Problem, SubmissionRejected, new_event, new_event_id
from ledger.render import event_to_json
from producers.commands import claimable
from producers.intake_state import rejection_key
from producers.credentials import AuthFailure
from producers.outcomes import Submission
from producers.rejections import MAX_ANONYMOUS_INPUT, MAX_RAW_INPUT, raw_record, recordable
from producers.strict_json import escaped

__all__ = ["INTAKE_ACTOR", "rejection_event", "submission_refused", "forward_refused"]

INTAKE_ACTOR = "system:intake"


def rejection_event(
    *,
    command: str,
    raw: str,
    errors: tuple[Problem, ...],
    sender: str,
    election_id: str,
    unit_id: str,
    channel: Channel,
    claimed: str,
    recorded_at: datetime,
    raw_bytes: bytes = b"",
) -> Event[SubmissionRejected]:
    """The record of a refusal (see module docstring)."""
    event_id = new_event_id()
    return new_event(
        SubmissionRejected(
            command=escaped(command, 200), raw_input=raw, errors=recordable(errors), sender=escaped(sender, 200), raw_bytes=raw_bytes
        ),
        election_id=claimable(election_id),
        unit_id=claimable(unit_id),
        actor=INTAKE_ACTOR,
        channel=channel,
        idempotency_key=rejection_key(event_id, claimable(claimed)),
        recorded_at=recorded_at,
        event_id=event_id,
    )


def submission_refused(sub: Submission, errors: tuple[Problem, ...], sender: str, election_id: str, unit_id: str, key: str,
                       now: datetime) -> Event[SubmissionRejected]:
    """A submission refused: its input kept verbatim (``raw_record``), filed under what it claimed."""
    anonymous = isinstance(sub.sender, AuthFailure)
    raw, raw_bytes = raw_record(sub.body, most=MAX_ANONYMOUS_INPUT if anonymous else MAX_RAW_INPUT, whole=sub.whole)
    return rejection_event(
        command=f"{sub.kind.value}{f' ({sub.via})' if sub.via else ''}",
        raw=raw,
        raw_bytes=raw_bytes,
        errors=errors,
        sender=sender,
        election_id=election_id,
        unit_id=unit_id,
        channel=sub.channel,
        claimed=key,
        recorded_at=now,
    )


def forward_refused(event: Event[Any], problems: tuple[Problem, ...], now: datetime) -> Event[SubmissionRejected]:
    """A spooled event that no longer fits the log when it is forwarded: the event kept as JSON."""
    return rejection_event(
        command=f"forward {event.type}",
        raw=json.dumps(event_to_json(event), sort_keys=True),
        errors=problems,
        sender=event.envelope.actor,
        election_id=event.envelope.election_id,
        unit_id=event.envelope.unit_id,
        channel=Channel.SYSTEM,
        claimed=event.envelope.idempotency_key,
        recorded_at=now,
    )
