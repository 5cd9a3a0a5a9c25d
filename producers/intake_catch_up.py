"""Reading the log into the intake's state, and making sure it is still the log the state describes.

The first read after a start or an outage reads the last record applied in each partition again: it
must be the event the state remembers there (its anchor). So a log that was lost and refilled to beyond
the old positions (a memory-only broker restarted, then written to) is caught too, not only one that
is now shorter than the state's positions.
"""

from __future__ import annotations

from ledger.journal import Journal
from ledger.log.port import LogLostError
from producers.intake_state import IntakeState

__all__ = ["read_on"]


def read_on(journal: Journal, state: IntakeState, *, verify: bool) -> int | None:
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
    for logged in journal.read(start):
        part = logged.position.partition
        if part in expect:
            want = expect.pop(part)
            if logged.event.event_id != want:
                raise LogLostError(part, state.positions[part], logged.position.offset)
            continue
        state.apply(logged.event, logged.position)
    return next(iter(expect), None)
