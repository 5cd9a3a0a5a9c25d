"""The paper trail of one unit: every event that touched it, in log order, and its tally after each.

How it is computed (and why): the projection's event index (``proj_events``) knows where each of
the unit's events sits in the log. The trail reads exactly those records back from the log, the
source of truth, not from the store, and replays them through the same reducer and tally code as
the runner, so each step shows what the projection computed at that point. Events of the unit that
the projection has not reached yet (beyond its stored position) are read from the log too and
marked ``projected: false``. Tallies use the election definition as the projection holds it now.

Reading single positions through the ``EventLog`` port costs one short read per contiguous run
of offsets; a unit has a handful of events, so this stays cheap on either log.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from ledger.codec import Codec, CodecError, default_codec
from ledger.events import (
    Event,
    ResultCorrected,
    ResultReported,
    ResultsCertified,
    SubmissionRejected,
    TieBroken,
    UnitOpened,
)
from ledger.log.partitioning import partition_for
from ledger.log.port import EventLog, Position, StoredRecord
from ledger.record_headers import writer_of
from projections.reducers import ElectionState, TossNote, UnitState, apply_unit
from projections.stores.port import StoreReader
from projections.tally import ElectionContext, UnitTally, compute_unit_tally, election_context

__all__ = ["TrailEntry", "UnattributedEntry", "Trail", "unit_trail", "describe_changes", "toss_outcome", "ignored_because"]


@dataclass(frozen=True)
class TrailEntry:
    position: Position
    event: Event[Any]
    projected: bool
    changes: tuple[str, ...]
    state: UnitState
    tally: UnitTally
    writer: str = ""
    """Who wrote the record to the log (its ``caucus-writer`` header): the intake, the importer, or an
    official writing directly, whose events carry whatever actor the official gave them."""

    def to_json(self) -> dict[str, Any]:
        env = self.event.envelope
        return {
            "position": str(self.position),
            "projected": self.projected,
            "event_id": env.event_id,
            "type": self.event.type,
            "actor": env.actor,
            "writer": self.writer,
            "channel": env.channel.value,
            "occurred_at": env.occurred_at.isoformat(),
            "recorded_at": env.recorded_at.isoformat(),
            "idempotency_key": env.idempotency_key,
            "details": event_details(self.event),
            "changes": list(self.changes),
            "tally": self.tally.to_json(),
        }


@dataclass(frozen=True)
class UnattributedEntry:
    """A record that names the unit but no election (refused before it could be attributed)."""

    position: Position
    event: Event[Any]
    projected: bool
    writer: str = ""

    def to_json(self) -> dict[str, Any]:
        env = self.event.envelope
        return {
            "position": str(self.position),
            "projected": self.projected,
            "event_id": env.event_id,
            "type": self.event.type,
            "actor": env.actor,
            "writer": self.writer,
            "channel": env.channel.value,
            "recorded_at": env.recorded_at.isoformat(),
            "details": event_details(self.event),
        }


@dataclass(frozen=True)
class Trail:
    unit_id: str
    election_id: str
    entries: tuple[TrailEntry, ...]
    unattributed: tuple[UnattributedEntry, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "unit_id": self.unit_id,
            "election_id": self.election_id or None,  # None: no election is defined (refusals only)
            "events": [e.to_json() for e in self.entries],
            "unattributed": [e.to_json() for e in self.unattributed],
        }


def event_details(event: Event[Any]) -> dict[str, Any]:
    """The parts of a payload a reader of the trail needs (reason, authority, errors, toss)."""
    p = event.payload
    if isinstance(p, ResultReported):
        return {"reporter": p.reporter, "warnings": [f"{w.field}: {w.message}" for w in p.warnings]}
    if isinstance(p, ResultCorrected):
        return {
            "stage": p.stage.value, "reason": p.reason, "authority": p.authority, "supersedes": p.supersedes,
            "warnings": [f"{w.field}: {w.message}" for w in p.warnings],
        }
    if isinstance(p, TieBroken):
        return {
            "contenders": list(p.contenders), "seats": p.seats, "winners": list(p.winners), "method": p.method.value,
            "caller": p.caller, "witnesses": list(p.witnesses), "reason": p.reason, "supersedes": p.supersedes,
        }
    if isinstance(p, SubmissionRejected):
        return {
            "command": p.command, "sender": p.sender, "raw_input": p.raw_input,
            "errors": [{"field": e.field, "code": e.code, "message": e.message} for e in p.errors],
        }
    if isinstance(p, UnitOpened):
        return {"attendance": p.attendance}
    if isinstance(p, ResultsCertified):
        return {"authority": p.authority, "statement": p.statement}
    return {}


def _v(value: Any) -> str:
    """A value in a sentence: "none" rather than Python's None."""
    return "none" if value is None else str(value)


