"""What a directly written record of the log itself must be: a certification or a signed checkpoint.

No command of the intake writes these, so ``producers.direct_content`` had nothing to hold them to, and
both shape what an auditor sees for good (the log keeps every record): a certification of an election
the log does not define was accepted; a checkpoint of zeros, or one signed by no key it carries, made
``caucus verify`` report a bad signature on every run after it. A restore carries the checkpoints of
the log it restores, signed by that ledger's key, so the check is that a checkpoint is well formed,
signed by the key it names (whether that key is trusted is the verifier's question, ``caucus verify
--public-key``) and covers as many partitions as this log has.
"""

from __future__ import annotations

from typing import Any

from ledger.events import CheckpointSigned, Event, Problem, ResultsCertified
from ledger.integrity.checkpoints import CheckpointFormatError, SignedCheckpoint
from ledger.integrity.keys import TrustedKey, key_id
from producers.intake_state import IntakeView

__all__ = ["record_problems"]


def record_problems(event: Event[Any], view: IntakeView, partitions: int) -> tuple[Problem, ...]:
    """Why a certification or checkpoint ``event`` may not be written to a log of ``partitions``
    partitions whose state is ``view`` (empty for any other event)."""
    payload = event.payload
    if isinstance(payload, ResultsCertified):
        return _certification_problems(event, payload, view)
    if isinstance(payload, CheckpointSigned):
        return _checkpoint_problems(event, partitions)
    return ()


def _certification_problems(event: Event[Any], payload: ResultsCertified, view: IntakeView) -> tuple[Problem, ...]:
    election_id = event.envelope.election_id
    problems: list[Problem] = []
    if view.election(election_id) is None:
        known = ", ".join(repr(e) for e in view.election_ids()) or "none"
        problems.append(Problem("election_id", "UNKNOWN_ELECTION",
                                f"a certification of election {election_id!r}, which the log does not define (defined: {known})"))
    if event.envelope.unit_id:
        problems.append(Problem("unit_id", "NOT_AN_ELECTION_RECORD",
                                f"a certification is of an election, not of unit {event.envelope.unit_id!r}"))
    if not payload.authority.strip():
        problems.append(Problem("payload.authority", "REQUIRED", "a certification must name the authority that certifies"))
    return tuple(problems)


def _checkpoint_problems(event: Event[Any], partitions: int) -> tuple[Problem, ...]:
    try:
        signed = SignedCheckpoint.from_event(event)
    except (CheckpointFormatError, ValueError) as exc:
        return (Problem("payload", "CHECKPOINT_MALFORMED", str(exc)),)
    payload: CheckpointSigned = event.payload
    if key_id(payload.public_key) != payload.key_id:
        return (Problem("payload.key_id", "CHECKPOINT_SIGNATURE",
                        f"its key id {payload.key_id} is not the id of the public key it carries"),)
    try:
        statement = signed.checkpoint.to_bytes()
    except ValueError as exc:  # a key id or scope no checkpoint can spell
        return (Problem("payload", "CHECKPOINT_MALFORMED", f"its signed statement cannot be written: {exc}"),)
    if not TrustedKey(payload.public_key).verifies(statement, payload.signature):
        return (Problem("payload.signature", "CHECKPOINT_SIGNATURE",
                        f"its Ed25519 signature does not verify with the key it carries ({payload.key_id})"),)
    problems: list[Problem] = []
    columns = signed.columns_problem()
    if columns is not None:
        problems.append(Problem("payload.column_signature", "CHECKPOINT_SIGNATURE", columns))
    if signed.checkpoint.partitions != partitions:
        problems.append(Problem("payload.partition_sizes", "CHECKPOINT_PARTITIONS",
                                f"it covers {signed.checkpoint.partitions} partition(s); this log has {partitions}: "
                                "`caucus verify` could never check it"))
    return tuple(problems)
