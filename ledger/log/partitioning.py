"""Key-to-partition mapping shared by every adapter.

It is Kafka's default partitioner (murmur2 of the UTF-8 key, made positive, modulo the partition
count), so a unit's events sit in the same partition number, at comparable positions, whether the log
is embedded or a Kafka topic. Replaying an embedded log into Kafka therefore keeps positions meaningful.

kafka-python's murmur2 is pure Python (a few microseconds a key, more than the rest of an embedded
append). Keys are reporting units, a few thousand in an election and repeated on every event of the
unit, so each (key, count) is hashed once and remembered; the bound keeps a stream of one-off keys
(a feed's or a test's) from growing it without end. kafka-python is imported on the first hash, not
with the module: the package brings its admin and network layers along, which the commands that
never place a record (tally, trail, --help) should not pay for at every start.
"""

from __future__ import annotations

from functools import lru_cache

from ledger.log.port import LogError, PendingRecord

__all__ = ["partition_for", "record_partition"]


@lru_cache(maxsize=1 << 16)
def partition_for(key: str, partitions: int) -> int:
    if partitions < 1:
        raise ValueError(f"partitions must be at least 1, got {partitions}")
    from kafka.partitioner.default import murmur2  # here: importing kafka costs a command ~0.1 s it may not need

    return (murmur2(key.encode("utf-8")) & 0x7FFFFFFF) % partitions


def record_partition(record: PendingRecord, partitions: int) -> int:
    """The partition a record goes to: the one it names, else its key's."""
    if record.partition is None:
        return partition_for(record.key, partitions)
    if not 0 <= record.partition < partitions:
        raise LogError(f"partition {record.partition} does not exist; the log has {partitions} (record {record.event_id})")
    return record.partition
