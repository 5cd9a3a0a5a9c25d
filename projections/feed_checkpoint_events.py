"""The results feed's record for a signed checkpoint of the event log.

Why on the feed at all: a subscriber downstream (a newsroom, the other party) sees the tallies but
not the event log. Keeping the log's signed checkpoints as they are issued gives it a record the
log's operator cannot take back: a later log that no longer extends a checkpoint the subscriber
kept is a rewritten log, whatever the operator's own store says.

Why a type of its own (``CheckpointPublished``, not the log's ``CheckpointSigned``): the feed's codec
reads only feed types, and a subscriber that predates this type skips its records as unknown (its
codec refuses them) instead of mistaking them for tallies. The record carries the checkpoint's
canonical bytes, signature and public key, so it can be checked with nothing but the signer's public
key; its id follows from the log and the checkpoint, so a republished copy has the same id.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from ledger.events import Channel, Event, Payload, new_event, utc_now
from ledger.integrity.checkpoints import Checkpoint, SignedCheckpoint
from ledger.log.port import Position

__all__ = ["CheckpointPublished", "checkpoint_feed_event", "checkpoint_json"]

_NS = uuid.UUID("7d6f0f0e-2b7a-4f55-8c51-3a9d5e1c2b44")
ACTOR = "caucus checkpoint"


@dataclass(frozen=True, slots=True)
class CheckpointPublished(Payload):
    """A signed checkpoint of the event log ``log_id``, as published on the results feed."""

    TYPE: ClassVar[str] = "CheckpointPublished"

    log_id: str
    checkpoint_event_id: str
    position: Position | None
    signed_bytes: bytes
    public_key: bytes
    signature: bytes
    column_roots: tuple[bytes, ...] = ()
    column_signature: bytes = b""

    @classmethod
    def of(cls, signed: SignedCheckpoint, log_id: str) -> CheckpointPublished:
        return cls(log_id, signed.event_id, signed.position, signed.checkpoint.to_bytes(), signed.public_key, signed.signature,
                   signed.column_roots, signed.column_signature)

    def signed(self) -> SignedCheckpoint:
        """The checkpoint again (``CheckpointFormatError`` if the bytes are not a well-formed one)."""
        return SignedCheckpoint(Checkpoint.from_bytes(self.signed_bytes), self.public_key, self.signature,
                                self.checkpoint_event_id, self.position, self.column_roots, self.column_signature)

    def to_avro(self) -> dict[str, Any]:
        where = None if self.position is None else {"partition": self.position.partition, "offset": self.position.offset}
        return {"log_id": self.log_id, "checkpoint_event_id": self.checkpoint_event_id, "position": where,
                "signed_bytes": self.signed_bytes, "public_key": self.public_key, "signature": self.signature,
                "column_roots": list(self.column_roots), "column_signature": self.column_signature}

    @classmethod
    def from_avro(cls, record: Mapping[str, Any]) -> CheckpointPublished:
        where = record.get("position")
        position = None if where is None else Position(int(where["partition"]), int(where["offset"]))
        return cls(str(record["log_id"]), str(record["checkpoint_event_id"]), position, bytes(record["signed_bytes"]),
                   bytes(record["public_key"]), bytes(record["signature"]),
                   tuple(bytes(r) for r in record.get("column_roots", ())), bytes(record.get("column_signature", b"")))


def checkpoint_feed_event(signed: SignedCheckpoint, log_id: str, at: datetime | None = None) -> Event[CheckpointPublished]:
    """The feed record of one checkpoint. It names no election or unit (it covers the whole log), so
    every checkpoint lands in the same partition of the feed, in the order they were published."""
    at = at or utc_now()
    event_id = str(uuid.uuid5(_NS, f"{log_id}|{signed.event_id}|{signed.signature.hex()}"))
    return new_event(CheckpointPublished.of(signed, log_id), election_id="", unit_id="", actor=ACTOR,
                     channel=Channel.SYSTEM, occurred_at=signed.checkpoint.time, recorded_at=at, event_id=event_id)


def checkpoint_json(event: Event[CheckpointPublished]) -> dict[str, Any]:
    """One published checkpoint as the JSON line ``caucus subscribe`` prints: the signed bytes, the
    signature and the key (to check it), and what they say, spelled out."""
    p = event.payload
    c = Checkpoint.from_bytes(p.signed_bytes)
    return {
        "kind": "checkpoint",
        "key": p.checkpoint_event_id,
        "election_id": "",
        "log_id": p.log_id,
        "checkpoint_event_id": p.checkpoint_event_id,
        "position": None if p.position is None else str(p.position),
        "scope": c.scope,
        "time": c.time.isoformat(),
        "tree_size": c.tree_size,
        "root_hash": c.root_hash.hex(),
        "partition_sizes": list(c.partition_sizes),
        "partition_roots": [r.hex() for r in c.partition_roots],
        "key_id": c.key_id,
        "public_key": p.public_key.hex(),
        "signature": p.signature.hex(),
        "signed_bytes": p.signed_bytes.hex(),
        "column_roots": [r.hex() for r in p.column_roots],
        "column_signature": p.column_signature.hex(),
        "published_at": event.recorded_at.isoformat(),
        "event_id": event.event_id,
    }
