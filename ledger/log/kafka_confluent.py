"""``ConfluentLog``: the EventLog port on one Kafka topic through confluent-kafka (librdkafka).

Why a second Kafka adapter: kafka-python decodes record batches in Python, which bounds how fast a
projection can replay the log; librdkafka fetches and decodes in C. It is optional
(``pip install caucus-ledger[confluent]``, ``kafka_library = "confluent"``); kafka-python stays the
default and the two are interchangeable on one topic:

- the partition is the record's own or chosen with ``partition_for`` (murmur2 of the unit id), never by the client, so a
  unit's events land where kafka-python and the embedded log put them;
- record keys, values and headers are written and read as the kafka-python adapter does;
- topics are created and checked with the same ``provision_topic``, and the log's id is read from (and
  written to) the same ``<topic>.meta`` topic by the kafka-python adapter's own code (``log_id``).

The development broker's quirks (DESIGN.md) are met the same way: high watermarks come from fetch
responses (``get_watermark_offsets(cached=True)``; ListOffsets answers wrongly on Tansu), topics are
created explicitly before any client names them, appends are deduped by event id (``RecentIds``).
What it does not do: re-create a topic or replace the idempotent producer after a broker restart
(``_topic_guard.py``, ``_producer.py`` of the kafka-python adapter): after the memory-only test broker
restarts, this instance's reads and appends fail with LogUnavailableError, and a newly opened one
reports the lost log (LogLostError) and appends again. Nor consumer groups: the projection runner's
group source stays on kafka-python (``projections/backends.py``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from ledger.log.kafka._recent_ids import RecentIds
from ledger.log.kafka._topics import TopicError, TopicPartitionMismatch, provision_topic, topic_partitions
from ledger.log.partitioning import record_partition
from ledger.log.port import (
    LogError,
    LogLostError,
    LogMissingError,
    LogUnavailableError,
    Offsets,
    begin_offsets,
    PendingRecord,
    Position,
    StoredRecord,
)

__all__ = ["ConfluentLog", "librdkafka_options"]

log = logging.getLogger("ledger.log.kafka_confluent")

_SNAPSHOT_WAIT_MS = 10  # Tansu never answers a fetch whose max wait is 0 and ignores fetch.min.bytes
_CONSUME_BATCH = 2000
_UNREACHABLE = {KafkaError._MSG_TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN,  # noqa: SLF001
                KafkaError._TIMED_OUT, KafkaError._RESOLVE}  # noqa: SLF001
_OUT_OF_RANGE = {KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET}  # noqa: SLF001

# kafka-python property names (the ledger's settings) -> librdkafka's.
_RENAMED = {
    "security_protocol": "security.protocol",
    "sasl_mechanism": "sasl.mechanism",
    "sasl_plain_username": "sasl.username",
    "sasl_plain_password": "sasl.password",
    "ssl_cafile": "ssl.ca.location",
    "ssl_certfile": "ssl.certificate.location",
    "ssl_keyfile": "ssl.key.location",
    "ssl_password": "ssl.key.password",
    "client_id": "client.id",
}


def librdkafka_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The settings' client properties (kafka-python names, already checked) in librdkafka's names.
    A property without a librdkafka counterpart is refused by name rather than silently dropped."""
    out: dict[str, Any] = {}
    for name, value in options.items():
        if name not in _RENAMED:
            raise LogError(f"client property {name!r} has no confluent-kafka counterpart the ledger knows; "
                           f"use kafka_library = \"kafka-python\" or leave it out")
        out[_RENAMED[name]] = value
    return out


def _headers(raw: Any) -> tuple[tuple[str, bytes], ...]:
    pairs = raw.items() if isinstance(raw, dict) else raw  # a consumer hands out a list of pairs
    return tuple((k, v if isinstance(v, bytes) else (v or "").encode()) for k, v in pairs)


def _stored(msg: Message) -> StoredRecord:
    """A fetched record (never an error event) as the port's. It runs once per record read, and was most
    of a read's time, so it does no more than it must: no headers to convert is the common case."""
    key, raw = msg.key(), msg.headers()
    return StoredRecord(
        Position(msg.partition(), msg.offset()),  # type: ignore[arg-type]  # set on every record fetched
        key.decode("utf-8") if isinstance(key, bytes) else (key or ""),
        msg.value() or b"",  # type: ignore[arg-type]  # bytes: no deserializer is configured
        msg.timestamp()[1],
        () if raw is None else _headers(raw),
    )


