"""Reducers: what the log says about each reporting unit and each election, as plain values.

Why pure functions over frozen values: a projection must be a deterministic function of the log
prefix, so that a restart, a second runner or an auditor's replay reach the same state. The runner
owns IO (log, store, transactions); everything here only folds events into state, so the same code
serves the live runner, the paper trail (which replays one unit) and tests.

Two kinds of state, because events are keyed two ways (see ``Envelope.key``):

* ``UnitState``: everything keyed by a unit (reports, corrections, openings, coin tosses,
  rejected submissions, unit-level certification). A unit is identified by (election id, unit id):
  one log may hold several elections whose unit ids overlap. A unit's events share one partition
  (the partition key is the unit id), so they arrive in order.
* ``ElectionState``: events with no unit id (the election definition, election-wide certification,
  submissions rejected before a unit could be named). They live in their own partition, in no
  order relative to the units; the tallies (``projections.tally``) combine both kinds, so nothing
  here depends on which partition was read first.

An event that names no election (``is_unattributed``) becomes no state at all.

Dedupe by ``event_id`` happens before an event reaches a reducer: the runner asks the store which
ids it has processed (memory stays bounded by the number of units); ``Projection`` below does the
same in memory for tests and one-unit replays.

States serialise to canonical JSON (sorted keys, fractions as ``"n/d"``) for the store.

A unit's record of each tie it tossed is ``projections.tie_records`` (``TieRecord``, ``TossNote``, exported
here too).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import orjson

from ledger.events import (
    ElectionDefined,
    Event,
    Result,
    ResultCorrected,
    ResultReported,
    ResultsCertified,
    SubmissionRejected,
    TieBroken,
    UnitOpened,
)
from ledger.timestamps import iso_text
from projections.tie_records import TieRecord, TossNote, tossed_ties

__all__ = [
    "UnitStatus",
    "TossNote",
    "TieRecord",
    "UnitState",
    "ElectionState",
    "apply_unit",
    "apply_unit_events",
    "UnitFold",
    "apply_election",
    "is_election_event",
    "is_unattributed",
    "elections_defining",
    "Projection",
    "canonical_json",
]


class UnitStatus(enum.StrEnum):
    NOT_REPORTED = "not_reported"
    REPORTED = "reported"
    CORRECTED = "corrected"
    CERTIFIED = "certified"


_CANONICAL = orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME


def canonical_json(data: Any) -> str:
    """One spelling per value: the store compares and hashes these strings, and every unit's state and
    tally is spelt once per batch that touches it (a rebuild's hot path).

    The spelling is ``json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False)``'s, which
    stores hold; orjson writes the same text in a seventh of the time for every value states and
    tallies are made of (a property test holds the two equal). What orjson does not take (an int
    beyond 64 bits, a key that is not a string, a dataclass or datetime left unconverted) goes to
    ``json``, which spells it or refuses it as before. The two differ on values none of this text
    holds: floats (``1e-07`` against ``1e-7``; NaN as ``null``), and a plain Enum or a UUID, which
    orjson spells and json refuses. Counts are ints and exact values fractions' text."""
    try:
        return orjson.dumps(data, option=_CANONICAL).decode()
    except TypeError:
        return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _result_to_json(r: Result) -> dict[str, Any]:
    return {
        "first_alignment": dict(r.first_alignment),
        "final_alignment": dict(r.final_alignment),
        "attendance": r.attendance,
        "delegates_reported": None if r.delegates_reported is None else dict(r.delegates_reported),
        "worksheet_digest": r.worksheet_digest,
    }


def _result_from_json(d: Mapping[str, Any]) -> Result:
    return Result(
        first_alignment=d["first_alignment"],
        final_alignment=d["final_alignment"],
        attendance=d.get("attendance"),
        delegates_reported=d.get("delegates_reported"),
        worksheet_digest=d.get("worksheet_digest"),
    )


