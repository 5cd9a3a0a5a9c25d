"""The Kafka adapter: the log as one topic, keyed by reporting unit (kafka-python).

Why it is built the way it is; most of it follows from Tansu, the broker used in development (DESIGN.md):

- The topic is provisioned explicitly (``ledger.log.kafka_topics``: 8 partitions by default, infinite retention
  asked for) and checked before a consumer or a new producer touches it. Tansu creates a missing topic
  with 4 partitions as soon as a client names it (produce, fetch, metadata for that topic), even when
  the client says not to, and a restarted Tansu has forgotten every topic. So consumers live only as
  long as a read, and a topic this instance knew that comes back with fewer partitions and no records
  is deleted and provisioned again (Kafka never removes partitions, so it can only be a re-creation).
- The partition is chosen here with ``partition_for``, not by the client, so a unit's events sit in the
  same partition number as in the embedded log and positions mean the same in both.
- High watermarks come from fetch responses (``consumer.highwater``), never from ListOffsets:
  ``end_offsets``, ``seek_to_end`` and ``offsets_for_times`` answer wrongly on Tansu. A snapshot assigns
  every partition, seeks each to an offset it is known to have reached (0 when nothing is known), and
  polls until every partition has answered once; an empty partition answers too, with 0.
- A start offset above the high watermark means the log was lost or rewound (Tansu keeps data in memory
  only): LogLostError at once, never a wait. Tansu answers such a fetch without error and with the lower
  high watermark; a real Kafka answers OFFSET_OUT_OF_RANGE; both become LogLostError.
- The producer is idempotent with acks=all. After a broker restart it fails with UnknownProducerIdError
  and cannot recover by itself (Tansu refuses the KIP-360 epoch bump with an unknown error), so it is
  replaced and the records that failed are sent once more.
- Dedupe on event id uses a bounded map of ids this instance appended; a hit is trusted only after a
  fetch snapshot shows the log still holds that position. Projections dedupe by id as well.
- Every wait is bounded by ``timeout``: an unreachable broker is a LogUnavailableError naming the
  bootstrap address, so a command line never hangs.

Readers use manual assignment and keep their own positions (the port's contract). For a projection
runner in a consumer group, ``consumer(group_id=...)`` and ``SeekToStored`` give a consumer configured
the same way, positioned from the runner's store on every rebalance.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka import errors as kafka_errors
from kafka.consumer.fetcher import ConsumerRecord
from kafka.consumer.subscription_state import ConsumerRebalanceListener

from ledger.log.kafka_topics import TopicError, TopicPartitionMismatch, provision_topic
from ledger.log.kafka_client import normalise_options, options_for
from ledger.log.partitioning import partition_for
from ledger.log.port import (
    LogError,
    LogLostError,
    LogMissingError,
    LogUnavailableError,
    Offsets,
    PendingRecord,
    Position,
    StoredRecord,
)

__all__ = ["KafkaLog", "SeekToStored", "DEFAULT_PARTITIONS"]

DEFAULT_PARTITIONS = 8
_SNAPSHOT_WAIT_MS = 10
"""fetch_max_wait_ms while taking a snapshot. Tansu ignores fetch_min_bytes=0 (it waits the full
fetch_max_wait_ms when no data is new) and never answers a fetch whose max wait is 0."""
_SNAPSHOT_POLL_MS = 5
_READ_POLL_MS = 200
_UNKNOWN_TOPIC_OR_PARTITION = 3
_LEADER_NOT_AVAILABLE = 5

# Errors after which the idempotent producer's state on the broker is gone (broker restarted, producer
# id expired): a new producer can send the failed records again without reordering or duplicating them.
_PRODUCER_STATE_ERRORS = (
    kafka_errors.UnknownProducerIdError,
    kafka_errors.OutOfOrderSequenceNumberError,
    kafka_errors.InvalidProducerEpochError,
)
_UNREACHABLE_ERRORS = (kafka_errors.KafkaTimeoutError, kafka_errors.KafkaConnectionError)

log = logging.getLogger(__name__)


class _StaleTopicMetadata(Exception):
    """The producer's cached metadata lacks a partition: the topic was re-created since it looked."""