def _diff_counts(label: str, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> list[str]:
    b, a = dict(before or {}), dict(after or {})
    out = []
    for k in sorted(set(b) | set(a)):
        if b.get(k, 0) != a.get(k, 0):
            out.append(f"{label} {k}: {b.get(k, 0)} -> {a.get(k, 0)}")
    return out


def toss_outcome(event: Event[Any], after: UnitState) -> str | None:
    """What became of a toss of a tie that was already settled, read off the unit's state after it
    (so the trail says what the tally did): an official's redraw, or a contradicting toss that was
    ignored. None for a first toss, or an event that is not a toss."""
    p = event.payload
    if not isinstance(p, TieBroken):
        return None
    tie = next((t for t in after.ties if t.key == p.tie), None)
    note = tie.note_of(event.event_id) if tie is not None else None
    if tie is None or note is None:
        return None
    what = f"{tie.seats} seat(s) among {', '.join(tie.contenders)}"
    before = f"toss {note.against} (winners {', '.join(note.against_winners)})"
    if note.redrew:
        return f"tie redrawn by an official: {what}; replaces {before} with winners {', '.join(note.winners)}; reason: {note.reason}"
    return f"toss ignored: {what} was already settled by {before}; {ignored_because(note)}; the tally keeps that toss"


def open_outcome(event: Event[Any], before: UnitState | None) -> str | None:
    """An opening recorded after the unit's result: the reducers ignore it (RULES §2: a unit opens
    before it reports; its T changes only by a correction), and the trail says so."""
    if not isinstance(event.payload, UnitOpened) or before is None or before.result is None:
        return None
    return (f"opening ignored: attendance {event.payload.attendance} recorded after the result "
            f"{before.result_event_id}; the result's T changes only by a correction")


def ignored_because(note: TossNote) -> str:
    """Why a later toss of a settled tie did not replace the toss that stood."""
    if not note.supersedes:
        return "a second toss that names no toss it supersedes"
    if note.supersedes != note.against:
        return f"it names {note.supersedes} as the toss it supersedes, which is not the toss that stood"
    return "a redraw that gives no reason"


def describe_changes(
    before: UnitState | None, after: UnitState, t_before: UnitTally | None, t_after: UnitTally, *, event: Event[Any] | None = None
) -> tuple[str, ...]:
    """What an event changed, in words: status, numbers, delegates, SDEs, ties, rejections; for a
    toss of a tie already settled (``event``), whether it redrew the tie or was ignored."""
    out: list[str] = []
    status_b = (t_before.status, t_before.stage) if t_before else ("not_reported", None)
    if status_b != (t_after.status, t_after.stage):
        fmt = lambda s: s[0] + (f" ({s[1]})" if s[1] else "")  # noqa: E731
        out.append(f"status: {fmt(status_b)} -> {fmt((t_after.status, t_after.stage))}")
    if (before.attendance_opened if before else None) != after.attendance_opened:
        out.append(f"attendance at opening: {_v(before.attendance_opened if before else None)} -> {_v(after.attendance_opened)}")
    if t_before is None or t_before.attendance != t_after.attendance:
        if t_after.attendance is not None:
            out.append(f"T (attendance used): {_v(t_before.attendance if t_before else None)} -> {t_after.attendance} ({t_after.attendance_source})")
    if t_before is None or t_before.delegates != t_after.delegates:
        if t_after.delegates is not None:
            out.append(f"D: {_v(t_before.delegates if t_before else None)} -> {t_after.delegates} ({t_after.delegates_source})")
    out += _diff_counts("first", t_before.first if t_before else None, t_after.first)
    out += _diff_counts("final", t_before.final if t_before else None, t_after.final)
    out += _diff_counts("CDs reported", t_before.cds_reported if t_before else None, t_after.cds_reported)
    out += _diff_counts("CDs computed", t_before.cds_computed if t_before else None, t_after.cds_computed)
    out += _diff_counts("CDs", t_before.cds if t_before else None, t_after.cds)
    zero = Decimal("0.0000")
    sde_b = dict(t_before.sde_display) if t_before else {}
    for k in sorted(set(sde_b) | set(t_after.sde_display)):
        if sde_b.get(k, zero) != t_after.sde_display.get(k, zero):
            out.append(f"SDE {k}: {sde_b.get(k, zero)} -> {t_after.sde_display.get(k, zero)}")
    pend_b = {(p.contenders, p.seats) for p in (t_before.pending if t_before else ())}
    pend_a = {(p.contenders, p.seats) for p in t_after.pending}
    for c, s in sorted(pend_a - pend_b):
        out.append(f"tie pending: {s} seat(s) among {', '.join(c)}")
    for c, s in sorted(pend_b - pend_a):
        out.append(f"tie settled: {s} seat(s) among {', '.join(c)}")
    if (before.rejected if before else 0) != after.rejected:
        out.append(f"rejected submissions: {before.rejected if before else 0} -> {after.rejected}")
    opened = open_outcome(event, before) if event is not None else None
    if opened is not None:
        out.append(opened)
    outcome = toss_outcome(event, after) if event is not None else None
    if outcome is not None:
        out.append(outcome)
    elif before is not None and before.ties != after.ties and not (pend_b - pend_a):
        # Pending ties are shown only where the computed figure is the official one; a toss that moved
        # the computed delegates did settle a tie of the current result even when the chair reported CDs.
        moved = t_before is not None and t_before.cds_computed != t_after.cds_computed
        out.append("coin toss recorded: settles the computed allocation" if moved
                   else "coin toss recorded (matches no tie of the current result)")
    return tuple(out)


def _decode(codec: Codec, rec: StoredRecord) -> Event[Any]:
    """Decode, naming the record's position if it cannot be (an auditor goes there next)."""
    try:
        return codec.decode(rec.value)
    except CodecError as exc:
        raise CodecError(f"the record at {rec.position} (key {rec.key!r}) cannot be decoded: {exc}; "
                         "`caucus verify` checks every record of the log") from exc


def _runs(offsets: list[int]) -> Iterator[tuple[int, int]]:
    """Contiguous runs (first, count) of sorted offsets."""
    start = prev = offsets[0]
    for off in offsets[1:]:
        if off != prev + 1:
            yield start, prev - start + 1
            start = off
        prev = off
    yield start, prev - start + 1


def _read_positions(log: EventLog, partition: int, offsets: list[int], marks: dict[int, int]) -> list[StoredRecord]:
    out: list[StoredRecord] = []
    for first, count in _runs(sorted(set(offsets))):
        start = {p: m for p, m in marks.items()}
        start[partition] = first
        out.extend(log.read(start, max_records=count))
    return out


def _read_tail(log: EventLog, partition: int, start_offset: int, marks: dict[int, int], key: str) -> list[StoredRecord]:
    if marks.get(partition, 0) <= start_offset:
        return []
    start = dict(marks)
    start[partition] = start_offset
    return [r for r in log.read(start) if r.key == key]


def _unit_records(
    log: EventLog, reader: StoreReader, codec: Codec, election_id: str, unit_id: str, marks: dict[int, int]
) -> list[tuple[StoredRecord, Event[Any], bool]]:
    """The unit's records of one election in log order: those the index names, then those beyond the
    projection's stored position (``projected`` False). The partition key is the unit id alone, so
    records of other elections that share the unit id are read past, never taken."""
    rows = reader.events_for(election_id, unit_id)
    partition = rows[0].partition if rows else partition_for(unit_id, log.partitions)
    records = _read_positions(log, partition, [r.offset for r in rows], marks) if rows else []
    stored = reader.positions()
    tail_from = stored[partition].next_offset if partition in stored else 0
    tail = _read_tail(log, partition, tail_from, marks, unit_id)
    indexed = {r.offset for r in rows}
    events = [(rec, _decode(codec, rec), True) for rec in records]
    events += [(rec, _decode(codec, rec), False) for rec in tail if rec.position.offset not in indexed]
    events = [item for item in events if item[1].envelope.election_id == election_id and item[1].unit_id == unit_id]
    events.sort(key=lambda item: item[0].position)
    return events


def unit_trail(
    log: EventLog,
    reader: StoreReader,
    election_id: str,
    unit_id: str,
    *,
    codec: Codec | None = None,
    rule_set: str | None = None,
    context: ElectionContext | None = None,
) -> Trail:
    """The trail of unit ``unit_id`` of election ``election_id``. Submissions for the unit that were
    refused before they could be attributed to any election are listed apart (``unattributed``):
    they are in the log, but part of no unit's state. ``election_id`` "" (no election is defined yet):
    those refusals alone."""
    codec = codec or default_codec()
    marks = log.high_watermarks()
    events = _unit_records(log, reader, codec, election_id, unit_id, marks) if election_id else []
    loose = _unit_records(log, reader, codec, "", unit_id, marks)
    if context is None:
        row = reader.elections().get(election_id)
        state = ElectionState.loads(row.state) if row else None
        context = election_context(state, election_id, rule_set=rule_set)
    entries = []
    prev_state: UnitState | None = None
    prev_tally: UnitTally | None = None
    seen: set[str] = set()
    for rec, event, projected in events:
        if event.event_id in seen:
            continue  # a retry stored twice: the projection dropped it too
        seen.add(event.event_id)
        new_state = apply_unit(prev_state, event)
        tally = compute_unit_tally(new_state, context)
        changes = describe_changes(prev_state, new_state, prev_tally, tally, event=event)
        entries.append(TrailEntry(rec.position, event, projected, changes, new_state, tally, writer_of(rec.headers)))
        prev_state, prev_tally = new_state, tally
    unattributed = tuple(
        UnattributedEntry(rec.position, event, projected, writer_of(rec.headers)) for rec, event, projected in loose
    )
    return Trail(unit_id, election_id, tuple(entries), unattributed)
