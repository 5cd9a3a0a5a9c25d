"""The event catalogue as immutable typed objects.

Events are the ledger's only source of truth, so they are frozen dataclasses rather than dicts: a projection,
an auditor and a producer all see the same fields with the same types, and nothing can be changed after it
was recorded. Each payload class turns itself into its Avro record and back; ``ledger.codec`` does the bytes.

Alignment counts and delegate maps are stored sorted by candidate so that the same event always has the
same canonical bytes, whatever order a client sent them in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, ClassVar, Generic, TypeVar

from uuid6 import uuid7

from ledger.event_values import (
    Channel,
    CorrectionStage,
    County,
    Problem,
    Result,
    SatelliteGroup,
    TieMethod,
    UnitDefinition,
    election_key,
    problems_from_avro,
    ratio_from_avro,
    ratio_to_avro,
)

__all__ = [
    "Channel",
    "CorrectionStage",
    "TieMethod",
    "Envelope",
    "Problem",
    "Result",
    "County",
    "UnitDefinition",
    "SatelliteGroup",
    "Payload",
    "ElectionDefined",
    "UnitOpened",
    "ResultReported",
    "ResultCorrected",
    "TieBroken",
    "SubmissionRejected",
    "ResultsCertified",
    "CheckpointSigned",
    "Event",
    "PAYLOAD_TYPES",
    "new_event",
    "utc_now",
]


def utc_now() -> datetime:
    """Avro timestamp-micros keeps microseconds; truncate here so a round trip is exact."""
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class Envelope:
    """What every event carries: identity, key, times, who and how."""

    event_id: str
    election_id: str
    unit_id: str
    occurred_at: datetime
    recorded_at: datetime
    actor: str
    channel: Channel
    idempotency_key: str

    @property
    def key(self) -> str:
        """The partition key: a unit's events stay in one partition, in order."""
        return self.unit_id or election_key(self.election_id)


class Payload:
    """Base of every event body. TYPE names the Avro record, VERSION the schema the class matches."""

    TYPE: ClassVar[str]
    VERSION: ClassVar[int] = 1

    def to_avro(self) -> dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def from_avro(cls, record: Mapping[str, Any]) -> Payload:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class ElectionDefined(Payload):
    TYPE: ClassVar[str] = "ElectionDefined"

    name: str
    rule_set: str
    candidates: tuple[str, ...]
    counties: tuple[County, ...]
    units: tuple[UnitDefinition, ...]
    satellite_groups: tuple[SatelliteGroup, ...] = ()

    def to_avro(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "rule_set": self.rule_set,
            "candidates": list(self.candidates),
            "counties": [
                {"county_id": c.county_id, "name": c.name, "sde_ratio": ratio_to_avro(c.sde_ratio)}
                for c in self.counties
            ],
            "units": [
                {
                    "unit_id": u.unit_id,
                    "name": u.name,
                    "county_id": u.county_id,
                    "delegates": u.delegates,
                    "satellite_group": u.satellite_group,
                    "short_name": u.short_name,
                    "sde_weight": None if u.sde_weight is None else ratio_to_avro(u.sde_weight),
                }
                for u in self.units
            ],
            "satellite_groups": [
                {
                    "group_id": g.group_id,
                    "name": g.name,
                    "sde_pool": ratio_to_avro(g.sde_pool),
                    "attendance_base": g.attendance_base,
                }
                for g in self.satellite_groups
            ],
        }

    @classmethod
    def from_avro(cls, record: Mapping[str, Any]) -> ElectionDefined:
        return cls(
            name=record["name"],
            rule_set=record["rule_set"],
            candidates=tuple(record["candidates"]),
            counties=tuple(
                County(c["county_id"], c["name"], ratio_from_avro(c["sde_ratio"]))
                for c in record["counties"]
            ),
            units=tuple(
                UnitDefinition(
                    unit_id=u["unit_id"],
                    name=u["name"],
                    county_id=u["county_id"],
                    delegates=u["delegates"],
                    satellite_group=u["satellite_group"],
                    short_name=u["short_name"],
                    sde_weight=None if u["sde_weight"] is None else ratio_from_avro(u["sde_weight"]),
                )
                for u in record["units"]
            ),
            satellite_groups=tuple(
                SatelliteGroup(
                    g["group_id"], g["name"], ratio_from_avro(g["sde_pool"]), g["attendance_base"]
                )
                for g in record["satellite_groups"]
            ),
        )


@dataclass(frozen=True, slots=True)
class UnitOpened(Payload):
    TYPE: ClassVar[str] = "UnitOpened"

    attendance: int | None

    def to_avro(self) -> dict[str, Any]:
        return {"attendance": self.attendance}

    @classmethod
    def from_avro(cls, record: Mapping[str, Any]) -> UnitOpened:
        return cls(record["attendance"])