@dataclass(frozen=True, slots=True)
class UnitState:
    """One unit as the log describes it so far.

    ``result`` is the current result (the latest report or correction) and ``result_event_id`` the
    event that set it; ``stage`` is the correction stage when a correction set it. Tie resolutions
    are kept per (contenders, seats): the first toss of a tie settles it, a later one replaces it
    only as an official's redraw, and every later toss is noted on the tie (``TieRecord.later``); the
    caucus math uses a resolution only when the current result produces that very tie.
    """

    unit_id: str
    election_id: str
    status: UnitStatus = UnitStatus.NOT_REPORTED
    stage: str | None = None
    result: Result | None = None
    result_event_id: str | None = None
    result_recorded_at: str | None = None
    supersedes: str | None = None
    attendance_opened: int | None = None
    ties: tuple[TieRecord, ...] = ()
    rejected: int = 0
    certified_by: str | None = None
    events: int = 0
    last_event_id: str | None = None
    last_recorded_at: str | None = None

    @property
    def reporting(self) -> bool:
        return self.result is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "unit_id": self.unit_id,
            "election_id": self.election_id,
            "status": self.status.value,
            "stage": self.stage,
            "result": None if self.result is None else _result_to_json(self.result),
            "result_event_id": self.result_event_id,
            "result_recorded_at": self.result_recorded_at,
            "supersedes": self.supersedes,
            "attendance_opened": self.attendance_opened,
            "ties": [t.to_json() for t in self.ties],
            "rejected": self.rejected,
            "certified_by": self.certified_by,
            "events": self.events,
            "last_event_id": self.last_event_id,
            "last_recorded_at": self.last_recorded_at,
        }

    def dumps(self) -> str:
        return canonical_json(self.to_json())

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> UnitState:
        return cls(
            unit_id=d["unit_id"],
            election_id=d["election_id"],
            status=UnitStatus(d["status"]),
            stage=d.get("stage"),
            result=None if d.get("result") is None else _result_from_json(d["result"]),
            result_event_id=d.get("result_event_id"),
            result_recorded_at=d.get("result_recorded_at"),
            supersedes=d.get("supersedes"),
            attendance_opened=d.get("attendance_opened"),
            ties=tuple(TieRecord.from_json(t) for t in d.get("ties", ())),
            rejected=d.get("rejected", 0),
            certified_by=d.get("certified_by"),
            events=d.get("events", 0),
            last_event_id=d.get("last_event_id"),
            last_recorded_at=d.get("last_recorded_at"),
        )

    @classmethod
    def loads(cls, text: str) -> UnitState:
        return cls.from_json(json.loads(text))


_UNIT_FIELDS = tuple(f.name for f in fields(UnitState))


def _evolve(state: UnitState, changes: dict[str, Any], _new: Any = object.__new__, _set: Any = object.__setattr__) -> UnitState:
    """``dataclasses.replace`` for the one hot path (every event of a rebuild): the same copy with
    changes, without ``replace``'s per-field checks and keyword call (twice as fast)."""
    new = _new(UnitState)
    for name in _UNIT_FIELDS:
        _set(new, name, changes[name] if name in changes else getattr(state, name))
    return new  # type: ignore[no-any-return]


def apply_unit(state: UnitState | None, event: Event[Any]) -> UnitState:
    """Fold one unit-keyed event into the unit's state (``None``: nothing seen yet)."""
    return apply_unit_events(state, (event,))


def apply_unit_events(state: UnitState | None, events: Sequence[Event[Any]]) -> UnitState:
    """Fold a run of one unit's events, in log order, into the unit's state: the same state as
    ``apply_unit`` event by event, built once (see ``UnitFold``)."""
    if not events:
        raise ValueError("apply_unit_events needs at least one event")
    return UnitFold(state).add(events).state()


_RESULT_TYPES = frozenset({ResultReported.TYPE, ResultCorrected.TYPE})


