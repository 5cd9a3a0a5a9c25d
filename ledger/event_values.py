"""The values events are made of: channels, stages, problems, results, counties, units, satellites.

Kept apart from the payload classes (``ledger.events``) so that the catalogue reads as a list of events;
these are frozen and canonical for the same reason the events are: the same event always encodes to the
same bytes. Ratios are exact fractions, stored in Avro as numerator and denominator.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from fractions import Fraction
from types import MappingProxyType
from typing import Any

__all__ = [
    "CLOCK_SKEW",
    "election_key",
    "Channel",
    "CorrectionStage",
    "TieMethod",
    "Problem",
    "Result",
    "County",
    "UnitDefinition",
    "SatelliteGroup",
    "problems_from_avro",
    "ratio_from_avro",
    "ratio_to_avro",
]

CLOCK_SKEW = timedelta(minutes=10)
"""How far after its ``recorded_at`` an event's ``occurred_at`` may lie: a sender's clock may run ahead of
the intake's (a phone's clock runs fast), but nothing happens after it was recorded. The intake refuses
more (IN_THE_FUTURE); the audit names more found in a log (OCCURRED_AFTER_RECORDED)."""


class Channel(enum.StrEnum):
    APP = "app"
    PHONE = "phone"
    PAPER = "paper"
    IMPORT = "import"
    SYSTEM = "system"


class CorrectionStage(enum.StrEnum):
    REVIEW = "review"
    RECANVASS = "recanvass"
    RECOUNT = "recount"


class TieMethod(enum.StrEnum):
    COIN = "coin"
    LOTS = "lots"


def election_key(election_id: str) -> str:
    """The partition key of an election's own events (its definition, certification): one partition
    holds them all, in order, apart from its units' (``Envelope.key``)."""
    return f"election:{election_id}"


def _frozen_counts(counts: Mapping[str, int]) -> Mapping[str, int]:
    return MappingProxyType({k: counts[k] for k in sorted(counts)})


def ratio_to_avro(value: Fraction) -> dict[str, int]:
    return {"numerator": value.numerator, "denominator": value.denominator}


def ratio_from_avro(record: Mapping[str, int]) -> Fraction:
    return Fraction(record["numerator"], record["denominator"])


@dataclass(frozen=True, slots=True)
class Problem:
    """One validation error or warning, phrased for the person who sent the input."""

    field: str
    code: str
    message: str

    def to_avro(self) -> dict[str, Any]:
        return {"field": self.field, "code": self.code, "message": self.message}

    @classmethod
    def from_avro(cls, record: Mapping[str, Any]) -> Problem:
        return cls(record["field"], record["code"], record["message"])


def problems_from_avro(records: Any) -> tuple[Problem, ...]:
    return tuple(Problem.from_avro(r) for r in records)


@dataclass(frozen=True, slots=True)
class Result:
    """A unit's numbers as reported; validation lives in producers, the math in projections."""

    first_alignment: Mapping[str, int]
    final_alignment: Mapping[str, int]
    attendance: int | None = None
    delegates_reported: Mapping[str, int] | None = None
    worksheet_digest: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "first_alignment", _frozen_counts(self.first_alignment))
        object.__setattr__(self, "final_alignment", _frozen_counts(self.final_alignment))
        if self.delegates_reported is not None:
            object.__setattr__(self, "delegates_reported", _frozen_counts(self.delegates_reported))

    def to_avro(self) -> dict[str, Any]:
        return {
            "first_alignment": dict(self.first_alignment),
            "final_alignment": dict(self.final_alignment),
            "attendance": self.attendance,
            "delegates_reported": None
            if self.delegates_reported is None
            else dict(self.delegates_reported),
            "worksheet_digest": self.worksheet_digest,
        }

    @classmethod
    def from_avro(cls, record: Mapping[str, Any]) -> Result:
        return cls(
            first_alignment=record["first_alignment"],
            final_alignment=record["final_alignment"],
            attendance=record["attendance"],
            delegates_reported=record["delegates_reported"],
            worksheet_digest=record["worksheet_digest"],
        )


@dataclass(frozen=True, slots=True)
class County:
    county_id: str
    name: str
    sde_ratio: Fraction


@dataclass(frozen=True, slots=True)
class UnitDefinition:
    """A reporting unit. ``delegates`` is None for satellites: their D follows attendance."""

    unit_id: str
    name: str
    county_id: str
    delegates: int | None
    satellite_group: str | None = None
    short_name: str | None = None
    sde_weight: Fraction | None = None

    @property
    def is_satellite(self) -> bool:
        return self.satellite_group is not None


@dataclass(frozen=True, slots=True)
class SatelliteGroup:
    group_id: str
    name: str
    sde_pool: Fraction
    attendance_base: int | None = None
