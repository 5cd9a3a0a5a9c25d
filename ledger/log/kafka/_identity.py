"""A Kafka log's own identity: an id kept in a metadata topic beside the event topic.

Why a topic of its own: the id must not be a record of the event topic (positions would differ from the
embedded log's, and every reader, the Merkle trees included, would have to skip it), and Kafka has no
free-form topic property to hold it. So the topic ``<topic>.meta`` holds records keyed by the event
topic's name whose value is ``{"log_id": ..., "topic": ..., "partitions": ..., "created_at": ...}``.

The rules, and the broker quirks behind them (DESIGN.md):

- The first record wins. Two writers that find no id at the same moment both append one; both then
  read the partition from its start and take the first, so they agree. Compaction would keep the last
  record instead, so the topic is created without it (and with infinite retention, like the log).
- It is created explicitly with one partition (Tansu would auto-create it with four as soon as a
  client named it); only partition 0 is ever written or read, so a topic some client auto-created
  still works.
- Readers never create it: a missing metadata topic means "no id" (a topic from before ids, or a
  reader that may not write), and existence is asked through metadata, never by fetching (a fetch
  would create it on Tansu).
- Positions are found by fetching from offset 0 and reading the fetch high watermark, never with
  ``end_offsets`` (wrong on Tansu; see ``_watermarks.py``).
- A memory-only broker that restarts loses both topics; the log that comes back is a new log with a
  new id, which is the truth: the projections built from the old one no longer match it.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from kafka import TopicPartition
from kafka import errors as kafka_errors

from ledger.log.kafka._topics import TopicError, TopicPartitionMismatch, provision_topic
from ledger.log.kafka._watermarks import SNAPSHOT_WAIT_MS
from ledger.log.port import LogError, LogUnavailableError

if TYPE_CHECKING:
    from ledger.log.kafka._log import KafkaLog

__all__ = ["META_SUFFIX", "meta_topic", "read_log_id", "write_log_id"]

META_SUFFIX = ".meta"
_UNKNOWN_TOPIC_OR_PARTITION = 3


def meta_topic(topic: str) -> str:
    return topic + META_SUFFIX


def _exists(log: KafkaLog, name: str) -> bool:
    """Whether the topic is there. Only the broker's "unknown topic" is a no: another error (a leader
    being elected while a broker restarts) is asked again, then ``LogUnavailableError``, so a broker
    that hesitates is never taken for a log without an id (which a runner reads as another log)."""
    topics = log._topics  # noqa: SLF001 -- this module is the adapter's own
    assert topics is not None, "the log is closed"
    deadline = time.monotonic() + log._timeout  # noqa: SLF001
    while True:
        with topics.admin_lock:
            try:
                (desc,) = topics.admin.describe_topics([name])
            except (kafka_errors.KafkaError, OSError) as exc:
                raise LogUnavailableError(f"cannot describe topic {name!r} on {log.bootstrap}: {exc}") from exc
        code = desc["error_code"]
        if code == _UNKNOWN_TOPIC_OR_PARTITION:
            return False
        if code == 0 and desc["partitions"]:
            return True
        if time.monotonic() > deadline:
            raise LogUnavailableError(f"cannot describe topic {name!r} on {log.bootstrap}: error code {code}")
        time.sleep(0.1)


def _records(log: KafkaLog, name: str) -> list[dict[str, Any]]:
    """Every record of partition 0 of ``name``, decoded, in offset order (the topic holds a few)."""
    tp = TopicPartition(name, 0)
    consumer = log._new_consumer(fetch_max_wait_ms=SNAPSHOT_WAIT_MS)  # noqa: SLF001
    out: list[dict[str, Any]] = []
    try:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        deadline = time.monotonic() + log._timeout  # noqa: SLF001
        while True:
            try:
                batch = consumer.poll(timeout_ms=20)
            except (kafka_errors.KafkaTimeoutError, kafka_errors.KafkaConnectionError) as exc:
                raise LogUnavailableError(f"cannot read topic {name!r} on {log.bootstrap}: {exc}") from exc
            for rec in batch.get(tp, []):
                try:
                    doc = json.loads(rec.value)
                except (TypeError, ValueError):
                    continue
                if isinstance(doc, dict):
                    out.append(doc)
            high = consumer.highwater(tp)
            if high is not None and consumer.position(tp, timeout_ms=0) >= high:
                return out
            if time.monotonic() > deadline:
                raise LogUnavailableError(
                    f"the Kafka broker at {log.bootstrap} did not answer a fetch of topic {name!r} within "
                    f"{log._timeout:g} s"  # noqa: SLF001
                )
    finally:
        consumer.close()


def read_log_id(log: KafkaLog) -> str | None:
    """The id recorded for ``log.topic``, or None (no metadata topic, or no record for this topic)."""
    name = meta_topic(log.topic)
    if not _exists(log, name):
        return None
    for doc in _records(log, name):
        if doc.get("topic") == log.topic and isinstance(doc.get("log_id"), str) and doc["log_id"]:
            return str(doc["log_id"])
    return None


def write_log_id(log: KafkaLog) -> str:
    """Record an id for ``log.topic`` unless one is there; return the one that counts (the first)."""
    if log.read_only:
        raise LogError(f"topic {log.topic!r} on {log.bootstrap} has no log id, and this reader may not write one")
    name = meta_topic(log.topic)
    try:
        provision_topic(log.bootstrap, name, 1, log.replication, client_options=log.client_options)
    except TopicPartitionMismatch:
        pass  # auto-created by some client with the broker's default count: partition 0 serves
    except (TopicError, kafka_errors.KafkaError, OSError) as exc:
        raise LogUnavailableError(f"cannot create topic {name!r} on {log.bootstrap}: {exc}") from exc
    found = read_log_id(log)
    if found is not None:
        return found
    doc = {
        "log_id": str(uuid.uuid4()),
        "topic": log.topic,
        "partitions": log.partitions,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    assert log._producer is not None  # noqa: SLF001
    producer = log._producer.current  # noqa: SLF001
    assert producer is not None
    try:
        producer.send(name, key=log.topic.encode(), value=json.dumps(doc, sort_keys=True).encode(), partition=0,
                      headers=[("content-type", b"application/json")]).get(timeout=log._timeout)  # noqa: SLF001
    except (kafka_errors.KafkaError, OSError) as exc:
        raise LogUnavailableError(f"cannot write the log id to topic {name!r} on {log.bootstrap}: {exc}") from exc
    found = read_log_id(log)
    if found is None:
        raise LogError(f"the log id written to topic {name!r} on {log.bootstrap} could not be read back")
    return found
