"""``KafkaLog.read`` borrows one kept consumer, and still sees what another writer appended before it."""

from __future__ import annotations

import uuid

from ledger.log.kafka import KafkaLog
from ledger.log.port import PendingRecord


def _record(key: str) -> PendingRecord:
    return PendingRecord(key=key, event_id=str(uuid.uuid4()), value=b"v" * 150)


def test_a_read_sees_every_append_of_another_writer_made_before_it(kafka_bootstrap: str, unique_topic: str) -> None:
    reader = KafkaLog(kafka_bootstrap, unique_topic, partitions=4, timeout=5.0)
    writer = KafkaLog(kafka_bootstrap, unique_topic, partitions=4, timeout=5.0)
    try:
        positions = {p: 0 for p in range(4)}
        assert list(reader.read(positions)) == []
        kept = reader._reader._consumer
        assert kept is not None, "the read's consumer is kept for the next one"
        for i in range(40):  # nothing new, then one new record: each read must see exactly what was appended
            if i % 3:
                at = writer.append(_record(f"unit-{i}"))
                got = [r.position for r in reader.read(positions)]
                assert got == [at], f"read {i} missed the append at {at}"
                positions[at.partition] = at.offset + 1
            else:
                assert list(reader.read(positions)) == []
        assert reader._reader._consumer is kept, "every read used the same consumer"
        assert [r.position.offset for r in reader.read({p: 0 for p in range(4)}, max_records=3)] != []
    finally:
        reader.close()
        writer.close()
