"""Check a log against its signed checkpoints, as an outside auditor would.

What is checked, in order:

1. Every checkpoint, from the store and from the log's own ``CheckpointSigned`` records: it is well
   formed, signed by a trusted key and covers the log's partition count. A stored checkpoint whose
   event is gone from the log, or differs there, is reported.
2. The store's leaf hashes (if any) against the signed roots; only hashes that reproduce every
   signed root they cover are used to locate damage.
3. Every partition's recomputed tree against every checkpoint: the root at the checkpoint's size
   must equal the signed one. A mismatch is located between the largest matching checkpoint and the
   smallest failing one, and, with trusted leaf hashes, at the exact record, classified as altered,
   missing (later records moved up), inserted, swapped/reordered, or cut off.
4. Each checkpoint against the next (ordered by size, then time): an RFC 9162 consistency proof
   from the older size to the newer, generated from a tree that matches the newer checkpoint and
   verified from nothing but the two signed roots, so a checkpoint signed over a rewritten history (a fork) is caught even when the log
   now agrees with the later one.
5. Offsets within a partition run 0, 1, 2, ... with no holes.
6. The columns beside each value: the key and the derived headers against the value (``scan``), the
   other headers (the writer) against the column roots a checkpoint signed (``columns``), the log's
   append time against the signed checkpoints' times (``append_times``).
7. Each writer's claim against its seal (``writer_seals``): a record claiming the intake or the
   importer as its writer must carry a seal a trusted key made, once the log holds any such seal.

Positions in findings are ``partition:offset`` in the history the checkpoints signed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ledger.codec import Codec, CodecError, default_codec
from ledger.integrity.append_times import append_time_problems
from ledger.integrity.checkpoints import SignedCheckpoint
from ledger.integrity.keys import ENV_PUBLIC_KEY, PUBLIC_KEY_FILE, TrustedKey
from ledger.integrity.merkle import MerkleTree, verify_consistency
from ledger.integrity.scan import LogScan, PartitionScan, scan_log
from ledger.integrity.store import CheckpointStore, StoredRow
from ledger.integrity.writer_seals import forged_writers, seal_of
from ledger.log.port import EventLog, Position

__all__ = ["IntegrityFinding", "Report", "NoTrustedKey", "verify_scan", "verify_log", "usable_checkpoints", "trusted_checkpoints"]


@dataclass(frozen=True, slots=True)
class IntegrityFinding:
    """One thing that is wrong. ``kind`` is one of: altered, missing, inserted, reordered, truncated,
    mismatch, gap, inconsistent, signature, malformed-checkpoint, checkpoint-missing,
    checkpoint-altered, store-altered, column (a stored column contradicts the record's value),
    append-time (the log's append time contradicts the signed checkpoints' times), headers (the headers
    the value does not repeat, e.g. the writer, are not the ones a checkpoint signed), witness (the log does not extend what a witness cosigned), writer (FORGED_WRITER: no trusted seal
    vouches for the record's writer, ``writer_seals``)."""

    kind: str
    message: str
    position: Position | None = None
    checkpoint: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "position": None if self.position is None else str(self.position),
            "checkpoint": self.checkpoint,
            "message": self.message,
        }


@dataclass(slots=True)
class Report:
    partitions: int
    records: int
    checkpoints: list[SignedCheckpoint]
    findings: list[IntegrityFinding]
    uncovered: dict[int, int]
    witnessed: dict[int, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.findings

    @property
    def latest(self) -> SignedCheckpoint | None:
        return self.checkpoints[-1] if self.checkpoints else None

    @property
    def first_bad(self) -> Position | None:
        positions = [f.position for f in self.findings if f.position is not None]
        return min(positions) if positions else None

    def first_bad_by_partition(self) -> dict[int, Position]:
        out: dict[int, Position] = {}
        for f in self.findings:
            if f.position is not None and (f.position.partition not in out or f.position < out[f.position.partition]):
                out[f.position.partition] = f.position
        return out

    def to_json(self) -> dict[str, Any]:
        latest = self.latest
        return {
            "ok": self.ok,
            "partitions": self.partitions,
            "records": self.records,
            "checkpoints_verified": len(self.checkpoints),
            "latest_checkpoint": None if latest is None else {
                "event_id": latest.event_id,
                "position": None if latest.position is None else str(latest.position),
                "time": latest.checkpoint.time.isoformat(),
                "tree_size": latest.checkpoint.tree_size,
                "root_hash": latest.checkpoint.root_hash.hex(),
                "key_id": latest.checkpoint.key_id,
            },
            "records_not_yet_checkpointed": sum(self.uncovered.values()),
            "first_bad_position": None if self.first_bad is None else str(self.first_bad),
            "first_bad_by_partition": {str(p): str(pos) for p, pos in sorted(self.first_bad_by_partition().items())},
            "findings": [f.to_json() for f in self.findings],
        }


def _order(s: SignedCheckpoint) -> tuple[int, int, str]:
    """Checkpoints in the order of the log they describe: by size, then time. (Two signers racing can
    take their times and their sizes in opposite orders; sizes never go back in an honest log, and a
    log that did go back fails the larger checkpoint's root check anyway.)"""
    return (s.checkpoint.tree_size, s.checkpoint.timestamp_micros, s.event_id)


def _gather(scan: LogScan, rows: Sequence[StoredRow], findings: list[IntegrityFinding]) -> list[SignedCheckpoint]:
    """Checkpoints from the store and the log, one per event id; the store's copy wins."""
    in_log: dict[str, SignedCheckpoint] = {}
    for found in scan.checkpoints:
        if found.signed is None:
            findings.append(IntegrityFinding("malformed-checkpoint", found.problem or "unreadable checkpoint", found.position))
        else:
            in_log[found.signed.event_id] = found.signed
    chosen: dict[str, SignedCheckpoint] = {}
    for row in rows:
        if row.signed is None:
            findings.append(IntegrityFinding("store-altered", row.problem or f"stored checkpoint #{row.seq} is unreadable"))
            continue
        stored = row.signed
        logged = in_log.get(stored.event_id)
        if logged is None:
            where = f" (it was appended at {stored.position})" if stored.position else ""
            findings.append(IntegrityFinding(
                "checkpoint-missing",
                f"{stored.label} is in the checkpoint store but its event is not in the log{where}: "
                "the log was cut short or rewritten",
                stored.position, stored.event_id,
            ))
            chosen[stored.event_id] = stored
            continue
        if not logged.same_statement(stored):
            findings.append(IntegrityFinding(
                "checkpoint-altered",
                f"the checkpoint event {stored.event_id} at {logged.position} differs from the copy in the checkpoint store",
                logged.position, stored.event_id,
            ))
        elif stored.position is not None and logged.position != stored.position:
            findings.append(IntegrityFinding(
                "reordered",
                f"checkpoint event {stored.event_id} was appended at {stored.position} but now sits at {logged.position}",
                stored.position, stored.event_id,
            ))
        # The store keeps no column roots: the log's event, if it is the same signed statement, brings them.
        same = logged.same_statement(stored)
        chosen[stored.event_id] = SignedCheckpoint(stored.checkpoint, stored.public_key, stored.signature, stored.event_id,
                                                   logged.position, logged.column_roots if same else (),
                                                   logged.column_signature if same else b"")
    for eid, logged in in_log.items():
        chosen.setdefault(eid, logged)
    return sorted(chosen.values(), key=_order)


def usable_checkpoints(
    scan: LogScan, candidates: Sequence[SignedCheckpoint], trusted: Sequence[TrustedKey], findings: list[IntegrityFinding]
) -> list[SignedCheckpoint]:
    """The checkpoints whose signature and shape can be trusted, smallest (oldest) first.

    Where a checkpoint's own event sits is not signed, so it is not a reason to distrust one: an event
    placed inside the records it claims to cover fails the root check anyway (a tree cannot contain
    its own root)."""
    valid = []
    for s in candidates:
        problem = s.signature_problem(trusted)
        if problem is not None:
            findings.append(IntegrityFinding("signature", f"{s.label}: {problem}", s.position, s.event_id))
            continue
        if s.checkpoint.partitions != scan.partitions:
            findings.append(IntegrityFinding(
                "malformed-checkpoint",
                f"{s.label} covers {s.checkpoint.partitions} partitions but the log has {scan.partitions}",
                s.position, s.event_id,
            ))
            continue
        columns = s.columns_problem()
        if columns is not None:
            findings.append(IntegrityFinding("signature", f"{s.label}: {columns}", s.position, s.event_id))
            s = replace(s, column_roots=(), column_signature=b"")  # its value trees still count
        valid.append(s)
    return valid


class _Partition:
    """The checks of one partition (steps 2-5 of the module docstring)."""

    def __init__(self, p: int, ps: PartitionScan, witness: list[bytes], codec: Codec, findings: list[IntegrityFinding]) -> None:
        self.p, self.ps, self.leaves, self.tree = p, ps, ps.leaf_hashes, ps.tree
        self.witness = witness
        self.wtree = MerkleTree(witness) if witness else None
        self.codec = codec
        self.findings = findings

    def matches(self, s: SignedCheckpoint) -> bool:
        n = s.checkpoint.partition_sizes[self.p]
        return n <= self.tree.size and self.tree.root(n) == s.checkpoint.partition_roots[self.p]

    def check_witness(self, valid: Sequence[SignedCheckpoint]) -> None:
        if self.wtree is None:
            return
        for s in valid:
            n = s.checkpoint.partition_sizes[self.p]
            if n <= self.wtree.size and self.wtree.root(n) != s.checkpoint.partition_roots[self.p]:
                self.findings.append(IntegrityFinding(
                    "store-altered",
                    f"the checkpoint store's leaf hashes for partition {self.p} do not reproduce the root {s.label} "
                    f"signed for {n} records: the store was altered, so damage is located by checkpoint ranges only",
                    None, s.event_id,
                ))
                self.wtree, self.witness = None, []
                return

    def check_gaps(self) -> None:
        for expected, found in self.ps.gaps:
            if found > expected:
                what = f"{self.p}:{expected}" if found == expected + 1 else f"{self.p}:{expected}..{self.p}:{found - 1}"
                msg = f"partition {self.p}: offsets jump from {expected - 1} to {found}; record {what} is missing"
            else:
                msg = f"partition {self.p}: offset {found} appears after offset {expected - 1}; records are out of order"
            self.findings.append(IntegrityFinding("gap", msg, Position(self.p, min(expected, found))))

    def check_checkpoints(self, valid: Sequence[SignedCheckpoint]) -> None:
        sizes = {s.event_id: s.checkpoint.partition_sizes[self.p] for s in valid}
        failing = [s for s in valid if not self.matches(s)]
        if not failing:
            return
        bad = min(failing, key=lambda s: sizes[s.event_id])
        n_bad = sizes[bad.event_id]
        lo = max((sizes[s.event_id] for s in valid if sizes[s.event_id] < n_bad and self.matches(s)), default=0)
        if self.wtree is not None and self.wtree.size >= n_bad:
            index = self._first_difference(lo, n_bad)
            if index is not None:
                self.findings.append(self._classify(index, bad, n_bad))
                return
        # No trusted leaf hashes: the damage lies somewhere in [lo, n_bad).
        p = self.p
        if self.tree.size < n_bad:
            self.findings.append(IntegrityFinding(
                "truncated",
                f"partition {p} holds {self.tree.size} records but {bad.label} covers {n_bad}: "
                f"records from {p}:{self.tree.size} on are gone",
                Position(p, min(self.tree.size, n_bad)), bad.event_id,
            ))
        if self.tree.size < n_bad and lo >= self.tree.size:
            return
        self.findings.append(IntegrityFinding(
            "mismatch",
            f"partition {p}: the records {p}:{lo}..{p}:{n_bad - 1} are not the ones {bad.label} signed "
            f"(the root of the first {n_bad} records differs; the first {lo} still match an earlier checkpoint)",
            Position(p, lo), bad.event_id,
        ))

    def _first_difference(self, lo: int, n: int) -> int | None:
        leaves, witness = self.leaves, self.witness
        for i in range(lo, min(n, len(leaves))):
            if leaves[i] != witness[i]:
                return i
        return len(leaves) if len(leaves) < n else None

    def _classify(self, i: int, bad: SignedCheckpoint, n: int) -> IntegrityFinding:
        p, L, W = self.p, self.leaves, self.witness
        pos = Position(p, i)
        if i >= len(L):
            return IntegrityFinding(
                "truncated",
                f"partition {p} ends at {p}:{i} but {bad.label} covers {n} records: {p}:{i}..{p}:{n - 1} are gone",
                pos, bad.event_id,
            )
        if i + 1 < len(L) and i + 1 < len(W) and L[i] == W[i + 1] and L[i + 1] == W[i]:
            return IntegrityFinding("reordered", f"records {p}:{i} and {p}:{i + 1} were swapped", pos, bad.event_id)
        if i + 1 < len(W) and L[i] == W[i + 1]:
            return IntegrityFinding(
                "missing",
                f"the record checkpointed at {p}:{i} was removed; the records after it moved up by one",
                pos, bad.event_id,
            )
        if i + 1 < len(L) and L[i + 1] == W[i]:
            return IntegrityFinding(
                "inserted", f"a record no checkpoint covers was inserted at {p}:{i}", pos, bad.event_id
            )
        try:
            j = W.index(L[i])
        except ValueError:
            j = -1
        if j >= 0:
            return IntegrityFinding(
                "reordered", f"the record checkpointed at {p}:{j} now sits at {p}:{i}", pos, bad.event_id
            )
        return IntegrityFinding(
            "altered",
            f"the record at {p}:{i} is not the one {bad.label} covered (leaf hash {L[i].hex()[:16]}…, "
            f"checkpointed {W[i].hex()[:16]}…){self._reads_as(i)}",
            pos, bad.event_id,
        )

    def _reads_as(self, i: int) -> str:
        try:
            event = self.codec.decode(self.ps.values[i])
        except CodecError as exc:
            return f"; it no longer decodes: {exc}"
        return f"; it now reads as {event.type} {event.event_id}"

    def check_headers(self, valid: Sequence[SignedCheckpoint]) -> None:
        """The columns tree (the headers not derived from the value) against the checkpoints that sign
        its roots; damage is located between the largest matching one and the smallest failing one."""
        p, tree = self.p, self.ps.column_tree
        signed = [(s.checkpoint.partition_sizes[p], s) for s in valid if s.column_roots]
        failing = [(n, s) for n, s in signed if n <= tree.size and tree.root(n) != s.column_roots[p]]
        if not failing:
            return  # a partition shorter than a checkpoint is reported by the value trees
        n_bad, bad = min(failing, key=lambda item: item[0])
        lo = max((n for n, s in signed if n < n_bad and tree.root(n) == s.column_roots[p]), default=0)
        at = Position(p, self.ps.offset_of(lo))
        self.findings.append(IntegrityFinding(
            "headers",
            f"partition {p}: the headers beside the records {at}..{p}:{self.ps.offset_of(n_bad - 1)} that the value does "
            f"not repeat (the writer) are not the ones {bad.label} signed (the first {lo} still match)",
            at, bad.event_id,
        ))

    def check_consistency(self, valid: Sequence[SignedCheckpoint]) -> None:
        p = self.p
        for a, b in zip(valid, valid[1:]):
            m, n = a.checkpoint.partition_sizes[p], b.checkpoint.partition_sizes[p]
            if m > n:
                self.findings.append(IntegrityFinding(
                    "inconsistent",
                    f"{b.label} says partition {p} holds {n} records, fewer than the {m} that the earlier {a.label} "
                    "covered: the log was rolled back between them",
                    Position(p, n), b.event_id,
                ))
                continue
            root_b = b.checkpoint.partition_roots[p]
            source = None
            if self.matches(b):
                source = self.tree
            elif self.wtree is not None and n <= self.wtree.size and self.wtree.root(n) == root_b:
                source = self.wtree
            if source is None:
                continue  # b matches neither the log nor the store: already reported above
            proof = source.consistency_proof(m, n)
            if not verify_consistency(m, n, a.checkpoint.partition_roots[p], root_b, proof):
                self.findings.append(IntegrityFinding(
                    "inconsistent",
                    f"partition {p}: {b.label} is not an extension of {a.label}: the consistency proof from "
                    f"{m} to {n} records fails, so the first {m} records were rewritten between the two "
                    "checkpoints (a fork)",
                    None, b.event_id,
                ))


def verify_scan(
    scan: LogScan,
    rows: Sequence[StoredRow],
    witness: Mapping[int, list[bytes]],
    trusted: Sequence[TrustedKey],
    codec: Codec | None = None,
) -> Report:
    """Everything the module docstring lists, for a scanned log, its stored checkpoints and leaf hashes."""
    codec = codec or default_codec()
    findings: list[IntegrityFinding] = []
    candidates = _gather(scan, rows, findings)
    valid = usable_checkpoints(scan, candidates, trusted, findings)
    for p in range(scan.partitions):
        check = _Partition(p, scan.parts[p], list(witness.get(p, [])), codec, findings)
        check.check_witness(valid)
        check.check_gaps()
        for off, problem in scan.parts[p].column_problems:
            findings.append(IntegrityFinding("column", f"the record at {p}:{off} stores {problem}", Position(p, off)))
        for index, problem in append_time_problems(p, scan.parts[p].append_ms, valid):
            at = Position(p, scan.parts[p].offset_of(index))
            findings.append(IntegrityFinding("append-time", f"the record at {at} {problem}", at))
        check.check_checkpoints(valid)
        check.check_headers(valid)
        check.check_consistency(valid)
    findings.extend(_forged_writers(scan, trusted))
    latest = valid[-1] if valid else None
    uncovered = {
        p: scan.parts[p].size - (latest.checkpoint.partition_sizes[p] if latest else 0) for p in range(scan.partitions)
    }
    findings.sort(key=lambda f: (f.position is None, f.position or Position(0, 0)))
    return Report(
        partitions=scan.partitions,
        records=scan.records,
        checkpoints=valid,
        findings=findings,
        uncovered={p: max(0, n) for p, n in uncovered.items()},
        witnessed={p: len(h) for p, h in witness.items()},
    )


def _forged_writers(scan: LogScan, trusted: Sequence[TrustedKey]) -> list[IntegrityFinding]:
    """Records whose writer no trusted seal vouches for (``writer_seals``), checkpoint records aside."""
    checkpoints = {found.position for found in scan.checkpoints}
    records = ((Position(p, ps.offsets[i]), ps.headers[i], ps.values[i])
               for p, ps in sorted(scan.parts.items()) for i in range(len(ps.offsets)))
    return [IntegrityFinding("writer", f"FORGED_WRITER: {forged.message}", forged.position)
            for forged in forged_writers((r for r in records if r[0] not in checkpoints), trusted)]


def _sealed(scan: LogScan) -> bool:
    return any(seal_of(h) is not None for ps in scan.parts.values() for h in ps.headers)


class NoTrustedKey(ValueError):
    """There are checkpoints to check but no public key to check them with."""


def verify_log(
    log: EventLog, store: CheckpointStore | None, trusted: Sequence[TrustedKey], codec: Codec | None = None
) -> tuple[LogScan, Report]:
    """Scan ``log``, read ``store`` (None: no store, only the log's own checkpoint records) and verify."""
    codec = codec or default_codec()
    scan = scan_log(log, codec)
    rows = store.checkpoints() if store is not None else []
    witness = store.leaves() if store is not None else {}
    if not trusted and (rows or scan.checkpoints or _sealed(scan)):
        raise NoTrustedKey(
            f"there are {'checkpoints' if rows or scan.checkpoints else 'sealed records'} but no public key to verify them with: give --public-key PATH "
            f"(or set {ENV_PUBLIC_KEY}), e.g. the {PUBLIC_KEY_FILE} that `caucus checkpoint` wrote to the data directory"
        )
    return scan, verify_scan(scan, rows, witness, trusted, codec)


def trusted_checkpoints(scan: LogScan, rows: Sequence[StoredRow], trusted: Sequence[TrustedKey]) -> list[SignedCheckpoint]:
    """The checkpoints (store and log together) that a trusted key signed, smallest (oldest) first."""
    ignored: list[IntegrityFinding] = []
    return usable_checkpoints(scan, _gather(scan, rows, ignored), trusted, ignored)