@dataclass(frozen=True, slots=True)
class ResultReported(Payload):
    TYPE: ClassVar[str] = "ResultReported"

    result: Result
    reporter: str
    warnings: tuple[Problem, ...] = ()

    def to_avro(self) -> dict[str, Any]:
        return {
            "result": self.result.to_avro(),
            "reporter": self.reporter,
            "warnings": [w.to_avro() for w in self.warnings],
        }

    @classmethod
    def from_avro(cls, record: Mapping[str, Any]) -> ResultReported:
        return cls(Result.from_avro(record["result"]), record["reporter"], problems_from_avro(record["warnings"]))


@dataclass(frozen=True, slots=True)
class ResultCorrected(Payload):
    TYPE: ClassVar[str] = "ResultCorrected"

    result: Result
    supersedes: str
    reason: str
    authority: str
    stage: CorrectionStage
    warnings: tuple[Problem, ...] = ()

    def to_avro(self) -> dict[str, Any]:
        return {
            "result": self.result.to_avro(),
            "supersedes": self.supersedes,
            "reason": self.reason,
            "authority": self.authority,
            "stage": self.stage.value,
            "warnings": [w.to_avro() for w in self.warnings],
        }

    @classmethod
    def from_avro(cls, record: Mapping[str, Any]) -> ResultCorrected:
        return cls(
            result=Result.from_avro(record["result"]),
            supersedes=record["supersedes"],
            reason=record["reason"],
            authority=record["authority"],
            stage=CorrectionStage(record["stage"]),
            warnings=problems_from_avro(record["warnings"]),
        )


@dataclass(frozen=True, slots=True)
class TieBroken(Payload):
    """A coin toss or drawing of lots. The first toss of a tie (unit, contenders, seats) settles it;
    a later one counts only as an official's redraw: it names the toss it replaces (``supersedes``)
    and says why (``reason``). Version 1 records read as version 2 with ``supersedes`` empty."""

    TYPE: ClassVar[str] = "TieBroken"
    VERSION: ClassVar[int] = 2

    contenders: tuple[str, ...]
    seats: int
    winners: tuple[str, ...]
    method: TieMethod
    caller: str
    witnesses: tuple[str, ...] = ()
    reason: str = ""
    supersedes: str = ""

    def to_avro(self) -> dict[str, Any]:
        return {
            "contenders": list(self.contenders),
            "seats": self.seats,
            "winners": list(self.winners),
            "method": self.method.value,
            "caller": self.caller,
            "witnesses": list(self.witnesses),
            "reason": self.reason,
            "supersedes": self.supersedes,
        }

    @classmethod
    def from_avro(cls, record: Mapping[str, Any]) -> TieBroken:
        # .get: the Avro reader fills v2 defaults, but JSON written from v1 events has no such key.
        return cls(
            contenders=tuple(record["contenders"]),
            seats=record["seats"],
            winners=tuple(record["winners"]),
            method=TieMethod(record["method"]),
            caller=record["caller"],
            witnesses=tuple(record["witnesses"]),
            reason=record["reason"],
            supersedes=record.get("supersedes", ""),
        )

    @property
    def tie(self) -> tuple[tuple[str, ...], int]:
        """Which tie of its unit this toss is about: (contenders sorted, seats)."""
        return tuple(sorted(self.contenders)), self.seats

    def redraws(self, standing_event_id: str) -> bool:
        """Whether this toss replaces the one that settled its tie (``standing_event_id``): only an
        official's redraw does, naming that toss and giving a reason. The intake's state and the
        projections both decide with this, so they never disagree about which toss stands."""
        return bool(self.supersedes) and self.supersedes == standing_event_id and bool(self.reason.strip())


@dataclass(frozen=True, slots=True)
class SubmissionRejected(Payload):
    """A refused input, kept whole. ``raw_input`` is the input as sent when it is UTF-8 text; input
    that is not (an Avro string cannot hold it) keeps its exact bytes in ``raw_bytes`` and a readable
    rendering in ``raw_input``. Version 1 records read as version 2 with ``raw_bytes`` empty."""

    TYPE: ClassVar[str] = "SubmissionRejected"
    VERSION: ClassVar[int] = 2

    command: str
    raw_input: str
    errors: tuple[Problem, ...]
    sender: str
    raw_bytes: bytes = b""

    def to_avro(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "raw_input": self.raw_input,
            "errors": [e.to_avro() for e in self.errors],
            "sender": self.sender,
            "raw_bytes": self.raw_bytes,
        }

    @classmethod
    def from_avro(cls, record: Mapping[str, Any]) -> SubmissionRejected:
        raw = record.get("raw_bytes", b"")
        if isinstance(raw, str):  # a schema default is JSON: Avro spells bytes as ISO-8859-1 text there
            raw = raw.encode("latin-1")
        return cls(record["command"], record["raw_input"], problems_from_avro(record["errors"]), record["sender"], raw)

    def input_bytes(self) -> bytes:
        """The input exactly as it was sent (as far as it was kept, see ``raw_input``)."""
        return self.raw_bytes or self.raw_input.encode("utf-8")


@dataclass(frozen=True, slots=True)
class ResultsCertified(Payload):
    TYPE: ClassVar[str] = "ResultsCertified"

    authority: str
    statement: str = ""

    def to_avro(self) -> dict[str, Any]:
        return {"authority": self.authority, "statement": self.statement}

    @classmethod
    def from_avro(cls, record: Mapping[str, Any]) -> ResultsCertified:
        return cls(record["authority"], record["statement"])


