"""The Kafka source's ``read_first``: some partitions read ahead of the others, through a consumer of
their own, from the group consumer's positions, which then move past what it returned.

Why a consumer of their own rather than ``pause``: kafka-python 3.0 keeps a paused partition's
half-read records aside and, once another partition has been read to its end, never gives them back
nor fetches that partition again. A ``seek`` of the group consumer is public and safe: records it
fetched before for those partitions are out of line and dropped; the others' are not touched.

Bounds, so that a hint never holds the group consumer off for long (it must poll to take part in a
rebalance): a partition is read first only up to the high watermark it had when first asked for, and
then never again (an election that is never defined, say, sends the runner there once); and a run of
reads ahead lasts at most ``STRETCH`` seconds before the group consumer polls again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["FirstReads", "STRETCH", "FIRST_POLL"]

STRETCH = 2.0
"""Seconds of reads ahead before the group consumer polls again."""
FIRST_POLL = 2.0
"""Seconds the first read ahead may wait: its consumer connects then (the poll ends as soon as records
come)."""


class FirstReads:
    """The partitions asked for, how far each is to be read, and the consumer that reads them."""

    def __init__(self, new_consumer: Callable[[], Any], topic: str, clock: Callable[[], float] = time.monotonic) -> None:
        self._new_consumer = new_consumer
        self._topic = topic
        self._clock = clock
        self._side: Any = None
        self._wanted: dict[int, int | None] = {}  # partition -> the high watermark to read it to (None: not known yet)
        self._done: set[int] = set()
        self._since: float | None = None

    def ask(self, partitions: Iterable[int]) -> None:
        for p in set(partitions) - self._done:
            self._wanted.setdefault(p, None)

    @property
    def asked(self) -> bool:
        return bool(self._wanted)

    def highwater(self, tp: Any) -> int | None:
        """The partition's high watermark as this consumer's last fetch of it gave it (the group
        consumer's is older once it was read ahead here)."""
        if self._side is None or tp not in self._side.assignment():
            return None
        mark = self._side.highwater(tp)
        return int(mark) if mark is not None else None

    def poll(self, main: Any, owned: set[int], max_records: int, timeout: float) -> dict[Any, list[Any]] | None:
        """The records read ahead ({} while they are on their way), or None: poll ``main`` instead."""
        from kafka import TopicPartition

        now = self._clock()
        if self._since is not None and now - self._since > STRETCH:
            self._wanted.clear()  # asked again after the next batch, if still wanted
            self._since = None
            return None
        at: dict[Any, int] = {}
        for p in sorted(self._wanted):
            tp = TopicPartition(self._topic, p)
            pos = _position(main, tp) if p in owned else None
            target = self._wanted.pop(p, None)  # a rebalance may have cleared it meanwhile
            if pos is None:
                continue
            marks = [m for m in (target, main.highwater(tp), self.highwater(tp)) if m is not None]
            target = target if target is not None else (max(marks) if marks else None)
            if target is not None and pos >= target:
                self._done.add(p)
                continue
            self._wanted[p] = target
            at[tp] = pos
        if not at or {tp.partition for tp in at} == owned:
            self._wanted.clear()
            self._since = None
            return None
        return self._read(main, at, max_records, timeout, now)

    def _read(self, main: Any, at: dict[Any, int], max_records: int, timeout: float, now: float) -> dict[Any, list[Any]]:
        wait = timeout
        if self._side is None:  # a new consumer first connects: wait for that once
            self._side, wait = self._new_consumer(), max(timeout, FIRST_POLL)
        if self._since is None:
            self._since = now
        self._side.assign(list(at))
        for tp, pos in at.items():
            self._side.seek(tp, pos)
        batches: dict[Any, list[Any]] = self._side.poll(timeout_ms=int(wait * 1000), max_records=max_records)
        for tp, msgs in batches.items():
            if msgs:
                main.seek(tp, msgs[-1].offset + 1)
        return batches

    def forget(self) -> None:
        """The partitions changed hands: what was asked for no longer holds."""
        self._wanted.clear()
        self._since = None

    def close(self) -> None:
        side, self._side = self._side, None
        if side is not None:
            side.close(autocommit=False)


def _position(consumer: Any, tp: Any) -> int | None:
    try:
        pos = consumer.position(tp, timeout_ms=0)
    except Exception:  # noqa: BLE001 -- not positioned yet, or no longer assigned: nothing to read first
        return None
    return int(pos) if pos is not None else None
