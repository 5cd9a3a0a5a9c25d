"""Inclusion proofs: show that one event is in the log a signed checkpoint vouches for.

A proof has two hops, both RFC 9162 audit paths: the event's leaf into its partition's tree at the
checkpoint's size, then that partition's head (partition, size, root) into the root of roots that was
signed. Everything a third party needs travels with the proof (leaf hash, paths, roots, the
checkpoint's canonical bytes, signature and public key), so ``check_proof`` needs no log access.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ledger.codec import Codec, CodecError, default_codec
from ledger.integrity.checkpoints import SignedCheckpoint, head_entry
from ledger.integrity.keys import TrustedKey
from ledger.integrity.merkle import leaf_hash, verify_inclusion
from ledger.integrity.scan import LogScan
from ledger.log.port import Position

__all__ = ["ProofError", "InclusionProof", "find_event", "prove_event", "check_proof"]


class ProofError(LookupError):
    """No proof can be made: the event is not in the log, or no checkpoint covers it yet."""


@dataclass(frozen=True, slots=True)
class InclusionProof:
    event_id: str
    event_type: str
    position: Position
    leaf_index: int  # the offset, as offsets run 0, 1, 2, ...
    leaf_hash: bytes
    tree_size: int  # the partition's size in the checkpoint
    audit_path: tuple[bytes, ...]
    partition_root: bytes
    head_path: tuple[bytes, ...]  # partition head -> root of roots
    signed: SignedCheckpoint

    def to_json(self) -> dict[str, Any]:
        c = self.signed.checkpoint
        return {
            "event_id": self.event_id,
            "type": self.event_type,
            "position": str(self.position),
            "partition": self.position.partition,
            "leaf_index": self.leaf_index,
            "leaf_hash": self.leaf_hash.hex(),
            "tree_size": self.tree_size,
            "audit_path": [h.hex() for h in self.audit_path],
            "partition_root": self.partition_root.hex(),
            "head": {
                "entry": head_entry(self.position.partition, self.tree_size, self.partition_root).hex(),
                "index": self.position.partition,
                "tree_size": c.partitions,
                "audit_path": [h.hex() for h in self.head_path],
            },
            "checkpoint": {
                "event_id": self.signed.event_id,
                "position": None if self.signed.position is None else str(self.signed.position),
                "time": c.time.isoformat(),
                "scope": c.scope,
                "tree_size": c.tree_size,
                "root_hash": c.root_hash.hex(),
                "key_id": c.key_id,
                "signed_bytes": c.to_bytes().hex(),
                "signature": self.signed.signature.hex(),
                "public_key": self.signed.public_key.hex(),
            },
        }


def find_event(scan: LogScan, event_id: str, codec: Codec | None = None) -> tuple[Position, int, str, str] | None:
    """Where the event with this id (or at this position, "P:O") sits, its leaf index, its type and its id. Records are searched for the id's bytes
    first and only candidates are decoded, so this costs a pass of ``bytes.find``, not of the codec."""
    codec = codec or default_codec()
    at = _position(event_id)
    if at is not None:  # a position, as `caucus trail` and `log tail` print them, names its record as well
        part, offset = at.partition, at.offset
        if part < scan.partitions and offset in scan.parts[part].offsets:
            i = scan.parts[part].offsets.index(offset)
            try:
                event = codec.decode(scan.parts[part].values[i])
            except CodecError:
                return None
            return Position(part, offset), i, event.type, event.event_id
        return None
    needle = event_id.encode("utf-8")
    for p in range(scan.partitions):
        ps = scan.parts[p]
        for i, value in enumerate(ps.values):
            if needle in value:
                try:
                    event = codec.decode(value)
                except CodecError:
                    continue
                if event.event_id == event_id:
                    return Position(p, ps.offsets[i]), i, event.type, event_id
    return None


def _position(text: str) -> Position | None:
    """``text`` as a position ``P:O`` (``Position.parse``), or None: an event id is never one."""
    try:
        at = Position.parse(text.strip())
    except ValueError:
        return None
    return at if at.partition >= 0 and at.offset >= 0 else None


def prove_event(scan: LogScan, event_id: str, checkpoints: Sequence[SignedCheckpoint], codec: Codec | None = None) -> InclusionProof:
    """The proof of ``event_id`` against the latest of ``checkpoints`` (trusted ones, smallest first,
    as ``verify.trusted_checkpoints`` returns them)."""
    found = find_event(scan, event_id, codec)
    if found is None:
        what = f"no record is at {event_id}" if _position(event_id) is not None else f"event {event_id} is not in the log"
        raise ProofError(f"{what} (give an event id or a position P:O, as `caucus trail UNIT` shows them)")
    position, index, event_type, event_id = found
    if not checkpoints:
        raise ProofError("there is no trusted checkpoint to prove against; run `caucus checkpoint` first")
    latest = checkpoints[-1]
    p = position.partition
    size = latest.checkpoint.partition_sizes[p]
    if index >= size:
        raise ProofError(
            f"event {event_id} at {position} is newer than the latest checkpoint, which covers "
            f"{size} records of partition {p}; run `caucus checkpoint` to cover it"
        )
    tree = scan.parts[p].tree
    head_tree = latest.checkpoint.head_tree()
    return InclusionProof(
        event_id=event_id,
        event_type=event_type,
        position=position,
        leaf_index=index,
        leaf_hash=tree.leaf(index),
        tree_size=size,
        audit_path=tuple(tree.inclusion_proof(index, size)),
        partition_root=latest.checkpoint.partition_roots[p],
        head_path=tuple(head_tree.inclusion_proof(p)),
        signed=latest,
    )


def check_proof(proof: InclusionProof, trusted: Sequence[TrustedKey] = ()) -> list[str]:
    """Why the proof fails (empty: it verifies). With ``trusted`` keys the signer must be one of them;
    without, the signature is checked against the key the checkpoint carries."""
    problems = []
    c = proof.signed.checkpoint
    p = proof.position.partition
    if not verify_inclusion(proof.leaf_hash, proof.leaf_index, proof.tree_size, proof.audit_path, proof.partition_root):
        problems.append(
            f"the audit path does not lead from the event's leaf to partition {p}'s signed root: the record at "
            f"{proof.position} or an earlier one was changed since the checkpoint"
        )
    head = leaf_hash(head_entry(p, proof.tree_size, proof.partition_root))
    if not verify_inclusion(head, p, c.partitions, proof.head_path, c.root_hash):
        problems.append(f"partition {p}'s head is not under the checkpoint's root of roots")
    keys = list(trusted) or [TrustedKey(proof.signed.public_key)]
    problem = proof.signed.signature_problem(keys)
    if problem is not None:
        problems.append(f"the checkpoint's signature is not acceptable: {problem}")
    return problems
