"""Consumer groups for projection runners: every assigned partition starts where the store says.

Committed offsets are not used to position a consumer: Tansu drops commit metadata, and the projection
commits its view and its positions in one transaction anyway (exactly-once comes from that).
"""

from __future__ import annotations

from collections.abc import Callable

from kafka import KafkaConsumer, TopicPartition
from kafka.consumer.subscription_state import ConsumerRebalanceListener

from ledger.log.port import Offsets

__all__ = ["SeekToStored"]


class SeekToStored(ConsumerRebalanceListener):
    """Start each partition a group assigns at the position the projection stored with its view.

    ``positions(partitions)`` returns next offsets to read (partitions it does not know start at 0).
    Revocation needs nothing: positions are committed with the view, never to the broker."""

    def __init__(self, consumer: KafkaConsumer, positions: Callable[[list[int]], Offsets]) -> None:
        self._consumer = consumer
        self._positions = positions

    def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        return None

    def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        stored = self._positions(sorted(tp.partition for tp in assigned))
        for tp in assigned:
            self._consumer.seek(tp, stored.get(tp.partition, 0))
