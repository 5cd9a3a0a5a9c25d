"""As-of tallies read from a projection's unit history, with the log's replay as reference and fallback.

Why: replaying the log (``projections.asof.replay``) decodes every record up to the cut and keeps every
event id, so "the tally at 21:00" cost 49 s and memory growing with the log at 1M events. The runner
keeps each unit's state after every batch with where that batch's events of the unit lie
(``projections.unit_history``); here, per unit (and per election), the last state whose events all
fall inside the cut is read, and a unit whose batch straddles the cut has just those events folded
from the log on top of it (decoding only the records keyed by such units). Memory holds one state
per unit; time grows with the number of units and the straddled events, not with the log.

The answer is the replay's: the same reducers over the same events (a property test compares both
on random histories). Where the store cannot say which events a cut holds, ``history_tally`` gives
the reason instead and the caller replays: a store or set without history (older, or in memory), a
set built from another log, a projection behind the cut (a time needs it caught up with the log), a
cut by time and position at once, or, for a time, a unit whose events were recorded out of order.
For a time, the positions shown are those of the last events of units and elections inside it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC
from typing import Any, Protocol, cast

from ledger.codec import Codec, CodecError, default_codec
from ledger.events import Event
from ledger.log.port import EventLog
from ledger.timestamps import iso_text
from projections.asof import AsOfError, AsOfState, AsOfTally, Cut, check_cut, inside, select_election
from projections.reducers import ElectionState, UnitState, apply_election, apply_unit
from projections.stores.port import ProjectionStore, SetInfo, UnitKey
from projections.tally import compute_unit_tally, election_context

__all__ = ["history_tally"]

class HistoryReader(Protocol):
    """What the history needs of a store's reader (the SQL stores' ``SqlReader``; the in-memory one has none)."""

    def history_kept(self) -> bool: ...

    def history_disordered(self) -> bool: ...

    def history_at_offsets(self, ends: Mapping[int, int], rest: int) -> list[tuple[Any, ...]]: ...

    def history_at_time(self, at: str) -> list[tuple[Any, ...]]: ...

    def indexed_at(self, event_ids: Sequence[str]) -> dict[str, tuple[int, int]]: ...


_Tail = dict[UnitKey, tuple[int, int, int]]  # key -> (partition, first offset to read, offset to stop before)


def history_tally(store: ProjectionStore, info: SetInfo | None, log: EventLog, cut: Cut, *, election_id: str | None = None,
                  rule_set: str | None = None, unit: str | None = None, codec: Codec | None = None) -> AsOfTally | str:
    """The tallies at ``cut`` from ``info``'s unit history, or why the history cannot answer."""
    if info is None:
        return "no projection is serving"
    if cut.at is not None and cut.ends is not None:
        return "a cut by time and by log position at once"
    if info.source != f"log:{log.log_id}":
        return "the projection was built from another log"
    marks = log.high_watermarks()
    check_cut(cut, marks, log.partitions)  # the replay's errors for positions the log does not hold
    with store.reader(info.set_id) as any_reader:
        if not hasattr(any_reader, "history_kept"):
            return "this projection store keeps no history"
        reader = cast(HistoryReader, any_reader)
        stored = {p: row.next_offset for p, row in any_reader.positions().items()}
        try:
            kept = reader.history_kept()
        except Exception:  # noqa: BLE001 (a store made before the history: no such table)
            return "this projection store keeps no history (made by an older version)"
        if not kept:
            return "this projection was built before its history was kept"
        ends = {p: marks.get(p, 0) if cut.end_of(p) is None else cut.end_of(p) or 0 for p in range(log.partitions)}
        behind = sum(max(0, end - stored.get(p, 0)) for p, end in ends.items())
        if behind:
            if cut.at is not None:  # which of them fall inside the cut only their times can tell: not read here
                return (f"the projection has not read the log's last {behind} record(s), which may have been recorded "
                        "before the cut (`caucus project` brings them in)")
            return f"the projection has not read {behind} record(s) inside the cut (`caucus project` brings them in)"
        if cut.at is not None:
            if reader.history_disordered():
                return "some unit's events were recorded out of order"
            rows = reader.history_at_time(iso_text(cut.at.astimezone(UTC)))
        else:
            rows = reader.history_at_offsets(ends, 0)
        units, elections, tails, positions = _pick(rows, cut, ends)
        if tails:
            _fold_tails(log, reader, codec or default_codec(), cut, tails, units, elections, positions)
    state = AsOfState(cut=cut, units=units, elections=elections, positions=positions, high_watermarks=dict(marks))
    chosen = select_election(elections, election_id, unit=unit, where=inside(cut))
    ctx = election_context(elections[chosen], chosen, rule_set=rule_set)
    if ctx.rules_error:
        raise AsOfError(ctx.rules_error)
    tallies = {uid: compute_unit_tally(s, ctx) for (eid, uid), s in units.items() if eid == chosen}
    return AsOfTally(state, ctx, tallies)


