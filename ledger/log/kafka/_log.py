"""``KafkaLog``: the EventLog port on one Kafka topic, keyed by reporting unit (kafka-python).

Kafka's own rules live here; each workaround for the development broker (Tansu) has a module of its own
that says how to remove it on a real Kafka (the package docstring lists them).

- The partition is chosen here with ``partition_for``, not by the client, so a unit's events sit in the
  same partition number as in the embedded log and positions mean the same in both.
- A start offset above the high watermark means the log was lost or rewound: LogLostError at once, never
  a wait. Tansu answers such a fetch without error and with the lower high watermark; a real Kafka
  answers OFFSET_OUT_OF_RANGE; both become LogLostError.
- Every wait is bounded by ``timeout``: an unreachable broker is a LogUnavailableError naming the
  bootstrap address, so a command line never hangs.

Readers use manual assignment and keep their own positions (the port's contract). ``read`` borrows one
consumer kept for the log's lifetime (``_reader``: a read costs a fetch, not a new client); ``follow``
and a read that finds it busy make their own. For a projection runner in a consumer group, ``consumer(group_id=...)`` and
``SeekToStored`` give a consumer configured the same way, positioned from the runner's store on every
rebalance.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka import errors as kafka_errors
from kafka.consumer.fetcher import ConsumerRecord

from ledger.log.kafka._client import UNREACHABLE_ERRORS, Endpoint, normalise_options, options_for
from ledger.log.kafka._producer import ReplaceableProducer
from ledger.log.kafka._reader import KEPT_WAIT_MS, KeptReader, fresh
from ledger.log.kafka._recent_ids import RecentIds
from ledger.log.kafka._topic_guard import TopicGuard
from ledger.log.kafka._watermarks import SNAPSHOT_WAIT_MS, Watermarks, snapshot
from ledger.log.port import (
    LogError,
    LogLostError,
    LogUnavailableError,
    Offsets,
    begin_offsets,
    PendingRecord,
    Position,
    StoredRecord,
)

__all__ = ["KafkaLog", "DEFAULT_PARTITIONS"]

DEFAULT_PARTITIONS = 8
_READ_POLL_MS = 200


class KafkaLog:
    """An EventLog on one Kafka topic (see the module docstring for the why).

    ``timeout`` (seconds) bounds every wait: connecting, a produce acknowledgement, a fetch snapshot,
    and a read that stops making progress. ``recent_ids`` is how many appended event ids are remembered
    for dedupe; older duplicates are written again and dropped by the projections, which dedupe by id.
    ``session_timeout_ms`` applies to consumers made with ``consumer(group_id=...)``. ``topic_configs``
    are given to the topic when this log creates it (``cleanup.policy=compact`` for a latest-state copy).
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        partitions: int = DEFAULT_PARTITIONS,
        timeout: float = 10.0,
        linger_ms: int = 5,
        recent_ids: int = 100_000,
        session_timeout_ms: int = 10_000,
        client_id: str = "caucus-ledger",
        api_version: tuple[int, ...] | None = None,
        client_options: Mapping[str, Any] | None = None,
        read_only: bool = False,
        replication: int = 1,
        topic_configs: Mapping[str, str] | None = None,
    ) -> None:
        if partitions < 1:
            raise LogError(f"partitions must be at least 1, got {partitions}")
        if timeout <= 0:
            raise LogError(f"timeout must be positive, got {timeout}")
        self.bootstrap = bootstrap
        self.topic = topic
        self.read_only = read_only
        self.replication = replication
        try:
            self.client_options: dict[str, Any] = normalise_options(client_options or {})
        except ValueError as exc:
            raise LogError(f"Kafka client settings: {exc}") from exc
        if "client_id" in self.client_options:
            client_id = str(self.client_options.pop("client_id"))
        self._endpoint = Endpoint(bootstrap, topic, timeout)
        self._log_id: str | None = None
        self._partitions = partitions
        self._timeout = timeout
        self._linger_ms = linger_ms
        self._session_timeout_ms = session_timeout_ms
        self._client_id = client_id
        # None: negotiated once, by the first producer (one ApiVersions request, bounded by ``timeout``);
        # every later client reuses the answer and skips its own eager bootstrap.
        self._api_version = api_version
        self._tps = [TopicPartition(topic, p) for p in range(partitions)]
        self._append_lock = threading.Lock()  # one append at a time: dedupe and retries stay simple
        self._recent = RecentIds(recent_ids)
        self._watermarks = Watermarks()
        self._producer: ReplaceableProducer | None = None
        self._topics: TopicGuard | None = None
        self._reader = KeptReader(lambda: self._new_consumer(fetch_max_wait_ms=KEPT_WAIT_MS))
        try:
            if not read_only:
                self._producer = ReplaceableProducer(
                    self._endpoint, partitions, self._watermarks, make=self._new_producer,
                    ensure_topic=self._ensure_topic, refresh_marks=self.high_watermarks,
                )
                assert self._producer.current is not None
                self._api_version = self._producer.current.config["api_version"]
            admin = self._endpoint.call("connect", self._new_admin)
            if self._api_version is None:
                self._api_version = admin.config["api_version"]
            self._topics = TopicGuard(
                self._endpoint, admin, partitions=partitions, replication=replication,
                client_options=self.client_options, read_only=read_only,
                probe_marks=self._probe_marks, drop_producer=self._drop_producer, topic_configs=topic_configs,
            )
            self._ensure_topic()
        except BaseException:
            self.close()
            raise

    # ----------------------------------------------------------------------------- basics
    @property
    def partitions(self) -> int:
        return self._partitions

    @property
    def _ms(self) -> int:
        return self._endpoint.ms

    def _new_admin(self) -> KafkaAdminClient:
        return KafkaAdminClient(**{
            **options_for(KafkaAdminClient, self.client_options),
            "bootstrap_servers": self.bootstrap,
            "client_id": self._client_id,
            "api_version": self._api_version,
            "request_timeout_ms": self._ms,
            "bootstrap_timeout_ms": self._ms,
        })

    def _new_producer(self) -> KafkaProducer:
        return self._endpoint.call(
            "connect",
            lambda: KafkaProducer(**{
                "max_in_flight_requests_per_connection": 5,
                "linger_ms": self._linger_ms,
                "batch_size": 256 * 1024,
                "request_timeout_ms": self._ms,
                "delivery_timeout_ms": self._ms + self._linger_ms,
                "max_block_ms": self._ms,
                "bootstrap_timeout_ms": self._ms,
                "metrics_enabled": False,  # nothing reads them; the sensors cost ~5 % of an intake's CPU
                **options_for(KafkaProducer, self.client_options),
                "bootstrap_servers": self.bootstrap,
                "client_id": self._client_id,
                "acks": "all",
                "enable_idempotence": True,
                "allow_auto_create_topics": False,
                "api_version": self._api_version,
            }),
        )

    def _ensure_topic(self) -> None:
        assert self._topics is not None, "the log is closed"
        self._topics.ensure()

    def _drop_producer(self) -> None:
        self._reader.drop()  # it names the topic in metadata requests too
        if self._producer is not None:
            self._producer.drop()

    def _probe_marks(self, count: int) -> dict[int, int]:
        probe = self._new_consumer(fetch_max_wait_ms=SNAPSHOT_WAIT_MS)
        try:
            marks, _ = snapshot(self._endpoint, probe, {p: 0 for p in range(count)}, keep=False)
        finally:
            probe.close()
        return marks

    # ----------------------------------------------------------------------------- consumers
    def consumer(self, group_id: str | None = None, **overrides: Any) -> KafkaConsumer:
        """A KafkaConsumer configured like the ones ``read`` and ``follow`` use, not yet assigned.

        Values are bytes, nothing is committed automatically, and ``auto_offset_reset='none'``: a
        position the broker does not hold is an error to report (``check_lost``), never a silent jump.
        With ``group_id`` it joins a consumer group (``session_timeout_ms`` from the constructor; Tansu
        takes about half of it to complete a join). Subscribe with ``listener=SeekToStored(...)`` so
        every assigned partition starts at the position stored with the view; committed offsets are
        not used (Tansu drops commit metadata). Turn records into StoredRecord with ``stored``.
        """
        self._ensure_topic()
        return self._new_consumer(group_id, **overrides)

    def _new_consumer(self, group_id: str | None = None, **overrides: Any) -> KafkaConsumer:
        wait_ms = int(overrides.get("fetch_max_wait_ms", 500))
        config: dict[str, Any] = {
            "metrics_enabled": False,  # as the producer's: unread, and recorded on every fetch
            **options_for(KafkaConsumer, self.client_options),
            "bootstrap_servers": self.bootstrap,
            "client_id": self._client_id,
            "group_id": group_id,
            "enable_auto_commit": False,
            "auto_offset_reset": "none",
            "allow_auto_create_topics": False,
            "api_version": self._api_version,
            "bootstrap_timeout_ms": self._ms,
            "request_timeout_ms": max(self._ms, wait_ms + 1000),
            "max_poll_records": 2000,
            "session_timeout_ms": self._session_timeout_ms,
            "heartbeat_interval_ms": max(100, self._session_timeout_ms // 3),
        }
        config.update(overrides)
        return self._endpoint.call("connect", lambda: KafkaConsumer(**config))

    @staticmethod
    def stored(record: ConsumerRecord) -> StoredRecord:
        """A fetched Kafka record as the port's StoredRecord."""
        key = record.key.decode("utf-8") if record.key is not None else ""
        headers = tuple((k, v if v is not None else b"") for k, v in record.headers) if record.headers else ()  # a null value: as confluent's
        return StoredRecord(Position(record.partition, record.offset), key, record.value, record.timestamp, headers)

    def check_lost(self, consumer: KafkaConsumer, positions: Offsets) -> None:
        """Raise LogLostError if a partition's fetched high watermark is below the position given for it.

        ``positions`` are next offsets to read (what a projection stored). Call after each poll; only
        partitions the consumer has fetched are checked."""
        assigned = consumer.assignment()
        for part, offset in positions.items():
            tp = TopicPartition(self.topic, part)
            if tp not in assigned:
                continue
            high = consumer.highwater(tp)
            if high is not None and high < offset:
                self._forget_beyond({part: high})
                raise LogLostError(part, offset, high)

    def _poll(self, consumer: KafkaConsumer, timeout_ms: int) -> dict[TopicPartition, list[ConsumerRecord]]:
        try:
            return consumer.poll(timeout_ms=timeout_ms)  # type: ignore[no-any-return]
        except kafka_errors.OffsetOutOfRangeError as exc:
            # A real Kafka refuses to fetch beyond the log end: the log was lost or rewound.
            (fetched,) = exc.args
            tp, offset = next(iter(fetched.items()))
            high = self.high_watermarks()[tp.partition]
            raise LogLostError(tp.partition, offset, high) from exc
        except UNREACHABLE_ERRORS as exc:
            raise self._endpoint.unavailable("fetch", exc) from exc

    # ----------------------------------------------------------------------------- watermarks
    def _learn(self, marks: dict[int, int], before: dict[int, int]) -> None:
        shrunk = self._watermarks.learn(marks, before)
        if shrunk:
            self._recent.forget_beyond(shrunk)

    def _forget_beyond(self, marks: dict[int, int]) -> None:
        self._recent.forget_beyond(marks)
        self._watermarks.lower_to(marks)

    def high_watermarks(self) -> dict[int, int]:
        """Fetch snapshot from offsets known to be reached, so little data comes back with it.

        The consumer is closed right after: a consumer kept open keeps naming the topic in metadata
        requests, and a restarted Tansu answers those by creating the topic with 4 partitions."""
        before = self._watermarks.reached()
        probe = self.consumer(fetch_max_wait_ms=SNAPSHOT_WAIT_MS)
        try:
            marks, _ = snapshot(self._endpoint, probe, {p: before.get(p, 0) for p in range(self._partitions)},
                                keep=False)
        finally:
            probe.close()
        self._learn(marks, before)
        return {p: marks[p] for p in range(self._partitions)}

    # ----------------------------------------------------------------------------- reads
    def _begin(self, start: Offsets | None) -> dict[int, int]:
        return begin_offsets(start, self._partitions)

    def _open_reader(
        self, begin: dict[int, int], wait_ms: int, kept: KafkaConsumer | None = None
    ) -> tuple[KafkaConsumer, dict[int, int], list[ConsumerRecord]]:
        if kept is None:
            consumer = self.consumer(fetch_max_wait_ms=wait_ms)
        else:
            self._ensure_topic()
            consumer = kept
            fresh(self._endpoint, consumer, self._tps)
        try:
            before = self._watermarks.reached()
            marks, first = snapshot(self._endpoint, consumer, begin, keep=True)
            self._learn(marks, before)
            for part in range(self._partitions):
                if begin[part] > marks[part]:
                    raise LogLostError(part, begin[part], marks[part])
        except BaseException:
            if kept is None:
                consumer.close()
            raise
        return consumer, marks, first

    def read(self, start: Offsets | None = None, *, max_records: int | None = None) -> Iterator[StoredRecord]:
        begin = self._begin(start)
        with self._reader.borrowed() as kept:
            yield from self._read(begin, kept, max_records)

    def _read(self, begin: dict[int, int], kept: KafkaConsumer | None, max_records: int | None) -> Iterator[StoredRecord]:
        consumer, marks, pending = self._open_reader(begin, SNAPSHOT_WAIT_MS, kept)
        try:
            position = dict(begin)
            todo = {p for p in range(self._partitions) if position[p] < marks[p]}
            emitted = 0
            progress_at = time.monotonic()
            while todo:
                for rec in pending:
                    part = rec.partition
                    if part not in todo or rec.offset < position[part]:
                        continue
                    if rec.offset >= marks[part]:  # appended after the call began
                        todo.discard(part)
                        continue
                    yield self.stored(rec)
                    position[part] = rec.offset + 1
                    emitted += 1
                    if max_records is not None and emitted >= max_records:
                        return
                    if position[part] >= marks[part]:
                        todo.discard(part)
                if not todo:
                    return
                batch = self._poll(consumer, _READ_POLL_MS)
                pending = [rec for records in batch.values() for rec in records]
                if pending:
                    progress_at = time.monotonic()
                    continue
                self.check_lost(consumer, position)
                for part in list(todo):  # control records (transactions) leave gaps in offsets
                    if consumer.position(self._tps[part], timeout_ms=0) >= marks[part]:
                        todo.discard(part)
                if todo and time.monotonic() - progress_at > self._timeout:
                    raise LogUnavailableError(
                        f"reading topic {self.topic!r} from {self.bootstrap} made no progress for "
                        f"{self._timeout:g} s (partitions {sorted(todo)} not read up to {marks})"
                    )
        finally:
            if kept is None:
                consumer.close()

    def follow(
        self,
        start: Offsets | None = None,
        *,
        stop: Callable[[], bool] | None = None,
        poll_interval: float = 0.2,
    ) -> Iterator[StoredRecord]:
        """Like ``read`` but keeps polling (a long poll of ``poll_interval``). ``stop()`` is asked after
        every record and every poll. When nothing arrives for ``timeout`` seconds the topic is checked,
        so a vanished broker ends the loop with LogUnavailableError and a lost log with LogLostError."""
        begin = self._begin(start)
        wait_ms = max(SNAPSHOT_WAIT_MS, int(poll_interval * 1000))
        consumer, _marks, pending = self._open_reader(begin, wait_ms)
        try:
            position = dict(begin)
            quiet_since = time.monotonic()
            while True:
                for rec in pending:
                    if rec.offset < position[rec.partition]:
                        continue
                    yield self.stored(rec)
                    position[rec.partition] = rec.offset + 1
                    if stop is not None and stop():
                        return
                if stop is not None and stop():
                    return
                batch = self._poll(consumer, wait_ms)
                pending = [rec for records in batch.values() for rec in records]
                if pending:
                    quiet_since = time.monotonic()
                    continue
                self.check_lost(consumer, position)
                if time.monotonic() - quiet_since > self._timeout:
                    self._ensure_topic()
                    quiet_since = time.monotonic()
        finally:
            consumer.close()


    # ----------------------------------------------------------------------------- appends
    def append(self, record: PendingRecord) -> Position:
        return self.append_batch([record])[0]

    def append_batch(self, records: Sequence[PendingRecord]) -> list[Position]:
        """Send every record, flush once, return positions in input order.

        An event id this instance appended recently (or earlier in the same batch) is not sent again:
        its original position is returned, once a fetch snapshot has shown that the log still holds
        that position (a retry after a broker lost the log must write the event again). If the broker
        lost the producer's state, a new producer sends the failed records once more
        (``ReplaceableProducer``)."""
        if not records:
            return []
        if self.read_only or self._producer is None:
            raise LogError(f"topic {self.topic!r} on {self.bootstrap} was opened read-only; nothing was appended")
        with self._append_lock:
            positions: list[Position | None] = [None] * len(records)
            first: dict[str, int] = {}
            to_send: list[int] = []
            known_ids = self._still_held({r.event_id for r in records})
            for i, rec in enumerate(records):
                known = known_ids.get(rec.event_id)
                if known is not None:
                    positions[i] = known
                elif rec.event_id not in first:
                    first[rec.event_id] = i
                    to_send.append(i)
            self._producer.append(records, to_send, positions)
            for i, rec in enumerate(records):
                if positions[i] is None:
                    positions[i] = positions[first[rec.event_id]]
            for i in to_send:
                self._recent.remember(records[i].event_id, positions[i])  # type: ignore[arg-type]
            return positions  # type: ignore[return-value]

    def _still_held(self, event_ids: set[str]) -> dict[str, Position]:
        """Remembered positions of these ids that the log still holds (a retry is rare: the snapshot
        it costs is only taken when one of the ids is remembered)."""
        known = self._recent.known(event_ids)
        if not known:
            return known
        marks = self.high_watermarks()  # also forgets positions beyond a shrunken watermark
        return {eid: pos for eid, pos in known.items() if pos.offset < marks[pos.partition]}

    # ----------------------------------------------------------------------------- lifecycle
    def close(self) -> None:
        producer, topics = self._producer, self._topics
        self._producer = self._topics = None
        self._reader.drop()
        if producer is not None:
            producer.close()
        if topics is not None:
            topics.close()

    def __enter__(self) -> KafkaLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"KafkaLog({self.bootstrap!r}, {self.topic!r}, partitions={self._partitions})"

    # ----------------------------------------------------------------------------- identity
    @property
    def log_id(self) -> str | None:
        """The id in the topic's metadata topic (``_identity.py``); None if never written."""
        if self._log_id is None:
            from ledger.log.kafka._identity import read_log_id

            self._log_id = read_log_id(self)
        return self._log_id

    def log_id_now(self) -> str | None:
        """The id the broker holds now, read again (``log_id`` keeps its first answer): a runner asks
        after each group join whether the topic it reads is still the log its projection was built
        from, as a broker that lost both topics, and a client that made the event topic again, leave
        a topic of the same name that is another log (``projections.log_continuity.SameLog``)."""
        from ledger.log.kafka._identity import read_log_id

        return read_log_id(self)

    def ensure_log_id(self) -> str:
        """The log's id, written now if the topic never had one (a topic from before ids)."""
        if self.log_id is None:
            from ledger.log.kafka._identity import write_log_id

            self._log_id = write_log_id(self)
        assert self._log_id is not None
        return self._log_id
