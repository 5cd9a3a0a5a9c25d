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
from ledger.log.port import LogLostError
from producers.intake_state import IntakeState

__all__ = ["read_on"]


def read_on(journal: Journal, state: IntakeState, *, verify: bool,
            seen: Mapping[int, tuple[int, str]] | None = None) -> int | None:
    """Apply to ``state`` what the log holds beyond its positions; with ``verify``, check the anchors
    first. ``LogLostError`` if an anchor was replaced by another event, and the partition returned
    whose anchor did not come back at all (None: the log is the one the state describes); either way
    the state is then partly caught up and the caller must not go on with it. ``LogUnavailableError``
    passes through."""
    start = dict(state.positions)
    expect: dict[int, str] = {}
    if verify:
        for part, offset in state.positions.items():
            if offset > 0 and part in state.anchors:
                start[part] = offset - 1
                expect[part] = state.anchors[part]
    need = {part: (position - 1, event_id) for part, (position, event_id) in (seen or {}).items()
            if position > state.positions.get(part, 0)}  # what the snapshot covers, its anchor vouches for
    for logged in journal.read(start):
        part = logged.position.partition
        if part in expect:
            want = expect.pop(part)
            if logged.event.event_id != want:
                raise LogLostError(part, state.positions[part], logged.position.offset)
            continue
        if part in need and logged.position.offset >= need[part][0]:
            offset, event_id = need.pop(part)
            if logged.position.offset != offset or logged.event.event_id != event_id:
                raise LogLostError(part, offset + 1, logged.position.offset)
        state.apply(logged.event, logged.position)
    missing = [*expect, *need]
    return missing[0] if missing else None