def _pick(rows: Sequence[tuple[Any, ...]], cut: Cut, ends: Mapping[int, int]) -> tuple[
        dict[UnitKey, UnitState], dict[str, ElectionState], _Tail, dict[int, int]]:
    """Each key's chosen state, and the keys whose next entry straddles the cut (their tail to read)."""
    units: dict[UnitKey, UnitState] = {}
    elections: dict[str, ElectionState] = {}
    tails: _Tail = {}
    positions: dict[int, int] = {}
    at = None if cut.at is None else iso_text(cut.at.astimezone(UTC))
    for eid, uid, part, chosen, text, next_first, next_last, next_low in rows:
        part = int(part)
        if chosen is not None:
            if uid:
                units[eid, uid] = UnitState.loads(text)
            else:
                elections[eid] = ElectionState.loads(text)
            if at is not None:
                positions[part] = max(positions.get(part, 0), int(chosen) + 1)
        start = 0 if chosen is None else int(chosen) + 1
        if next_first is None:
            continue
        if at is None and int(next_first) < ends[part]:
            tails[eid, uid] = (part, start, ends[part])
        elif at is not None and next_low <= at:
            tails[eid, uid] = (part, start, int(next_last) + 1)
    if at is None:
        positions = {p: end for p, end in ends.items() if end > 0}
    return units, elections, tails, positions


def _fold_tails(log: EventLog, reader: HistoryReader, codec: Codec, cut: Cut, tails: _Tail, units: dict[UnitKey, UnitState],
                elections: dict[str, ElectionState], positions: dict[int, int]) -> None:
    """Fold the straddled keys' events inside the cut onto their chosen states, as the replay would:
    in log order, a repeated event id dropped (the index says where each id was first applied)."""
    starts: dict[int, int] = {}
    stops: dict[int, int] = {}
    wanted: dict[tuple[int, str], list[UnitKey]] = {}  # elections may share a unit id, hence a record key
    for key, (part, start, stop) in tails.items():
        starts[part] = min(starts.get(part, start), start)
        stops[part] = max(stops.get(part, stop), stop)
        wanted.setdefault((part, key[1] or f"election:{key[0]}"), []).append(key)
    marks = log.high_watermarks()
    found: list[tuple[int, int, UnitKey, Event[Any]]] = []
    done: set[int] = set()
    for rec in log.read({p: starts.get(p, marks.get(p, 0)) for p in range(log.partitions)}):
        p, off = rec.position.partition, rec.position.offset
        if off >= stops.get(p, 0):
            done.add(p)
            if len(done) == len(stops):
                break
            continue
        keys = [k for k in wanted.get((p, rec.key), ()) if tails[k][1] <= off < tails[k][2]]
        if not keys:
            continue
        try:
            event = codec.decode(rec.value)
        except CodecError as exc:
            raise AsOfError(f"the record at {rec.position} cannot be decoded: {exc}") from exc
        for key in keys:
            if event.envelope.election_id == key[0] and (cut.at is None or event.recorded_at <= cut.at):
                found.append((p, off, key, event))
    first = reader.indexed_at([ev.event_id for *_, ev in found])
    for p, off, key, event in found:
        if first.get(event.event_id, (p, off)) != (p, off):
            continue  # a repeat of an event applied before (``exactly_once.HELD_BY_INDEX``)
        if key[1]:
            units[key] = apply_unit(units.get(key), event)
        else:
            elections[key[0]] = apply_election(elections.get(key[0]), event)
        if cut.at is not None:
            positions[p] = max(positions.get(p, 0), off + 1)
