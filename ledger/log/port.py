"""What a log must do, independent of where it lives.

Positions are (partition, offset) pairs, as in Kafka: offsets grow by one per record within a
partition, and there is no order across partitions. Consumers keep their own positions (a mapping
partition -> next offset to read); the log never tracks readers, because the broker used in tests
drops committed consumer metadata and a projection must commit its position with its view anyway.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = [
    "begin_offsets",
    "Position",
    "PendingRecord",
    "StoredRecord",
    "EventLog",
    "LogError",
    "LogUnavailableError",
    "LogLostError",
    "LogFileReplacedError",
    "LogMissingError",
    "LogVanishedError",
    "Offsets",
    "Headers",
]

Offsets = Mapping[int, int]
"""partition -> next offset to read (a consumer's position)."""

Headers = tuple[tuple[str, bytes], ...]
"""Record headers, as Kafka has them: (name, value) pairs in order. They describe a record (its event
type, schema fingerprint, who wrote it) for tools that do not decode it; the value is the record."""


class LogError(RuntimeError):
    """Something went wrong with the log itself (not with an event's content)."""


class LogUnavailableError(LogError):
    """The log cannot be reached now; the caller may spool and retry."""


class LogMissingError(LogError):
    """A reader asked for a log that does not exist (no file, no topic); nothing was created."""


class LogLostError(LogError):
    """A stored position lies beyond what the log holds: the log was lost or rewound.

    Waiting would never help (a restarted in-memory broker comes back empty), so this is raised
    instead of blocking, naming the partition and both offsets.
    """

    def __init__(self, partition: int, expected: int, high_watermark: int) -> None:
        super().__init__(
            f"log lost or rewound: partition {partition} should hold at least {expected} records "
            f"but its high watermark is {high_watermark}"
        )
        self.partition = partition
        self.expected = expected
        self.high_watermark = high_watermark


class LogFileReplacedError(LogLostError):
    """The file a connection holds open is no longer the one at the log's address (removed, or another
    put in its place, as a restore does): what the connection wrote now would reach no log, and what it
    reads is not the log. The caller opens the address again and checks the log it finds there against
    what it saw (the intake does); a reader that cannot says the log was lost (exit 3). ``reopen``: False
    when opening the address again would do harm (a copy beside the old file's write-ahead log);
    ``removed``: nothing is at the address now."""

    def __init__(self, message: str, *, reopen: bool = True, removed: bool = False) -> None:
        Exception.__init__(self, message)
        self.partition, self.expected, self.high_watermark = -1, 0, 0
        self.reopen, self.removed = reopen, removed


class LogVanishedError(LogLostError):
    """A log that something beside it vouches for (a projection built from it, checkpoints signed over
    it) is not there at all (no file, no topic): to those readers a lost log, as one emptied is (exit
    3), not a place where nothing was ever recorded."""

    def __init__(self, message: str) -> None:
        Exception.__init__(self, message)
        self.partition, self.expected, self.high_watermark = -1, 0, 0


class LogReplacedError(LogError):
    """The configured log is another log than the one a projection was built from (another log id: one
    lost and made again, or another address): the projection reflects records this log does not hold,
    which is what a lost log means to its reader, and is exit 3 like one."""


@dataclass(frozen=True, slots=True, order=True)
class Position:
    partition: int
    offset: int

    def __str__(self) -> str:
        return f"{self.partition}:{self.offset}"

    @classmethod
    def parse(cls, text: str) -> Position:
        """Parse ``PARTITION:OFFSET`` as printed by ``str()``."""
        try:
            part, off = text.split(":")
            return cls(int(part), int(off))
        except ValueError:
            raise ValueError(f"a position is PARTITION:OFFSET (e.g. 3:120), got {text!r}") from None


@dataclass(frozen=True, slots=True)
class PendingRecord:
    """A record to append: its key (the unit id), its event id (for dedupe), encoded bytes and headers.
    ``partition`` overrides the key's partition (``partition_for``): a copy kept under another key in the
    partition of the record it copies (``ledger.log.latest``)."""

    key: str
    event_id: str
    value: bytes
    headers: Headers = ()
    partition: int | None = None


@dataclass(frozen=True, slots=True)
class StoredRecord:
    position: Position
    key: str
    value: bytes
    timestamp_ms: int
    headers: Headers = ()


@runtime_checkable
class EventLog(Protocol):
    """The port every log adapter implements."""

    @property
    def partitions(self) -> int:
        """How many partitions the log has (fixed when it is created)."""
        ...

    @property
    def log_id(self) -> str | None:
        """The log's own identity, written once when it was created and the same from any path or
        address it is reached by; None for a log from before ids that this reader may not write."""
        ...

    def append(self, record: PendingRecord) -> Position:
        """Append durably and return the position. Appending an event id this log already holds
        returns the original position and writes nothing."""
        ...

    def append_batch(self, records: Sequence[PendingRecord]) -> list[Position]:
        """Append many records; positions are returned in input order, per-key order is kept."""
        ...

    def read(self, start: Offsets | None = None, *, max_records: int | None = None) -> Iterator[StoredRecord]:
        """Records from ``start`` (default: the beginning) up to the high watermarks as they stand
        when the call begins. Within a partition, records come in offset order.

        Raises LogLostError when a start offset lies beyond a partition's high watermark."""
        ...

    def follow(
        self,
        start: Offsets | None = None,
        *,
        stop: Callable[[], bool] | None = None,
        poll_interval: float = 0.2,
    ) -> Iterator[StoredRecord]:
        """Like ``read`` but keeps waiting for new records until ``stop()`` returns True."""
        ...

    def high_watermarks(self) -> dict[int, int]:
        """partition -> offset the next appended record will get (= records held)."""
        ...

    def close(self) -> None: ...


def begin_offsets(start: Offsets | None, partitions: int) -> dict[int, int]:
    """Where a read of every partition begins: 0 unless ``start`` says otherwise. A partition the log
    does not have or a negative offset is the caller's mistake, named (a silent clamp would read
    records the caller did not ask for)."""
    begin = {p: 0 for p in range(partitions)}
    for part, offset in (start or {}).items():
        if part not in begin:
            raise LogError(f"partition {part} does not exist; the log has {partitions}")
        if offset < 0:
            raise LogError(f"offsets are never negative, got {offset} for partition {part}")
        begin[part] = offset
    return begin
