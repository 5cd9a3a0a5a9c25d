"""High watermarks from fetch responses, and the offsets each partition is known to have reached.

The quirk it works around: on Tansu, ``end_offsets``, ``seek_to_end`` and ``offsets_for_times`` (the
ListOffsets request) answer wrongly (DESIGN.md). So the end of each partition is read from the high
watermark a fetch response carries (``consumer.highwater``): a snapshot assigns every partition, seeks
each to an offset it is known to have reached (0 when nothing is known, so little data comes back), and
polls until every partition has answered once; an empty partition answers too, with 0.

A watermark below what was known means the log was lost or rewound (Tansu keeps data in memory only):
the caller forgets what it remembered beyond it. On a real Kafka, ``snapshot`` could become one
``end_offsets`` call and ``Watermarks`` would only be needed to notice a lost log.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping

from kafka import KafkaConsumer, TopicPartition
from kafka import errors as kafka_errors
from kafka.consumer.fetcher import ConsumerRecord

from ledger.log.kafka._client import UNREACHABLE_ERRORS, Endpoint
from ledger.log.port import LogUnavailableError

__all__ = ["SNAPSHOT_WAIT_MS", "Watermarks", "snapshot"]

SNAPSHOT_WAIT_MS = 10
"""fetch_max_wait_ms while taking a snapshot. Tansu ignores fetch_min_bytes=0 (it waits the full
fetch_max_wait_ms when no data is new) and never answers a fetch whose max wait is 0."""
_SNAPSHOT_POLL_MS = 1  # poll returns only at its timeout when a fetch brought no records


class Watermarks:
    """partition -> an offset the log is known to have reached: where a snapshot starts fetching."""

    def __init__(self) -> None:
        self._reached: dict[int, int] = {}
        self._lock = threading.Lock()

    def reached(self) -> dict[int, int]:
        with self._lock:
            return dict(self._reached)

    def note_reached(self, offsets: Mapping[int, int]) -> None:
        """Appends acknowledged up to these offsets: the log has reached them at least."""
        with self._lock:
            for part, offset in offsets.items():
                self._reached[part] = max(self._reached.get(part, 0), offset)

    def lower_to(self, marks: Mapping[int, int]) -> None:
        """The log holds no more than this (it was lost or rewound)."""
        with self._lock:
            self._reached.update(marks)

    def learn(self, marks: Mapping[int, int], before: Mapping[int, int]) -> dict[int, int]:
        """Remember a snapshot's watermarks as fetch hints; return those below what was known before the
        snapshot began (the log was lost there, so the caller forgets what it remembered beyond them)."""
        shrunk = {p: m for p, m in marks.items() if m < before.get(p, 0)}
        with self._lock:
            self._reached.update(shrunk)
            for part, mark in marks.items():
                if part not in shrunk:
                    self._reached[part] = max(self._reached.get(part, 0), mark)
        return shrunk


def snapshot(
    endpoint: Endpoint, consumer: KafkaConsumer, begin: dict[int, int], *, keep: bool
) -> tuple[dict[int, int], list[ConsumerRecord]]:
    """Seek every partition to ``begin`` and poll until each has reported its high watermark.

    Returns the watermarks and, if ``keep``, the records fetched meanwhile (a read starts with them):
    a partition's watermark is known only once its fetched records are drained, so they are kept
    rather than fetched twice. Partitions are never paused: kafka-python 3.0 loses track of a
    partition paused while its fetched records are partly drained, and never fetches it again."""
    tps = [TopicPartition(endpoint.topic, p) for p in begin]
    if set(consumer.assignment()) != set(tps):  # a kept reader is assigned already (``_reader``)
        consumer.assign(tps)
    for tp in tps:
        consumer.seek(tp, begin[tp.partition])
    marks: dict[int, int] = {}
    kept: list[ConsumerRecord] = []
    deadline = time.monotonic() + endpoint.timeout
    while len(marks) < len(tps):
        try:
            batch = consumer.poll(timeout_ms=_SNAPSHOT_POLL_MS)
        except kafka_errors.OffsetOutOfRangeError as exc:
            # Real Kafka, offset beyond the log end: fetch that partition from its start instead to
            # learn its high watermark; the caller then sees begin > mark and reports the loss.
            for tp in exc.args[0]:
                consumer.seek_to_beginning(tp)
            continue
        except UNREACHABLE_ERRORS as exc:
            raise endpoint.unavailable("fetch", exc) from exc
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
                f"the Kafka broker at {endpoint.bootstrap} did not answer fetches for topic {endpoint.topic!r} "
                f"partitions {missing} within {endpoint.timeout:g} s"
            )
    return marks, kept
