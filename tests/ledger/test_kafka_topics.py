"""Topic provisioning: explicit, idempotent, and loud about a wrong partition count."""

from __future__ import annotations

import pytest

from ledger.log.kafka import TopicError, TopicPartitionMismatch, provision_topic, topic_partitions


def test_provision_is_idempotent(kafka_bootstrap: str, unique_topic: str) -> None:
    assert provision_topic(kafka_bootstrap, unique_topic) == 8
    assert provision_topic(kafka_bootstrap, unique_topic) == 8
    assert topic_partitions(kafka_bootstrap, unique_topic) == 8


def test_partition_mismatch_is_a_clear_error(kafka_bootstrap: str, unique_topic: str) -> None:
    assert provision_topic(kafka_bootstrap, unique_topic, partitions=4) == 4
    with pytest.raises(TopicPartitionMismatch, match=rf"'{unique_topic}'.* has 4 partitions, but 8 are required"):
        provision_topic(kafka_bootstrap, unique_topic, partitions=8)
    assert topic_partitions(kafka_bootstrap, unique_topic) == 4, "the existing topic is left alone"


def test_describing_a_missing_topic_does_not_create_it(kafka_bootstrap: str, unique_topic: str) -> None:
    for _ in range(2):
        with pytest.raises(TopicError, match="does not exist"):
            topic_partitions(kafka_bootstrap, unique_topic)


def test_nonsense_counts_are_refused_before_any_io() -> None:
    with pytest.raises(ValueError, match="partitions and replication"):
        provision_topic("127.0.0.1:1", "t", partitions=0)
