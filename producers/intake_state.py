"""What the intake must know to judge a command, folded from the events of the log.

The intake refuses a second report for a unit, a correction of an event that is already superseded, a
key reused for different content. All of that is a function of the events recorded so far, so the state
is a reducer over events: ``apply`` takes one event (and where it sits in the log) and updates the
state; it does no IO and is deterministic, so the same log always gives the same state, whether it was
rebuilt from scratch, loaded from a snapshot and caught up, or layered over spooled events.

Rules the reducer keeps, matching the projections:
- an event whose idempotency key was already seen is a duplicate and changes nothing (the second copy of
  a retried append, a spooled event that reached the log after it was applied from the spool);
- a unit's current result is the last ``ResultReported``/``ResultCorrected`` applied; a correction marks
  the event it names as superseded;
- a tie (election, unit, contenders, seats) is settled by its first ``TieBroken``; a later toss replaces
  it only as an official's redraw (``TieBroken.redraws``), anything else changes nothing here either;
- ``SubmissionRejected`` events never claim a key (their keys are ``rejected:<event id>:<claimed key>``),
  so a refused command can be sent again once its problem is fixed; the last refusal per claimed key is
  kept so a sender can ask what became of it.

``Layered`` answers the same questions for "the log plus the spool": the intake keeps events it had to
spool in a second state on top of the log's.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from ledger.events import (
    Channel,
    ElectionDefined,
    Event,
    Problem,
    Result,
    ResultCorrected,
    ResultReported,
    ResultsCertified,
    SubmissionRejected,
    TieBroken,
    UnitDefinition,
    UnitOpened,
    new_event,
)
from ledger.log.port import Position
from ledger.render import event_from_json, event_to_json
from producers.commands import REJECTED_KEY_PREFIX

__all__ = [
    "ElectionInfo",
    "UnitIntakeStatus",
    "ResultRecord",
    "TossRecord",
    "TieKey",
    "Claim",
    "RejectionRecord",
    "IntakeView",
    "IntakeState",
    "Layered",
    "fingerprint",
    "rejection_key",
    "claimed_key",
    "SNAPSHOT_FORMAT",
]

SNAPSHOT_FORMAT = 5
"""3: claims and refusals keep who sent them (receipts are shown to their sender and officials only).
4: an election's latest definition stands (a format 3 snapshot holds its first)."""
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def fingerprint(event: Event[Any]) -> str:
    """What makes two submissions "the same command": type, election, unit, sender and payload.

    Times and the channel are left out (a retry has a new clock and may come another way), and so are
    the warnings, which depend on the state at the time and not on what was sent.
    """
    env = event.envelope
    return _digest(event.type, env.election_id, env.unit_id, env.actor, event.payload)


