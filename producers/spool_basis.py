"""What a spooled event was judged against, and whether the log still holds it.

An event is spooled when the log is out of reach, judged against the intake's state as of its last
read of the log. Forwarded later, it is checked again for conflicts with the log as it then is
(``intake_forward``), but a conflict check cannot see that the log it rested on is gone: a
memory-only broker that restarted empty refuses nothing (no second result, no tie settled), and the
reports would be filed against an election the log no longer defines. The intake's own check for a
lost log compares the log with its state, and a process that flushes from a snapshot taken before
the log had records (``caucus spool flush`` beside a service that spooled) has nothing to compare.

So each spooled event keeps its basis: per partition, the state's position and the event last applied
there (the state's anchor), and the snapshot generation of that state. Before forwarding, the log
must reach each position and hold the same event just before it; otherwise it is a lost log and the
events stay. A state rebuilt since (``caucus intake rebuild``, a new generation) has accepted the log
as it now is: events judged against an older generation are only checked again for conflicts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ledger.journal import Journal
from ledger.log.records_at import records_at
from producers.intake_state import IntakeState
from producers.spool import SpooledEvent

__all__ = ["basis_of", "basis_missing"]


def basis_of(state: IntakeState) -> dict[int, tuple[int, str]]:
    """Per partition, the next offset of ``state`` and the event applied just before it."""
    return {p: (n, state.anchors[p]) for p, n in state.positions.items() if n > 0 and p in state.anchors}


def basis_missing(journal: Journal, pending: Iterable[SpooledEvent], generation: int,
                  positions: Mapping[int, int]) -> str | None:
    """Why the log (read up to ``positions``, the caught-up state's) is not the one the events of
    ``generation`` among ``pending`` were judged against, or None."""
    need: dict[int, tuple[int, str]] = {}
    for item in pending:
        if item.generation == generation:
            for part, (offset, anchor) in item.basis.items():
                if offset > need.get(part, (0, ""))[0]:
                    need[part] = (offset, anchor)
    for part, (offset, anchor) in sorted(need.items()):
        if positions.get(part, 0) < offset:
            return (f"partition {part} holds {positions.get(part, 0)} record(s), fewer than the {offset} the spooled "
                    "events were judged against")
        found = records_at(journal.log, {part: offset - 1}, positions).get(part)
        if found is None or journal.codec.decode(found.value).event_id != anchor:
            return (f"partition {part} no longer holds, at offset {offset - 1}, the event the spooled events were judged "
                    "after")
    return None
