"""Runners started together, before their group has split the partitions (the static start,
``projections.kafka_source``): a partition another runner moves is left to it (``others_moved``), and
the static consumer's fetches take the partitions in turn. The group's split comes after
(``test_lag_assignor``); exactly once across all of it is ``test_runner_kafka``'s two-runner test."""

from __future__ import annotations

import time
from types import ModuleType

from ledger.log.kafka import KafkaLog, provision_topic
from projections.kafka_source import KafkaGroupSource
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
        while source._joining is not None:  # the static consumer's reads
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
