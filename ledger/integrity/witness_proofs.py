"""Consistency proofs between two checkpoints, partition by partition, for a witness that holds no log.

Why: a witness served by URL (``caucus witness serve``) keeps only the checkpoints it cosigned, not a
copy of the log. To cosign a newer checkpoint it needs proof that the log behind it extends the one it
holds: for every partition an RFC 9162 consistency proof from the held size to the new one. The
submitter builds the proofs from its log's trees (``partition_proofs``); the witness checks them from
nothing but the two signed roots (``proofs_problem``), as Certificate Transparency witnesses do. A log
that was rewritten below the held size has no proof that verifies, whoever builds it.
"""

from __future__ import annotations

from collections.abc import Sequence

from ledger.integrity.checkpoints import Checkpoint
from ledger.integrity.merkle import verify_consistency
from ledger.integrity.scan import LogScan

__all__ = ["partition_proofs", "proofs_problem", "with_roots"]


def partition_proofs(scan: LogScan, old: Checkpoint, new: Checkpoint, *, columns: bool = False) -> list[list[bytes]]:
    """Per partition, the proof that the scanned log's first ``new`` records extend its first ``old``
    (empty where there is nothing to prove); ``columns``: of the columns trees instead. The log must
    hold at least ``new``'s records."""
    proofs: list[list[bytes]] = []
    for p in range(new.partitions):
        m = old.partition_sizes[p] if p < old.partitions else 0
        n = new.partition_sizes[p]
        part = scan.parts.get(p)
        if part is None or not 0 < m < n <= part.size:
            proofs.append([])
            continue
        proofs.append((part.column_tree if columns else part.tree).consistency_proof(m, n))
    return proofs


def with_roots(checkpoint: Checkpoint, roots: Sequence[bytes]) -> Checkpoint:
    """The checkpoint's sizes with other roots (its column roots), to prove those trees consistent too."""
    return Checkpoint(checkpoint.scope, checkpoint.timestamp_micros, checkpoint.key_id, checkpoint.partition_sizes,
                      tuple(roots))


def proofs_problem(old: Checkpoint, new: Checkpoint, proofs: Sequence[Sequence[bytes]]) -> str | None:
    """Why ``proofs`` do not show that ``new`` extends ``old`` (None: they do, in every partition)."""
    if old.partitions != new.partitions:
        return f"the checkpoint covers {new.partitions} partitions, the one held covers {old.partitions}"
    if len(proofs) != new.partitions:
        return f"{len(proofs)} consistency proofs were given for {new.partitions} partitions"
    found = []
    for p, proof in enumerate(proofs):
        m, n = old.partition_sizes[p], new.partition_sizes[p]
        old_root, new_root = old.partition_roots[p], new.partition_roots[p]
        if n < m:
            found.append(f"partition {p} holds {n} records, fewer than the {m} already witnessed: the log was cut short")
        elif m == 0:
            continue
        elif m == n and old_root != new_root or m < n and not verify_consistency(m, n, old_root, new_root, proof):
            found.append(f"the first {m} records of partition {p} are not the ones in the checkpoint witnessed at "
                         f"{old.time.isoformat()}: the history was rewritten")
    return "; ".join(found) or None
