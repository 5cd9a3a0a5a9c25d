"""Sign and record a checkpoint of the log as it stands now.

The signer audits before it signs: a checkpoint is only issued over a log that still matches every
earlier checkpoint, so the key never vouches for a rewritten history. Those checkpoints live beside
the log, where whoever rewrites the log can delete them; so the signer also keeps, with the key, the
last checkpoint it signed for each log (``ledger.integrity.signer_state``) and refuses a log that no
longer extends it. Order of writes: the
``CheckpointSigned`` event is appended to the log first, then the checkpoint and the leaf hashes it
newly covers go to the store in one transaction. If the store write fails the log still carries the
checkpoint (and ``verify`` uses it); the reverse order could leave a stored checkpoint whose event
never reached the log, which ``verify`` would rightly call tampering.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ledger.codec import Codec, default_codec
from ledger.events import utc_now
from ledger.integrity.checkpoints import Checkpoint, SignedCheckpoint, datetime_to_micros, sign_checkpoint
from ledger.integrity.keys import SigningKey, TrustedKey
from ledger.integrity.scan import scan_log
from ledger.integrity.signer_state import SignerState, extends
from ledger.integrity.store import CheckpointStore
from ledger.integrity.verify import Report, verify_scan
from ledger.journal import Journal
from ledger.log.port import EventLog

__all__ = ["RefusedToSign", "RewrittenSinceSigned", "Issued", "issue_checkpoint"]


class RefusedToSign(RuntimeError):
    """The log no longer matches its earlier checkpoints; signing it would launder the damage."""

    def __init__(self, report: Report) -> None:
        first = next(f for f in report.findings if f.kind != "writer")
        super().__init__(
            f"refusing to sign: the log does not match its earlier checkpoints ({len(report.findings)} findings; "
            f"first: {first.message})"
        )
        self.report = report


class RewrittenSinceSigned(RuntimeError):
    """The log does not extend the last checkpoint this key signed for it (kept with the key)."""


@dataclass(frozen=True, slots=True)
class Issued:
    signed: SignedCheckpoint
    report: Report  # the audit done before signing: its findings, if any, are FORGED_WRITER ones


def issue_checkpoint(
    log: EventLog,
    store: CheckpointStore,
    key: SigningKey,
    *,
    scope: str,
    also_trusted: Sequence[TrustedKey] = (),
    codec: Codec | None = None,
    signer_state: SignerState | None = None,
) -> Issued:
    if signer_state is None:
        return _issue(log, store, key, scope=scope, also_trusted=also_trusted, codec=codec, signer_state=None)
    with signer_state.locked():
        return _issue(log, store, key, scope=scope, also_trusted=also_trusted, codec=codec, signer_state=signer_state)


def _issue(
    log: EventLog,
    store: CheckpointStore,
    key: SigningKey,
    *,
    scope: str,
    also_trusted: Sequence[TrustedKey],
    codec: Codec | None,
    signer_state: SignerState | None,
) -> Issued:
    codec = codec or default_codec()
    log_key = log.log_id or f"scope:{scope}"
    timestamp = datetime_to_micros(utc_now())  # taken before the sizes, so no checkpoint predates its cut
    # The store is read before the log: another signer appends its checkpoint's event before it records
    # the checkpoint in the store, so every checkpoint read here has its event in the scan that follows.
    # Read the other way round, a signer working at the same moment looks like a cut log.
    stored = store.checkpoints()
    witness = store.leaves()
    scan = scan_log(log, codec)
    report = verify_scan(scan, stored, witness, [key.trusted, *also_trusted], codec)
    if any(f.kind != "writer" for f in report.findings):
        raise RefusedToSign(report)
    # A record whose writer no seal vouches for (``writer_seals``) is not damage to the history: it is
    # named by every verify and audit whether or not a checkpoint covers it, and a refusal would let
    # anyone able to append one record stop checkpoints (and witnesses) for good. It is signed as
    # what the log holds, and reported (``Issued.report``).
    last = signer_state.last(log_key) if signer_state is not None else None
    if last is not None:
        problem = extends(scan, last)
        if problem is not None:
            raise RewrittenSinceSigned(f"refusing to sign log {log_key}: {problem}")
    parts = [scan.parts[p] for p in range(scan.partitions)]
    checkpoint = Checkpoint(
        scope=scope,
        timestamp_micros=timestamp,
        key_id=key.key_id,
        partition_sizes=tuple(ps.size for ps in parts),
        partition_roots=tuple(ps.tree.root() for ps in parts),
    )
    signed = sign_checkpoint(checkpoint, key, event_id=str(uuid.uuid4()),
                             column_roots=[ps.column_tree.root() for ps in parts])
    position = Journal(log, codec).append(signed.to_event())
    signed = replace(signed, position=position)
    new_leaves = {}
    for ps in parts:
        have = len(witness.get(ps.partition, []))
        if ps.size > have:
            new_leaves[ps.partition] = (have, ps.leaf_hashes[have:])
    if signer_state is not None:
        signer_state.record(log_key, signed)  # before the store: the log already carries the checkpoint
    store.record(signed, new_leaves)
    return Issued(signed, report)