def _lost_producer_state(exc: BaseException) -> bool:
    # A bare KafkaError is what kafka-python raises when its own recovery (InitProducerId with the old
    # producer id) is refused; Tansu does that after a restart.
    return isinstance(exc, (*_PRODUCER_STATE_ERRORS, _StaleTopicMetadata)) or type(exc) is kafka_errors.KafkaError


class KafkaLog:
    """An EventLog on one Kafka topic (see the module docstring for the why).

    ``timeout`` (seconds) bounds every wait: connecting, a produce acknowledgement, a fetch snapshot,
    and a read that stops making progress. ``recent_ids`` is how many appended event ids are remembered
    for dedupe; older duplicates are written again and dropped by the projections, which dedupe by id.
    ``session_timeout_ms`` applies to consumers made with ``consumer(group_id=...)``.
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
        self._log_id: str | None = None
        self._partitions = partitions
        self._timeout = timeout
        self._linger_ms = linger_ms
        self._recent_limit = recent_ids
        self._session_timeout_ms = session_timeout_ms
        self._client_id = client_id
        # None: negotiated once, by the first producer (one ApiVersions request, bounded by ``timeout``);
        # every later client reuses the answer and skips its own eager bootstrap.
        self._api_version = api_version
        self._tps = [TopicPartition(topic, p) for p in range(partitions)]
        self._append_lock = threading.Lock()  # one append at a time: dedupe and retries stay simple
        self._ids_lock = threading.RLock()  # guards _recent and _reached, held briefly
        self._admin_lock = threading.Lock()
        self._recent: OrderedDict[str, Position] = OrderedDict()
        self._verified = False  # this instance has seen the topic with our partition count
        self._reached: dict[int, int] = {}
        """partition -> an offset the log is known to have reached: where a snapshot starts fetching."""
        self._producer: KafkaProducer | None = None
        self._admin: KafkaAdminClient | None = None
        try:
            if not read_only:
                self._producer = self._new_producer()
                self._api_version = self._producer.config["api_version"]
            self._admin = self._call(
                "connect",
                lambda: KafkaAdminClient(**{
                    **options_for(KafkaAdminClient, self.client_options),
                    "bootstrap_servers": bootstrap,
                    "client_id": client_id,
                    "api_version": self._api_version,
                    "request_timeout_ms": self._ms,
                    "bootstrap_timeout_ms": self._ms,
                }),
            )
            if self._api_version is None:
                self._api_version = self._admin.config["api_version"]
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
        return int(self._timeout * 1000)

    def _unavailable(self, what: str, exc: BaseException) -> LogUnavailableError:
        return LogUnavailableError(
            f"the Kafka broker at {self.bootstrap} is unavailable ({what}, topic {self.topic!r}, "
            f"timeout {self._timeout:g} s): {type(exc).__name__}: {exc}"
        )

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        """Run a client call, turning "cannot reach the broker" into LogUnavailableError and a client
        configuration the client refuses into LogError naming it."""
        try:
            return fn()
        except _UNREACHABLE_ERRORS as exc:
            raise self._unavailable(what, exc) from exc
        except OSError as exc:
            raise self._unavailable(what, exc) from exc
        except (kafka_errors.KafkaConfigurationError, kafka_errors.UnsupportedVersionError, AssertionError) as exc:
            raise LogError(f"the Kafka client settings for {self.bootstrap} were refused ({what}): "
                           f"{type(exc).__name__}: {exc}") from exc

    def _new_producer(self) -> KafkaProducer:
        return self._call(
            "connect",
            lambda: KafkaProducer(**{
                "max_in_flight_requests_per_connection": 5,
                "linger_ms": self._linger_ms,
                "batch_size": 256 * 1024,
                "request_timeout_ms": self._ms,
                "delivery_timeout_ms": self._ms + self._linger_ms,
                "max_block_ms": self._ms,
                "bootstrap_timeout_ms": self._ms,
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
        """Check the topic exists with our partition count; create it if it is missing.

        One metadata round trip (about 1 ms) when all is well. Runs before a consumer or a new producer
        names the topic, because on Tansu that would create it with 4 partitions.
        """
        for _attempt in range(3):
            desc = self._describe_topic()
            code = desc["error_code"]
            count = len(desc["partitions"] or [])
            if code == 0 and count == self._partitions:
                self._verified = True
                return
            if code == 0 and count:
                if self._recreated_after_loss(count):
                    return
                raise LogError(
                    f"topic {self.topic!r} on {self.bootstrap} has {count} partitions, not {self._partitions}: "
                    f"events keyed by unit would land in other partitions. If a broker that lost its data "
                    f"auto-created the topic, delete it and let the ledger create it again."
                )
            if code not in (0, _UNKNOWN_TOPIC_OR_PARTITION, _LEADER_NOT_AVAILABLE):
                raise LogError(f"cannot describe topic {self.topic!r} on {self.bootstrap}: error code {code}")
            if self.read_only:
                raise LogMissingError(
                    f"no topic {self.topic!r} on {self.bootstrap}: nothing has been recorded there yet, or "
                    "--topic / CAUCUS_TOPIC names another topic (a reader does not create it)"
                )
            try:
                provision_topic(self.bootstrap, self.topic, self._partitions, self.replication,
                                client_options=self.client_options)
                log.info("created topic %r on %s with %d partitions", self.topic, self.bootstrap, self._partitions)
                self._verified = True
                return
            except TopicPartitionMismatch:
                continue  # a client made the broker auto-create it meanwhile: look again
            except (TopicError, kafka_errors.KafkaError, OSError) as exc:
                raise self._unavailable("create topic", exc) from exc
        raise LogError(
            f"topic {self.topic!r} on {self.bootstrap} keeps being created with another partition count "
            f"than {self._partitions} while the ledger provisions it"
        )

    def _recreated_after_loss(self, count: int) -> bool:
        """Put back a topic that a restarted broker re-created on its own, if that is provably what
        happened: this instance saw it with our partition count, now it has fewer (Kafka never removes
        partitions, so the topic was re-created) and holds nothing. Then it is deleted and provisioned
        again. Tansu re-creates a lost topic with 4 partitions as soon as an idle producer, which keeps
        the topic in its metadata, reconnects; without this the producer could never recover."""
        if not self._verified or count >= self._partitions or self.read_only:
            return False
        probe = self._new_consumer(fetch_max_wait_ms=_SNAPSHOT_WAIT_MS)
        try:
            marks, _ = self._snapshot(probe, {p: 0 for p in range(count)}, keep=False)
        finally:
            probe.close()
        if any(marks.values()):
            return False
        # Our own idle producer is the client that keeps re-creating the topic (its metadata names it):
        # let it go first; the next append makes a new one (``_send``).
        old, self._producer = self._producer, None
        if old is not None:
            try:
                old.close(timeout=0)
            except Exception:  # noqa: BLE001 -- it was left idle by a broker that lost its state
                pass
        deadline = time.monotonic() + self._timeout
        while True:
            try:
                with self._admin_lock:
                    self._admin.delete_topics([self.topic], timeout_ms=self._ms, raise_errors=False)  # type: ignore[union-attr]
                provision_topic(self.bootstrap, self.topic, self._partitions, self.replication,
                                client_options=self.client_options)
                log.warning("topic %r on %s came back with %d partitions and no records (the broker lost it); "
                            "created it again with %d", self.topic, self.bootstrap, count, self._partitions)
                return True
            except TopicPartitionMismatch:
                if time.monotonic() > deadline:  # a client keeps re-creating it
                    return False
            except (TopicError, kafka_errors.KafkaError, OSError) as exc:
                raise self._unavailable("re-create topic", exc) from exc

    def _describe_topic(self) -> dict[str, Any]:
        """Topic metadata, retrying while the admin client reconnects (after a broker restart its first
        request fails with NodeNotReadyError); LogUnavailableError once ``timeout`` has passed."""
        assert self._admin is not None
        deadline = time.monotonic() + self._timeout
        delay = 0.01
        while True:
            try:
                with self._admin_lock:
                    (desc,) = self._admin.describe_topics([self.topic])
                return desc
            except (kafka_errors.RetriableError, kafka_errors.NodeNotReadyError, OSError) as exc:
                if time.monotonic() + delay > deadline:
                    raise self._unavailable("describe topic", exc) from exc
            time.sleep(delay)
            delay = min(delay * 2, 0.2)

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
        return self._call("connect", lambda: KafkaConsumer(**config))

    @staticmethod
    def stored(record: ConsumerRecord) -> StoredRecord:
        """A fetched Kafka record as the port's StoredRecord."""
        key = record.key.decode("utf-8") if record.key is not None else ""
        headers = tuple((k, v) for k, v in record.headers) if record.headers else ()
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
            return consumer.poll(timeout_ms=timeout_ms)
        except kafka_errors.OffsetOutOfRangeError as exc:
            # A real Kafka refuses to fetch beyond the log end: the log was lost or rewound.
            (fetched,) = exc.args
            tp, offset = next(iter(fetched.items()))
            high = self.high_watermarks()[tp.partition]
            raise LogLostError(tp.partition, offset, high) from exc
        except _UNREACHABLE_ERRORS as exc:
            raise self._unavailable("fetch", exc) from exc

    def _snapshot(
        self, consumer: KafkaConsumer, begin: dict[int, int], *, keep: bool
    ) -> tuple[dict[int, int], list[ConsumerRecord]]:
        """Seek every partition to ``begin`` and poll until each has reported its high watermark.

        Returns the watermarks and, if ``keep``, the records fetched meanwhile (a read starts with them):
        a partition's watermark is known only once its fetched records are drained, so they are kept
        rather than fetched twice. Partitions are never paused: kafka-python 3.0 loses track of a
        partition paused while its fetched records are partly drained, and never fetches it again."""
        tps = [TopicPartition(self.topic, p) for p in begin]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, begin[tp.partition])
        marks: dict[int, int] = {}
        kept: list[ConsumerRecord] = []
        deadline = time.monotonic() + self._timeout
        while len(marks) < len(tps):
            try:
                batch = consumer.poll(timeout_ms=_SNAPSHOT_POLL_MS)
            except kafka_errors.OffsetOutOfRangeError as exc:
                # Real Kafka, offset beyond the log end: fetch that partition from its start instead to
                # learn its high watermark; the caller then sees begin > mark and reports the loss.
                for tp in exc.args[0]:
                    consumer.seek_to_beginning(tp)
                continue
            except _UNREACHABLE_ERRORS as exc:
                raise self._unavailable("fetch", exc) from exc
            if keep:
                for records in batch.values():
                    kept.extend(records)
            for tp in tps:
                if tp.partition not in marks:
                    high = consumer.highwater(tp)
                    if high is not None:
                        marks[tp.partition] = high
            if len(marks) < len(tps) and time.monotonic() > deadline:
                missing = sorted(set(begin) - set(marks))
                raise LogUnavailableError(
                    f"the Kafka broker at {self.bootstrap} did not answer fetches for topic {self.topic!r} "
                    f"partitions {missing} within {self._timeout:g} s"
                )
        return marks, kept

    def _learn(self, marks: dict[int, int], before: dict[int, int]) -> None:
        """Remember the watermarks as fetch hints; a watermark below what was known before the snapshot
        began means the log was lost, so remembered positions beyond it are forgotten."""
        shrunk = {p: m for p, m in marks.items() if m < before.get(p, 0)}
        with self._ids_lock:
            if shrunk:
                self._forget_beyond(shrunk)
            for part, mark in marks.items():
                if part not in shrunk:
                    self._reached[part] = max(self._reached.get(part, 0), mark)

    def _forget_beyond(self, marks: dict[int, int]) -> None:
        with self._ids_lock:
            gone = [e for e, pos in self._recent.items() if pos.offset >= marks.get(pos.partition, pos.offset + 1)]
            for eid in gone:
                del self._recent[eid]
            self._reached.update(marks)

    def high_watermarks(self) -> dict[int, int]:
        """Fetch snapshot from offsets known to be reached, so little data comes back with it.

        The consumer is closed right after: a consumer kept open keeps naming the topic in metadata
        requests, and a restarted Tansu answers those by creating the topic with 4 partitions."""
        with self._ids_lock:
            before = dict(self._reached)
        probe = self.consumer(fetch_max_wait_ms=_SNAPSHOT_WAIT_MS)
        try:
            marks, _ = self._snapshot(probe, {p: before.get(p, 0) for p in range(self._partitions)}, keep=False)
        finally:
            probe.close()
        self._learn(marks, before)
        return {p: marks[p] for p in range(self._partitions)}

    def _begin(self, start: Offsets | None) -> dict[int, int]:
        begin = {p: 0 for p in range(self._partitions)}
        for part, offset in (start or {}).items():
            if part not in begin:
                raise LogError(f"partition {part} does not exist; the log has {self._partitions}")
            if offset < 0:
                raise LogError(f"offsets are never negative, got {offset} for partition {part}")
            begin[part] = offset
        return begin

    def _open_reader(self, begin: dict[int, int], wait_ms: int) -> tuple[KafkaConsumer, dict[int, int], list[ConsumerRecord]]:
        consumer = self.consumer(fetch_max_wait_ms=wait_ms)
        try:
            with self._ids_lock:
                before = dict(self._reached)
            marks, first = self._snapshot(consumer, begin, keep=True)
            self._learn(marks, before)
            for part in range(self._partitions):
                if begin[part] > marks[part]:
                    raise LogLostError(part, begin[part], marks[part])
        except BaseException:
            consumer.close()
            raise
        return consumer, marks, first

    def read(self, start: Offsets | None = None, *, max_records: int | None = None) -> Iterator[StoredRecord]:
        begin = self._begin(start)
        consumer, marks, pending = self._open_reader(begin, _SNAPSHOT_WAIT_MS)
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
        wait_ms = max(_SNAPSHOT_WAIT_MS, int(poll_interval * 1000))
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
        lost the producer's state, a new producer sends the failed records once more (per-key order is
        kept: the idempotent producer fails every later batch of a partition after a failed one, which
        is checked)."""
        if not records:
            return []
        if self.read_only:
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
            failed = self._send(records, to_send, positions)
            if failed:
                if not all(_lost_producer_state(exc) for _, exc in failed):
                    raise self._append_failure(failed)
                self._check_retry_keeps_order(records, to_send, failed)
                self._replace_producer()
                failed = self._send(records, [i for i, _ in failed], positions)
                if failed:
                    raise self._append_failure(failed)
            for i, rec in enumerate(records):
                if positions[i] is None:
                    positions[i] = positions[first[rec.event_id]]
            with self._ids_lock:
                for i in to_send:
                    self._remember(records[i].event_id, positions[i])  # type: ignore[arg-type]
            return positions  # type: ignore[return-value]

    def _still_held(self, event_ids: set[str]) -> dict[str, Position]:
        """Remembered positions of these ids that the log still holds (a retry is rare: the snapshot
        it costs is only taken when one of the ids is remembered)."""
        with self._ids_lock:
            known = {eid: self._recent[eid] for eid in event_ids if eid in self._recent}
        if not known:
            return known
        marks = self.high_watermarks()  # also forgets positions beyond a shrunken watermark
        return {eid: pos for eid, pos in known.items() if pos.offset < marks[pos.partition]}

    def _send(
        self, records: Sequence[PendingRecord], indices: list[int], positions: list[Position | None]
    ) -> list[tuple[int, BaseException]]:
        """Send, flush, fill ``positions``; return the (index, error) of records that were not written."""
        if self._producer is None:
            # A replacement that failed half-way (the broker went away again) left none: make it now.
            self._ensure_topic()
            self._producer = self._new_producer()
        producer = self._producer
        futures = []
        failed: list[tuple[int, BaseException]] = []
        try:
            for n, i in enumerate(indices):
                rec = records[i]
                part = partition_for(rec.key, self._partitions)
                try:
                    fut = producer.send(self.topic, key=rec.key.encode("utf-8"), value=rec.value, partition=part,
                                        headers=list(rec.headers) or None)
                except _UNREACHABLE_ERRORS:
                    raise
                except kafka_errors.KafkaError as exc:  # producer already in a failed state
                    failed.extend((j, exc) for j in indices[n:])
                    break
                except ValueError as exc:  # "Unrecognized partition": metadata of a since re-created topic
                    stale = _StaleTopicMetadata(str(exc))
                    failed.extend((j, stale) for j in indices[n:])
                    break
                futures.append((i, fut))
            producer.flush(timeout=self._timeout)
        except _UNREACHABLE_ERRORS as exc:
            raise self._unavailable(
                f"{len(indices)} records not acknowledged; they may or may not be in the log, "
                f"and appending them again with the same event ids is safe", exc
            ) from exc
        reached: dict[int, int] = {}
        for i, fut in futures:
            if fut.succeeded():
                meta = fut.value
                positions[i] = Position(meta.partition, meta.offset)
                reached[meta.partition] = meta.offset + 1
            else:
                failed.append((i, fut.exception or kafka_errors.KafkaTimeoutError("not acknowledged")))
        with self._ids_lock:
            for part, offset in reached.items():
                self._reached[part] = max(self._reached.get(part, 0), offset)
        failed.sort(key=lambda item: item[0])
        return failed

    def _check_retry_keeps_order(
        self, records: Sequence[PendingRecord], sent: list[int], failed: list[tuple[int, BaseException]]
    ) -> None:
        failed_idx = {i for i, _ in failed}
        first_failure: dict[int, int] = {}
        for i in sent:
            part = partition_for(records[i].key, self._partitions)
            if i in failed_idx:
                first_failure.setdefault(part, i)
            elif part in first_failure:
                raise LogError(
                    f"partition {part} accepted record {i} after record {first_failure[part]} failed; "
                    f"sending it again would break the order of a unit's events (event "
                    f"{records[first_failure[part]].event_id} was not appended)"
                )

    def _replace_producer(self) -> None:
        """A new idempotent producer, after making sure the topic is there again and forgetting the
        positions of records the broker no longer holds (the snapshot does that)."""
        log.warning("the broker at %s lost this producer's state; sending the failed records again with a new producer",
                    self.bootstrap)
        old, self._producer = self._producer, None
        if old is not None:
            try:
                old.close(timeout=0)
            except Exception:  # noqa: BLE001 -- the old producer is broken; closing is best effort
                pass
        self._ensure_topic()
        self.high_watermarks()
        self._producer = self._new_producer()

    def _append_failure(self, failed: list[tuple[int, BaseException]]) -> LogError:
        index, exc = failed[0]
        if isinstance(exc, _UNREACHABLE_ERRORS):
            return self._unavailable(f"{len(failed)} records not acknowledged, e.g. record {index}", exc)
        return LogError(
            f"the Kafka broker at {self.bootstrap} refused {len(failed)} records for topic {self.topic!r} "
            f"(first: record {index}): {type(exc).__name__}: {exc}"
        )

    def _remember(self, event_id: str, position: Position) -> None:
        self._recent[event_id] = position
        self._recent.move_to_end(event_id)
        while len(self._recent) > self._recent_limit:
            self._recent.popitem(last=False)

    # ----------------------------------------------------------------------------- lifecycle
    def close(self) -> None:
        for client in (self._producer, self._admin):
            if client is None:
                continue
            try:
                client.close(timeout=self._timeout) if isinstance(client, KafkaProducer) else client.close()
            except Exception:  # noqa: BLE001 -- closing a client to a vanished broker must not raise
                pass
        self._producer = self._admin = None

    def __enter__(self) -> KafkaLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"KafkaLog({self.bootstrap!r}, {self.topic!r}, partitions={self._partitions})"

    # ----------------------------------------------------------------------------- identity
    @property
    def log_id(self) -> str | None:
        """The id in the topic's metadata topic (``ledger.log.kafka_identity``); None if never written."""
        if self._log_id is None:
            from ledger.log.kafka_identity import read_log_id

            self._log_id = read_log_id(self)
        return self._log_id

    def ensure_log_id(self) -> str:
        """The log's id, written now if the topic never had one (a topic from before ids)."""
        if self.log_id is None:
            from ledger.log.kafka_identity import write_log_id

            self._log_id = write_log_id(self)
        assert self._log_id is not None
        return self._log_id


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
