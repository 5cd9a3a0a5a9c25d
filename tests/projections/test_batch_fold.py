"""The batch folder alone, on the in-memory store: no log, no source, no loop. A batch's fold equals
folding its events one by one, and every kind of duplicate (``projections.exactly_once``) is dropped."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any

import pytest

from ledger.codec import CodecError, default_codec
from ledger.events import Event
from ledger.log.partitioning import partition_for
from ledger.log.port import Position, StoredRecord
from projections.batch_fold import BatchFolder, FoldError, FoldedBatch
from projections.reducers import Projection
from projections.stores.memory import MemoryStore, forget
from projections.stores.port import Changes

PARTITIONS = 8


@pytest.fixture
def store() -> Iterator[MemoryStore]:
    name = f"fold-{uuid.uuid4().hex}"
    yield MemoryStore(name)
    forget(name)


def records(events: Sequence[Event[Any]]) -> list[StoredRecord]:
    """The events as a log would hold them: each at the next offset of its key's partition."""
    codec = default_codec()
    next_offset = [0] * PARTITIONS
    out = []
    for ev in events:
        p = partition_for(ev.key, PARTITIONS)
        out.append(StoredRecord(Position(p, next_offset[p]), ev.key, codec.encode(ev), 1))
        next_offset[p] += 1
    return out


def fold(store: MemoryStore, set_id: int, folder: BatchFolder, batch: list[StoredRecord]) -> tuple[Changes, FoldedBatch]:
    """One batch in one transaction, as the runner does it; the folder hears of the commit."""
    with store.transaction(set_id) as tx:
        changes, folded = folder.fold(tx, batch)
        tx.write(changes)
    folder.committed(folded, set(range(PARTITIONS)))
    return changes, folded


def test_a_batch_folds_as_its_events_one_by_one(support: ModuleType, store: MemoryStore) -> None:
    events = support.election_log(25, corrections=2, rejections=1)
    stored = records(events)
    whole = store.create_set("whole", source="test").set_id
    _, folded = fold(store, whole, BatchFolder(default_codec(), chunk=7), stored)
    assert (folded.applied, folded.duplicates) == (len(events), 0)

    single = store.create_set("single", source="test").set_id
    folder = BatchFolder(default_codec())
    for rec in stored:
        fold(store, single, folder, [rec])

    assert support.snapshot(store, whole) == support.snapshot(store, single)
    expected = Projection()
    expected.apply_all(events)
    assert support.snapshot(store, whole)["units"] == {key: st.dumps() for key, st in sorted(expected.units.items())}
    with store.reader(whole) as r:
        marks = {p: row.next_offset for p, row in r.positions().items()}
    assert sum(marks.values()) == len(events)


@pytest.mark.parametrize("chunk", [4, 1000], ids=["across-chunks", "within-a-chunk"])
def test_duplicates_are_dropped_wherever_they_sit(support: ModuleType, store: MemoryStore, chunk: int) -> None:
    events = support.election_log(15, corrections=1, rejections=1)
    clean = store.create_set("clean", source="test").set_id
    fold(store, clean, BatchFolder(default_codec()), records(events))

    retried = store.create_set("retried", source="test").set_id
    folder = BatchFolder(default_codec(), chunk=chunk)
    half = len(events) // 2
    # The first half in one batch; then the rest with a retry of an event of the first batch
    # (HELD_BY_INDEX) and two copies of one of this batch (REPEAT_IN_CHUNK or, across chunks, HELD_BY_INDEX).
    log = records([*events, events[3], events[half + 2], events[half + 2]])
    _, first = fold(store, retried, folder, log[:half])
    _, second = fold(store, retried, folder, log[half:])
    assert first.applied + second.applied == len(events)
    assert (first.duplicates, second.duplicates) == (0, 3)
    got, want = support.snapshot(store, retried), support.snapshot(store, clean)
    assert got == want
    assert got["events"] == len(events)


@pytest.mark.parametrize("chunk", [3, 1000], ids=["in-a-later-chunk", "within-the-chunk"])
def test_a_record_that_does_not_decode_refuses_the_batch_by_its_position(
    support: ModuleType, store: MemoryStore, chunk: int
) -> None:
    """The chunk is decoded in one call; the record it stops at is still the one named, with the
    codec's own words, and nothing of the batch is written."""
    events = support.election_log(6, corrections=1)
    log = records(events)
    bad_at = len(log) - 2
    damaged = log[bad_at]
    log[bad_at] = StoredRecord(damaged.position, damaged.key, damaged.value[:-1] + b"\x7f", 1)
    try:
        default_codec().decode(log[bad_at].value)
    except CodecError as exc:
        words = str(exc)
    else:
        raise AssertionError("the damaged record decoded")
    set_id = store.create_set("damaged", source="test").set_id
    with pytest.raises(FoldError) as refused:
        fold(store, set_id, BatchFolder(default_codec(), chunk=chunk), log)
    assert str(refused.value) == f"the record at {damaged.position} (key {damaged.key!r}) cannot be decoded: {words}"
    with store.reader(set_id) as r:
        assert r.positions() == {}
