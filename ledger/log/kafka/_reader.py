"""One assigned consumer kept between reads, so a read costs a fetch round trip, not a new client.

Why: making a KafkaConsumer (connect, negotiate, metadata) costs ~20 ms on the 2-core machine, and the
intake reads on before every decision; with one consumer per read it could accept about 30 reports/s.
A kept consumer, seeked to the read's start offsets, answers the same question in ~3 ms.

What a read must still guarantee: the high watermarks it reads up to were fetched *after* the read began,
so whatever another writer had appended by then is seen. A kept consumer may have a fetch in flight that
was sent before (kafka-python fetches ahead), and a seek to the offset that fetch was sent for would
accept its answer. So ``fresh`` waits until no fetch is in flight and forgets every watermark before
seeking; only answers to fetches sent afterwards count. That needs two of kafka-python's private
attributes (``_fetcher``, ``_subscription``); if they are missing, ``KeptReader`` keeps nothing and
every read uses a new consumer, as before.

A consumer kept after an error could keep the topic named in metadata requests (a restarted Tansu
re-creates it from those, with 4 partitions: ``_topic_guard``), so any error drops it; the next read
makes a new one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from kafka import KafkaConsumer, TopicPartition

from ledger.log.kafka._client import Endpoint
from ledger.log.port import LogUnavailableError

__all__ = ["KeptReader", "fresh", "KEPT_WAIT_MS"]

KEPT_WAIT_MS = 1
"""fetch_max_wait_ms of the kept consumer. Tansu waits the full max wait when no partition has new data
(the usual case before a decision: nothing new), so 10 ms there costs ~12 ms a read and 1 ms ~3 ms; a
fetch that finds data is answered at once either way."""

_IN_FLIGHT_PAUSE = 0.0005


_PRIVATE = ("in_flight_fetches", "_nodes_with_pending_fetch_requests", "_completed_fetches",
            "_next_partition_records", "_paused_completed_fetches", "_paused_partition_records")


def _supported(consumer: KafkaConsumer) -> bool:
    fetcher = getattr(consumer, "_fetcher", None)
    subscription = getattr(consumer, "_subscription", None)
    return all(hasattr(fetcher, name) for name in _PRIVATE) and hasattr(subscription, "assignment")


def fresh(endpoint: Endpoint, consumer: KafkaConsumer, tps: list[TopicPartition]) -> None:
    """Assign ``tps`` (if not already), wait out fetches in flight, drop what earlier fetches brought and
    forget their watermarks: the next ``highwater`` answers come from fetches sent after this call began.

    A fetch counts as over once its node is no longer pending (kafka-python clears that after the
    response was queued); queued responses would otherwise be parsed by the next poll and set the
    watermarks of a seek to the offset they were fetched from."""
    if set(consumer.assignment()) != set(tps):
        consumer.assign(tps)
    fetcher = consumer._fetcher
    deadline = time.monotonic() + endpoint.timeout
    while fetcher.in_flight_fetches() or fetcher._nodes_with_pending_fetch_requests:
        if time.monotonic() > deadline:
            raise LogUnavailableError(
                f"a fetch from {endpoint.bootstrap} for topic {endpoint.topic!r} did not complete within "
                f"{endpoint.timeout:g} s"
            )
        time.sleep(_IN_FLIGHT_PAUSE)
    fetcher._completed_fetches.clear()
    if fetcher._next_partition_records is not None:
        fetcher._next_partition_records.drain()
        fetcher._next_partition_records = None
    for parked in fetcher._paused_partition_records.values():
        parked.drain()
    fetcher._paused_partition_records.clear()
    fetcher._paused_completed_fetches.clear()
    states = consumer._subscription.assignment
    for tp in tps:
        states[tp].highwater = None


class KeptReader:
    """The log's reading consumer, lent to one read at a time. ``borrowed()`` yields None when another
    read holds it (or kafka-python lacks what ``fresh`` needs): that read makes its own consumer."""

    def __init__(self, make: Callable[[], KafkaConsumer]) -> None:
        self._make = make
        self._consumer: KafkaConsumer | None = None
        self._lock = threading.Lock()
        self._unsupported = False
        self._drop_asked = False

    @contextmanager
    def borrowed(self) -> Iterator[KafkaConsumer | None]:
        if self._unsupported or not self._lock.acquire(blocking=False):
            yield None
            return
        done = False
        try:
            if self._consumer is None:
                consumer = self._make()
                if not _supported(consumer):
                    consumer.close()
                    self._unsupported = True
                    yield None
                    done = True
                    return
                self._consumer = consumer
            yield self._consumer
            done = True
        finally:
            if not done or self._drop_asked:
                self._close_locked()
            self._lock.release()

    def drop(self) -> None:
        """Let go of the consumer (the topic was lost or is being re-created; the log is closing). If a
        read holds it (perhaps this very thread), that read lets go of it when it ends."""
        self._drop_asked = True
        if self._lock.acquire(blocking=False):
            try:
                self._close_locked()
            finally:
                self._lock.release()

    def _close_locked(self) -> None:
        self._drop_asked = False
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            try:
                consumer.close()
            except Exception:  # noqa: BLE001 -- closing a client to a vanished broker must not raise
                pass
