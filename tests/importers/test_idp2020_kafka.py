"""The 2020 import into the real broker: same events as in the embedded log, and a re-run adds none."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from ledger.log.kafka import provision_topic
from ledger.journal import Journal
from producers.importers.idp2020 import import_idp2020

kafka = pytest.importorskip("ledger.log.kafka", reason="the Kafka adapter (ledger.log.kafka) is not there yet")

PARTITIONS = 8


def test_import_into_kafka_is_complete_and_idempotent(iowa_dir: Path, idp_plan, published, kafka_bootstrap: str,
                                                     unique_topic: str) -> None:  # fmt: skip
    provision_topic(kafka_bootstrap, unique_topic, partitions=PARTITIONS)
    journal = Journal(kafka.KafkaLog(kafka_bootstrap, unique_topic, partitions=PARTITIONS))
    try:
        summary = import_idp2020(iowa_dir, journal)
        events = [le.event for le in journal.read()]
        marks = journal.log.high_watermarks()
        again = import_idp2020(iowa_dir, journal)
        assert journal.log.high_watermarks() == marks
    finally:
        journal.close()
    counts = Counter(e.type for e in events)
    expected = {
        "ElectionDefined": 1 + len(published.redefined()),
        "ResultReported": sum(len(published.first_seen(label)) for label in published.releases),
        "ResultCorrected": sum(len(published.changed(a, b)) for a, b in zip(list(published.releases), list(published.releases)[1:])),
    }
    print(f"\nKafka topic {unique_topic}: {dict(counts)} (derived from the CSVs: {expected})")
    assert counts == expected and summary.appended == len(events)
    assert [e.event_id for e in events if e.unit_id == "1172"] == [e.event_id for e in idp_plan.events if e.unit_id == "1172"]
    assert [e.event_id for e in events if not e.unit_id] == [e.event_id for e in idp_plan.definitions]
    assert again.appended == 0 and again.already_present == len(events)
