"""The events of the results feed: a unit's tally, a county's or the state's sums, as published.

Why a catalogue of their own: these are not facts about the caucus but derived views, so they must
never be mistaken for ledger events. They use the ledger's machinery (Avro single-object encoding,
the ``Envelope``, schemas in ``ledger/schemas/v<N>/``) through a codec that knows only them
(``feed_codec``), so the event log's codec (``ledger.codec.default_codec``) refuses them and the
feed's codec refuses ledger events.

Every published tally carries a *stamp*: the projection set it came from, the event-log positions of
the snapshot it was read from, and ``version`` (``tally_version``): a number that grows whenever the
tally can have changed and stays put when it did not. A subscriber that keeps, per key, only versions
above the last one it saw therefore drops republished copies and never shows a tally older than one
it has shown (``FeedDeduper``).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any, ClassVar

from ledger.codec import Codec, load_catalogue
from ledger.events import Channel, Event, Payload, new_event
from projections.candidate_results import candidate_results
from projections.tally_revision import TALLIES_REVISION
from projections.feed_checkpoint_events import CheckpointPublished, checkpoint_json
from projections.tally import AreaTally, UnitTally, fraction_text

__all__ = [
    "VERSION_STEP",
    "tally_version",
    "FeedStamp",
    "UnitTallyPublished",
    "AreaTallyPublished",
    "FEED_TYPES",
    "feed_codec",
    "feed_key",
    "record_key",
    "latest_key",
    "tally_key",
    "feed_event_id",
    "FeedDeduper",
    "feed_version",
    "unit_event",
    "area_event",
    "feed_json",
]

_NS = uuid.UUID("3c0c52f4-6a43-4d0e-9a55-9b2f3c7e4a10")


VERSION_STEP = 10**9
"""Election events weigh this much in a version (see ``tally_version``)."""


def tally_version(election_events: int, unit_events: int) -> int:
    """The version of a tally: ``election_events * 10**9 + unit_events``, where ``election_events``
    counts the events applied to the election (definition, certification, ...) and ``unit_events``
    those applied to the units the tally sums (one unit, a county's, the state's).

    Both counts only grow, so the version does; it grows whenever the tally can have changed (the
    tally is a function of those states), and stays the same when nothing did, so a tally published
    again unchanged carries the same version and is recognised as a copy. A new definition can move
    units between counties (a county's sum of unit counts could shrink); it also adds an election
    event, which outweighs any such shrink."""
    return election_events * VERSION_STEP + unit_events


@dataclass(frozen=True, slots=True)
class FeedStamp:
    """Where a published tally comes from: projection set, rule set, the event-log positions of the
    snapshot it was read from, and its version (``tally_version``)."""

    projection: str
    projection_version: int
    rule_set: str | None
    positions: tuple[tuple[int, int], ...]
    version: int

    @classmethod
    def of(cls, projection: str, projection_version: int, rule_set: str | None, positions: Mapping[int, int],
           version: int = 0) -> FeedStamp:
        return cls(projection, projection_version, rule_set, tuple(sorted(positions.items())), version)

    def at(self, version: int) -> FeedStamp:
        return FeedStamp(self.projection, self.projection_version, self.rule_set, self.positions, version)

    def to_avro(self) -> dict[str, Any]:
        return {
            "projection": self.projection,
            "projection_version": self.projection_version,
            "rule_set": self.rule_set,
            "version": self.version,
            "positions": [{"partition": p, "offset": o} for p, o in self.positions],
        }

    @classmethod
    def from_avro(cls, record: Mapping[str, Any]) -> FeedStamp:
        return cls(
            record["projection"],
            record["projection_version"],
            record.get("rule_set"),
            tuple((int(p["partition"]), int(p["offset"])) for p in record["positions"]),
            int(record["version"]),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "projection": self.projection,
            "projection_version": self.projection_version,
            "rule_set": self.rule_set,
            "version": self.version,
            "positions": {str(p): o for p, o in self.positions},
        }


def _opt_map(value: Mapping[str, int] | None) -> dict[str, int] | None:
    return None if value is None else {k: int(v) for k, v in value.items()}


@dataclass(frozen=True, slots=True)
class UnitTallyPublished(Payload):
    """A unit's tally (``projections.tally.UnitTally``) as published; the unit is the envelope's."""

    TYPE: ClassVar[str] = "UnitTallyPublished"

    stamp: FeedStamp
    tally: Mapping[str, Any]
    """The tally's fields as ``UnitTally.to_json`` names them (those the schema carries)."""

    _FIELDS: ClassVar[tuple[str, ...]] = (
        "name", "county_id", "defined", "status", "stage", "reporting", "delegates", "attendance", "threshold",
        "first", "final", "cds", "cds_reported", "cds_computed", "cds_source", "pending", "sde_weight", "sde",
        "sde_display", "rejected", "problems", "result_event_id", "result_recorded_at", "candidates",
    )

    @classmethod
    def of(cls, t: UnitTally, stamp: FeedStamp, ballot: Sequence[str] = ()) -> UnitTallyPublished:
        return cls(stamp, {
            "result_recorded_at": t.result_recorded_at,
            "candidates": candidate_results(ballot, t.first, t.final, t.cds, t.sde_display),
            "name": t.name, "county_id": t.county_id, "defined": t.defined, "status": t.status, "stage": t.stage,
            "reporting": t.reporting, "delegates": t.delegates, "attendance": t.attendance, "threshold": t.threshold,
            "first": dict(t.first), "final": dict(t.final), "cds": dict(t.cds),
            "cds_reported": _opt_map(t.cds_reported), "cds_computed": _opt_map(t.cds_computed),
            "cds_source": t.cds_source,
            "pending": [{"contenders": list(p.contenders), "seats": p.seats, "reason": p.reason} for p in t.pending],
            "sde_weight": None if t.sde_weight is None else fraction_text(t.sde_weight),
            "sde": {k: fraction_text(v) for k, v in t.sde.items()},
            "sde_display": {k: str(v) for k, v in t.sde_display.items()},
            "rejected": t.rejected, "problems": list(t.problems), "result_event_id": t.result_event_id,
        })  # fmt: skip

    def to_avro(self) -> dict[str, Any]:
        return {**self.stamp.to_avro(), **{k: self.tally[k] for k in self._FIELDS}}

    @classmethod
    def from_avro(cls, record: Mapping[str, Any]) -> UnitTallyPublished:
        return cls(FeedStamp.from_avro(record), {k: record[k] for k in cls._FIELDS})


@dataclass(frozen=True, slots=True)
class AreaTallyPublished(Payload):
    """A county's (``kind`` county, ``area`` its id) or the state's (``kind`` state) sums as published."""

    TYPE: ClassVar[str] = "AreaTallyPublished"

    stamp: FeedStamp
    kind: str
    area: str
    sums: Mapping[str, Any]

    _FIELDS: ClassVar[tuple[str, ...]] = (
        "name", "certified", "units_defined", "units_reporting", "units_pending_ties", "units_with_problems",
        "first", "final", "cds", "cds_computed", "cds_reported", "sde", "sde_display_sum", "candidates",
    )

    @classmethod
    def of(cls, a: AreaTally, stamp: FeedStamp, *, kind: str, area: str, certified: bool,
           ballot: Sequence[str] = ()) -> AreaTallyPublished:
        return cls(stamp, kind, area, {
            "candidates": candidate_results(ballot, a.first, a.final, a.cds, a.sde_display_sum),
            "name": a.name, "certified": certified, "units_defined": a.units_defined,
            "units_reporting": a.units_reporting, "units_pending_ties": a.units_pending,
            "units_with_problems": a.units_with_problems, "first": dict(a.first), "final": dict(a.final),
            "cds": dict(a.cds), "cds_computed": dict(a.cds_computed), "cds_reported": dict(a.cds_reported),
            "sde": {c: fraction_text(v) for c, v in a.sde.items()},
            "sde_display_sum": {c: str(v) for c, v in a.sde_display_sum.items()},
        })  # fmt: skip

    def to_avro(self) -> dict[str, Any]:
        return {**self.stamp.to_avro(), "kind": self.kind, "area": self.area, **{k: self.sums[k] for k in self._FIELDS}}

    @classmethod
    def from_avro(cls, record: Mapping[str, Any]) -> AreaTallyPublished:
        return cls(FeedStamp.from_avro(record), record["kind"], record["area"], {k: record[k] for k in cls._FIELDS})


FEED_TYPES: dict[str, type[Payload]] = {
    cls.TYPE: cls for cls in (UnitTallyPublished, AreaTallyPublished, CheckpointPublished)
}
"""The feed's record kinds: tallies, and the event log's signed checkpoints (``feed_checkpoint_events``)."""


@lru_cache(maxsize=1)
def feed_codec() -> Codec:
    """A codec of the feed's event types only, parsed once per process."""
    return Codec(load_catalogue(FEED_TYPES), payload_types=FEED_TYPES)


def feed_key(event: Event[Any]) -> tuple[str, str, str]:
    """What a version is counted per: (election, kind, id), kind ``unit``, ``county`` or ``state``;
    a checkpoint is its own key (kind ``checkpoint``, id its ``CheckpointSigned`` event's)."""
    p = event.payload
    if isinstance(p, CheckpointPublished):
        return "", "checkpoint", p.checkpoint_event_id
    if isinstance(p, UnitTallyPublished):
        return event.envelope.election_id, "unit", event.unit_id
    if isinstance(p, AreaTallyPublished):
        return event.envelope.election_id, p.kind, p.area
    raise TypeError(f"not a results-feed event: {event.type}")


def record_key(event: Event[Any]) -> str:
    """The results log's record key: the unit id for a unit's tally (its partition on the event topic
    too), ``county:<election>:<county>`` and ``state:<election>`` for sums. One key per unit, county and
    state keeps each one's tallies in order, and lets a compacted topic keep the newest of each. A
    checkpoint keeps its event's own key, which all checkpoints share (``feed_checkpoints``)."""
    election_id, kind, key = feed_key(event)
    if kind in ("unit", "checkpoint"):
        return event.key
    return tally_key(election_id, kind, key)


def latest_key(event: Event[Any]) -> str:
    """The key of a tally in the feed's latest view (``projections.feed_latest``): the record key,
    except that a unit's names its election too (``unit:<election>:<unit>``), since unit ids repeat
    across elections and a compacted topic keeps one record per key."""
    election_id, kind, key = feed_key(event)
    return tally_key(election_id, kind, key) if kind == "unit" else record_key(event)


def tally_key(election_id: str, kind: str, key: str) -> str:
    """A tally's key in the latest view, from its parts (``feed_key``): ``unit:<election>:<unit>``,
    ``county:<election>:<county>``, ``state:<election>``."""
    return f"state:{election_id}" if kind == "state" else f"{kind}:{election_id}:{key}"


def feed_event_id(stamp: FeedStamp, election_id: str, key: str) -> str:
    """The id of a published tally (``key`` is ``unit:<id>``, ``county:<id>`` or ``state:<id>``).

    The same tally at the same version always gets the same id, so a log that dedupes by id (the
    embedded one, a Kafka producer's recent ids) does not even store a republished copy, and a
    publisher knows, by id, whether the latest view already holds it. The tallies' revision (the tally code and the rules' meanings) is part of it:
    a tally computed anew because a rule set's name came to mean another reading has the same version
    (no event changed), and must be published again all the same."""
    return str(uuid.uuid5(_NS, f"{stamp.projection}|{stamp.projection_version}|{election_id}|{key}|{stamp.version}"
                               f"|{TALLIES_REVISION}"))


def _event(payload: Payload, *, election_id: str, unit_id: str, key: str, at: datetime) -> Event[Any]:
    stamp: FeedStamp = payload.stamp  # type: ignore[attr-defined]
    event_id = feed_event_id(stamp, election_id, key)
    return new_event(payload, election_id=election_id, unit_id=unit_id, actor=f"projection:{stamp.projection} v{stamp.projection_version}",
                     channel=Channel.SYSTEM, occurred_at=at, recorded_at=at, event_id=event_id)


def unit_event(t: UnitTally, stamp: FeedStamp, at: datetime, ballot: Sequence[str] = ()) -> Event[UnitTallyPublished]:
    return _event(UnitTallyPublished.of(t, stamp, ballot), election_id=t.election_id, unit_id=t.unit_id,
                  key=f"unit:{t.unit_id}", at=at)


def area_event(a: AreaTally, stamp: FeedStamp, at: datetime, *, election_id: str, kind: str, certified: bool,
               ballot: Sequence[str] = ()) -> Event[AreaTallyPublished]:
    area = election_id if kind == "state" else a.area
    payload = AreaTallyPublished.of(a, stamp, kind=kind, area=area, certified=certified, ballot=ballot)
    return _event(payload, election_id=election_id, unit_id="", key=f"{kind}:{area}", at=at)


class FeedDeduper:
    """Keeps, per key, the highest version seen; ``fresh`` says whether an event is newer than that.

    Memory: one integer per unit, county and state (bounded by the election, not the feed's length).
    """

    def __init__(self) -> None:
        self.seen: dict[tuple[str, str, str], int] = {}
        self.dropped = 0

    def fresh(self, event: Event[Any]) -> bool:
        key = feed_key(event)
        version = feed_version(event)
        if version <= self.seen.get(key, -1):
            self.dropped += 1
            return False
        self.seen[key] = version
        return True


def feed_version(event: Event[Any]) -> int:
    """A tally's version; a checkpoint never changes, so any copy after the first is a copy."""
    p = event.payload
    return 0 if isinstance(p, CheckpointPublished) else int(p.stamp.version)


def feed_json(event: Event[Any]) -> dict[str, Any]:
    """One published tally (or checkpoint) as the JSON line ``caucus subscribe`` prints."""
    if isinstance(event.payload, CheckpointPublished):
        return checkpoint_json(event)
    election_id, kind, key = feed_key(event)
    p = event.payload
    body = dict(p.tally) if isinstance(p, UnitTallyPublished) else dict(p.sums)
    return {
        "kind": kind,
        "key": key,
        "election_id": election_id,
        **p.stamp.to_json(),
        "published_at": event.recorded_at.isoformat(),
        "event_id": event.event_id,
        **({"unit_id": key} if kind == "unit" else {"area": key}),
        **body,
    }
