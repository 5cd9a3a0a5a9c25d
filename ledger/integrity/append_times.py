"""The log's own append time of each record, held to the signed checkpoints around it.

Why: the leaf covers a record's value, not the time the log says it appended the record (SQLite's
``timestamp_ms``, a Kafka record's timestamp), and that time is what someone reads to tell when a
result reached the log. It cannot be checked against the value (an event may carry any recorded_at,
e.g. an imported history), but it can be checked against the checkpoints, whose times are signed:
a checkpoint takes its time, then the sizes, so a record it covers was appended no later than its
time (give or take the moments between), and a record it does not cover was appended after it. So
each record's append time must lie between the latest checkpoint that did not cover it and the
earliest that did, within ``TOLERANCE_MS`` for clocks that differ (a Kafka producer's and the
signer's). Moving a record's time across a checkpoint is found; moving it within the span between
two checkpoints is not: the finer the checkpoints, the tighter the bound. Logs that record no time
(0 or less) are not held to it; but every adapter of this ledger records one, so a partition where
some records have a time and others none had times taken away (which would free them of the check).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from datetime import UTC, datetime

from ledger.integrity.checkpoints import SignedCheckpoint

__all__ = ["TOLERANCE_MS", "append_time_problems"]

TOLERANCE_MS = 60_000


def _text(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def append_time_problems(
    partition: int, append_ms: Sequence[int], checkpoints: Sequence[SignedCheckpoint]
) -> list[tuple[int, str]]:
    """(leaf index, what is wrong) for the first record of the partition appended after a checkpoint
    that covers it, and the first appended before a checkpoint that does not; each message says how
    many more there are."""
    # Sorted by size and time only: two signers at the same moment can sign the same size in the same
    # millisecond, and checkpoints have no order of their own.
    timed = sorted(((s.checkpoint.partition_sizes[partition], s.checkpoint.timestamp_micros // 1000, s)
                    for s in checkpoints if s.checkpoint.timestamp_micros > 0 and partition < s.checkpoint.partitions),
                   key=lambda t: (t[0], t[1]))
    if not timed:
        return []
    sizes = [size for size, _, _ in timed]
    # For leaf i: the checkpoints with size > i cover it (earliest time wins), the others do not (latest wins).
    covering_min: list[tuple[int, SignedCheckpoint]] = []
    best: tuple[int, SignedCheckpoint] | None = None
    for size, ms, s in reversed(timed):
        if best is None or ms < best[0]:
            best = (ms, s)
        covering_min.append(best)
    covering_min.reverse()
    before_max: list[tuple[int, SignedCheckpoint]] = []
    best = None
    for size, ms, s in timed:
        if best is None or ms > best[0]:
            best = (ms, s)
        before_max.append(best)
    late: list[int] = []
    early: list[int] = []
    blank = [i for i, ms in enumerate(append_ms) if ms <= 0] if any(ms > 0 for ms in append_ms) else []
    for i, ms in enumerate(append_ms):
        if ms <= 0:
            continue
        k = bisect_right(sizes, i)  # timed[:k] do not cover leaf i, timed[k:] do
        if k < len(timed) and ms > covering_min[k][0] + TOLERANCE_MS:
            late.append(i)
        if k > 0 and ms < before_max[k - 1][0] - TOLERANCE_MS:
            early.append(i)
    out: list[tuple[int, str]] = []
    if blank:
        out.append((blank[0], f"says no append time ({append_ms[blank[0]]}) where the partition's other records have "
                              f"one: the log's append time was taken away{_more(blank)}"))
    if late:
        i = late[0]
        bound, s = covering_min[bisect_right(sizes, i)]
        out.append((i, f"says it was appended at {_text(append_ms[i])}, after {s.label}, which covers it "
                       f"(signed at {_text(bound)}): the log's append time was changed{_more(late)}"))
    if early:
        i = early[0]
        bound, s = before_max[bisect_right(sizes, i) - 1]
        out.append((i, f"says it was appended at {_text(append_ms[i])}, before {s.label}, which does not cover it "
                       f"(signed at {_text(bound)}): the log's append time was changed{_more(early)}"))
    return out


def _more(found: list[int]) -> str:
    return f" ({len(found) - 1} more record(s) of this partition too)" if len(found) > 1 else ""
