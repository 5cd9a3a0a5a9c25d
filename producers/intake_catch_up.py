"""Reading the log into the intake's state, and making sure it is still the log the state describes.

The first read after a start or an outage reads the last record applied in each partition again: it
must be the event the state remembers there (its anchor). So a log that was lost and refilled to beyond
the old positions (a memory-only broker restarted, then written to) is caught too, not only one that
is now shorter than the state's positions. ``seen`` (``intake_snapshot``: the last event an intake
saw in each partition when it stopped, later than the snapshot) is checked in the same read: the log
must still hold each of those events where it was seen.
"""

from __future__ import annotations

from collections.abc import Mapping

from ledger.journal import Journal
from ledger.log.port import LogError, LogLostError
from producers.intake_state import IntakeState

__all__ = ["read_on", "IntakeRecordGone", "IntakeLogLost"]


class IntakeLogLost(LogLostError):
    """The intake's state describes a log that was lost: it decides nothing, and confirms no receipt,
    until ``caucus intake rebuild`` accepts the log as it now is (a lost log is exit 3, as elsewhere)."""

    def __init__(self, why: str) -> None:
        LogError.__init__(self, f"the log was lost: {why}")
        self.partition = self.expected = self.high_watermark = -1


class IntakeRecordGone(LogLostError):
    """An event the intake applied or saw is no longer where it saw it: another event holds its position,
    or the partition now ends before it. Its message names the event and what is there now, not a high
    watermark: a log restored from an older copy and written to since can be longer than before."""

    def __init__(self, partition: int, offset: int, event_id: str, found: tuple[int, str] | None) -> None:
        if found is None:
            now = "the partition now ends before it"
        elif found[0] == offset:
            now = f"it now holds event {found[1]}"
        else:
            now = f"the partition now has no record there (the next is event {found[1]} at offset {found[0]})"
        Exception.__init__(
            self,
            f"log lost or rewound: partition {partition} offset {offset} held event {event_id} when this intake last read "
            f"it; {now}: the log was replaced by an older copy, or lost (and perhaps written again since)",
        )
        self.partition, self.expected, self.high_watermark = partition, offset + 1, -1


def read_on(journal: Journal, state: IntakeState, *, verify: bool,
            seen: Mapping[int, tuple[int, str]] | None = None) -> None:
    """Apply to ``state`` what the log holds beyond its positions; with ``verify``, check the anchors
    first. ``IntakeRecordGone`` (a ``LogLostError``) if an anchor or a seen event is not where it was,
    replaced by another event or past the partition's end; the state is then partly caught up and the
    caller must not go on with it. ``LogUnavailableError`` passes through."""
    start = dict(state.positions)
    expect: dict[int, tuple[int, str]] = {}
    if verify:
        for part, offset in state.positions.items():
            if offset > 0 and part in state.anchors:
                start[part] = offset - 1
                expect[part] = (offset - 1, state.anchors[part])
    need = {part: (position - 1, event_id) for part, (position, event_id) in (seen or {}).items()
            if position > state.positions.get(part, 0)}  # what the snapshot covers, its anchor vouches for
    if expect or need:  # a partition that now ends before them: name the event, not a high watermark
        marks = journal.log.high_watermarks()
        for part, (offset, want) in [*expect.items(), *need.items()]:
            if offset >= marks.get(part, 0):
                raise IntakeRecordGone(part, offset, want, None)
    for logged in journal.read(start):
        part = logged.position.partition
        found = (logged.position.offset, logged.event.event_id)
        if part in expect:
            offset, want = expect.pop(part)
            if found != (offset, want):
                raise IntakeRecordGone(part, offset, want, found)
            continue
        if part in need and found[0] >= need[part][0]:
            offset, want = need.pop(part)
            if found != (offset, want):
                raise IntakeRecordGone(part, offset, want, found)
        state.apply(logged.event, logged.position)
    for part, (offset, want) in [*expect.items(), *need.items()]:
        raise IntakeRecordGone(part, offset, want, None)
