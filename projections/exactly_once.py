"""The exactly-once rules of a projection, each named once. The runner (``projections.runner``) and the
batch folder (``projections.batch_fold``) cite them by these names; the two that decide which records
of a batch go on are the functions below.

1. ``ONE_TRANSACTION``: a batch's unit states, tallies, election states, event-index rows (which double
   as the processed-id set) and the new log positions are written in one store transaction
   (``Changes``, written by ``StoreTx.write`` and ``StoreTx.index_begin`` inside
   ``ProjectionStore.transaction``). A crash before the commit leaves the store as it was; after it,
   everything is there.
2. ``MOVE_AFTER_COMMIT``: nothing in the runner's memory (read positions, cached unit and election
   states, tally digests, progress) moves until that transaction has committed, so a batch that failed
   can be retried as it is.
3. ``POSITIONS_FROM_STORE``: on start and on every (re)assignment a partition is read from the position
   stored with the view (``start_positions``), never from a broker's committed offset.
4. ``CHECK_UNDER_LOCK``: inside the transaction, which holds the set's lock, the batch re-reads the
   stored position of each of its partitions (``claim``). If the stored position is not the one this
   runner last wrote, its cached unit states for that partition may be stale and are dropped; a gap
   above it means our read position is stale, so the partition is re-sought and its records wait for
   the next batch.
4a. ``SAME_BASE_UNDER_LOCK``: a batch may be decoded and folded before the lock, on a read snapshot of
   the set (``projections.early_fold``), so that runners of one group fold while another commits. It
   is kept only if, under the lock, ``claim`` gives the same records with nothing stale or skipped,
   the election revisions are the ones it folded against, and the index holds none of its ids;
   otherwise the transaction is rolled back and the batch is claimed and folded under the lock (4).

Duplicates are dropped in three places, one rule each:

5. ``BELOW_STORED_POSITION``: records below the stored position were applied by someone else (another
   runner after a rebalance) and are skipped (``claim``); they count as ``Progress.skipped``.
6. ``REPEAT_IN_CHUNK``: an event id met twice within one decoded chunk (a retry the log holds twice)
   is dropped as it is decoded (``batch_fold.BatchFolder.decode_chunk``): the index takes no repeated
   id in one call.
7. ``HELD_BY_INDEX``: an event whose id the set's index already holds (applied by an earlier batch, or
   by an earlier chunk of this one, whose rows are in the index in this transaction before the next
   chunk is looked up) advances the position but changes nothing (``batch_fold.Chunk.without``).
   Rules 6 and 7 count as ``Progress.duplicates``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ledger.log.port import StoredRecord
from projections.stores.port import PositionRow

__all__ = ["Claim", "claim", "others_ahead", "start_positions"]


def start_positions(stored: Mapping[int, PositionRow], partitions: set[int]) -> dict[int, int]:
    """``POSITIONS_FROM_STORE``: where each newly owned partition is read from."""
    return {p: stored[p].next_offset if p in stored else 0 for p in partitions}


@dataclass(slots=True)
class Claim:
    """What a batch may apply, decided under the set's lock."""

    work: list[StoredRecord] = field(default_factory=list)
    skipped: int = 0
    reseek: dict[int, int] = field(default_factory=dict)
    """partition -> the stored position to read from again."""
    stale: list[int] = field(default_factory=list)
    """Partitions someone else moved: their cached states must be dropped before the fold."""


def claim(stored: Mapping[int, PositionRow], by_partition: Mapping[int, Sequence[StoredRecord]],
          read_from: Mapping[int, int]) -> Claim:
    """``CHECK_UNDER_LOCK`` and ``BELOW_STORED_POSITION``: of a batch's records (by partition, in
    offset order), those that continue the view from the positions stored with it. ``read_from`` is
    where this runner last left each partition."""
    out = Claim()
    for p, recs in by_partition.items():
        start = stored[p].next_offset if p in stored else 0
        ours = read_from.get(p) == start
        if not ours:
            out.stale.append(p)
        keep = [r for r in recs if r.position.offset >= start]
        out.skipped += len(recs) - len(keep)
        if not keep or (not ours and keep[0].position.offset != start):
            # All applied elsewhere, or our read position is not where the store says the view
            # stands: read again from the stored position. (When we wrote the stored position
            # ourselves, a gap is the log's own, e.g. a transaction marker.)
            out.reseek[p] = start
            continue
        out.work.extend(keep)
    return out


def others_ahead(claimed: Claim, found: Mapping[int, int], attempted: Mapping[int, int]) -> set[int]:
    """Of a batch's partitions, those another runner is ahead in: someone moved them (``stale``), none
    of the batch's records there were new (all read again from the stored position), and the position
    found is not one this runner wrote itself (a commit that landed although its connection broke, and
    is found on the retry). A runner that reads partitions no group gave it leaves these to the other
    (``Source.others_moved``); one that applied the tail of a partition keeps it, so that of two runners
    racing on a partition one always keeps reading it."""
    return {p for p in claimed.stale if p in claimed.reseek and found.get(p) != attempted.get(p)}
