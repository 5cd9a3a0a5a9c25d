"""Runners started together, before their group has split the partitions (the static start,
``projections.kafka_source``): a partition another runner moves is left to it (``others_moved``), and
the static consumer's fetches take the partitions in turn. The group's split comes after
(``test_lag_assignor``); exactly once across all of it is ``test_runner_kafka``'s two-runner test."""

from __future__ import annotations

import time
from types import ModuleType

from ledger.log.kafka import KafkaLog, provision_topic
from ledger.log.port import Position, StoredRecord
from projections.exactly_once import Claim, claim, others_ahead
from projections.kafka_source import KafkaGroupSource
from projections.stores.port import PositionRow
from projections.work_left import WorkLeft

PARTS = 8


class _Listener:
    def __init__(self) -> None:
        self.revoked_seen: set[int] = set()

    def assigned(self, partitions: set[int]) -> dict[int, int]:
        return {p: 0 for p in partitions}

    def revoked(self, partitions: set[int]) -> None:
        self.revoked_seen |= partitions


def test_a_partition_another_runner_moves_is_left_to_it_until_the_group_splits(
        support: ModuleType, kafka_bootstrap: str, unique_topic: str) -> None:
    provision_topic(kafka_bootstrap, unique_topic, PARTS)
    events = support.election_log(60)
    support.produce(kafka_bootstrap, unique_topic, events, PARTS)
    listener = _Listener()
    source = KafkaGroupSource(KafkaLog(kafka_bootstrap, unique_topic, partitions=PARTS, session_timeout_ms=2000),
                              f"g-{unique_topic}", max_poll_records=20)
    source.start(listener)
    try:
        source.others_moved({3, 5})
        assert source.assigned() == set(range(PARTS)) - {3, 5} and listener.revoked_seen == {3, 5}
        source.others_moved(set(range(PARTS)))  # never its last partition
        assert len(source.assigned()) == 1 and listener.revoked_seen == set(range(PARTS)) - source.assigned()
        kept = source.assigned()
        read: set[int] = set()
        deadline = time.monotonic() + 60
        while source._joining is not None:  # the static consumer's reads
            assert time.monotonic() < deadline, "the group was never joined"
            records = source.poll(20, 0.1)
            if source._joining is not None:  # not handed over to the group within this poll
                read |= {r.position.partition for r in records}
        assert read <= kept
        deadline = time.monotonic() + 30
        while source.assigned() != set(range(PARTS)):  # the group (of one) gives every partition back
            assert time.monotonic() < deadline
            source.poll(20, 0.1)
        source.others_moved({1})  # a group member: the group decides
        assert source.assigned() == set(range(PARTS))
    finally:
        source.close()


def test_the_work_left_counts_every_partition_seen() -> None:
    left = WorkLeft()
    assert left() == {}
    left.saw_marks({0: 100, 1: 50})
    left.saw_stored({0: 40, 2: 7})
    left.saw_marks({1: 80})  # a later report of some partitions keeps the others'
    assert left() == {0: 60, 1: 80}
    left.saw_stored({0: 100, 1: 90})
    assert left() == {0: 0, 1: 0}


def _records(partition: int, offsets: range) -> list[StoredRecord]:
    return [StoredRecord(Position(partition, o), "u", b"", 0, ()) for o in offsets]


def _stored(positions: dict[int, int]) -> dict[int, PositionRow]:
    return {p: PositionRow(p, off, "") for p, off in positions.items()}


def test_a_partition_is_left_to_another_runner_only_when_it_is_ahead_there() -> None:
    """``others_ahead``: of two runners racing on a partition, the one that applied its tail keeps it;
    a position this runner wrote itself (a commit that landed though its connection broke) is no
    other runner's."""
    batch = {1: _records(1, range(40, 50)), 2: _records(2, range(60, 70)), 3: _records(3, range(0, 10))}
    read_from = {1: 40, 2: 60, 3: 0}
    stored = {1: 50, 2: 70, 3: 5}  # 1: someone applied all of ours; 2: so did we; 3: someone applied half
    claimed = claim(_stored(stored), batch, read_from)
    assert sorted(claimed.stale) == [1, 2, 3] and set(claimed.reseek) == {1, 2}
    assert others_ahead(claimed, stored, attempted={2: 70}) == {1}
    assert others_ahead(claimed, stored, attempted={}) == {1, 2}
    assert others_ahead(Claim(), stored, attempted={}) == set()
