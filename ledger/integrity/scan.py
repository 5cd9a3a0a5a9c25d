"""Read a log once into one Merkle tree per partition.

The leaf of a record is its value exactly as the log stores it: the Avro single-object bytes, which
are deterministic for an event (the codec sorts maps), so the same event always hashes the same and
any change to a stored record changes its leaf. Leaf ``i`` of partition ``p`` is the record at offset
``i``; both adapters number offsets ``0, 1, 2, ...`` with no holes, so a hole means a record was
removed and is reported. Hashing never depends on the catalogue being able to read a record.

The leaf covers the value only; the columns a log stores beside it are checked against the value they
must agree with (``column_problems``): the key (the event's partition key) and the headers that repeat
what the value says (type, schema fingerprint, election, unit, content type). The log's own append
time cannot be checked against the value; it is kept (``append_ms``) and held to the signed
checkpoints' times (``append_times``). The headers not derived from the value (the writer: who
appended the record) get a tree of their own per partition (``column_hashes``, ``columns``), whose
roots newer checkpoints sign; the scan keeps them for the writer seals (``writer_seals``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from ledger.codec import Codec, CodecError, default_codec
from ledger.integrity.checkpoints import CheckpointFormatError, SignedCheckpoint
from ledger.integrity.columns import EMPTY_LEAF, columns_leaf
from ledger.integrity.merkle import MerkleTree
from ledger.log.port import EventLog, Headers, Position, StoredRecord
from ledger.record_headers import DERIVED, event_headers

__all__ = ["PartitionScan", "LogScan", "FoundCheckpoint", "scan_log"]


@dataclass(slots=True)
class PartitionScan:
    partition: int
    offsets: list[int] = field(default_factory=list)
    values: list[bytes] = field(default_factory=list)
    leaf_hashes: list[bytes] = field(default_factory=list)
    gaps: list[tuple[int, int]] = field(default_factory=list)  # (offset expected, offset found)
    column_problems: list[tuple[int, str]] = field(default_factory=list)  # (offset, what disagrees with the value)
    append_ms: list[int] = field(default_factory=list)  # the log's own append time of each record
    column_hashes: list[bytes] = field(default_factory=list)  # leaves of the columns tree (``columns``)
    headers: list[Headers] = field(default_factory=list)  # each record's, for the writer seals (``writer_seals``)
    tree: MerkleTree = field(default_factory=MerkleTree)
    column_tree: MerkleTree = field(default_factory=MerkleTree)

    @property
    def size(self) -> int:
        return len(self.leaf_hashes)

    def offset_of(self, index: int) -> int:
        """The log offset of leaf ``index`` (past the end: where the next record would go)."""
        if index < len(self.offsets):
            return self.offsets[index]
        last = self.offsets[-1] if self.offsets else -1
        return last + 1 + index - len(self.offsets)


@dataclass(frozen=True, slots=True)
class FoundCheckpoint:
    """A ``CheckpointSigned`` record of the log, or why it cannot be read as one."""

    position: Position
    signed: SignedCheckpoint | None
    problem: str | None = None


@dataclass(slots=True)
class LogScan:
    partitions: int
    high_watermarks: dict[int, int]
    parts: dict[int, PartitionScan]
    checkpoints: list[FoundCheckpoint]

    @property
    def records(self) -> int:
        return sum(p.size for p in self.parts.values())

    def sizes(self) -> tuple[int, ...]:
        return tuple(self.parts[p].size for p in range(self.partitions))


def scan_log(log: EventLog, codec: Codec | None = None) -> LogScan:
    """Hash every record up to the high watermarks as they stand when the scan begins (records
    appended meanwhile are left for the next scan, so a checkpoint's sizes are a consistent cut)."""
    codec = codec or default_codec()
    checkpoint_fps = {info.fingerprint for info in codec.schemas() if info.type == "CheckpointSigned"}
    marks = log.high_watermarks()
    parts = {p: PartitionScan(p) for p in range(log.partitions)}
    found: list[FoundCheckpoint] = []
    sha256 = hashlib.sha256
    for rec in log.read():
        part, off = rec.position.partition, rec.position.offset
        if off >= marks.get(part, 0):
            continue
        ps = parts.get(part)
        if ps is None:
            ps = parts[part] = PartitionScan(part)
        expected = ps.offsets[-1] + 1 if ps.offsets else 0
        if off != expected:
            ps.gaps.append((expected, off))
        value = rec.value
        ps.offsets.append(off)
        ps.values.append(value)
        ps.leaf_hashes.append(sha256(b"\x00" + value).digest())
        ps.append_ms.append(rec.timestamp_ms)
        ps.column_hashes.append(columns_leaf(rec.headers) if rec.headers else EMPTY_LEAF)
        ps.headers.append(rec.headers)
        if value[2:10] in checkpoint_fps:
            found.append(_checkpoint_at(codec, rec.position, value))
        problem = _columns_problem(codec, rec)
        if problem is not None:
            ps.column_problems.append((off, problem))
    for ps in parts.values():
        ps.tree = MerkleTree(ps.leaf_hashes)
        ps.column_tree = MerkleTree(ps.column_hashes)
    return LogScan(max(log.partitions, len(parts)), marks, parts, found)


def _columns_problem(codec: Codec, rec: StoredRecord) -> str | None:
    """What in the record's stored columns contradicts its value, if anything."""
    try:
        event = codec.decode(rec.value)
    except CodecError:
        return None  # not an event this catalogue reads: its leaf still covers it, nothing to compare
    wrong = []
    if rec.key != event.key:
        wrong.append(f"key {rec.key!r}, but the event's is {event.key!r}")
    if rec.headers:
        derived = dict(event_headers(event, rec.value))
        for name, text in rec.headers:
            if name in DERIVED and derived.get(name) != text:
                wrong.append(f"header {name} {text.decode(errors='replace')!r}, but the value says "
                             f"{derived.get(name, b'').decode(errors='replace')!r}")
    return "; ".join(wrong) or None


def _checkpoint_at(codec: Codec, position: Position, value: bytes) -> FoundCheckpoint:
    try:
        return FoundCheckpoint(position, SignedCheckpoint.from_event(codec.decode(value), position))
    except (CodecError, CheckpointFormatError) as exc:
        return FoundCheckpoint(position, None, f"the checkpoint record at {position} cannot be read: {exc}")