class UnitFold:
    """A unit's events folded run after run, its state built once at the end.

    Why: copying a sixteen-field state was most of a fold's cost, and a rebuild meets each unit's
    events in many short runs (every decoded chunk spreads over all the units), so building the
    state per run cost more than the fold itself. A fold keeps only what its runs changed and at
    most two events (the last one, and the one that set the result), never the decoded history: a
    batch that folds all its runs this way still holds no more than one fold per unit it touched."""

    __slots__ = ("_base", "_changes", "_result_event", "_certified", "_has_result", "_ties", "_rejected", "_count", "_last")

    def __init__(self, state: UnitState | None) -> None:
        self._base = state
        self._changes: dict[str, Any] = {}
        self._result_event: Event[Any] | None = None  # the report or correction that set the result last
        self._certified: Event[Any] | None = None  # a certification of the result standing after it
        self._has_result = state is not None and state.result is not None
        self._ties: tuple[TieRecord, ...] = state.ties if state is not None else ()
        self._rejected = state.rejected if state is not None else 0
        self._count = 0
        self._last: Event[Any] | None = None

    def add(self, events: Sequence[Event[Any]]) -> UnitFold:
        """Fold the unit's next events (in log order, after those already added). Only which event
        set the result (and which certified it) is noted here; ``state`` reads the fields off them."""
        if not events:
            return self
        if self._base is None:
            self._base = UnitState(unit_id=events[0].unit_id, election_id=events[0].envelope.election_id)
        result_event, certified, has_result = self._result_event, self._certified, self._has_result
        ties, rejected = self._ties, self._rejected
        for event in events:
            if event.type in _RESULT_TYPES:
                # A new result replaces whatever stood before, correction or certification included.
                # Told by its type alone: a deferred event (``ledger.deferred_event``) decodes its
                # payload only if it is still the standing result when it is read.
                result_event, certified, has_result = event, None, True
                continue
            p = event.payload
            if isinstance(p, UnitOpened):
                # RULES §2: a unit opens before it reports. An opening recorded after a result (written
                # past the intake) would silently change the T of that result; it is ignored, and the
                # trail says so (``projections.trail.open_outcome``).
                if not has_result:
                    self._changes["attendance_opened"] = p.attendance
            elif isinstance(p, TieBroken):
                standing = result_event.payload.result if result_event is not None else self._base.result
                ties = tossed_ties(ties, event, p, standing)
            elif isinstance(p, SubmissionRejected):
                rejected += 1
            elif isinstance(p, ResultsCertified):
                if has_result:
                    certified = event
        self._result_event, self._certified, self._has_result = result_event, certified, has_result
        self._ties, self._rejected = ties, rejected
        self._count += len(events)
        self._last = events[-1]
        return self

    def state(self) -> UnitState:
        """The unit's state after every event added so far."""
        base, last = self._base, self._last
        if base is None or last is None:
            raise ValueError("a unit's state needs at least one event folded")
        changes = dict(self._changes)
        last_at = iso_text(last.recorded_at)
        result_event = self._result_event
        if result_event is not None:
            p = result_event.payload
            if isinstance(p, ResultCorrected):
                changes.update(result=p.result, result_event_id=result_event.event_id, supersedes=p.supersedes,
                               status=UnitStatus.CORRECTED, stage=p.stage.value, certified_by=None)
            else:
                changes.update(result=p.result, result_event_id=result_event.event_id, supersedes=None,
                               status=UnitStatus.REPORTED, stage=None, certified_by=None)
            changes["result_recorded_at"] = last_at if result_event is last else iso_text(result_event.recorded_at)
        if self._certified is not None:
            changes.update(status=UnitStatus.CERTIFIED, certified_by=self._certified.event_id)
        changes.update(events=base.events + self._count, last_event_id=last.event_id, last_recorded_at=last_at,
                       ties=self._ties, rejected=self._rejected)
        return _evolve(base, changes)


