"""What a directly written record of the election or of the log itself must be: a definition's,
certification's or checkpoint's envelope, a certification, a signed checkpoint.

No command of the intake writes certifications or checkpoints, so ``producers.direct_content`` had
nothing to hold them to, and both shape what an auditor sees for good (the log keeps every record): a
certification of an election the log does not define was accepted; a checkpoint of zeros, one signed
by no key it carries, or one of another log made ``caucus verify`` fail on every run after it. A
restore carries the checkpoints of the log it restores, signed by that ledger's key, so the check is
that a checkpoint is well formed, signed by the key it names (whether that key is trusted is the
verifier's question, ``caucus verify --public-key``), and states this log: each partition's root at
the size it names is the root of this log's records there, with the lines before it in the file
(``CheckpointTrees``): a checkpoint comes after the records it covers.

A definition or certification with a unit id is no election's record to the projections (they fold it
into that unit, where it changes nothing), but the intake took such a definition as the election's:
a ghost definition then made the redefinition check compare with numbers the tallies never used.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ledger.events import CheckpointSigned, ElectionDefined, Event, Problem, ResultsCertified
from ledger.integrity.checkpoints import CheckpointFormatError, SignedCheckpoint
from ledger.integrity.keys import TrustedKey, key_id
from ledger.integrity.merkle import MerkleTree, leaf_hash
from ledger.log.partitioning import partition_for
from producers.identifiers import shows_a_word
from producers.intake_state import IntakeView

__all__ = ["record_problems", "CheckpointTrees"]


class CheckpointTrees:
    """Each partition's Merkle tree of the log as it would stand after the lines judged so far."""

    def __init__(self, partitions: int) -> None:
        self.trees = [MerkleTree() for _ in range(partitions)]

    def logged(self, partition: int, value: bytes) -> None:
        self.trees[partition].append_hash(leaf_hash(value))

    def written(self, key: str, value: bytes) -> None:
        self.logged(partition_for(key, len(self.trees)), value)


def record_problems(event: Event[Any], view: IntakeView, partitions: int, trees: CheckpointTrees | None = None,
                    trusted: Sequence[TrustedKey] | None = None) -> tuple[Problem, ...]:
    """Why a definition, certification or checkpoint ``event`` may not be written to a log of
    ``partitions`` partitions whose state is ``view`` and, given ``trees``, whose records hash to them
    (empty for any other event)."""
    payload = event.payload
    if isinstance(payload, ElectionDefined) and event.envelope.unit_id:
        return (_not_a_unit_record("a definition", event),)
    if isinstance(payload, ResultsCertified):
        return _certification_problems(event, payload, view)
    if isinstance(payload, CheckpointSigned):
        problems = [_not_a_unit_record("a checkpoint", event)] if event.envelope.unit_id or event.envelope.election_id else []
        problems.extend(_checkpoint_problems(event, partitions))
        if not problems and trusted is not None:
            problems.extend(_trust_problems(payload, trusted))
        if not problems and trees is not None:
            problems.extend(_root_problems(payload, trees))
        return tuple(problems)
    return ()


def _not_a_unit_record(what: str, event: Event[Any]) -> Problem:
    env = event.envelope
    if isinstance(event.payload, CheckpointSigned):
        return Problem("unit_id" if env.unit_id else "election_id", "NOT_A_LOG_RECORD",
                       f"{what} is of the whole log: its election and unit ids are empty")
    return Problem("unit_id", "NOT_AN_ELECTION_RECORD", f"{what} is of an election, not of unit {env.unit_id!r}")


def _certification_problems(event: Event[Any], payload: ResultsCertified, view: IntakeView) -> tuple[Problem, ...]:
    election_id = event.envelope.election_id
    problems: list[Problem] = []
    if view.election(election_id) is None:
        known = ", ".join(repr(e) for e in view.election_ids()) or "none"
        problems.append(Problem("election_id", "UNKNOWN_ELECTION",
                                f"a certification of election {election_id!r}, which the log does not define (defined: {known})"))
    if event.envelope.unit_id:
        problems.append(_not_a_unit_record("a certification", event))
    if not shows_a_word(payload.authority):
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
    wrong = signed.signature_problem([TrustedKey(payload.public_key)])  # signed by the key it carries?
    if wrong is not None:
        return (Problem("payload.signature", "CHECKPOINT_SIGNATURE", wrong),)
    problems: list[Problem] = []
    columns = signed.columns_problem()
    if columns is not None:
        problems.append(Problem("payload.column_signature", "CHECKPOINT_SIGNATURE", columns))
    if signed.checkpoint.partitions != partitions:
        problems.append(Problem("payload.partition_sizes", "CHECKPOINT_PARTITIONS",
                                f"it covers {signed.checkpoint.partitions} partition(s); this log has {partitions}: "
                                "`caucus verify` could never check it"))
    return tuple(problems)


def _root_problems(payload: CheckpointSigned, trees: CheckpointTrees) -> list[Problem]:
    """Does the checkpoint state this log? Each partition's root at its size, against the records
    there (the log's and the file's lines before it)."""
    out: list[Problem] = []
    for part, (size, root) in enumerate(zip(payload.partition_sizes, payload.partition_roots)):
        tree = trees.trees[part]
        if size > tree.size:
            out.append(Problem(f"payload.partition_sizes.{part}", "CHECKPOINT_AHEAD",
                               f"it covers {size} records of partition {part}; this log (with the lines before it) "
                               f"holds {tree.size}"))
        elif tree.root(size) != root:
            out.append(Problem(f"payload.partition_roots.{part}", "CHECKPOINT_MISMATCH",
                               f"its root of partition {part} at size {size} is not this log's: it was signed over "
                               "another log or another history"))
    return out


def _trust_problems(payload: CheckpointSigned, trusted: Sequence[TrustedKey]) -> list[Problem]:
    """A checkpoint signed by a key this ledger does not trust would make ``caucus verify`` and
    ``caucus checkpoint`` refuse the log for good: any official could sign one with a key of their own."""
    if any(k.public_key == payload.public_key for k in trusted):
        return []
    known = ", ".join(k.key_id for k in trusted) or "none"
    return [Problem("payload.key_id", "CHECKPOINT_UNTRUSTED",
                    f"it is signed by key {payload.key_id}, which this ledger does not trust (trusted: {known}); to restore "
                    "another ledger's checkpoints, trust its public key (CAUCUS_CHECKPOINT_PUBLIC_KEY)")]
