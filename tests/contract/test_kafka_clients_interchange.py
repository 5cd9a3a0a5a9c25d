"""The two Kafka adapters on one topic: what one client writes, the other reads at the same positions,
with the same keys, values and headers, and both find the same log id. Without this an operator could
not switch ``kafka_library`` on a running ledger."""

from __future__ import annotations

import time
import uuid

import pytest

from infra.broker import free_port
from ledger.log.kafka import KafkaLog
from ledger.log.partitioning import partition_for
from ledger.config import open_log
from ledger.log.port import LogError, LogMissingError, LogUnavailableError, PendingRecord, StoredRecord
from ledger.settings import SettingsError, load_settings
from projections.backends import group_source
from projections.kafka_source import KafkaGroupSource

confluent = pytest.importorskip("ledger.log.kafka_confluent",
                                reason="confluent-kafka is not installed (pip install -e '.[confluent]')")


def batch(writer: str, count: int) -> list[PendingRecord]:
    return [PendingRecord(key=f"precinct-{i % 37:03d}", event_id=str(uuid.uuid4()), value=f"{writer}#{i}".encode(),
                          headers=(("event-type", b"ResultReported"), ("writer", writer.encode()), ("n", str(i).encode())))
            for i in range(count)]


def seen(records: list[StoredRecord]) -> list[tuple[object, ...]]:
    return sorted((r.position, r.key, r.value, r.headers) for r in records)


def test_each_client_reads_what_the_other_wrote(kafka_bootstrap: str, unique_topic: str) -> None:
    with KafkaLog(kafka_bootstrap, unique_topic, timeout=5) as old, \
            confluent.ConfluentLog(kafka_bootstrap, unique_topic, timeout=5) as new:
        written = batch("kafka-python", 120)
        placed = old.append_batch(written)
        written2 = batch("confluent", 120)
        placed += new.append_batch(written2)
        expected = sorted((p, r.key, r.value, r.headers) for p, r in zip(placed, written + written2, strict=True))
        assert all(p.partition == partition_for(r.key, 8) for p, r in zip(placed, written + written2, strict=True))
        assert seen(list(old.read())) == expected
        assert seen(list(new.read())) == expected
        assert old.high_watermarks() == new.high_watermarks()
        start = {p: m // 2 for p, m in new.high_watermarks().items()}
        assert seen(list(old.read(start))) == seen(list(new.read(start)))


def test_both_clients_find_one_log_id(kafka_bootstrap: str, unique_topic: str) -> None:
    with confluent.ConfluentLog(kafka_bootstrap, unique_topic, timeout=5) as new:
        assert new.log_id is None
        written = new.ensure_log_id()
        with KafkaLog(kafka_bootstrap, unique_topic, timeout=5, read_only=True) as old:
            assert old.log_id == written
        reader = confluent.ConfluentLog(kafka_bootstrap, unique_topic, timeout=5, read_only=True)
        assert reader.log_id == written


def test_confluent_reader_creates_nothing(kafka_bootstrap: str, unique_topic: str) -> None:
    with pytest.raises(LogMissingError, match=unique_topic):
        confluent.ConfluentLog(kafka_bootstrap, unique_topic, timeout=5, read_only=True)
    with pytest.raises(LogMissingError):  # the first attempt did not create the topic either
        confluent.ConfluentLog(kafka_bootstrap, unique_topic, timeout=5, read_only=True)


def test_confluent_unreachable_broker_fails_fast_naming_the_address() -> None:
    address = f"127.0.0.1:{free_port()}"
    began = time.monotonic()
    with pytest.raises(LogUnavailableError, match=address):
        confluent.ConfluentLog(address, "caucus.events", timeout=1)
    assert time.monotonic() - began < 5


def test_the_client_is_a_setting_and_groups_stay_on_kafka_python(kafka_bootstrap: str, unique_topic: str) -> None:
    env = {"CAUCUS_KAFKA": kafka_bootstrap, "CAUCUS_TOPIC": unique_topic, "CAUCUS_KAFKA_LIBRARY": "confluent"}
    settings = load_settings(env=env).settings
    assert load_settings(env={"CAUCUS_KAFKA": kafka_bootstrap}).settings.kafka_library == "kafka-python"
    with pytest.raises(SettingsError, match="kafka_library"):
        load_settings(env={**env, "CAUCUS_KAFKA_LIBRARY": "librdkafka"})
    log = open_log(settings)
    try:
        assert isinstance(log, confluent.ConfluentLog)
        placed = log.append(batch("setting", 1)[0])
    finally:
        log.close()
    source = group_source(settings, f"g-{unique_topic}", batch_size=100, session_timeout_ms=2000, no_partition_timeout=1)
    try:
        assert isinstance(source, KafkaGroupSource) and isinstance(source.log, KafkaLog)
        assert [r.position for r in source.log.read()] == [placed]
    finally:
        source.close()


def test_the_settings_client_properties_reach_librdkafka_by_its_names() -> None:
    env = {"CAUCUS_KAFKA": "broker:9093", "CAUCUS_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
           "CAUCUS_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "CAUCUS_KAFKA_SASL_USERNAME": "caucus",
           "CAUCUS_KAFKA_SASL_PASSWORD": "secret"}
    options = load_settings(env=env).settings.kafka_options
    assert confluent.librdkafka_options(options) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "caucus",
        "sasl.password": "secret"}
    with pytest.raises(LogError, match="request_timeout_ms"):  # refused by name, never dropped silently
        confluent.librdkafka_options({**options, "request_timeout_ms": 30000})
