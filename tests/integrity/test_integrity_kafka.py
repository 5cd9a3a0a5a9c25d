"""The same tamper evidence on a Kafka topic (the session's Tansu broker) with the checkpoint store in
PostgreSQL. A topic cannot be edited, so each forgery is a rewritten copy in another topic (the records
re-produced with one changed, or one left out), verified against the checkpoints of the original."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ledger.log.kafka import provision_topic
from ledger.integrity.issue import issue_checkpoint
from ledger.integrity.keys import generate_key
from ledger.integrity.store import PostgresCheckpointStore
from ledger.integrity.verify import verify_log
from ledger.log.port import Position

kafka = pytest.importorskip("ledger.log.kafka", reason="the Kafka adapter (ledger/log/kafka/) is not in this checkout yet")

PARTITIONS = 4


def _log(bootstrap: str, topic: str) -> Any:
    provision_topic(bootstrap, topic, partitions=PARTITIONS)
    return kafka.KafkaLog(bootstrap, topic, partitions=PARTITIONS)


def test_tampering_with_a_kafka_log_is_detected_and_located(
    kafka_bootstrap: str, unique_topic: str, pg_dsn: str, events_factory: Any, append: Any, tamper: Any,
    flip: Callable[[bytes, bytes], bytes],
) -> None:
    key = generate_key()
    store = PostgresCheckpointStore(pg_dsn)
    original = _log(kafka_bootstrap, unique_topic)
    try:
        append(original, events_factory(40))
        first = issue_checkpoint(original, store, key, scope=unique_topic).signed
        append(original, events_factory(20, start=40))
        issue_checkpoint(original, store, key, scope=unique_topic)
        _, report = verify_log(original, store, [key.trusted])
        assert report.ok, report.findings
        assert report.records == 62 and len(report.checkpoints) == 2

        sizes = first.checkpoint.partition_sizes
        p = max(range(PARTITIONS), key=lambda q: sizes[q])

        def change_one_byte(parts: dict[int, list[Any]]) -> None:
            parts[p][3].value = flip(parts[p][3].value, b"ia-2020")

        def delete_one(parts: dict[int, list[Any]]) -> None:
            del parts[p][2]

        for suffix, edit, position, kind in (
            ("-altered", change_one_byte, Position(p, 3), "altered"),
            ("-deleted", delete_one, Position(p, 2), "missing"),
        ):
            forged = _log(kafka_bootstrap, unique_topic + suffix)
            try:
                tamper.rebuild(original, forged, edit)
                _, bad = verify_log(forged, store, [key.trusted])
            finally:
                forged.close()
            assert not bad.ok
            assert bad.first_bad == position, bad.findings
            assert kind in {f.kind for f in bad.findings if f.position == position}
    finally:
        original.close()
        store.close()
