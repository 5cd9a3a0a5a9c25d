"""Signed checkpoints: what the log held at one moment, in a form anyone can check later.

A checkpoint states, for every partition ``i``, the size ``n_i`` of its tree (its first ``n_i``
records, offsets ``0 .. n_i - 1``) and the RFC 9162 root of that tree; the time the sizes were taken;
the log it speaks about (``scope``) and the signing key's id. Kafka has no order across partitions, so
there is one tree per partition (records in offset order, which both log adapters keep) and the
checkpoint ties them together with a root of roots: the RFC 9162 root over the partition heads, leaf
``i`` being ``partition i (u32) || n_i (u64) || root_i``. ``tree_size`` is ``sum(n_i)``.

The signature is Ed25519 over the canonical bytes below, big-endian, no optional parts, so there is
exactly one encoding of a checkpoint and a verifier rebuilds it from the event's fields::

    b"caucus-ledger/checkpoint/v1\\n"
    u64 timestamp_micros | u16 len + scope (UTF-8) | u16 len + key_id (ASCII)
    u32 partitions | partitions x (u64 size | 32-byte root)
    u64 tree_size | 32-byte root of roots

Checkpoints are kept twice: as ``CheckpointSigned`` events in the log itself (one per checkpoint, so
the log carries its own history of commitments and anyone with the log and the public key can audit
it) and in a small store beside the log (``ledger.integrity.store``), which survives a log that was cut
short or rewritten. A checkpoint covers the log as it stood *before* its own event was appended; that
event is an ordinary leaf of its partition and is covered by the next checkpoint.

Beside the checkpoint, the same key signs the roots of the columns trees (``ledger.integrity.columns``:
the headers the value does not repeat) as a statement of their own, so the bytes above, and every
proof, witness and recount package built on them, stay as they were.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ledger.events import Channel, CheckpointSigned, Event, new_event
from ledger.integrity.columns import columns_message
from ledger.integrity.keys import SigningKey, TrustedKey, key_id
from ledger.integrity.merkle import HASH_SIZE, MerkleTree, leaf_hash
from ledger.log.port import Position

__all__ = [
    "MAGIC",
    "CheckpointFormatError",
    "Checkpoint",
    "SignedCheckpoint",
    "sign_checkpoint",
    "head_entry",
    "micros_to_datetime",
    "datetime_to_micros",
]

MAGIC = b"caucus-ledger/checkpoint/v1\n"
_U16, _U32, _U64 = struct.Struct(">H"), struct.Struct(">I"), struct.Struct(">Q")


class CheckpointFormatError(ValueError):
    """Bytes or an event that are not a well-formed checkpoint, with what is wrong."""


def micros_to_datetime(micros: int) -> datetime:
    return datetime.fromtimestamp(micros // 1_000_000, UTC).replace(microsecond=micros % 1_000_000)


def datetime_to_micros(at: datetime) -> int:
    delta = at.astimezone(UTC) - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def head_entry(partition: int, size: int, root: bytes) -> bytes:
    """Partition ``partition``'s head as an entry of the root-of-roots tree."""
    return _U32.pack(partition) + _U64.pack(size) + root


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The statement that is signed (see module docstring)."""

    scope: str
    timestamp_micros: int
    key_id: str
    partition_sizes: tuple[int, ...]
    partition_roots: tuple[bytes, ...]

    def __post_init__(self) -> None:
        sizes, roots = tuple(self.partition_sizes), tuple(self.partition_roots)
        object.__setattr__(self, "partition_sizes", sizes)
        object.__setattr__(self, "partition_roots", roots)
        if not sizes:
            raise CheckpointFormatError("a checkpoint covers at least one partition")
        if len(sizes) != len(roots):
            raise CheckpointFormatError(f"{len(sizes)} partition sizes but {len(roots)} partition roots")
        for i, (n, r) in enumerate(zip(sizes, roots)):
            if not 0 <= n < 1 << 64:
                raise CheckpointFormatError(f"partition {i}: size {n} is not a u64")
            if not isinstance(r, bytes) or len(r) != HASH_SIZE:
                raise CheckpointFormatError(f"partition {i}: root is not {HASH_SIZE} bytes")
        if not 0 <= self.timestamp_micros < 1 << 64:
            raise CheckpointFormatError(f"timestamp {self.timestamp_micros} is not a u64")
        # A statement that cannot be read as a time or written as bytes is no checkpoint: signed or
        # verified, it raised inside `caucus verify` and `caucus checkpoint` instead of being reported.
        try:
            micros_to_datetime(self.timestamp_micros)
        except (ValueError, OverflowError) as exc:
            raise CheckpointFormatError(f"timestamp {self.timestamp_micros} is not a readable instant: {exc}") from exc
        try:
            self.scope.encode("utf-8"), self.key_id.encode("ascii")
        except UnicodeEncodeError as exc:
            raise CheckpointFormatError(f"its scope or key id cannot be written: {exc}") from exc

    @property
    def partitions(self) -> int:
        return len(self.partition_sizes)

    @property
    def tree_size(self) -> int:
        return sum(self.partition_sizes)

    @property
    def time(self) -> datetime:
        return micros_to_datetime(self.timestamp_micros)

    def head_tree(self) -> MerkleTree:
        return MerkleTree(
            leaf_hash(head_entry(p, n, r)) for p, (n, r) in enumerate(zip(self.partition_sizes, self.partition_roots))
        )

    @property
    def root_hash(self) -> bytes:
        """The root of roots."""
        return self.head_tree().root()

    def to_bytes(self) -> bytes:
        scope, kid = self.scope.encode("utf-8"), self.key_id.encode("ascii")
        parts = [MAGIC, _U64.pack(self.timestamp_micros), _U16.pack(len(scope)), scope, _U16.pack(len(kid)), kid]
        parts.append(_U32.pack(self.partitions))
        for n, r in zip(self.partition_sizes, self.partition_roots):
            parts += [_U64.pack(n), r]
        parts += [_U64.pack(self.tree_size), self.root_hash]
        return b"".join(parts)

    @classmethod
    def from_bytes(cls, data: bytes) -> Checkpoint:
        """Parse canonical bytes strictly: every derived field must agree and nothing may trail."""
        view = memoryview(data)
        pos = 0

        def take(n: int, what: str) -> bytes:
            nonlocal pos
            if pos + n > len(view):
                raise CheckpointFormatError(f"checkpoint bytes end inside {what} (at byte {pos})")
            out = bytes(view[pos : pos + n])
            pos += n
            return out

        if take(len(MAGIC), "the header") != MAGIC:
            raise CheckpointFormatError("checkpoint bytes do not start with the caucus-ledger checkpoint header")
        ts = _U64.unpack(take(8, "the timestamp"))[0]
        scope = take(_U16.unpack(take(2, "the scope length"))[0], "the scope").decode("utf-8")
        kid = take(_U16.unpack(take(2, "the key id length"))[0], "the key id").decode("ascii")
        count = _U32.unpack(take(4, "the partition count"))[0]
        sizes, roots = [], []
        for i in range(count):
            sizes.append(_U64.unpack(take(8, f"partition {i}'s size"))[0])
            roots.append(take(HASH_SIZE, f"partition {i}'s root"))
        checkpoint = cls(scope, ts, kid, tuple(sizes), tuple(roots))
        total = _U64.unpack(take(8, "the tree size"))[0]
        root = take(HASH_SIZE, "the root hash")
        if pos != len(view):
            raise CheckpointFormatError(f"{len(view) - pos} bytes trail the checkpoint")
        if total != checkpoint.tree_size or root != checkpoint.root_hash:
            raise CheckpointFormatError("the tree size or root of roots does not follow from the partition heads")
        return checkpoint


@dataclass(frozen=True, slots=True)
class SignedCheckpoint:
    """A checkpoint, its signature, and where its ``CheckpointSigned`` event sits (once appended)."""

    checkpoint: Checkpoint
    public_key: bytes
    signature: bytes
    event_id: str = ""
    position: Position | None = None
    column_roots: tuple[bytes, ...] = ()  # the columns trees' roots (``columns``); empty: not recorded
    column_signature: bytes = b""

    def columns_problem(self) -> str | None:
        """Why the column roots cannot be trusted (None: none recorded, or signed by this checkpoint's key)."""
        if not self.column_roots:
            return None
        if len(self.column_roots) != self.checkpoint.partitions or any(len(r) != HASH_SIZE for r in self.column_roots):
            return f"it carries {len(self.column_roots)} column roots for {self.checkpoint.partitions} partitions"
        message = columns_message(self.checkpoint.root_hash, self.column_roots)
        if not TrustedKey(self.public_key).verifies(message, self.column_signature):
            return "the signature of its column roots does not verify with its key"
        return None

    @property
    def label(self) -> str:
        where = f" at {self.position}" if self.position is not None else ""
        return f"checkpoint {self.event_id or '(unrecorded)'}{where} ({self.checkpoint.time.isoformat()})"

    def signature_problem(self, trusted: Sequence[TrustedKey]) -> str | None:
        """Why this checkpoint's signature cannot be accepted, or None when a trusted key made it."""
        body_kid = self.checkpoint.key_id
        if key_id(self.public_key) != body_kid:
            return f"its key id {body_kid} is not the id of the public key it carries ({key_id(self.public_key)})"
        match = next((k for k in trusted if k.public_key == self.public_key), None)
        if match is None:
            known = ", ".join(k.key_id for k in trusted) or "none"
            return f"it is signed by key {body_kid}, which is not a trusted key (trusted: {known})"
        if not match.verifies(self.checkpoint.to_bytes(), self.signature):
            return f"its Ed25519 signature does not verify with key {body_kid}"
        return None

    def to_payload(self) -> CheckpointSigned:
        c = self.checkpoint
        return CheckpointSigned(
            tree_size=c.tree_size,
            root_hash=c.root_hash,
            key_id=c.key_id,
            public_key=self.public_key,
            signature=self.signature,
            scope=c.scope,
            partition_sizes=c.partition_sizes,
            partition_roots=c.partition_roots,
            timestamp_micros=c.timestamp_micros,
            column_roots=self.column_roots,
            column_signature=self.column_signature,
        )

    def to_event(self, *, actor: str = "caucus checkpoint") -> Event[CheckpointSigned]:
        """The event that records this checkpoint in the log.

        It belongs to the log, not to an election or a unit, so both ids are empty and the key is the
        constant ``election:``: every checkpoint lands in the same partition, one after the other.
        """
        at = self.checkpoint.time
        return new_event(
            self.to_payload(), election_id="", unit_id="", actor=actor, channel=Channel.SYSTEM,
            occurred_at=at, event_id=self.event_id or None,
        )

    @classmethod
    def from_event(cls, event: Event[Any], position: Position | None = None) -> SignedCheckpoint:
        payload = event.payload
        if not isinstance(payload, CheckpointSigned):
            raise CheckpointFormatError(f"event {event.event_id} is a {event.type}, not a CheckpointSigned")
        if not payload.partition_sizes:
            raise CheckpointFormatError(
                f"checkpoint event {event.event_id} carries no per-partition trees (a version 1 checkpoint), "
                "so it cannot be checked against this log"
            )
        checkpoint = Checkpoint(
            payload.scope, payload.timestamp_micros, payload.key_id, payload.partition_sizes, payload.partition_roots
        )
        if payload.tree_size != checkpoint.tree_size or payload.root_hash != checkpoint.root_hash:
            raise CheckpointFormatError(
                f"checkpoint event {event.event_id}: tree_size/root_hash do not follow from its partition heads"
            )
        return cls(checkpoint, payload.public_key, payload.signature, event.event_id, position,
                   payload.column_roots, payload.column_signature)

    def same_statement(self, other: SignedCheckpoint) -> bool:
        return (
            self.checkpoint == other.checkpoint
            and self.public_key == other.public_key
            and self.signature == other.signature
        )


def sign_checkpoint(
    checkpoint: Checkpoint, key: SigningKey, *, event_id: str = "", column_roots: Sequence[bytes] = ()
) -> SignedCheckpoint:
    """Sign the checkpoint and, if given, its column roots (``columns``), with the same key."""
    if checkpoint.key_id != key.key_id:
        raise ValueError(f"checkpoint names key {checkpoint.key_id} but is signed with {key.key_id}")
    roots = tuple(column_roots)
    column_signature = key.sign(columns_message(checkpoint.root_hash, roots)) if roots else b""
    return SignedCheckpoint(checkpoint, key.public_key, key.sign(checkpoint.to_bytes()), event_id, None, roots, column_signature)