@dataclass(frozen=True, slots=True)
class CheckpointSigned(Payload):
    """A signed checkpoint of the log (see ``ledger.integrity.checkpoints``).

    Version 2 carries one tree per partition (``partition_sizes[i]``, ``partition_roots[i]``) and the
    time the sizes were taken; ``tree_size``/``root_hash`` then cover all partitions. Version 3 adds
    the roots of the columns trees and their signature (``ledger.integrity.columns``). Older records
    read with empty lists, time 0 and no column signature.
    """

    TYPE: ClassVar[str] = "CheckpointSigned"
    VERSION: ClassVar[int] = 3

    tree_size: int
    root_hash: bytes
    key_id: str
    public_key: bytes
    signature: bytes
    scope: str = ""
    partition_sizes: tuple[int, ...] = ()
    partition_roots: tuple[bytes, ...] = ()
    timestamp_micros: int = 0
    column_roots: tuple[bytes, ...] = ()
    column_signature: bytes = b""

    def __post_init__(self) -> None:
        object.__setattr__(self, "partition_sizes", tuple(self.partition_sizes))
        object.__setattr__(self, "partition_roots", tuple(self.partition_roots))
        object.__setattr__(self, "column_roots", tuple(self.column_roots))

    def to_avro(self) -> dict[str, Any]:
        return {
            "tree_size": self.tree_size,
            "root_hash": self.root_hash,
            "key_id": self.key_id,
            "public_key": self.public_key,
            "signature": self.signature,
            "scope": self.scope,
            "partition_sizes": list(self.partition_sizes),
            "partition_roots": list(self.partition_roots),
            "timestamp_micros": self.timestamp_micros,
            "column_roots": list(self.column_roots),
            "column_signature": self.column_signature,
        }

    @classmethod
    def from_avro(cls, record: Mapping[str, Any]) -> CheckpointSigned:
        # .get: the Avro reader fills v2 defaults, but JSON written from v1 events has no such keys.
        return cls(
            record["tree_size"],
            record["root_hash"],
            record["key_id"],
            record["public_key"],
            record["signature"],
            record.get("scope", ""),
            tuple(record.get("partition_sizes", ())),
            tuple(record.get("partition_roots", ())),
            record.get("timestamp_micros", 0),
            tuple(record.get("column_roots", ())),
            record.get("column_signature", b""),
        )


PAYLOAD_TYPES: dict[str, type[Payload]] = {
    cls.TYPE: cls
    for cls in (
        ElectionDefined,
        UnitOpened,
        ResultReported,
        ResultCorrected,
        TieBroken,
        SubmissionRejected,
        ResultsCertified,
        CheckpointSigned,
    )
}

P = TypeVar("P", bound=Payload)


@dataclass(frozen=True, slots=True)
class Event(Generic[P]):
    """An envelope and its payload. The payload's class is the event type."""

    envelope: Envelope
    payload: P

    @property
    def type(self) -> str:
        return self.payload.TYPE

    @property
    def event_id(self) -> str:
        return self.envelope.event_id

    @property
    def unit_id(self) -> str:
        return self.envelope.unit_id

    @property
    def key(self) -> str:
        return self.envelope.key

    @property
    def recorded_at(self) -> datetime:
        return self.envelope.recorded_at

    def recorded(self, at: datetime) -> Event[P]:
        """The same event stamped with the time the ledger accepted it."""
        return replace(self, envelope=replace(self.envelope, recorded_at=at))


def _micros(at: datetime) -> datetime:
    if at.tzinfo is None:
        raise ValueError("event times must be timezone-aware (UTC)")
    return at.astimezone(UTC).replace(microsecond=at.microsecond)


def new_event_id() -> str:
    """A fresh event id ordered by time (UUIDv7, RFC 9562): the unique id indexes (the embedded log,
    PostgreSQL's event index) grow at their end instead of one random page an event (v4), which cost the
    embedded log's batched append a fifth of its speed (``scripts/bench_append.py``). Order is all an id
    tells: within a millisecond the library moves its clock on per id. Reproducible ids (the importer's,
    the simulator's) stay uuid5 of what they record."""
    return str(uuid7())


def new_event(
    payload: P,
    *,
    election_id: str,
    unit_id: str = "",
    actor: str,
    channel: Channel,
    idempotency_key: str | None = None,
    occurred_at: datetime | None = None,
    recorded_at: datetime | None = None,
    event_id: str | None = None,
) -> Event[P]:
    """Build an event with a fresh id; the idempotency key defaults to the event id."""
    now = utc_now()
    eid = event_id or new_event_id()
    envelope = Envelope(
        event_id=eid,
        election_id=election_id,
        unit_id=unit_id,
        occurred_at=_micros(occurred_at or now),
        recorded_at=_micros(recorded_at or now),
        actor=actor,
        channel=Channel(channel),
        idempotency_key=idempotency_key or eid,
    )
    return Event(envelope, payload)

