"""Each unit's (and election's) state after every batch, with where that batch's events of it lie.

Why: "what did the tally say at 21:00?" replayed from the log costs a decode of every record up to
then, and memory for every event id. The runner already builds each unit's state once per batch, so
it keeps that text beside where the batch's events of the unit sit (partition, first and last
offset) and when they were recorded (earliest, latest). An as-of read (``projections.asof_store``)
then takes per unit the last state whose events all fall inside the cut, and folds from the log
only the few events of a unit whose batch straddles the cut. Written in the batch's transaction,
from the same index rows the batch writes (duplicates already left out), so it is exactly once too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from projections.stores.port import ElectionRow, EventRow, HistoryRow, UnitKey, UnitRow

__all__ = ["RunBounds", "history_rows"]


@dataclass(slots=True)
class _Run:
    partition: int
    first: int
    last: int
    low: str
    high: str
    sorted: bool


class RunBounds:
    """Where a batch's events of each unit lie, noted chunk by chunk from the index rows it keeps.
    Times are the index's text (``iso_text`` of UTC instants, which sort as the instants do)."""

    def __init__(self) -> None:
        self.runs: dict[UnitKey, _Run] = {}

    def note(self, rows: Iterable[EventRow]) -> None:
        runs = self.runs
        for _event_id, unit_key, election_id, partition, offset, _type, at in rows:
            if not election_id:
                continue  # names no election: part of no state
            key = (election_id, "" if unit_key == f"election:{election_id}" else unit_key)
            run = runs.get(key)
            if run is None:
                runs[key] = _Run(partition, offset, offset, at, at, True)
                continue
            if at < run.high:
                run.sorted = False
            else:
                run.high = at
            run.low = min(run.low, at)
            run.last = offset


def history_rows(bounds: RunBounds, units: Iterable[UnitRow], elections: Iterable[ElectionRow]) -> list[HistoryRow]:
    """A history row per unit and election the batch changed, with the bounds of its events."""
    runs: Mapping[UnitKey, _Run] = bounds.runs
    out: list[HistoryRow] = []
    for key, state in [*(((u.election_id, u.unit_id), u.state) for u in units), *(((e.election_id, ""), e.state) for e in elections)]:
        run = runs.get(key)
        if run is not None:
            out.append(HistoryRow(key[0], key[1], run.partition, run.first, run.last, run.low, run.high, run.sorted, state))
    return out
