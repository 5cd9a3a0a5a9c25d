"""The idempotent producer, and sending a batch again with a new one after the broker lost its state.

The quirk it works around (DESIGN.md): the producer is idempotent with acks=all. After a broker restart
it fails with UnknownProducerIdError and cannot recover by itself, because Tansu refuses the KIP-360
epoch bump (InitProducerId with the old producer id) with an unknown error. So when every failure of a
batch says the broker lost the producer's state, ``ReplaceableProducer`` closes the producer, makes a
new one and sends the failed records once more, after checking that this keeps each unit's order (the
idempotent producer fails every later batch of a partition after a failed one). A producer whose
cached metadata lacks a partition (the topic was re-created since) is replaced the same way.

On a real Kafka (2.5 or later) kafka-python bumps the epoch itself and these failures do not reach
here: ``lost_producer_state`` would then match nothing, and the replacement can be removed, leaving
``send`` and the order check.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from kafka import KafkaProducer
from kafka import errors as kafka_errors

from ledger.log.kafka._client import UNREACHABLE_ERRORS, Endpoint
from ledger.log.kafka._watermarks import Watermarks
from ledger.log.partitioning import record_partition
from ledger.log.port import LogError, PendingRecord, Position

__all__ = ["ReplaceableProducer", "lost_producer_state"]

# Errors after which the idempotent producer's state on the broker is gone (broker restarted, producer
# id expired): a new producer can send the failed records again without reordering or duplicating them.
_PRODUCER_STATE_ERRORS = (
    kafka_errors.UnknownProducerIdError,
    kafka_errors.OutOfOrderSequenceNumberError,
    kafka_errors.InvalidProducerEpochError,
)

log = logging.getLogger("ledger.log.kafka")

Failures = list[tuple[int, BaseException]]


class _StaleTopicMetadata(Exception):
    """The producer's cached metadata lacks a partition: the topic was re-created since it looked."""


def lost_producer_state(exc: BaseException) -> bool:
    # A bare KafkaError is what kafka-python raises when its own recovery (InitProducerId with the old
    # producer id) is refused; Tansu does that after a restart.
    return isinstance(exc, (*_PRODUCER_STATE_ERRORS, _StaleTopicMetadata)) or type(exc) is kafka_errors.KafkaError


class ReplaceableProducer:
    """The log's producer, made by ``make`` and replaced when the broker lost its state.

    ``ensure_topic`` runs before a new producer names the topic (on Tansu that would create it with 4
    partitions); ``refresh_marks`` takes a fetch snapshot, which also forgets remembered positions the
    broker no longer holds."""

    def __init__(
        self,
        endpoint: Endpoint,
        partitions: int,
        watermarks: Watermarks,
        *,
        make: Callable[[], KafkaProducer],
        ensure_topic: Callable[[], None],
        refresh_marks: Callable[[], object],
    ) -> None:
        self._endpoint = endpoint
        self._partitions = partitions
        self._watermarks = watermarks
        self._make = make
        self._ensure_topic = ensure_topic
        self._refresh_marks = refresh_marks
        self.current: KafkaProducer | None = make()

    def append(self, records: Sequence[PendingRecord], indices: list[int], positions: list[Position | None]) -> None:
        """Send ``records[i]`` for each of ``indices``, filling ``positions``; once more with a new producer
        if the broker lost this one's state; LogError (or LogUnavailableError) if any is not written."""
        failed = self._send(records, indices, positions)
        if not failed:
            return
        if not all(lost_producer_state(exc) for _, exc in failed):
            raise self._failure(failed)
        _check_retry_keeps_order(records, indices, failed, self._partitions)
        self.replace()
        failed = self._send(records, [i for i, _ in failed], positions)
        if failed:
            raise self._failure(failed)

    def _send(self, records: Sequence[PendingRecord], indices: list[int], positions: list[Position | None]) -> Failures:
        """Send, flush, fill ``positions``; return the (index, error) of records that were not written."""
        if self.current is None:
            # A replacement that failed half-way (the broker went away again) left none: make it now.
            self._ensure_topic()
            self.current = self._make()
        producer = self.current
        futures = []
        failed: Failures = []
        try:
            for n, i in enumerate(indices):
                rec = records[i]
                part = record_partition(rec, self._partitions)
                try:
                    fut = producer.send(self._endpoint.topic, key=rec.key.encode("utf-8"), value=rec.value,
                                        partition=part, headers=list(rec.headers) or None)
                except UNREACHABLE_ERRORS:
                    raise
                except kafka_errors.KafkaError as exc:  # producer already in a failed state
                    failed.extend((j, exc) for j in indices[n:])
                    break
                except ValueError as exc:  # "Unrecognized partition": metadata of a since re-created topic
                    stale = _StaleTopicMetadata(str(exc))
                    failed.extend((j, stale) for j in indices[n:])
                    break
                futures.append((i, fut))
            producer.flush(timeout=self._endpoint.timeout)
        except UNREACHABLE_ERRORS as exc:
            raise self._endpoint.unavailable(
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
        self._watermarks.note_reached(reached)
        failed.sort(key=lambda item: item[0])
        return failed

    def replace(self) -> None:
        """A new idempotent producer, after making sure the topic is there again and forgetting the
        positions of records the broker no longer holds (the snapshot does that)."""
        log.warning("the broker at %s lost this producer's state; sending the failed records again with a new producer",
                    self._endpoint.bootstrap)
        self.drop()
        self._ensure_topic()
        self._refresh_marks()
        self.current = self._make()

    def drop(self) -> None:
        """Let go of the producer without waiting: it is broken, or idle on a broker that lost its state."""
        old, self.current = self.current, None
        if old is not None:
            try:
                old.close(timeout=0)
            except Exception:  # noqa: BLE001 -- closing is best effort
                pass

    def close(self) -> None:
        old, self.current = self.current, None
        if old is not None:
            try:
                old.close(timeout=self._endpoint.timeout)
            except Exception:  # noqa: BLE001 -- closing a client to a vanished broker must not raise
                pass

    def _failure(self, failed: Failures) -> LogError:
        index, exc = failed[0]
        if isinstance(exc, UNREACHABLE_ERRORS):
            return self._endpoint.unavailable(f"{len(failed)} records not acknowledged, e.g. record {index}", exc)
        return LogError(
            f"the Kafka broker at {self._endpoint.bootstrap} refused {len(failed)} records for topic "
            f"{self._endpoint.topic!r} (first: record {index}): {type(exc).__name__}: {exc}"
        )


def _check_retry_keeps_order(records: Sequence[PendingRecord], sent: list[int], failed: Failures, partitions: int) -> None:
    failed_idx = {i for i, _ in failed}
    first_failure: dict[int, int] = {}
    for i in sent:
        part = record_partition(records[i], partitions)
        if i in failed_idx:
            first_failure.setdefault(part, i)
        elif part in first_failure:
            raise LogError(
                f"partition {part} accepted record {i} after record {first_failure[part]} failed; "
                f"sending it again would break the order of a unit's events (event "
                f"{records[first_failure[part]].event_id} was not appended)"
            )