class ConfluentLog:
    """An EventLog on one Kafka topic (the module docstring says why and what differs from ``KafkaLog``).

    ``timeout`` (seconds) bounds every wait: a produce acknowledgement, a watermark snapshot, a read
    that stops making progress."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        partitions: int = 8,
        timeout: float = 10.0,
        linger_ms: int = 5,
        recent_ids: int = 100_000,
        client_options: Mapping[str, Any] | None = None,
        read_only: bool = False,
        replication: int = 1,
        topic_configs: Mapping[str, str] | None = None,
    ) -> None:
        if partitions < 1:
            raise LogError(f"partitions must be at least 1, got {partitions}")
        self.bootstrap, self.topic, self.read_only = bootstrap, topic, read_only
        self.replication = replication
        self.topic_configs = dict(topic_configs or {})
        self.client_options = dict(client_options or {})
        self._common = {**librdkafka_options(self.client_options), "bootstrap.servers": bootstrap,
                        "logger": log, "log.connection.close": False}
        self._partitions, self._timeout, self._linger_ms = partitions, timeout, linger_ms
        self._recent = RecentIds(recent_ids)
        self._append_lock = threading.Lock()
        self._log_id: str | None = None
        self._provision()
        self._producer: Producer | None = None if read_only else Producer({
            **self._common, "enable.idempotence": True, "acks": "all", "linger.ms": linger_ms,
            "message.timeout.ms": int(timeout * 1000), "allow.auto.create.topics": False,
        })

    def _provision(self) -> None:
        """Topics are created (or, for a reader, found) with the shared kafka-python admin code, bounded
        by ``timeout`` so an unreachable broker fails fast."""
        ms = int(self._timeout * 1000)
        admin_options = {**self.client_options, "bootstrap_timeout_ms": ms, "request_timeout_ms": ms}
        try:
            if self.read_only:
                found = topic_partitions(self.bootstrap, self.topic, client_options=admin_options)
                if found != self._partitions:
                    raise LogError(f"topic {self.topic!r} on {self.bootstrap} has {found} partitions, "
                                   f"not {self._partitions}")
            else:
                provision_topic(self.bootstrap, self.topic, self._partitions, self.replication,
                                client_options=admin_options, configs=self.topic_configs)
        except TopicPartitionMismatch as exc:
            raise LogError(str(exc)) from exc
        except TopicError as exc:
            raise LogMissingError(f"no topic {self.topic!r} on {self.bootstrap}: {exc}") from exc
        except Exception as exc:  # kafka-python's admin: NoBrokersAvailable and the like
            if isinstance(exc, LogError):
                raise
            raise self._unavailable("connect", exc) from exc

    def _unavailable(self, what: str, exc: object) -> LogUnavailableError:
        return LogUnavailableError(f"the Kafka broker at {self.bootstrap} is unavailable ({what}, topic "
                                   f"{self.topic!r}, timeout {self._timeout:g} s): {exc}")

    @property
    def partitions(self) -> int:
        return self._partitions

    # ----------------------------------------------------------------------------- reading
    def _consumer(self, wait_ms: int) -> Consumer:
        return Consumer({
            **self._common, "group.id": "caucus-ledger-reader", "enable.auto.commit": False,
            "enable.auto.offset.store": False, "auto.offset.reset": "error", "fetch.wait.max.ms": wait_ms,
            "allow.auto.create.topics": False, "enable.partition.eof": False,
        })

    def _begin(self, start: Offsets | None) -> dict[int, int]:
        return begin_offsets(start, self._partitions)

    def _consume(self, consumer: Consumer, wait_s: float) -> list[StoredRecord]:
        """A batch of records; a fetch beyond the log end (a real Kafka's answer to a lost log) is
        LogLostError, an unreachable broker LogUnavailableError."""
        out = []
        for msg in consumer.consume(_CONSUME_BATCH, wait_s):
            err = msg.error()
            if err is None:
                out.append(_stored(msg))
            elif err.code() in _OUT_OF_RANGE:
                part = msg.partition() or 0
                tp = TopicPartition(self.topic, part)
                _low, high = consumer.get_watermark_offsets(tp, cached=True)
                raise LogLostError(part, consumer.position([tp])[0].offset, max(high, 0))
            elif err.code() in _UNREACHABLE:
                raise self._unavailable("fetch", err)
            else:
                raise LogError(f"reading topic {self.topic!r} on {self.bootstrap}: {err}")
        return out

    def _marks(self, consumer: Consumer) -> dict[int, int]:
        """The high watermarks the fetches have reported so far (partitions not fetched yet are absent)."""
        marks = {}
        for part in range(self._partitions):
            _low, high = consumer.get_watermark_offsets(TopicPartition(self.topic, part), cached=True)
            if high >= 0:
                marks[part] = high
        return marks

    def _open(self, begin: dict[int, int], wait_ms: int) -> tuple[Consumer, dict[int, int], list[StoredRecord]]:
        """A consumer assigned at ``begin``, every partition's watermark (from fetches) and the records
        fetched meanwhile; LogLostError if a start lies beyond its partition's watermark."""
        consumer = self._consumer(wait_ms)
        try:
            consumer.assign([TopicPartition(self.topic, p, o) for p, o in begin.items()])
            kept: list[StoredRecord] = []
            deadline = time.monotonic() + self._timeout
            while True:
                kept += self._consume(consumer, 0.005)
                marks = self._marks(consumer)
                if len(marks) == self._partitions:
                    break
                if time.monotonic() > deadline:
                    raise LogUnavailableError(
                        f"the Kafka broker at {self.bootstrap} did not answer fetches for topic {self.topic!r} "
                        f"partitions {sorted(set(begin) - set(marks))} within {self._timeout:g} s")
            for part in range(self._partitions):
                if begin[part] > marks[part]:
                    raise LogLostError(part, begin[part], marks[part])
        except BaseException:
            consumer.close()
            raise
        return consumer, marks, kept

    def high_watermarks(self) -> dict[int, int]:
        consumer, marks, _ = self._open({p: 0 for p in range(self._partitions)}, _SNAPSHOT_WAIT_MS)
        consumer.close()
        self._recent.forget_beyond(marks)
        return marks

    def read(self, start: Offsets | None = None, *, max_records: int | None = None) -> Iterator[StoredRecord]:
        begin = self._begin(start)
        consumer, marks, pending = self._open(begin, _SNAPSHOT_WAIT_MS)
        try:
            position = dict(begin)
            todo = {p for p in range(self._partitions) if position[p] < marks[p]}
            emitted = 0
            progress_at = time.monotonic()
            while todo:
                for rec in pending:
                    part, offset = rec.position.partition, rec.position.offset
                    if part not in todo or offset < position[part]:
                        continue
                    if offset >= marks[part]:  # appended after the call began
                        todo.discard(part)
                        continue
                    yield rec
                    position[part] = offset + 1
                    emitted += 1
                    if max_records is not None and emitted >= max_records:
                        return
                    if position[part] >= marks[part]:
                        todo.discard(part)
                if not todo:
                    return
                pending = self._consume(consumer, 0.2)
                if pending:
                    progress_at = time.monotonic()
                    continue
                self._check_lost(consumer, position)
                for tp in consumer.position([TopicPartition(self.topic, p) for p in todo]):
                    if tp.offset >= marks[tp.partition]:  # control records leave gaps in offsets
                        todo.discard(tp.partition)
                if todo and time.monotonic() - progress_at > self._timeout:
                    raise LogUnavailableError(
                        f"reading topic {self.topic!r} from {self.bootstrap} made no progress for "
                        f"{self._timeout:g} s (partitions {sorted(todo)} not read up to {marks})")
        finally:
            consumer.close()

    def _check_lost(self, consumer: Consumer, position: Mapping[int, int]) -> None:
        for part, high in self._marks(consumer).items():
            if high < position[part]:
                self._recent.forget_beyond({part: high})
                raise LogLostError(part, position[part], high)

    def follow(
        self,
        start: Offsets | None = None,
        *,
        stop: Callable[[], bool] | None = None,
        poll_interval: float = 0.2,
    ) -> Iterator[StoredRecord]:
        """Like ``read`` but keeps fetching (a long poll of ``poll_interval``) until ``stop()`` says so,
        asked after every record and every poll; a watermark below the position is LogLostError."""
        begin = self._begin(start)
        wait_ms = max(_SNAPSHOT_WAIT_MS, int(poll_interval * 1000))
        consumer, _marks, pending = self._open(begin, wait_ms)
        try:
            position = dict(begin)
            while True:
                for rec in pending:
                    part, offset = rec.position.partition, rec.position.offset
                    if offset < position[part]:
                        continue
                    yield rec
                    position[part] = offset + 1
                    if stop is not None and stop():
                        return
                if stop is not None and stop():
                    return
                pending = self._consume(consumer, poll_interval)
                if not pending:
                    self._check_lost(consumer, position)
        finally:
            consumer.close()

    # ----------------------------------------------------------------------------- appending
    def append(self, record: PendingRecord) -> Position:
        return self.append_batch([record])[0]

    def append_batch(self, records: Sequence[PendingRecord]) -> list[Position]:
        """Produce every record not appended recently (by event id), flush once, return positions in
        input order; a remembered position counts only while a snapshot shows the log still holds it."""
        if not records:
            return []
        if self._producer is None:
            raise LogError(f"topic {self.topic!r} on {self.bootstrap} was opened read-only; nothing was appended")
        with self._append_lock:
            positions: list[Position | None] = [None] * len(records)
            known = self._recent.known({r.event_id for r in records})
            if known:
                marks = self.high_watermarks()
                known = {e: p for e, p in known.items() if p.offset < marks[p.partition]}
            first: dict[str, int] = {}
            for i, rec in enumerate(records):
                if rec.event_id in known:
                    positions[i] = known[rec.event_id]
                elif rec.event_id not in first:
                    first[rec.event_id] = i
            self._produce(records, list(first.values()), positions)
            for i, rec in enumerate(records):
                if positions[i] is None:
                    positions[i] = positions[first[rec.event_id]]
            for eid, i in first.items():
                self._recent.remember(eid, positions[i])  # type: ignore[arg-type]
            return positions  # type: ignore[return-value]

    def _produce(self, records: Sequence[PendingRecord], indices: list[int], positions: list[Position | None]) -> None:
        assert self._producer is not None
        failed: list[tuple[int, KafkaError]] = []

        def delivered(i: int) -> Callable[[KafkaError | None, Message], None]:
            def report(err: KafkaError | None, msg: Message) -> None:
                part, offset = msg.partition(), msg.offset()
                if err is None and part is not None and offset is not None:
                    positions[i] = Position(part, offset)
                else:
                    failed.append((i, err or KafkaError(KafkaError._FAIL)))  # noqa: SLF001
            return report

        for i in indices:
            rec = records[i]
            self._producer.produce(self.topic, value=rec.value, key=rec.key.encode("utf-8"),
                                   partition=record_partition(rec, self._partitions),
                                   headers=list(rec.headers) or None, on_delivery=delivered(i))
            self._producer.poll(0)
        left = self._producer.flush(self._timeout + self._linger_ms / 1000)
        if left:
            raise self._unavailable(f"{left} records not acknowledged; appending them again with the same "
                                    f"event ids is safe", "flush timed out")
        if failed:
            index, err = min(failed, key=lambda f: f[0])
            if err.code() in _UNREACHABLE:
                raise self._unavailable(f"{len(failed)} records not acknowledged, e.g. record {index}", err)
            raise LogError(f"the Kafka broker at {self.bootstrap} refused {len(failed)} records for topic "
                           f"{self.topic!r} (first: record {index}): {err}")

    # ----------------------------------------------------------------------------- identity, lifecycle
    def _kafka_python(self) -> Any:
        """The kafka-python adapter on the same topic: the log id's rules live there, once."""
        from ledger.log.kafka import KafkaLog

        return KafkaLog(self.bootstrap, self.topic, partitions=self._partitions, timeout=self._timeout,
                        client_options=self.client_options, read_only=self.read_only,
                        replication=self.replication)

    @property
    def log_id(self) -> str | None:
        if self._log_id is None:
            with self._kafka_python() as other:
                self._log_id = other.log_id
        return self._log_id

    def ensure_log_id(self) -> str:
        """The log's id, written now (in ``<topic>.meta``) if the topic never had one."""
        if self.log_id is None:
            with self._kafka_python() as other:
                self._log_id = other.ensure_log_id()
        assert self._log_id is not None
        return self._log_id

    def close(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            producer.flush(self._timeout)

    def __enter__(self) -> ConfluentLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ConfluentLog({self.bootstrap!r}, {self.topic!r}, partitions={self._partitions})"
