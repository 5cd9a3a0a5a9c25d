"""``follow`` for logs that can only be read, not waited on (the embedded and in-memory logs).

Why one function: both adapters follow by reading from where they stopped and sleeping when nothing
came; keeping that loop in one place keeps their ``follow`` the same as the contract suite expects.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from ledger.log.port import Offsets, StoredRecord

__all__ = ["follow_by_polling"]


def follow_by_polling(
    read: Callable[[dict[int, int]], Iterator[StoredRecord]],
    partitions: int,
    start: Offsets | None,
    stop: Callable[[], bool] | None,
    poll_interval: float,
) -> Iterator[StoredRecord]:
    """Yield records from ``start`` on, reading again after ``poll_interval`` seconds whenever a read
    brought nothing, until ``stop()`` says so (checked after every record and every read)."""
    position = {p: 0 for p in range(partitions)}
    position.update(start or {})
    while True:
        got = False
        for rec in read(position):
            position[rec.position.partition] = rec.position.offset + 1
            got = True
            yield rec
            if stop is not None and stop():
                return
        if stop is not None and stop():
            return
        if not got:
            time.sleep(poll_interval)
