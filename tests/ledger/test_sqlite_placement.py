"""The embedded log's two ways of placing a batch agree.

A batch of new, distinct event ids is placed column by column (``_place_new``); any other batch goes
record by record. The fast way is the one nearly every append takes, so it is checked against the
record-by-record way on generated batches: same positions, same rows, same heads, and positions that
behave as ``Position`` objects built the usual way.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ledger.log.port import PendingRecord, Position
from ledger.log.sqlite import _place, _Placed, _place_new

PARTITIONS = 4

records = st.lists(
    st.builds(
        PendingRecord,
        key=st.sampled_from(["precinct-1", "precinct-2", "precinct-3", "unit/ä", ""]),
        event_id=st.uuids().map(str),
        value=st.binary(max_size=8),
        headers=st.sampled_from([(), (("caucus-writer", b"chair:1"),), (("caucus-event-type", b"ResultReported"),)]),
        partition=st.none() | st.integers(0, PARTITIONS - 1),
    ),
    max_size=30,
    unique_by=lambda r: r.event_id,
)
heads = st.fixed_dictionaries({p: st.integers(0, 10**6) for p in range(PARTITIONS)})


def _one_by_one(batch: list[PendingRecord], start: dict[int, int]) -> _Placed:
    """The record-by-record way: a known id that no record has sends ``_place`` down it."""
    return _place(batch, {"not-in-the-batch": Position(0, 0)}, start, PARTITIONS, 7)


@given(records, heads)
def test_a_batch_of_new_ids_is_placed_as_record_by_record_would(batch: list[PendingRecord], start: dict[int, int]) -> None:
    fast = _place_new(batch, [r.event_id for r in batch], start, PARTITIONS, 7)
    slow = _one_by_one(batch, dict(start))
    assert fast.positions == slow.positions
    assert fast.rows == slow.rows
    assert fast.heads == slow.heads
    for pos, (part, offset, *_rest) in zip(fast.positions, fast.rows):
        assert type(pos) is Position and pos == Position(part, offset) and hash(pos) == hash(Position(part, offset))
        assert str(pos) == f"{part}:{offset}"


@given(records, heads)
def test_the_heads_given_are_left_as_they_were(batch: list[PendingRecord], start: dict[int, int]) -> None:
    before = dict(start)
    _place(batch, {}, start, PARTITIONS, 7)
    assert start == before


def test_a_batch_repeating_an_id_takes_the_first_copy_s_position() -> None:
    one = PendingRecord("precinct-1", "e-1", b"a")
    placed = _place([one, PendingRecord("precinct-2", "e-2", b"b"), one], {}, dict.fromkeys(range(PARTITIONS), 0),
                    PARTITIONS, 7)
    assert placed.positions[0] == placed.positions[2]
    assert len(placed.rows) == 2