def _digest(type_name: str, election_id: str, unit_id: str, actor: str, payload: Any) -> str:
    body = payload.to_avro()
    body.pop("warnings", None)
    text = json.dumps([type_name, election_id, unit_id, actor, body], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def rejection_key(event_id: str, claimed: str) -> str:
    return f"{REJECTED_KEY_PREFIX}{event_id}:{claimed}"


def claimed_key(rejection_idempotency_key: str) -> str:
    """The key the refused sender used, recovered from a SubmissionRejected event's own key."""
    rest = rejection_idempotency_key[len(REJECTED_KEY_PREFIX) :]
    _event_id, _sep, claimed = rest.partition(":")
    return claimed


@dataclass(frozen=True, slots=True)
class ElectionInfo:
    election_id: str
    event_id: str
    definition: ElectionDefined
    units: Mapping[str, UnitDefinition]
    candidates: frozenset[str]


@dataclass(frozen=True, slots=True)
class UnitIntakeStatus:
    """Where one unit stands: opened (with T), and its current result event."""

    opened_event_id: str | None = None
    attendance: int | None = None
    result_event_id: str | None = None
    result: Result | None = None


@dataclass(frozen=True, slots=True)
class ResultRecord:
    event_id: str
    election_id: str
    unit_id: str
    type: str


TieKey = tuple[str, str, tuple[str, ...], int]
"""(election_id, unit_id, contenders sorted, seats): one tie, settled by one standing toss."""


@dataclass(frozen=True, slots=True)
class TossRecord:
    event_id: str
    election_id: str
    unit_id: str
    contenders: tuple[str, ...]
    seats: int
    winners: tuple[str, ...]

    @property
    def tie(self) -> TieKey:
        return self.election_id, self.unit_id, self.contenders, self.seats


@dataclass(slots=True)
class Claim:
    """An idempotency key taken by an accepted event: what to answer when the key comes again.
    ``position`` is None while the event waits in the spool.

    The content fingerprint is computed only when asked for (a key sent again is rare, and hashing
    every event would double the time to fold a log); until then the claim holds what it is made of."""

    key: str
    event_id: str
    event_type: str
    election_id: str
    unit_id: str
    position: Position | None
    digest: str | None = None
    basis: tuple[str, Any] | None = None  # (actor, payload) until the digest is computed
    actor: str = ""  # who sent the command: its receipt is theirs (and officials') to read

    def fingerprint(self) -> str:
        if self.digest is None:
            assert self.basis is not None
            actor, payload = self.basis
            self.digest = _digest(self.event_type, self.election_id, self.unit_id, actor, payload)
            self.basis = None
        return self.digest


@dataclass(frozen=True, slots=True)
class RejectionRecord:
    key: str
    event_id: str
    command: str
    errors: tuple[Problem, ...]
    position: Position | None
    sender: str = ""


class IntakeView(Protocol):
    """The questions validation asks; answered by ``IntakeState`` and by ``Layered``."""

    def election(self, election_id: str) -> ElectionInfo | None: ...
    def election_ids(self) -> list[str]: ...
    def elections_of_unit(self, unit_id: str) -> list[str]: ...
    def unit(self, election_id: str, unit_id: str) -> UnitIntakeStatus: ...
    def result_event(self, event_id: str) -> ResultRecord | None: ...
    def superseded_by(self, event_id: str) -> str | None: ...
    def claim(self, key: str) -> Claim | None: ...
    def rejection(self, key: str) -> RejectionRecord | None: ...
    def settled_by(self, tie: TieKey) -> str | None: ...
    def toss(self, event_id: str) -> TossRecord | None: ...
    def tosses_in(self, election_id: str) -> list[TossRecord]: ...
    def certified_by(self, election_id: str) -> str | None: ...


_NO_UNIT = UnitIntakeStatus()


@dataclass
class IntakeState:
    """The reducer's state (see module docstring). ``positions`` is the next offset per partition,
    ``anchors`` the event id last applied per partition (to check a snapshot still matches its log)."""

    positions: dict[int, int] = field(default_factory=dict)
    anchors: dict[int, str] = field(default_factory=dict)
    elections: dict[str, ElectionInfo] = field(default_factory=dict)
    units_index: dict[str, list[str]] = field(default_factory=dict)
    units: dict[tuple[str, str], UnitIntakeStatus] = field(default_factory=dict)
    results: dict[str, ResultRecord] = field(default_factory=dict)
    superseded: dict[str, str] = field(default_factory=dict)
    claims: dict[str, Claim] = field(default_factory=dict)
    rejections: dict[str, RejectionRecord] = field(default_factory=dict)
    tosses: dict[str, TossRecord] = field(default_factory=dict)
    settled: dict[TieKey, str] = field(default_factory=dict)
    certified: dict[str, str] = field(default_factory=dict)  # election id -> its (last) certification event
    applied: int = 0

    # -- the reducer --------------------------------------------------------------------------------

    def apply(self, event: Event[Any], position: Position | None = None) -> bool:
        """Fold one event in; returns False if it was a duplicate. Events from the log must come in
        offset order per partition; ``position`` None means "spooled, not in the log yet"."""
        if position is not None:
            self.positions[position.partition] = position.offset + 1
            self.anchors[position.partition] = event.event_id
        env = event.envelope
        payload = event.payload
        key = env.idempotency_key
        if isinstance(payload, SubmissionRejected):
            claimed = claimed_key(key) if key.startswith(REJECTED_KEY_PREFIX) else key
            seen = self.rejections.get(claimed)
            if seen is not None and seen.event_id == event.event_id:
                if seen.position is None and position is not None:  # spooled before, read back from the log now
                    self.rejections[claimed] = replace(seen, position=position)
                return False
            record = RejectionRecord(claimed, event.event_id, payload.command, payload.errors, position, payload.sender)
            self.rejections[claimed] = record
            self.applied += 1
            return True
        known = self.claims.get(key)
        if known is not None:
            if known.event_id == event.event_id and known.position is None and position is not None:
                known.position = position
            return False
        self.claims[key] = Claim(
            key, event.event_id, event.type, env.election_id, env.unit_id, position, basis=(env.actor, payload),
            actor=env.actor,
        )
        self.applied += 1
        if isinstance(payload, ElectionDefined):
            if not env.unit_id:  # one with a unit id is no election's event to the projections either
                self._define(event.event_id, env.election_id, payload)
        elif isinstance(payload, UnitOpened):
            status = self.unit(env.election_id, env.unit_id)
            if status.result_event_id is None:  # one written past the intake after a result is ignored, as the reducers do
                self.units[(env.election_id, env.unit_id)] = UnitIntakeStatus(
                    event.event_id, payload.attendance, status.result_event_id, status.result
                )
        elif isinstance(payload, (ResultReported, ResultCorrected)):
            if isinstance(payload, ResultCorrected):
                self.superseded.setdefault(payload.supersedes, event.event_id)
            self.results[event.event_id] = ResultRecord(event.event_id, env.election_id, env.unit_id, event.type)
            status = self.unit(env.election_id, env.unit_id)
            self.units[(env.election_id, env.unit_id)] = UnitIntakeStatus(
                status.opened_event_id, status.attendance, event.event_id, payload.result
            )
        elif isinstance(payload, TieBroken):
            contenders, seats = payload.tie
            toss = TossRecord(event.event_id, env.election_id, env.unit_id, contenders, seats, tuple(sorted(payload.winners)))
            self.tosses[event.event_id] = toss
            standing = self.settled.get(toss.tie)
            if standing is None or payload.redraws(standing):
                self.settled[toss.tie] = event.event_id
        elif isinstance(payload, ResultsCertified) and not env.unit_id:  # one naming a unit certifies no election
            self.certified[env.election_id] = event.event_id
        return True

    def note_position(self, event: Event[Any], position: Position) -> None:
        """Where an event applied without one (spooled, or appended but not yet read back) was written.
        The partition's read position is left alone: the event is read (and skipped) in its turn."""
        claim = self.claims.get(event.envelope.idempotency_key)
        if claim is not None and claim.event_id == event.event_id:
            claim.position = position

    def apply_all(self, events: Iterable[tuple[Event[Any], Position | None]]) -> int:
        return sum(1 for event, position in events if self.apply(event, position))

    def _define(self, event_id: str, election_id: str, payload: ElectionDefined) -> None:
        """The latest definition stands, as in the projections (``projections.reducers.apply_election``):
        the intake refuses a redefinition, but a direct write may record one (a release that amends the
        first, ``producers.redefinition``), and commands after it must be judged by the units and
        candidates the tallies will use."""
        before = self.elections.get(election_id)
        units = {u.unit_id: u for u in payload.units}
        self.elections[election_id] = ElectionInfo(
            election_id, event_id, payload, units, frozenset(payload.candidates)
        )
        for unit_id in before.units if before is not None else ():
            if unit_id not in units:
                self.units_index[unit_id].remove(election_id)
        for unit_id in units:
            elections = self.units_index.setdefault(unit_id, [])
            if election_id not in elections:
                elections.append(election_id)

    # -- queries (IntakeView) -----------------------------------------------------------------------

    def election(self, election_id: str) -> ElectionInfo | None:
        return self.elections.get(election_id)

    def certified_by(self, election_id: str) -> str | None:
        return self.certified.get(election_id)

    def election_ids(self) -> list[str]:
        return list(self.elections)

    def elections_of_unit(self, unit_id: str) -> list[str]:
        return list(self.units_index.get(unit_id, ()))

    def unit(self, election_id: str, unit_id: str) -> UnitIntakeStatus:
        return self.units.get((election_id, unit_id), _NO_UNIT)

    def result_event(self, event_id: str) -> ResultRecord | None:
        return self.results.get(event_id)

    def superseded_by(self, event_id: str) -> str | None:
        return self.superseded.get(event_id)

    def claim(self, key: str) -> Claim | None:
        return self.claims.get(key)

    def rejection(self, key: str) -> RejectionRecord | None:
        return self.rejections.get(key)

    def settled_by(self, tie: TieKey) -> str | None:
        return self.settled.get(tie)

    def toss(self, event_id: str) -> TossRecord | None:
        return self.tosses.get(event_id)

    def tosses_in(self, election_id: str) -> list[TossRecord]:
        """The election's recorded tosses (asked only by a redefinition: a scan is fine)."""
        return [t for t in self.tosses.values() if t.election_id == election_id]

    # -- snapshots ----------------------------------------------------------------------------------

    def to_snapshot(self) -> dict[str, Any]:
        """A JSON-able picture of the state. Only log-derived state belongs in a snapshot: spooled
        claims (position None) are left out, the spool file is their record."""
        return {
            "format": SNAPSHOT_FORMAT,
            "applied": self.applied,
            "positions": {str(p): o for p, o in self.positions.items()},
            "anchors": {str(p): e for p, e in self.anchors.items()},
            "elections": [event_to_json(_definition_event(info)) for info in self.elections.values()],
            "units": [
                [eid, uid, s.opened_event_id, s.attendance, s.result_event_id, None if s.result is None else s.result.to_avro()]
                for (eid, uid), s in self.units.items()
            ],
            "results": [[r.event_id, r.election_id, r.unit_id, r.type] for r in self.results.values()],
            "superseded": dict(self.superseded),
            "claims": [
                [c.key, c.event_id, c.event_type, c.election_id, c.unit_id, c.fingerprint(), str(c.position), c.actor]
                for c in self.claims.values()
                if c.position is not None
            ],
            "rejections": [
                [r.key, r.event_id, r.command, [e.to_avro() for e in r.errors], None if r.position is None else str(r.position),
                 r.sender]
                for r in self.rejections.values()
                if r.position is not None
            ],
            "tosses": [[t.event_id, t.election_id, t.unit_id, list(t.contenders), t.seats, list(t.winners)] for t in self.tosses.values()],
            "settled": [[*tie[:2], list(tie[2]), tie[3], event_id] for tie, event_id in self.settled.items()],
            "certified": dict(self.certified),
        }

    @classmethod
    def from_snapshot(cls, data: Mapping[str, Any]) -> IntakeState:
        if data.get("format") != SNAPSHOT_FORMAT:
            raise ValueError(f"snapshot format {data.get('format')!r} is not {SNAPSHOT_FORMAT}")
        state = cls(applied=int(data["applied"]))
        state.positions = {int(p): int(o) for p, o in data["positions"].items()}
        state.anchors = {int(p): str(e) for p, e in data["anchors"].items()}
        for doc in data["elections"]:
            event = event_from_json(doc)
            state._define(event.event_id, event.envelope.election_id, event.payload)
        for eid, uid, opened, attendance, result_id, result in data["units"]:
            state.units[(eid, uid)] = UnitIntakeStatus(opened, attendance, result_id, None if result is None else Result.from_avro(result))
        state.results = {r[0]: ResultRecord(*r) for r in data["results"]}
        state.superseded = dict(data["superseded"])
        state.claims = {
            c[0]: Claim(c[0], c[1], c[2], c[3], c[4], Position.parse(c[6]), digest=c[5], actor=c[7]) for c in data["claims"]
        }
        state.rejections = {
            r[0]: RejectionRecord(r[0], r[1], r[2], tuple(Problem.from_avro(e) for e in r[3]), Position.parse(r[4]), r[5])
            for r in data["rejections"]
        }
        state.tosses = {t[0]: TossRecord(t[0], t[1], t[2], tuple(t[3]), t[4], tuple(t[5])) for t in data["tosses"]}
        state.settled = {(e, u, tuple(c), n): event_id for e, u, c, n, event_id in data["settled"]}
        state.certified = dict(data["certified"])
        return state


def _definition_event(info: ElectionInfo) -> Event[ElectionDefined]:
    """The ElectionDefined event as far as the state needs it (ids and payload; times are not kept)."""
    return new_event(
        info.definition,
        election_id=info.election_id,
        actor="",
        channel=Channel.SYSTEM,
        event_id=info.event_id,
        occurred_at=_EPOCH,
        recorded_at=_EPOCH,
    )


class Layered:
    """The log's state with spooled events on top: what the intake validates against while spooling."""

    def __init__(self, base: IntakeView, top: IntakeView) -> None:
        self.base = base
        self.top = top

    def election(self, election_id: str) -> ElectionInfo | None:
        return self.top.election(election_id) or self.base.election(election_id)

    def election_ids(self) -> list[str]:
        return list(dict.fromkeys([*self.base.election_ids(), *self.top.election_ids()]))

    def elections_of_unit(self, unit_id: str) -> list[str]:
        return list(dict.fromkeys([*self.base.elections_of_unit(unit_id), *self.top.elections_of_unit(unit_id)]))

    def unit(self, election_id: str, unit_id: str) -> UnitIntakeStatus:
        low = self.base.unit(election_id, unit_id)
        high = self.top.unit(election_id, unit_id)
        opened = high if high.opened_event_id is not None else low
        result = high if high.result_event_id is not None else low
        return UnitIntakeStatus(opened.opened_event_id, opened.attendance, result.result_event_id, result.result)

    def result_event(self, event_id: str) -> ResultRecord | None:
        return self.top.result_event(event_id) or self.base.result_event(event_id)

    def superseded_by(self, event_id: str) -> str | None:
        return self.base.superseded_by(event_id) or self.top.superseded_by(event_id)

    def claim(self, key: str) -> Claim | None:
        return self.base.claim(key) or self.top.claim(key)

    def rejection(self, key: str) -> RejectionRecord | None:
        return self.top.rejection(key) or self.base.rejection(key)

    def settled_by(self, tie: TieKey) -> str | None:
        # A spooled toss was checked against the base when it was accepted: a first toss of a tie the
        # base has not settled, or a redraw of the base's standing toss. Either way it stands now.
        return self.top.settled_by(tie) or self.base.settled_by(tie)

    def toss(self, event_id: str) -> TossRecord | None:
        return self.top.toss(event_id) or self.base.toss(event_id)

    def tosses_in(self, election_id: str) -> list[TossRecord]:
        return self.top.tosses_in(election_id) + self.base.tosses_in(election_id)

    def certified_by(self, election_id: str) -> str | None:
        return self.top.certified_by(election_id) or self.base.certified_by(election_id)
