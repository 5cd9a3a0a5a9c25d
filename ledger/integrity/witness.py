"""A witness: a second party that keeps the checkpoints it has seen and cosigns each one only after
checking that the log still extends the last one it cosigned (as Certificate Transparency witnesses do).

Why: the signing key and its record (``signer_state``) stop a careless or outside rewrite, but the
operator who holds the key could still rewrite the log and sign the result. A witness is run by someone
else (an auditor, the other party, a newsroom) in a directory the operator cannot write. Once it has
cosigned a checkpoint, ``caucus verify --against WITNESS_DIR`` holds the log to that checkpoint: a log
whose first ``size`` records of a partition no longer hash to the root the witness kept is caught, and
so is another log put in its place (another log id), however freshly it was re-signed.

A witness can also be served by URL (``witness_service``: ``caucus witness serve``); it holds no log,
so it cosigns a newer checkpoint only with consistency proofs from the one it holds (``accept``,
``witness_proofs``), and ``held_problems`` is the check ``verify --against`` makes of either kind.

The witness directory holds its own Ed25519 key (``witness-key.pem``, 0600, and ``witness-key.pub``),
and ``witnessed.jsonl``: one line per cosigned checkpoint, append-only. A cosignature is the witness's
signature over ``COSIGN_CONTEXT || log id || 0x00 || checkpoint bytes``, followed by the columns
statement (``columns``) when the checkpoint signs column roots: the witness holds those too.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ledger.integrity.checkpoints import Checkpoint, SignedCheckpoint
from ledger.integrity.columns import columns_message
from ledger.integrity.keys import KeyFileError, SigningKey, TrustedKey, load_or_create_signing_key, load_trusted_key
from ledger.integrity.merkle import verify_consistency
from ledger.integrity.scan import LogScan
from ledger.integrity.witness_proofs import proofs_problem, with_roots

__all__ = ["WitnessError", "WitnessRefused", "Witnessed", "WitnessDir", "COSIGN_CONTEXT", "held_problems"]

COSIGN_CONTEXT = b"caucus-ledger witness cosignature v1\n"
KEY_FILE = "witness-key.pem"
PUBLIC_FILE = "witness-key.pub"
RECORD_FILE = "witnessed.jsonl"


class WitnessError(RuntimeError):
    """The witness directory cannot be read or written, or holds something malformed."""


class WitnessRefused(RuntimeError):
    """The checkpoint offered is not one the witness may cosign (it does not extend what it holds)."""


@dataclass(frozen=True, slots=True)
class Witnessed:
    log_id: str
    signed: SignedCheckpoint
    cosignature: bytes
    witnessed_at: str

    def message(self) -> bytes:
        return cosigned_message(self.log_id, self.signed)

    def to_json(self) -> dict[str, Any]:
        return {
            "log_id": self.log_id,
            "event_id": self.signed.event_id,
            "checkpoint": self.signed.checkpoint.to_bytes().hex(),
            "public_key": self.signed.public_key.hex(),
            "signature": self.signed.signature.hex(),
            "column_roots": [r.hex() for r in self.signed.column_roots],
            "column_signature": self.signed.column_signature.hex(),
            "cosignature": self.cosignature.hex(),
            "witnessed_at": self.witnessed_at,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Witnessed:
        signed = SignedCheckpoint(Checkpoint.from_bytes(bytes.fromhex(d["checkpoint"])), bytes.fromhex(d["public_key"]),
                                  bytes.fromhex(d["signature"]), str(d["event_id"]), None,
                                  tuple(bytes.fromhex(r) for r in d.get("column_roots", ())),
                                  bytes.fromhex(d.get("column_signature", "")))
        return cls(str(d["log_id"]), signed, bytes.fromhex(d["cosignature"]), str(d["witnessed_at"]))


def cosigned_message(log_id: str, signed: SignedCheckpoint) -> bytes:
    """What the witness signs: the log id and the checkpoint, and its column roots when it has them
    (a cosignature made before column roots existed covers the checkpoint alone, and still verifies)."""
    message = COSIGN_CONTEXT + log_id.encode() + b"\x00" + signed.checkpoint.to_bytes()
    if signed.column_roots:
        message += columns_message(signed.checkpoint.root_hash, signed.column_roots)
    return message


def _consistency_problem(scan: LogScan, held: SignedCheckpoint, new: Checkpoint | None) -> str | None:
    """Whether the scanned log (and ``new``, if given) extends ``held``, partition by partition, by RFC
    9162 consistency proofs built from the log's own trees, and keeps the headers whose column roots it
    holds; every partition that does not is named."""
    old = held.checkpoint
    found = [problem for p in range(old.partitions) if (problem := _partition_problem(scan, old, new, p)) is not None]
    for p, root in enumerate(held.column_roots):
        part, size = scan.parts.get(p), old.partition_sizes[p]
        if part is not None and size <= part.size and part.column_tree.root(size) != root:
            found.append(f"the headers beside the first {size} records of partition {p} (the writer) are not the ones "
                         f"in the checkpoint witnessed at {old.time.isoformat()}: they were rewritten")
    return "; ".join(found) if found else None


def _partition_problem(scan: LogScan, old: Checkpoint, new: Checkpoint | None, p: int) -> str | None:
    size, root = old.partition_sizes[p], old.partition_roots[p]
    part = scan.parts.get(p)
    have = part.size if part is not None else 0
    if have < size:
        return f"partition {p} holds {have} records, fewer than the {size} of the witnessed checkpoint ({old.time.isoformat()})"
    if part is None or size == 0:
        return None
    target = new.partition_sizes[p] if new is not None else have
    target_root = new.partition_roots[p] if new is not None else part.tree.root(have)
    if target < size:
        return f"the new checkpoint covers {target} records of partition {p}, fewer than the {size} already witnessed"
    if size == target:
        same = root == target_root
    else:
        same = verify_consistency(size, target, root, target_root, part.tree.consistency_proof(size, target))
    if same:
        return None
    return (f"the first {size} records of partition {p} are not the ones in the checkpoint witnessed at "
            f"{old.time.isoformat()}: the history was rewritten")


class WitnessDir:
    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def records(self) -> Path:
        return self.path / RECORD_FILE

    def key(self) -> SigningKey:
        try:
            return load_or_create_signing_key(self.path, private_name=KEY_FILE, public_name=PUBLIC_FILE)[0]
        except (OSError, KeyFileError) as exc:
            raise WitnessError(f"the witness key in {self.path} cannot be used: {exc}") from exc

    def public_key(self) -> TrustedKey:
        try:
            return load_trusted_key(self.path / PUBLIC_FILE)
        except KeyFileError as exc:
            raise WitnessError(f"{self.path} is not a witness directory: {exc}") from exc

    def witnessed(self) -> list[Witnessed]:
        try:
            lines = self.records.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise WitnessError(f"cannot read {self.records}: {exc}") from exc
        try:
            return [Witnessed.from_json(json.loads(line)) for line in lines if line.strip()]
        except (ValueError, KeyError, TypeError) as exc:
            raise WitnessError(f"{self.records} holds a malformed line: {exc}") from exc

    def cosign(self, log_id: str, scan: LogScan, signed: SignedCheckpoint) -> Witnessed:
        """Cosign ``signed`` (already checked against the signer's trusted key) if the log extends the
        last checkpoint witnessed for it and ``signed`` covers the log as scanned; else WitnessRefused."""
        held = self._held(log_id)
        problem = signed.columns_problem()
        if problem is not None:
            raise WitnessRefused(f"{signed.label}: {problem}")
        columns = signed.column_roots or (None,) * signed.checkpoint.partitions
        for p, (size, root) in enumerate(zip(signed.checkpoint.partition_sizes, signed.checkpoint.partition_roots)):
            part = scan.parts.get(p)
            if part is None or part.size < size or part.tree.root(size) != root:
                raise WitnessRefused(f"{signed.label} does not match partition {p} of the log as read")
            if columns[p] is not None and part.column_tree.root(size) != columns[p]:
                raise WitnessRefused(f"{signed.label} does not match the headers of partition {p} of the log as read")
        if held:
            last = held[-1].signed
            if signed.checkpoint.to_bytes() == last.checkpoint.to_bytes():
                return held[-1]
            problem = _consistency_problem(scan, last, signed.checkpoint)
            if problem is not None:
                raise WitnessRefused(problem)
        return self._keep(log_id, signed)

    def accept(self, log_id: str, signed: SignedCheckpoint, proofs: Sequence[Sequence[bytes]],
               signers: Sequence[TrustedKey], column_proofs: Sequence[Sequence[bytes]] = ()) -> Witnessed:
        """Cosign ``signed`` without a copy of the log (``caucus witness serve``): it must be signed by
        one of ``signers`` and, if a checkpoint of this log is held, ``proofs`` (one RFC 9162
        consistency proof per partition, ``witness_proofs``) must show it extends that one, and
        ``column_proofs`` the same of its column roots where the held one has them. The first
        checkpoint of a log is taken on its signature alone. Else WitnessRefused."""
        problem = signed.signature_problem(signers)
        if problem is not None:
            raise WitnessRefused(f"{signed.label}: {problem}")
        problem = signed.columns_problem()
        if problem is not None:
            raise WitnessRefused(f"{signed.label}: {problem}")
        held = self._held(log_id)
        if held:
            last = held[-1].signed
            if signed.checkpoint.to_bytes() == last.checkpoint.to_bytes():
                return held[-1]
            problem = proofs_problem(last.checkpoint, signed.checkpoint, proofs)
            if problem is None and last.column_roots:
                if not signed.column_roots:
                    raise WitnessRefused(f"{signed.label} drops the column roots (the writer headers) the witness holds")
                problem = proofs_problem(with_roots(last.checkpoint, last.column_roots),
                                         with_roots(signed.checkpoint, signed.column_roots), column_proofs)
                problem = None if problem is None else f"headers (the writer): {problem}"
            if problem is not None:
                raise WitnessRefused(problem)
        return self._keep(log_id, signed)

    def _held(self, log_id: str) -> list[Witnessed]:
        """What this witness cosigned for ``log_id``; WitnessRefused if it serves another log."""
        everything = self.witnessed()
        held = [w for w in everything if w.log_id == log_id]
        others = {w.log_id for w in everything} - {log_id}
        if not held and others:
            raise WitnessRefused(
                f"this witness holds checkpoints of log {', '.join(sorted(others))}, not of {log_id}: another log was "
                "put in its place (a witness directory serves one log)"
            )
        return held

    def _keep(self, log_id: str, signed: SignedCheckpoint) -> Witnessed:
        key = self.key()
        done = Witnessed(log_id, signed, key.sign(cosigned_message(log_id, signed)),
                         datetime.now(UTC).isoformat(timespec="seconds"))
        try:
            with open(self.records, "a", encoding="utf-8") as out:
                out.write(json.dumps(done.to_json(), sort_keys=True) + "\n")
                out.flush()
                os.fsync(out.fileno())
        except OSError as exc:
            raise WitnessError(f"cannot write {self.records}: {exc}") from exc
        return done

    def check(self, log_id: str | None, scan: LogScan, pinned: Sequence[TrustedKey] = ()) -> list[str]:
        """Why the scanned log is not the one this witness cosigned (empty: it extends all of it)."""
        return held_problems(self.witnessed(), self.public_key(), log_id, scan, str(self.path), pinned)


def held_problems(held: Sequence[Witnessed], witness_key: TrustedKey, log_id: str | None, scan: LogScan,
                  where: str, pinned: Sequence[TrustedKey] = ()) -> list[str]:
    """Why the scanned log is not the one a witness (``where``, its directory or URL) cosigned, given
    what it holds and its public key (empty: the log extends all of it).

    ``pinned``: the witness keys the verifier obtained on its own. A witness is only evidence if it is
    the party the verifier trusts: an operator who rewrote the log could also stand up a witness of
    their own at the address, holding cosignatures of the rewrite under a key of their own."""
    problems: list[str] = []
    if pinned and witness_key not in pinned:
        return [f"the witness {where} answers with key {witness_key.key_id}, which is not a pinned witness key "
                f"({', '.join(k.key_id for k in pinned)}): another witness than the one trusted"]
    if not held:
        return [f"the witness {where} holds no checkpoint yet"]
    for w in held:
        if not witness_key.verifies(w.message(), w.cosignature):
            problems.append(f"the witness's cosignature of checkpoint {w.signed.event_id} does not verify")
    ids = {w.log_id for w in held}
    if log_id is not None and log_id not in ids:
        problems.append(f"the log's id is {log_id}, but the witness cosigned log {', '.join(sorted(ids))}: another log")
        return problems
    last = [w for w in held if w.log_id == (log_id or w.log_id)][-1]
    problem = _consistency_problem(scan, last.signed, None)
    if problem is not None:
        problems.append(f"against the checkpoint the witness cosigned at {last.witnessed_at}: {problem}")
    return problems
