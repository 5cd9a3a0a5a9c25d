"""A batch folded before the set's lock, on a read snapshot, and kept only if that base still holds
under the lock (``exactly_once.SAME_BASE_UNDER_LOCK``).

Why: runners of one consumer group share a set, and its lock (``ProjectionStore.transaction``) lets
one batch in at a time. Decoding and folding are most of a batch's time; done inside the lock, two
runners take turns and scale-out buys nothing. Done before it, on a snapshot, each runner folds while
the other commits, and the lock covers only the check, the index and the writes.

What a fold reads, and why checking the claim and the election revisions is enough: the records that
continue the view (``claim`` over the stored positions), the states of the batch's units (a unit lives
in one partition, and only a batch that moves that partition's position writes it), the election
states (their revisions), the cached states (dropped when a partition is stale, so a clean claim means
they are ours) and the event index (which ids were applied before). Under the lock the claim must come
out the same and the revisions be unchanged; the index is written then, and if it held any of the
batch's ids (a repeat at another offset, applied meanwhile by another partition's runner) the
transaction is rolled back and the batch folded again under the lock. A batch that changes an election
recomputes every unit of it, other partitions' too: it is always folded under the lock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ledger.log.port import StoredRecord
from projections.batch_fold import BatchFolder, ElectionInBatch, FoldedBatch
from projections.exactly_once import Claim, claim
from projections.stores.port import (
    Changes,
    ElectionRow,
    EventRow,
    PositionRow,
    ProjectionStore,
    StoreReader,
    StoreTx,
    TallyRow,
    UnitKey,
    UnitRow,
)

__all__ = ["EarlyFold", "BaseMoved", "fold_early"]


class BaseMoved(RuntimeError):
    """Under the lock the early fold's base turned out changed: roll back, fold under the lock."""


@dataclass
class _Snapshot:
    """``batch_fold.FoldTx`` over a read snapshot. The index is not written: each chunk's ids are
    answered as held only if an earlier chunk of this batch had them (``HELD_BY_INDEX`` within the
    batch); what the store held is asked under the lock."""

    reader: StoreReader
    rows: list[EventRow] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)

    def election_revisions(self) -> dict[str, str]:
        return self.reader.election_revisions()

    def elections(self) -> dict[str, ElectionRow]:
        return self.reader.elections()

    def unit_states(self, keys: Iterable[UnitKey] | None = None, *, election_id: str | None = None) -> dict[UnitKey, UnitRow]:
        return self.reader.unit_states(keys, election_id=election_id)

    def tallies(self, *, election_id: str | None = None, county_id: str | None = None,
                keys: Iterable[UnitKey] | None = None) -> dict[UnitKey, TallyRow]:
        return self.reader.tallies(election_id=election_id, county_id=county_id, keys=keys)

    def index_begin(self, rows: Sequence[EventRow]) -> Callable[[], set[str]]:
        held = {r.event_id for r in rows if r.event_id in self.seen}
        fresh = [r for r in rows if r.event_id not in self.seen]
        self.rows.extend(fresh)
        self.seen.update(r.event_id for r in fresh)
        return lambda: held


@dataclass
class EarlyFold:
    """A batch folded on a snapshot: its claim, the revisions it folded against, what it changes."""

    claimed: Claim
    revisions: dict[str, str]
    changes: Changes
    folded: FoldedBatch
    rows: list[EventRow]

    def settle(self, tx: StoreTx, stored: Mapping[int, PositionRow], by_partition: Mapping[int, Sequence[StoredRecord]],
               read_from: Mapping[int, int]) -> None:
        """``SAME_BASE_UNDER_LOCK``, inside the batch's transaction (``stored``: its positions): the
        claim and the revisions as folded, then the index written, holding none of the batch's ids;
        else ``BaseMoved``."""
        again = claim(stored, by_partition, read_from)
        if (again.stale or again.reseek or again.skipped != self.claimed.skipped
                or [r.position for r in again.work] != [r.position for r in self.claimed.work]
                or tx.election_revisions() != self.revisions):
            raise BaseMoved("the stored positions or election states moved since the batch was folded")
        if tx.index_begin(self.rows)():
            raise BaseMoved("the event index holds some of the batch's ids")


def fold_early(store: ProjectionStore, set_id: int, folder: BatchFolder,
               by_partition: Mapping[int, Sequence[StoredRecord]], read_from: Mapping[int, int]) -> EarlyFold | None:
    """Fold a batch on a snapshot of the set; None where it must be folded under the lock (someone
    else moved a partition, part of it was applied, or it changes an election). ``FoldError`` as in
    ``BatchFolder.fold``."""
    with store.reader(set_id) as reader:
        claimed = claim(reader.positions(), by_partition, read_from)
        if claimed.stale or claimed.reseek or claimed.skipped or not claimed.work:
            return None
        snapshot = _Snapshot(reader)
        revisions = reader.election_revisions()
        try:
            changes, folded = folder.fold(snapshot, claimed.work, elections=False)
        except ElectionInBatch:
            return None  # folded under the lock: stopped at the chunk that holds it, not after the whole batch
    return EarlyFold(claimed, revisions, changes, folded, snapshot.rows)