@dataclass(frozen=True, slots=True)
class ElectionState:
    """An election's definition and its election-wide events.

    ``revision`` is the id of the last event applied: the runner caches parsed definitions by it
    and knows, by a changed revision, that every unit's tally must be recomputed.
    """

    election_id: str
    definition: ElectionDefined | None = None
    defined_by: str | None = None
    defined_at: str | None = None
    certified_by: str | None = None
    certified_at: str | None = None
    certified_authority: str | None = None
    rejected: int = 0
    events: int = 0
    revision: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "election_id": self.election_id,
            "definition": None if self.definition is None else _definition_to_json(self.definition),
            "defined_by": self.defined_by,
            "defined_at": self.defined_at,
            "certified_by": self.certified_by,
            "certified_at": self.certified_at,
            "certified_authority": self.certified_authority,
            "rejected": self.rejected,
            "events": self.events,
            "revision": self.revision,
        }

    def dumps(self) -> str:
        return canonical_json(self.to_json())

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ElectionState:
        definition = d.get("definition")
        return cls(
            election_id=d["election_id"],
            definition=None if definition is None else ElectionDefined.from_avro(definition),
            defined_by=d.get("defined_by"),
            defined_at=d.get("defined_at"),
            certified_by=d.get("certified_by"),
            certified_at=d.get("certified_at"),
            certified_authority=d.get("certified_authority"),
            rejected=d.get("rejected", 0),
            events=d.get("events", 0),
            revision=d.get("revision"),
        )

    @classmethod
    def loads(cls, text: str) -> ElectionState:
        return cls.from_json(json.loads(text))


def _definition_to_json(defn: ElectionDefined) -> dict[str, Any]:
    # The Avro record form is already JSON-safe (ratios are numerator/denominator records).
    return defn.to_avro()


def is_election_event(event: Event[Any]) -> bool:
    """Events without a unit id belong to the election as a whole."""
    return not event.unit_id


def elections_defining(elections: Mapping[str, ElectionState], unit: str) -> list[str]:
    """The defined elections that list ``unit`` (by id, name or short name, case and spacing
    ignored): a unit named without an election belongs to the only one of these, if there is one."""
    want = " ".join(unit.split()).casefold()
    out = []
    for eid, state in elections.items():
        defn = state.definition
        if defn is not None and any(
            u.unit_id == unit or want in {" ".join(u.name.split()).casefold(), (u.short_name or "").casefold()}
            for u in defn.units
        ):
            out.append(eid)
    return sorted(out)


def is_unattributed(event: Event[Any]) -> bool:
    """An event that names no election (a submission refused before it could be attributed: no
    credential, a body that did not parse). It stays in the log and the event index, and the audit
    lists it, but it is folded into no state: were it a unit's first event, it would otherwise
    decide which election the unit's later reports count for."""
    return not event.envelope.election_id


def apply_election(state: ElectionState | None, event: Event[Any]) -> ElectionState:
    """Fold one election-keyed event into the election's state. A later ``ElectionDefined`` for
    the same election replaces the earlier definition (a corrected apportionment, say)."""
    if state is None:
        state = ElectionState(election_id=event.envelope.election_id)
    p = event.payload
    at = event.recorded_at.isoformat()
    if isinstance(p, ElectionDefined):
        state = replace(state, definition=p, defined_by=event.event_id, defined_at=at)
    elif isinstance(p, ResultsCertified):
        state = replace(state, certified_by=event.event_id, certified_at=at, certified_authority=p.authority)
    elif isinstance(p, SubmissionRejected):
        state = replace(state, rejected=state.rejected + 1)
    return replace(state, events=state.events + 1, revision=event.event_id)


@dataclass
class Projection:
    """Every unit and election folded in memory, with dedupe by event id.

    For tests, one-unit replays and small logs; the runner keeps the same states in a store instead,
    so that its memory is bounded by the number of units rather than events.
    """

    units: dict[tuple[str, str], UnitState] = field(default_factory=dict)  # by (election id, unit id)
    elections: dict[str, ElectionState] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)
    duplicates: int = 0
    unattributed: list[Event[Any]] = field(default_factory=list)

    def apply(self, event: Event[Any]) -> bool:
        """Apply ``event``; False (and nothing changes) if its id was applied before."""
        if event.event_id in self.seen:
            self.duplicates += 1
            return False
        self.seen.add(event.event_id)
        eid = event.envelope.election_id
        if is_unattributed(event):
            self.unattributed.append(event)
        elif is_election_event(event):
            self.elections[eid] = apply_election(self.elections.get(eid), event)
        else:
            key = (eid, event.unit_id)
            self.units[key] = apply_unit(self.units.get(key), event)
        return True

    def apply_all(self, events: Iterable[Event[Any]]) -> int:
        return sum(self.apply(e) for e in events)
